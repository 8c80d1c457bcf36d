"""Constants: `let` values, numbers or inf, computed at link time (*Expressions*: a constant that
evaluates to NaN does not link)."""
from __future__ import annotations

import math

from serq.diagnostics import SerqError
from serq.lang import ast as A

INF = math.inf
NAN = math.nan


def whole(v: float, lo: float = 0, hi: float = INF) -> bool:
    """A whole number, finite, in [lo, hi]: every count, index, seed and phase number is one.
    NaN and the infinities are not (`is_integer` is False for them, where `floor` would raise)."""
    return float(v).is_integer() and lo <= v <= hi


def _keep(f):
    """floor, ceil and round of inf or NaN are themselves."""
    return lambda x: float(f(x)) if math.isfinite(x) else x


_floor = _keep(math.floor)  # made once: reusable() is read at every admission


def _reusable(n: float, b: float) -> float:
    # catalogue: the whole blocks of n tokens a prefix hit may reuse, the last token recomputed
    if n != n or not b > 0:
        return NAN
    if n < 1:
        return 0.0
    k = _floor((n - 1) / b)
    return 0.0 if k == 0 else k * b  # no whole block of an infinite size: 0, not 0 * inf


def _sum(*a):
    t = 0.0
    for x in a:  # left to right, as a + b + c
        t = t + x
    return t


def _pow(a, b):
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError):
        return INF if a > 1 else NAN


def sqrt(x):
    return math.sqrt(x) if x >= 0 else NAN


def log(x):
    if x > 0:
        return math.log(x)
    return -INF if x == 0 else NAN


def _min(a: float, *rest: float) -> float:
    """min with NaN wherever an argument is NaN (Python's min answers by the arguments' order)."""
    for b in rest:
        a = a if a <= b else (b if b < a else NAN)  # neither holds: one is NaN
    return a


def _max(a: float, *rest: float) -> float:
    for b in rest:
        a = a if a >= b else (b if b > a else NAN)
    return a


# The functions, total on every number, inf and NaN included: the constant folder and the
# interpreter call these same ones (name: (least arguments, most, function)).
FUNCS = {
    "min": (1, None, _min),
    "max": (1, None, _max),
    "sum": (1, None, _sum),
    "floor": (1, 1, _floor),
    "ceil": (1, 1, _keep(math.ceil)),
    "round": (1, 1, _keep(lambda x: math.floor(x + 0.5))),
    "abs": (1, 1, abs),
    "sqrt": (1, 1, sqrt),
    "log": (1, 1, log),
    "pow": (2, 2, _pow),
    "reusable": (2, 2, _reusable),
}


def mul(l: float, r: float) -> float:
    if (l == 0 and math.isinf(r)) or (r == 0 and math.isinf(l)):
        return NAN
    return l * r


def div(l: float, r: float) -> float:
    if r == 0:
        return NAN if (l == 0 or l != l) else math.copysign(INF, l)
    return l / r


def mod(l: float, r: float) -> float:
    if r == 0 or math.isinf(l):
        return NAN
    return math.fmod(l, r)


def arith(op: str, l: float, r: float) -> float:
    """The binary operators on numbers, shared by the constant folder and the interpreter."""
    if op == "+":
        return l + r
    if op == "-":
        return l - r
    if op == "*":
        return mul(l, r)
    if op == "/":
        return div(l, r)
    if op == "%":
        return mod(l, r)
    if op == "==":
        return 1.0 if l == r else 0.0
    if op == "!=":
        return 1.0 if l != r else 0.0
    if op == "<":
        return 1.0 if l < r else 0.0
    if op == "<=":
        return 1.0 if l <= r else 0.0
    if op == ">":
        return 1.0 if l > r else 0.0
    if op == ">=":
        return 1.0 if l >= r else 0.0
    if op == "&&":
        return 1.0 if (l != 0 and r != 0) else 0.0
    if op == "||":
        return 1.0 if (l != 0 or r != 0) else 0.0
    raise ValueError(op)


class NotConstant(Exception):
    def __init__(self, node, why: str):
        super().__init__(why)
        self.node = node
        self.why = why


def fold(e, consts: dict[str, float]) -> float:
    """The value of a constant expression, or NotConstant naming the first part that is not."""
    if isinstance(e, A.Num):
        return e.value
    if isinstance(e, A.Ref):
        if e.simple and e.head in consts:
            return consts[e.head]
        if e.simple and e.head == "inf":
            return INF
        raise NotConstant(e, f"`{e.dotted}` is not a constant")
    if isinstance(e, A.Unary):
        v = fold(e.e, consts)
        return -v if e.op == "-" else (1.0 if v == 0 else 0.0)
    if isinstance(e, A.Binary):
        return arith(e.op, fold(e.l, consts), fold(e.r, consts))
    if isinstance(e, A.Cond):
        c = fold(e.c, consts)
        return fold(e.a, consts) if c != 0 else fold(e.b, consts)
    if isinstance(e, A.Call) and e.fn.simple and e.fn.head in FUNCS:
        lo, hi, fn = FUNCS[e.fn.head]
        if len(e.args) < lo or (hi is not None and len(e.args) > hi):
            raise NotConstant(e, f"{e.fn.head} takes {lo if lo == hi else f'{lo} or more'} arguments")
        return float(fn(*[fold(a, consts) for a in e.args]))
    if isinstance(e, A.Draw):
        raise NotConstant(e, "a draw is not a constant")
    if isinstance(e, A.Str):
        raise NotConstant(e, "a string is not a number")
    raise NotConstant(e, "not a constant expression")


def fold_or_none(e, consts):
    try:
        return fold(e, consts)
    except NotConstant:
        return None


def require_constant(e, consts, what: str, code: str = "L020") -> float:
    try:
        v = fold(e, consts)
    except NotConstant as nc:
        raise SerqError(code, f"{what} must be a constant: {nc.why}", getattr(nc.node, "span", None)) from None
    if math.isnan(v):
        raise SerqError("L021", f"{what} evaluates to NaN", e.span)
    return v


MAX_MEMBERS = 100_000  # an array or family's size: a run builds every member, and reports each


def require_count(e, consts, what: str, lo: int = 1, hi: int | None = MAX_MEMBERS) -> int:
    """A count is a whole number (*Arrivals and the run*), or the program does not link; an
    array's, at most MAX_MEMBERS."""
    v = require_constant(e, consts, what)
    if not whole(v, lo, INF if hi is None else hi):
        rng = f"from {lo}" + (f" to {hi:,}" if hi is not None else " up")
        raise SerqError("L022", f"{what} must be a whole number {rng}, not {fmt(v)}", e.span)
    return int(v)


def fmt(v: float) -> str:
    """A number as a diagnostic writes it: NaN, inf and -inf included."""
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if whole(v, -1e15, 1e15):
        return str(int(v))
    return repr(v)
