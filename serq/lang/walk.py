"""Generic rewriting of the AST: every lowering pass is a function on expressions or statements
applied through these two walkers, so no pass re-implements the tree's shape."""
from __future__ import annotations

import dataclasses
from typing import Callable

from serq.lang import ast as A

EXPR_TYPES = (A.Num, A.Str, A.Ref, A.Call, A.Draw, A.Unary, A.Binary, A.Cond, A.Aggregate)
STMT_TYPES = (A.Turn, A.Set, A.CostFields, A.Observe, A.Hold, A.Grow, A.Drop, A.Release, A.Load, A.Run,
              A.Branch, A.While, A.Loop, A.Fork, A.Join, A.Choose, A.End, A.Mark, A.CallStmt, A.Transfer,
              A.Tool, A.EngineRun, A.AtAdmission, A.CacheItem)


def map_expr(e, f: Callable):
    """Rebuild `e` bottom-up, applying `f` to every sub-expression after its children."""
    if isinstance(e, A.Ref):
        segs = tuple(A.Seg(s.name, map_expr(s.index, f) if s.index is not None else None, s.span)
                     for s in e.segs)
        return f(A.Ref(segs, e.span))
    if isinstance(e, A.Call):
        return f(A.Call(map_expr(e.fn, f), tuple(map_expr(a, f) for a in e.args), e.span))
    if isinstance(e, A.Draw):
        return f(A.Draw(e.dist, tuple(map_expr(a, f) for a in e.args), e.span))
    if isinstance(e, A.Unary):
        return f(A.Unary(e.op, map_expr(e.e, f), e.span))
    if isinstance(e, A.Binary):
        return f(A.Binary(e.op, map_expr(e.l, f), map_expr(e.r, f), e.span))
    if isinstance(e, A.Cond):
        return f(A.Cond(map_expr(e.c, f), map_expr(e.a, f), map_expr(e.b, f), e.span))
    if isinstance(e, A.Aggregate):
        return f(A.Aggregate(e.op, e.var, map_expr(e.count, f), map_expr(e.body, f), e.span))
    return f(e)


def sub_exprs(e):
    """The direct sub-expressions of e."""
    if isinstance(e, A.Ref):
        return [s.index for s in e.segs if s.index is not None]
    if isinstance(e, A.Call):
        return [e.fn, *e.args]
    if isinstance(e, A.Draw):
        return list(e.args)
    if isinstance(e, A.Unary):
        return [e.e]
    if isinstance(e, A.Binary):
        return [e.l, e.r]
    if isinstance(e, A.Cond):
        return [e.c, e.a, e.b]
    if isinstance(e, A.Aggregate):
        return [e.count, e.body]
    return []


def iter_expr(e):
    """Every node of an expression, pre-order."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(sub_exprs(x)))


def _map_value(v, fe, fs):
    if isinstance(v, EXPR_TYPES):
        return fe(v)
    if isinstance(v, STMT_TYPES):
        return map_stmt(v, fe, fs)
    if isinstance(v, (A.HoldPool, A.Take)):
        return _map_fields(v, fe, fs)
    if isinstance(v, tuple):
        out = []
        for x in v:
            y = _map_value(x, fe, fs)
            if isinstance(x, STMT_TYPES) and isinstance(y, list):
                out.extend(y)  # a statement rewritten to several
            else:
                out.append(y)
        return tuple(out)
    return v


def _map_fields(node, fe, fs):
    changes = {}
    for fld in dataclasses.fields(node):
        if fld.name == "span":
            continue
        old = getattr(node, fld.name)
        new = _map_value(old, fe, fs)
        if new is not old:
            changes[fld.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def map_stmt(s, fe: Callable, fs: Callable | None = None):
    """Apply `fe` to every top-level expression inside statement `s` (fe maps whole expressions), and
    `fs` to every statement after its children; `fs` may return a list to splice several."""
    s2 = _map_fields(s, fe, fs)
    return fs(s2) if fs is not None else s2


def map_block(stmts, fe: Callable, fs: Callable | None = None) -> tuple:
    return _map_value(tuple(stmts), fe, fs)


def iter_stmts(stmts):
    """Every statement in a block, nested ones included, pre-order."""
    for s in stmts:
        yield s
        for fld in dataclasses.fields(s):
            v = getattr(s, fld.name)
            if isinstance(v, tuple) and v and isinstance(v[0], STMT_TYPES):
                yield from iter_stmts(v)


def stmt_exprs(s):
    """The expressions written directly in statement s (not in nested statements)."""
    out = []

    def grab(v):
        if isinstance(v, EXPR_TYPES):
            out.append(v)
        elif isinstance(v, (A.HoldPool, A.Take)):
            for fld in dataclasses.fields(v):
                if fld.name != "span":
                    grab(getattr(v, fld.name))
        elif isinstance(v, tuple):
            for x in v:
                if not isinstance(x, STMT_TYPES):
                    grab(x)

    for fld in dataclasses.fields(s):
        if fld.name != "span":
            grab(getattr(s, fld.name))
    return out
