"""`serq target`: an engine's settings as a vLLM configuration, and what vLLM cannot express refused."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from serq import api
from serq.diagnostics import SerqError
from serq.target.vllm import target

ROOT = os.path.join(os.path.dirname(__file__), "..")
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")

ENGINE = """fn main() {
  device gpu { kv cap 100 * 16; }
  engine vllm on gpu {
    reqs cap 8;
    tokens cap 256;
    schedule { %s }
    execute (1);
  }
  pool kv on gpu { block 16; evict lru; preempt lifo; }
  pool reqs on vllm { queue fifo; }
  workload { arrive poisson(1); turn { Size n = 10; } }
  server { hold reqs (cost(reqs, 1)), kv (cost(kv, n)) { run vllm prefill (cost(vllm, n)) growing kv; } }
}"""


def tgt(schedule):
    return target(api.load_text(ENGINE % schedule, "t.sq"))


def test_the_example_engine_as_a_vllm_configuration():
    r = subprocess.run([sys.executable, "-m", "serq.cli", "target", VLLM], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg == {"max_num_seqs": 256, "max_num_batched_tokens": 2048, "long_prefill_token_threshold": 0,
                   "long_prefill_token_threshold_adaptive": False, "block_size": 16, "num_gpu_blocks": 4097,
                   "enable_prefix_caching": True, "enable_chunked_prefill": True, "policy": "fcfs"}


def test_no_cap_and_the_adaptive_threshold():
    assert tgt("advance running; admit waiting while (running.preempted == 0);")["long_prefill_token_threshold"] == 0
    # a threshold of inf is vLLM's default, none: 0 (issue 48: serq target refused chunk_cap=inf, V001)
    inf = ("let t = running.count + waiting.count > 1 ? inf : inf; advance running each at most (t); "
           "admit waiting while (running.preempted == 0) each at most (t);")
    assert tgt(inf)["long_prefill_token_threshold"] == 0
    cfg = tgt("let t = running.count + waiting.count > 1 ? max(64, floor(256 / (running.count + waiting.count))) "
              ": inf; advance running each at most (t); admit waiting while (running.preempted == 0) "
              "each at most (t);")
    assert (cfg["long_prefill_token_threshold"], cfg["long_prefill_token_threshold_adaptive"]) == (64, True)
    assert cfg["num_gpu_blocks"] == 101 and cfg["enable_prefix_caching"] is False


@pytest.mark.parametrize("schedule", [
    "advance running each at most (64); admit waiting while (running.preempted == 0) each at most (64);",
    "exclusive prefill; admit waiting while (running.preempted == 0);",
    "advance running by (remaining); admit waiting while (running.preempted == 0);",
    "advance running; admit waiting;",
])
def test_what_vllm_cannot_express_is_refused(schedule):
    with pytest.raises(SerqError) as e:
        tgt(schedule)
    assert e.value.code == "V001" and e.value.span.file == "t.sq"


def test_a_program_without_an_engine():
    with pytest.raises(SerqError) as e:
        target(api.load(os.path.join(ROOT, "examples", "single-turn", "mg1.sq")))
    assert e.value.code == "V002"


@pytest.mark.parametrize("seqs, budget, chunk", [("8.5", "256", "64"), ("8", "256.5", "64"), ("8", "inf", "64"),
                                                 ("8", "256", "64.5")])
def test_vllm_integers_are_whole_not_truncated(seqs, budget, chunk):
    def text(seqs, budget, chunk):
        schedule = (f"let t = running.count + waiting.count > 1 ? {chunk} : inf; advance running each at most (t); "
                    "admit waiting while (running.preempted == 0) each at most (t);")
        return (ENGINE % schedule).replace("reqs cap 8;", f"reqs cap {seqs};").replace("tokens cap 256;",
                                                                                       f"tokens cap {budget};")
    with pytest.raises(SerqError) as e:
        target(api.load_text(text(seqs, budget, chunk), "t.sq"))
    assert e.value.code == "V001"
    cfg = target(api.load_text(text("8", "256", "64"), "t.sq"))
    assert (cfg["max_num_seqs"], cfg["max_num_batched_tokens"], cfg["long_prefill_token_threshold"]) == (8, 256, 64)


def test_the_shipped_engine_s_settings_are_inputs_with_vllm_s_defaults():
    """examples/multi-turn/vllm.sq takes vLLM's settings as inputs (issue 48): the long-prefill threshold off
    by default, as vLLM's (0), prefix caching on, and each written by serq target as given, inf included;
    `caching=0` really is off (the hold caches nothing, and vLLM's enable_prefix_caching is false)."""
    from serq.cli import main
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "multi-turn", "vllm.sq")
    cfg = target(api.load(path))
    assert (cfg["long_prefill_token_threshold"], cfg["enable_prefix_caching"]) == (0, True)
    cfg = target(api.load(path, {"max_seqs": 64, "B": 4096, "bs": 32, "chunk_cap": 256, "caching": 0}))
    assert (cfg["max_num_seqs"], cfg["max_num_batched_tokens"], cfg["block_size"], cfg["long_prefill_token_threshold"],
            cfg["enable_prefix_caching"]) == (64, 4096, 32, 256, False)
    assert target(api.load(path, {"chunk_cap": math.inf}))["long_prefill_token_threshold"] == 0
