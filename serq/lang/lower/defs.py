"""`def`s written out (*Syntax*: a name for an expression, or for statements)."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.walk import map_block, map_expr

MAX_DEPTH = 64


def substitute_ref(e: A.Ref, mapping: dict):
    """Replace a name by an expression; a replaced head keeps the rest of its path (`q[0]` with q := kv)."""
    head = e.segs[0]
    if head.name not in mapping:
        return e
    rep = mapping[head.name]
    if e.simple:
        return rep
    if isinstance(rep, A.Ref):
        last = rep.segs[-1]
        if head.index is not None:
            if last.index is not None:
                raise SerqError("L044", f"`{e.dotted}` indexes an argument that already has an index", e.span)
            last = A.Seg(last.name, head.index, last.span)
        return A.Ref(rep.segs[:-1] + (last,) + e.segs[1:], e.span)
    raise SerqError("L044", f"`{head.name}` stands for an expression here, not a name with a path", e.span)


def subst(e, mapping: dict):
    if not mapping:
        return e
    return map_expr(e, lambda x: substitute_ref(x, mapping) if isinstance(x, A.Ref) else x)


def subst_block(stmts, mapping: dict):
    if not mapping:
        return tuple(stmts)
    return map_block(stmts, lambda e: subst(e, mapping))


class Defs:
    def __init__(self, defs: dict[str, A.Def]):
        self.defs = defs

    def _bind(self, d: A.Def, call: A.Call) -> dict:
        if len(call.args) != len(d.params):
            raise SerqError("L042", f"`{d.name}` takes {len(d.params)} argument(s), given {len(call.args)}",
                            call.span)
        return dict(zip(d.params, call.args))

    def expr(self, e, depth: int = 0):
        """Write out every expression def called in e."""
        if not self.defs:
            return e
        def f(x):
            if isinstance(x, A.Call) and x.fn.simple and x.fn.head in self.defs:
                d = self.defs[x.fn.head]
                if d.is_block:
                    raise SerqError("L043", f"`{d.name}` names statements; call it as a statement, "
                                    f"`{d.name}(…);`", x.span)
                if depth >= MAX_DEPTH:
                    raise SerqError("L041", f"`{d.name}` calls itself: a def is written out, so it cannot recurse",
                                    x.span)
                return self.expr(subst(d.body, self._bind(d, x)), depth + 1)
            return x
        return map_expr(e, f)

    def block(self, stmts, depth: int = 0) -> tuple:
        """Statement defs first (their bodies written in at the call), then expression defs."""
        if not self.defs:
            return tuple(stmts)
        def calls(s):
            if isinstance(s, A.CallStmt) and s.call.fn.simple and s.call.fn.head in self.defs \
                    and s.from_ is None and s.to is None:
                d = self.defs[s.call.fn.head]
                if not d.is_block:
                    raise SerqError("L043", f"`{d.name}` names an expression; a statement cannot be one", s.span)
                if depth >= MAX_DEPTH:
                    raise SerqError("L041", f"`{d.name}` calls itself: a def is written out, so it cannot recurse",
                                    s.span)
                return list(self.block(subst_block(d.body, self._bind(d, s.call)), depth + 1))
            return s
        stmts = map_block(stmts, lambda e: e, calls)
        return map_block(stmts, self.expr)
