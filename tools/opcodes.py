"""The interpreter's marginal opcodes a request, by function, for a program (issue 49: where a
request's time goes, counted the same at every run; docs/speed.md, "fifth session").

    .venv/bin/python tools/opcodes.py PROGRAM [N] [TOP]     # N requests (default 3,000), TOP rows (30)

Two runs of the program in this process, `serq run PROGRAM --arrivals N` and with N // 3 (api.run,
the report built), after one of a request that pays the imports. Each Python frame of the run's
thread is traced with `f_trace_opcodes` (sys.settrace), and each opcode it executes is counted
against its function (name, file, first line). Each function's count in the smaller run is taken
from its count in the larger, over the difference in requests: the start-up and the report's
fixed part cancel, as in bench/instructions.py. The table prints the TOP largest, with their
share. Opcodes are not time: a dict's probe or a new float costs more than a local's load, and a
step that removes opcodes must still show in CPU time (bench/requests.py). The trace makes a run
~30 times slower.
"""
from __future__ import annotations

import collections
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def count(path: str, n: int) -> collections.Counter:
    """Opcodes by (function, file, first line) over a run of n requests of the program at path."""
    from serq import api
    from serq.ir.model import Settings
    prog = api.load(path)
    counts: collections.Counter = collections.Counter()

    def call(frame, event, arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        code = frame.f_code
        key = (code.co_name, os.path.basename(code.co_filename), code.co_firstlineno)

        def each(frame, event, arg):
            if event == "opcode":
                counts[key] += 1
            return each
        return each

    threading.settrace(call)  # the run is on a thread of its own (api._deep)
    try:
        api.run(prog, Settings(arrivals=n))
    finally:
        threading.settrace(None)
    return counts


def table(counts: collections.Counter, n: int, top: int) -> str:
    """The top functions of counts, each over n requests and as a share of the whole."""
    total = sum(counts.values())
    rows = [f"opcodes a request: {total / n:,.0f} (the marginal of {n:,} requests)"]
    for (name, file, line), c in counts.most_common(top):
        rows.append(f"{c / n:10,.1f}  {100 * c / total:5.1f}%  {name} ({file}:{line})")
    return "\n".join(rows)


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    path = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 3000
    top = int(argv[2]) if len(argv) > 2 else 30
    small = n // 3
    count(path, 1)  # imports and first calls' work, in neither run measured
    diff = count(path, n)
    diff.subtract(count(path, small))
    print(table(+diff, n - small, top))  # (+: only the counts above 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
