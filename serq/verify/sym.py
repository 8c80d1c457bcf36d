"""Concolic values: a rational the kernel computes with concretely that also carries a z3 term over
the workload's unknowns (drawn attributes, integers; arrival times, reals). The kernel runs
unchanged on them (one semantics): arithmetic builds terms, and every place where the kernel's
control depends on one (a test, a comparison, a concrete use as an index) records the fact it relied
on in the active `Trace`. The recorded facts are the path condition: every input satisfying it runs
the same path.

A term is of z3's Int sort while every unknown and operation under it is whole (draws, sums,
products, floors) and of its Real sort once a real unknown or a quotient enters it, as the value
itself is an int or a Fraction (serq/ref/num.py); z3 mixes the two sorts by ToReal where they meet."""
from __future__ import annotations

from contextlib import contextmanager
from fractions import Fraction

import z3
import z3.z3 as _z3
from z3 import z3core as _C
from z3.z3types import Ast as _Ast

from serq.ref.num import q, qdiv


class Trace:
    """The facts the current run relied on, in order (z3 booleans, each true of the run's inputs)."""
    active: "Trace | None" = None

    def __init__(self):
        self.facts: list = []

    def __enter__(self):
        Trace.active = self
        return self

    def __exit__(self, *exc):
        Trace.active = None


def _record(term):
    t = Trace.active
    if t is not None:
        t.facts.append(term)


_NUMERALS: dict = {}


@contextmanager
def own_context():
    """The terms made inside it (z3py's default context) in a z3 context of their own, dropped after.
    z3's answers (models, and so the paths explored and the clauses Spacer is given, and Spacer's
    success) follow what its context was asked before: a claim's verdict must not follow the claims,
    files or tests a process verified earlier (vLLM's chat proved `hits` per session first, and not
    after two other claims)."""
    saved, numerals = getattr(_z3, "_main_ctx", None), dict(_NUMERALS)   # z3py's global, read by main_ctx()
    _z3._main_ctx = z3.Context()
    _NUMERALS.clear()
    try:
        yield
    finally:
        _z3._main_ctx = saved
        _NUMERALS.clear()
        _NUMERALS.update(numerals)


def numeral(x, real: bool = False):
    """A number's z3 term: an int's Int numeral (Real beside a real term: z3py would coerce it
    each time), a Fraction's Real one. Made once per value: building terms is most of the cost."""
    key = (x, real or type(x) is Fraction)
    t = _NUMERALS.get(key)
    if t is None:
        if len(_NUMERALS) > 100_000:
            _NUMERALS.clear()
        t = z3.RealVal(f"{x.numerator}/{x.denominator}" if type(x) is Fraction else int(x)) if key[1] \
            else z3.IntVal(int(x))
        _NUMERALS[key] = t
    return t


def _t(x, real: bool = False):
    """A value's term: a SymNum's own, a number's numeral."""
    return x.t if isinstance(x, SymNum) else numeral(x, real)


term = _t


def _c(x):
    return x.c if isinstance(x, SymNum) else x


# The terms of + - * and of comparisons, made by z3's C API as z3py makes them (the same function on
# the same arguments, an Int beside a Real first made Real: the same term), without z3py's
# coercions and sort checks, which were half of a search's time
def _one_sort(a, ra: bool, b, rb: bool) -> tuple:
    """Two terms (ra, rb: of z3's Real sort) in one sort, as z3py's coercion gives them: an Int term
    beside a Real one is ToReal of it."""
    if ra == rb:
        return a, b
    return (a if ra else _to_real(a)), (b if rb else _to_real(b))


def _to_real(t):
    return z3.ArithRef(_C.Z3_mk_int2real(t.ctx.ref(), t.ast), t.ctx)


def _add(a, b):
    return z3.ArithRef(_C.Z3_mk_add(a.ctx.ref(), 2, (_Ast * 2)(a.ast, b.ast)), a.ctx)


def _sub(a, b):
    return z3.ArithRef(_C.Z3_mk_sub(a.ctx.ref(), 2, (_Ast * 2)(a.ast, b.ast)), a.ctx)


def _mul(a, b):
    return z3.ArithRef(_C.Z3_mk_mul(a.ctx.ref(), 2, (_Ast * 2)(a.ast, b.ast)), a.ctx)


def _rel(f):
    return lambda a, b: z3.BoolRef(f(a.ctx.ref(), a.ast, b.ast), a.ctx)


def _ne(a, b):
    return z3.BoolRef(_C.Z3_mk_distinct(a.ctx.ref(), 2, (_Ast * 2)(a.ast, b.ast)), a.ctx)


_LT, _LE, _GT, _GE, _EQ = (_rel(f) for f in (_C.Z3_mk_lt, _C.Z3_mk_le, _C.Z3_mk_gt, _C.Z3_mk_ge, _C.Z3_mk_eq))


def _not(t):
    return z3.BoolRef(_C.Z3_mk_not(t.ctx.ref(), t.ast), t.ctx)


def negation(b):
    """z3.Not(b) of a z3 boolean, made by the C API (the same term)."""
    return _not(b) if isinstance(b, z3.BoolRef) else z3.Not(b)


def assert_into(s: z3.Solver, b):
    """s.add(b) of one z3 boolean, without z3py's cast (the same assertion)."""
    if isinstance(b, z3.BoolRef):
        _C.Z3_solver_assert(s.ctx.ref(), s.solver, b.ast)
    else:
        s.add(b)


def _real(t):
    return t if t.is_real() else z3.ToReal(t)


def _ok(o) -> bool:
    return isinstance(o, (int, Fraction, SymNum)) and not isinstance(o, bool)


class SymBool:
    __slots__ = ("c", "t")

    def __init__(self, c: bool, t):
        self.c, self.t = c, t

    def __bool__(self):
        _record(self.t if self.c else _not(self.t))
        return self.c

    def __int__(self):
        return int(bool(self))

    __index__ = __int__

    def __eq__(self, other):  # a claim's value compared with the one that decides it
        return bool(self) == other

    def __ne__(self, other):
        return bool(self) != other

    def __hash__(self):
        return hash(self.c)

    def __repr__(self):
        return repr(self.c)


class SymNum:
    __slots__ = ("c", "t", "r")

    def __init__(self, c, t, r=None):
        # r: whether the term is of z3's Real sort, known to the operation that made it (asking z3
        # each time was a tenth of a search's time)
        self.c, self.t = q(c), t
        self.r = t.is_real() if r is None else r

    def _terms(self, o) -> tuple:
        """This term and o's, in one sort, and whether o's is Real."""
        ro = o.r if isinstance(o, SymNum) else (self.r or type(o) is Fraction)
        return _one_sort(self.t, self.r, _t(o, self.r), ro) + (ro,)

    def _bin(self, o, f, g, real=False):
        if not _ok(o):
            return NotImplemented
        a, b, ro = self._terms(o)
        return SymNum(f(self.c, _c(o)), g(a, b), real or self.r or ro)

    def __add__(self, o):
        return self._bin(o, lambda a, b: a + b, _add)

    def __radd__(self, o):
        return self._bin(o, lambda a, b: b + a, lambda a, b: _add(b, a))

    def __sub__(self, o):
        return self._bin(o, lambda a, b: a - b, _sub)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: b - a, lambda a, b: _sub(b, a))

    def __mul__(self, o):
        return self._bin(o, lambda a, b: a * b, _mul)

    __rmul__ = __mul__

    def __truediv__(self, o):
        # the exact quotient; the kernel tests the divisor for 0 first
        return self._bin(o, qdiv, lambda a, b: _real(a) / _real(b), True)

    def __rtruediv__(self, o):
        return self._bin(o, lambda a, b: qdiv(b, a), lambda a, b: _real(b) / _real(a), True)

    def __floordiv__(self, o):
        # whole amounts by positive divisors (block rounding): z3's integer division is then floor
        out = self._bin(o, lambda a, b: a // b, _floordiv)
        if out is not NotImplemented:
            out.r = False
        return out

    def __rfloordiv__(self, o):
        out = self._bin(o, lambda a, b: b // a, lambda a, b: _floordiv(b, a))
        if out is not NotImplemented:
            out.r = False
        return out

    def __mod__(self, o):
        return self._bin(o, lambda a, b: a % b, lambda a, b: a % b)

    def __rmod__(self, o):
        return self._bin(o, lambda a, b: b % a, lambda a, b: b % a)

    def __neg__(self):
        return SymNum(-self.c, -self.t, self.r)

    def __floor__(self):
        return SymNum(self.c // 1, _whole(self.t, self.r, False), False)

    def __ceil__(self):
        return SymNum(-(-self.c // 1), _whole(self.t, self.r, True), False)

    def _cmp(self, o, f, g):
        if not _ok(o):
            return NotImplemented
        a, b, _ = self._terms(o)
        return SymBool(f(self.c, _c(o)), g(a, b))

    def __lt__(self, o):
        return self._cmp(o, lambda a, b: a < b, _LT)

    def __le__(self, o):
        return self._cmp(o, lambda a, b: a <= b, _LE)

    def __gt__(self, o):
        return self._cmp(o, lambda a, b: a > b, _GT)

    def __ge__(self, o):
        return self._cmp(o, lambda a, b: a >= b, _GE)

    def __eq__(self, o):
        return self._cmp(o, lambda a, b: a == b, _EQ)

    def __ne__(self, o):
        return self._cmp(o, lambda a, b: a != b, _ne)

    def __bool__(self):
        zero = numeral(0, self.r)
        _record(_ne(self.t, zero) if self.c != 0 else _EQ(self.t, zero))
        return self.c != 0

    def __int__(self):  # a concrete use (an index, a count): the run relies on the value itself
        _record(self.t == numeral(self.c))
        return int(self.c)

    __index__ = __int__

    def __float__(self):
        _record(self.t == numeral(self.c))
        return float(self.c)

    def __hash__(self):
        return hash(self.c)

    def __repr__(self):
        return repr(self.c)

    def __format__(self, spec):
        return format(self.c, spec)


def _whole(t, real: bool, up: bool):
    """The floor (the ceiling, up) of a term, of z3's Int sort: the term itself when it is whole; of
    a whole term a over a whole numeral b > 0, z3's integer division (a / b, or (a + b - 1) / b);
    else ToInt of the real."""
    if not real:
        return t
    q_ = _whole_quotient(t)
    if q_ is not None:
        a, b = q_
        return (a + b - 1) / b if up else a / b
    return -z3.ToInt(-t) if up else z3.ToInt(t)


def _whole_quotient(t):
    """(a, b) when t is a / b of a whole term a and a whole numeral b > 0: then z3's integer
    division a / b is the floor, which its integer arithmetic decides where ToInt of the real
    quotient leaves it unknown (`(p + 3 - (p + 3) % 4) / 4` against a count of iterations)."""
    if not (z3.is_app_of(t, z3.Z3_OP_DIV) and z3.is_app_of(t.arg(0), z3.Z3_OP_TO_REAL)):
        return None
    b = t.arg(1)
    if z3.is_app_of(b, z3.Z3_OP_TO_REAL):
        b = b.arg(0)
    if z3.is_int_value(b) and b.as_long() > 0:
        return t.arg(0).arg(0), b
    if z3.is_rational_value(b) and b.denominator_as_long() == 1 and b.numerator_as_long() > 0:
        return t.arg(0).arg(0), z3.IntVal(b.numerator_as_long())
    return None


def _floordiv(a, b):
    if a.is_int() and b.is_int():
        return a / b
    return z3.ToInt(_real(a) / _real(b))


def concrete(x):
    """A value without its term (for writing a workload or a table)."""
    return x.c if isinstance(x, (SymNum, SymBool)) else x
