"""`engine … on DEVICE` and `device` to the IR's step stage and its pools (*Engines on devices*)."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.kernel import KPool, KStage, KStep
from serq.lang.lower.constants import fold_or_none, fmt
from serq.lang.lower.defs import subst
from serq.lang.walk import iter_expr, map_expr

PREEMPTED_EQ_0 = "running.preempted == 0"


def ref(name: str, span, index=None) -> A.Ref:
    segs = tuple(A.Seg(p, None, span) for p in name.split("."))
    if index is not None:
        segs = segs[:-1] + (A.Seg(segs[-1].name, index, span),)
    return A.Ref(segs, span)


def call(fn: str, args, span) -> A.Call:
    return A.Call(ref(fn, span), tuple(args), span)


def cost(resources, e, span) -> A.Call:
    return call("cost", [ref(r, span) for r in resources] + [e], span)


def same_expr(a, b) -> bool:
    """Structural equality, spans ignored (`only (p)` written twice is one p)."""
    return _shape(a) == _shape(b)


def _shape(e):
    if e is None:
        return None
    if isinstance(e, A.Num):
        return ("n", e.value)
    if isinstance(e, A.Str):
        return ("s", e.value)
    if isinstance(e, A.Ref):
        return ("r", tuple((s.name, _shape(s.index)) for s in e.segs))
    if isinstance(e, A.Call):
        return ("c", _shape(e.fn), tuple(_shape(a) for a in e.args))
    if isinstance(e, A.Draw):
        return ("d", e.dist, tuple(_shape(a) for a in e.args))
    if isinstance(e, A.Unary):
        return ("u", e.op, _shape(e.e))
    if isinstance(e, A.Binary):
        return ("b", e.op, _shape(e.l), _shape(e.r))
    if isinstance(e, A.Cond):
        return ("?", _shape(e.c), _shape(e.a), _shape(e.b))
    if isinstance(e, A.Aggregate):
        return ("a", e.op, e.var, _shape(e.count), _shape(e.body))
    return ("?", repr(e))


def _is_preempted_gate(e) -> bool:
    return isinstance(e, A.Binary) and e.op == "==" and isinstance(e.l, A.Ref) and e.l.dotted == "running.preempted" \
        and isinstance(e.r, A.Num) and e.r.value == 0


class EngineInfo:
    """What the rest of lowering needs of an engine: its request, its taking, its device."""

    def __init__(self, name: str, eng: A.Engine, device: A.Device | None, count: int | None):
        self.name = name
        self.eng = eng
        self.device = device
        self.count = count
        self.taking = None  # (takes, reuse) every admit waiting writes
        self.registers = tuple(n for n, _, _ in eng.states)


def engine_count_pairs(eng_count, dev_count, span, eng_name, dev_name):
    """Families are joined member for member; next to a family of one, every member gets that one."""
    if dev_count is None or eng_count == dev_count:
        return
    if dev_count == 1:
        return
    raise SerqError("L105", f"engine `{eng_name}` has {eng_count or 1} member(s) and device `{dev_name}` "
                    f"{dev_count}: families are joined member for member, or next to a family of one", span)


def lower_engine(name: str, eng: A.Engine, device: A.Device | None, count: int | None, consts, queue=None):
    """The step stage of one engine, with `name` its stage name (a queue's engine: the queue's)."""
    seen = {}
    for kind, sp in eng.items_spans:
        if kind in ("tokens", "granule", "schedule", "execute", "request") and kind in seen:
            raise SerqError("L100", f"engine `{name}` writes `{kind}` twice", sp)
        seen[kind] = sp
    if eng.tokens is None:
        raise SerqError("L101", f"engine `{name}` has no `tokens cap` (required; `inf` for none)", eng.span)
    if eng.schedule is None:
        raise SerqError("L101", f"engine `{name}` has no `schedule {{ … }}` (required)", eng.span)
    if eng.execute is None:
        raise SerqError("L101", f"engine `{name}` has no `execute (…)` (required)", eng.span)
    if device is None:
        raise SerqError("L102", f"engine `{name}` runs on `{eng.device}`, which is no device declared above",
                        eng.span)
    regs = {n for n, _, _ in eng.states}

    def regs_qualified(e):
        # a register is read bare inside its engine; the IR names it with its stage
        def f(x):
            if isinstance(x, A.Ref) and x.simple and x.head in regs:
                return ref(f"{name}.{x.head}", x.span)
            return x
        return map_expr(e, f)

    sched = eng.schedule
    lets = {}
    for lname, le, lsp in sched.lets:
        if lname in lets:
            raise SerqError("L110", f"the schedule's `let {lname}` is written twice", lsp)
        lets[lname] = subst(le, lets)

    def each_at_most(e):
        if e is None:
            return None
        e = subst(e, lets)
        _check_chunk(e, consts)
        return regs_qualified(e)

    def sstmts(body):
        out = []
        for s in body:
            if isinstance(s, A.Advance):
                keys = _order_keys(s.order, s.span)
                out.append(A.Advance(_reg_opt(s.only, regs_qualified, lets), ("by", keys) if s.order else None,
                                     each_at_most(s.each), s.span))
            elif isinstance(s, A.Admit):
                out.append(A.Admit(_reg_opt(s.only, regs_qualified, lets),
                                   _reg_opt(s.while_, regs_qualified, lets), each_at_most(s.each), s.taking, s.span))
            elif isinstance(s, A.Exclusive):
                out.append(A.Exclusive(each_at_most(s.each), s.span))
            elif isinstance(s, A.SBranch):
                _no_let(s.cond, lets)
                out.append(A.SBranch(regs_qualified(s.cond), tuple(sstmts(s.then)),
                                     tuple(sstmts(s.else_)) if s.else_ is not None else None, s.span))
            elif isinstance(s, A.SSet):
                if s.name not in regs:
                    raise SerqError("L111", f"`set {s.name}` in a schedule sets a register: declare "
                                    f"`state {s.name} = …;` in engine `{name}`", s.span)
                _no_let(s.e, lets)
                out.append(A.SSet(f"{name}.{s.name}", regs_qualified(s.e), s.span))
        return out

    body = sstmts(sched.body)
    if not body:
        raise SerqError("L112", f"engine `{name}`'s schedule has no statement", sched.span)
    _check_schedule_paths(body, name, sched.span)
    serve, iteration, chunk = _schedule_form(body, name)

    # device time resources written out where execute reads them
    resources = {r.name: r for r in device.resources if isinstance(r, A.TimeResource)}

    def expand_resources(e):
        def f(x):
            if isinstance(x, A.Call) and x.fn.simple and x.fn.head in resources:
                r = resources[x.fn.head]
                if len(x.args) != len(r.params):
                    raise SerqError("L042", f"`{r.name}` takes {len(r.params)} argument(s), given {len(x.args)}",
                                    x.span)
                return subst(r.e, dict(zip(r.params, x.args)))
            return x
        return map_expr(e, f)

    cost_e = regs_qualified(expand_resources(eng.execute))
    step = KStep(budget=regs_qualified(eng.tokens), chunk=chunk, granule=eng.granule, serve=serve,
                 iteration=iteration, cost=cost_e,
                 registers=tuple((n, e, sp) for n, e, sp in eng.states), engine=name, span=eng.span)
    return KStage(name, count, step, eng.span, queue=queue)


def _reg_opt(e, f, lets):
    if e is None:
        return None
    _no_let(e, lets)
    return f(e)


def _no_let(e, lets):
    # a schedule's let is read only in its each at most (*Engines on devices*)
    for x in iter_expr(e):
        if isinstance(x, A.Ref) and x.simple and x.head in lets:
            raise SerqError("L113", f"the schedule's `let {x.head}` is read only in `each at most`; "
                            "a predicate both statements read is named with a def", x.span)


def _order_keys(order, span):
    if order is None:
        return ()
    kind, keys = order
    if kind == "admission":
        return ()
    if kind == "decode_first":
        # decode first is by (decoding ? 0 : 1)
        return (A.Cond(ref("decoding", span), A.Num(0.0, span), A.Num(1.0, span), span),)
    return tuple(keys)


def _check_chunk(e, consts):
    """each at most chooses among constants above 0 (or inf), or max(k, e) with k a constant above 0."""
    if isinstance(e, A.Cond):
        _check_chunk(e.a, consts)
        _check_chunk(e.b, consts)
        return
    if isinstance(e, A.Call) and e.fn.simple and e.fn.head == "max" and len(e.args) == 2:
        k = fold_or_none(e.args[0], consts)
        if k is not None and k > 0:
            return
        raise SerqError("L114", "`each at most (max(k, e))` needs k a constant above 0, so that a computed cap "
                        "stays above 0", e.span)
    v = fold_or_none(e, consts)
    if v is None:
        raise SerqError("L114", "`each at most` chooses among constants, or max(k, e) with k a constant above 0",
                        e.span)
    if not v > 0:
        raise SerqError("L115", f"`each at most ({fmt(v)})`: a cap at or below 0 does not link (the kernel reads "
                        "0 as no cap)", e.span)


def _schedule_form(body, name):
    """Recognise vLLM's procedure and exclusive prefill; anything else is the iteration body."""
    same_chunk = same_expr
    if len(body) == 2 and isinstance(body[1], A.Admit) and body[1].while_ is not None \
            and _is_preempted_gate(body[1].while_):
        first, adm = body
        if isinstance(first, A.Advance) and same_chunk(first.each, adm.each):
            keys = first.order[1] if first.order else ()
            chunk = first.each
            if first.only is None and adm.only is None:
                return ("by", keys), None, chunk
            if first.only is not None and adm.only is not None and same_expr(first.only, adm.only):
                return ("by", keys), tuple(body), chunk
        if isinstance(first, A.Exclusive) and adm.only is None and same_chunk(first.each, adm.each):
            chunk = first.each
            return ("exclusive",), None, chunk
    for s in _all_sstmts(body):
        if isinstance(s, A.Exclusive):
            raise SerqError("L116", "`exclusive prefill` appears only as `exclusive prefill; admit waiting while "
                            "(running.preempted == 0);`: it takes back decodes a body cannot", s.span)
    return ("by", ()), tuple(body), None


def _all_sstmts(body):
    for s in body:
        yield s
        if isinstance(s, A.SBranch):
            yield from _all_sstmts(s.then)
            yield from _all_sstmts(s.else_ or ())


def _check_schedule_paths(body, name, span):
    """A schedule with a path that neither advances nor admits does not link (*The iteration as a program*)."""
    def acts(stmts) -> bool:
        for s in stmts:
            if isinstance(s, (A.Advance, A.Admit, A.Exclusive)):
                return True
            if isinstance(s, A.SBranch) and acts(s.then) and acts(s.else_ or ()):
                return True
        return False
    if not acts(body):
        raise SerqError("L117", f"engine `{name}`'s schedule has a path that neither advances nor admits: "
                        "an engine that schedules nothing waits for an event, and the clock moving is none", span)


def device_pools(dev: A.Device):
    return {r.name: r for r in dev.resources if isinstance(r, A.CapResource)}


def lower_pool_on(p: A.Pool, devices: dict, engines: dict, pools_out: list, consts, name=None, queue=None):
    """`pool X on D`, `pool X on E`, `pool X on E.D` to plain pools with admit_via and memory."""
    pname = name or p.name
    if p.owner_dev is not None:
        e = engines.get(p.owner)
        if e is None:
            raise SerqError("L103", f"`pool {p.name} on {p.owner}.{p.owner_dev}`: the name before the dot is "
                            "an engine declared above", p.span)
        if e.eng.device != p.owner_dev or e.device is None:
            raise SerqError("L103", f"engine `{p.owner}` runs on `{e.eng.device}`, not `{p.owner_dev}`", p.span)
        cap = device_pools(e.device).get(p.name)
        if cap is None:
            raise SerqError("L104", f"device `{p.owner_dev}` declares no `{p.name} cap …;`", p.span)
        count = _dcount(e.device, consts)
        pools_out.append(KPool(pname, count, cap.e, p.opts, p.span, admit_via=e.name, memory=e.name, queue=queue))
        return
    if p.owner in devices:
        dev = devices[p.owner]
        cap = device_pools(dev).get(p.name)
        if cap is None:
            raise SerqError("L104", f"device `{p.owner}` declares no `{p.name} cap …;`", p.span)
        mem = [e.name for e in engines.values() if e.eng.device == p.owner]
        pools_out.append(KPool(pname, _dcount(dev, consts), cap.e, p.opts, p.span,
                               memory=mem[0] if mem else None, queue=queue))
        return
    if p.owner in engines:
        e = engines[p.owner]
        caps = {c.name: c for c in e.eng.caps}
        c = caps.get(p.name)
        if c is None:
            raise SerqError("L104", f"engine `{p.owner}` declares no `{p.name} cap …;`", p.span)
        count = e.count
        if c.count is not None:
            from serq.lang.lower.constants import require_count
            if e.count is not None and e.count > 1:
                raise SerqError("L106", f"an engine family holds no `{c.name}[N]`: `{c.name} cap c;` already gives "
                                "each member its own", c.span)
            if queue is not None:
                raise SerqError("L106", "a queue's engine holds no family of queues: its entries name their own "
                                "pool without an index", c.span)
            count = require_count(c.count, consts, "the number of queues an engine admits")
        pools_out.append(KPool(pname, count, c.e, p.opts, p.span, admit_via=e.name, queue=queue))
        return
    raise SerqError("L103", f"`pool {p.name} on {p.owner}`: `{p.owner}` is no device or engine declared above",
                    p.span)


def _dcount(dev, consts):
    from serq.lang.lower.constants import require_count
    return require_count(dev.count, consts, "a device family's size") if dev.count is not None else None
