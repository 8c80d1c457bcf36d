"""An engine's `request` to the hold at the call (*An engine's request*)."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.lower.defs import subst_block, subst
from serq.lang.lower.engines import EngineInfo, cost, ref, same_expr
from serq.lang.walk import iter_expr, iter_stmts, map_block


def engine_taking(info: EngineInfo):
    """The taking every admit waiting of the engine writes (they must agree)."""
    found = []

    def walk(stmts):
        for s in stmts:
            if isinstance(s, A.Admit) and s.taking is not None:
                found.append(s)
            if isinstance(s, A.SBranch):
                walk(s.then)
                walk(s.else_ or ())
    if info.eng.schedule is not None:
        walk(info.eng.schedule.body)
    if not found:
        return None
    first = found[0].taking
    for other in found[1:]:
        if not _same_taking(first, other.taking):
            raise SerqError("L120", "every `admit waiting` of an engine writes the same `taking`", other.span)
    return first


def _same_taking(a, b):
    ta, ra = a
    tb, rb = b
    if len(ta) != len(tb) or (ra is None) != (rb is None) or (ra is not None and not same_expr(ra, rb)):
        return False
    for x, y in zip(ta, tb):
        if not same_expr(x.pool, y.pool) or not same_expr(x.units, y.units) or \
                (x.reserve is None) != (y.reserve is None) or (x.reserve is not None and not same_expr(x.reserve, y.reserve)):
            return False
    return True


def _draws(e) -> bool:
    return any(isinstance(x, A.Draw) for x in iter_expr(e))


def split_request(req: A.Request, what: str):
    """Before `at admission`, the bindings, after it, and the cache; checks the items' order."""
    before, after, bindings, cache, seen_adm = [], [], (), None, False
    for it in req.items:
        if cache is not None:
            raise SerqError("L121", f"`cache (…);` is the last item of {what}", cache.span)
        if isinstance(it, A.AtAdmission):
            if seen_adm:
                raise SerqError("L121", f"{what} has one `at admission`", it.span)
            seen_adm, bindings = True, it.bindings
        elif isinstance(it, A.CacheItem):
            cache = it
        else:
            (after if seen_adm else before).append(it)
    return before, seen_adm, bindings, after, cache


def expand_request(stmt: A.CallStmt, info: EngineInfo, stage_name: str | None = None):
    """The statements `E(args);` stands for: the request with its parameters substituted."""
    req = info.eng.request
    name = stage_name or info.name
    if req is None:
        raise SerqError("L122", f"engine `{info.name}` has no `request (…) {{ … }}` to call", stmt.span)
    if stmt.from_ is not None or stmt.to is not None:
        raise SerqError("L122", f"an engine's request is called `{info.name} (args);`, without from or to", stmt.span)
    args = stmt.call.args
    if len(args) != len(req.params):
        raise SerqError("L042", f"`{info.name}`'s request takes {len(req.params)} argument(s), given {len(args)}",
                        stmt.call.span)
    for a in args:
        if _draws(a):
            raise SerqError("L123", "an argument of a request is substituted, so it may not draw: sample it into "
                            "an attribute first", a.span)
    params = set(req.params)
    for s in iter_stmts(req.items):
        if isinstance(s, A.Set) and s.name in params:
            raise SerqError("L124", f"a request sets no parameter: `{s.name}` is one", s.span)
    mapping = dict(zip(req.params, args))
    before, has_adm, bindings, after, cache = split_request(req, f"engine `{info.name}`'s request")
    taking = info.taking
    if taking is None:
        if has_adm or cache is not None:
            adm = next((it for it in req.items if isinstance(it, A.AtAdmission)), None)
            sp = adm.span if adm is not None else cache.span
            raise SerqError("L125", "a request without `taking` holds nothing, and has no `at admission` and no "
                            "`cache`", sp)
        return list(_engine_stmts(subst_block(before + after, mapping), name))
    takes, reuse = taking
    pools = tuple(t.pool.dotted for t in takes)
    hold_pools = tuple(A.HoldPool(t.pool, cost([t.pool.dotted], subst(t.units, mapping), t.span),
                                  cost([t.pool.dotted], subst(t.reserve, mapping), t.span)
                                  if t.reserve is not None else None, t.span) for t in takes)
    if not has_adm:  # without at admission, the admission is at the request's top
        before, after = [], before
    body = tuple(_engine_stmts(subst_block(after, mapping), name))
    hold = A.Hold(hold_pools,
                  cost(pools, subst(reuse, mapping), reuse.span) if reuse is not None else None,
                  tuple((n, subst(e, mapping), sp) for n, e, sp in bindings),
                  body,
                  cost(pools, subst(cache.e, mapping), cache.span) if cache is not None else None,
                  None, stmt.span,
                  tuple(subst(e, mapping) if e is not None else None for e in cache.content)
                  if cache is not None and cache.content is not None else None)
    return list(_engine_stmts(subst_block(before, mapping), name)) + [hold]


def _engine_stmts(stmts, name):
    """`prefill (e) growing P;` is `run E prefill (cost(E, e)) growing P;`; `mark m;` is `set E.m = now;`."""
    def fs(s):
        if isinstance(s, A.EngineRun):
            return A.Run((ref(name, s.span),), s.mode, cost([name], s.e, s.span), s.growing, s.span)
        if isinstance(s, A.Mark):
            return A.Set(f"{name}.{s.name}", ref("now", s.span), s.span)
        if isinstance(s, (A.AtAdmission, A.CacheItem)):
            raise SerqError("L121", "`at admission` and `cache` are items of the request itself", s.span)
        return s
    return map_block(stmts, lambda e: e, fs)


def check_request(info: EngineInfo, hidden: set[str], known: set[str], pools):
    """The rules are a queue entry's (*An engine's request*); taking names the engine's pools."""
    from serq.lang.lower.scopes import ScopeCheck, sets_of
    req = info.eng.request
    if info.taking is not None:
        mine = {p.name for p in pools if info.name in (p.admit_via, p.memory)}
        for t in info.taking[0]:
            if t.pool.dotted not in mine:
                raise SerqError("L128", f"`taking` names the engine's capacities and its device's: `{t.pool.dotted}` "
                                f"is not engine `{info.name}`'s", t.pool.span)
    if req is None:
        return
    before, _, bindings, after, cache = split_request(req, "the request")
    names = [n for n, _, _ in bindings]
    ck = ScopeCheck(f"engine `{info.name}`'s request", req.params, {info.name}, hidden, known, bindings=names,
                    registers=info.registers, engine=info.name)
    ck.check(tuple(req.items), sets_of(req.items))
    above = {s.name for s in before if isinstance(s, A.Set)}
    for i, (n, e, sp) in enumerate(bindings):
        ck._header_expr(e, above | set(names[:i]))
    if info.taking is not None:
        takes, reuse = info.taking
        for t in takes:
            for e in (t.units, t.reserve):
                if e is not None:
                    ck._header_expr(e, above)
        if reuse is not None:
            ck._header_expr(reuse, above)


def outside_names(server, wl, engines):
    """What a request sets keeps its spelling, and the rest of the program neither reads nor sets it."""
    req_names = {}
    for info in engines.values():
        if info.eng.request is not None:
            for s in iter_stmts(info.eng.request.items):
                if isinstance(s, A.Set) and s.name not in info.eng.request.params:
                    req_names.setdefault(s.name, info.name)
            for it in info.eng.request.items:
                if isinstance(it, A.AtAdmission):
                    for n, _, _ in it.bindings:
                        req_names.setdefault(n, info.name)
    if not req_names:
        return
    blocks = [server]
    if wl is not None:
        blocks += [wl.init or (), wl.turn or (), wl.session or ()]
    from serq.lang.walk import stmt_exprs
    for b in blocks:
        for s in iter_stmts(b):
            if isinstance(s, A.Set) and s.name in req_names:
                raise SerqError("L129", f"`{s.name}` is engine `{req_names[s.name]}`'s request's: the rest of the "
                                "program neither reads nor sets it", s.span)
            for e in stmt_exprs(s):
                for x in iter_expr(e):
                    if isinstance(x, A.Ref) and x.simple and x.head in req_names:
                        raise SerqError("L129", f"`{x.head}` is engine `{req_names[x.head]}`'s request's: the rest "
                                        "of the program neither reads nor sets it; the caller reads what it marks",
                                        x.span)
