"""What a `decide +kernel` statement costs Lean's kernel, before it is written (docs/lean.md, *Lean
here*), so that the generators (tools/gen_oracle_lean.py, gen_serve_lean.py, gen_claims_proved.py)
state what `make check` can check on two cores in CI, and cut it into modules that fit Lean's
memory in WebAssembly.

The measure is the calls of the Python twin's definitions (serq/ref/exec.py, num.py) a run makes:
the kernel evaluates Exec.lean definition for definition the same, and its time and memory follow
these calls (measured on 2026-12-05, Lean 4.28.0-pre in WebAssembly: 0.35-0.41 ms of CPU a call
on 27 theorems of 21 to 670 moves, where the moves alone were off by 6 times: a move of a run with
18 sessions on a shared cache costs 0.4k calls, one of a lone request 0.1k). The count is exact and
deterministic: it does not depend on the machine or its load.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# CPU seconds of Lean's kernel in WebAssembly a call (the measure above), for the estimates printed
SECONDS_PER_CALL = 0.0004
# the most calls one theorem may cost: Lean's kernel keeps what it reduces for a whole declaration,
# and 4 GiB of WebAssembly memory held a run of 150k calls, not one of 275k (vllm shared_tight_03)
THEOREM_CALLS = 120_000
# the most calls one module of theorems is given (one process of `make check`, about 3 minutes): the
# memory of one declaration is reused by the next, so a module is cut for the two cores' balance
MODULE_CALLS = 450_000

_FILES = (os.path.join("serq", "ref", "exec.py"), os.path.join("serq", "ref", "num.py"))


def calls(p, wl, horizon=None, fuel: int = 10_000_000) -> int:
    """The calls of the Python twin's definitions the run of `wl` makes until it is over (or the
    fuel is spent): `step` by `step`, as Exec.lean's `run`."""
    from serq.ref import exec as X
    n = 0

    def count(frame, event, arg):
        nonlocal n
        if event == "call" and frame.f_code.co_filename.endswith(_FILES):
            n += 1

    m = X.initial(p, wl)
    old = sys.getprofile()
    sys.setprofile(count)
    try:
        for _ in range(fuel):
            m, over = X.step(p, m, horizon)
            if over:
                break
    finally:
        sys.setprofile(old)
    return n


def modules(costs: list[int], cap: int = MODULE_CALLS) -> list[list[int]]:
    """The items' indices in consecutive groups of at most `cap` calls in all (an item of more
    alone), for the modules a set of theorems is cut into."""
    out: list = []
    total = cap + 1
    for i, k in enumerate(costs):
        if total + k > cap:
            out.append([])
            total = 0
        out[-1].append(i)
        total += k
    return out


def minutes(n: int) -> str:
    """An estimate of the kernel's CPU time for `n` calls, for a header."""
    return f"{n * SECONDS_PER_CALL / 60:.1f}"
