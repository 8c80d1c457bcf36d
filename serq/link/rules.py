"""Rules checked on the IR itself, in one place (architecture: the IR's well-formedness as a
table of rules): loops let time pass, the hidden rule, the lints, holds' indices, forks join."""
from __future__ import annotations

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.link.exprs import const_value


def span_of(prog: I.Program, at: I.Loc | None) -> Span | None:
    if at is None:
        return None
    f = prog.files[at.file] if at.file < len(prog.files) else "<ir>"
    return Span(f, at.line, at.col, at.end_line, at.end_col)


def expr_nodes(e):
    stack = [e]
    while stack:
        x = stack.pop()
        if x is None:
            continue
        yield x
        k = x.k
        if k == "un":
            stack.append(x.e)
        elif k == "bin":
            stack += [x.l, x.r]
        elif k == "if":
            stack += [x.c, x.a, x.b]
        elif k in ("fn", "draw"):
            stack += list(x.args)
        elif k == "cost":
            stack.append(x.e)
        elif k == "obs" and x.of.index is not None:
            stack.append(x.of.index)


def attrs_read(e) -> set[str]:
    return {x.name for x in expr_nodes(e) if x.k == "attr"}


def reads_live(e) -> bool:
    """Live pool or stage state, or the clock (*Lints*)."""
    return any(x.k == "obs" or (x.k == "ctx" and x.name == "now") for x in expr_nodes(e))


def header_exprs(h: I.Hold):
    out = []
    for p in h.pools:
        out.append(p.units)
        if p.reserve is not None:
            out.append(p.reserve)
    if h.reuse is not None:
        out.append(h.reuse)
    return out


def children(s):
    k = s.k
    if k in ("hold", "while", "loop", "fork"):
        return [s.body]
    if k == "branch":
        return [s.then, s.else_]
    return []


def walk(stmts):
    for s in stmts:
        yield s
        for b in children(s):
            yield from walk(b)


def passes_time(stmts, server_passes: bool) -> bool:
    """Every path reaches a run (not of constant zero work), a hold whose body does, or end
    (*Every instant settles*)."""
    for s in stmts:
        k = s.k
        if k == "run":
            v = const_value(s.work)
            if v is None or v > 0:
                return True
        elif k == "end":
            return True
        elif k == "hold" and passes_time(s.body, server_passes):
            return True
        elif k == "branch" and passes_time(s.then, server_passes) and passes_time(s.else_, server_passes):
            return True
        elif k == "loop" and passes_time(s.body, server_passes):
            return True
        elif k == "turn" and server_passes:
            return True
    return False


def check_program(prog: I.Program, linker=None):
    server_passes = passes_time(prog.server, False)
    blocks = [("server", prog.server)]
    if prog.workload.session is not None:
        blocks.append(("session", prog.workload.session))
    for side, b in blocks:
        _loops(prog, b, server_passes)
        _holds(prog, b)
        _live_sets(prog, b)
        _forks(prog, b)
    _hidden(prog, prog.server, set(prog.workload.hidden))


def _loops(prog, stmts, server_passes):
    for s in walk(stmts):
        if s.k in ("loop", "while") and not passes_time(s.body, server_passes):
            raise SerqError("L096", f"a `{s.k}` must let time pass on every pass through its body: every path "
                            "reaches a run, a hold whose body does, or end", span_of(prog, s.at))


def _holds(prog, stmts):
    for s in walk(stmts):
        if s.k != "hold":
            continue
        if s.cache is None:
            for b in walk(s.body):
                for e in _exprs(b):
                    if "cached" in attrs_read(e):
                        raise SerqError("L221", "a hold without `cache` reads `cached`, which is 0 in its body "
                                        "(`cache (0)` consumes the prefix and keeps nothing)", span_of(prog, b.at))
        idx_attrs = set()
        for p in s.pools:
            if p.pool.index is not None:
                idx_attrs |= attrs_read(p.pool.index)
                if reads_live(p.pool.index):
                    raise SerqError("L223", "a hold's index reads attributes and numbers, not the state or the clock",
                                    span_of(prog, s.at))
                if idx_attrs & {"cached", "computed"}:
                    raise SerqError("L223", "a hold's index reads neither `cached` nor `computed`, which admission "
                                    "and preemption set", span_of(prog, s.at))
        for b in walk(s.body):
            if b.k in ("set", "choose") and b.name in idx_attrs:
                raise SerqError("L223", f"the hold's body changes `{b.name}`, which the hold's index reads: the "
                                "readings must name one member", span_of(prog, b.at))
            if b.k == "turn" and idx_attrs:
                raise SerqError("L223", "a turn inside a hold changes the attributes its index reads",
                                span_of(prog, b.at))


def _exprs(s):
    k = s.k
    if k in ("set", "observe", "grow", "load"):
        return [s.e]
    if k == "run":
        return [s.work]
    if k in ("branch", "while"):
        return [s.cond]
    if k == "choose":
        return [s.n, *s.keys]
    if k == "hold":
        return header_exprs(s) + ([s.cache] if s.cache is not None else [])
    return []


def _live_sets(prog, stmts):
    """Lint: a set that reads live state and is then used in a hold's header (*Lints*)."""
    live: dict[str, I.Loc | None] = {}

    def go(ss):
        for s in ss:
            if s.k == "set":
                if reads_live(s.e):
                    live[s.name] = s.at
                else:
                    live.pop(s.name, None)
            elif s.k == "hold":
                for e in header_exprs(s):
                    bad = attrs_read(e) & set(live)
                    if bad:
                        n = sorted(bad)[0]
                        raise SerqError("L220", f"`{n}` was set from live pool or stage state before the session "
                                        "queued, and the header is evaluated at admission: write it with "
                                        "`at admission (…)`", span_of(prog, live[n]) or span_of(prog, s.at))
                go(s.body)
            else:
                for b in children(s):
                    go(b)
    go(stmts)


def _forks(prog, stmts):
    forks = [s for s in walk(stmts) if s.k == "fork"]
    if forks and not any(s.k == "join" for s in walk(stmts)):
        raise SerqError("L209", "a program that forks joins somewhere: write `join;` where the legs must have "
                        "ended", span_of(prog, forks[0].at))


def _hidden(prog, stmts, hidden: set[str]):
    """Decisions and allocations read a hidden attribute only after a run whose work reads it has
    ended; derived attributes too; both arms of a branch must reveal (*hidden*)."""
    if not hidden:
        return

    def decide(e, tainted, at, what):
        for x in expr_nodes(e):
            if x.k == "attr" and x.name in tainted:
                raise SerqError("L210", f"{what} reads `{x.name}`, which is hidden until a run whose work reads it "
                                "has ended", span_of(prog, x.at or at))

    def tgt(t, tainted, at):
        if t is not None and t.index is not None:
            decide(t.index, tainted, at, "an index")

    seen: dict = {}  # (block, tainted before) -> tainted after

    def go(ss, tainted: set) -> set:
        # a loop's body is gone through twice, so nested loops would be 2^depth passes: a block
        # already gone through from the same taint is not gone through again (it raised nothing then)
        key = (id(ss), frozenset(tainted))
        if key not in seen:
            seen[key] = _go(ss, tainted)
        return set(seen[key])

    def _go(ss, tainted: set) -> set:
        tainted = set(tainted)
        for s in ss:
            k = s.k
            if k == "set":
                if attrs_read(s.e) & tainted:
                    tainted.add(s.name)
                else:
                    tainted.discard(s.name)
            elif k == "run":
                for t in s.stages:
                    tgt(t, tainted, s.at)
                tainted -= attrs_read(s.work)
            elif k == "branch":
                decide(s.cond, tainted, s.at, "a branch's guard")
                tainted = go(s.then, tainted) | go(s.else_, tainted)
            elif k == "while":
                decide(s.cond, tainted, s.at, "a while's guard")
                t1 = go(s.body, tainted)
                decide(s.cond, t1, s.at, "a while's guard")
                tainted |= t1
            elif k == "loop":
                tainted |= go(s.body, go(s.body, tainted))
            elif k == "choose":
                for e in [s.n, *s.keys]:
                    decide(e, tainted, s.at, "a choose")
                tainted.discard(s.name)
            elif k == "hold":
                for p in s.pools:
                    tgt(p.pool, tainted, s.at)
                for e in header_exprs(s):
                    decide(e, tainted, s.at, "a hold's header")
                if s.lease is not None:
                    decide(s.lease.duration, tainted, s.at, "a lease's duration")
                tainted = go(s.body, tainted)
            elif k in ("grow", "load"):
                tgt(s.pool, tainted, s.at)
                decide(s.e, tainted, s.at, f"a {k}")
            elif k == "fork":
                go(s.body, tainted)
        return tainted

    go(stmts, hidden)
