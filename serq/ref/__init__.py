"""The reference kernel: the Lean fragment's semantics in plain Python (docs/lean.md), definition
for definition lean/Serq/Exec.lean. It reads the linked IR and never the interpreter.

    prog = fragment.convert(ir_program)      # or an F-code diagnostic
    wl = workload(prog, sessions)            # one concrete workload
    result = evaluate(prog, wl)              # requests, observations, claims
"""
from __future__ import annotations

import csv
from dataclasses import dataclass

from serq.ref import claims as C
from serq.ref import exec as X
from serq.ref import ir as R
from serq.ref.fragment import Outside, convert
from serq.ref.num import q

__all__ = ["convert", "Outside", "workload", "read_trace", "evaluate", "Result", "moves"]


def read_trace(path: str) -> list:
    """A trace's sessions (file order), each its rows: naturals `new`, `out`, `think`, `forced` and
    the content columns `stream`, `parent`, `common` (0 when absent: docs/reference/content.md)."""
    sessions: list = []
    last = None
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["session"] != last:
                sessions.append([])
                last = row["session"]
            sessions[-1].append(R.Row(*(int(float(row.get(k) or 0)) for k in
                                        ("new", "out", "think", "forced", "stream", "parent", "common"))))
    return sessions


def workload(p: R.Program, n: int, trace=None, arrivals=None, draws=None) -> R.Workload:
    """n sessions of the program's family: arrival times 0 under batch, the program's under renewal,
    the given ones otherwise; session i replays trace session i modulo the trace's (ordered)."""
    sess = []
    for i in range(n):
        if arrivals is not None:
            t = arrivals[i]
        elif p.arrive == "renewal":
            t = q((i + 1) * p.gap)
        else:
            t = 0
        rows = tuple(trace[i % len(trace)]) if trace else ()
        sess.append(R.SessionIn(t, tuple(draws[i]) if draws else (), rows))
    return R.Workload(tuple(sess))


@dataclass(frozen=True)
class Result:
    done: bool                   # the run ended (else the fuel ran out)
    live: int                    # sessions still live at the end (the run did not drain)
    end: int
    iterations: int
    requests: tuple              # (session, turn, first, last, preemptions, cached at first admission)
    observations: tuple          # (name, value, time, session, turn)
    claims: dict                 # name -> claims.Outcome
    client: tuple = ()           # (metric, value): the client's samples, as recorded (*What the client sees*)


def moves(p: R.Program, wl: R.Workload, horizon=None, fuel: int = 10_000_000) -> int:
    """The moves (`step`s) the run takes until it is over: the least fuel with which Exec.lean's
    `run` ends (a generated theorem states its run with this much, no more: docs/leangen.md)."""
    m = X.initial(p, wl)
    for k in range(1, fuel + 1):
        m, over = X.step(p, m, horizon)
        if over:
            return k
    raise ValueError(f"the run does not end within {fuel} moves")


def evaluate(p: R.Program, wl: R.Workload, fuel: int = 10_000_000, horizon=None) -> Result:
    run = X.run(p, wl, fuel, horizon)
    m = run.machine
    reqs = tuple((sid, turn, r.first, r.last, r.preemptions, r.cached) for sid, turn, r in m.requests)
    return Result(run.done, sum(s.alive for s in m.sess), m.now, m.eng.iterations, reqs, m.obs, C.outcomes(p, run),
                  m.client)
