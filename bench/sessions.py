"""A whole command's CPU time, as a researcher's sweep pays it: `serq run
examples/multi-turn/vllm.sq --arrivals 8000` (8,000 agent sessions on vLLM's engine, target <= 15
CPU s) and `serq check examples/multi-turn/vllm.sq` (start-up: parse and link, target <= 0.5 CPU s).
Each is a child process (user + system CPU from os.wait4, start-up included), in interleaved
rounds (run, check, run, check, ...); the median with the min and max.

    .venv/bin/python bench/sessions.py     # SESSIONS_ROUNDS=3 SESSIONS_ARRIVALS=8000
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import ROOT, child  # noqa: E402

ROUNDS = int(os.environ.get("SESSIONS_ROUNDS", 3))
ARRIVALS = int(os.environ.get("SESSIONS_ARRIVALS", 8000))
SERQ = os.path.join(os.path.dirname(sys.executable), "serq")
VLLM = os.path.join("examples", "multi-turn", "vllm.sq")
TARGET_RUN, TARGET_CHECK = 15.0, 0.5


def cpu_of(argv):
    secs, _, rc, out, err = child([SERQ, *argv], cwd=ROOT)
    if rc != 0:
        sys.exit(f"bench/sessions.py: `serq {' '.join(argv)}` failed ({rc}): {err.strip()[-500:]}")
    return secs, out


def main():
    run_argv = ["run", VLLM, "--arrivals", str(ARRIVALS), "--quiet"]
    check_argv = ["check", VLLM]
    runs, checks = [], []
    for k in range(ROUNDS):
        r, out = cpu_of(run_argv)
        c, _ = cpu_of(check_argv)
        runs.append(r)
        checks.append(c)
        done = next((ln for ln in out.splitlines() if ln.startswith("sessions:")), "")
        print(f"round {k + 1}: serq run {r:.2f} CPU s ({done.strip()})   serq check {c:.2f} CPU s", flush=True)
    print()
    print(f"command: .venv/bin/python bench/sessions.py   (SESSIONS_ROUNDS={ROUNDS} SESSIONS_ARRIVALS={ARRIVALS})")
    print("| command | CPU seconds, median of rounds (min, max) | target |")
    print("| --- | --- | --- |")
    for label, xs, target in ((f"`serq run {VLLM} --arrivals {ARRIVALS}`", runs, TARGET_RUN),
                              (f"`serq check {VLLM}`", checks, TARGET_CHECK)):
        med = statistics.median(xs)
        ok = "met" if med <= target else "NOT met"
        print(f"| {label} | {med:.2f} (min {min(xs):.2f}, max {max(xs):.2f}) | <= {target:g} s: {ok} |")


if __name__ == "__main__":
    main()
