"""The command line as a user runs it: exit codes, diagnostics with a caret, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from serq.ir import model as I

from helpers import MINIMAL

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")


def serq(*args, cwd=None):
    r = subprocess.run([sys.executable, "-m", "serq.cli", *args], capture_output=True, text=True, cwd=cwd or ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def test_check_ok():
    r = serq("check", VLLM)
    assert r.returncode == 0 and "ok" in r.stderr


def test_broken_program_gets_a_diagnostic(tmp_path):
    f = tmp_path / "broken.sq"
    f.write_text("fn main() {\n  stage svc : fifo;\n  workload { arrive poisson(1); }\n  server {\n"
                 "    run svc (cost(svc, promt));\n  }\n}\n")
    r = serq("check", str(f))
    assert r.returncode == 1
    first, src, caret = r.stderr.splitlines()[:3]
    assert first == f"{f}:5:24: error[L070]: unknown name `promt`"
    assert "run svc (cost(svc, promt));" in src
    assert caret.index("^") == src.index("promt") and caret.count("^") == len("promt")


def test_syntax_error_exit_1(tmp_path):
    f = tmp_path / "s.sq"
    f.write_text("fn main() { stage s : fifo }\n")
    r = serq("check", str(f))
    assert r.returncode == 1 and "error[P001]" in r.stderr and "^" in r.stderr


def test_unreadable_and_non_utf8_files(tmp_path):
    r = serq("check", str(tmp_path / "missing.sq"))
    assert r.returncode == 1 and "error[P006]" in r.stderr
    f = tmp_path / "latin1.sq"
    f.write_bytes(b"fn main() { let caf\xe9 = 1; }\n")
    r = serq("check", str(f))
    assert r.returncode == 1 and "error[P005]" in r.stderr


@pytest.mark.parametrize("args", [
    [], ["frobnicate"], ["check"], ["ir", VLLM, "--seed", "-1"], ["ir", VLLM, "--seed", "x"],
    ["ir", VLLM, "--set", "rate"], ["ir", VLLM, "--set", "nosuch=1"], ["ir", VLLM, "--horizon", "0"],
    ["ir", VLLM, "--arrivals", "2.5"], ["ir"], ["ir", VLLM, "--set", "rate=nan"], ["ir", VLLM, "--instance", "/nonexistent"],
])
def test_usage_errors_exit_2(args):
    r = serq(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "error" in r.stderr


def test_ir_prints_json_that_loads_back():
    r = serq("ir", VLLM, "--seed", "7", "--horizon", "100", "--set", "rate=0.5")
    assert r.returncode == 0, r.stderr
    prog = I.Program.model_validate_json(r.stdout)
    assert prog.settings.seed == 7 and prog.settings.horizon == 100 and prog.settings.inputs["rate"] == 0.5
    assert prog.constants["Lambda"] == 0.5
    again = I.Program.model_validate_json(prog.model_dump_json())
    assert again == prog


@pytest.mark.parametrize("size", ["1e999", "0 - 1e400", "m", "-m"])
def test_an_infinite_number_in_an_expression_is_the_inf_node_and_loads_back(size):
    # found by tools/fuzz.py: a literal past the largest float became {"k": "num", "v": null}, which
    # does not load back; infinity is its own node (ir/model.py)
    from serq import api
    text = ("fn main() { let m = 1e400; stage s : fifo; workload { arrive poisson(1); turn { Size x = "
            + size + "; } } server { run s (cost(s, max(x, 1))); } }")
    prog = api.load_text(text, "inf.sq")
    out = prog.model_dump_json(exclude_none=True)

    def refuse(c):
        raise AssertionError(f"{c} in the IR")
    ir = json.loads(out, parse_constant=refuse)
    assert '"v":null' not in out.replace(" ", "")
    assert I.Program.model_validate_json(out) == prog
    assert '"k": "inf"' in json.dumps(ir["workload"]["turn"][0]["e"])


def test_inputs_after_double_dash_and_instance_file(tmp_path):
    r = serq("ir", VLLM, "--", "rate=0.25", "blocks=100")
    prog = I.Program.model_validate_json(r.stdout)
    assert prog.constants["Lambda"] == 0.25 and prog.constants["blocks"] == 100
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps({"inputs": {"rate": 0.125}, "seed": 3, "warmup": 5}))
    r = serq("ir", VLLM, "--instance", str(inst))
    prog = I.Program.model_validate_json(r.stdout)
    assert prog.constants["Lambda"] == 0.125 and prog.settings.seed == 3 and prog.settings.warmup == 5
    # a --set wins over the instance file
    r = serq("ir", VLLM, "--instance", str(inst), "--set", "rate=1")
    assert I.Program.model_validate_json(r.stdout).constants["Lambda"] == 1


def test_ir_json_is_accepted_by_check(tmp_path):
    f = tmp_path / "m.sq"
    f.write_text(MINIMAL)
    r = serq("ir", str(f))
    j = tmp_path / "m.json"
    j.write_text(r.stdout)
    assert serq("check", str(j)).returncode == 0
    j.write_text('{"version": 1, "workload": {"arrive": {"k": "poisson"}}}')
    r = serq("check", str(j))
    assert r.returncode == 1 and "error[I001]" in r.stderr


def test_schema_is_generated_and_current():
    r = serq("ir", "--schema")
    with open(os.path.join(ROOT, "docs", "reference", "ir.schema.json"), encoding="utf-8") as fh:
        assert r.stdout == fh.read(), "docs/reference/ir.schema.json is stale: run `make schema`"
