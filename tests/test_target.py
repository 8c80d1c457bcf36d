"""`serq target`: an engine's settings as a vLLM configuration, and what vLLM cannot express refused."""
from __future__ import annotations

import json
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
    assert cfg == {"max_num_seqs": 256, "max_num_batched_tokens": 2048, "long_prefill_token_threshold": 512,
                   "long_prefill_token_threshold_adaptive": False, "block_size": 16, "num_gpu_blocks": 4097,
                   "enable_prefix_caching": True, "enable_chunked_prefill": True, "policy": "fcfs"}


def test_no_cap_and_the_adaptive_threshold():
    assert tgt("advance running; admit waiting while (running.preempted == 0);")["long_prefill_token_threshold"] == 0
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
                                                 ("8", "256", "64.5"), ("8", "256", "inf")])
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
