"""Bounded model checking of the kernel by merged states (docs/verify.md, *Unrolled into one formula*).

The kernel's machine is a value (frozen records and tuples), and on the concolic kernel its numbers
carry z3 terms over the workload's unknowns. So the set of machines every workload of the bound
reaches as its d-th iteration starts is a finite set of **symbolic states**: a condition over the
unknowns and a machine whose numbers are terms. Two states whose machines agree on everything but
their numbers (the same sessions at the same statements, the same requests in the same order, the
same events: their *shape*) are merged into one: its condition the disjunction, each number that
differs `If(c1, t1, If(c2, t2, ...))`. From each state, one more iteration is every path of the
kernel's moves up to the next iteration's start (each branch flipped, as the concolic search does,
from a witness of the state's condition); the successors are merged again. So the states at depth d
stand for every workload of the bound together, and their number grows with the kernel's shapes,
not with the workloads: one session with values 16 is a few states, as three with values 1 are.

A claim over iterations is read on each state at each depth, each reading of it (its own branches)
under the state's condition: a reading that fails it (or witnesses it) is a model of the formula
`cond_d && !claim`, a workload, replayed on its whole path before it is named. A claim at end is read
on each state whose run is over. When no state is left (every path of the bound ended), every claim
was read on every iteration and every end of every path: a claim none broke holds on every path of
the bound, decided by the unrolled formula."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import z3
from z3 import z3core as _C
from z3.z3types import Ast as _Ast

from serq.ref import claims as C
from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import search as S
from serq.verify.sym import SymNum, Trace, concrete, numeral


@dataclass
class State:
    """Every workload satisfying `cond` reaches `m` (its numbers read under that workload) after the
    same moves. `inp` is one such workload (its values agree with every number of `m`); `names` the
    unknowns the state's terms read; `steps` the kernel's moves so far (the fuel)."""
    cond: object
    m: X.Machine
    inp: S.Inputs
    names: tuple
    steps: int
    over: bool = False
    _plain: Optional[set] = None

    @property
    def plain(self) -> set:
        if self._plain is None:
            self._plain = _plain(self.m)
        return self._plain


# ------------------------------------------------------------------ z3 terms, made by its C API


def _nary(mk, bs: list, empty: bool):
    """And / Or of z3 booleans without z3py's coercions (a tenth of the unrolling's time)."""
    if not bs:
        return z3.BoolVal(empty)
    if len(bs) == 1:
        return bs[0]
    ctx = bs[0].ctx
    arr = (_Ast * len(bs))(*(b.as_ast() for b in bs))
    return z3.BoolRef(mk(ctx.ref(), len(bs), arr), ctx)


def conj(bs: list):
    return _nary(_C.Z3_mk_and, bs, True)


def disj(bs: list):
    return _nary(_C.Z3_mk_or, bs, False)


def _domains(f: S.Family, names: tuple) -> list:
    """The ranges of the unknowns (made once per family and name)."""
    memo = f.__dict__.setdefault("_bmc_domains", {})
    out = []
    for n in names:
        d = memo.get(n)
        if d is None:
            d = memo[n] = S.domain(f, n)
        out.append(d)
    return out


# ------------------------------------------------------------------ the machine's shape, merged

_ATOMS = (int, str, bool, Fraction, type(None), float)
_FIELDS: dict = {}


def _fields(cls) -> Optional[tuple]:
    """A kernel record's field names (its numbers may be terms; `TurnEnd()` has none), or None for
    anything else (a program's node, compared by identity)."""
    got = _FIELDS.get(cls)
    if got is None:
        ok = dataclasses.is_dataclass(cls) and cls.__module__ in (X.__name__, R.__name__) and \
            cls not in _PROGRAM
        got = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if ok else False
    return None if got is False else got


# the program's own nodes a machine holds (statements, holds, contents): the same objects on every
# path, compared by identity
_PROGRAM = {c for c in vars(R).values() if isinstance(c, type)} - {R.Workload, R.SessionIn}


# where a number is data, not control: merged into a term when states differ there (a time, a size,
# an attribute's value), where ids, counters and sequence numbers stay the states' shape
_DATA = {"left", "units", "pos", "consumed", "reserve", "used", "t", "start", "first", "pf", "last",
         "cached", "retry", "served_total", "v", "rate", "now"}
_PAIRS = {"attrs", "vars", "bvars", "regs", "client"}   # (name, value) pairs: the value is data


def _num(x) -> bool:
    return isinstance(x, (int, Fraction)) and not isinstance(x, bool)


def shape(x, memo: dict, data: bool = False):
    """What the machine is with its numbers' values left out (a term's, or a plain number's where it
    is data): equal shapes merge."""
    if data and _num(x):
        return "#"
    k = id(x)
    got = memo.get(k)
    if got is not None:
        return got
    if isinstance(x, SymNum):
        out = "#"
    elif isinstance(x, _ATOMS):
        out = (type(x), x)
    elif type(x) is tuple:
        out = tuple(shape(y, memo) for y in x)
    elif isinstance(x, S.Draws):
        out = ("draws", x.sid)
    else:
        fs = _fields(type(x))
        out = (type(x), tuple(_field_shape(x, f, memo) for f in fs)) if fs is not None else ("id", k)
    memo[k] = out
    return out


def _field_shape(x, f: str, memo: dict):
    v = getattr(x, f)
    if f in _DATA:
        return shape(v, memo, True)
    if f in _PAIRS:
        return tuple((a, shape(b, memo, True)) for a, b in v)
    if f == "events":     # (t, seq, kind, arg)
        return tuple((shape(e[0], memo, True),) + e[1:] for e in v)
    if f == "obs":        # (name, value, t, sid, turn)
        return tuple((o[0], shape(o[1], memo, True), shape(o[2], memo, True)) + o[3:] for o in v)
    return shape(v, memo)


def merge(states: list) -> State:
    """One state for several of one shape: the disjunction of their conditions, each number the
    `If` of the conditions over the states' terms (the first state's witness stays its witness,
    and its values are the merged terms' under it)."""
    if len(states) == 1:
        return states[0]
    conds = [s.cond for s in states]
    memo: dict = {}

    def go(xs: list):
        x0 = xs[0]
        if isinstance(x0, SymNum) or _num(x0):
            if all(not isinstance(x, SymNum) and x == x0 for x in xs[1:]):
                return x0
            if all(isinstance(x, SymNum) and x.t.eq(x0.t) for x in xs):
                return x0
            real = any(x.r if isinstance(x, SymNum) else type(x) is Fraction for x in xs)
            ts = [_term(x, real) for x in xs]
            t = ts[-1]
            for c, u in zip(reversed(conds[:-1]), reversed(ts[:-1])):
                t = z3.If(c, u, t)
            return SymNum(x0.c if isinstance(x0, SymNum) else x0, t, real)
        if isinstance(x0, _ATOMS) or isinstance(x0, S.Draws):
            return x0
        key = tuple(id(x) for x in xs)
        got = memo.get(key)
        if got is not None:
            return got
        if all(x is x0 for x in xs[1:]):
            out = x0
        elif type(x0) is tuple:
            out = tuple(go([x[i] for x in xs]) for i in range(len(x0)))
        else:
            fs = _fields(type(x0))
            out = type(x0)(**{f: go([getattr(x, f) for x in xs]) for f in fs}) if fs else x0
        memo[key] = out
        return out

    names = tuple(dict.fromkeys(n for s in states for n in s.names))
    return State(disj(conds), go([s.m for s in states]), states[0].inp, names,
                 max(s.steps for s in states), states[0].over)


def _term(x, real: bool):
    """A number's term in the sort of the merge."""
    if isinstance(x, SymNum):
        return z3.ToReal(x.t) if real and not x.r else x.t
    return numeral(x, real)


def rebind(s: "State", inp: S.Inputs) -> X.Machine:
    """The state's machine under other values of the unknowns (a workload satisfying its
    condition): each number's value its term's under them, its draws read from `inp`. The parts
    with no term and no draws are the state's own objects (found once per state)."""
    sol = z3.Solver()
    for n in s.names:
        sol.add(S.var(n) == S.numeral_of(n, concrete(inp.value(n))))
    sol.check()
    mdl = sol.model()
    plain = s.plain
    values: dict = {}
    memo: dict = {}

    def value(t):
        k = t.get_id()
        v = values.get(k)
        if v is None:
            e = mdl.eval(t, model_completion=True)
            v = values[k] = e.as_long() if z3.is_int_value(e) else \
                Fraction(e.numerator_as_long(), e.denominator_as_long())
        return v

    def go(x):
        k = id(x)
        got = memo.get(k)
        if got is not None:
            return got
        if k in plain:
            return x
        if isinstance(x, SymNum):
            out = SymNum(value(x.t), x.t, x.r)
        elif isinstance(x, _ATOMS):
            return x
        elif type(x) is tuple:
            out = tuple(go(y) for y in x)
        elif isinstance(x, S.Draws):
            out = S.Draws(inp, x.sid)
        else:
            fs = _fields(type(x))
            out = type(x)(**{f: go(getattr(x, f)) for f in fs}) if fs else x
        memo[k] = out
        return out
    return go(s.m)


def _plain(m: X.Machine) -> set:
    """The ids of the machine's parts that hold no term and no draws: a rebinding keeps them."""
    plain: set = set()
    seen: dict = {}

    def go(x) -> bool:
        k = id(x)
        got = seen.get(k)
        if got is not None:
            return got
        if isinstance(x, (SymNum, S.Draws)):
            ok = False
        elif isinstance(x, _ATOMS):
            ok = True
        elif type(x) is tuple:
            ok = all([go(y) for y in x])
        else:
            fs = _fields(type(x))
            ok = all([go(getattr(x, f)) for f in fs]) if fs else True
        seen[k] = ok
        if ok:
            plain.add(k)
        return ok
    go(m)
    return plain


# ------------------------------------------------------------------ one iteration of every workload


@dataclass
class Moved:
    """A run from a state to the next iteration's start (or the end of its path)."""
    m: Optional[X.Machine]
    inp: S.Inputs
    over: bool
    steps: int
    error: Optional[str] = None
    past_fuel: bool = False


def _aggregated(p: R.Program) -> frozenset:
    """The names whose observations (or the client's samples) some expression of the program reads
    as an aggregate (`total(o)`, `largest(ttft)`: the claims at end)."""
    got = p.__dict__.get("_bmc_aggregated")
    if got is None:
        names: set = set()
        seen: set = set()

        def walk(x):
            if id(x) in seen:
                return
            seen.add(id(x))
            if isinstance(x, R.Agg):
                names.add(x.name)
            elif type(x) in (tuple, list):
                for y in x:
                    walk(y)
            elif dataclasses.is_dataclass(x) and not isinstance(x, type):
                for fd in dataclasses.fields(x):
                    walk(getattr(x, fd.name))
        walk(p)
        got = frozenset(names)
        object.__setattr__(p, "_bmc_aggregated", got)   # the program is frozen: read once
    return got


def project(p: R.Program, m: X.Machine) -> X.Machine:
    """The machine without the history nothing reads: the requests' records (the report's, read by
    no move and no claim) and the observations and client samples of names no aggregate reads.
    What a claim reads and every move are the same on it; paths that differ only there merge."""
    keep = _aggregated(p)
    obs = tuple(o for o in m.obs if o[0] in keep)
    client = tuple(c for c in m.client if c[0] in keep)
    if obs == m.obs and client == m.client and not m.requests:
        return m
    return dataclasses.replace(m, obs=obs, client=client, requests=())


def machine_for(s: State, inp: S.Inputs) -> X.Machine:
    """The state's machine under the workload `inp` (one satisfying its condition), every unknown
    the state reads made the run's, its value kept in the run's model."""
    m = s.m if inp is s.inp else rebind(s, inp)
    for n in s.names:
        inp.value(n)
    return m


def _explore(f: S.Family, s: State, run, visit, left) -> tuple:
    """explore_with from the state's own workload, under its condition and the unknowns' ranges."""
    return S.explore_with(run, lambda n: S.domain(f, n), left, visit, base=[s.cond] + _domains(f, s.names),
                          start=(s.inp, run(s.inp)), skim=True)


def advance(f: S.Family, s: State, inp: S.Inputs, left) -> tuple:
    """The kernel's moves from the state, on the workload `inp`, until the next iteration starts
    (its claims read on the machine then) or the run is over: (the facts relied on, Moved)."""
    m = dataclasses.replace(machine_for(s, inp), path=())
    steps = s.steps
    with Trace() as tr:
        try:
            while True:
                if steps >= S.FUEL:
                    return tr.facts, Moved(m, inp, False, steps, past_fuel=True)
                m, over = X.step(f.prog, m)
                steps += 1
                if over or m.path:
                    break
                if steps % S.CHUNK == 0 and left() <= 0:
                    raise S.Deadline()
        except X.KernelError as e:
            return tr.facts, Moved(None, inp, True, steps, error=str(e))
    if m.path:
        t, at = m.path[0]
        m = dataclasses.replace(m, path=((t, project(f.prog, at)),))
    return tr.facts, Moved(project(f.prog, m), inp, over, steps)


def successors(f: S.Family, s: State, left, trouble: list) -> tuple:
    """Every path of one more iteration from the state, each a state: (them, branches z3 could not
    decide). A path the kernel stops on (or past the fuel) is no state: it is `trouble`."""
    out: list = []

    def run(inp):
        facts, mv = advance(f, s, inp, left)
        return facts, mv, None

    def visit(facts, mv: Moved) -> bool:
        if mv.error is not None or mv.past_fuel:
            trouble.append(mv)
            return False
        names = tuple(mv.inp.used)
        out.append(State(conj([s.cond] + facts) if facts else s.cond, mv.m, mv.inp, names, mv.steps, mv.over))
        return False

    _, _, undecided = _explore(f, s, run, visit, left)
    return out, undecided


def frontier(states: list) -> list:
    """The states merged by shape, in the order their shapes were first met (deterministic)."""
    groups: dict = {}
    for s in states:
        groups.setdefault((s.over, shape(s.m, {})), []).append(s)
    return [merge(g) for g in groups.values()]


def read(f: S.Family, s: State, j: int, left, decide, unended: bool = False) -> tuple:
    """Every reading of claim j on the state (each of its own branches, under the state's
    condition): at an iteration's start, a claim over iterations, or a claim at end that is
    `stable` (search.stable: broken there, broken at the end); at a path's end, a claim at end.
    decide(inputs, outcome) is called on each reading that fails or witnesses it (and, `unended`,
    on one whose path stopped with sessions live) and returns True to stop. (readings, branches z3
    could not decide, the first reading's error as (inputs, error) or None)."""
    c = f.prog.claims[j]
    errors: list = []
    readings: list = []

    def run(inp):
        m = machine_for(s, inp)
        o = err = None
        with Trace() as tr:
            try:
                if s.over:
                    o = C.outcome(f.prog, X.Run(m, True), j)
                elif c.form == "end":   # `stable`: broken on the way, broken at the end (search.stable)
                    if C.out_of_scope(f.prog, m, c) is None and X.eval_expr(f.prog, m, X.Env(), c.e) == 0:
                        o = C.Outcome("failed", at=m.now)
                else:
                    t, at = m.path[0]
                    if C.out_of_scope(f.prog, at, c) is None:
                        want = c.form == "some"
                        if X.claim_value(f.prog, at, j) == want:
                            o = C.Outcome("witnessed" if want else "failed", at=t)
            except X.KernelError as e:
                err = str(e)
        return tr.facts, (inp, o, err), None

    def visit(facts, res) -> bool:
        inp, o, err = res
        if err is not None and not errors:
            errors.append((inp, err))
        if err is None:
            readings.append(conj(facts))
        if o is not None and (o.status in ("failed", "witnessed") or unended and o.status == "not_evaluated"):
            return decide(inp, o)
        return False

    count, _, undecided = _explore(f, s, run, visit, left)
    return count, undecided, (errors[0] if errors else None), disj(readings)


def initial(f: S.Family) -> State:
    inp = S.Inputs({})
    m = X.initial(f.prog, S.workload(f, inp))
    return State(z3.BoolVal(True), m, inp, tuple(inp.used), 0)
