"""Peak memory (issue 12): each run in a child process of its own, its peak resident set read with
getrusage(RUSAGE_CHILDREN).ru_maxrss; the growth per customer (or per live session) between two
sizes, and the figure at the issue's size, measured or extrapolated (said which).

    python bench/memory.py          # M/M/1 at 1.2e6 and 2.4e6 customers, closed.sq at 1e4 and 1e5 live
    python bench/memory.py --full   # and M/M/1 at 1e7, closed.sq at 1e6 (ten minutes or more)

M/M/1's sizes are both past the 2^20 samples at which a statistic goes to disk (report.md,
*Memory*): below it, the report's sort of the samples in memory makes the peak grow ~40 B a
customer, which an extrapolation from there would carry to sizes that never hold them. At these
sizes the stage's time average still holds its change points in memory (24 B each, to 2^20 of
them), so M/M/1's extrapolation is an upper bound; closed.sq's grows with its live sessions.
"""
from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
SERQ = [sys.executable, "-c", "import sys; from serq.cli import main; sys.exit(main(sys.argv[1:]))"]


def peak_mb(args) -> float:
    """One run's peak RSS in MiB: a fresh grandchild per run, so RUSAGE_CHILDREN is its own."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *SERQ, *args], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return int(out.stdout.split()[-1]) / 1024


def series(name, make, sizes, target):
    got = {n: peak_mb(make(n)) for n in sizes}
    for n, mb in got.items():
        print(f"{name:<10} {n:>10,}  peak {mb:8.1f} MiB")
    (a, pa), (b, pb) = list(got.items())[-2:]
    slope = (pb - pa) * 1024 * 1024 / (b - a)
    print(f"{name:<10} slope {slope:8.1f} bytes each")
    if target not in got:
        print(f"{name:<10} {target:>10,}  peak ~{pb + slope * (target - b) / 1024 / 1024:7.0f} MiB (extrapolated, "
              "not measured: --full measures it)")


def main():
    full = "--full" in sys.argv
    mm1 = lambda n: ["run", "examples/single-turn/mg1.sq", "--arrivals", str(n), "--quiet"]  # noqa: E731
    closed = lambda n: ["run", "examples/multi-turn/closed.sq", "--horizon", "100", "--quiet",  # noqa: E731
                        "--", f"sessions={n}"]
    series("M/M/1", mm1, [1_200_000, 2_400_000] + ([10_000_000] if full else []), 10_000_000)
    series("closed.sq", closed, [10_000, 100_000] + ([1_000_000] if full else []), 1_000_000)


if __name__ == "__main__":
    main()
