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
    """Rebuild `e` bottom-up, applying `f` to every sub-expression after its children. A node whose
    children all come back unchanged is passed to `f` as it is, not copied: a pass that changes
    nothing allocates nothing, and every lowering pass walks every expression."""
    if isinstance(e, A.Ref):
        segs = e.segs
        for i, s in enumerate(segs):
            if s.index is not None:
                x = map_expr(s.index, f)
                if x is not s.index:
                    if segs is e.segs:
                        segs = list(segs)
                    segs[i] = A.Seg(s.name, x, s.span)
        return f(e if segs is e.segs else A.Ref(tuple(segs), e.span))
    if isinstance(e, A.Call):
        fn, args = map_expr(e.fn, f), _map_exprs(e.args, f)
        return f(e if fn is e.fn and args is e.args else A.Call(fn, args, e.span))
    if isinstance(e, A.Draw):
        args = _map_exprs(e.args, f)
        return f(e if args is e.args else A.Draw(e.dist, args, e.span))
    if isinstance(e, A.Unary):
        x = map_expr(e.e, f)
        return f(e if x is e.e else A.Unary(e.op, x, e.span))
    if isinstance(e, A.Binary):
        a, b = map_expr(e.l, f), map_expr(e.r, f)
        return f(e if a is e.l and b is e.r else A.Binary(e.op, a, b, e.span))
    if isinstance(e, A.Cond):
        c, a, b = map_expr(e.c, f), map_expr(e.a, f), map_expr(e.b, f)
        return f(e if c is e.c and a is e.a and b is e.b else A.Cond(c, a, b, e.span))
    if isinstance(e, A.Aggregate):
        n, b = map_expr(e.count, f), map_expr(e.body, f)
        return f(e if n is e.count and b is e.body else A.Aggregate(e.op, e.var, n, b, e.span))
    return f(e)


def _map_exprs(es: tuple, f: Callable) -> tuple:
    out = tuple(map_expr(x, f) for x in es)
    return es if all(y is x for x, y in zip(es, out)) else out


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


def _fields(cls) -> tuple[str, ...]:
    """A node class's fields but its span, looked up once per class."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name != "span")
    return names


_FIELDS: dict[type, tuple[str, ...]] = {}


# the node classes as sets: a value's class is looked up once, not tried against each class in turn
# (no AST class has subclasses)
_EXPR, _STMT, _PARTS = frozenset(EXPR_TYPES), frozenset(STMT_TYPES), frozenset((A.HoldPool, A.Take))


def _map_value(v, fe, fs):
    t = type(v)
    if t in _EXPR:
        return fe(v)
    if t in _STMT:
        return map_stmt(v, fe, fs)
    if t in _PARTS:
        return _map_fields(v, fe, fs)
    if isinstance(v, tuple):
        out = []
        same = True
        for x in v:
            y = _map_value(x, fe, fs)
            if type(x) in _STMT and isinstance(y, list):
                out.extend(y)  # a statement rewritten to several
                same = False
            else:
                out.append(y)
                same = same and y is x
        return v if same else tuple(out)
    return v


def _map_fields(node, fe, fs):
    changes = {}
    for name in _fields(type(node)):
        old = getattr(node, name)
        new = _map_value(old, fe, fs)
        if new is not old:
            changes[name] = new
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
        for name in _fields(type(s)):
            v = getattr(s, name)
            if isinstance(v, tuple) and v and isinstance(v[0], STMT_TYPES):
                yield from iter_stmts(v)


def stmt_exprs(s):
    """The expressions written directly in statement s (not in nested statements)."""
    out = []

    def grab(v):
        if isinstance(v, EXPR_TYPES):
            out.append(v)
        elif isinstance(v, (A.HoldPool, A.Take)):
            for name in _fields(type(v)):
                grab(getattr(v, name))
        elif isinstance(v, tuple):
            for x in v:
                if not isinstance(x, STMT_TYPES):
                    grab(x)

    for name in _fields(type(s)):
        grab(getattr(s, name))
    return out
