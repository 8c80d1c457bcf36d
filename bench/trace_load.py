"""Loading a trace (issue 50, item 5: it was quadratic, 40k sessions in 130 s): serQ's loader
(serq/interp/trace.py, every field checked, sessions grouped, arrivals ordered) against Python's own
csv.DictReader reading the same file into a list of rows, the least any loader of it pays; CPU
time, interleaved rounds, medians. A linear loader keeps the ratio as the file grows.

    .venv/bin/python bench/trace_load.py      # TRACE_ROUNDS=3 TRACE_ROWS=100000,1000000
"""
from __future__ import annotations

import csv
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import cpu, spread  # noqa: E402

from serq.interp import trace as T  # noqa: E402

ROUNDS = int(os.environ.get("TRACE_ROUNDS", 3))
ROWS = [int(x) for x in os.environ.get("TRACE_ROWS", "100000,1000000").split(",") if x.strip()]


def write(path, n):
    with open(path, "w") as fh:
        fh.write("session,turn,arrival,new,out,think\n")
        fh.writelines(f"s{i},0,{i * 0.01:.2f},{100 + i % 900},{1 + i % 300},0\n" for i in range(n))


def serq_load(path):
    T._LAST[:] = [None, None]  # no memo: the file read each time
    return len(T.load_trace(path, True))


def dict_reader(path):
    with open(path, newline="") as fh:
        return len(list(csv.DictReader(fh)))


def main():
    folder = tempfile.mkdtemp(prefix="serq-trace-bench-")
    print(f"loading a trace: serQ's loader against csv.DictReader, {ROUNDS} interleaved rounds, CPU seconds, medians")
    try:
        for n in ROWS:
            path = os.path.join(folder, f"t{n}.csv")
            write(path, n)
            ours, peer = [], []
            for _ in range(ROUNDS):
                t, k = cpu(serq_load, path)
                assert k == n
                ours.append(t)
                t, k = cpu(dict_reader, path)
                assert k == n
                peer.append(t)
            ratios = [a / b for a, b in zip(ours, peer)]
            print(f"  {n:>9,} rows: serQ {statistics.median(ours):6.2f} s ({n / statistics.median(ours):,.0f} rows/s), "
                  f"DictReader {statistics.median(peer):6.2f} s; serQ / DictReader {spread(ratios)}", flush=True)
            os.unlink(path)
    finally:
        os.rmdir(folder)


if __name__ == "__main__":
    main()
