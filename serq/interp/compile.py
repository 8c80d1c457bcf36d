"""IR expressions compiled once, at load, to Python closures (architecture principle 4).

A closure takes one argument, the evaluation context `c`: `c.a` the session's attributes,
`c.rng` the stream a draw reads, `c.x` the context variables of the moment (a dict), and the
simulator is captured when the closure is made."""
from __future__ import annotations

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
        k = e.k
        if k in ("bin", "un", "if", "fn"):
            v = const_value(e)  # a part made of numbers only is folded once, here
            if v is not None and v == v:
                return lambda c: v
            if k == "if":
                cv = const_value(e.c)
                if cv is not None and cv == cv:
                    return self.expr(e.a if cv != 0 else e.b)
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
        a = self.expr(e.e)
        if e.op == "-":
            return lambda c: -a(c)
        return lambda c: 1.0 if a(c) == 0 else 0.0

    def _bin(self, e):
        l, r, op = self.expr(e.l), self.expr(e.r), e.op
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
        c_, a, b = self.expr(e.c), self.expr(e.a), self.expr(e.b)
        return lambda c: a(c) if c_(c) != 0 else b(c)

    def _fn(self, e):
        fn = FUNCS[e.name]
        args = [self.expr(a) for a in e.args]
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
        return self.expr(e.e)

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
                check([a, b])
                return a + (b - a) * c.rng.random()
            return f
        if dist == "erlang":
            k0, m0 = args

            def f(c):
                k, m = k0(c), m0(c)
                check([k, m])
                return c.rng.gammavariate(k, m / k)
            return f
        if dist == "h2":
            m0, c20 = args

            def f(c):
                m, c2 = m0(c), c20(c)
                check([m, c2])
                # balanced means: p/mu1 = (1-p)/mu2 = m/2
                p = 0.5 * (1 + math.sqrt((c2 - 1) / (c2 + 1)))
                if c.rng.random() < p:
                    return c.rng.expovariate(2 * p / m)
                return c.rng.expovariate(2 * (1 - p) / m)
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
