"""Claims proved within the bound from invariants the bound itself implies (docs/verify.md, *Within
the bound*).

With at most N sessions and every draw 0..M, each session's amounts (its runs' work, its hold's
units, reserve and growth) have maxima, found by z3 over the program's own expressions. When N
sessions at their most fit every pool's cap, no admission waits for memory and no growth preempts
(the first preemption would need a pool past its cap); then every iteration serves a token, the
engine is never idle while a request waits, and the batch, the memory, the demand and an
iteration's cost are bounded. An `every iteration` claim implied by the kernel's invariants and
these is proved within the bound; a claim at end on the client's latencies is proved when the
busy-period bound (every iteration of the path, each at its most) meets it. Never said of every
number of sessions or every value: the maxima are the bound's."""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Optional

import z3

from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import invariant as V
from serq.verify import search as S
from serq.verify.sym import numeral


class Outside(Exception):
    """The program or the claim is outside what the bound's invariants are argued for."""


@dataclass
class Proof:
    facts: list        # the bound's invariants the proof used, as text


def _real(x):
    """A number's term: Int where it is whole (whole arithmetic stays linear integer arithmetic,
    which z3 decides fast at any bound), else Real."""
    x = Fraction(x)
    return z3.IntVal(x.numerator) if x.denominator == 1 else z3.RealVal(f"{x.numerator}/{x.denominator}")


def _is_int(t) -> bool:
    return t.sort() == z3.IntSort()


def _same(*ts):
    """The terms of one sort: Int when all are, else Real."""
    return ts if all(_is_int(t) for t in ts) else tuple(z3.ToReal(t) if _is_int(t) else t for t in ts)


def _floor(t):
    return t if _is_int(t) else z3.ToInt(t)


def _max2(a, b):
    a, b = _same(a, b)
    return z3.If(a > b, a, b)


def _up_to(u, b: int):
    """u rounded up to a multiple of the block b (kernel.round_up; z3's Int division is floor for b > 0)."""
    if not b:
        return u
    u = _floor(u) if _is_int(u) else -_floor(-u)
    return -((-u) / b) * b


class _Terms:
    """The program's expressions as z3 terms (Real) over a session's unknowns: one session read on
    its own, its draws naturals 0..M, what it reads of the machine any value in that value's range."""

    def __init__(self, p: R.Program, regs: Optional[dict] = None):
        self.p = p
        self.cons: list = []
        self.k = 0
        self.regs = regs or {}   # a register's name -> (least, most) of every value it takes

    def fresh(self, lo=0, hi=None, whole=True):
        self.k += 1
        v = z3.Int(f"b{self.k}") if whole else z3.Real(f"b{self.k}")
        self.cons.append(v >= lo)
        if hi is not None:
            self.cons.append(v <= hi)
        return v

    def term(self, e, env: dict):
        t = self.term
        if isinstance(e, R.Num):
            return _real(e.v)
        if isinstance(e, R.Attr):
            if env.get(e.name) is None:   # unset, or set on one side of a branch or loop only (_merge)
                raise Outside(f"`{e.name}` is read where the bound's reading has no value for it")
            return env[e.name]
        if isinstance(e, R.Not):
            return z3.If(t(e.e, env) == 0, _real(1), _real(0))
        if isinstance(e, R.Ite):
            return z3.If(t(e.c, env) != 0, *_same(t(e.a, env), t(e.b, env)))
        if isinstance(e, R.Bin):
            a, b = _same(t(e.l, env), t(e.r, env))
            op = e.op
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                if isinstance(e.r, R.Num) and e.r.v != 0:
                    return z3.ToReal(a) / z3.ToReal(b) if _is_int(a) else a / b
                raise Outside("a quotient by a value the program computes")
            if op == "%":
                raise Outside("a remainder")
            cmp = {"==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b, "<=": lambda: a <= b,
                   ">": lambda: a > b, ">=": lambda: a >= b, "&&": lambda: z3.And(a != 0, b != 0),
                   "||": lambda: z3.Or(a != 0, b != 0)}[op]()
            return z3.If(cmp, _real(1), _real(0))
        if isinstance(e, R.Fn):
            args = list(_same(*[t(a, env) for a in e.args])) if e.args else []
            if e.name in ("min", "max"):
                out = args[0]
                for x in args[1:]:
                    out = z3.If(x < out, x, out) if e.name == "min" else z3.If(x > out, x, out)
                return out
            if e.name == "sum":
                return z3.Sum(*args) if args else _real(0)
            if e.name == "floor":
                return _floor(args[0])
            if e.name == "ceil":
                return args[0] if _is_int(args[0]) else -_floor(-args[0])
            if e.name == "round":   # half up (num.qround)
                return args[0] if _is_int(args[0]) else _floor(args[0] + _real(Fraction(1, 2)))
            if e.name == "abs":
                return z3.If(args[0] >= 0, args[0], -args[0])
            if e.name == "reusable":
                if not (isinstance(e.args[1], R.Num) and e.args[1].v > 0):
                    raise Outside("`reusable` of a block the program computes")
                n, b = args
                if _is_int(n):
                    return z3.If(n >= 1, ((n - 1) / b) * b, _real(0))
                return z3.If(n >= 1, _floor((n - 1) / b) * b, _real(0))
        if isinstance(e, R.Obs):
            i = next((k for k, q in enumerate(self.p.pools) if q.name == e.of), None)
            if e.fn == "cachedin" and i is not None:
                cap = self.p.pools[i].cap
                return self.fresh(0, cap)
            if e.fn == "budget_left" and e.of == self.p.engine.name and isinstance(self.p.engine.budget, R.Num):
                return self.fresh(0, int(self.p.engine.budget.v))
            raise Outside(f"`{e.fn}({e.of})` read by a session")
        if isinstance(e, R.Ctx) and e.name == "now":
            return self.fresh(whole=False)
        if isinstance(e, R.StepVar):   # an `each at most` reads the residents: any natural
            return self.fresh()
        if isinstance(e, R.Reg) and e.name in self.regs:   # a header's read of a register: any value it takes
            lo, hi = self.regs[e.name]
            v = self.fresh(whole=False)
            self.cons += [v >= _real(lo), v <= _real(hi)]
            return v
        raise Outside(f"{type(e).__name__} read where the bound's reading does not follow it")


def _solver(left) -> z3.Solver:
    if left() <= 0:
        raise S.Deadline()
    s = z3.Solver()
    s.set("timeout", max(1, S.z3_ms(left)))
    return s


def _most(cons: list, t, left) -> Optional[int]:
    """The least natural K with t <= K wherever cons hold (z3), or None when none within 2^62; t a
    term, or a list of (where, term): the most of each term where its condition holds (asked one
    at a time, the last first, each only above the most so far, each question on a solver of its
    own: a disjunction of 21 turns' terms, or z3's incremental mode, is far slower)."""
    occ = t if isinstance(t, list) else [(z3.BoolVal(True), t)]
    best = 0   # amounts are naturals: a term 0 or less has most 0
    for w, x in reversed(occ):
        def above(k, x=x, w=w):
            s = _solver(left)
            s.add(cons)
            s.add(w, x > k)
            r = s.check()
            if r == z3.unknown:
                raise Outside("z3 could not bound an amount")
            if r != z3.sat:
                return None
            v = s.model().eval(x, model_completion=True)
            return Fraction(v.as_fraction()) if z3.is_rational_value(v) else Fraction(v.as_long())
        v = above(best)
        if v is None:
            continue
        lo = max(best, -(-v.numerator // v.denominator) - 1)   # x can exceed lo
        hi = lo + 1
        while above(hi) is not None:
            lo, hi = hi, hi * 4
            if hi > 1 << 62:
                return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if above(mid) is not None:
                lo = mid
            else:
                hi = mid
        best = hi
    return best


def _can(cons: list, fact, left) -> bool:
    s = _solver(left)
    s.add(cons)
    s.add(fact)
    r = s.check()
    if r == z3.unknown:
        raise Outside("z3 could not decide a fact of an amount")
    return r == z3.sat


def _amount_ok(cons, t, what, left, where=None):
    # an amount the kernel reads as a run error (negative) or refuses (a fraction) leaves the claim to the paths
    bad = t < 0 if _is_int(t) else z3.Or(t < 0, t != z3.ToReal(z3.ToInt(t)))
    if _can(cons, bad if where is None else z3.And(where, bad), left):
        raise Outside(f"{what} may be negative or a fraction within the bound (a run error the paths decide)")


PLAIN = (R.SetA, R.DrawA, R.ObserveA)
LOOP_MOST = 64   # turns of a session's loop unrolled before giving up (`maxima`)


def _plain(stmts, holds: list, where: str):
    """Init, turn and server: sets, draws, observations, branches of them, and holds: nothing that
    blocks before a hold, so a turn's hold joins as the turn starts."""
    for st in stmts:
        if isinstance(st, R.HoldS):
            holds.append(st)
        elif isinstance(st, R.BranchS):
            _plain(st.then, holds, where)
            _plain(st.else_, holds, where)
        elif not isinstance(st, PLAIN):
            raise Outside(f"{where}'s {type(st).__name__} (only sets, draws, observations, branches of them and "
                          "one hold)")


def _path_holds(stmts) -> int:
    """The most holds one run through the statements reaches (a branch's arms: the larger)."""
    n = 0
    for st in stmts:
        if isinstance(st, R.HoldS):
            n += 1
        elif isinstance(st, R.BranchS):
            n += max(_path_holds(st.then), _path_holds(st.else_))
    return n


def _between(stmts):
    """A session block: its turns, and between them sets, draws, observations, stage jobs (a delay or
    ps stage: no engine iteration, *Stages*), branches and loops of these."""
    for st in stmts:
        if isinstance(st, (R.BranchS, R.WhileS)):
            _between(st.then + st.else_ if isinstance(st, R.BranchS) else st.body)
        elif not isinstance(st, PLAIN + (R.TurnS, R.JobS)):
            raise Outside(f"a session block's {type(st).__name__} (only turns, sets, draws, observations, "
                          "stage jobs, branches and loops)")


def _scope(p: R.Program) -> tuple:
    """The program's holds: one, or one a turn of several a branch chooses among, each waiting in a
    queue of its own the engine admits (two kinds of request, two queues); or Outside with the reason."""
    if p.arrive == "closed":
        raise Outside("a closed population")
    if p.trace:
        raise Outside("a trace")
    why = V.refusal(p)
    if why is not None:
        raise Outside(why)
    if any(q.content for q in p.pools):
        raise Outside("a pool keyed by content")
    holds: list = []
    _plain(p.init, holds, "the init")
    _plain(p.turn + p.server, holds, "a turn")
    if p.session is not None:
        _between(p.session)
    if not holds:
        raise Outside("no hold")
    if len(holds) > 1 and (any(isinstance(n, R.HoldS) for n in V._nodes(p.init)) or _path_holds(p.turn + p.server) > 1):
        raise Outside("not one hold a session or a turn")
    for h in holds:
        if h.content is not None:
            raise Outside("a hold with a content")
        for st in h.body:
            if not isinstance(st, (R.SetA, R.ObserveA, R.RunS)):
                raise Outside(f"a hold's {type(st).__name__} (only sets, observations and runs)")
            if isinstance(st, R.RunS) and st.growing is not None and st.growing not in {hp.pool for hp in h.pools}:
                raise Outside("a run grows a pool its hold does not take")
    adm = [i for i, q in enumerate(p.pools) if q.admitted]
    firsts = sorted({h.pools[0].pool for h in holds})
    if adm != firsts or any(hp.pool in adm for h in holds for hp in h.pools[1:]):
        raise Outside("a hold does not wait in a queue the engine admits, or one the engine admits none waits in")
    e = p.engine
    if e.keys or any(s.keys for s in _stmts(e.body) if isinstance(s, R.IServe) and s.keys) or \
            any(q.queue_keys for q in p.pools):
        raise Outside("an order of the residents or of a queue (its keys are not read here)")
    if e.exclusive:
        raise Outside("`exclusive prefill`")
    if _shape(e) is None:
        raise Outside("a schedule other than `advance running; admit waiting [while (running.preempted == 0)]` "
                      "or SGLang's (`advance running only (!decoding); admit waiting [while (running.preempted "
                      "== 0)]; branch (batch.prefilled == 0) { advance running; }`), with register sets")
    if e.budget is not None and not (isinstance(e.budget, R.Num) and e.budget.v >= 1 and e.budget.v == int(e.budget.v)):
        raise Outside("a tokens cap that is not a constant of 1 or more")
    if e.granule is not None and not (isinstance(e.granule, R.Num) and e.granule.v == int(e.granule.v) and e.granule.v >= 0):
        raise Outside("a granule that is not a constant")
    if any(isinstance(x, R.Reg) for x in V._nodes((e.chunk,) + tuple(st.chunk for st in _stmts(e.body)
                                                                       if isinstance(st, (R.IServe, R.IAdmit))))):
        raise Outside("a chunk cap that reads a register")
    return tuple(holds)


GATE = R.Bin("==", R.StepVar("Preempted"), R.Num(0))
PREFILLS_FIRST = (R.IServe(R.Not(R.Ctx("decoding")), None, None), R.IAdmit(None, GATE, None),
                  R.IBranch(R.Bin("==", R.StepVar("Npre", True), R.Num(0)), (R.IServe(None, None, None),), ()))


def _stmts(body):
    """The schedule's statements, a branch's arms' too."""
    for st in body:
        yield st
        if isinstance(st, R.IBranch):
            yield from _stmts(st.then)
            yield from _stmts(st.else_)


def _shape(e: R.Engine) -> Optional[str]:
    """The schedule's shape, its register sets aside: "vllm" (`advance running; admit waiting [while
    (running.preempted == 0)]`: every iteration serves the running, then admits), "prefills first"
    (SGLang's: the running prefills, the admissions, and the decodes only in an iteration with no
    prefill), else None. Either serves a token in every iteration while a request is resident or
    waits and nothing waits for memory: a running prefill is served, else a waiting head admitted
    and served, else every decoder served."""
    body = tuple(st for st in e.body if not isinstance(st, R.ISet))
    if any(isinstance(x, R.Reg) for x in V._nodes(body) if x is not None):
        return None
    if len(body) == 2 and isinstance(body[0], R.IServe) and body[0].only is None and \
            isinstance(body[1], R.IAdmit) and body[1].only is None and body[1].gate in (None, GATE):
        return "vllm"
    norm = lambda st: replace(st, chunk=None) if isinstance(st, (R.IServe, R.IAdmit)) else st  # noqa: E731
    if len(body) == 3 and isinstance(body[1], R.IAdmit) and \
            tuple(map(norm, (body[0], replace(body[1], gate=GATE), body[2]))) == PREFILLS_FIRST:
        return "prefills first"
    return None


REG_ROUNDS = 8   # widenings of a register's range before it is called unbounded


def _registers(p: R.Program, left) -> dict:
    """Each register's least and most value over every run: from its initial value, widened by what
    its sets give from within the range (step values any naturals, z3's optimum) to a fixpoint."""
    regs = {name: (Fraction(v), Fraction(v)) for name, v in p.engine.registers}
    sets = [st for st in _stmts(p.engine.body) if isinstance(st, R.ISet)]
    for _ in range(REG_ROUNDS):
        new = dict(regs)
        for st in sets:
            tm = _Terms(p, regs)
            t = tm.term(st.e, {})
            lo, hi = new[st.name]
            for up in (False, True):
                o = z3.Optimize()
                o.set("timeout", max(1, S.z3_ms(left)))
                o.add(tm.cons)
                h = o.maximize(t) if up else o.minimize(t)
                if o.check() != z3.sat:
                    raise Outside(f"z3 could not bound the register `{st.name}`")
                b = h.upper() if up else h.lower()
                if not (z3.is_rational_value(b) or z3.is_int_value(b)):
                    raise Outside(f"the register `{st.name}` has no {'most' if up else 'least'} value")
                x = Fraction(b.as_fraction()) if z3.is_rational_value(b) else Fraction(b.as_long())
                lo, hi = (lo, max(hi, x)) if up else (min(lo, x), hi)
            new[st.name] = (lo, hi)
        if new == regs:
            return regs
        regs = new
    raise Outside(f"a register's values are not bounded within {REG_ROUNDS} widenings")


GIVEN_NODES = (R.Num, R.Attr, R.Not, R.Ite, R.Bin, R.Fn)


def _given(tm: _Terms, g, env: dict):
    """A claim's `given` as a term over the session's unknowns, read as the kernel reads it: once the
    init has run (exec.arrive: init, then the given, then the turns), on the attributes it set and
    the built-in ones. Outside where it reads anything else (the machine, the clock)."""
    bad = next((x for x in V._nodes(g) if not isinstance(x, GIVEN_NODES)), None)
    if bad is not None:
        raise Outside(f"it reads {type(bad).__name__}")
    return tm.term(g, dict(env))


@dataclass
class Maxima:
    """A session's most, over draws 0..M and every turn the bound lets it run: per pool its
    footprint (allocation or reservation), the positions its growing runs reach, a turn's largest
    prefill, its prefill and decode work, its prefill runs; the most turns a session runs."""
    F: dict
    pos: int
    pw: int
    pt: int
    dt: int
    npre: int
    decodes: bool
    turns: int = 1


_UNSET = None   # an attribute set on one side of a branch or loop only: reading it is outside


def _merge(tm, c, a: dict, b: dict) -> dict:
    """The attributes after a branch: a's where c holds, else b's; each that differs a fresh unknown
    so equal to its If (the terms of a loop unrolled 20 times stay small)."""
    out = {}
    for k in a.keys() | b.keys():
        x, y = a.get(k, _UNSET), b.get(k, _UNSET)
        if x is _UNSET or y is _UNSET:
            out[k] = _UNSET
        elif x is y:
            out[k] = x
        else:
            x, y = _same(x, y)
            tm.k += 1
            v = z3.Const(f"m{tm.k}", x.sort())
            tm.cons.append(v == z3.If(c, x, y))
            out[k] = v
    return out


def maxima(p: R.Program, hs: tuple, n: int, values: int, left, given=None) -> Maxima:
    """A session's most; under `given` (a claim's), over the sessions that satisfy it: the claim's
    family is the workloads whose every session does (the reference's *Claims*). The session is
    read as the kernel runs it (exec.arrive: init, the given, then its block, a single-turn one
    `turn`), every draw its own unknown 0..M, a branch both ways under its condition, and a loop
    unrolled while z3 finds a session within the bound that enters it again (turn_no 0 at the first
    turn, one more each turn: exec's TurnGo); each turn's hold read where that turn is run."""
    tm = _Terms(p, _registers(p, left) if p.engine.registers else None)
    env = {"serial": tm.fresh(0, n - 1), "turn_no": _real(0), "cached": _real(0), "computed": _real(0)}
    amounts = []   # (term, what, where)
    occ = []       # each hold read: (where, units, reserves, consumed, works [(mode, work, growing)])
    turns = []     # where each turn read runs
    if given is not None and any(isinstance(st, R.HoldS) for st in p.init):
        raise Outside("a given read after a hold in the init")

    checks = []   # (where, fact, why): each a run error were fact to hold where it is read; asked together
    entered = {z3.BoolVal(True).get_id()}   # conditions z3 found some session within the bound meets

    def check(where, fact, why):
        checks.append((where, fact, why))

    def test(c, env, where):
        t = tm.term(c, env)
        check(where, z3.And(t != 0, t != 1), "a guard may be other than 0 or 1 within the bound (R006)")
        return t == 1

    def hold(st, env, where):
        env["computed"] = _real(0)   # judged with `computed` 0 (no preemption: see `prove`)
        units, reserves, consumed = {}, {}, {}
        for hp in st.pools:
            u = tm.term(hp.units, env)
            amounts.append((u, "a hold's units", where))
            units[hp.pool] = _up_to(u, p.pools[hp.pool].block)
            r = tm.term(hp.reserve, env) if hp.reserve is not None else _real(0)
            if hp.reserve is not None:
                amounts.append((r, "a hold's reserve", where))
            reserves[hp.pool] = r
        rho = tm.term(st.reuse, env) if st.reuse is not None else None
        if rho is not None:
            amounts.append((rho, "a hold's reuse", where))
        got = []
        for hp in st.pools:   # what admission consumes of the cache: within the allocation and the reuse
            c = tm.fresh(0) if st.cache is not None else _real(0)
            tm.cons.append(c <= units[hp.pool])
            if rho is not None:
                tm.cons.append(c <= rho)
            consumed[hp.pool] = c
            got.append(c)
        cached = got[0]
        for c in got[1:]:
            cached = _max2(c, cached)
        env["cached"] = cached
        works = []
        for b in st.body:
            if isinstance(b, R.SetA):
                env[b.name] = tm.term(b.e, env)
            elif isinstance(b, R.ObserveA):
                tm.term(b.e, env)
            else:
                w = tm.term(b.work, env)
                amounts.append((w, "a run's work", where))
                works.append((b.mode, w, b.growing))
        if st.cache is not None:
            amounts.append((tm.term(st.cache, env), "a hold's cache", where))
        env["computed"] = _real(0)   # exec's Scope: a released hold's session reads computed 0
        occ.append((where, units, reserves, consumed, works))

    def block(stmts, env, where):
        for st in stmts:
            if isinstance(st, R.DrawA):
                env[st.name] = tm.fresh(0, values)
            elif isinstance(st, R.SetA):
                env[st.name] = tm.term(st.e, env)
            elif isinstance(st, R.ObserveA):
                tm.term(st.e, env)
            elif isinstance(st, R.HoldS):
                hold(st, env, where)
            elif isinstance(st, R.JobS):   # a stage's job: a time >= 0 (R007), no engine iteration
                w = tm.term(st.work, env)
                check(where, w < 0, "a stage job's work may be negative within the bound (R007)")
            elif isinstance(st, R.TurnS):
                if len(turns) >= LOOP_MOST:
                    raise Outside(f"a session may run more than {LOOP_MOST} turns within the bound")
                env["turn_no"] = env["#turns"]
                turns.append(where)
                block(p.turn + p.server, env, where)
                env["#turns"] = env["#turns"] + 1
            elif isinstance(st, R.BranchS):
                c = test(st.c, env, where)
                a = block(st.then, dict(env), z3.And(where, c))
                b = block(st.else_, dict(env), z3.And(where, z3.Not(c)))
                env.clear()
                env.update(_merge(tm, c, a, b))
            elif isinstance(st, R.WhileS):
                at = where   # the next round is entered only from this one
                for _ in range(LOOP_MOST + 1):
                    go = z3.And(at, test(st.c, env, at))
                    if not _can(tm.cons, go, left):
                        break
                    entered.add(go.get_id())
                    merged = _merge(tm, go, block(st.body, dict(env), go), env)
                    env.clear()
                    env.update(merged)
                    at = go
                else:
                    raise Outside(f"z3 does not show a session's loop ends within {LOOP_MOST} rounds in the bound")
            else:
                raise AssertionError(st)
        return env

    env = block(p.init, env, z3.BoolVal(True))
    if given is not None:   # the init has run: the kernel reads the given here (exec.arrive)
        tm.cons.append(_given(tm, given, env) != 0)
    env["#turns"] = _real(0)
    block(p.session if p.session is not None else (R.TurnS(),), env, z3.BoolVal(True))
    cons = [z3.And(tm.cons)]   # one term: each question below adds it to a solver of its own, at once
    if not _can(cons, z3.BoolVal(True), left):
        raise Outside("no session within the bound satisfies the given")
    for t, what, where in amounts:
        bad = t < 0 if _is_int(t) else z3.Or(t < 0, t != z3.ToReal(z3.ToInt(t)))
        checks.append((where, bad, f"{what} may be negative or a fraction within the bound (a run error the "
                                   "paths decide)"))
    if checks and _can(cons, z3.Or([z3.And(w, f) for w, f, _ in checks]), left):
        raise Outside(next(why for w, f, why in checks if _can(cons, z3.And(w, f), left)))
    occ = [o for o in occ if o[0].get_id() in entered or _can(cons, o[0], left)]
    if not occ:
        raise Outside("no session within the bound holds")

    known: dict = {}   # a term asked again (a prefill's work and the prefill work of one run) is not

    def most(ts, what):
        key = tuple((w.get_id(), x.get_id()) for w, x in ts)
        if key not in known:
            known[key] = _most(cons, ts, left)
        if known[key] is None:
            raise Outside(f"{what} has no maximum within the bound")
        return known[key]
    F, pos = {}, 0
    for i in _pools(hs):
        fs, reach = [], []
        for where, units, reserves, consumed, works in occ:
            if i not in units:   # a hold of another queue
                continue
            r = sum((w for _, w, g in works if g == i), consumed[i])
            fs.append((where, _max2(_max2(units[i], reserves[i]), _up_to(r, p.pools[i].block))))
            reach.append((where, r))
        F[i] = most(fs, f"session's footprint on {p.pools[i].name}")
        if any(g == i for o in occ for _, _, g in o[4]):
            pos = max(pos, most(reach, "a growing run's position"))
    pre = [(o[0], w) for o in occ for mode, w, _ in o[4] if mode == "prefill"]
    npre = max(sum(1 for mode, _, _ in o[4] if mode == "prefill") for o in occ)
    decodes = any(mode == "decode" for o in occ for mode, _, _ in o[4])
    pw = most(pre, "a prefill's work") if pre else 0

    def total(mode):
        ws = [[w for m_, w, _ in o[4] if m_ == mode] for o in occ]
        return [(o[0], w[0] if len(w) == 1 else z3.Sum(*_same(*w))) for o, w in zip(occ, ws)]
    pt = most(total("prefill"), "the prefill work") if npre else 0
    dt = most(total("decode"), "the decode work") if decodes else 0
    nturns = sum(1 for w in turns if w.get_id() in entered or _can(cons, w, left))
    return Maxima(F, pos, pw, pt, dt, npre, decodes, max(nturns, 1))


def _chunk_binds(p: R.Program, pw: int, left) -> Optional[int]:
    """The least `each at most` of 1 or more a prefill of at most pw tokens may meet below its work
    (None: no cap binds: 0 reads as none, *Engines*)."""
    e = p.engine
    least = None
    for x in {e.chunk, *(s.chunk for s in _stmts(e.body) if isinstance(s, (R.IServe, R.IAdmit)) and s.chunk is not None)}:
        tm = _Terms(p)
        t = tm.term(x, {})
        _amount_ok(tm.cons, t, "an `each at most`", left)
        if _can(tm.cons, z3.And(t >= 1, t < pw), left):
            lo, hi = 1, pw - 1   # its least of 1 or more, which is below pw
            while lo < hi:
                mid = (lo + hi) // 2
                if _can(tm.cons, z3.And(t >= 1, t <= mid), left):
                    hi = mid
                else:
                    lo = mid + 1
            least = lo if least is None else min(least, lo)
    return least


def _pools(hs: tuple) -> list:
    """The pools the holds take, in order."""
    return sorted({hp.pool for h in hs for hp in h.pools})


@dataclass
class Bound:
    """What the bound implies of every iteration of every path of at most n sessions."""
    n: int
    mx: Maxima
    lemmas: list       # V.Lemma, within the bound
    iterations: int    # the most iterations a path has
    facts: list        # text
    t_min: Optional[int] = None   # the least tokens of a batch of prefills none of which ends (None: no such batch)
    B: Optional[int] = None       # the tokens cap
    g: Optional[int] = None       # the granule (None: none)
    cap: Optional[int] = None     # the least `each at most` a prefill may meet below its work (None: none binds)
    hold: Optional[R.HoldS] = None


_MAXIMA: dict = {}   # (the program but its claims, n, values, given): a claim's margin is verified on the same body


def _maxima(p: R.Program, hs: tuple, n: int, values: int, left, given=None) -> Maxima:
    key = (replace(p, claims=()), n, values, given)
    if key not in _MAXIMA:
        if len(_MAXIMA) > 64:
            _MAXIMA.clear()
        _MAXIMA[key] = maxima(p, hs, n, values, left, given)
    return _MAXIMA[key]


def bound(p: R.Program, n: int, values: int, left, given=None) -> Bound:
    """The bound's invariants; under a claim's `given` (None: every workload), those of its family.
    A given this reading cannot follow is not assumed: the invariants are then every workload's,
    which hold on the family too (said in the facts)."""
    hs = _scope(p)
    note = []
    if given is not None:
        try:
            mx = _maxima(p, hs, n, values, left, given)
            note = ["every session satisfies the claim's given (its family: read once the init has run)"]
        except Outside as o:   # never assumed where not read: every workload's maxima cover the family
            mx = _maxima(p, hs, n, values, left)
            note = [f"the claim's given is not read here ({o}): the invariants of every workload, its family's too"]
    else:
        mx = _maxima(p, hs, n, values, left)
    for i in _pools(hs):
        cap = p.pools[i].cap
        if cap is not None and n * mx.F[i] > cap:
            raise Outside(f"{n} sessions at their most ({mx.F[i]} each) do not fit {p.pools[i].name}'s "
                          f"cap of {cap}: an admission may wait for memory, a growth preempt")
    e = p.engine
    B = int(e.budget.v) if e.budget is not None else None
    g = int(e.granule.v) if e.granule is not None and e.granule.v else None
    cap = _chunk_binds(p, mx.pw, left)
    # the first request an empty batch serves gets a token (no granule passes it over)
    if g is not None and (cap is not None or (B is not None and mx.pw > B)):
        raise Outside("a granule may pass over a prefill in an empty batch")
    # a batch of prefills none of which finishes has at least t_min tokens (the budget ran out, or a cap bound)
    if B is None:
        t_min = cap
    elif g is None:
        t_min = B if cap is None else min(B, cap)
    else:
        t_min = max(g, B - g + 1)
    t1 = max(mx.pw, 1 if mx.decodes else 0)
    nt = n * mx.turns   # the turns of a path: each session's at most mx.turns, one hold each
    iters = nt * (mx.dt + mx.npre) + (0 if t_min is None else nt * mx.pt // t_min)
    tk = n * t1 if B is None else min(B, n * t1)
    eng = e.name
    L = []

    def lem(key, text, fact, *qs):
        L.append(V.Lemma(key, text, fact, tuple(qs)))
    tok = ("tokens", R.StepVar("Ntok", True))
    lem("b:preempted", "running.preempted == 0", lambda v: v("running.preempted") == 0,
        ("running.preempted", R.StepVar("Preempted")))
    lem("b:tokens1", "tokens >= 1", lambda v: v("tokens") >= 1, tok)
    lem("b:tokens", f"tokens <= {tk}", lambda v: v("tokens") <= tk, tok)
    lem("b:prefilled", f"prefilled <= {min(tk, n * mx.pw)}", lambda v: v("prefilled") <= min(tk, n * mx.pw),
        ("prefilled", R.StepVar("Npre", True)))
    nd = n if mx.dt > 0 else 0   # a run of no work completes at once (exec.run_stmt): no decoder
    for name, x, most in (("decoders", R.StepVar("Ndec", True), nd), ("residents", R.StepVar("Nres"), n),
                          (f"queue({eng})", R.Obs("queue", eng), n), ("arrived", R.Ctx("arrived"), n),
                          ("running.decoding", R.StepVar("Ndec"), nd), ("waiting.admitted", R.StepVar("Admitted"), n),
                          ("waiting.count", R.StepVar("Queued"), n)):
        lem(f"b:{name}", f"{name} <= {most}", lambda v, name=name, most=most: v(name) <= most, (name, x))
    kv = n * mx.pos
    lem("b:kv", f"kv_decode + kv_prefill <= {kv}", lambda v: v("kv_decode") + v("kv_prefill") <= kv,
        ("kv_decode", R.StepVar("Kvb", True)), ("kv_prefill", R.StepVar("Kvp", True)))
    lem("b:running.kv", f"running.kv_decode + running.kv_prefill <= {kv}",
        lambda v: v("running.kv_decode") + v("running.kv_prefill") <= kv,
        ("running.kv_decode", R.StepVar("Kvb")), ("running.kv_prefill", R.StepVar("Kvp")))
    lem("b:demand", f"demand <= {n * t1}", lambda v: v("demand") <= n * t1, ("demand", R.Ctx("demand")))
    lem("b:served", f"served <= {nt * (mx.pt + mx.dt)}", lambda v: v("served") <= nt * (mx.pt + mx.dt),
        ("served", R.Ctx("served")))
    for i, q in enumerate(p.pools):
        f = mx.F.get(i, 0)
        for fn, most in (("holders", n if i in mx.F else 0), ("used", n * f), ("queued", n)):
            nm = f"{fn}({q.name})"
            lem(f"b:{nm}", f"{nm} <= {most}", lambda v, nm=nm, most=most: v(nm) <= most, (nm, R.Obs(fn, q.name)))
    facts = [f"at most {n} sessions, each one request at a time"] + note + [
             f"a session's most (draws 0..{values}"
             + (f", each of its at most {mx.turns} turns, one hold a turn" if p.session is not None else "")
             + f"): prefill {mx.pt} ({mx.npre} run(s), the largest {mx.pw}), "
             f"decode {mx.dt}" + "".join(f", {p.pools[i].name} {f}" for i, f in mx.F.items())]
    if p.session is not None and any(h.cache is not None for h in hs):
        # exec.room_for counts allocations and reservations only; make_room evicts cached entries
        # (least recently released first) to fit: a session's cache between its turns never makes one wait
        facts.append("a session's cache between turns is evicted as room is needed (exec.room_for counts "
                     "holds and reservations, make_room evicts the cache): it makes no admission or growth wait")
    facts += [
             "no preemption, no wait for memory: " + ", ".join(
                 f"{n} x {mx.F[i]} <= {p.pools[i].cap} ({p.pools[i].name})"
                 for i in _pools(hs) if p.pools[i].cap is not None)]
    if len(hs) > 1:
        facts.insert(1, f"a turn holds one of {len(hs)} holds, each in a queue of its own the engine admits: "
                        "the most of each amount is over all of them")
    return Bound(n, mx, L, iters, facts, t_min, B, g, cap, hs[0] if len(hs) == 1 else None)


def _kernel_lemmas(p: R.Program) -> list:
    from serq.verify import step
    chk = step.checked(p)
    if chk.failed:
        return []
    return [lm for lm in V.lemmas(p) if chk.lemmas.get(lm.key, "not checked") is None]


def _needed(p: R.Program, e, want: bool, kernel: list, lems: list, left, aggs: bool = False) -> list:
    """The bound's lemmas the proof needs: each dropped in turn, the last first, while it still closes."""
    need = list(lems)
    for lm in reversed(lems):
        rest = [x for x in need if x is not lm]
        if V._implied(p, e, want, kernel + rest, left, aggs=aggs) is None:
            need = rest
    return need


def _cost_most(p: R.Program, lems: list, left) -> Fraction:
    """The most an iteration costs under the lemmas (z3's optimum, then checked on the kernel's reading)."""
    cost = p.engine.cost
    try:
        leaves: dict = {}
        ab = V.abstract(cost, leaves)
    except V.Unsupported as u:
        raise Outside(f"the iteration's cost: {u}") from None
    names = dict.fromkeys(list(leaves) + [nm for lm in lems for nm, _ in lm.quantities])
    o = z3.Optimize()
    o.set("timeout", max(1, S.z3_ms(left)))
    o.add([lm.fact(S.var) for lm in lems] + [S.var(nm) >= 0 for nm in names])
    tm = _Terms(p)
    env = {nm: z3.ToReal(S.var(nm)) if not S.real(nm) else S.var(nm) for nm in names}
    t = tm.term(ab, env)
    o.add(tm.cons)
    h = o.maximize(t)
    if o.check() != z3.sat:
        raise Outside("z3 could not bound an iteration's cost")
    up = h.upper()
    if not (z3.is_rational_value(up) or z3.is_int_value(up)):
        raise Outside("an iteration's cost has no maximum within the bound")
    k = Fraction(up.as_fraction()) if z3.is_rational_value(up) else Fraction(up.as_long())
    # the kernel's own reading of the cost confirms the bound, and that an iteration lasts some time (R111, R112)
    why = V._implied(p, _cost_fact(p, k), True, lems, left)
    if why is not None:
        raise Outside(f"the iteration's cost within the bound: {why}")
    return k


def _cost_fact(p: R.Program, k):
    return R.Bin("&&", R.Bin("<=", p.engine.cost, R.Num(k)), R.Bin(">", p.engine.cost, R.Num(0)))


CLIENT = ("ttft", "response", "tpot")


def per_turn(p: R.Program, b: Bound):
    """Iterations bounding one turn's ttft, response and tpot (docs/verify.md, *Within the bound*:
    *A turn's own iterations*), with the argument's numbers as text; or why the argument does not
    apply (the busy period alone bounds them then)."""
    n, mx, B = b.n, b.mx, b.B
    if _shape(p.engine) != "vllm":
        return "decodes are served only in an iteration with no prefill: a turn's wait for the others' prefills"
    if b.g is not None:
        return "a granule may pass a prefill over and stop the admissions (*Engines*)"
    if B is not None and B <= n - 1:
        return f"a tokens cap of {B} is not above the {n - 1} other sessions' decodes"
    if b.hold is None:
        return "several queues: a later request of one may be admitted before an earlier one of another"
    if not any(st is b.hold for st in p.turn + p.server):
        return "the hold is not in the turn"
    modes = [st.mode for st in b.hold.body if isinstance(st, R.RunS)]
    if "prefill" in modes[modes.index("decode"):] if "decode" in modes else False:
        return "a prefill after a decode in the hold"
    # X: the iterations the budget runs out at or before the turn's request; their B tokens go to the
    # n - 1 sessions ahead (a prefill's pt, a decode's 1 an iteration) and to its own prefill
    x = 0 if B is None else (n * mx.pt) // (B - (n - 1))
    # Y: the iterations an `each at most` of at least b.cap cuts its prefill short
    y = mx.npre * ((mx.pw - 1) // b.cap) if b.cap is not None and mx.pw >= 1 else 0
    its = {"ttft": 1 + x + y + max(mx.npre, 1), "response": 1 + x + y + mx.npre + mx.dt, "tpot": 1 + x}
    xs = "0 (no tokens cap)" if B is None else f"{n} x {mx.pt} // ({B} - {n - 1}) = {x}"
    ys = "0 (no `each at most` cuts a prefill)" if b.cap is None else \
        f"{mx.npre} x ({mx.pw} - 1) // {b.cap} = {y}"
    text = (f"a turn's own iterations: the one in progress as it starts (1), those whose budget runs out at "
            f"or before its request ({xs}), those an `each at most` cuts its prefill ({ys}), then its "
            f"{max(mx.npre, 1)} first-token, {mx.npre} prefill-ending and {mx.dt} decode iteration(s)")
    return its, text


def prove(p: R.Program, j: int, n: int, values: int, left) -> Proof | str:
    """Claim j proved within the bound of n sessions at values 0..values, or why not."""
    c = p.claims[j]
    try:
        b = bound(p, n, values, left, c.given)
        kernel = _kernel_lemmas(p)
        lems = kernel + b.lemmas
        if c.form != "end":
            why = V._implied(p, c.e, c.form == "every", lems, left)
            if why is not None:
                return f"not within the bound: {_both(why)}"
            need = _needed(p, c.e, c.form == "every", kernel, b.lemmas, left)
            return Proof(b.facts + ["so at every iteration: " + " && ".join(lm.text for lm in need)])
        aggs = [x for x in V._nodes(c.e) if isinstance(x, R.Agg)]
        if not aggs or any(a.name not in CLIENT for a in aggs):
            raise Outside("a claim at end read here reads the client's ttft, response or tpot only")
        k = _cost_most(p, lems, left)
        costs = _needed(p, _cost_fact(p, k), True, kernel, b.lemmas, left)
        rb = b.iterations * k
        pt = per_turn(p, b)
        lat = {m: rb for m in CLIENT}
        if isinstance(pt, tuple):
            lat = {m: min(rb, pt[0][m] * k) for m in CLIENT}
        nt = n * b.mx.turns   # a ttft, response and tpot at most each turn
        extra = []
        for a in aggs:
            r = lat[a.name]
            most = {"count": nt, "total": nt * r, "prefix_total": nt * (nt + 1) // 2 * r}.get(a.fn, r)
            nm = f"agg.{a.fn}({a.name})"
            extra.append(V.Lemma(f"b:{nm}", f"{a.fn}({a.name}) <= {_num(most)}",
                                 lambda v, nm=nm, most=most: v(nm) <= numeral(most, True), ((nm, a),)))
        why = V._implied(p, c.e, True, lems + extra, left, aggs=True)
        if why is not None:
            return (f"not within the bound: {_both(why)} (a turn's ttft, response and tpot are at most "
                    + ", ".join(_num(lat[m]) for m in CLIENT) + " s)")
        facts = b.facts + [
            ("so at every iteration: " + " && ".join(lm.text for lm in costs) + ", and" if costs else
             "by the kernel's invariants alone,")
            + f" an iteration costs at most {_num(k)} s (execute read on them)",
            f"every iteration serves a token, and none waits while a request does: a path has at most "
            f"{nt} x ({b.mx.dt} decode + {b.mx.npre} prefill run(s))"
            + (f" + {nt} x {b.mx.pt} // {b.t_min} (a batch of prefills none of which ends has {b.t_min} tokens or more)"
               if b.t_min is not None else "")
            + f" = {b.iterations} iterations, each at most {_num(k)} s",
            f"so a turn's response, ttft and tpot are at most {b.iterations} x {_num(k)} = {_num(rb)} s"]
        if isinstance(pt, tuple):
            its = pt[0]
            facts += [pt[1], "so a turn's ttft is at most " + f"{its['ttft']} x {_num(k)}, its response "
                      f"{its['response']} x {_num(k)}, its tpot {its['tpot']} x {_num(k)}; the least of these and "
                      "the busy period: " + ", ".join(f"{m} <= {_num(lat[m])}" for m in CLIENT)]
        else:
            facts.append(f"no bound of a turn's own iterations: {pt}")
        return Proof(facts + [" && ".join(lm.text for lm in extra)])
    except Outside as o:
        return f"not within the bound: {o}"
    except S.Deadline:
        return "not within the bound: the timeout ran out"
    except (X.KernelError, z3.Z3Exception, V.Unsupported) as err:
        return f"not within the bound: {err}"


def _both(why: str) -> str:
    return why.replace("the kernel's invariants allow", "the kernel's and the bound's invariants allow")


def _num(x) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.6g}"
