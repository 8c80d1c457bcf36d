"""The lowering driver: surface AST to the kernel, one sugar family per module (architecture)."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.kernel import Kernel, KPool, KStage
from serq.lang.lower import admission, branch_with, queues as Q, relations as R
from serq.lang.lower.aggregates import Aggregates
from serq.lang.lower.constants import require_count
from serq.lang.lower.defs import Defs
from serq.lang.lower.engines import EngineInfo, engine_count_pairs, lower_engine, lower_pool_on
from serq.lang.lower.imports import resolve
from serq.lang.lower.inputs import resolve_inputs
from serq.lang.lower.requests import check_request, engine_taking, outside_names
from serq.lang.lower.serving import Serving


def lower(prog: A.Program, inputs: dict[str, float] | None = None) -> Kernel:
    r = resolve(prog)
    main = r.main
    items = main.items
    defs = Defs(r.defs)

    # constants and inputs (*Entry point and external inputs*)
    lets = list(r.lets) + [i for i in items if isinstance(i, A.Let)]
    consts, const_spans, used_inputs = resolve_inputs(lets, r.uses_args, inputs or {}, defs)
    array_sizes(items, consts, used_inputs, inputs or {})

    declared: dict[str, tuple[str, object]] = {}

    def declare(name, kind, span):
        if name in declared:
            k0, _ = declared[name]
            raise SerqError("L060", f"`{name}` is declared twice ({k0} and {kind}): declarations do not share a name",
                            span)
        declared[name] = (kind, span)

    for n, sp in const_spans.items():
        declare(n, "let", sp)
    for n, d in r.defs.items():
        declare(n, "def", d.span)

    pools: list[KPool] = []
    stages: list[KStage] = []
    devices: dict[str, A.Device] = {}
    engines: dict[str, EngineInfo] = {}
    queues: dict[str, Q.QueueInfo] = {}
    workloads, servers, shares, relations, gauges, claims = [], [], [], [], [], []

    sched_lets(items, consts, r.defs)
    for it in items:
        if isinstance(it, A.Pool) and it.owner is None:
            declare(it.name, "pool", it.span)
            count = require_count(it.count, consts, "a pool array's size") if it.count is not None else None
            cap = _opt(it, "cap")
            pools.append(KPool(it.name, count, cap, it.opts, it.span))
        elif isinstance(it, A.Pool):
            declare(it.name, "pool", it.span)
            lower_pool_on(it, devices, engines, pools, consts)
        elif isinstance(it, A.Stage):
            declare(it.name, "stage", it.span)
            count = require_count(it.count, consts, "a stage array's size") if it.count is not None else None
            stages.append(KStage(it.name, count, it.kind, it.span))
        elif isinstance(it, A.Device):
            declare(it.name, "device", it.span)
            devices[it.name] = it
        elif isinstance(it, A.Engine):
            declare(it.name, "engine", it.span)
            dev = devices.get(it.device)
            count = require_count(it.count, consts, "an engine family's size") if it.count is not None else None
            if dev is not None and dev.count is not None:
                dcount = require_count(dev.count, consts, "a device family's size")
                engine_count_pairs(count, dcount, it.span, it.name, dev.name)
            info = EngineInfo(it.name, it, dev, count)
            stages.append(lower_engine(it.name, it, dev, count, consts))
            info.taking = engine_taking(info)
            if info.taking is not None and it.request is None:
                raise SerqError("L126", "`taking` says what the admission takes of the engine's request; engine "
                                f"`{it.name}` has no request", it.span)
            if count is not None and count > 1 and it.request is not None:
                raise SerqError("L127", "an engine family has no request: a queue's engine and an engine family "
                                "have none", it.request.span)
            engines[it.name] = info
        elif isinstance(it, A.Queue):
            declare(it.name, "queue", it.span)
            queues[it.name] = Q.lower_queue(it, consts, pools, stages, queues, declare)
        elif isinstance(it, A.Workload):
            workloads.append(it)
        elif isinstance(it, A.Server):
            servers.append(it)
        elif isinstance(it, A.Share):
            shares.append(it)
        elif isinstance(it, A.Relation):
            relations.append(R.lower_relation(it, queues, consts))
            R.relation_latency_stages(relations[-1:], queues, stages)
        elif isinstance(it, A.Gauge):
            declare(it.name, "gauge", it.span)
            gauges.append(it)
        elif isinstance(it, A.Claim):
            declare(it.name, "claim", it.span)
            claims.append(it)

    if len(workloads) > 1:
        raise SerqError("L050", "a program has one `workload`", workloads[1].span)
    if len(servers) > 1:
        raise SerqError("L051", "there is one server per workload", servers[1].span)
    if servers and not workloads:
        raise SerqError("L052", "a `server` handles the workload's turns; the program has no `workload`",
                        servers[0].span)
    if len(shares) > 1:
        raise SerqError("L053", "`share` is written once", shares[1].span)
    if shares and relations:
        raise SerqError("L054", "a program with a pull or push relation does not also write `share`: the relation "
                        "says it", shares[0].span)
    share = None
    if shares:
        share = (shares[0].policy, shares[0].span)
    elif relations:
        policies = {rel.policy for rel in relations}
        if len(policies) > 1:
            raise SerqError("L055", "the relations write different `share` policies; a program has one",
                            relations[-1].span)
        share = (relations[0].policy, relations[0].span)

    wl = workloads[0] if workloads else None
    server = servers[0].body if servers else ()
    hidden = {n for n, _ in wl.hidden} if wl is not None else set()
    known = set(consts) | set(r.defs) | set(declared) | {p.name for p in pools} | {s.name for s in stages}
    foreign = Q.queue_attr_names(queues)
    for qi in queues.values():
        Q.check_entries(qi, hidden, known, foreign)
    for info in engines.values():
        check_request(info, hidden, known, pools)
    outside_names(server, wl, engines)
    aggs = Aggregates(consts, set(declared) | raw_attr_names(wl, server, engines, queues))
    serving = Serving(stages, {n: qi.latency for n, qi in queues.items() if qi.latency is not None})
    calls = Q.Calls(engines, queues, relations, serving, consts)

    calls.prep = defs.block  # an entry's or a request's body has its defs written out too

    def lower_block(stmts, side):
        stmts = calls.block(defs.block(stmts), side)
        stmts = aggs.block(branch_with.lower(stmts))
        stmts = serving.lower(stmts, side)
        return admission.lower_bindings(stmts, bindings, binding_taken)

    bindings: dict = {}
    from serq.link.names import BUILTIN_ATTRS, SUPPLIED, TRACE_ATTRS
    binding_taken = set(declared) | SUPPLIED | BUILTIN_ATTRS | TRACE_ATTRS
    if wl is not None:
        wl = A.Workload(wl.arrive, wl.trace,
                        lower_block(wl.init, "workload") if wl.init is not None else None,
                        lower_block(wl.turn, "workload") if wl.turn is not None else None,
                        lower_block(wl.session, "workload") if wl.session is not None else None,
                        wl.hidden, wl.span, wl.dups)
    server = lower_block(server, "server")

    def lower_expr(e):
        return aggs.expr(defs.expr(e))

    gauges = [A.Gauge(g.name, lower_expr(g.e), g.span) for g in gauges]
    claims = [A.Claim(c.name, lower_expr(c.given) if c.given is not None else None, c.form, c.stage,
                      lower_expr(c.e), c.span) for c in claims]
    for st in stages:
        st.kind = _lower_stage_exprs(st.kind, lower_expr)
    for p in pools:
        if p.cap is not None:
            p.cap = lower_expr(p.cap)
        p.opts = tuple(_lower_opt(o, lower_expr) for o in p.opts)

    return Kernel(files=r.files, consts=consts, const_spans=const_spans, inputs={a: v for a, v, _ in used_inputs.values()}, pools=pools,
                  stages=stages, share=share, workload=wl, server=server,
                  server_span=servers[0].span if servers else None, gauges=gauges, claims=claims, defs=r.defs,
                  declared=declared, bindings=bindings, main_span=main.span)


def _opt(p: A.Pool, kind):
    for o in p.opts:
        if o.kind == kind:
            return o.args[0]
    return None


def _lower_opt(o: A.PoolOpt, f):
    def m(v):
        if isinstance(v, tuple):
            return tuple(m(x) for x in v)
        if hasattr(v, "span") and not isinstance(v, str):
            return f(v)
        return v
    return A.PoolOpt(o.kind, m(o.args), o.span)


def _lower_stage_exprs(kind, f):
    import dataclasses

    from serq.lang.kernel import KStep
    if isinstance(kind, A.Kind):
        return A.Kind(kind.kind, f(kind.arg) if kind.arg is not None else None, kind.span)
    assert isinstance(kind, KStep)

    def sstmts(body):
        out = []
        for s in body:
            if isinstance(s, A.SBranch):
                out.append(A.SBranch(f(s.cond), tuple(sstmts(s.then)),
                                     tuple(sstmts(s.else_)) if s.else_ is not None else None, s.span))
            elif isinstance(s, A.SSet):
                out.append(A.SSet(s.name, f(s.e), s.span))
            else:
                ch = {}
                for fld in ("only", "while_", "each"):
                    if hasattr(s, fld) and getattr(s, fld) is not None:
                        ch[fld] = f(getattr(s, fld))
                if isinstance(s, A.Advance) and s.order is not None:
                    ch["order"] = (s.order[0], tuple(f(k) for k in s.order[1]))
                out.append(dataclasses.replace(s, **ch))
        return out
    serve = kind.serve if kind.serve[0] != "by" else ("by", tuple(f(k) for k in kind.serve[1]))
    return dataclasses.replace(
        kind, budget=f(kind.budget), chunk=f(kind.chunk) if kind.chunk is not None else None,
        granule=f(kind.granule) if kind.granule is not None else None, serve=serve,
        iteration=tuple(sstmts(kind.iteration)) if kind.iteration is not None else None, cost=f(kind.cost),
        registers=tuple((n, f(e), sp) for n, e, sp in kind.registers))


def array_sizes(items, consts, used_inputs, supplied):
    """An input that would change a parse-time array size is refused (*Entry point and external inputs*)."""
    from serq.lang.walk import iter_expr

    def check(e):
        if e is None:
            return
        for x in iter_expr(e):
            if isinstance(x, A.Ref) and x.simple and x.head in used_inputs and x.head in supplied_names:
                raise SerqError("L014", f"the input `{x.head}` sets an array's size, which is fixed when the program "
                                "is parsed: it cannot be supplied", x.span)
    supplied_names = {n for n, (_arg, _v, changed) in used_inputs.items() if changed}
    for it in items:
        if isinstance(it, (A.Pool, A.Stage, A.Device, A.Engine, A.Queue)):
            check(it.count)
        if isinstance(it, A.Engine):
            for c in it.caps:
                check(c.count)
        if isinstance(it, A.Queue):
            for d in it.devices:
                check(d.count)





def sched_lets(items, consts, defs):
    """A schedule's let may not share its name with a def or a program's let (*Names do not collide*)."""
    for it in items:
        eng = it if isinstance(it, A.Engine) else it.engine if isinstance(it, A.Queue) else None
        if eng is None or eng.schedule is None:
            continue
        for n, _, sp in eng.schedule.lets:
            if n in consts or n in defs:
                raise SerqError("L065", f"the schedule's `let {n}` shares its name with a "
                                f"{'let' if n in consts else 'def'} of the program", sp)


def raw_attr_names(wl, server, engines, queues) -> set[str]:
    """Every name a set or a choose assigns, anywhere, before lowering (and the built-in ones)."""
    from serq.lang.walk import iter_stmts
    from serq.link.names import BUILTIN_ATTRS, TRACE_ATTRS
    blocks = [server]
    if wl is not None:
        blocks += [wl.init or (), wl.turn or (), wl.session or ()]
    blocks += [e.eng.request.items for e in engines.values() if e.eng.request is not None]
    blocks += [en.body for q in queues.values() for en in q.q.entries]
    out = set(BUILTIN_ATTRS | TRACE_ATTRS)
    for b in blocks:
        for s in iter_stmts(b):
            if isinstance(s, (A.Set, A.Choose, A.CostFields)):
                out.add(s.name)
    return out
