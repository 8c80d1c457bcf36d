"""Arrival times the interpreter reads as the kernel did (docs/verify.md, *Replay*).

The kernel computes times exactly; the interpreter in floating point, where a sum of decimal costs
is off by an ulp or so. A path whose arrival sits exactly on an iteration's end (z3 answers a flip
with the boundary itself) may then replay on the other side of it. Before a workload is named, its
real unknowns are moved inside the path's region by the widest margin z3's optimizer finds (every
comparison the path made on a real term holds by that margin; an equality the path needs stays one)
and written as the shortest decimals that keep half of it: the floats the interpreter reads then
fall on the side the kernel took. The draws keep their values: they are whole, exact in both."""
from __future__ import annotations

from fractions import Fraction
from typing import Optional

import z3

from serq.verify.search import numeral_of, real, var

MARGIN_MS = 5000   # z3's time for the widest margin; without an answer the path's own values stand


def _apart(a, b, s):
    return z3.Or(a + s <= b, b + s <= a)


def _slacken(f, s):
    """A fact with every strict or loose comparison of real terms made to hold by the margin s."""
    if z3.is_distinct(f) and f.num_args() == 2 and f.arg(0).is_real():
        return _apart(f.arg(0), f.arg(1), s)
    if z3.is_not(f):
        g = f.arg(0)
        if z3.is_eq(g) and g.arg(0).is_real():
            return _apart(g.arg(0), g.arg(1), s)
        if z3.is_lt(g):
            return _slacken(g.arg(0) >= g.arg(1), s)
        if z3.is_le(g):
            return _slacken(g.arg(0) > g.arg(1), s)
        if z3.is_gt(g):
            return _slacken(g.arg(0) <= g.arg(1), s)
        if z3.is_ge(g):
            return _slacken(g.arg(0) < g.arg(1), s)
        return f
    if (z3.is_lt(f) or z3.is_le(f)) and f.arg(0).is_real():
        return f.arg(0) + s <= f.arg(1)
    if (z3.is_gt(f) or z3.is_ge(f)) and f.arg(0).is_real():
        return f.arg(1) + s <= f.arg(0)
    return f


def _sides(f):
    """The two sides of a comparison of real terms (under a negation too), or None."""
    if z3.is_not(f):
        f = f.arg(0)
    if (z3.is_lt(f) or z3.is_le(f) or z3.is_gt(f) or z3.is_ge(f) or z3.is_eq(f) or z3.is_distinct(f)) \
            and f.num_args() == 2 and f.arg(0).is_real():
        return f.arg(0), f.arg(1)
    return None


def _dyadic(den: int) -> bool:
    return den & (den - 1) == 0


def _exact(t, seen: set) -> bool:
    """Whether every numeral of a term has a power of two for its denominator: its arithmetic is
    then exact in floating point (the kernel's integers and halves are the interpreter's too)."""
    if t.get_id() in seen:
        return True
    seen.add(t.get_id())
    if z3.is_rational_value(t):
        return _dyadic(t.denominator_as_long())
    return all(_exact(c, seen) for c in t.children())


def on_a_tie(facts: list, values: dict) -> bool:
    """Whether the inputs put some comparison of real terms the path made on a tie (its two sides
    equal) that floating point may not see as one: a term with a decimal (0.001) or a value that is
    no float. Those are the one place the interpreter's rounding can read the path otherwise."""
    pairs = [(var(n), numeral_of(n, v)) for n, v in values.items()]
    if not all(_dyadic(Fraction(v).denominator) for v in values.values()):
        return True
    seen: set = set()
    for f in facts:
        sides = _sides(f)
        if sides is None:
            continue
        d = z3.simplify(z3.substitute(sides[0] - sides[1], *pairs) if pairs else sides[0] - sides[1])
        if z3.is_rational_value(d) and d.numerator_as_long() != 0:
            continue
        if not (_exact(sides[0], seen) and _exact(sides[1], seen)):
            return True
    return False


def interior(facts: list, values: dict, domain) -> Optional[dict]:
    """The path's inputs with its real unknowns moved inside its region and written as short
    decimals; None when it has no real unknown, when no comparison of the path sits on a tie (the
    inputs are as good as they get), or when there is no margin (the path needs a tie) or z3 found
    none in its time."""
    reals = [n for n in values if real(n)]
    if not reals or not on_a_tie(facts, values):
        return None
    fixed = [(var(n), numeral_of(n, v)) for n, v in values.items() if not real(n)]

    def pin(f):
        return z3.substitute(f, *fixed) if fixed else f

    s = z3.Real("_margin")
    opt = z3.Optimize()
    opt.set("timeout", MARGIN_MS)
    slack = [_slacken(pin(f), s) for f in facts]
    opt.add(slack)
    opt.add([pin(domain(n)) for n in reals])
    opt.add(s >= 0, s <= 1)
    opt.maximize(s)
    if opt.check() != z3.sat:
        return None
    mdl = opt.model()
    margin = mdl.eval(s, model_completion=True)
    width = Fraction(margin.numerator_as_long(), margin.denominator_as_long())
    if width <= 0:
        return None
    exact = {}
    for n in reals:
        v = mdl.eval(var(n), model_completion=True)
        exact[n] = Fraction(v.numerator_as_long(), v.denominator_as_long())
    half = [z3.substitute(f, (s, z3.RealVal(f"{width.numerator}/{width.denominator * 2}"))) for f in slack]
    for digits in range(0, 16):
        rounded = {n: round(v, digits) for n, v in exact.items()}
        pairs = [(var(n), z3.RealVal(f"{v.numerator}/{v.denominator}")) for n, v in rounded.items()]
        if all(z3.is_true(z3.simplify(z3.substitute(f, *pairs))) for f in half) and \
                all(z3.is_true(z3.simplify(z3.substitute(pin(domain(n)), *pairs))) for n in reals):
            out = dict(values)
            out.update({n: (v.numerator if v.denominator == 1 else v) for n, v in rounded.items()})
            return out
    return None
