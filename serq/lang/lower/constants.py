"""Constants: `let` values, numbers or inf, computed at link time (*Expressions*: a constant that
evaluates to NaN does not link)."""
from __future__ import annotations

import math

from serq.diagnostics import SerqError
from serq.lang import ast as A

INF = math.inf


def _reusable(n: float, b: float) -> float:
    # catalogue: the whole blocks of n tokens a prefix hit may reuse, the last token recomputed
    return math.floor((n - 1) / b) * b if n >= 1 else 0.0


FUNCS = {
    "min": (1, None, lambda *a: min(a)),
    "max": (1, None, lambda *a: max(a)),
    "sum": (1, None, lambda *a: _sum(a)),
    "floor": (1, 1, math.floor),
    "ceil": (1, 1, math.ceil),
    "round": (1, 1, lambda x: math.floor(x + 0.5)),
    "abs": (1, 1, abs),
    "sqrt": (1, 1, lambda x: math.sqrt(x) if x >= 0 else math.nan),
    "log": (1, 1, lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)),
    "pow": (2, 2, lambda a, b: _pow(a, b)),
    "reusable": (2, 2, _reusable),
}


def _sum(a):
    t = 0.0
    for x in a:  # left to right, as a + b + c
        t = t + x
    return t


def _pow(a, b):
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError):
        return math.inf if a > 1 else math.nan


def arith(op: str, l: float, r: float) -> float:
    """The binary operators on numbers, shared by the constant folder and the interpreter."""
    if op == "+":
        return l + r
    if op == "-":
        return l - r
    if op == "*":
        if (l == 0 and math.isinf(r)) or (r == 0 and math.isinf(l)):
            return math.nan
        return l * r
    if op == "/":
        if r == 0:
            return math.nan if l == 0 else math.copysign(math.inf, l)
        return l / r
    if op == "%":
        if r == 0 or math.isinf(l):
            return math.nan
        return math.fmod(l, r)
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
        args = [fold(a, consts) for a in e.args]
        try:
            return float(fn(*args))
        except (ValueError, OverflowError):
            return math.nan
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
    if math.isinf(v) or v != math.floor(v) or v < lo or (hi is not None and v > hi):
        rng = f"from {lo}" + (f" to {hi:,}" if hi is not None else " up")
        raise SerqError("L022", f"{what} must be a whole number {rng}, not {fmt(v)}", e.span)
    return int(v)


def fmt(v: float) -> str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == math.floor(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)
