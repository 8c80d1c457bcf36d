"""Every path of a claim's workload family within a bound, by concolic execution of the reference
kernel (docs/verify.md): run the kernel on concrete inputs whose values carry z3 terms
(serq/verify/sym.py), take the path condition it recorded, and ask z3 for inputs that take each
branch the path did not (depth first, each branch flipped once: every feasible path is run exactly
once). A path's claims are read by serq/ref/claims.py on the run, within the same trace, so a
claim's value is itself a branch: the failing side of a claim is explored like any other."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import z3

from serq.ref import claims as C
from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify.sym import SymInt, Trace, concrete

# the timeout is CPU time (the process's, z3's solving included): the verdicts a timeout allows do not
# depend on what else the machine runs
clock = time.process_time

# z3 times its queries by the wall clock, which a busy machine runs faster than this process's CPU
# time: a query may take this many times the CPU time left before it counts as undecided
WALL_SLACK = 4


def z3_ms(deadline: float) -> int:
    """z3's timeout for a query: the CPU time left, in wall milliseconds, with slack."""
    return max(1000, int((deadline - clock()) * 1000) * WALL_SLACK)


# z3's resource units (deterministic, unlike its clock) a flip may take on the path's incremental
# solver, about a second; past it the query is asked afresh, where z3 preprocesses what incremental
# solving does not (a query of bari_tiling.sq's every-state search ran 100 s incrementally and is
# unsat at once afresh)
QUERY_RLIMIT = 2_000_000

FUEL = 5_000    # kernel steps one path may take; a path still running then is not explored further
CHUNK = 500     # steps between two looks at the clock
LONG_FLIPS = 200  # the branches flipped on a path past the fuel


class Draws:
    """A session's draws: a fresh unknown for each one the session makes, as many as it makes."""

    def __init__(self, inputs: "Inputs", sid: int):
        self.inputs, self.sid = inputs, sid

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        return self.inputs.value(f"d{self.sid}_{i}")


@dataclass
class Inputs:
    """A run's concrete inputs: the model's value of each unknown (0 for one it does not name)."""
    model: dict
    used: dict = field(default_factory=dict)   # name -> SymInt, the unknowns this run read

    def value(self, name: str, default=0) -> SymInt:
        """The unknown's value: the model's, else `default` (a value inside its range)."""
        if name not in self.used:
            self.used[name] = SymInt(self.model.get(name, default), z3.Int(name))
        return self.used[name]


@dataclass
class Family:
    """The workloads of n sessions: arrival law, trace rows, the values' bound M, the gaps' bound G."""
    prog: R.Program
    n: int
    values: int
    gap: int
    trace: Optional[list] = None


def workload(f: Family, inp: Inputs) -> R.Workload:
    sess = []
    for k in range(f.n):
        if f.prog.arrive == "poisson":
            t = inp.value(f"a{k}")   # the k-th arrival time, in serial order
        elif f.prog.arrive == "renewal":
            t = (k + 1) * f.prog.gap
        else:
            t = 0
        rows = tuple(f.trace[k % len(f.trace)]) if f.trace else ()
        sess.append(R.SessionIn(t, Draws(inp, k), rows))
    return R.Workload(tuple(sess))


def domain(f: Family, name: str, bounded: bool = True):
    """An unknown's range: a draw 0..M, an arrival 0..G after the previous one (G: the gaps' bound)."""
    v = z3.Int(name)
    if name.startswith("a"):
        k = int(name[1:])
        lo = z3.Int(f"a{k - 1}") if k else z3.IntVal(0)
        return z3.And(v >= lo, v <= lo + f.gap) if bounded else v >= lo
    return z3.And(v >= 0, v <= f.values) if bounded else v >= 0


@dataclass
class Path:
    facts: list
    inputs: Inputs
    outcomes: dict            # claim name -> claims.Outcome (None for the path's error)
    error: Optional[str]      # a run error's code and message
    done: bool
    errors: dict = field(default_factory=dict)   # claim name -> the error reading that claim alone


def run_path(f: Family, inp: Inputs, deadline: float) -> Path:
    wl = workload(f, inp)
    with Trace() as tr:
        try:
            run = X.Run(X.initial(f.prog, wl), False)
            for _ in range(FUEL // CHUNK):  # the kernel's run, in slices: the timeout is kept mid-path
                run = X.run_from(f.prog, None, CHUNK, run.machine)
                if run.done:
                    break
                if clock() > deadline:
                    raise Deadline()
            out, errs = {}, {}
            for j, c in enumerate(f.prog.claims):  # a claim read at the end fails alone (F016, say)
                try:
                    out[c.name] = C.outcome(f.prog, run, j)
                except X.KernelError as e:
                    errs[c.name] = str(e)
            err, done = None, run.done
        except X.KernelError as e:
            out, errs, err, done = {}, {}, str(e), True
    return Path(tr.facts, inp, out, err, done, errs)


class Deadline(Exception):
    pass


def explore(f: Family, deadline: float, visit) -> tuple:
    """Run every feasible path of the family (depth first); visit(path) returns True to stop early.
    Returns (paths run, the disjunction's terms of their conditions, the unknowns, whether it
    stopped early, the branches z3 could not decide)."""
    def run(inp):
        p = run_path(f, inp, deadline)
        # a path past the fuel already leaves the undecided claims unknown: its far branches are
        # not flipped (the search goes on for counterexamples and witnesses elsewhere)
        return p.facts, p, None if p.done else LONG_FLIPS

    conds: list = []
    names: dict = {}

    def see(facts, p):
        conds.append(facts)
        names.update(dict.fromkeys(p.inputs.used))
        return visit(p)

    count, stopped, undecided = explore_with(run, lambda n: domain(f, n), deadline, see)
    return count, conds, names, stopped, undecided


def explore_with(run, domain, deadline: float, visit) -> tuple:
    """Depth first over the paths of `run`, each branch flipped once. run(inputs) gives (facts,
    what visit reads, how many facts to flip or None for all); domain(name) an unknown's range;
    visit(facts, result) returns True to stop. Returns (paths run, whether it stopped early, the
    branches z3 could not decide: the paths behind them were not run)."""
    names: dict = {}
    stack = [({}, 0)]
    count = undecided = 0
    while stack:
        if clock() > deadline:
            raise Deadline(count)
        model, depth = stack.pop()
        inp = Inputs(model)
        try:
            facts, res, limit = run(inp)
        except Deadline:
            raise Deadline(count) from None
        count += 1
        for n in inp.used:
            names[n] = True
        if visit(facts, res):
            return count, True, undecided
        s = z3.Solver()
        s.set("timeout", z3_ms(deadline))
        s.set("rlimit", QUERY_RLIMIT)
        held = [domain(n) for n in names]
        s.add(held)
        seen = set()
        last = len(facts) if limit is None else min(len(facts), limit)
        for j, b in enumerate(facts[:last]):
            if j % 64 == 0 and clock() > deadline:
                raise Deadline(count)
            key = b.hash()
            if j >= depth and key not in seen:
                s.push()
                s.add(z3.Not(b))
                r, mdl = s.check(), None
                if r == z3.sat:
                    mdl = s.model()
                elif r == z3.unknown:
                    r, mdl = afresh(held + [z3.Not(b)], deadline)
                    if r == z3.unknown:
                        if clock() > deadline:
                            raise Deadline(count)
                        undecided += 1
                if mdl is not None:
                    nxt = {n: mdl.eval(z3.Int(n), model_completion=True).as_long() for n in names}
                    stack.append((nxt, j + 1))
                s.pop()
            seen.add(key)
            s.add(b)
            held.append(b)
    return count, False, undecided


def afresh(conds: list, deadline: float) -> tuple:
    """(z3's answer, its model when sat) for the conjunction, on a solver of its own."""
    s = z3.Solver()
    s.set("timeout", z3_ms(deadline))
    s.add(conds)
    r = s.check()
    return r, s.model() if r == z3.sat else None


def covers(f: Family, conds: list, names: dict, timeout_ms: int) -> bool:
    """Whether the paths run cover every input in the naturals (not only within the bound): then a
    property of all of them holds for every natural."""
    s = z3.Solver()
    s.set("timeout", max(1, timeout_ms) * WALL_SLACK)
    for n in names:
        s.add(domain(f, n, bounded=False))
    s.add(z3.Not(z3.Or([z3.And(c) if c else z3.BoolVal(True) for c in conds])))
    return s.check() == z3.unsat


def concrete_workload(f: Family, p: Path) -> dict:
    """The path's workload as the file `serq run --workload` reads: each session's arrival time and
    the values its draws took, in order."""
    used = p.inputs.used
    sessions = []
    for k in range(f.n):
        draws = []
        i = 0
        while f"d{k}_{i}" in used:
            draws.append(concrete(used[f"d{k}_{i}"]))
            i += 1
        if f.prog.arrive == "poisson":
            t = concrete(used[f"a{k}"]) if f"a{k}" in used else 0
        elif f.prog.arrive == "renewal":
            t = (k + 1) * f.prog.gap
        else:
            t = 0
        sessions.append({"arrival": t, "draws": draws})
    return {"sessions": sessions}
