"""serQ's step engine: iterations per second with 64 and 256 requests decoding, beside vLLM's own
schedule() + update_from_output() steps per second on this machine. vLLM's figures are measured
through the shared driver's venv when it exists (../shared/oracle/vllm/.venv), else the recorded
ones from ../shared/oracle/vllm/README.md (1,940 and 488 steps/s, vLLM 0.33.0, 2 cores)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

RECORDED = {64: 1940.0, 256: 488.0}
STEPS = int(os.environ.get("ENGINE_STEPS", 2000))

PROGRAM = """fn main() {
  device gpu { kv cap 10000000; }
  engine llm on gpu {
    reqs cap %d;
    tokens cap 8192;
    schedule { advance running; admit waiting while (running.preempted == 0); }
    execute (1);
  }
  pool kv on gpu { block 16; evict lru; preempt lifo; }
  pool reqs on llm { queue fifo; }
  workload { arrive batch(%d); }
  server {
    hold reqs (cost(reqs, 1)), kv (cost(kv, 16)) {
      run llm prefill (cost(llm, 16)) growing kv;
      run llm decode (cost(llm, 1000000)) growing kv;
    }
  }
}"""


def serq_steps_per_s(n: int, fast_forward: bool = True) -> float:
    from serq import api
    from serq.interp.sim import Sim
    from serq.ir.model import Settings
    prog = api.load_text(PROGRAM % (n, n), "bench.sq")
    warm = Sim(prog, Settings(horizon=50))
    warm.run()
    sim = Sim(prog, Settings(horizon=50 + STEPS))
    sim.fast_forward = fast_forward
    t = time.perf_counter()
    sim.run()
    dt = time.perf_counter() - t
    return sim.engines[0].iterations / dt


def vllm_steps_per_s(n: int):
    """vLLM's scheduler, steady decode of n requests, in the shared driver's venv (its bench_one:
    schedule() + update_from_output(), 1000 steps after 50 warm-up), when that venv exists."""
    oracle = os.path.join(HERE, "..", "..", "shared", "oracle", "vllm")
    venv = os.path.join(oracle, ".venv", "bin", "python")
    if os.path.exists(venv) and os.path.exists(os.path.join(oracle, "drive.py")):
        code = ("import json, sys; sys.path.insert(0, %r); import drive; "
                "print(json.dumps(drive.bench_one(%d, True, False)))" % (os.path.abspath(oracle), n))
        try:
            r = subprocess.run([venv, "-c", code], capture_output=True, text=True, timeout=900, cwd=oracle)
            if r.returncode == 0:
                return float(json.loads(r.stdout.strip().splitlines()[-1])["steps_per_s"]), "measured"
        except (subprocess.SubprocessError, ValueError, KeyError, IndexError, OSError):
            pass
    return RECORDED[n], "recorded"


if __name__ == "__main__":
    for n in (64, 256):
        s = serq_steps_per_s(n)
        one = serq_steps_per_s(n, fast_forward=False)
        v, how = vllm_steps_per_s(n)
        print(f"{n:>3} decoding: serQ {s:,.0f} iterations/s ({one:,.0f} one event each), vLLM {v:,.0f} steps/s "
              f"({how}), ratio {s / v:.1f}x ({one / v:.1f}x)")
