"""`at admission (x = e, …)`: the bindings substituted into the hold's header by the parser, and
`set x = e;` at the top of a body that reads x (*`at admission`*)."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.lower.defs import subst
from serq.lang.walk import iter_expr, iter_stmts, map_block, stmt_exprs

# what a binding may not read if the body reads it: live state (*`at admission`*)
OBSERVABLES = {"used", "free", "holders", "queued", "queue", "busy", "cachedin", "budget_left", "work"}
LIVE_NAMES = {"now", "cached", "present", "waited", "decoding", "admission", "remaining", "position"}


def _reads(e, name) -> bool:
    return any(isinstance(x, A.Ref) and x.head == name for x in iter_expr(e))


def _live(e):
    for x in iter_expr(e):
        if isinstance(x, A.Call) and x.fn.simple and x.fn.head in OBSERVABLES:
            return x
        if isinstance(x, A.Ref) and x.simple and x.head in LIVE_NAMES:
            return x
    return None


def lower_bindings(stmts, names_out: dict, taken: set = frozenset()):
    def fs(s):
        if isinstance(s, A.Hold) and s.bindings:
            return _one(s, names_out, taken)
        return s
    return map_block(stmts, lambda e: e, fs)


def _one(h: A.Hold, names_out: dict, taken) -> A.Hold:
    env: dict = {}
    names = [n for n, _, _ in h.bindings]
    for i, (name, e, sp) in enumerate(h.bindings):
        if name in taken:
            raise SerqError("L066", f"the binding `{name}` is its own name: a declaration, context variable or "
                            "built-in attribute of the program already has it", sp)
        for later in names[i + 1:]:
            if _reads(e, later):
                raise SerqError("L133", f"the binding `{name}` reads `{later}`, bound after it: a binding reads only "
                                "the ones before it in its clause", e.span)
        if name in env:
            raise SerqError("L130", f"`{name}` is bound twice in one `at admission`", sp)
        if any(isinstance(x, A.Draw) for x in iter_expr(e)):
            raise SerqError("L131", f"the binding `{name}` may not draw: it is substituted, so a name used twice "
                            "would draw twice", e.span)
        env[name] = subst(e, env)  # a later binding sees the earlier ones
        names_out.setdefault(name, sp)
    pools = tuple(A.HoldPool(p.pool, subst(p.units, env), subst(p.reserve, env) if p.reserve is not None else None,
                             p.span) for p in h.pools)
    reuse = subst(h.reuse, env) if h.reuse is not None else None
    # the body sees a binding through a set at its top, its admission value
    read = set()  # the names the body and the cache read, each expression walked once
    for e in [e for s in iter_stmts(h.body) for e in stmt_exprs(s)] + ([h.cache] if h.cache is not None else []):
        read.update(x.head for x in iter_expr(e) if isinstance(x, A.Ref))
    tops = []
    for name, e, sp in h.bindings:
        if name in read:
            live = _live(env[name])
            if live is not None:
                raise SerqError("P010", f"the body reads `{name}`, whose binding reads live state "
                                f"(`{_show(live)}`) that has another value in the body; the body reads `cached`, "
                                "the units the admission consumed", sp)
            tops.append(A.Set(name, env[name], sp))
    return A.Hold(pools, reuse, (), tuple(tops) + h.body, h.cache, h.lease, h.span, h.content)


def _show(x):
    if isinstance(x, A.Call):
        return x.fn.dotted + "(…)"
    return x.dotted
