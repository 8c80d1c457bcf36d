"""Concolic values: a natural the kernel computes with concretely that also carries a z3 term over
the workload's unknowns (drawn attributes, arrival times). The kernel runs unchanged on them (one
semantics): arithmetic builds terms, and every place where the kernel's control depends on one (a
test, a comparison, a concrete use as an index) records the fact it relied on in the active
`Trace`. The recorded facts are the path condition: every input satisfying it runs the same path."""
from __future__ import annotations

import z3


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


def _t(x):
    """A value's term: a SymInt's own, an int's numeral."""
    return x.t if isinstance(x, SymInt) else z3.IntVal(int(x))


term = _t


def _c(x):
    return x.c if isinstance(x, SymInt) else x


def lift(c: int, t) -> "SymInt":
    return SymInt(c, t)


class SymBool:
    __slots__ = ("c", "t")

    def __init__(self, c: bool, t):
        self.c, self.t = c, t

    def __bool__(self):
        _record(self.t if self.c else z3.Not(self.t))
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


class SymInt:
    __slots__ = ("c", "t")

    def __init__(self, c: int, t):
        self.c, self.t = c, t

    def _bin(self, o, f, g):
        if not isinstance(o, (int, SymInt)) or isinstance(o, bool):
            return NotImplemented
        return SymInt(f(self.c, _c(o)), g(self.t, _t(o)))

    def __add__(self, o):
        return self._bin(o, lambda a, b: a + b, lambda a, b: a + b)

    def __radd__(self, o):
        return self._bin(o, lambda a, b: b + a, lambda a, b: b + a)

    def __sub__(self, o):
        return self._bin(o, lambda a, b: a - b, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: b - a, lambda a, b: b - a)

    def __mul__(self, o):
        return self._bin(o, lambda a, b: a * b, lambda a, b: a * b)

    __rmul__ = __mul__

    def __floordiv__(self, o):
        # the kernel divides naturals by positive divisors (it tests for 0 first): z3's integer
        # division is then floor division
        return self._bin(o, lambda a, b: a // b, lambda a, b: a / b)

    def __rfloordiv__(self, o):
        return self._bin(o, lambda a, b: b // a, lambda a, b: b / a)

    def __mod__(self, o):
        return self._bin(o, lambda a, b: a % b, lambda a, b: a % b)

    def __rmod__(self, o):
        return self._bin(o, lambda a, b: b % a, lambda a, b: b % a)

    def __neg__(self):
        return SymInt(-self.c, -self.t)

    def _cmp(self, o, f, g):
        if not isinstance(o, (int, SymInt)) or isinstance(o, bool):
            return NotImplemented
        return SymBool(f(self.c, _c(o)), g(self.t, _t(o)))

    def __lt__(self, o):
        return self._cmp(o, lambda a, b: a < b, lambda a, b: a < b)

    def __le__(self, o):
        return self._cmp(o, lambda a, b: a <= b, lambda a, b: a <= b)

    def __gt__(self, o):
        return self._cmp(o, lambda a, b: a > b, lambda a, b: a > b)

    def __ge__(self, o):
        return self._cmp(o, lambda a, b: a >= b, lambda a, b: a >= b)

    def __eq__(self, o):
        return self._cmp(o, lambda a, b: a == b, lambda a, b: a == b)

    def __ne__(self, o):
        return self._cmp(o, lambda a, b: a != b, lambda a, b: a != b)

    def __bool__(self):
        _record(self.t != 0 if self.c != 0 else self.t == 0)
        return self.c != 0

    def __int__(self):  # a concrete use (an index, a float): the run relies on the value itself
        _record(self.t == self.c)
        return self.c

    __index__ = __int__

    def __float__(self):
        return float(int(self))

    def __hash__(self):
        return hash(self.c)

    def __repr__(self):
        return repr(self.c)

    def __format__(self, spec):
        return format(self.c, spec)


def concrete(x):
    """A value without its term (for writing a workload or a table)."""
    return x.c if isinstance(x, (SymInt, SymBool)) else x
