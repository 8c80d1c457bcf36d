"""IR expressions compiled once, at load, to Python closures (architecture principle 4).

A closure takes one argument, the evaluation context `c`: `c.a` the session's attributes,
`c.rng` the stream a draw reads, `c.x` the context variables of the moment (a dict), and the
simulator is captured when the closure is made."""
from __future__ import annotations

import bisect
import itertools
import math

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.lang.lower import constants as C
from serq.lang.lower.constants import fmt, whole
from serq.link.exprs import const_value, draw_param_error

INF = math.inf
NAN = math.nan


class RunError(SerqError):
    """A run-time error of the program: a diagnostic naming the statement's file:line:col."""


class Ctx:
    """An evaluation context. Sessions keep one each; the machine has its own."""
    __slots__ = ("a", "rng", "x", "sess")

    def __init__(self, a=None, rng=None, x=None, sess=None):
        self.a = a
        self.rng = rng
        self.x = x if x is not None else {}
        self.sess = sess


# one definition of each operator and function, the constant folder's (*Expressions*)
FUNCS = {name: fn for name, (_, _, fn) in C.FUNCS.items()}
_mul, _div, _mod = C.mul, C.div, C.mod


class Compiler:
    """Compiles the IR's expressions against one simulator (its pools, stages and engines)."""

    def __init__(self, sim):
        self.sim = sim
        self.files = sim.prog.files

    def span(self, at: I.Loc | None) -> Span | None:
        if at is None:
            return None
        f = self.files[at.file] if at.file < len(self.files) else "<ir>"
        return Span(f, at.line, at.col, at.end_line, at.end_col)

    def error(self, code, msg, at):
        return RunError(code, msg, self.span(at))

    def expr(self, e):
        """The expression as a function of the context: one Python function generated from its
        tree where it can be (source(): an operator is then an operation, not a call), else
        closures. Both compute the same floats in the same order; a read of an unset attribute or
        context value in the generated one is re-read by the closures, which raise its diagnostic."""
        slow = self._closure(e)
        if e.k in ("num", "inf", "attr", "ctx", "step", "reg", "obs", "agg"):
            return slow  # a leaf: no call to save
        gen = _Source(self)
        got = self.source(e, gen, slow)
        if got is None:
            return slow
        body, fall = got
        env = gen.env
        if fall is None:
            code = f"def _f(c):\n    return {body}\n"
        else:
            env["_slow"] = fall
            code = f"def _f(c):\n    try:\n        return {body}\n    except KeyError:\n        return _slow(c)\n"
        try:
            exec(compile(code, "<serq expression>", "exec"), env)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            return slow
        return env["_f"]

    def source(self, e, gen, slow=None):
        """e as Python source in gen's generated function: (source, fallback), the fallback the
        closures (slow, else made here) to call where one of its reads misses (a KeyError), None
        where none can; or None where e keeps its closures (a kind _Source does not write, or a draw
        beside a read that can miss: a draw is drawn once, and a fallback would draw it again; a
        draw's arguments are functions of their own, which raise their own diagnostics)."""
        gen.drew = gen.keyed = False
        try:
            body = gen.src(e, 0)
        except _NoSource:
            return None
        if not gen.keyed:
            return body, None
        if gen.drew:
            return None
        return body, slow if slow is not None else self._closure(e)

    def _closure(self, e):
        k = e.k
        if k in ("bin", "un", "if", "fn"):
            v = const_value(e)  # a part made of numbers only is folded once, here
            if v is not None and v == v:
                return lambda c: v
            if k == "if":
                cv = const_value(e.c)
                if cv is not None and cv == cv:
                    return self._closure(e.a if cv != 0 else e.b)
        m = getattr(self, "_" + k)
        return m(e)

    # -- leaves
    def _num(self, e):
        v = float(e.v)
        return lambda c: v

    def _inf(self, e):
        return lambda c: INF

    def _attr(self, e):
        n = e.name
        err = self.error

        def f(c):
            try:
                return c.a[n]
            except KeyError:
                raise err("R001", f"`{n}` is read before it is set", e.at) from None
        return f

    def _ctx(self, e):
        n = e.name
        sim = self.sim
        if n == "now":
            return lambda c: sim.now
        err = self.error

        def f(c):
            try:
                return c.x[n]
            except KeyError:
                raise err("R002", f"`{n}` has no value here", e.at) from None
        return f

    def _step(self, e):
        return self.sim.step_var(e)

    def _reg(self, e):
        return self.sim.register(e)

    def _obs(self, e):
        # a constant target (no index) reads its member's method directly
        const = self.sim.members(e.of.name)[0] if e.of.index is None else None
        return self.sim.observable(e.fn, self.target(e.of, e.at), const)

    def _agg(self, e):
        return self.sim.end_aggregate(e.fn, e.name)

    # -- operators
    def _un(self, e):
        a = self._closure(e.e)
        if e.op == "-":
            return lambda c: -a(c)
        return lambda c: 1.0 if a(c) == 0 else 0.0

    def _bin(self, e):
        l, r, op = self._closure(e.l), self._closure(e.r), e.op
        if op == "+":
            return lambda c: l(c) + r(c)
        if op == "-":
            return lambda c: l(c) - r(c)
        if op == "*":
            return lambda c: _mul(l(c), r(c))
        if op == "/":
            return lambda c: _div(l(c), r(c))
        if op == "%":
            return lambda c: _mod(l(c), r(c))
        if op == "==":
            return lambda c: 1.0 if l(c) == r(c) else 0.0
        if op == "!=":
            return lambda c: 1.0 if l(c) != r(c) else 0.0
        if op == "<":
            return lambda c: 1.0 if l(c) < r(c) else 0.0
        if op == "<=":
            return lambda c: 1.0 if l(c) <= r(c) else 0.0
        if op == ">":
            return lambda c: 1.0 if l(c) > r(c) else 0.0
        if op == ">=":
            return lambda c: 1.0 if l(c) >= r(c) else 0.0
        if op == "&&":
            return lambda c: 1.0 if (l(c) != 0 and r(c) != 0) else 0.0
        if op == "||":
            return lambda c: 1.0 if (l(c) != 0 or r(c) != 0) else 0.0
        raise ValueError(op)

    def _if(self, e):
        c_, a, b = self._closure(e.c), self._closure(e.a), self._closure(e.b)
        return lambda c: a(c) if c_(c) != 0 else b(c)

    def _fn(self, e):
        fn = FUNCS[e.name]
        args = [self._closure(a) for a in e.args]
        if len(args) == 1:
            a0 = args[0]
            if e.name in ("min", "max", "sum"):
                return lambda c: a0(c)
            return lambda c: fn(a0(c))
        if len(args) == 2:
            a0, a1 = args
            return lambda c: fn(a0(c), a1(c))
        return lambda c: fn(*[a(c) for a in args])

    def _cost(self, e):
        return self._closure(e.e)

    def _draw(self, e):
        f = self._drawn(e)
        if self.sim.workload is None:
            return f
        err = self.error

        def replayed(c):  # `serq run --workload`: the session's draws take the workload's values
            s = c.sess
            if s is None or s.replay is None:
                return f(c)
            if not s.replay:
                raise err("R003", f"the workload gives session {s.serial} no value for this draw", e.at)
            return float(s.replay.pop(0))
        return replayed

    def draw_src(self, e, name) -> str:
        """A draw as _Source writes it (`name` binds a value in the generated function): an
        exponential of a constant mean drawn in place, as its closure draws it; else its closure."""
        rate = _exp_rate(e)
        if rate is not None and self.sim.workload is None:
            return f"c.rng.expovariate({name(rate)})"
        return f"{name(self._closure(e))}(c)"

    def _drawn(self, e):
        args = [self.expr(a) for a in e.args]
        dist = e.dist
        err = self.error

        def check(vals):
            bad = draw_param_error(dist, vals)
            if bad is not None:
                raise err("R003", f"`~{dist}`: {bad}", e.at)

        if dist == "exp":
            (m,) = args
            rate = _exp_rate(e)
            if rate is not None:  # a constant mean: its rate computed once
                return lambda c: c.rng.expovariate(rate)

            def f(c):
                mv = m(c)
                if not 0 < mv < INF:
                    check([mv])
                return c.rng.expovariate(1.0 / mv)
            return f
        if dist == "det":
            (v,) = args

            def f(c):
                x = v(c)
                if x != x or x in (INF, -INF):
                    check([x])
                return x
            return f
        if dist == "uniform":
            a0, b0 = args

            def f(c):
                a, b = a0(c), b0(c)
                if not (a <= b and -INF < b - a < INF):  # else draw_param_error finds nothing
                    check([a, b])
                return a + (b - a) * c.rng.random()
            return f
        if dist == "erlang":
            k0, m0 = args

            def f(c):
                k, m = k0(c), m0(c)
                if not (1 <= k < INF and k == math.floor(k) and 0 < m < INF):
                    check([k, m])
                return c.rng.gammavariate(k, m / k)
            return f
        if dist == "h2":
            m0, c20 = args

            def f(c):
                m, c2 = m0(c), c20(c)
                if not (0 < m < INF and 1 <= c2 < INF):
                    check([m, c2])
                # balanced means: p/mu1 = (1-p)/mu2 = m/2
                p = 0.5 * (1 + math.sqrt((c2 - 1) / (c2 + 1)))
                if c.rng.random() < p:
                    return c.rng.expovariate(2 * p / m)
                return c.rng.expovariate(2 * (1 - p) / m)
            return f
        if dist == "lognormal":   # exp of a normal of mean mu and standard deviation sigma (numpy's)
            mu0, s0 = args

            def f(c):
                mu, sg = mu0(c), s0(c)
                if not (-INF < mu < INF and 0 <= sg < INF):
                    check([mu, sg])
                return c.rng.lognormvariate(mu, sg)
            return f
        if dist == "lognormal_mean":   # the same, by the value's mean m and standard deviation s
            m0, s0 = args

            def f(c):
                m, sd = m0(c), s0(c)
                if not (0 < m < INF and 0 <= sd < INF):
                    check([m, sd])
                sg2 = math.log1p((sd / m) ** 2)
                return c.rng.lognormvariate(math.log(m) - sg2 / 2, math.sqrt(sg2))
            return f
        if dist == "empirical":   # a value of the file's, each as likely as its weight
            vals, cum = list(e.values), list(itertools.accumulate(e.weights))
            total, last = cum[-1], len(vals) - 1

            def f(c):
                return vals[min(bisect.bisect_right(cum, c.rng.random() * total), last)]
            return f
        if dist == "bernoulli":
            (p0,) = args

            def f(c):
                p = p0(c)
                if not 0 <= p <= 1:
                    check([p])
                return 1.0 if c.rng.random() < p else 0.0
            return f
        raise ValueError(dist)

    # -- targets
    def target(self, t: I.Target, at):
        """A member of a pool or stage array: a closure to the member object (checked index)."""
        members = self.sim.members(t.name)
        if t.index is None:
            m0 = members[0]
            return lambda c: m0
        idx = self.expr(t.index)
        n = len(members)
        err = self.error
        name = t.name

        def f(c):
            i = idx(c)
            if whole(i, 0, n - 1):
                return members[int(i)]
            raise err("R004", f"`{name}[{fmt(i)}]`: an index is a whole number from 0 below {n}", at)
        return f


class _NoSource(Exception):
    pass


def _exp_rate(e) -> float | None:
    """An exponential draw's rate where its mean is a constant in (0, inf), else None."""
    if e.dist != "exp":
        return None
    mc = const_value(e.args[0])
    return 1.0 / float(mc) if mc is not None and 0 < mc < INF else None


_BIN = {"+": "({} + {})", "-": "({} - {})", "*": "_mul({}, {})", "/": "_div({}, {})", "%": "_mod({}, {})",
        "==": "(1.0 if {} == {} else 0.0)", "!=": "(1.0 if {} != {} else 0.0)",
        "<": "(1.0 if {} < {} else 0.0)", "<=": "(1.0 if {} <= {} else 0.0)",
        ">": "(1.0 if {} > {} else 0.0)", ">=": "(1.0 if {} >= {} else 0.0)",
        "&&": "(1.0 if ({} != 0 and {} != 0) else 0.0)", "||": "(1.0 if ({} != 0 or {} != 0) else 0.0)"}
_KEEP = {"floor": math.floor, "ceil": math.ceil}  # constants._keep's, written out (_Source)
_DEPTH = 40  # deeper trees keep their closures (Python's parser nests only so far)


class _Source:
    """An expression as Python source, node for node what the closures compute (Compiler._closure):
    the same constant folding, the same operator functions, the same order of evaluation."""

    def __init__(self, comp: Compiler):
        self.comp = comp
        self.env = {"_mul": _mul, "_div": _div, "_mod": _mod, "sim": comp.sim}
        self.drew = False   # a draw is read (Compiler.expr: then no fallback)
        self.keyed = False  # a read that can miss (KeyError) is written out
        self.tmp = 0

    def temp(self) -> str:
        """A local of its own (a value read twice, evaluated once)."""
        self.tmp += 1
        return f"_t{self.tmp - 1}"

    def _once(self, src: str) -> tuple:
        """(how to read it again, how to read it first): a name as it is, else a temporary."""
        if src.isidentifier():
            return src, src
        t = self.temp()
        return t, f"({t} := {src})"

    def name(self, v) -> str:
        n = f"k{len(self.env)}"
        self.env[n] = v
        return n

    def src(self, e, depth: int) -> str:
        if depth > _DEPTH:
            raise _NoSource()
        k = e.k
        if k in ("bin", "un", "if", "fn"):
            v = const_value(e)
            if v is not None and v == v:
                return self.name(v)
            if k == "if":
                cv = const_value(e.c)
                if cv is not None and cv == cv:
                    return self.src(e.a if cv != 0 else e.b, depth + 1)
        d = depth + 1
        if k == "num":
            return self.name(float(e.v))
        if k == "inf":
            return self.name(INF)
        if k == "attr":
            self.keyed = True
            return f"c.a[{e.name!r}]"
        if k == "ctx":
            if e.name == "now":
                return "sim.now"
            self.keyed = True
            return f"c.x[{e.name!r}]"
        if k == "draw":
            self.drew = True
            return self.comp.draw_src(e, self.name)
        if k == "cost":
            return self.src(e.e, d)
        if k == "un":
            a = self.src(e.e, d)
            return f"(-{a})" if e.op == "-" else f"(1.0 if {a} == 0 else 0.0)"
        if k == "bin":
            op = e.op
            if op in ("*", "/"):
                # by a finite number other than 0, mul and div are the plain operators
                kv = const_value(e.r)
                if kv is not None and kv == kv and kv != 0 and not math.isinf(kv):
                    return f"({self.src(e.l, d)} {op} {self.name(kv)})"
                kv = const_value(e.l)
                if op == "*" and kv is not None and kv == kv and kv != 0 and not math.isinf(kv):
                    return f"({self.name(kv)} * {self.src(e.r, d)})"
            return _BIN[op].format(self.src(e.l, d), self.src(e.r, d))
        if k == "if":
            return f"({self.src(e.a, d)} if {self.src(e.c, d)} != 0 else {self.src(e.b, d)})"
        if k == "fn":
            args = [self.src(a, d) for a in e.args]
            if len(args) == 1 and e.name in ("min", "max", "sum"):
                return args[0]
            if len(args) == 2 and e.name in ("min", "max"):
                # the comparisons constants._min and _max make, without the call; each argument read
                # once into a temporary, but a name (a local or constant: read again, the same value)
                (t, a), (u, b) = (self._once(x) for x in args)
                ge, gt = (">=", ">") if e.name == "max" else ("<=", "<")
                return (f"({t} if {a} {ge} {b} else "
                        f"({u} if {u} {gt} {t} else {self.name(math.nan)}))")
            if e.name in _KEEP:  # constants._keep's: a finite value's floor (or ceil) as a float
                t = self.temp()
                return (f"({self.name(float)}({self.name(_KEEP[e.name])}({t})) "
                        f"if {self.name(math.isfinite)}({t} := {args[0]}) else {t})")
            return f"{self.name(FUNCS[e.name])}({', '.join(args)})"
        if k == "step":
            self.keyed = True
            return self.comp.sim.step_src(e, self.name(self.comp._step(e)))
        if k in ("reg", "obs", "agg"):
            return f"{self.name(getattr(self.comp, '_' + k)(e))}(c)"
        raise _NoSource()  # a kind of its own
