"""A claim at end that sums over sessions, proved per session for every number of sessions
(docs/verify.md, *Per session*).

`at end (total(A) >= total(B))` holds on a path that ends when each turn of each session observes
A >= B: the totals sum the turns, and on a path that ends every turn it began was completed (a
turn is cut short only by a hold refused as it joins, or by `end`, which the program's shape
excludes). So the claim is proved for every workload of any number of sessions when one turn,
read on its own, observes A >= B whatever the others do. Likewise any `L >= R` whose sides sum
multiples of totals and counts of observations and numbers: L - R is the sum of each turn's share
and of its numbers, so it holds when those are 0 or more and every turn's share is. And
`largest(A) <= c` (c >= 0) when each turn observes A at most c, `smallest(A) >= c` when each
observes A at least c (above 0, at least once); a conjunction when each part holds.

What the others do reaches a turn only through the time its holds take. A hold lasts at least the
iterations its runs need, each at least the least an iteration costs (the lemma `hold`, below),
and a turn is read with each hold's duration any time at least that: its draws any naturals, the
clock any time, the attributes earlier turns leave any values (several turns), each stage's job
any time. The turn's statements are run by the kernel's own `eval_expr`, `amount` and `round_up`
on those unknowns (one semantics), each branch explored, and z3 shows that every reading observes
A >= B.

What a session carries from turn to turn, and a hold from an execution a preemption cut to the
next (its attributes, its cache entries, `computed`), is not any value: each path of the reading
is a Horn clause over two relations standing for those states, and z3's Spacer finds their
invariants, or a failure some session reaches (`_Turn`, `_solve`). On a cache keyed by content,
which is no session's, a hit is any whole blocks within the hold's units and reuse: whatever the
others published (`_streams_why` keeps out the contents two sessions may define otherwise).

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

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Optional

import z3

from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import invariant as V
from serq.verify import search as S
from serq.verify.sym import SymNum, Trace, concrete, own_context, term

NOW = "#now"   # the clock, read by a turn's statements as an attribute of this name
RESPONSE = "response"   # the client's sample a turn that ends records: its time from start to end (exec.answered)
TTFT = "ttft"   # the client's sample at a turn's first token (exec.answered, exec's decode): its time from start
TURNS = "#turns"   # the turns a session has run, carried where the draws are bounded (turn_no exact)
KERNEL_ATTRS = ("serial", "turn_no")   # naturals the kernel gives every session


@dataclass
class Proof:
    fact: str        # what one turn observes, as the program writes it
    lemma: str       # what a hold's duration was taken to be at least
    invariants: list = field(default_factory=list)   # (where, what Spacer found a session keeps there)
    values: Optional[int] = None   # the draws read as 0..values (the bound's), None: any natural


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
        if e.fn in ("total", "count") and (e.name not in R.CLIENT_METRICS or e.name == RESPONSE):
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
    why = _server_why(p.server)
    if why is not None:
        return why
    for n in V._nodes((p.init, p.turn)):
        if isinstance(n, (R.WhileS, R.TurnS, R.HoldS, R.RunS, R.EndS, R.JobS)):
            return (f"`init` or `turn` has a `{type(n).__name__}` (only sets, draws, observations and branches "
                    "are read per turn)")
    for n in V._nodes((p.init, p.turn, p.session or ())):
        if isinstance(n, R.ObserveA) and n.name in names:
            return f"`{n.name}` is observed outside the server"
    holds = [n for n in V._nodes(p.server) if isinstance(n, R.HoldS)]
    header = set()   # what a hold's header reads at its admission: pools and engines, any natural
    why = _streams_why(p, holds)
    if why is not None:
        return why
    for h in holds:
        for n in V._nodes(h.body):
            if not isinstance(n, (R.RunS, R.HoldS, R.SetA, R.DrawA, R.ObserveA, R.BranchS)) and not _is_expr(n) \
                    and not isinstance(n, (R.HoldPool,)):
                return f"a hold's body has a `{type(n).__name__}` (only runs, holds, sets, observations and branches are read per turn)"
            if isinstance(n, R.Ctx) and n.name == "now":
                return "a hold's body reads `now` (its time inside the hold is not read per turn)"
        for e in [h.reuse] + [x for hp in h.pools for x in (hp.units, hp.reserve)]:
            for n in V._nodes(e):
                if isinstance(n, R.Obs):
                    why = _obs_scope(p, n)
                    if why:
                        return why
                    header.add(id(n))
                if isinstance(n, R.Ctx) and n.name == "now":
                    return "a hold's header reads `now` (its admission's time is not read per turn)"
    for n in V._nodes(p.server):
        if id(n) in header:
            continue
        if isinstance(n, (R.StepVar, R.Obs, R.Reg, R.Agg)) or isinstance(n, R.Ctx) and n.name != "now":
            return "the server reads the machine (a step value, a pool, a register or a context value other than `now`)"
    return None


def _server_why(block) -> Optional[str]:
    """Why the server's statements are not read per turn: only sets, observations, holds, jobs and
    branches over them (a branch's guard on attributes and numbers: two kinds of request, each
    to its own queue, as an engine that admits two)."""
    for st in block:
        if isinstance(st, R.BranchS):
            if any(isinstance(n, R.Ctx) for n in V._nodes(st.c)):
                return "a branch of the server reads the clock or the machine"
            why = _server_why(st.then) or _server_why(st.else_)
            if why is not None:
                return why
        elif not isinstance(st, (R.SetA, R.ObserveA, R.HoldS, R.JobS)):
            return (f"the server has a `{type(st).__name__}` (only sets, observations, holds, jobs and branches "
                    "are read per turn)")
    return None


def _streams_why(p: R.Program, holds: list) -> Optional[str]:
    """Why the holds' contents may be defined otherwise by two sessions (a run error, R045, that no
    turn read alone meets), or None. A content with no parent is always its stream's own tokens. With
    a parent, every content must be the same `content (serial + c, p0, at)`, p0 and at numbers, p0 <
    c: each session names a stream of its own, always alike, and the parent is none of them (vLLM's
    system prompt shared by every conversation)."""
    contents = {h.content for h in holds if h.content is not None}
    if all(c.parent is None for c in contents):
        return None
    bad = "a hold's content names a parent, and two sessions' contents may define a stream otherwise (R045)"
    if len(contents) > 1 or "serial" in _assigned((p.init, p.session or (), p.turn, p.server)):
        return bad
    (c,) = contents
    off, p0, at = _serial_plus(c.stream), _constant(c.parent), _constant(c.common)
    if off is None or p0 is None or at is None or not p0 < off:
        return bad
    return None


def _serial_plus(e):
    """c of a stream written `serial + c` (or `c + serial`; `serial` is c = 0), else None."""
    if isinstance(e, R.Attr) and e.name == "serial":
        return 0
    if isinstance(e, R.Bin) and e.op == "+":
        for n, a in ((e.l, e.r), (e.r, e.l)):
            if isinstance(n, R.Num) and isinstance(a, R.Attr) and a.name == "serial":
                return n.v
    return None


def _is_expr(n) -> bool:
    return isinstance(n, (R.Num, R.Attr, R.Ctx, R.StepVar, R.Reg, R.Obs, R.Agg, R.Not, R.Bin, R.Ite, R.Fn))


def _obs_scope(p: R.Program, n: R.Obs) -> Optional[str]:
    """Why a header's read of a pool or the engine is not any natural (its value at an admission),
    or None: the reads the kernel refuses (R002) are not (a content pool's `cachedin` is the run of
    blocks its stream finds published: any natural, whatever the others published)."""
    if n.of == p.engine.name:
        if n.fn in ("queue", "busy", "work") or n.fn == "budget_left" and p.engine.budget is not None:
            return None
    elif n.fn in ("used", "holders", "queued", "cachedin", "free"):
        i = next(j for j, pl in enumerate(p.pools) if pl.name == n.of)
        if not (n.fn == "free" and p.pools[i].cap is None):
            return None
    return f"a hold's header reads `{n.fn}({n.of})`, which has no natural value there"


def _now(e):
    """The expression with `now` an attribute (a turn's clock is one of its unknowns)."""
    return V.subst(e, lambda x: R.Attr(NOW) if isinstance(x, R.Ctx) and x.name == "now" else x)


def least_cost(p: R.Program, lems: list, left) -> Optional[object]:
    """The least an iteration with a token in its batch costs, as a rational the kernel's invariants
    imply (z3): first the cost at the smallest such batches; where a batch the invariants allow costs
    less (`max(1, 20 - batch.tokens)` is least at the tokens cap), that batch's cost, and so on down
    (a few rounds); else 0; None when not even 0 is implied."""
    tokens = R.StepVar("Ntok", batch=True)
    cands = []
    leaves: dict = {}
    try:
        e2 = V.abstract(p.engine.cost, leaves)
    except V.Unsupported:
        return None
    # batches of 1 token, and of powers of 2 up to the tokens cap, all prefill or all decode
    budget = p.engine.budget
    cap = budget.v if isinstance(budget, R.Num) and budget.v >= 1 else 1
    sizes = sorted({1, cap} | {2 ** k for k in range(1, 13) if 2 ** k < cap})
    for size in sizes:
        for pre, dec in ((size, 0), (0, size)):
            try:
                vals = dict.fromkeys(leaves, 0)
                vals.update({"tokens": size, "prefilled": pre, "decoders": dec})
                env = X.Env(tuple(vals.items()))
                cands.append(X.eval_expr(p, None, env, e2))
            except X.KernelError:
                if size == 1:
                    return None
    tried: set = set()
    c = min(cands)
    for _ in range(LEAST_ROUNDS):
        if c <= 0 or c in tried:
            break
        tried.add(c)
        claim = R.Bin("||", R.Bin("<", tokens, R.Num(1)), R.Bin(">=", p.engine.cost, R.Num(c)))
        found: list = []
        try:
            if V._implied(p, claim, True, lems, left, found) is None:
                return c
        except V.Unsupported:
            return None
        if not found:
            break
        # a batch the invariants allow below c: its cost is the next candidate
        try:
            c = X.eval_expr(p, None, found[0], e2)
        except X.KernelError:
            break
    claim = R.Bin("||", R.Bin("<", tokens, R.Num(1)), R.Bin(">=", p.engine.cost, R.Num(0)))
    try:
        return 0 if V._implied(p, claim, True, lems, left) is None else None
    except V.Unsupported:
        return None


LEAST_ROUNDS = 8   # candidates tried for the least cost before 0


def _constant(e):
    """The value of an expression of numbers alone (`-9` is `0 - 9`), else None."""
    lin = _linear(e)
    return lin[1] if lin is not None and not lin[0] else None


def parts(e) -> Optional[list]:
    """The claim as conjuncts each read per turn: ("sum", weights, constant) for a decomposed `L >= R`
    (decompose; `L == R` is two), ("max", A, c, strict) for `largest(A) <= c` with c >= 0 or `largest(A) < c`
    with c > 0 (every observation of A at most c, below c; of none it is 0), ("min", A, c, strict) for
    `smallest(A) >= c` or `> c` (where 0 fails it, each turn observes A); None when a conjunct is none of these."""
    if isinstance(e, R.Bin) and e.op == "&&":
        a, b = parts(e.l), parts(e.r)
        return None if a is None or b is None else a + b
    # `L == R` is `L >= R && R >= L`: each turn's share of L - R is 0
    if isinstance(e, R.Bin) and e.op == "==" and decompose(R.Bin(">=", e.l, e.r)) is not None:
        return parts(R.Bin(">=", e.l, e.r)) + parts(R.Bin(">=", e.r, e.l))
    if isinstance(e, R.Bin) and e.op in ("<=", ">=", "<", ">"):
        lo, hi = (e.l, e.r) if e.op in ("<=", "<") else (e.r, e.l)   # lo <= hi, or lo < hi
        strict = e.op in ("<", ">")
        if isinstance(lo, R.Agg) and lo.fn == "largest" and lo.name not in R.CLIENT_METRICS:
            c = _constant(hi)   # largest of none is 0: the bound must hold of 0 too
            return [("max", lo.name, c, strict)] if c is not None and (c > 0 or c == 0 and not strict) else None
        # smallest of none is 0 (the reference's *Claims*): above 0 a path needs an observation, so
        # each turn as it ends must have made one (a path that ends has a session, whose turns ended)
        if isinstance(hi, R.Agg) and hi.fn == "smallest" and (hi.name not in R.CLIENT_METRICS or hi.name in (RESPONSE, TTFT)):
            c = _constant(lo)
            return [("min", hi.name, c, strict)] if c is not None else None
    d = decompose(e)
    if d is None:
        return None
    w, k = d
    return [("sum", {n: x for n, x in w.items() if x != (0, 0)}, k)]


def prove(p: R.Program, j: int, left, values: Optional[int] = None) -> Proof | str:
    """A claim at end (index j) proved per session, or why not; with `values`, each draw read as
    0..values (the bound's), and the turn number counted (docs/verify.md, *Per session, within the
    values*)."""
    c = p.claims[j]
    ps = parts(c.e)
    if ps is None:
        return ("not a sum over sessions (`L >= R` or `L == R`, each side a sum of multiples of totals and "
                "counts of the program's observations and of numbers; `largest(A) <= c`, c >= 0; `smallest(A) >= c`; their `&&`)")
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
    # the turn read in a z3 context of its own: its models, and so the paths read and the clauses Spacer
    # is given, would follow what was asked before (the claims before it, this program's step checked
    # in the same call or not), and Spacer's answer with them (`sym.own_context`)
    with own_context():
        return _turn(p, ps, names, "; ".join(dict.fromkeys(_fact(x) for x in ps)), cmin, B, left, values,
                     claim=c.name)


class _Turn:
    """One turn's statements on unknowns, as Horn clauses over what a session carries from turn to
    turn and from a hold's execution to its next after a preemption (docs/verify.md, *Per session*).

    Unknowns: the draws `d{k}`, the clock `T`, each hold's duration and each job's `a{k}` (reals
    >= 0), the iterations a hold's prefill needs `k{k}`, what the pools read at an admission and what
    it consumed of the cache (naturals), the kernel's own attributes (naturals). Two relations stand
    for what the paths carry: `T` the session's attributes as a turn begins, `P` a hold's attributes
    and its computed position as it executes again after a preemption. Each path of a reading is a
    clause: its condition and the relations it starts from imply the one it reaches (the next turn's
    `T`, the `P` a preemption leaves), or a failure: `E` the kernel stops, `R` a hold refused as it
    joins with the turn's observations so far breaking a part, `B` a turn's own observations (or an
    execution cut by a preemption, read on its own) breaking one. z3's Spacer finds the invariants
    that show no failure is reachable, or a derivation of one."""

    def __init__(self, p: R.Program, ps: list, names: set, cmin, B, plan: "_Plan", values: Optional[int] = None):
        self.p, self.ps, self.names, self.cmin, self.B, self.plan = p, ps, names, cmin, B, plan
        self.free: set = set()   # the `a{k}` that range over every real
        self.values = values
        self.drop: tuple = ()     # the failures left out (where the bounds showed none is reached)
        self.draws: set = set()  # the `d{k}` a draw gave (0..values where the values are bounded)

    def domain(self, name: str):
        v = S.var(name)
        if name in self.free:
            return z3.BoolVal(True)
        if name in self.draws:
            return z3.And(v >= 0, v <= self.values)
        return v >= 0

    # -- the two readings: a session's start (init, to its first turn), and a turn from `T`

    def start(self, inp: S.Inputs):
        return self._read(inp, self._start)

    def turn(self, inp: S.Inputs):
        return self._read(inp, self._turn)

    def _read(self, inp, body):
        self.k = 0
        self.inp = inp
        self.apps: list = []      # the relations the path starts from: (name, args)
        self.assume: list = []    # (a, b): a >= b, what the lemmas say (a path where one fails is none)
        self.obs = {n: [] for n in self.names}
        self.tt = None   # the turn's ttft: None, a bound below its last prefill's end (pending), or "done"
        with Trace() as tr, _IteMinMax():
            try:
                head = body()
            except _Cut as c:
                head = c.head
            except X.KernelError as err:
                head = ("E", str(err))
        return tr.facts, (tuple(self.apps), head), None

    def _start(self):
        p, plan = self.p, self.plan
        attrs = tuple((n, self._fresh("d")) for n in KERNEL_ATTRS) + (("cached", 0), ("computed", 0))
        attrs += tuple((f"#entry{i}", 0) for i in sorted(plan.entries))
        if plan.counted:   # the kernel's session starts at turn 0 (exec.arrive), its count with it
            attrs = X.assign(X.assign(attrs, "turn_no", 0), TURNS, 0)
        attrs = self._block(p.init, attrs)
        if plan.loop is None and p.session is not None:
            # a shape the clauses do not follow: a later turn reads what the session block, the
            # turns and the server assign as any value an earlier turn left, a natural where every
            # assignment of it is one
            for n in sorted(_assigned((p.session, p.turn, p.server)) | {"cached"}) + [
                    f"#entry{i}" for i in sorted(plan.entries)]:
                attrs = X.assign(attrs, n, self._any(n))
        else:
            attrs = self._block(plan.prefix, attrs)
        return ("T", self._state(attrs, "T"))

    def _turn(self):
        p, plan = self.p, self.plan
        attrs = ()
        xs = []
        for n in plan.args["T"]:
            v = self._any(n)
            attrs = X.assign(attrs, n, v)
            xs.append(v)
        self.apps.append(("T", xs))
        for n in KERNEL_ATTRS:
            if not (plan.counted and n == "turn_no"):
                attrs = X.assign(attrs, n, self._fresh("d"))
        if plan.counted:   # this turn's number is the turns before it (exec: TurnGo, TurnEnd)
            attrs = X.assign(attrs, "turn_no", X.lookup(attrs, TURNS))
            attrs = X.assign(attrs, TURNS, X.lookup(attrs, TURNS) + 1)
        attrs = X.assign(attrs, "computed", 0)
        attrs = X.assign(attrs, NOW, self.inp.value("T"))
        try:
            attrs = self._block(p.turn, attrs)
            attrs = self._block(p.server, attrs)
            if RESPONSE in self.obs:   # the turn ended: its response, the clock's advance over it (holds at
                # least what the lemma says, jobs any time: a bound below, never above)
                self.obs[RESPONSE].append(X.lookup(attrs, NOW) - self.inp.value("T"))
            if self.tt not in (None, "done"):   # answered with a prefill and no decode token: its ttft
                self._ttft(self.tt)
        except _Refused:
            # the session ends at the hold, its turn's observations half made
            if not self._held():
                return None
            return None if all(self._part(x, self.obs, True) for x in self.ps) else ("R", None)
        if not self._held():
            return None
        if not all(self._part(x, self.obs, True) for x in self.ps):
            return ("B", None)
        if plan.loop is not None and X.guard(p, None, X.Env(attrs), _now(plan.loop.c)):
            attrs = self._block(plan.between, attrs)
            return ("T", self._state(attrs, "T"))
        return None

    # -- values

    def _fresh(self, kind: str, free: bool = False):
        name = f"{kind}{self.k}"
        self.k += 1
        if free:
            self.free.add(name)
        return self.inp.value(name)

    def _any(self, name: str):
        """Any value an attribute may hold: a natural where every assignment of it is one, else any real."""
        return self._fresh("d") if name in self.plan.nat else self._fresh("a", free=True)

    def _state(self, attrs, rel: str) -> list:
        """What the relation carries of the session's attributes, in order (0 for one not assigned
        yet: the linker keeps a read after its set)."""
        out = []
        for n in self.plan.args[rel]:
            v = X.lookup(attrs, n)
            out.append(0 if v is None else v)
        return out

    def _held(self) -> bool:
        return all(a >= b for a, b in self.assume)

    def _eval(self, e, attrs, seen=None):
        """e read in the turn: the clock an unknown; a pool or engine read at an admission (a
        header's `budget_left(E)`) any natural, each read its own, and `cachedin(P)` what the
        session's entry on P holds then (`seen`)."""
        reads: dict = {}

        def sub(x):
            if isinstance(x, R.Obs) and x.fn == "cachedin" and seen and x.of in seen:
                name = f"#obs{len(reads)}"
                reads[name] = seen[x.of]
                return R.Attr(name)
            if isinstance(x, R.Obs):
                name = f"#obs{len(reads)}"
                reads[name] = self._fresh("d")
                return R.Attr(name)
            return x
        e2 = V.subst(_now(e), sub)
        for n, v in reads.items():
            attrs = X.assign(attrs, n, v)
        return X.eval_expr(self.p, None, X.Env(attrs), e2)

    def _part(self, x, obs, ends: bool = False) -> bool:
        """Whether the observations keep part x; `ends`: they are a turn's as it ends (completed, or
        its hold refused), not an execution's a preemption cut."""
        if x[0] == "max":   # each observation of A at most c (below c)
            return all(v < x[2] if x[3] else v <= x[2] for v in obs[x[1]])
        if x[0] == "min":   # each observation of A at least c (above c), and one where none would fail it
            return all(v > x[2] if x[3] else v >= x[2] for v in obs[x[1]]) and \
                (not _needs_one(x) or not ends or bool(obs[x[1]]))
        # the share of L - R: each value and each observation weighed
        w = x[1]
        return bool(sum((v * o for n, (v, c) in w.items() for o in obs[n]), 0) +
                    sum(c * len(obs[n]) for n, (v, c) in w.items()) >= 0)

    # -- statements

    def _block(self, block, attrs, acc=None):
        for st in block:
            env = X.Env(attrs)
            if isinstance(st, R.DrawA):
                if self.values is not None:
                    self.draws.add(f"d{self.k}")
                attrs = X.assign(attrs, st.name, self._fresh("d"))
            elif isinstance(st, R.SetA):
                attrs = X.assign(attrs, st.name, X.eval_expr(self.p, None, env, _now(st.e)))
            elif isinstance(st, R.ObserveA):
                v = X.eval_expr(self.p, None, env, _now(st.e))
                if st.name in self.obs:
                    self.obs[st.name].append(v)
            elif isinstance(st, R.BranchS):
                attrs = self._block(st.then if X.guard(self.p, None, env, st.c) else st.else_, attrs, acc)
            elif isinstance(st, R.HoldS):
                attrs = self._hold(st, attrs, acc)
            elif isinstance(st, R.RunS):
                attrs = self._run(st, attrs, acc)
            elif isinstance(st, R.JobS):
                w = X.eval_expr(self.p, None, env, _now(st.work))
                if w < 0:
                    raise X.KernelError("R007", f"a run's work is an amount, not negative: this one is {w}")
                attrs = X.assign(attrs, NOW, X.lookup(attrs, NOW) + self._fresh("a"))
            elif isinstance(st, (R.TurnS, R.WhileS, R.EndS)):
                raise AssertionError(st)   # _scope keeps them out of what a turn reads here
        return attrs

    def _run(self, st: R.RunS, attrs, acc: "_Exec"):
        """A run in a hold's body: its work, counted for the hold's duration; in an execution a
        preemption cuts, the cut may come while it runs."""
        w = X.amount(X.eval_expr(self.p, None, X.Env(attrs), st.work), "a run's work")
        if w > 0:
            if acc.cut and self._fresh("d") > 0:
                # preempted while it runs: at its positions, or inside a growing run's work
                pos = dict(acc.pos)
                if st.growing in pos:
                    x = self._fresh("d")
                    self.assume.append((w - 1, x))
                    pos[st.growing] = pos[st.growing] + x
                self._leave(attrs, pos, acc)
            if st.mode == "prefill":
                acc.pre = acc.pre + w
            else:
                if acc.first is None:
                    acc.first = acc.pre   # the prefill before its first decode token
                acc.dec = acc.dec + w
            if st.growing in acc.pos:
                acc.pos[st.growing] = acc.pos[st.growing] + w
                acc.adv.add(st.growing)
        return attrs

    def _leave(self, attrs, pos: dict, acc: "_Exec"):
        """An execution cut by a preemption: its observations, on their own, must keep each part;
        its release caches what it computed (its positions); the hold executes again from its
        attributes and its position on the pool that cut it (`P`)."""
        if not self._held():
            raise _Cut(None)
        if not all(self._part(x, acc.obs) for x in self.ps):
            raise _Cut(("B", None))
        attrs = self._release(attrs, acc, pos)
        raise _Cut((acc.rel, self._state(attrs, acc.rel) + [pos[acc.pool]]))

    def _release(self, attrs, ex: "_Exec", pos: dict, preempted: bool = True):
        """The hold's release: on each pool, its session's cache entry becomes min(cache, what it
        computed), in whole blocks (`release`, `computed_of`, `put_cache`)."""
        if ex.hold.cache is None:
            return attrs
        ell = X.amount(X.eval_expr(self.p, None, X.Env(attrs), ex.hold.cache), "a hold's cache")
        for hp in ex.hold.pools:
            i = hp.pool
            if i not in self.plan.entries:
                continue
            comp = pos[i] if i in ex.adv else (ex.consumed[i] if preempted else ex.units[i])
            keep = comp if comp < ell else ell
            attrs = X.assign(attrs, f"#entry{i}", X.round_down(keep, self.p.pools[i].block))
        return attrs

    def _hold(self, h: R.HoldS, attrs, outer: "Optional[_Exec]"):
        """A hold: judged as it joins (refused: the session ends), admitted (its header read, what
        it consumes of the cache any natural within its units), its body run; it lasts its duration,
        at least what its runs need (the lemma). A hold a preemption may cut runs again: the path
        either reads its first execution, or one after a preemption from what an earlier one left
        (`P`); and either the execution that completes, or one a preemption cuts (`_leave`)."""
        p = self.p
        pool = self.plan.preempt.get(id(h))
        rel = f"P{self.plan.holds.index(id(h))}" if pool is not None else None
        comp = 0
        if pool is not None and self._fresh("d") > 0:
            # an execution after a preemption: what the earlier one set, and its position
            again = self.plan.body_sets[id(h)] + ["cached"] + [
                f"#entry{hp.pool}" for hp in h.pools if hp.pool in self.plan.entries]
            for n in again:
                attrs = X.assign(attrs, n, self._any(n))
            comp = self._fresh("d")
            self.apps.append((rel, self._state(attrs, rel) + [comp]))
        attrs = X.assign(attrs, "computed", comp)
        env = X.Env(attrs)
        if any(X.never_fits(p, None, env, hp) for hp in h.pools):   # the kernel's own judgement
            raise _Refused()
        if h.content is not None:   # read as it joins (`define_stream`): where it may stop the kernel
            self._eval(h.content.stream, attrs)
            if h.content.parent is not None:
                if X.amount(self._eval(h.content.common, attrs), "a content's `at`") > 0:
                    self._eval(h.content.parent, attrs)
        # what each pool's cache entry of the session holds as it is admitted: at most what its
        # release left, as others' admissions may have evicted blocks of it since
        seen = {}
        for hp in h.pools:
            i = hp.pool
            if i in self.plan.entries:
                e = self._fresh("d")
                self.assume.append((X.lookup(attrs, f"#entry{i}"), e))
                seen[p.pools[i].name] = e
        rho = X.amount(self._eval(h.reuse, attrs, seen), "a hold's reuse") if h.reuse is not None else None
        ex = _Exec(h, rel, pool, False, {}, set(), {}, {}, 0, 0, {n: [] for n in self.names})
        for hp in h.pools:
            i = hp.pool
            u = X.round_up(X.amount(self._eval(hp.units, attrs, seen), "a hold's units"), p.pools[i].block)
            if hp.reserve is not None:
                X.amount(self._eval(hp.reserve, attrs, seen), "a hold's reserve")
            c = 0
            if h.content is not None and p.pools[i].content:
                # the run of its stream's blocks others or it published (content.md, *The hit*): any
                # whole blocks within its units and its reuse, whatever the other sessions did
                c = self._fresh("d") * p.pools[i].block
                self.assume += [(u, c)] + ([(rho, c)] if rho is not None else [])
            elif h.cache is not None and i in self.plan.entries:
                # `consume`: at most its reuse and its units of the entry, in whole blocks; the
                # rest of the entry is no longer the session's
                e = seen[p.pools[i].name]
                take = e if u > e else u
                if rho is not None and rho < take:
                    take = rho
                c = X.round_down(take, p.pools[i].block)
                attrs = X.assign(attrs, f"#entry{i}", 0)
            ex.units[i], ex.consumed[i], ex.pos[i] = u, c, c
        cached = 0
        for hp in h.pools:
            c = ex.consumed[hp.pool]
            cached = c if c > cached else cached   # the kernel's max(got)
        attrs = X.assign(attrs, "cached", cached)
        if pool is not None and self._fresh("d") > 0:
            ex.cut = True   # an execution a preemption cuts: its observations its own
        if ex.cut:
            self.obs = ex.obs   # the path ends at the cut (_leave): nothing reads the turn's after it
        attrs = self._block(h.body, attrs, ex)
        if ex.cut:
            raise _Cut(None)   # it completed: no preemption cut it
        attrs = self._release(attrs, ex, ex.pos, preempted=False)
        attrs = X.assign(attrs, "computed", 0)
        if outer is not None:      # inside another hold: its time is the outer hold's
            outer.pre, outer.dec = outer.pre + ex.pre, outer.dec + ex.dec
            outer.inner = True
            return attrs
        if TTFT in self.obs and self.tt != "done":
            self._first_token(ex, X.lookup(attrs, NOW))
        d = self._fresh("a")
        if self.B is None:
            need = (1 if ex.pre > 0 else 0) + ex.dec
        else:
            k = self._fresh("k")   # ceil(pre / B): the least k with k * B >= pre
            self.assume.append((k * self.B, ex.pre))
            self.assume.append((ex.pre + self.B - 1, k * self.B))
            need = k + ex.dec
        self.assume.append((d, self.cmin * need))
        return X.assign(attrs, NOW, X.lookup(attrs, NOW) + d)

    def _first_token(self, ex: "_Exec", join):
        """The turn's ttft as the kernel records it (exec: a turn's first decode token, or as it is
        answered its last prefill's end), bounded below: its first token is the end of an iteration
        that began after the hold joined (at `join`), with the request's tokens in its batch, so at
        least c later; and where its prefill before the first decode needs k iterations (a hold no
        preemption cuts, with no hold inside: its first execution is its only one), k c later."""
        if not (ex.dec > 0 or ex.pre > 0):
            return
        pre = ex.pre if ex.first is None else ex.first
        lb = join - self.inp.value("T") + self.cmin
        if ex.pool is None and not ex.inner and self.B is not None and pre > 0:
            k = self._fresh("k")   # at least ceil(pre / B) iterations: k * B >= pre
            self.assume.append((k * self.B, pre))
            lb = join - self.inp.value("T") + self.cmin * k
        if ex.dec > 0:   # its first decode token: the ttft recorded, from the earliest prefill's end if one came first
            self._ttft(lb if self.tt is None else self.tt)
        elif self.tt is None:   # a prefill and no decode: the ttft waits for the turn's answer or a decode
            self.tt = lb

    def _ttft(self, lb):
        """A ttft observation: any time at least lb (a bound below, never above)."""
        v = self._fresh("a")
        self.assume.append((v, lb))
        self.obs[TTFT].append(v)
        self.tt = "done"


class _IteMinMax:
    """While a turn is read, the kernel's `min` and `max` of values with terms give the value the
    kernel's does and the term `If(a <= b, a, b)` (`If(a >= b, ...)`), where Python's would record
    which argument won as a branch: vLLM's request takes five of them a turn, and each doubled the
    paths the clauses must cover. The kernel's own function is restored after."""

    def __enter__(self):
        self.kernel = X.eval_fn

        def eval_fn(name, vs):
            if name in ("min", "max") and any(isinstance(v, SymNum) for v in vs):
                out = vs[0]
                for v in vs[1:]:
                    a, b = term(out), term(v)
                    if a.is_real() != b.is_real():
                        a, b = _as(a, z3.RealSort()), _as(b, z3.RealSort())
                    keep = a <= b if name == "min" else a >= b
                    # the value is the kernel's own function of the concrete values
                    cv = self.kernel(name, [concrete(out), concrete(v)])
                    out = SymNum(cv, z3.If(keep, a, b))
                return out
            return self.kernel(name, vs)
        X.eval_fn = eval_fn
        return self

    def __exit__(self, *exc):
        X.eval_fn = self.kernel


@dataclass
class _Exec:
    """A hold's execution as its body runs: the relation its cut reaches, the pool whose preemption
    cuts it, whether this one is cut, the position on that pool, the work of its runs, and the
    observations it makes when it is cut (read on their own)."""
    hold: R.HoldS
    rel: Optional[str]
    pool: Optional[int]
    cut: bool
    pos: dict        # pool -> its position: what it consumed, advanced by its growing runs
    adv: set         # the pools a growing run moved
    consumed: dict   # pool -> what its admission consumed of the cache
    units: dict      # pool -> its allocation at admission
    pre: object
    dec: object
    obs: dict
    first: object = None   # the prefill work before its first decode run, once one ran
    inner: bool = False    # a hold inside it ran


@dataclass
class _Plan:
    """What the clauses follow: the session's attributes (`state`, in order), which are naturals,
    the session block's statements before its first turn and between two turns (with the loop's
    guard), and for each hold a preemption may cut: the pool that cuts it and what its body sets."""
    state: list
    nat: set
    prefix: tuple = ()
    loop: Optional[R.WhileS] = None
    between: tuple = ()
    holds: list = field(default_factory=list)
    preempt: dict = field(default_factory=dict)
    body_sets: dict = field(default_factory=dict)
    entries: set = field(default_factory=set)   # the pools a hold caches on: the session's entry there
    args: dict = field(default_factory=dict)    # relation -> the attributes it carries, in order
    turns: bool = False   # every session runs a turn (its block's first statements are plain, then one)
    counted: bool = False  # the turns counted (TURNS carried): turn_no is each turn's own


class _Cut(Exception):
    """A path's reading ends here: head is the relation it reaches, a failure, or None."""

    def __init__(self, head):
        self.head = head


class _Refused(Exception):
    """A hold refused as it joins: its session ends with the turn's observations half made."""


def naturals(p: R.Program) -> set:
    """The attributes every assignment of which is a natural when the ones it reads are (draws, the
    kernel's serial and turn number, whole constants 0 or more; sums, products, remainders, minima
    and maxima, tests, choices and floors of them): by induction over a run, each is a natural
    whenever it has a value. The greatest such set, to a fixpoint."""
    sets = [n for n in V._nodes((p.init, p.turn, p.session or (), p.server)) if isinstance(n, R.SetA)]
    nat = ({n.name for n in sets} | {n.name for n in V._nodes(p) if isinstance(n, R.DrawA)} | set(KERNEL_ATTRS) |
           {"cached", "computed"})
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
        if e.name == "reusable":   # whole blocks of a natural, a whole block: 0 below 1
            return all(_natural(a, nat) for a in e.args)
    return False


def _assigned(x) -> set:
    return {n.name for n in V._nodes(x) if isinstance(n, (R.SetA, R.DrawA))}


def _needs_one(x) -> bool:
    """A part `smallest(A) >= c` (`> c`) that the smallest of none, 0, fails: a path needs an observation."""
    return x[2] > 0 or x[3] and x[2] >= 0


def _fact(x) -> str:
    """What each turn observes, as the claim writes it (`done >= alone` for `total(done) >=
    total(alone)`, else the conjunct of a turn's own observations), and why the claim follows: a
    sum's totals add up the turns, a largest value is one turn's."""
    if x[0] == "max":
        return (f"each turn observes {x[1]} {'<' if x[3] else '<='} {x[2]}: the largest on a path that ends is "
                "one turn's, or 0")
    if x[0] == "min" and _needs_one(x):
        return (f"each turn observes {x[1]}, and {x[1]} {'>' if x[3] else '>='} {x[2]}: the smallest on a path "
                "that ends is one turn's, and it has a turn")
    if x[0] == "min":
        return f"each turn observes {x[1]} >= {x[2]}: the smallest on a path that ends is one turn's, or 0"
    w = x[1]
    if set(w.values()) == {(1, 0), (-1, 0)} and len(w) == 2:
        a, b = sorted(w, key=lambda n: -w[n][0])
        return f"each turn observes {a} >= {b}: the totals add up the turns of every path that ends"
    return ("each turn's own observations satisfy it (its totals and counts of them, its numbers left out): "
            "the totals and counts add up the turns of every path that ends")


def plan(p: R.Program, counted: bool = False) -> "_Plan | str":
    """What the clauses follow (_Plan), or why a hold is not read per turn; `counted`: the turns
    counted, where the clauses follow every turn (a session of one turn, or of a loop of turns)."""
    nat = naturals(p)
    # a content pool's cache is no session's (put_cache): no entry carried there
    entries = {hp.pool for h in V._nodes(p.server) if isinstance(h, R.HoldS) and h.cache is not None
               for hp in h.pools if not p.pools[hp.pool].content}
    state = sorted((_assigned((p.init, p.session or (), p.turn, p.server)) | {"cached"}) - {"computed"})
    state += [f"#entry{i}" for i in sorted(entries)]
    nat = nat | {f"#entry{i}" for i in entries}
    out = _Plan(state, nat, entries=entries)
    body = p.session if p.session is not None else (R.TurnS(),)
    turns = [j for j, st in enumerate(body) if isinstance(st, R.TurnS)]
    plain = lambda block: not any(isinstance(n, (R.TurnS, R.WhileS, R.EndS, R.HoldS, R.RunS))
                                  for n in V._nodes(block))
    if turns and plain(body[:turns[0]]):
        out.turns = True
        rest = body[turns[0] + 1:]
        if not rest:
            out.prefix = body[:turns[0]]
        elif (len(rest) == 1 and isinstance(rest[0], R.WhileS) and rest[0].body
              and isinstance(rest[0].body[-1], R.TurnS) and plain(rest[0].body[:-1])):
            out.prefix, out.loop, out.between = body[:turns[0]], rest[0], rest[0].body[:-1]
        out.counted = counted and (not rest or out.loop is not None)
        if out.counted:
            out.nat = out.nat | {TURNS}
    for h in [n for n in V._nodes(p.server) if isinstance(n, R.HoldS)]:
        out.holds.append(id(h))
        cut = [hp.pool for hp in h.pools if p.pools[hp.pool].preempt is not None]
        inner = [n for n in V._nodes(h.body) if isinstance(n, R.HoldS)]
        if len(cut) > 1:
            return "a hold two of whose pools may preempt it is not read per turn"
        if cut and inner:
            return "a hold inside a hold a preemption may cut is not read per turn"
        if cut:
            out.preempt[id(h)] = cut[0]
            out.body_sets[id(h)] = sorted(_assigned(h.body))
    for h in [n for n in V._nodes(p.server) if isinstance(n, R.HoldS)]:
        if any(id(n) in out.preempt for n in V._nodes(h.body) if isinstance(n, R.HoldS)):
            return "a hold inside a hold a preemption may cut is not read per turn"
    # each relation carries what is read before it is assigned from there on (the rest is
    # assigned first: any value it had is overwritten), and each session's cache entries
    keep = [f"#entry{i}" for i in sorted(entries)]
    after = out.between + ((R.ObserveA("#guard", out.loop.c),) if out.loop is not None else ())
    live = _live(p.turn + p.server + after)
    out.args["T"] = [n for n in state if n in live and n not in keep] + keep + ([TURNS] if out.counted else [])
    top = {id(h): j for j, h in enumerate(p.server)}
    for h in [n for n in V._nodes(p.server) if isinstance(n, R.HoldS) and id(n) in out.preempt]:
        if id(h) in top:
            rest = _reads(p.server[top[id(h)] + 1:] + after)
        else:   # in a branch's arm: what anything of the server reads (more than what follows it)
            rest = _reads(p.server + after)
        want = _live((h,)) | (set(out.body_sets[id(h)]) & rest)
        out.args[f"P{out.holds.index(id(h))}"] = [n for n in state if n in want and n not in keep] + [
            f"#entry{hp.pool}" for hp in h.pools if hp.pool in entries] + ([TURNS] if out.counted else [])
    return out


def _reads(x) -> set:
    return {n.name for n in V._nodes(x) if isinstance(n, R.Attr)}


def _live(block, defined=None) -> set:
    """The attributes the statements may read before they assign them (a set in a branch's arm
    assigns nothing for sure; a hold assigns `computed` as it joins and `cached` as it is admitted,
    after its header is read)."""
    defined = set() if defined is None else defined
    live: set = set()
    for st in block:
        if isinstance(st, R.SetA):
            live |= _reads(st.e) - defined
            defined.add(st.name)
        elif isinstance(st, R.DrawA):
            defined.add(st.name)
        elif isinstance(st, R.HoldS):
            defined.add("computed")
            live |= _reads((st.pools, st.reuse)) - defined
            defined.add("cached")
            live |= _live(st.body, defined)
            live |= _reads(st.cache) - defined
        else:   # observations, runs, jobs, branches: what they read (a branch's arms all of it)
            live |= _reads(st) - defined
    return live


def _turn(p: R.Program, ps: list, names: set, fact: str, cmin, B, left, values=None, drop=(),
          claim: str = "") -> Proof | str:
    pl = plan(p, counted=values is not None)
    if isinstance(pl, str):
        return pl
    if not pl.turns and any(x[0] == "min" and _needs_one(x) for x in ps):
        return ("a session may run no turn (its block's first statements are not plain, then a turn): "
                "`smallest` above 0 needs an observation")
    t = _Turn(p, ps, names, cmin, B, pl, values)
    t.drop, t.claim = drop, claim
    paths: list = []

    def see(facts, val) -> bool:
        paths.append((list(facts), val))
        return False

    first: list = []

    def fail_first(facts, val) -> bool:
        paths.append((list(facts), val))
        why = ft.fails(facts, *val)
        if why is not None:
            first.append(why)
        return bool(first)

    try:
        undecided = S.explore_with(t.start, t.domain, left, see)[2]
        ft = _FirstTurn(t, paths, left)
        undecided += S.explore_with(t.turn, t.domain, left, fail_first)[2]
    except S.Deadline:
        return "its share of the timeout (half) ran out reading a turn"
    if first:
        return first[0]
    if undecided:
        return f"z3 could not decide {undecided} branch(es) of a turn"
    why, inv, known = _boxes(t, pl, paths, left) if pl.counted else ("not counted", None, None)
    if why is not None and known is not None and "R" not in known.fails:
        # within the draws no hold is refused, and only the paths past a refusal needed them: the
        # reading of every natural draw, those paths left out, with its own invariants (Spacer
        # finds them there far sooner than among the bounds)
        got = _turn(p, ps, names, fact, cmin, B, left, None, ("R",), claim=claim)
        if isinstance(got, Proof):
            return Proof(fact, got.lemma, known.inv + got.invariants, values)
        return got
    if why is not None:   # Spacer, told the bounds where they are invariants (each path's start within them)
        why, inv = _solve(t, pl, paths, left, known, drop)
        if why is None and known is not None:
            inv = known.inv + inv
    if why is not None:
        return why
    per = "iteration" if cmin == 1 else f"iteration of at least {cmin} s"
    lemma = (f"a hold lasts at least an {per} for each decode token and for each {B} prefill tokens (rounded up)"
             if B is not None else f"a hold lasts at least an {per} for its prefill and one for each decode token")
    return Proof(fact, lemma, inv, values)


FAILS = {
    "E": "reading a turn, the kernel may stop",
    "R": "a hold may be refused as it joins (its units above the cap): its session ends mid-turn with its "
         "observations breaking it",
    "B": "a turn's own observations may break it with its holds as long as they need",
}


def _solve(t: _Turn, pl: _Plan, paths: list, left, known=None, drop=()) -> tuple:
    """The paths as Horn clauses, solved by z3's Spacer: (why not, None) when a failure may be
    reached or z3 cannot say, else (None, the invariants it found, as the program names them)."""
    rels = {}
    for name, args in pl.args.items():
        sorts = [z3.IntSort() if n in pl.nat else z3.RealSort() for n in args]
        rels[name] = z3.Function(name, *sorts, *([z3.IntSort()] if name != "T" else []), z3.BoolSort())
    # one failure relation per kind, and one per message the kernel stops with
    errors = sorted({head[1] for _, (_, head) in paths if head is not None and head[0] == "E"})
    fails = {k: z3.Bool(k) for k in ("R", "B")}
    fails.update({("E", m): z3.Bool(f"E{j}") for j, m in enumerate(errors)})

    def app(name, args):
        f = rels[name]
        return f(*[_as(term(v), f.domain(i)) for i, v in enumerate(args)])

    # one clause per relation a path starts from and kind of head, its body the disjunction of the
    # paths' conditions (a large block): Spacer solved vLLM's chat in 8 s so, 105 s with a clause a path
    groups: dict = {}
    for facts, (apps, head) in paths:
        if head is None or head[0] in drop:
            continue
        key = head if head[0] == "E" else head[0]
        body = [app(n, a) for n, a in apps]
        gk = (tuple(b.sexpr() for b in body), key if key in fails else head[0])
        groups.setdefault(gk, (body, key, [], apps))[2].append((facts, head))
    rules = []
    clauses: list = []   # (the relations it starts from, the rest of its body, its head's kind, the head's unknowns)
    # in an order of their own, not the order the exploration met them (which z3's models decide)
    for _, (body, key, members, apps) in sorted(groups.items(), key=lambda g: str(g[0])):
        if key in fails:
            hd, hargs = fails[key], []
        else:   # the head's arguments are unknowns of their own, each path saying what they are
            f = rels[key]
            hargs = [z3.Const(f"#h{i}", f.domain(i)) for i in range(f.arity())]
            hd = f(*hargs)
        alts = []
        for facts, head in members:
            eqs = [] if key in fails else [h == _as(term(v), h.sort()) for h, v in zip(hargs, head[1])]
            conj = _no_ite(list(facts) + eqs)
            conj += [t.domain(str(v)) for v in _consts(conj) if not str(v).startswith(("#h", "#i"))]
            alts.append(z3.And(conj) if conj else z3.BoolVal(True))
        alts.sort(key=lambda a: a.hash())   # z3's structural hash: the same whatever the context
        whole = body + [t.domain(str(v)) for v in _consts(body)] + [z3.Or(alts)]
        if known is not None:   # every state a path starts from is within the bounds (_boxes)
            whole += [known.holds(n, [_as(term(v), rels[n].domain(i)) for i, v in enumerate(a)]) for n, a in apps]
        vs = _consts(whole + [hd])
        # each clause quantifies its own unknowns (declare_var would abstract every clause over all)
        rule = z3.Implies(z3.And(whole), hd)
        rules.append(z3.ForAll(vs, rule) if vs else rule)
        clauses.append((apps, whole[len(body):], key, hargs))
    hint = (repr(replace(t.p, claims=())), t.claim, t.values, tuple(drop))
    got = _HINTS.get(hint)
    if got is not None and _model(got, clauses, rels, fails, left):
        return None, got[1]
    # Spacer's time on the same clauses goes from seconds to minutes with its seed (vLLM's request:
    # one claim 10 s with one seed, none in 50 s with another, the other claim the reverse): a few
    # seeds, each a slice of the time left, the last all of it; the same clauses, the same answers
    for seed in range(SEEDS):
        start, share = left(), left() / (SEEDS - seed)

        def slice_left(start=start, share=share) -> float:
            return min(left(), share - (start - left()))
        why, inv = _spacer(t, pl, rels, fails, rules, seed, slice_left)
        if why is None:
            inv, covers = inv
            _HINTS[hint] = (covers, inv)
            while len(_HINTS) > 8:
                del _HINTS[next(iter(_HINTS))]
        if why != _SLICE:
            return why, inv
        if left() <= 0:
            break
    return "its share of the timeout (half) ran out solving a turn's clauses (z3's Spacer)", None


SEEDS = 3
_SLICE = "ran out"
BOX_TURNS = 64    # the most turns a session's boxes follow (past them: Spacer)
BOX_ROUNDS = 8    # the rounds a preempted hold's box is widened in before it is left unbounded


def _boxes(t: _Turn, pl: _Plan, paths: list, left) -> tuple:
    """With the draws bounded and the turns counted, each relation's attributes bounded turn by
    turn: at turn k+1, the most each reaches (z3's optimum) over the paths from turn k's bounds,
    a preempted hold's (P) to a fixpoint within the turn. The bounds are then checked as a model of
    the clauses: from inside them every path stays inside and none fails. (None, the invariants)
    when it is one, else (why, None): Spacer is asked then. Where no natural bound exists (a turn
    count the draws do not bound), past BOX_TURNS, it gives up."""
    def sort(rel, i):
        args = pl.args[rel]
        return z3.IntSort() if i >= len(args) or args[i] in pl.nat else z3.RealSort()

    def arity(rel):
        return len(pl.args[rel]) + (0 if rel == "T" else 1)

    def at(rel):   # where its turn count sits among its arguments
        return pl.args[rel].index(TURNS)

    groups: dict = {}
    for facts, (apps, head) in paths:
        if head is None:
            continue
        terms = tuple((n, tuple(_as(term(v), sort(n, i)) for i, v in enumerate(a))) for n, a in apps)
        names = tuple(n for n, _ in terms)
        if names not in ((), ("T",)) and not (len(names) == 2 and names[0] == "T" and names[1].startswith("P")):
            return "a path starts from relations the boxes do not follow", None, None
        key = (tuple((n, tuple(x.sexpr() for x in a)) for n, a in terms), head[0] if head[0] != "E" else head)
        if head[0] == "T" or head[0].startswith("P"):
            hs = [z3.Const(f"#h{i}", sort(head[0], i)) for i in range(arity(head[0]))]
            eqs = [h == _as(term(v), h.sort()) for h, v in zip(hs, head[1])]
        else:
            hs, eqs = [], []
        conj = _no_ite(list(facts) + eqs)
        conj += [t.domain(str(v)) for v in _consts(conj) if not str(v).startswith(("#h", "#i"))]
        # a group's heads are its own unknowns (#h), the same names in every member
        g = groups.setdefault(key, (terms, head[0], [], hs))
        g[2].append(z3.And(conj) if conj else z3.BoolVal(True))
    order = sorted(groups.items(), key=lambda kv: str(kv[0]))

    def inside(rel, xs, box):
        """xs within box (a list of upper bounds, None unbounded), its turn count n."""
        n, ub = box
        cs = [xs[at(rel)] == n]
        cs += [x <= u for x, u in zip(xs, ub) if u is not None]
        return z3.And(cs)

    opts: dict = {}   # a group's paths asserted once, each turn's bounds pushed and popped over them

    def most(body, alts, hs):
        """The most each head argument reaches (None: no bound), or False where no path is feasible."""
        o = opts.get(id(alts))
        if o is None:
            o = opts[id(alts)] = z3.Optimize()
            o.set("priority", "box")
            o.add(z3.Or(alts))
        o.set("timeout", S.z3_ms(left))
        o.push()
        try:
            o.add(body)
            hs_ = [o.maximize(h) for h in hs]
            with S.cpu_deadline(left):
                r = o.check()
            if r == z3.unsat:
                return False
            if r != z3.sat:
                raise _NoBox(f"z3 could not bound a turn's attributes ({o.reason_unknown()})")
            out = []
            for h in hs_:
                up = h.upper()
                out.append(int(up.as_long()) if z3.is_int_value(up) else
                           Fraction(up.as_fraction()) if z3.is_rational_value(up) else None)
            return out
        finally:
            o.pop()

    def hull(a, b):
        if a is None:
            return b
        return [None if x is None or y is None else max(x, y) for x, y in zip(a, b)]

    memo: dict = {}

    def step(rel_to, boxes_from: dict):
        """The box of rel_to's heads from the paths whose starts are within boxes_from (rel -> box)."""
        # a preempted hold's fixpoint asks again of the sources that did not change
        key = (rel_to, tuple(sorted((r, b[0], tuple(b[1])) for r, b in boxes_from.items())))
        if key not in memo:
            memo[key] = _step(rel_to, boxes_from)
        return memo[key]

    def _step(rel_to, boxes_from: dict):
        got = None
        for (_, kind), g in order:
            terms, _, alts, hs = g
            if kind != rel_to or {n for n, _ in terms} != set(boxes_from):
                continue
            body = [inside(n, xs, boxes_from[n]) for n, xs in terms]
            m = most(body, alts, hs)
            if m is not False:
                got = hull(got, m)
        return got

    def sources(k, tb, boxes):
        """What a path of turn k starts from: the turn's bounds, and a preempted hold's where it has one."""
        return [{"T": tb}] + [{"T": tb, q: (k + 1, boxes[q])} for q in sorted(boxes) if boxes[q] is not None]

    def iterate(pr):
        """Each turn's bounds (T[k]) and its preempted holds' (P[k]), or why there are none."""
        first = step("T", {})
        if first is None:
            return "no turn begins"
        T = [first]
        P = []   # P[k]: each preempted hold's box within turn k (rel -> upper bounds)
        for k in range(BOX_TURNS + 1):
            if left() <= 0:
                raise _NoBox("its share of the timeout ran out bounding a turn")
            tb = (k, T[k])
            boxes = {r: None for r in pr}
            for rnd in range(BOX_ROUNDS + 1):
                new = {}
                for r in pr:
                    m = None
                    for src in sources(k, tb, boxes):
                        got = step(r, src)
                        m = hull(m, got) if got is not None else m
                    new[r] = hull(boxes[r], m) if m is not None else boxes[r]
                if new == boxes:
                    break
                if rnd == BOX_ROUNDS:   # still growing: left unbounded where it grows
                    new = {r: None if new[r] is None else
                           [None if boxes[r] is None or x != y else x for x, y in zip(new[r], boxes[r] or new[r])]
                           for r in pr}
                boxes = new
            P.append(boxes)
            nxt = None
            for src in sources(k, tb, boxes):
                m = step("T", src)
                nxt = hull(nxt, m) if m is not None else nxt
            if nxt is None:
                return T, P
            T.append(nxt)
        return f"a session's turns are not bounded within {BOX_TURNS}"

    try:
        pr = sorted(r for r in pl.args if r.startswith("P"))
        # the bounds follow the program's turns, not its claims: a claim read again (its margin,
        # *Floating point*) or another of the program's finds them made (checked again below)
        key = (repr(replace(t.p, claims=())), t.values)
        got = _BOX_CACHE.get(key)
        if got is None:
            got = _BOX_CACHE[key] = iterate(pr)
            while len(_BOX_CACHE) > 8:
                del _BOX_CACHE[next(iter(_BOX_CACHE))]
        if isinstance(got, str):
            return got, None, None
        T, P = got
        # the boxes as a model of the clauses: none fails, and every head stays within them
        I = {"T": [(k, b) for k, b in enumerate(T)]}
        for r in pr:
            I[r] = [(k + 1, P[k][r]) for k in range(len(P)) if P[k][r] is not None]

        def holds(rel, xs):
            return z3.Or([inside(rel, xs, b) for b in I.get(rel, [])]) if I.get(rel) else z3.BoolVal(False)
        fails = set()
        for (_, kind), g in order:   # the heads first: the bounds are invariants only if they hold
            terms, _, alts, hs = g
            s = z3.Solver()
            s.set("timeout", S.z3_ms(left))
            s.add([holds(n, xs) for n, xs in terms] + [z3.Or(alts)] + ([z3.Not(holds(kind, hs))] if hs else []))
            with S.cpu_deadline(left):
                r = s.check()
            if r != z3.unsat:
                if hs:
                    return f"the bounds are not closed under a turn ({kind})", None, None
                fails.add(kind)
    except (_NoBox, z3.Z3Exception) as e:
        return str(e), None, None

    # each relation's hull (one box, every turn's): said, and told Spacer (the disjunction of the
    # turns' boxes made its search slower than without them)
    hulls = {r: None for r in I}
    for r, bs in I.items():
        for _, b in bs:
            hulls[r] = hull(hulls[r], b)

    def text(rel):
        # the draws' own temporaries (`~k`) left out: the program names them nowhere
        shown = [f"{_shown(n, t.p) if n != TURNS else 'turns run'} <= {_num(x)}"
                 for n, x in zip(pl.args[rel] + ([] if rel == "T" else ["computed"]), hulls[rel] or [])
                 if x is not None and not n.startswith("~")]
        return " && ".join(shown) or "true"
    w = f"with each draw 0..{t.values}, "
    inv = [(w + "as a turn begins", text("T"))]
    inv += [(w + "as a preempted hold executes again", text(r)) for r in pr if I[r]]

    def within(rel, xs):
        ub = hulls.get(rel)
        return z3.And([x <= u for x, u in zip(xs, ub) if u is not None]) if ub is not None else z3.BoolVal(False)
    known = _Known(within, inv, fails)
    if fails:
        return "within the bounds a path may fail", None, known
    return None, inv, known


@dataclass
class _Known:
    """Bounds on the relations every reachable state satisfies: `holds(rel, args)`, and their text."""
    holds: object
    inv: list
    fails: set   # the failures a path may reach from within them ("R", "B", ("E", message))


_BOX_CACHE: dict = {}
# (the program but its claims, the claim's name, the values, the failures left out) -> what Spacer
# found the relations to be, and their text: the claim read again with its margin (*Floating point*)
# asks first whether they are a model of its own clauses (its clauses differ only in its constants)
_HINTS: dict = {}


def _model(got, clauses: list, rels: dict, fails: dict, left) -> bool:
    """Whether the relations read as Spacer found them for a claim satisfy every clause, each
    failure false: then no failure is reached (the least model is within every model), whoever
    found them. Each clause is checked by z3 in the current context."""
    main = z3.main_ctx()
    covers = {n: c if c.ctx is main else c.translate(main) for n, c in got[0].items()}

    def read(name, args):
        if name not in covers:
            return z3.BoolVal(True)
        f = rels[name]
        return z3.substitute_vars(covers[name], *[_as(term(v), f.domain(i)) for i, v in enumerate(args)])
    for apps, rest, key, hargs in clauses:
        s = z3.Solver()
        s.set("timeout", S.z3_ms(left))
        head = z3.BoolVal(False) if key in fails else (
            z3.substitute_vars(covers[key], *hargs) if key in covers else z3.BoolVal(True))
        s.add([read(n, a) for n, a in apps] + rest + [z3.Not(head)])
        with S.cpu_deadline(left):
            if s.check() != z3.unsat:
                return False
    return True   # (the program but its claims, the values) -> its turns' bounds (_boxes)


class _NoBox(Exception):
    """z3 could not bound a relation's attributes."""


def _num(x) -> str:
    return str(x) if not isinstance(x, Fraction) or x.denominator != 1 else str(x.numerator)


def _spacer(t: _Turn, pl: _Plan, rels: dict, fails: dict, rules: list, seed: int, left) -> tuple:
    """One attempt of Spacer on the clauses, with its seed, in a z3 context of its own (the clauses
    translated into it in order: in the shared one, the terms' identities, and so Spacer's search,
    depended on what was asked before)."""
    ctx = z3.Context()
    fp = z3.Fixedpoint(ctx=ctx)
    fp.set(engine="spacer")
    fp.set("spacer.random_seed", seed)
    # the relations kept whole (not inlined into each other), so that their invariants can be read
    fp.set("xform.inline_linear", False)
    fp.set("xform.inline_eager", False)
    fp.set("timeout", S.z3_ms(left))
    mine = {n: f.translate(ctx) for n, f in rels.items()}
    for f in mine.values():
        fp.register_relation(f)
    for b in fails.values():
        fp.register_relation(b.decl().translate(ctx))
    for r in rules:
        fp.add_rule(r.translate(ctx))
    # every failure in one query (the invariants found once); which one, only when one may be reached
    anyf = z3.Bool("Fail", ctx)   # a failure of any kind (query's several arguments are their conjunction)
    fp.register_relation(anyf.decl())
    for b in fails.values():
        fp.rule(anyf, [b.translate(ctx)])
    watch = S.cpu_deadline(left, ctx)   # Spacer's query is one call: its CPU time kept by a watchdog
    try:
        with watch:
            r = fp.query(anyf)
            if r == z3.unsat:
                covers = {}
                for name, f in mine.items():
                    try:
                        covers[name] = fp.get_cover_delta(-1, f)
                    except z3.Z3Exception:
                        pass
                return None, (_invariants(covers, mine, pl, t.p), covers)
            if r == z3.sat:
                for k, b in fails.items():
                    if fp.query(b.translate(ctx)) == z3.sat:
                        return (FAILS[k] if k in FAILS else f"{FAILS['E']} with {k[1]}{_hint(t.p, k[1])}"), None
    except z3.Z3Exception as e:   # a timeout, or a term Spacer does not take
        if watch.fired or left() <= 0:
            return _SLICE, None
        return f"z3 (Spacer) could not decide whether a turn may fail: {e}", None
    if watch.fired or left() <= 0:
        return _SLICE, None
    return f"z3 (Spacer) could not decide whether a turn may fail ({fp.reason_unknown()})", None


class _FirstTurn:
    """A failure on a session's first turn, first execution of its holds: the start's clauses
    unrolled once, asked of plain z3 as each failing path is run, where Spacer would search for it
    at length (vLLM's `while (more)` over a draw of 2, R006)."""

    def __init__(self, t: _Turn, paths: list, left):
        self.t, self.left, self.starts = t, left, []
        inits = [(facts, head[1]) for facts, (apps, head) in paths if not apps and head is not None and head[0] == "T"]
        for j, (facts, args) in enumerate(inits):
            vs = _consts(list(facts) + [term(a) for a in args])
            ren = [(v, z3.Const(f"{v}!s{j}", v.sort())) for v in vs]
            conds = [z3.substitute(f, *ren) for f in facts] + [z3.substitute(t.domain(str(v)), *ren) for v in vs]
            self.starts.append((z3.And(conds) if conds else z3.BoolVal(True),
                                [z3.substitute(term(a), *ren) for a in args]))

    def fails(self, facts, apps, head) -> Optional[str]:
        """Why the path is a failure some session's first turn reaches, or None."""
        if head is None or head[0] not in ("E", "R", "B") or head[0] in self.t.drop or \
                [n for n, _ in apps] != ["T"] or not self.starts:
            return None
        xs = [term(x) for x in apps[0][1]]
        link = z3.Or([z3.And([c] + [x == _as(a, x.sort()) for x, a in zip(xs, args)]) for c, args in self.starts])
        s = z3.Solver()
        s.set("timeout", S.z3_ms(self.left))
        s.add(list(facts) + [self.t.domain(str(v)) for v in _consts(list(facts) + xs)] + [link])
        with S.cpu_deadline(self.left):
            r = s.check()
        if r != z3.sat:
            return None
        return FAILS[head[0]] if head[0] != "E" else f"{FAILS['E']} with {head[1]}{_hint(self.t.p, head[1])}"


def _hint(p: R.Program, err: str) -> str:
    """What a stop the reading meets may owe to the reading itself, besides the family's (stop_hint):
    a content pool's hit is read as any whole blocks within the units, past what the request knows
    where no `reuse` bounds it (docs/verify.md, *A cache keyed by content*)."""
    if err.startswith("R007") and any(isinstance(h, R.HoldS) and h.content is not None and h.reuse is None
                                      and any(p.pools[hp.pool].content for hp in h.pools)
                                      for h in V._nodes(p.server)):
        return (" (a hit on a pool keyed by content is read as any whole blocks within the hold's units "
                "whatever the other sessions published: with no `reuse` it may run past what the request "
                "knows; vLLM's `reuse (reused)` bounds it)")
    return S.stop_hint(err)


def _no_ite(conds: list) -> list:
    """The conditions with each `If(c, a, b)` of a number (the reading's min and max) an unknown of
    its own, defined by (c and it is a) or (not c and it is b): Spacer takes such a disjunction far
    better than the term."""
    cache: dict = {}
    defs: list = []

    def walk(e):
        i = e.get_id()
        if i in cache:
            return cache[i]
        if z3.is_app(e) and e.num_args() > 0:
            old = e.children()   # each call wraps every child anew: most of this walk's time
            kids = [walk(k) for k in old]
            if z3.is_app_of(e, z3.Z3_OP_ITE) and not z3.is_bool(e):
                v = z3.Const(f"#i{len(defs)}", e.sort())
                c, a, b = kids
                defs.append(z3.Or(z3.And(c, v == a), z3.And(z3.Not(c), v == b)))
                out = v
            else:   # rebuilt only where a child changed (a wrapper's identity says nothing: its id does)
                same = all(k.get_id() == o.get_id() for k, o in zip(kids, old))
                out = e if same else e.decl()(*kids)
        else:
            out = e
        cache[i] = out
        return out
    out = [walk(c) for c in conds]
    return out + defs


def _as(t, sort):
    if sort == z3.IntSort() and t.is_real():
        return z3.ToInt(t)
    if sort == z3.RealSort() and t.is_int():
        return z3.ToReal(t)
    return t


def _consts(terms) -> list:
    """The unknowns (uninterpreted constants) the terms name; each shared subterm visited once."""
    seen, out, todo = set(), [], list(terms)
    while todo:
        e = todo.pop()
        i = e.get_id()
        if i in seen:
            continue
        seen.add(i)
        if z3.is_const(e):
            if e.decl().kind() == z3.Z3_OP_UNINTERPRETED and not z3.is_bool(e):
                out.append(e)
        elif z3.is_app(e):
            todo.extend(e.children())
    return out


def _invariants(covers: dict, rels: dict, pl: _Plan, p: R.Program) -> list:
    """What Spacer found each relation to be, in the program's names: what a session keeps from
    turn to turn (T) and from a hold's execution to the next after a preemption (P)."""
    out = []
    for name, f in rels.items():
        inv = covers.get(name)
        if inv is None:
            continue
        names = pl.args[name] + ([] if name == "T" else ["computed"])
        # the relation's arguments are the bound variables 0, 1, ... in order
        args = [z3.Const(_shown(n, p), f.domain(i)) for i, n in enumerate(names)]
        inv = z3.simplify(z3.substitute_vars(inv, *args))
        if not z3.is_true(inv):
            try:
                text = show(inv)
            except (z3.Z3Exception, RecursionError):   # a form the printer does not know: z3's own
                text = str(inv)
            out.append(("as a turn begins" if name == "T" else "as a preempted hold executes again", text))
    return out


def _shown(name: str, p: R.Program) -> str:
    """An attribute as the text names it: a session's cache entry on pool P is `cachedin(P)`."""
    if name.startswith("#entry"):
        return f"cachedin({p.pools[int(name[6:])].name})"
    return name


_FLIP = {z3.Z3_OP_LE: ">", z3.Z3_OP_GE: "<", z3.Z3_OP_LT: ">=", z3.Z3_OP_GT: "<=", z3.Z3_OP_EQ: "!="}
_CMP = {z3.Z3_OP_LE: "<=", z3.Z3_OP_GE: ">=", z3.Z3_OP_LT: "<", z3.Z3_OP_GT: ">", z3.Z3_OP_EQ: "=="}


def show(e, top: bool = True) -> str:
    """A z3 formula of linear arithmetic as the language writes an expression."""
    k = e.decl().kind() if z3.is_app(e) else None
    if k == z3.Z3_OP_AND:
        return " && ".join(show(c, False) for c in e.children())
    if k == z3.Z3_OP_OR:
        s = " || ".join(show(c, False) for c in e.children())
        return s if top else f"({s})"
    if k == z3.Z3_OP_NOT:
        c = e.arg(0)
        ck = c.decl().kind() if z3.is_app(c) else None
        if ck in _FLIP:
            return f"{_sum(c.arg(0))} {_FLIP[ck]} {_sum(c.arg(1))}"
        return f"!({show(c)})"
    if k in _CMP:
        return f"{_sum(e.arg(0))} {_CMP[k]} {_sum(e.arg(1))}"
    if z3.is_true(e):
        return "true"
    if z3.is_false(e):
        return "false"
    return _sum(e)


def _sum(e) -> str:
    """A linear term: `a + b - 2 * c`, whole quotients as floor."""
    terms = e.children() if z3.is_add(e) else [e]
    out = ""
    for t in terms:
        neg, s = _term(t)
        out += (" - " if neg else " + ") + s if out else ("-" if neg else "") + s
    return out


def _term(t) -> tuple:
    """(whether it is subtracted, the term without its sign)."""
    if z3.is_mul(t) and z3.is_int_value(t.arg(0)) or z3.is_mul(t) and z3.is_rational_value(t.arg(0)):
        c = t.arg(0)
        v = c.as_fraction() if z3.is_rational_value(c) else c.as_long()
        rest = " * ".join(_atom(x) for x in t.children()[1:])
        if v == -1:
            return True, rest
        return (v < 0), f"{abs(v)} * {rest}"
    if z3.is_int_value(t) or z3.is_rational_value(t):
        v = t.as_fraction() if z3.is_rational_value(t) else t.as_long()
        return v < 0, str(abs(v))
    return False, _atom(t)


def _atom(t) -> str:
    if z3.is_app_of(t, z3.Z3_OP_IDIV):
        return f"floor(({_sum(t.arg(0))}) / {_sum(t.arg(1))})"
    if z3.is_app_of(t, z3.Z3_OP_TO_REAL) or z3.is_app_of(t, z3.Z3_OP_TO_INT):
        return _atom(t.arg(0))
    if z3.is_add(t):
        return f"({_sum(t)})"
    if z3.is_mul(t):
        return " * ".join(_atom(x) for x in t.children())
    if z3.is_app_of(t, z3.Z3_OP_MOD):
        return f"({_atom(t.arg(0))} % {_atom(t.arg(1))})"   # (9 + h) % 16, not 9 + h % 16
    if z3.is_app_of(t, z3.Z3_OP_ITE):
        return f"({show(t.arg(0))} ? {_sum(t.arg(1))} : {_sum(t.arg(2))})"
    if z3.is_int_value(t) or z3.is_rational_value(t):
        neg, s = _term(t)
        return f"(-{s})" if neg else s
    return str(t)   # a constant, or a form the language does not write
