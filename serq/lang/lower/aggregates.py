"""Aggregates `max/min/sum j in n (e)` written out with j = 0 … n-1 (*Expressions*), at most 4 096
terms in a program, nested ones included."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.lower.constants import NotConstant, fold, fmt, whole
from serq.lang.lower.defs import subst
from serq.lang.walk import map_block, map_expr

MAX_TERMS = 4096


class Aggregates:
    def __init__(self, consts: dict[str, float], taken: set[str]):
        self.consts = consts
        self.taken = taken
        self.terms = 0

    def expr(self, e):
        return map_expr(e, self._one) if _has_agg(e) else e

    def block(self, stmts):
        return map_block(stmts, self.expr)

    def _one(self, x):
        if not isinstance(x, A.Aggregate):
            return x
        if x.var in self.taken or x.var in self.consts:
            raise SerqError("L037", f"the aggregate's index `{x.var}` is a name the program already has", x.span)
        try:
            n = fold(x.count, self.consts)
        except NotConstant as nc:
            raise SerqError("L036", f"an aggregate's count is a number or a constant: {nc.why}", x.count.span) \
                from None
        if not whole(n):
            raise SerqError("L036", f"an aggregate's count must be a whole number, not {fmt(n)}", x.count.span)
        n = int(n)
        self.terms += n
        if self.terms > MAX_TERMS:
            raise SerqError("L035", f"aggregates write out more than {MAX_TERMS:,} terms in this program", x.span)
        if n == 0 and x.op != "sum":
            raise SerqError("L036", f"`{x.op}` over no terms has no value", x.count.span)
        terms = [subst(x.body, {x.var: A.Num(float(k), x.span)}) for k in range(n)]
        if x.op == "sum" and not terms:
            return A.Num(0.0, x.span)
        # sum(t0, t1, …) adds left to right: the written-out chain, flat so that the IR stays shallow
        return A.Call(A.Ref((A.Seg(x.op, None, x.span),), x.span), tuple(terms), x.span)


def _has_agg(e) -> bool:
    from serq.lang.walk import iter_expr
    return any(isinstance(x, A.Aggregate) for x in iter_expr(e))
