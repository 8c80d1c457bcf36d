"""Claims over iterations decided for every state an iteration can start from (docs/verify.md,
*Every state*): a claim over iterations reads only the iteration the engine plans, and the plan
reads only the machine as the iteration starts. So when the claim holds on the plan from every
machine that could be one (each present session queued at the engine's hold or resident at one of
its runs, with any amount of that run left, any draws, any times), it holds at every iteration of
every path, whatever the values and the arrival times: a proof for every natural.

The machines are built by the kernel itself (one semantics): the sessions arrive and settle at
their arrival times, the residents are admitted by the kernel's admission in any order and moved to
any of the hold's runs, and then each resident's tokens left, the clock, `arrived` and `served`
become fresh unknowns with only what every reachable machine satisfies (docs/verify.md lists it).
That over-approximates the reachable machines, so a claim that holds on all of them is proved; one
that fails on some is not refuted (the machine may be unreachable), and the bounded search decides
it. The concolic search of serq/verify/search.py runs each shape's every path."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Optional

import z3

from serq.ref import claims as C
from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import search as S
from serq.verify.sym import Trace, concrete, term


# ---------------------------------------------------------------- which programs


def _stmts(block: tuple):
    """Every statement of a block, nested ones included."""
    for st in block:
        yield st
        if isinstance(st, R.BranchS):
            yield from _stmts(st.then)
            yield from _stmts(st.else_)
        elif isinstance(st, R.WhileS):
            yield from _stmts(st.body)
        elif isinstance(st, R.HoldS):
            yield from _stmts(st.body)


def _reads(p: R.Program, what: str) -> bool:
    return what in repr((p.init, p.turn, p.server, p.pools, p.engine, p.claims))


def _by_serial(p: R.Program) -> bool:
    """Whether a session's serial matters: something reads it, or its arrival time is a function of
    it (renewal). Else the sessions present are interchangeable with the first ones."""
    return p.arrive == "renewal" or _reads(p, "Attr(name='serial')")


def _pure(e, now: bool = False) -> bool:
    """Whether an expression reads only attributes and numbers (and the clock when `now`): its value
    is the same whenever it is read, so the builder's reading is the real one."""
    if isinstance(e, (R.Num, R.Attr)):
        return True
    if isinstance(e, R.Ctx):
        return now and e.name == "now"
    if isinstance(e, R.Not):
        return _pure(e.e, now)
    if isinstance(e, R.Bin):
        return _pure(e.l, now) and _pure(e.r, now)
    if isinstance(e, R.Ite):
        return _pure(e.c, now) and _pure(e.a, now) and _pure(e.b, now)
    if isinstance(e, R.Fn):
        return all(_pure(a, now) for a in e.args)
    return False


def _exprs(st):
    """The expressions a session statement reads."""
    if isinstance(st, (R.SetA, R.ObserveA)):
        return [st.e]
    if isinstance(st, (R.BranchS, R.WhileS)):
        return [st.c]
    if isinstance(st, R.RunS):
        return [st.work]
    return []


def scope(p: R.Program) -> tuple:
    """(the engine's hold, None) when the machines at an iteration's start are the builder's, else
    (None, why not): one turn per session, no trace, one hold, at the top of the server, on pools
    the engine admits from first, whose body is runs that neither grow nor cache (nothing is ever
    preempted), no register, units of attributes and numbers (an admission takes what it would have
    taken when it happened), no admission number read (they are the builder's own), no run outside
    the hold, runs whose work reads attributes and numbers, and before the hold nothing that blocks
    or reads more than attributes, numbers and the clock (a session reaches the hold as it arrives,
    so what it computed is what the builder computes)."""
    if p.session is not None:
        return None, "sessions take several turns"
    if p.trace:
        return None, "the sessions replay a trace"
    if p.stages:
        return None, "a session waits at a ps or delay stage"
    if p.arrive == "closed":
        return None, "a closed population"
    if p.engine.registers:
        return None, "the engine has registers"
    if _reads(p, "Ctx(name='admission')"):
        return None, "the schedule reads admission numbers"
    every = list(_stmts(p.init + p.turn + p.server))
    holds = [st for st in every if isinstance(st, R.HoldS)]
    if len(holds) != 1 or holds[0] not in p.server:
        return None, "the program does not have exactly one hold, at the top of its server"
    h = holds[0]
    if not p.pools[h.pools[0].pool].admitted:
        return None, "the hold does not queue where the engine admits"
    if not all(hp.static_units and (hp.reserve is None or hp.static_reserve) for hp in h.pools):
        return None, "the hold's units read more than attributes and numbers"
    if h.cache is not None or h.reuse is not None:
        return None, "the hold takes part in the prefix cache"
    if not h.body or not all(isinstance(st, R.RunS) and st.growing is None for st in h.body):
        return None, "the hold's body is not runs that do not grow"
    if sum(isinstance(st, R.RunS) for st in every) != len(h.body):
        return None, "a run stands outside the hold"
    if not all(_pure(st.work) for st in h.body):
        return None, "a run's work reads more than attributes and numbers"
    before = list(_stmts(p.init + p.turn + p.server[:p.server.index(h)]))
    if any(isinstance(st, (R.RunS, R.HoldS, R.EndS, R.WhileS, R.TurnS, R.JobS)) for st in before):
        return None, "a session may block or loop before the hold"
    # a session reaches the hold at its arrival: what it computes before reads the clock then
    if not all(_pure(e, now=True) for st in before for e in _exprs(st)):
        return None, "a session reads the machine's state before the hold"
    return h, None


def _granule(p: R.Program) -> Optional[int]:
    """The engine's granule when it is a constant: every chunk short of its remainder is a whole
    number of it, so a prefill's tokens done so far are one (*Engines*)."""
    g = p.engine.granule
    return g.v if isinstance(g, R.Num) and g.v > 0 else None


# ---------------------------------------------------------------- the machines


@dataclass(frozen=True)
class Shape:
    present: tuple      # the sessions present, ascending serials
    status: tuple       # per present session: -1 queued, c >= 0 resident after c runs completed
    order: tuple        # the residents' admission order (serials)


def shapes(p: R.Program, h: R.HoldS, n: int) -> list:
    """Every shape of n sessions at most: which are present (all subsets when something reads the
    serial, else the first k), each queued or resident after 0.. runs done, the residents admitted
    in every order."""
    out = []
    runs = len(h.body)
    if _by_serial(p):
        sets = [c for k in range(1, n + 1) for c in itertools.combinations(range(n), k)]
    else:
        sets = [tuple(range(k)) for k in range(1, n + 1)]
    for present in sets:
        for status in itertools.product(range(-1, runs), repeat=len(present)):
            res = [s for s, st in zip(present, status) if st >= 0]
            for order in itertools.permutations(res):
                out.append(Shape(present, status, order))
    return out


class Unrealized(Exception):
    """The path's inputs do not give the shape (a session refused, a run of no work)."""


def arrival(p: R.Program, inp: S.Inputs, k: int):
    if p.arrive == "poisson":
        return inp.value(f"a{k}")
    return (k + 1) * p.gap if p.arrive == "renewal" else 0


def build(p: R.Program, h: R.HoldS, sh: Shape, inp: S.Inputs, dom: dict) -> X.Machine:
    """The machine of a shape on the path's inputs, built by the kernel's own moves; `dom` collects
    each fresh unknown's range."""
    last = sh.present[-1]
    sess = tuple(R.SessionIn(0, S.Draws(inp, k), ()) for k in range(last + 1))
    m = X.Machine(0, (), 0, (), (), tuple(X.PoolSt() for _ in p.pools), X.Eng(regs=p.engine.registers),
                  R.Workload(sess))
    pa = replace(p, arrive="batch")   # arrivals are placed here, not scheduled
    i = h.pools[0].pool
    times = []
    for k in range(last + 1):
        t = arrival(p, inp, k)
        times.append(t)
        m = X.settle(p, X.arrive(pa, replace(m, now=t), k))
        if k not in sh.present:
            m = X.finish(p, m, k)
        elif m.sess[k].hold is not h or not m.sess[k].alive:
            raise Unrealized()
    m = replace(m, events=())
    status = dict(zip(sh.present, sh.status))
    for k in sh.order:
        it = next(q for q in m.pools[i].queue if q.sid == k)
        m, ok = X.try_admit(p, m, it, i)
        if not ok:
            raise Unrealized()
        m = X.set_eng(m, adm_seq=m.eng.adm_seq + 1)
        m = X.set_sess(m, replace(m.sess[k], eng_adm=m.eng.adm_seq))
        m = X.run_sess(p, m, k)
        for _ in range(status[k]):      # a run completed: the session goes on to the next
            rid = m.sess[k].at_run
            if rid is None:
                raise Unrealized()
            m = X.set_eng(m, reqs=tuple(r for r in m.eng.reqs if r.rid != rid))
            m = X.settle(p, X.wake(X.set_sess(m, replace(m.sess[k], at_run=None)), k))
        if m.sess[k].at_run is None:
            raise Unrealized()
    g = _granule(p)
    reqs = []
    for r in m.eng.reqs:            # any amount of its run left
        name = f"L{r.sid}"
        w = r.left
        left = inp.value(name, default=concrete(w))
        lo = z3.And(left.t >= 1, left.t <= term(w))
        if g is not None and r.mode == "prefill":
            lo = z3.And(lo, (term(w) - left.t) % g == 0)
        dom[name] = lo
        reqs.append(replace(r, left=left))
    now = inp.value("T", default=concrete(times[-1]))
    dom["T"] = now.t >= term(times[-1])
    arrived = inp.value("Arr", default=last + 1)
    dom["Arr"] = arrived.t >= last + 1
    served = inp.value("Srv", default=0)
    dom["Srv"] = served.t >= 0
    m = X.set_eng(m, reqs=tuple(reqs), served_total=served, want=False, busy=False)
    return replace(m, now=now, arrived=arrived)


# ---------------------------------------------------------------- the search


@dataclass
class Cti:
    """A machine on which a claim's value at the planned iteration is not the proved one."""
    shape: Shape
    model: dict


def run_shape(p: R.Program, h: R.HoldS, sh: Shape, inp: S.Inputs, dom: dict, claims) -> tuple:
    """(the kernel's facts, {claim index: (its value on the plan, or None out of its scope, or the
    error reading it; the facts its reading relied on)}, {} when the shape is not realized)."""
    with Trace() as tr:
        try:
            m = build(p, h, sh, inp, dom)
            m = X.start_iteration(p, m)
            planned = len(m.path) == 1     # an iteration was planned
        except (Unrealized, X.KernelError):
            planned = False
    reads = {}
    if planned:
        for j in claims:                   # each claim's reading, its branches its own
            with Trace() as ct:
                try:
                    val = None if C.out_of_scope(p, m, p.claims[j]) is not None else \
                        bool(X.claim_value(p, m.path[0][1], j))
                except X.KernelError as e:
                    val = e
            reads[j] = (val, ct.facts)
    return tr.facts, reads


def prove(p: R.Program, sessions: int, budget: S.Budget, limit: float, claims: list) -> tuple:
    """The claims over iterations (indices) that hold on the plan from every machine of at most
    `sessions` sessions, and a note for those that do not (their first counter-machine) or that the
    time or z3 left undecided; the kernel's exploration within `limit` of its time, each claim's
    readings within its own (serq/verify/search.py, Budget). ({index: True | why not}, paths run)."""
    h, why = scope(p)
    if h is None:
        return {j: f"not every state: {why}" for j in claims}, 0
    want = {j: p.claims[j].form == "every" for j in claims}   # the value every iteration must have
    open_ = dict(want)
    out: dict = {}
    undecided_of = dict.fromkeys(claims, 0)
    paths = 0

    def name(j):
        return p.claims[j].name

    for sh in shapes(p, h, sessions):
        if not open_:
            break
        dom: dict = {}

        def run(inp: S.Inputs):
            facts, reads = run_shape(p, h, sh, inp, dom, list(open_))
            return facts, (inp, reads), None

        def domain(n: str):
            if n in dom:
                return dom[n]
            if S.real(n):   # an arrival: any real time from the one before
                k = int(n[1:])
                return S.var(n) >= (z3.Real(f"a{k - 1}") if k else 0)
            return S.var(n) >= 0

        def within(res, under) -> bool:
            nonlocal paths
            inp, reads = res
            for j in list(open_):
                if budget.left(name(j)) <= 0:
                    out[j] = "not every state: the timeout ran out"
                    del open_[j]
                    continue
                if j not in reads:
                    continue
                bad = [None]

                def see(_facts, r, j=j) -> bool:
                    val = r[1].get(j, (None,))[0]
                    if isinstance(val, X.KernelError):
                        bad[0] = f"not every state: reading it, the kernel stops with {val} ({_describe(sh)})"
                    elif val is not None and val != open_[j]:
                        bad[0] = (f"not every state: it fails on a machine that may not be reachable "
                                  f"({_describe(sh)})")
                    return bad[0] is not None

                def run_j(inp2, j=j):
                    f2, reads2 = run_shape(p, h, sh, inp2, dom, [j])
                    return reads2.get(j, (None, []))[1], (inp2, reads2), None

                with budget.charge(name(j)):
                    try:
                        count, _, undecided = S.explore_with(
                            run_j, domain, lambda j=j: budget.left(name(j)), see,
                            start=(inp, (reads[j][1], (inp, reads), None)), under=under)
                    except S.Deadline:
                        out[j] = "not every state: the timeout ran out"
                        del open_[j]
                        continue
                paths += count - 1
                undecided_of[j] += undecided
                if bad[0] is not None:
                    out[j] = bad[0]
                    del open_[j]
            return not open_

        def left() -> float:
            return min(budget.left_any([name(j) for j in open_]), limit - budget.kernel())

        try:
            n, stopped, undecided = S.explore_with(run, domain, left, lambda _f, _r: False, within=within)
        except S.Deadline as d:
            paths += d.args[0] if d.args else 0
            for j in open_:
                out[j] = "not every state: the timeout ran out"
            return out, paths
        paths += n
        if undecided and not stopped:
            for j in open_:
                out[j] = f"not every state: z3 could not decide {undecided} branch(es)"
            return out, paths
    for j in open_:
        out[j] = True if not undecided_of[j] else \
            f"not every state: z3 could not decide {undecided_of[j]} branch(es) of its reading"
    return out, paths


def _describe(sh: Shape) -> str:
    parts = []
    for k, st in zip(sh.present, sh.status):
        parts.append(f"session {k} " + ("queued" if st < 0 else f"resident after {st} run(s)"))
    return ", ".join(parts)
