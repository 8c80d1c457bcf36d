"""bench/engine.py on a fresh clone: it names no file outside the repository (vLLM's side comes
from SERQ_VLLM_ORACLE and SERQ_VLLM_PYTHON), and without them it says what to set and prints
serQ's own figures."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BENCH = os.path.join(ROOT, "bench", "engine.py")


def test_the_bench_names_no_path_outside_the_repository():
    with open(BENCH, encoding="utf-8") as fh:
        text = fh.read()
    assert "../shared" not in text and "shared/oracle" not in text and '"shared"' not in text
    assert not re.search(r"['\"]\.\.['\"]", text)  # no path built from the clone's parent


def test_without_the_oracle_it_says_what_to_set_and_prints_serqs_figures(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERQ_VLLM_")}
    env.update(ENGINE_ROUNDS="1", ENGINE_STEPS="20")
    r = subprocess.run([sys.executable, BENCH], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "vLLM: NOT measured: SERQ_VLLM_ORACLE is not set. To measure it, set SERQ_VLLM_ORACLE" in out
    assert "SERQ_VLLM_PYTHON" in out and "tools/oracle/README.md" in out
    assert "serQ alone, iterations per CPU second" in out
    assert re.search(r"engine, one event per iteration, 64 decoding: [\d,]+ it/s", out)
    assert re.search(r"engine, fast-forward on, 256 decoding: [\d,]+ it/s", out)
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("| engine, fast-forward on, 256 decoding (vLLM RECORDED, not measured) |")
    assert "shared" not in out


def test_a_named_oracle_that_is_not_there_is_said_plainly(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERQ_VLLM_")}
    env.update(ENGINE_ROUNDS="1", ENGINE_STEPS="5", SERQ_VLLM_ORACLE=str(tmp_path / "oracle"))
    r = subprocess.run([sys.executable, BENCH], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"vLLM: NOT measured: {tmp_path / 'oracle' / 'drive.py'} not found; " in r.stdout
