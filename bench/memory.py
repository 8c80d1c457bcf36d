"""Peak memory of a run: the peak resident set (ru_maxrss, from os.wait4) of a child `serq run`,
interpreter and start-up included, for
  - M/M/1 (examples/single-turn/mg1.sq): `--arrivals N` customers, N = 1e5, 1e6 and 1e7 (the
    last takes about two CPU minutes; MEMORY_QUICK=1 skips it);
  - examples/multi-turn/closed.sq with N = 1e5 and 1e6 sessions: a closed workload runs to a
    horizon (`--arrivals` counts open arrivals only), so `--horizon 1000 --set sessions=N`: every
    session lives the whole run, thinking or queued at the one server.
The target for each is below 1 GB (10^9 bytes).

    .venv/bin/python bench/memory.py       # MEMORY_QUICK=1 skips ten million customers
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import ROOT, child  # noqa: E402

SERQ = os.path.join(os.path.dirname(sys.executable), "serq")
MG1 = os.path.join(ROOT, "examples", "single-turn", "mg1.sq")
CLOSED = os.path.join(ROOT, "examples", "multi-turn", "closed.sq")
HORIZON = 1000
LIMIT_MB = 1000.0


def run(argv):
    secs, peak_mib, rc, out, err = child([SERQ, "run", "--quiet", *argv], cwd=ROOT)
    if rc != 0:
        sys.exit(f"bench/memory.py: `serq run {' '.join(argv)}` failed ({rc}): {err.strip()[-500:]}")
    return secs, peak_mib * 1024 * 1024 / 1e6  # MiB (ru_maxrss is in KiB) to MB


def main():
    rows = []

    def measure(what, n, argv):
        secs, mb = run(argv)
        rows.append((what, n, mb, secs))
        print(f"{what}, N = {n:,}: peak {mb:,.0f} MB, {secs:.1f} CPU s", flush=True)
        return secs, mb

    a = measure("M/M/1 mg1.sq", 10**5, [MG1, "--arrivals", str(10**5)])
    b = measure("M/M/1 mg1.sq", 10**6, [MG1, "--arrivals", str(10**6)])
    # ten million is run, not extrapolated: past 2^20 samples a statistic spills to disk
    # (docs/reference/report.md), so a line through the two sizes above overstates it
    quick = os.environ.get("MEMORY_QUICK")
    if not quick:
        measure("M/M/1 mg1.sq", 10**7, [MG1, "--arrivals", str(10**7)])
    else:
        print("M/M/1 mg1.sq, N = 10,000,000: not run (MEMORY_QUICK is set)")
    for n in (10**5, 10**6):
        measure("closed.sq", n, [CLOSED, "--horizon", str(HORIZON), "--set", f"sessions={n}"])
    print()
    print("command: .venv/bin/python bench/memory.py" + ("   (MEMORY_QUICK=1)" if quick else ""))
    print("| run | N | peak memory (ru_maxrss) | CPU s | target |")
    print("| --- | --- | --- | --- | --- |")
    for what, n, mb, secs in rows:
        argv = "--arrivals N" if what.startswith("M/M/1") else f"--horizon {HORIZON} --set sessions=N"
        ok = "met" if mb < LIMIT_MB else "NOT met"
        print(f"| {what} `{argv}` | {n:,} | {mb:,.0f} MB | {secs:.1f} | < 1 GB: {ok} |")
    if quick:
        print("| M/M/1 mg1.sq `--arrivals N` | 10,000,000 | not run (MEMORY_QUICK) | | < 1 GB: not measured |")

if __name__ == "__main__":
    main()
