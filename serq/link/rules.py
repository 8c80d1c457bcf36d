"""Rules checked on the IR itself, in one place (architecture: the IR's well-formedness as a
table of rules): loops let time pass, the hidden rule, the lints, holds' indices, forks join."""
from __future__ import annotations

import math
from dataclasses import replace

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.lang.lower.constants import fmt, whole
from serq.link.exprs import const_value
from serq.link import names as N
from serq.link.names import STAGE_OBS


def span_of(prog: I.Program, at: I.Loc | None) -> Span | None:
    if not isinstance(at, I.Loc):
        return None
    f = prog.files[at.file] if at.file < len(prog.files) else "<ir>"
    return Span(f, at.line, at.col, at.end_line, at.end_col)


def own_at(x, at):
    """x's own place, else the enclosing one (a hold content's `at` is an expression, not a place)."""
    loc = getattr(x, "at", None)
    return loc if isinstance(loc, I.Loc) else at


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
                                        "(`cache (cost(P, 0))` consumes the prefix and keeps nothing; in an engine's "
                                        "request, `cache (0);`)", span_of(prog, b.at))
        if s.lease is not None and all(p.pool.name != s.lease.pool.name for p in s.pools):
            raise SerqError("L226", "`lease P (t)` names one of the hold's pools", span_of(prog, s.at))
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


# ---------------------------------------------------------------- values the run relies on
# Each predicate states one rule once; the linker calls it where it builds the node (with the
# source expression's place), and check_values calls it again on an IR read from a file, whose
# numbers nobody has checked (a negative rate would pass the schema and hang the run).

def poisson_rate_problem(v) -> str | None:
    if v is None or not 0 < v < math.inf:
        return "poisson(rate) takes a positive, finite constant rate" + ("" if v is None else f", not {fmt(v)}")
    return None


def renewal_gap_problem(v) -> str | None:
    if v is not None and not 0 < v < math.inf:
        return f"a constant renewal gap must be positive and finite, not {fmt(v)}"
    return None


def sessions_problem(law, v) -> str | None:
    if v is None or not whole(v, 1, 1_000_000):
        return f"{law}(n) is a whole number of sessions from 1 to a million" + ("" if v is None else f", not {fmt(v)}")
    return None


def fifo_servers_problem(v) -> str | None:
    if v is None or not (whole(v, 1) or v == math.inf):
        return "a fifo's servers are a constant whole number >= 1 (or inf)" + ("" if v is None else f", not {fmt(v)}")
    return None


def ps_cap_problem(v) -> str | None:
    if v is not None and not 0 < v < math.inf:  # at inf no time would pass (*Stages*)
        return f"a ps stage's capacity is above 0 and finite, not {fmt(v)}"
    return None


def pool_cap_problem(v) -> str | None:
    if v is None or math.isnan(v) or v < 0:
        return "a pool's cap is a constant, a number >= 0 or inf"
    return None


def block_problem(v) -> str | None:
    if v is None or not whole(v, 1):
        return "a pool's block is a constant whole number >= 1" + ("" if v is None else f", not {fmt(v)}")
    return None


def granule_problem(v) -> str | None:
    if v is None or not whole(v, 1):
        return "an engine's granule is a constant whole number >= 1" + ("" if v is None else f", not {fmt(v)}")
    return None


def chunk_problem(e) -> tuple | None:
    """An IR's `each at most` as the linker writes it (L114, L115): constants chosen by conditions,
    or max(k, e) with k a constant above 0, so a computed cap stays above 0. 0 is the IR's no cap
    (a step's default), as the kernel reads it. (code, message, place) or None."""
    if e.k == "if":
        return chunk_problem(e.a) or chunk_problem(e.b)
    if e.k == "fn" and e.name == "max" and len(e.args) == 2:
        k = const_value(e.args[0])
        if k is not None and k > 0:
            return None
        return ("L114", "`each at most (max(k, e))` needs k a constant above 0, so that a computed cap stays "
                "above 0", e.at)
    v = const_value(e)
    if v is None:
        return ("L114", "`each at most` chooses among constants, or max(k, e) with k a constant above 0", e.at)
    if v != 0 and not v > 0:
        return ("L115", f"`each at most ({fmt(v)})`: a cap below 0 (0 is no cap)", e.at)
    return None


def _istmts(body):
    """An iteration's statements, those in its branches too."""
    for x in body:
        yield x
        if x.k == "branch":
            yield from _istmts(x.then)
            yield from _istmts(x.else_)


def amount_problem(v, what) -> str | None:
    if v is not None and (math.isnan(v) or v < 0):
        return f"{what} is an amount, not negative and not NaN: this one is {fmt(v)}"
    return None


def check_values(prog: I.Program):
    """The value rules above, and the arrays' sizes, the draws' constant parameters and the
    runs over several stages, on an IR given as a file (the linker checked a program's)."""
    from serq.lang.lower.constants import MAX_MEMBERS
    from serq.link.exprs import draw_param_error

    def fail(code, msg, *ats):
        at = next((a for a in ats if a is not None), None)
        raise SerqError(code, msg, span_of(prog, at) or Span(prog.files[0] if prog.files else "<ir>", 1, 1))

    def need(problem, code, *ats):
        if problem is not None:
            fail(code, problem, *ats)

    arr = prog.workload.arrive
    if arr.k == "poisson":
        need(poisson_rate_problem(const_value(arr.rate)), "L230", arr.rate.at, arr.at)
    elif arr.k == "renewal":
        need(renewal_gap_problem(const_value(arr.gap)), "L231", arr.gap.at, arr.at)
    elif arr.k in ("closed", "batch"):
        need(sessions_problem(arr.k, float(arr.n)), "L022", arr.at)
    elif arr.k == "trace" and prog.workload.trace is None:
        fail("L238", "`arrive trace;` replays a trace's arrival times: the workload needs a trace", arr.at)
    for d in list(prog.stages) + list(prog.pools):
        if d.count is not None and not 1 <= d.count <= MAX_MEMBERS:
            fail("L022", f"an array's size must be a whole number from 1 to {MAX_MEMBERS:,}, not {d.count}", d.at)
    for s in prog.stages:
        kd = s.kind
        if kd.k == "fifo":
            need(fifo_servers_problem(const_value(kd.servers)), "L022", kd.servers.at, s.at)
        elif kd.k == "ps":
            need(ps_cap_problem(const_value(kd.phi)), "L026", kd.phi.at, s.at)
        elif kd.k == "step":
            if kd.granule is not None:
                need(granule_problem(const_value(kd.granule)), "L118", kd.granule.at, s.at)
            chunks = [x.chunk for x in _istmts(kd.iteration or []) if getattr(x, "chunk", None) is not None]
            for e in [kd.chunk] + chunks:
                bad = chunk_problem(e)
                if bad is not None:
                    fail(bad[0], bad[1], bad[2], e.at, s.at)
    for p in prog.pools:
        need(pool_cap_problem(const_value(p.cap)), "L241", p.cap.at, p.at)
        if p.block is not None:
            need(block_problem(const_value(p.block)), "L241", p.block.at, p.at)
    _engine_reads(prog, fail)  # the engines first: the linker joins pools to them before any use
    _targets(prog, fail)
    _arities(prog, fail)
    _moment_reads(prog, fail)
    kinds = {s.name: s.kind for s in prog.stages}
    blocks = [prog.server, prog.workload.init, prog.workload.turn, prog.workload.session or []]
    for b in blocks:
        for s in walk(b):
            for e in _exprs(s):
                for x in expr_nodes(e):
                    if x.k == "draw":
                        bad = draw_param_error(x.dist, [const_value(a) for a in x.args])
                        if bad is not None:
                            fail("L082", f"`~{x.dist}`: {bad}", x.at, s.at)
            if s.k == "run":
                need(amount_problem(const_value(s.work), "a run's work"), "L093", s.work.at, s.at)
                steps = [t.name for t in s.stages if getattr(kinds.get(t.name), "k", None) == "step"]
                if steps and len(s.stages) > 1:
                    fail("L089", "a run on a step engine names that engine alone", s.at)
                if steps and s.mode is None:
                    fail("L089", f"a run on engine `{steps[0]}` says its mode, prefill or decode", s.at)
                if not steps and s.mode is not None:
                    fail("L089", f"`{s.mode}` is the mode of a run on a step engine; `{s.stages[0].name}` is not one",
                         s.at)
                if len(s.stages) > 1:
                    for t in s.stages:
                        kd = kinds.get(t.name)
                        if kd is None or kd.k != "ps" or not (const_value(kd.phi) or 0) > 0:
                            fail("L243", "every stage of a run over several is ps(φ) with a constant φ above 0: "
                                 f"`{t.name}` is not", s.at)
                    if prog.share is None:
                        fail("L244", "a program with a run over several stages declares its `share` (maxmin or "
                             "bottleneck), which has no default", s.at)
            if s.k == "hold":
                for hp in s.pools:
                    need(amount_problem(const_value(hp.units), "a hold's units"), "L093", hp.units.at, s.at)


# what a Target in a field of this name names (an observable's `of`: by the observable, above)
_TARGET_KIND = {"pool": "pool", "growing": "pool", "stages": "stage", "via": "stage", "stage": "stage"}


def _targets(prog: I.Program, fail):
    """Every pool or stage an IR names is declared, of the kind its place wants, indexed as its
    declaration is an array or not, a constant index in range (the linker's L084, L085, L087)."""
    from serq.link.exprs import check_index
    decls = {"pool": {p.name: p for p in prog.pools}, "stage": {s.name: s for s in prog.stages}}
    steps = {s.name for s in prog.stages if s.kind.k == "step"}

    def check(t: I.Target, want, at):
        table = decls[want] if want else {**decls["pool"], **decls["stage"]}
        d = table.get(t.name)
        if d is None:
            other = next((k for k in ("pool", "stage") if k != want and t.name in decls[k]), None) if want else None
            if other:  # as the linker says it
                fail("L084", f"`{t.name}` is a {other}; a {want} is named here", at)
            fail("L084", f"`{t.name}` is no {want or 'pool or stage'} declared in the program", at)
        if (t.index is None) != (d.count is None):
            fail("L085", f"`{t.name}` " + ("is an array: name a member" if t.index is None else
                                          "is not an array: it takes no index"), at)
        v = const_value(t.index) if t.index is not None else None
        if v is not None:
            check_index(v, d.count, span_of(prog, at) or Span("<ir>", 1, 1), t.name)

    def go(x, want, at):
        if isinstance(x, I.Target):
            check(x, want, at)
            go(x.index, None, at)
        elif isinstance(x, I.Obs):  # an observable names a pool or a stage by its kind (serq/link/exprs.py)
            at = x.at or at
            go(x.of, "stage" if x.fn in STAGE_OBS else "pool", at)  # blocksize: a pool
            if x.fn == "budget_left" and x.of.name not in steps:
                fail("L084", f"`budget_left` reads a step engine; `{x.of.name}` is not one", at)
        elif isinstance(x, I.Node):
            at = own_at(x, at)
            for k, v in x:
                go(v, _TARGET_KIND.get(k), at)
        elif isinstance(x, list):
            for v in x:
                go(v, want, at)
    go(prog, None, None)


def _engine_reads(prog: I.Program, fail):
    """What names an engine in an IR given as a file: the engine a pool is admitted by or is the
    memory of is a step stage of the program, joined member for member or a family of one (the
    linker's L084, L105); a register read names a register its engine declares (L070); an engine
    value (running.count, batch.tokens, ...) is read only in an engine's own clauses, where an
    iteration is current, in a claim over its iterations and in the preemption keys of an engine's
    memory (L076): the linker's moments allow no other place (serq/link/names.py), and the
    interpreter reads these with an iteration at hand."""
    steps = {s.name: s for s in prog.stages if s.kind.k == "step"}
    for p in prog.pools:
        for via, what in ((p.admit_via, "admitted by"), (p.memory, "the memory of")):
            if via is None:
                continue
            st = steps.get(via)
            if st is None:
                fail("L084", f"pool `{p.name}` is {what} `{via}`, which is no engine (step stage) declared in "
                     "the program", p.at)
            if st.count not in (None, 1) and p.count != st.count:
                fail("L105", f"pool `{p.name}` has {p.count or 1} member(s) and engine `{via}` {st.count}: "
                     "families are joined member for member, or next to a family of one", p.at)
    regs = {name: {r.name for r in st.kind.registers} for name, st in steps.items()}

    def go(x, engine, at):
        if isinstance(x, I.Node):
            at = own_at(x, at)
            k = getattr(x, "k", None)
            if k == "reg":
                if x.stage not in regs:
                    fail("L084", f"`{x.stage}.{x.name}` reads a register of `{x.stage}`, which is no engine "
                         "declared in the program", at)
                if x.name not in regs[x.stage]:
                    fail("L070", f"unknown name `{x.stage}.{x.name}`: engine `{x.stage}` declares no register "
                         f"`{x.name}`", at)
            elif k == "step" and not engine:
                fail("L076", f"an engine value (`{x.name}`) is read only in an engine's clauses, a claim over its "
                     "iterations and the preemption keys of its memory", at)
            if isinstance(x, I.Stage):
                engine = x.kind.k == "step"
            for name, v in x:
                if isinstance(x, I.Step) and name in ("granule", "registers"):
                    go(v, False, at)  # read before any iteration (the linker's moments)
                elif isinstance(x, I.Pool):
                    go(v, name == "preempt" and x.memory is not None, at)
                elif isinstance(x, I.Claim):  # a claim over an engine's iterations reads its values
                    go(v, name == "e" and x.stage is not None and x.stage.name in steps, at)
                else:
                    go(v, engine, at)
        elif isinstance(x, list):
            for v in x:
                go(v, engine, at)
        elif isinstance(x, dict):
            for v in x.values():
                go(v, engine, at)
    go(prog, False, None)


def _moment_reads(prog: I.Program, fail):
    """What each place of an IR file may read, as the linker's moments say (serq/link/names.py):
    an observable only where its moment reads it (L077: none in a ps capacity or an engine's
    tokens cap, budget_left only in a header or a queue key, ...), a draw only where a moment draws
    (L081: a session's statements, an eviction key, a spill, a ps capacity, `execute`, a renewal
    gap), an aggregate only in a claim at end (L077), a register only where the reference's
    *Engine* allows (L083: its engine's clauses but not its granule or a register's initial
    value, the queue keys of a pool it admits, its memory's preemption keys, the header of a hold
    whose first pool it admits, a gauge, a claim over iterations). The interpreter builds each
    place's reader for what its moment allows: an observable read before the resources exist, a
    draw with no stream, a tokens cap that reads the budget it sets ended in internal errors, and
    a register read in a session's statement ran with member 0's."""
    sess = N.SESSION
    choose = N.Moment("a choose key", obs=N.ALL_OBS - {"budget_left"})
    admitted = {p.name: p.admit_via for p in prog.pools}

    def of(m, engine):  # the moment at a place an engine's registers reach, as the linker builds it
        return replace(m, registers=engine is not None, engine=engine)

    def expr(e, m):
        if isinstance(e, list):
            for x in e:
                expr(x, m)
            return
        if not isinstance(e, I.Node):
            return
        k = getattr(e, "k", None)
        if k == "obs" and e.fn != "blocksize" and e.fn not in m.obs:
            fail("L077", f"`{e.fn}(…)` is not read in {m.name}", e.at)
        elif k == "draw" and not m.draws:
            fail("L081", f"{m.name} may not draw: sample into an attribute first", e.at)
        elif k == "agg" and not m.end_aggs:
            fail("L077", f"`{e.fn}(…)` is read only in a claim at end", e.at)
        elif k == "reg" and not m.registers:
            fail("L083", f"the register `{e.stage}.{e.name}` is not read in {m.name}", e.at)
        elif k == "reg" and m.engine is not None and m.engine != e.stage:
            fail("L083", f"a register is read only by its engine: `{e.stage}.{e.name}` is `{e.stage}`'s", e.at)
        for _, v in e:
            if isinstance(v, (I.Node, list)):
                expr(v, m)

    def stmts(body):
        for s in body or ():
            k = s.k
            if k == "hold":
                header = of(N.HEADER, admitted.get(s.pools[0].pool.name) if s.pools else None)
                for hp in s.pools:
                    expr(hp.pool, N.INDEX)
                    expr([hp.units, hp.reserve], header)
                expr(s.reuse, header)
                expr(s.cache, N.CACHE)
                expr(s.content, N.CONTENT)
                if s.lease is not None:
                    expr(s.lease.pool, N.INDEX)
                    expr(s.lease.duration, N.LEASE)
                stmts(s.body)
            elif k in ("grow", "load", "drop", "release"):
                expr(s.pool, N.INDEX)
                expr(getattr(s, "e", None), sess)
            elif k == "choose":
                expr(s.n, sess)
                expr(s.keys, choose)
            elif k == "branch":
                expr(s.cond, sess)
                stmts(s.then)
                stmts(s.else_)
            elif k in ("while", "loop", "fork"):
                expr(getattr(s, "cond", None), sess)
                stmts(s.body)
            else:  # set, observe, run (its stages, work, growing), turn, join, end
                for _, v in s:
                    expr(v, sess)

    def istmts(body, name):
        for s in body or ():
            key, sched, chunk = (N.engine_moment(w, name) for w in ("key", "schedule", "chunk"))
            if s.k == "serve":
                expr(s.only, key)
                expr(s.order, key)
                expr(s.chunk, chunk)
            elif s.k == "admit":
                expr(s.only, key)
                expr(s.gate, sched)
                expr(s.chunk, chunk)
            elif s.k == "branch":
                expr(s.cond, sched)
                istmts(s.then, name)
                istmts(s.else_, name)
            else:
                expr(s.e, sched)

    for p in prog.pools:
        expr([p.cap, p.block], N.CAP)
        expr(p.evict, N.EVICT_KEY)
        expr(p.preempt, of(N.PREEMPT_KEY, p.memory))
        expr(p.queue, of(N.QUEUE_KEY, p.admit_via))
        expr(p.spill, N.SPILL)
    for st in prog.stages:
        kd = st.kind
        if kd.k == "fifo":
            expr(kd.servers, N.STAGE_COUNT)
        elif kd.k == "ps":
            expr(kd.phi, N.PS_CAP)
        elif kd.k == "step":
            em = lambda w: N.engine_moment(w, st.name)  # noqa: E731
            expr(kd.budget, em("tokens"))
            expr(kd.chunk, em("chunk"))
            expr(kd.granule, em("granule"))
            expr(kd.serve, em("key"))
            istmts(kd.iteration, st.name)
            expr(kd.cost, em("execute"))
            expr([r.init for r in kd.registers], em("register"))
    arr = prog.workload.arrive
    expr(getattr(arr, "rate", None), N.CONST)
    expr(getattr(arr, "gap", None), N.Moment("an arrival law", draws=True))
    for b in (prog.workload.init, prog.workload.turn, prog.workload.session, prog.server):
        stmts(b)
    for g in prog.gauges:
        expr(g.e, N.GAUGE)
    for c in prog.claims:
        expr([c.stage, c.e], N.CLAIM_END if c.form == "end" else N.CLAIM_ITER)
        expr(c.given, N.GIVEN)


def _arities(node, fail):
    """Every draw and function anywhere in the IR has the arguments its definition takes (the linker
    counts them in the text; a hand-written IR may not)."""
    from serq.lang.lower.constants import FUNCS
    if isinstance(node, list):
        for x in node:
            _arities(x, fail)
        return
    if not isinstance(node, I.Node):
        return
    k = getattr(node, "k", None)
    if k == "draw" and node.dist == "empirical":
        vs, ws = node.values or [], node.weights or []
        if not vs or len(ws) != len(vs) or not all(math.isfinite(v) for v in vs) \
                or not all(math.isfinite(w) and w >= 0 for w in ws) or not sum(ws) > 0:
            fail("L082", "`~empirical`: values and as many weights, finite, the weights >= 0 and not all 0",
                 node.at)
    elif k == "draw" and (node.values is not None or node.weights is not None):
        fail("L082", f"`~{node.dist}` has no values or weights (only `~empirical` has)", node.at)
    if k == "draw" and len(node.args) != I.DISTRIBUTIONS[node.dist]:
        fail("L042", f"`~{node.dist}` takes {I.DISTRIBUTIONS[node.dist]} parameter(s), given {len(node.args)}",
             node.at)
    if k == "fn":
        least, most, _ = FUNCS[node.name]
        if len(node.args) < least or (most is not None and len(node.args) > most):
            fail("L042", f"`{node.name}` takes {least if most == least else f'{least} or more'} argument(s), "
                 f"given {len(node.args)}", node.at)
    for name in type(node).model_fields:
        v = getattr(node, name)
        if isinstance(v, (list, I.Node)):
            _arities(v, fail)
        elif isinstance(v, dict):
            _arities(list(v.values()), fail)
