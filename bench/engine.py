"""serQ's step engine against vLLM's own scheduler, per iteration, with 64 and 256 requests
decoding: CPU time, in interleaved rounds (serQ, vLLM, serQ, vLLM, ...), the median ratio of
iterations per CPU second with its min and max.

    .venv/bin/python bench/engine.py       # ENGINE_ROUNDS=5 ENGINE_STEPS=1000

serQ alone needs nothing but this repository: its iterations per CPU second are printed on any
clone. vLLM's side needs two things this repository does not hold, named by environment variables:

  SERQ_VLLM_ORACLE=FOLDER   the vLLM oracle's folder, the one tools/oracle/ was recorded with
                            (tools/oracle/README.md: its drive.py, setup.sh, requirements.txt)
  SERQ_VLLM_PYTHON=PYTHON   a Python with vLLM 0.33.0 installed as that folder's setup.sh makes it
                            (default FOLDER/.venv/bin/python; `VENV=DIR bash FOLDER/setup.sh` makes
                            one elsewhere where FOLDER is read-only)

With both, the oracle's driver (FOLDER/drive.py, its `bench_one`) runs vLLM 0.33.0's real v1
Scheduler, `schedule()` + `update_from_output()` for 1000 steps after 50 warm-up steps
(ENGINE_STEPS; the fake model runner's output is built outside the timed region), in a child
process. The child times those two calls with time.process_time (drive.py's own clock,
perf_counter, is swapped for it: CPU, not wall time). Without them the bench says what to set and
divides by the figures recorded in tools/oracle/README.md (*Speed of the scheduler*: wall time,
median of 3 runs, a quiet 2-core machine) instead, marked RECORDED.

serQ: the same workload as a program (PROGRAM below: the sizes of drive.bench_one), run for
50 + ENGINE_STEPS iterations. Its time is the whole run (the prefill and warm-up iterations, the
report) and its iterations all of them: that counts against serQ, not for it. Two figures:
  - one event per iteration (sim.fast_forward = False): every iteration is scheduled, costed and
    applied, as vLLM's loop does; this is the like-for-like ratio, printed first;
  - as it runs (fast-forward on, the default): steady decoding with no block boundary, no
    arrival and no end in between is run as one event (serq/interp/engine.py, _steady).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import cpu, spread, verdict  # noqa: E402  (it puts the repository on sys.path)

ROUNDS = int(os.environ.get("ENGINE_ROUNDS", 5))
STEPS = int(os.environ.get("ENGINE_STEPS", 1000))
SIZES = (64, 256)
TARGET_ONE, TARGET_FF = 10.0, 40.0

# the vLLM oracle's folder (drive.py), not part of this repository: only where it is named
ORACLE = os.environ.get("SERQ_VLLM_ORACLE") or None
# a Python with vLLM 0.33.0: named, or the oracle's own venv (its setup.sh makes FOLDER/.venv)
VENV_PY = os.environ.get("SERQ_VLLM_PYTHON") or (os.path.join(ORACLE, ".venv", "bin", "python") if ORACLE else None)
# tools/oracle/README.md, "Speed of the scheduler": prefix caching off, log_stats on
RECORDED = {64: 1940.0, 256: 488.0}
SETUP = ("set SERQ_VLLM_ORACLE to the vLLM oracle's folder (drive.py, setup.sh: the one tools/oracle/ was "
         "recorded with, tools/oracle/README.md) and SERQ_VLLM_PYTHON to a Python with vLLM 0.33.0 (its "
         "setup.sh makes FOLDER/.venv)")


def missing_oracle() -> list:
    """What the measured vLLM side lacks, in words ([] when it can run)."""
    if ORACLE is None:
        return ["SERQ_VLLM_ORACLE is not set"]
    out = [f"{p} not found" for p in (os.path.join(ORACLE, "drive.py"),) if not os.path.isfile(p)]
    if not os.path.exists(VENV_PY):
        out.append(f"{VENV_PY} not found" + ("" if os.environ.get("SERQ_VLLM_PYTHON") else
                                              " (SERQ_VLLM_PYTHON unset: the oracle's own venv)"))
    return out

# drive.bench_one's workload: 32-token prompts, 50 warm-up + 1000 timed steps (+10 spare), each
# request's max_tokens = those steps + 5 so none ends, block 16, KV blocks for all of them + 16,
# max_num_seqs = n, max_num_batched_tokens = max(32 n, 2048), no chunking threshold, no prefix cache.
PROMPT, BS, WARM, VLLM_STEPS = 32, 16, 50, STEPS  # ENGINE_STEPS scales both sides alike


def shape(n: int) -> dict:
    steps_total = WARM + VLLM_STEPS + 10
    blocks_per_req = -(-(PROMPT + steps_total + 2) // BS)
    return {"prompt": PROMPT, "output": steps_total + 5, "block": BS, "reqs_cap": n,
            "tokens_cap": max(n * PROMPT, 2048), "kv_blocks": n * blocks_per_req + 16}


PROGRAM = """fn main() {
  device gpu { kv cap %(kv_blocks)d * %(block)d; }
  engine llm on gpu {
    reqs cap %(reqs_cap)d;
    tokens cap %(tokens_cap)d;
    request (prompt, output) {
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0)
        taking reqs (1), kv (min(prompt, budget_left(llm))) reserve (prompt);
    }
    execute (1);
  }
  pool kv on gpu { block %(block)d; evict lru; preempt lifo; }
  pool reqs on llm { queue fifo; }
  workload { arrive batch(%(reqs_cap)d); }
  server { llm (%(prompt)d, %(output)d); }
}"""

# run in the oracle's venv: drive.bench_one for each size, its clock made CPU time
CHILD = """import json, sys, time, types
sys.path.insert(0, %(oracle)r)
import drive
drive.time = types.SimpleNamespace(perf_counter=time.process_time)  # CPU time, not wall time
out = {}
for n in %(sizes)r:
    r = drive.bench_one(n, True, False, warm_steps=%(warm)d, timed_steps=%(steps)d)
    out[n] = r
print(json.dumps({"vllm": drive.vllm.__version__, "results": out}))
"""


def serq_programs():
    from serq import api
    return {n: api.load_text(PROGRAM % shape(n), "bench/engine.py") for n in SIZES}


def serq_rate(prog, fast_forward: bool) -> float:
    """Iterations per CPU second of a run of WARM + STEPS iterations."""
    from serq.interp.sim import Sim
    from serq.ir.model import Settings

    def go():
        sim = Sim(prog, Settings(horizon=WARM + STEPS))  # execute (1): an iteration lasts 1
        sim.fast_forward = fast_forward
        sim.run()
        return sim.engines[0].iterations
    dt, iters = cpu(go)
    return iters / dt


def vllm_rates():
    """{n: steps per CPU second} from one child in the oracle's venv, or None."""
    code = CHILD % {"oracle": ORACLE, "sizes": SIZES, "warm": WARM, "steps": VLLM_STEPS}
    r = subprocess.run([VENV_PY, "-c", code], capture_output=True, text=True, cwd=ORACLE, timeout=900)
    if r.returncode != 0:
        print("  vLLM child failed:", (r.stderr.strip().splitlines() or ["?"])[-1])
        return None
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return {int(n): float(v["steps_per_s"]) for n, v in res["results"].items()}, res["vllm"]


def main():
    missing = missing_oracle()
    measured = not missing
    for n in SIZES:
        s = shape(n)
        print(f"workload, {n} decoding: prompt {s['prompt']} tokens, output {s['output']} tokens (none ends "
              f"in the run), block {s['block']}, tokens cap {s['tokens_cap']}, reqs cap {s['reqs_cap']}, "
              f"KV {s['kv_blocks']} blocks; vLLM times {VLLM_STEPS} steps after {WARM}, serQ runs "
              f"{WARM + STEPS} iterations")
    if measured:
        print(f"vLLM: measured in this run, in {VENV_PY} (a child per round; CPU time of schedule() + "
              "update_from_output())")
    else:
        print(f"vLLM: NOT measured: {'; '.join(missing)}. To measure it, {SETUP}. "
              "Meanwhile serQ's own figures are measured, and the ratios divide by the RECORDED figures of "
              "tools/oracle/README.md (*Speed of the scheduler*): "
              + ", ".join(f"{RECORDED[n]:,.0f} steps/s at {n}" for n in SIZES) + " (wall time)")
    progs = serq_programs()
    for n in SIZES:  # untimed warm-up: imports and first-call costs
        serq_rate(progs[n], False)
    one = {n: [] for n in SIZES}
    ff = {n: [] for n in SIZES}
    vs = {n: [] for n in SIZES}  # vLLM's steps/s per round
    own = {n: ([], []) for n in SIZES}  # serQ's own iterations per CPU second: one event each, fast-forwarded
    version = None
    for k in range(ROUNDS):
        row = {}
        for n in SIZES:
            row[n] = (serq_rate(progs[n], False), serq_rate(progs[n], True))
        v = None
        if measured:
            got = vllm_rates()
            if got is None:
                measured = False
                print("  vLLM: the child failed: falling back to the RECORDED figures from here on")
            else:
                v, version = got
        if v is None:
            v = RECORDED
        parts = []
        for n in SIZES:
            o, f = row[n]
            own[n][0].append(o)
            own[n][1].append(f)
            one[n].append(o / v[n])
            ff[n].append(f / v[n])
            vs[n].append(v[n])
            parts.append(f"{n}: serQ {o:,.0f} it/s one event each, {f:,.0f} it/s fast-forwarded; "
                         f"vLLM {v[n]:,.0f} steps/s -> {o / v[n]:.1f}x, {f / v[n]:.1f}x")
        print(f"round {k + 1}: " + " | ".join(parts), flush=True)
    if version:
        # the same serQ figures against tools/oracle/README.md's recorded vLLM ones (a quiet machine, wall time):
        # a measured vLLM under today's load is slower, so say what the ratio would be without it
        rec = []
        for n in SIZES:
            o, f = statistics.median(own[n][0]), statistics.median(own[n][1])
            rec.append(f"{n}: vLLM measured median {statistics.median(vs[n]):,.0f} steps/s (recorded "
                       f"{RECORDED[n]:,.0f}); against the recorded figure {o / RECORDED[n]:.1f}x one event "
                       f"each, {f / RECORDED[n]:.1f}x fast-forwarded")
        print("for reference: " + " | ".join(rec))
    src = f"vLLM {version}, measured in this run" if version else "vLLM 0.33.0, RECORDED figures (not measured)"
    print()
    print("serQ alone, iterations per CPU second, median of rounds (min, max):")
    for i, label in enumerate(("one event per iteration", "fast-forward on")):
        for n in SIZES:
            its = own[n][i]
            print(f"  engine, {label}, {n} decoding: {statistics.median(its):,.0f} it/s "
                  f"(min {min(its):,.0f}, max {max(its):,.0f})")
    print()
    print(f"command: .venv/bin/python bench/engine.py   (ENGINE_ROUNDS={ROUNDS} ENGINE_STEPS={STEPS}); {src}")
    print("| what | serQ / vLLM, median of rounds (min, max) | target |")
    print("| --- | --- | --- |")
    for label, xs, target in (("one event per iteration", one, TARGET_ONE), ("fast-forward on", ff, TARGET_FF)):
        for n in SIZES:
            med = statistics.median(xs[n])
            peer = "" if version else " (vLLM RECORDED, not measured)"
            print(f"| engine, {label}, {n} decoding{peer} | {spread(xs[n])} | >= {target:g}x: {verdict(med, target)} |")


if __name__ == "__main__":
    main()
