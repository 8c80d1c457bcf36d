"""A claim at end that sums over sessions, proved per session for every number of sessions
(docs/verify.md, *Per session*).

`at end (total(A) >= total(B))` holds on a path that ends when each turn of each session observes
A >= B: the totals sum the turns, and on a path that ends every turn it began was completed (a
turn is cut short only by a hold refused as it joins, or by `end`, which the program's shape
excludes). So the claim is proved for every workload of any number of sessions when one turn,
read on its own, observes A >= B whatever the others do. Likewise any `L >= R` whose sides sum
multiples of totals and counts of observations and numbers: L - R is the sum of each turn's share
and of its numbers, so it holds when those are 0 or more and every turn's share is. And
`largest(A) <= c` (c >= 0) when each turn observes A at most c; a conjunction when each part holds.

What the others do reaches a turn only through the time its holds take. A hold lasts at least the
iterations its runs need, each at least the least an iteration costs (the lemma `hold`, below),
and a turn is read with each hold's duration any time at least that: its draws any naturals, the
clock any time, the attributes earlier turns leave any values (several turns), each stage's job
any time. The turn's statements are run by the kernel's own `eval_expr`, `amount` and `round_up`
on those unknowns (one semantics), each branch explored, and z3 shows that every reading observes
A >= B.

The lemma `hold`: from the moment a session's hold joins its queue to the moment its session goes
on past it, the time is at least c * (ceil(P / B) + D), where P is the work of the hold's prefill
runs, D that of its decode runs, B the tokens cap and c the least cost of an iteration with a
token in its batch. Each iteration the hold's request is in the batch of began after it joined
and ended before it left, one at a time on the engine; it gives the request at most B tokens of a
prefill or one token of a decode (`give`, serq/verify/step.py: the tokens within the budget, a
decode's one token); it lasts its cost, at least c (z3 shows it from the kernel's invariants:
`tokens >= 1` implies the cost is at least c); and a run is done only when it was given its whole
work (a preempted run's tokens are given again). The kernel's paths are checked against it:
tests/test_verify_session.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import z3

from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import invariant as V
from serq.verify import search as S
from serq.verify.sym import Trace

NOW = "#now"   # the clock, read by a turn's statements as an attribute of this name
KERNEL_ATTRS = ("serial", "turn_no")   # naturals the kernel gives every session


@dataclass
class Proof:
    fact: str        # what one turn observes, as the program writes it
    lemma: str       # what a hold's duration was taken to be at least


def decompose(e) -> Optional[tuple]:
    """A claim `L >= R` (or `R <= L`) whose sides are sums of multiples of `total(X)` and `count(X)`
    of the program's own observations and of constants: (per observation name its (weight of a value,
    weight of an observation) in L - R, the constant of L - R), or None. It holds on a path when the
    constant is 0 or more and each turn's share of L - R is."""
    if not isinstance(e, R.Bin) or e.op not in (">=", "<="):
        return None
    big, small = (e.l, e.r) if e.op == ">=" else (e.r, e.l)
    lb, ls = _linear(big), _linear(small)
    if lb is None or ls is None:
        return None
    w = {}
    for terms, sign in ((lb[0], 1), (ls[0], -1)):
        for (fn, name), k in terms.items():
            v, c = w.get(name, (0, 0))
            w[name] = (v + sign * k, c) if fn == "total" else (v, c + sign * k)
    return w, lb[1] - ls[1]


def _linear(e) -> Optional[tuple]:
    """({(fn, name): weight}, constant) of a sum of multiples of totals, counts and numbers."""
    if isinstance(e, R.Num):
        return {}, e.v
    if isinstance(e, R.Agg):
        if e.fn in ("total", "count") and e.name not in R.CLIENT_METRICS:
            return {(e.fn, e.name): 1}, 0
        return None
    if isinstance(e, R.Bin) and e.op in ("+", "-"):
        a, b = _linear(e.l), _linear(e.r)
        if a is None or b is None:
            return None
        k = 1 if e.op == "+" else -1
        t = dict(a[0])
        for key, v in b[0].items():
            t[key] = t.get(key, 0) + k * v
        return t, a[1] + k * b[1]
    if isinstance(e, R.Bin) and e.op == "*":
        for c, x in ((e.l, e.r), (e.r, e.l)):
            if isinstance(c, R.Num):
                a = _linear(x)
                if a is None:
                    return None
                return {key: c.v * v for key, v in a[0].items()}, c.v * a[1]
    return None


def _scope(p: R.Program, names: set) -> Optional[str]:
    """Why the program's turns cannot be read one at a time for the observations `names`, or None."""
    if p.arrive == "closed":
        return "a closed population never ends"
    if p.trace:
        return "the sessions replay a trace"
    for st in p.server:
        if not isinstance(st, (R.SetA, R.ObserveA, R.HoldS, R.JobS)):
            return f"the server has a `{type(st).__name__}` (only sets, observations, holds and jobs are read per turn)"
    for n in V._nodes((p.init, p.turn)):
        if isinstance(n, (R.WhileS, R.TurnS, R.HoldS, R.RunS, R.EndS, R.JobS)):
            return (f"`init` or `turn` has a `{type(n).__name__}` (only sets, draws, observations and branches "
                    "are read per turn)")
    for n in V._nodes((p.init, p.turn, p.session or ())):
        if isinstance(n, R.ObserveA) and n.name in names:
            return f"`{n.name}` is observed outside the server"
    holds = [n for n in V._nodes(p.server) if isinstance(n, R.HoldS)]
    for h in holds:
        if h.reuse is not None or h.cache is not None or h.content is not None:
            return "a hold reuses or caches a prefix: its work depends on the other sessions"
        for st in h.body:
            if not isinstance(st, (R.RunS, R.HoldS)):
                return f"a hold's body has a `{type(st).__name__}` (only runs and holds are read per turn)"
    for n in V._nodes(p.server):
        if isinstance(n, (R.StepVar, R.Obs, R.Reg, R.Agg)) or isinstance(n, R.Ctx) and n.name != "now":
            return "the server reads the machine (a step value, a pool, a register or a context value other than `now`)"
        if isinstance(n, R.Attr) and n.name in ("computed", "cached"):
            return f"the server reads `{n.name}`, which a preemption changes"
    return None


def _now(e):
    """The expression with `now` an attribute (a turn's clock is one of its unknowns)."""
    if isinstance(e, R.Ctx) and e.name == "now":
        return R.Attr(NOW)
    if isinstance(e, tuple):
        return tuple(_now(x) for x in e)
    if hasattr(e, "__dataclass_fields__") and not isinstance(e, R.Attr):
        return type(e)(**{f: _now(getattr(e, f)) for f in e.__dataclass_fields__})
    return e


def least_cost(p: R.Program, lems: list, left) -> Optional[object]:
    """The least an iteration with a token in its batch costs, as a rational the kernel's invariants
    imply (z3): the cost at the smallest such batches, else 0; None when not even 0 is implied."""
    tokens = R.StepVar("Ntok", batch=True)
    cands = []
    for pre, dec in ((1, 0), (0, 1)):
        try:
            leaves: dict = {}
            e2 = V.abstract(p.engine.cost, leaves)
            vals = dict.fromkeys(leaves, 0)
            vals.update({"tokens": 1, "prefilled": pre, "decoders": dec})
            env = X.Env(tuple(vals.items()))
            cands.append(X.eval_expr(p, None, env, e2))
        except (V.Unsupported, X.KernelError):
            return None
    for c in sorted(set(cands)) + [0]:
        if c < 0:
            continue
        claim = R.Bin("||", R.Bin("<", tokens, R.Num(1)), R.Bin(">=", p.engine.cost, R.Num(c)))
        try:
            if V._implied(p, claim, True, lems, left) is None:
                return c
        except V.Unsupported:
            return None
    return None


def parts(e) -> Optional[list]:
    """The claim as conjuncts each read per turn: ("sum", weights, constant) for a decomposed `L >= R`
    (decompose), ("max", A, c) for `largest(A) <= c` with c >= 0 (every observation of A at most c;
    of none it is 0); None when one is neither."""
    if isinstance(e, R.Bin) and e.op == "&&":
        a, b = parts(e.l), parts(e.r)
        return None if a is None or b is None else a + b
    if isinstance(e, R.Bin) and e.op in ("<=", ">="):
        agg, bound = (e.l, e.r) if e.op == "<=" else (e.r, e.l)
        if isinstance(agg, R.Agg) and agg.fn == "largest" and agg.name not in R.CLIENT_METRICS:
            return [("max", agg.name, bound.v)] if isinstance(bound, R.Num) and bound.v >= 0 else None
    d = decompose(e)
    if d is None:
        return None
    w, k = d
    return [("sum", {n: x for n, x in w.items() if x != (0, 0)}, k)]


def prove(p: R.Program, j: int, left) -> Proof | str:
    """A claim at end (index j) proved per session, or why not."""
    c = p.claims[j]
    ps = parts(c.e)
    if ps is None:
        return ("not a sum over sessions (`L >= R`, each side a sum of multiples of totals and counts of the "
                "program's observations and of numbers; `largest(A) <= c`; their `&&`)")
    if any(x[0] == "sum" and x[2] < 0 for x in ps):
        return "its numbers do not sum to 0 or more on the greater side: no sum of turns gives it"
    names = {n for x in ps for n in (x[1] if x[0] == "sum" else (x[1],))}
    # a workload the kernel refuses (F016) is run by the interpreter on floats: outside the proof, as
    # for the lemmas (invariant.refusal)
    why = _scope(p, names) or V.refusal(p)
    if why is not None:
        return why
    from serq.verify import step
    chk = step.checked(p)
    if chk.failed:
        return "the encoded step does not keep the kernel's invariant"
    sh = step.shape(p)
    lems = [lm for lm in V.lemmas(p) if chk.lemmas.get(lm.key, "not checked") is None]
    cmin = least_cost(p, lems, left)
    if cmin is None:
        return "the kernel's invariants bound no iteration's cost from below"
    B = sh.budget if p.engine.budget is not None else None
    if p.engine.budget is not None and B is None:
        return "the tokens cap is not a constant"
    return _turn(p, ps, names, "; ".join(_fact(x) for x in ps), cmin, B, left)


class _Turn:
    """One turn's statements on unknowns: the draws `d{k}`, the clock `T`, each hold's duration and
    each job's `a{k}` (reals >= 0), an earlier turn's attributes (naturals `d{k}` where `naturals`
    shows them so, else reals `a{k}`), the iterations
    a hold's prefill needs `k{k}` (naturals), and the kernel's own attributes (naturals)."""

    def __init__(self, p: R.Program, ps: list, names: set, cmin, B):
        self.p, self.ps, self.names, self.cmin, self.B = p, ps, names, cmin, B
        self.free: set = set()   # the `a{k}` that range over every real

    def domain(self, name: str):
        v = S.var(name)
        if name in self.free:
            return z3.BoolVal(True)
        return v >= 0

    def run(self, inp: S.Inputs):
        self.k = 0
        self.obs = {n: [] for n in self.names}
        self.assume = []      # (a hold's duration, the least it lasts)
        self.inp = inp
        with Trace() as tr:
            try:
                val = self._run()
            except (X.KernelError, _Refused) as err:
                val = err
        return tr.facts, val, None

    def _fresh(self, kind: str, free: bool = False):
        name = f"{kind}{self.k}"
        self.k += 1
        if free:
            self.free.add(name)
        return self.inp.value(name)

    def _run(self):
        p = self.p
        attrs = tuple((n, self._fresh("d")) for n in KERNEL_ATTRS) + (("cached", 0), ("computed", 0))
        attrs = self._block(p.init, attrs)
        if p.session is not None:
            # a later turn: what the session block, the turns and the server assign may hold any
            # value an earlier turn left, a natural where every assignment of it is one
            nat = naturals(p)
            for n in sorted(_assigned((p.session, p.turn, p.server))):
                attrs = X.assign(attrs, n, self._fresh("d") if n in nat else self._fresh("a", free=True))
        attrs = X.assign(attrs, NOW, self.inp.value("T"))
        attrs = self._block(p.turn, attrs)
        attrs = self._block(p.server, attrs)
        held = all(d >= least for d, least in self.assume)
        return bool(not held or all(self._part(x) for x in self.ps))

    def _part(self, x) -> bool:
        if x[0] == "max":   # each observation of A at most c
            return all(v <= x[2] for v in self.obs[x[1]])
        # the turn's share of L - R: each value and each observation weighed
        w = x[1]
        return bool(sum((v * o for n, (v, c) in w.items() for o in self.obs[n]), 0) +
                    sum(c * len(self.obs[n]) for n, (v, c) in w.items()) >= 0)

    def _block(self, block, attrs):
        for st in block:
            env = X.Env(attrs)
            if isinstance(st, R.DrawA):
                attrs = X.assign(attrs, st.name, self._fresh("d"))
            elif isinstance(st, R.SetA):
                attrs = X.assign(attrs, st.name, X.eval_expr(self.p, None, env, _now(st.e)))
            elif isinstance(st, R.ObserveA):
                v = X.eval_expr(self.p, None, env, _now(st.e))
                if st.name in self.obs:
                    self.obs[st.name].append(v)
            elif isinstance(st, R.BranchS):
                attrs = self._block(st.then if X.guard(self.p, None, env, st.c) else st.else_, attrs)
            elif isinstance(st, R.HoldS):
                attrs = self._hold(st, attrs)
            elif isinstance(st, R.JobS):
                w = X.eval_expr(self.p, None, env, _now(st.work))
                if w < 0:
                    raise X.KernelError("R007", f"a run's work is an amount, not negative: this one is {w}")
                attrs = X.assign(attrs, NOW, X.lookup(attrs, NOW) + self._fresh("a"))
            elif isinstance(st, (R.TurnS, R.WhileS, R.EndS, R.RunS)):
                raise AssertionError(st)   # _scope keeps them out of what a turn reads here
        return attrs

    def _hold(self, h: R.HoldS, attrs):
        """A hold: refused as it joins when a units or reserve it judges then is above the cap (the
        turn is cut short: no proof); else it lasts its duration, at least what its runs need."""
        p, env = self.p, X.Env(attrs)
        pre = dec = 0
        for hh in [n for n in V._nodes(h) if isinstance(n, R.HoldS)]:
            if any(X.never_fits(p, None, env, hp) for hp in hh.pools):   # the kernel's own judgement
                raise _Refused()
            for st in hh.body:
                if isinstance(st, R.RunS):
                    w = X.amount(X.eval_expr(p, None, env, st.work), "a run's work")
                    if w > 0:
                        if st.mode == "prefill":
                            pre = pre + w
                        else:
                            dec = dec + w
        d = self._fresh("a")
        if self.B is None:
            need = (1 if pre > 0 else 0) + dec
        else:
            k = self._fresh("k")   # ceil(pre / B): the least k with k * B >= pre
            self.assume.append((k * self.B, pre))
            self.assume.append((pre + self.B - 1, k * self.B))
            need = k + dec
        self.assume.append((d, self.cmin * need))
        return X.assign(attrs, NOW, X.lookup(attrs, NOW) + d)


class _Refused(Exception):
    """A hold refused as it joins: its session ends with the turn's observations half made."""


def naturals(p: R.Program) -> set:
    """The attributes every assignment of which is a natural when the ones it reads are (draws, the
    kernel's serial and turn number, whole constants 0 or more; sums, products, remainders, minima
    and maxima, tests, choices and floors of them): by induction over a run, each is a natural
    whenever it has a value. The greatest such set, to a fixpoint."""
    sets = [n for n in V._nodes((p.init, p.turn, p.session or (), p.server)) if isinstance(n, R.SetA)]
    nat = {n.name for n in sets} | {n.name for n in V._nodes(p) if isinstance(n, R.DrawA)} | set(KERNEL_ATTRS)
    while True:
        out = {s.name for s in sets if s.name in nat and not _natural(s.e, nat)}
        if not out:
            return nat
        nat -= out


def _natural(e, nat: set, nonneg: bool = False) -> bool:
    """Whether e is a natural when the attributes in nat are (a rational >= 0 with `nonneg`)."""
    if isinstance(e, R.Num):
        return e.v >= 0 and (nonneg or e.v == int(e.v))
    if isinstance(e, R.Attr):
        return e.name in nat
    if isinstance(e, R.Not):
        return True
    if isinstance(e, R.Bin):
        if e.op in ("==", "!=", "<", "<=", ">", ">=", "&&", "||"):
            return True
        if e.op in ("+", "*", "%"):
            return _natural(e.l, nat, nonneg) and _natural(e.r, nat, nonneg)
        if e.op == "/":
            return nonneg and _natural(e.l, nat, True) and _natural(e.r, nat, True)
        return False
    if isinstance(e, R.Ite):
        return _natural(e.a, nat, nonneg) and _natural(e.b, nat, nonneg)
    if isinstance(e, R.Fn):
        if e.name in ("floor", "ceil", "round"):
            return len(e.args) == 1 and _natural(e.args[0], nat, True)
        if e.name in ("min", "max"):
            return all(_natural(a, nat, nonneg) for a in e.args)
    return False


def _assigned(x) -> set:
    return {n.name for n in V._nodes(x) if isinstance(n, (R.SetA, R.DrawA))}


def _fact(x) -> str:
    """What each turn observes, as the claim writes it (`done >= alone` for `total(done) >=
    total(alone)`, else the conjunct of a turn's own observations), and why the claim follows: a
    sum's totals add up the turns, a largest value is one turn's."""
    if x[0] == "max":
        return f"each turn observes {x[1]} <= {x[2]}: the largest on a path that ends is one turn's, or 0"
    w = x[1]
    if set(w.values()) == {(1, 0), (-1, 0)} and len(w) == 2:
        a, b = sorted(w, key=lambda n: -w[n][0])
        return f"each turn observes {a} >= {b}: the totals add up the turns of every path that ends"
    return ("each turn's own observations satisfy it (its totals and counts of them, its numbers left out): "
            "the totals and counts add up the turns of every path that ends")


def _turn(p: R.Program, ps: list, names: set, fact: str, cmin, B, left) -> Proof | str:
    t = _Turn(p, ps, names, cmin, B)
    bad: list = []

    def see(_facts, val) -> bool:
        if isinstance(val, _Refused):
            bad.append("a hold may be refused as it joins (its units above the cap): its session ends mid-turn")
        elif isinstance(val, X.KernelError):
            bad.append(f"reading a turn, the kernel stops with {val}")
        elif not val:
            bad.append("a turn's own observations may break it with its holds as long as they need")
        return bool(bad)

    try:
        _, _, undecided = S.explore_with(t.run, t.domain, left, see)
    except S.Deadline:
        return "the timeout ran out reading a turn"
    if bad:
        return bad[0]
    if undecided:
        return f"z3 could not decide {undecided} branch(es) of a turn"
    per = "iteration" if cmin == 1 else f"iteration of at least {cmin} s"
    lemma = (f"a hold lasts at least an {per} for each decode token and for each {B} prefill tokens (rounded up)"
             if B is not None else f"a hold lasts at least an {per} for its prefill and one for each decode token")
    return Proof(fact, lemma)
