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

from fractions import Fraction

import z3

from serq.ref import claims as C
from serq.ref import exec as X
from serq.ref import ir as R
from serq.ref.num import q
from serq.verify.sym import SymNum, Trace, assert_into, concrete, negation, numeral

# the timeout is CPU time (the process's, z3's solving included): the verdicts a timeout allows do not
# depend on what else the machine runs
clock = time.process_time

# z3 times its queries by the wall clock, which a busy machine runs faster than this process's CPU
# time: a query may take this many times the CPU time left before it counts as undecided
WALL_SLACK = 4


class Budget:
    """CPU time, each claim's own (docs/verify.md, *Each claim on its own*): a claim has used the
    kernel's exploration, which is shared (its paths are the same whatever claims are verified
    beside it), and its own readings, proofs and replays, and each claim has the whole timeout."""

    def __init__(self, timeout: float, names):
        self.timeout = timeout
        self.t0 = clock()
        self.own = dict.fromkeys(names, 0.0)
        self.cur = None           # the claim whose own time runs now
        self.since = 0.0

    def _running(self) -> float:
        return clock() - self.since if self.cur is not None else 0.0

    def kernel(self) -> float:
        """The CPU time the kernel's exploration has taken, every claim's own left out."""
        return clock() - self.t0 - sum(self.own.values()) - self._running()

    def left(self, name: str) -> float:
        own = self.own[name] + (self._running() if self.cur == name else 0.0)
        return self.timeout - self.kernel() - own

    def left_any(self, names) -> float:
        """What is left to the claims with most left: the kernel's exploration goes on for them."""
        return max((self.left(n) for n in names), default=0.0)

    def charge(self, name: str):
        return _Charge(self, name)


class _Charge:
    def __init__(self, b: Budget, name: str):
        self.b, self.name = b, name

    def __enter__(self):
        self.outer = (self.b.cur, self.b.since)
        if self.b.cur is not None:   # nested: the outer claim's time stops while this one's runs
            self.b.own[self.b.cur] += clock() - self.b.since
        self.b.cur, self.b.since = self.name, clock()

    def __exit__(self, *exc):
        self.b.own[self.name] += clock() - self.b.since
        cur, _ = self.outer
        self.b.cur, self.b.since = cur, clock()


def z3_ms(left) -> int:
    """z3's timeout for a query: the CPU time left (left() seconds), in wall milliseconds, with slack."""
    return max(1000, int(left() * 1000) * WALL_SLACK)


class cpu_deadline:
    """While a long z3 call runs (Spacer's fixedpoint query: one call, however long), a watchdog
    thread reads the CPU time left (left()) and interrupts z3 once it is spent: z3's own timeout is
    wall time, which a single-threaded solve spends at the CPU's pace, so the slack its queries get
    (WALL_SLACK) would let one call run several times the timeout. z3 raises then (`canceled`)."""

    def __init__(self, left, ctx=None):
        self.left, self.ctx = left, ctx or z3.main_ctx()
        self.fired = False

    def _watch(self):
        while not self.done.wait(0.05):
            if self.left() <= 0:
                self.fired = True
                self.ctx.interrupt()
                return

    def __enter__(self):
        import threading
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


# z3's resource units (deterministic, unlike its clock) a flip may take on the path's incremental
# solver, about a second; past it the query is asked afresh, where z3 preprocesses what incremental
# solving does not (a query of bari_tiling.sq's every-state search ran 100 s incrementally and is
# unsat at once afresh)
QUERY_RLIMIT = 2_000_000

FUEL = 5_000    # kernel steps one path may take; a path still running then is not explored further
CHUNK = 500     # steps between two looks at the clock
LONG_FLIPS = 200  # the branches flipped on a path past the fuel
SKIM_EVERY = 4    # explore_with's skim: every this many branches, whether any left can be flipped


class Draws:
    """A session's draws: a fresh unknown for each one the session makes, as many as it makes."""

    def __init__(self, inputs: "Inputs", sid: int):
        self.inputs, self.sid = inputs, sid

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        return self.inputs.value(f"d{self.sid}_{i}")


def stop_hint(err: str) -> str:
    """What a run error in the family means for the program, where it is the family's doing: every
    draw takes every natural whatever its distribution (docs/verify.md, *The bound*), so a
    `~bernoulli` flag drawn 2 is a guard of 2 (R006)."""
    if err.startswith("R006"):
        return (" (the family draws every natural, whatever the distribution: a flag drawn 2 guards a "
                "`while` or `branch`; `while (more > 0)` reads every natural)")
    return ""


def real(name: str) -> bool:
    """Whether an unknown ranges over the reals: an arrival time (`aK`) or the clock (`T`); the
    others (draws, tokens left, counts) are naturals."""
    return name == "T" or (name[0] == "a" and name[1:].isdigit()) or name.startswith(("reg.", "agg."))


def var(name: str):
    """An unknown's z3 constant, of its sort."""
    return z3.Real(name) if real(name) else z3.Int(name)


def numeral_of(name: str, v):
    """A value as a numeral of the unknown's sort."""
    return z3.ToReal(numeral(v)) if real(name) and type(v) is int else numeral(v)


def model_value(mdl, name: str):
    """The model's value of an unknown: an int, or a Fraction for a real one (an irrational
    algebraic number, which only a nonlinear program's constraints give, to 20 decimals)."""
    v = mdl.eval(var(name), model_completion=True)
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_algebraic_value(v):
        v = v.approx(20)
    return q(Fraction(v.numerator_as_long(), v.denominator_as_long()))


@dataclass
class Inputs:
    """A run's concrete inputs: the model's value of each unknown (0 for one it does not name)."""
    model: dict
    used: dict = field(default_factory=dict)   # name -> SymNum, the unknowns this run read

    def value(self, name: str, default=0) -> SymNum:
        """The unknown's value: the model's, else `default` (a value inside its range)."""
        if name not in self.used:
            self.used[name] = SymNum(self.model.get(name, default), var(name))
        return self.used[name]


@dataclass
class Family:
    """The workloads of n sessions: arrival law, trace rows, the values' bound M, the gaps' bound G."""
    prog: R.Program
    n: int
    values: int
    gap: int
    trace: Optional[list] = None
    depth: Optional[int] = None   # unrolled: each run stops as its depth-th iteration starts


def number(v):
    """A rational as a workload file writes it: an int, or the float nearest (a time the search
    names is a short decimal, serq/verify/robust.py, which the float and its repr keep exactly)."""
    return v if type(v) is int else float(v)


def workload(f: Family, inp: Inputs) -> R.Workload:
    sess = []
    for k in range(f.n):
        if f.prog.arrive == "poisson":
            t = inp.value(f"a{k}")   # the k-th arrival time, in serial order
        elif f.prog.arrive == "renewal":
            t = q((k + 1) * f.prog.gap)
        else:   # batch, and closed: the population at 0, each later one when a session ends
            t = 0
        rows = tuple(f.trace[k % len(f.trace)]) if f.trace else ()
        sess.append(R.SessionIn(t, Draws(inp, k), rows))
    return R.Workload(tuple(sess))


def domain(f: Family, name: str, bounded: bool = True):
    """An unknown's range: a draw any natural 0..M, an arrival any real time 0..G after the previous
    one (G: the gaps' bound)."""
    v = var(name)
    if real(name):
        k = int(name[1:])
        lo = z3.Real(f"a{k - 1}") if k else z3.RealVal(0)
        return z3.And(v >= lo, v <= lo + f.gap) if bounded else v >= lo
    return z3.And(v >= 0, v <= f.values) if bounded else v >= 0


@dataclass
class Path:
    facts: list               # what the kernel's run relied on: the path condition
    inputs: Inputs
    outcomes: dict            # claim name -> claims.Outcome (none for the path's error)
    claim_facts: dict         # claim name -> what reading it relied on besides (its own branches)
    error: Optional[str]      # a run error's code and message
    done: bool
    errors: dict = field(default_factory=dict)   # claim name -> the error reading that claim alone
    cut: bool = False         # stopped at the family's depth: a prefix, every branch of it flipped

    @property
    def whole(self) -> bool:
        """Every branch of its condition is flipped: it ended, or it is a prefix of the depth."""
        return self.done or self.cut


def run_path(f: Family, inp: Inputs, left, claims=None) -> Path:
    """The kernel's run on the inputs, then each claim's reading (those named, or all), each under
    a trace of its own: a claim's branches are its own, never the path's, so the paths are the same
    whatever claims are read on them (docs/verify.md, *Each claim on its own*)."""
    wl = workload(f, inp)
    cut = False
    with Trace() as tr:
        try:
            if f.depth is not None:
                run, cut = _prefix(f, X.initial(f.prog, wl), left)
            elif _all_given(f.prog):
                run = _scoped(f.prog, X.initial(f.prog, wl), left)
            else:
                run = X.Run(X.initial(f.prog, wl), False)
                for _ in range(FUEL // CHUNK):  # the kernel's run, in slices: the timeout is kept mid-path
                    run = X.run_from(f.prog, None, CHUNK, run.machine)
                    if run.done:
                        break
                    if left() <= 0:
                        raise Deadline()
            err, done = None, run.done
        except X.KernelError as e:
            err, done = str(e), True
    out, errs, cf = {}, {}, {}
    if err is None:
        for j, c in enumerate(f.prog.claims):
            if claims is not None and c.name not in claims:
                continue
            with Trace() as ct:
                try:  # a claim whose reading fails on the path (F016, say) fails alone
                    out[c.name] = C.outcome(f.prog, run, j)
                    if cut and c.form == "end" and out[c.name].status == "not_evaluated":
                        # read on the prefix: false there is false at the end when the claim is
                        # `stable`, else a guess; either is checked on the whole path before it is named
                        if X.eval_expr(f.prog, run.machine, X.Env(), c.e) == 0:
                            out[c.name] = C.Outcome("failed", at=run.machine.now)
                except X.KernelError as e:
                    errs[c.name] = str(e)
            cf[c.name] = ct.facts
    return Path(tr.facts, inp, out, cf, err, done, errs, cut)


def _all_given(p: R.Program) -> bool:
    return bool(p.claims) and all(c.given is not None for c in p.claims)


def _scoped(p: R.Program, m: X.Machine, left) -> X.Run:
    """The kernel's run of a program whose every claim has a `given`, cut where a session that
    arrived puts every claim out of scope (the reference's *Claims*: the claim is checked no further,
    so nothing after can decide it). Each given is read as the session arrives, on the path (its
    branches the path's: the cut is a fact of the program's claims, whichever are asked), so the
    search explores the sessions that keep a claim in scope and one path for the rest."""
    seen = 0
    out = set()
    for k in range(FUEL):
        if k % CHUNK == CHUNK - 1 and left() <= 0:
            raise Deadline()
        m, over = X.step(p, m, None)
        if over:
            return X.Run(m, True)
        while seen < len(m.given):
            sid, attrs = m.given[seen]
            seen += 1
            for j, c in enumerate(p.claims):
                if j not in out and X.eval_expr(p, m, X.Env(attrs, sid), c.given) == 0:
                    out.add(j)
            if len(out) == len(p.claims):
                return X.Run(m, True)
    return X.Run(m, False)


_GROWS = {"largest", "count"}   # an aggregate that only grows as values are observed (of none: 0)


def stable(e) -> bool:
    """Whether a claim at end that reads false on a path's prefix reads false at its end: `and` and
    `or` of bounds above on aggregates that only grow, `largest(o)` and `count(o)` (0 of none) and
    `total` of the client's samples (times, never negative), by a constant the none case meets (a
    bound of 0 or more). So a prefix that breaks it is a counterexample whenever its path ends."""
    if isinstance(e, R.Bin) and e.op in ("&&", "||"):
        return stable(e.l) and stable(e.r)
    if isinstance(e, R.Bin) and e.op in ("<=", "<", ">=", ">"):
        agg, bound = (e.l, e.r) if e.op in ("<=", "<") else (e.r, e.l)
        grows = isinstance(agg, R.Agg) and (agg.fn in _GROWS or agg.fn == "total" and agg.name in R.CLIENT_METRICS)
        return grows and isinstance(bound, R.Num) and (bound.v >= 0 if e.op in ("<=", ">=") else bound.v > 0)
    return False


def _prefix(f: Family, m: X.Machine, left) -> tuple:
    """The kernel's moves until the run ends or its f.depth-th iteration starts (its claims read on
    the machine then), within the fuel: (the run, whether it stopped at the depth)."""
    for k in range(FUEL):
        m, over = X.step(f.prog, m)
        if over:
            return X.Run(m, True), False
        if len(m.path) >= f.depth:
            return X.Run(m, False), True
        if k % CHUNK == CHUNK - 1 and left() <= 0:
            raise Deadline()
    return X.Run(m, False), False


class Deadline(Exception):
    pass


def explore(f: Family, left, visit, within=None) -> tuple:
    """Run every feasible path of the family (depth first), its claims read on each without
    branching it; visit(path) returns True to stop early; within(path, under) as explore_with's.
    Returns (paths run, the disjunction's terms of their conditions, the unknowns, whether it
    stopped early, the branches z3 could not decide)."""
    def run(inp):
        p = run_path(f, inp, left)
        # a path past the fuel already leaves the undecided claims unknown: its far branches are
        # not flipped (the search goes on for counterexamples and witnesses elsewhere)
        return p.facts, p, None if p.whole else LONG_FLIPS

    conds: list = []
    names: dict = {}

    def see(facts, p):
        conds.append(facts)
        names.update(dict.fromkeys(p.inputs.used))
        return visit(p)

    count, stopped, undecided = explore_with(run, lambda n: domain(f, n), left, see, within=within)
    return count, conds, names, stopped, undecided


def explore_claim(f: Family, path: Path, name: str, left, visit, under) -> tuple:
    """Every reading of one claim on one path of the kernel: the path's condition held, each branch
    the claim's reading took flipped once (a claim at an iteration read true, an `Ite` inside it, a
    session's `given`). visit(reading) is called on the path itself first, then on each other
    reading (a run on other inputs of the same path); True stops. `under`: the solver holding the
    path's condition (explore_with's). (readings, stopped, undecided)."""
    limit = None if path.whole else LONG_FLIPS  # past the fuel: no proof, the near branches flipped

    def run(inp):
        q_ = run_path(f, inp, left, (name,))
        return q_.claim_facts.get(name, []), q_, limit

    first = (path.claim_facts.get(name, []), path, limit)
    return explore_with(run, lambda n: domain(f, n), left, lambda _facts, r: visit(r),
                        start=(path.inputs, first), under=under)


def explore_with(run, domain, left, visit, base=(), start=None, within=None, under=None, skim=False) -> tuple:
    """Depth first over the paths of `run`, each branch flipped once. run(inputs) gives (facts,
    what visit reads, how many facts to flip or None for all); domain(name) an unknown's range;
    left() the CPU seconds left; visit(facts, result) returns True to stop. `start`: (inputs, run's
    result on them) to begin from, else all-zero inputs. within(result, under) is called on each
    path once its branches are flipped, `under` then holding the path's whole condition (a claim's
    readings are explored there: `explore_claim`); True stops. `under`: (solver, its assertions)
    to explore inside, the caller's path condition kept; else a solver of its own with `base`.
    `skim`: first ask once whether any branch of a run can be flipped at all.
    Returns (paths run, whether it stopped early, the branches z3 could not decide: the paths
    behind them were not run)."""
    names: dict = {}
    stack = [({}, 0)] if start is None else [(start, 0)]
    count = undecided = 0
    # one solver for the whole exploration (a claim's readings share their path's): each unknown's
    # range added once, each path's facts pushed and popped
    if under is None:
        s = z3.Solver()
        s.set("rlimit", QUERY_RLIMIT)
        held = list(base)
        s.add(held)
    else:
        s, outer = under
        held = list(outer)
        s.push()
    try:
        while stack:
            if left() <= 0:
                raise Deadline(count)
            model, depth = stack.pop()
            if isinstance(model, tuple):
                inp, (facts, res, limit) = model
            else:
                inp = Inputs(model)
                try:
                    facts, res, limit = run(inp)
                except Deadline:
                    raise Deadline(count) from None
            count += 1
            for n in inp.used:
                if n not in names:
                    names[n] = True
                    held.append(domain(n))
                    s.add(held[-1])
            if visit(facts, res):
                return count, True, undecided
            last = len(facts) if limit is None else min(len(facts), limit)
            if last <= depth and within is None:
                continue
            s.set("timeout", z3_ms(left))
            s.push()
            mark = len(held)
            seen = set()
            if (under is not None or skim) and depth < last and within is None:
                # a claim's readings hold on the whole path far more often than not (and a merged
                # state's runs take one path more often than not, `skim`): one query says so for
                # all of them, where flipping each would ask one each
                s.add(facts[:depth])
                s.push()
                s.add(z3.Not(z3.And(facts[depth:last])))
                r = s.check()
                s.pop()
                if r == z3.unsat:
                    s.pop()
                    del held[mark:]
                    continue
                s.pop()
                s.push()
            for j, b in enumerate(facts):
                if j % 64 == 0 and left() <= 0:
                    raise Deadline(count)
                key = b.hash()
                if key in seen:
                    continue
                if skim and within is None and depth < j < last and (j - depth) % SKIM_EVERY == 0:
                    # whether any branch left can be flipped: one query for the rest, often none
                    s.push()
                    s.add(z3.Not(z3.And(facts[j:last])))
                    r = s.check()
                    s.pop()
                    if r == z3.unsat:
                        break
                if depth <= j < last:
                    s.push()
                    assert_into(s, negation(b))
                    r, mdl = s.check(), None
                    if r == z3.sat:
                        mdl = s.model()
                    elif r == z3.unknown:
                        r, mdl = afresh(held + [z3.Not(b)], left)
                        if r == z3.unknown:
                            if left() <= 0:
                                raise Deadline(count)
                            undecided += 1
                    if mdl is not None:
                        nxt = {n: model_value(mdl, n) for n in names}
                        stack.append((nxt, j + 1))
                    s.pop()
                elif j >= last and within is None:
                    break
                seen.add(key)
                assert_into(s, b)
                held.append(b)
            stop = within(res, (s, held)) if within is not None else False
            s.pop()
            del held[mark:]
            if stop:
                return count, True, undecided
        return count, False, undecided
    finally:
        if under is not None:
            s.pop()


def afresh(conds: list, left) -> tuple:
    """(z3's answer, its model when sat) for the conjunction, on a solver of its own."""
    s = z3.Solver()
    s.set("timeout", z3_ms(left))
    s.add(conds)
    with cpu_deadline(left):
        r = s.check()
    return r, s.model() if r == z3.sat else None


def covers(f: Family, conds: list, names, timeout_ms: int, given=None) -> bool:
    """Whether the paths run cover every input in the naturals (not only within the bound), or
    every such input that satisfies `given`: then a property of all of them holds for every natural."""
    s = z3.Solver()
    s.set("timeout", max(1, timeout_ms) * WALL_SLACK)
    for n in names:
        s.add(domain(f, n, bounded=False))
    if given is not None:
        s.add(given)
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
            t = q((k + 1) * f.prog.gap)
        else:
            t = 0
        sessions.append({"arrival": number(t), "draws": draws})
    return {"sessions": sessions}
