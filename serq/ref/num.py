"""The fragment's numbers, definition for definition lean/Serq/Num.lean: every value an expression
computes is a rational, exactly (docs/lean.md, *Arithmetic*). A value is an `int` when it is whole
and a `fractions.Fraction` otherwise (Lean: `Q`, in lowest terms, so that equal values are equal
terms); a decimal constant is the rational it writes (0.001 is 1/1000, not the float nearest it).

Amounts (units, tokens, reserves, a budget, a chunk) are naturals: `nat_of` gives the natural a
value is, or says why it is none. Under `serq verify` the same functions run on `sym.SymNum`
values, which carry a z3 term: each operation below is one Python operator or `math` function, so
the symbolic value follows the same definition.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional


def q(x):
    """A value in lowest terms: a whole Fraction is its int (Lean: `Q.norm`)."""
    if type(x) is Fraction and x.denominator == 1:
        return x.numerator
    return x


def of_decimal(v: float):
    """The rational a decimal constant writes: the IR keeps a number as a float, whose shortest
    repr is the decimal the program wrote (0.00004, not 4.0000000000000003e-05's binary value)."""
    if float(v).is_integer():
        return int(v)
    return q(Fraction(repr(float(v))))


def qdiv(l, r):
    """l / r exactly; the caller has tested r != 0 (Lean: `Q.div`)."""
    if type(l) is int and type(r) is int:
        d, m = divmod(l, r)
        return d if m == 0 else Fraction(l, r)
    return q(l / r)


def qfloor(x):
    """The greatest integer at most x (Lean: `Q.floor`)."""
    return x if type(x) is int else math.floor(x)


def qceil(x):
    """The least integer at least x (Lean: `Q.ceil`)."""
    return x if type(x) is int else math.ceil(x)


def qround(x):
    """x rounded half up, floor(x + 1/2): the catalogue's `round` (Lean: `Q.round`)."""
    return x if type(x) is int else math.floor(x + Fraction(1, 2))


def qmod(l, r):
    """l % r as the interpreter's fmod: l - r * trunc(l / r), the sign of l; r != 0 (Lean: `Q.fmod`)."""
    if type(l) is int and type(r) is int and l >= 0 and r > 0:
        return l % r
    t = qdiv(l, r)
    k = qfloor(t) if t >= 0 else qceil(t)
    return q(l - r * k)


def qabs(x):
    return x if x >= 0 else q(0 - x)


def whole(x) -> bool:
    """Whether a value is an integer (Lean: `Q.den == 1`)."""
    return type(x) is int or qfloor(x) == x


def nat_of(x) -> Optional[str]:
    """None when x is a natural, else why not: "negative" or "fraction" (Lean: `Q.toNat?`)."""
    if x < 0:
        return "negative"
    if not whole(x):
        return "fraction"
    return None
