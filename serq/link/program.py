"""The linker: the kernel AST to the IR, with every static rule of the reference checked here
(names, moments, sides, holds, amounts and indices, loops, lints, the hidden rule, claims)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from serq.diagnostics import SerqError, Span
from serq.interp.trace import load_trace
from serq.ir import model as I
from serq.lang import ast as A
from serq.lang.kernel import Kernel, KStep
from serq.lang.lower.constants import fmt, whole
from serq.lang.walk import iter_stmts
from serq.link import names as N
from serq.link.exprs import ExprLinker, Tables, const_value, same_target
from serq.link import rules as R
from serq.link.rules import attrs_read, check_program

INDEX = N.INDEX
AMOUNT_MAX = 1e18


@dataclass
class Scope:
    side: str                       # init | turn | session | server
    leg: bool = False
    holds: list = field(default_factory=list)   # (I.Target, has_cache, preemptible)


class Linker:
    def __init__(self, k: Kernel, settings: I.Settings):
        self.k = k
        self.settings = settings
        self.t = Tables()
        self.t.files = list(k.files)
        self.x = ExprLinker(self.t)
        self.leased: set[str] | None = None  # the pools a hold of the server or the session leases

    # ------------------------------------------------------------ names
    def collect(self):
        k, t = self.k, self.t
        t.consts = dict(k.consts)
        for p in k.pools:
            if p.name in t.pools:
                raise SerqError("L060", f"`{p.name}` is declared twice", p.span)
            t.pools[p.name] = p
            if p.admit_via:
                t.admitted_by[p.name] = p.admit_via
        for s in k.stages:
            if s.name in t.stages or s.name in t.pools:
                raise SerqError("L060", f"`{s.name}` is declared twice (a stage and a "
                                f"{'stage' if s.name in t.stages else 'pool'})", s.span)
            t.stages[s.name] = s
            if isinstance(s.kind, KStep):
                t.steps.add(s.name)
                t.registers[s.name] = {n for n, _, _ in s.kind.registers}
        wl = k.workload
        self.attr_types: dict[str, tuple[str, str, Span]] = {}  # name -> (type, side, span)
        blocks = []
        if wl is not None:
            blocks += [(wl.init or (), "workload"), (wl.turn or (), "workload"), (wl.session or (), "workload")]
        blocks.append((k.server, "server"))
        observed = {}
        self.set_spans: dict[str, list] = {}
        for stmts, side in blocks:
            for s in iter_stmts(stmts):
                if isinstance(s, (A.Set, A.Choose)):
                    self.set_spans.setdefault(s.name, []).append(s.span)
                if isinstance(s, A.Set):
                    self._attr(s.name, {"set": "attr", "Size": "size", "Cost": "cost"}[s.kind], side, s.span)
                elif isinstance(s, A.CostFields):
                    seen = set()
                    for fname, _ in s.fields:
                        if fname in seen:
                            raise SerqError("L203", f"`{s.name}.{fname}` is written twice in one Cost", s.span)
                        seen.add(fname)
                        self._attr(f"{s.name}.{fname}", "cost", side, s.span)
                elif isinstance(s, A.Choose):
                    self._attr(s.name, "attr", side, s.span)
                elif isinstance(s, A.Observe):
                    observed.setdefault(s.name, s.span)
        builtins = set(N.BUILTIN_ATTRS)
        if wl is not None and wl.trace is not None:
            builtins |= N.TRACE_ATTRS
        t.attrs = set(self.attr_types) | builtins
        t.observed = set(observed)
        self.builtins = builtins
        self.observed_spans = observed
        # the names do not collide (*Expressions*)
        for n, (typ, side, sp) in self.attr_types.items():
            if n in N.SUPPLIED:
                raise SerqError("L062", f"`{n}` is a name the language supplies; an attribute cannot take it", sp)
            if n in k.consts:
                raise SerqError("L061", f"`{n}` is a constant (`let`); a set cannot make it an attribute", sp)
            if n in k.declared and k.declared[n][0] != "let":
                raise SerqError("L063", f"`{n}` is a {k.declared[n][0]}; an attribute cannot share its name", sp)
        for n, (kind, sp) in k.declared.items():
            if n in N.SUPPLIED:
                raise SerqError("L062", f"`{n}` is a name the language supplies; a {kind} cannot take it", sp)
            if kind != "let" and n in (N.BUILTIN_ATTRS | N.TRACE_ATTRS):
                raise SerqError("L063", f"`{n}` is a built-in attribute; a {kind} cannot take its name", sp)
        for d in k.defs.values():
            for p in d.params:
                if p in N.SUPPLIED:
                    raise SerqError("L062", f"the parameter `{p}` takes a name the language supplies", d.span)
        for n, sp in observed.items():
            if n in N.SUPPLIED:
                raise SerqError("L062", f"`observe {n}`: `{n}` is a name the language supplies", sp)
            if n in k.declared:
                raise SerqError("L060", f"`observe {n}`: `{n}` is a {k.declared[n][0]} already", sp)
            if n in self.attr_types or n in N.BUILTIN_ATTRS:
                raise SerqError("L063", f"`observe {n}`: `{n}` is an attribute", sp)
        for n, sp in k.bindings.items():
            if n in k.declared or n in N.SUPPLIED or n in N.BUILTIN_ATTRS or n in N.TRACE_ATTRS or n in observed:
                raise SerqError("L066", f"the binding `{n}` is its own name: no declaration, built-in attribute, "
                                "context variable or let may share it", sp)
            # the body's `set n = …` that the binding lowers to carries the binding's span; any other set is
            # an attribute of the program's own
            other = [x for x in self.set_spans.get(n, []) if x != sp]
            if other:
                raise SerqError("L066", f"the binding `{n}` is its own name: an attribute the program sets may not "
                                "share it", sp)
        for p in k.pools:
            if p.queue is not None:
                local = p.name.split(".", 1)[1]
                if local in k.defs or local in k.consts:
                    raise SerqError("L064", f"queue `{p.queue}`'s pool `{local}` shares its name with a "
                                    f"{'def' if local in k.defs else 'let'}, which its body reads bare", p.span)
        wl_hidden = {n for n, _ in wl.hidden} if wl is not None else set()
        t.hidden = wl_hidden

    def _attr(self, name, typ, side, span):
        old = self.attr_types.get(name)
        if old is None:
            self.attr_types[name] = (typ, side, span)
            return
        otyp, oside, osp = old
        if typ == "size" and side == "server":
            raise SerqError("L201", "`Size` is the workload's: a server computes its own bookkeeping with `set`", span)
        if otyp == "size" and side == "server":
            raise SerqError("L202", f"`{name}` is a Size attribute of the workload, read-only to the server", span)
        if typ == "size" and oside == "server":
            raise SerqError("L202", f"`{name}` is a Size attribute of the workload, read-only to the server", osp)
        if {typ, otyp} == {"cost", "attr"} or {typ, otyp} == {"cost", "size"}:
            raise SerqError("L203", f"`{name}` is declared a Cost and assigned another type", span)
        if typ == "size":
            self.attr_types[name] = (typ, side, span)

    # ------------------------------------------------------------ link
    def link(self) -> I.Program:
        self.collect()
        k = self.k
        for s, (typ, side, sp) in self.attr_types.items():
            if typ == "size" and side == "server":
                raise SerqError("L201", "`Size` is the workload's: a server computes its own bookkeeping with `set`",
                                sp)
        self.cost_types()
        pools = [self.pool(p) for p in k.pools]
        stages = [self.stage(s) for s in k.stages]
        wl = self.workload()
        server = self.block(k.server, Scope("server"))
        gauges = [I.Gauge(name=g.name, e=self.x.link(g.e, N.GAUGE), at=self.x.loc(g.span)) for g in k.gauges]
        claims = [self.claim(c) for c in k.claims]
        attrs = [I.Attribute(name=n, type=typ, side=side) for n, (typ, side, _) in sorted(self.attr_types.items())]
        attrs += [I.Attribute(name=n, type="builtin", side="builtin") for n in sorted(self.builtins)]
        consts = dict(k.consts)
        settings = self.settings.model_copy(update={"inputs": dict(sorted(k.inputs.items()))})
        prog = I.Program(files=self.t.files, constants=consts, pools=pools, stages=stages,
                         share=k.share[0] if k.share else None, workload=wl, server=server, attributes=attrs,
                         gauges=gauges, claims=claims, settings=settings)
        check_program(prog, self)
        return prog

    def cost_types(self):
        """Attributes declared `Cost` carry the resources of their cost (*The serving vocabulary*)."""
        k = self.k
        blocks = []
        if k.workload is not None:
            blocks += [k.workload.init or (), k.workload.turn or (), k.workload.session or ()]
        blocks.append(k.server)
        for b in blocks:
            for s in iter_stmts(b):
                if isinstance(s, A.Set) and s.kind == "Cost":
                    e = s.e
                    if not (isinstance(e, A.Call) and e.fn.simple and e.fn.head == "cost"):
                        res = self._cost_of_ast(e)
                        if res is None:
                            raise SerqError("L203", f"`Cost {s.name}` must have a resource cost type: write "
                                            f"cost(R, …)", e.span)
                        self.t.cost_attrs[s.name] = res
                    else:
                        self.t.cost_attrs[s.name] = tuple(a.dotted for a in e.args[:-1] if isinstance(a, A.Ref))
                elif isinstance(s, A.CostFields):
                    for fname, _ in s.fields:
                        if fname not in self.t.pools and fname not in self.t.stages:
                            raise SerqError("L086", f"`{fname}` is no pool or stage: a Cost field names a resource",
                                            s.span)
                        self.t.cost_attrs[f"{s.name}.{fname}"] = (fname,)

    def _cost_of_ast(self, e):
        if isinstance(e, A.Ref) and e.dotted in self.t.cost_attrs:
            return self.t.cost_attrs[e.dotted]
        if isinstance(e, A.Cond):
            a, b = self._cost_of_ast(e.a), self._cost_of_ast(e.b)
            return a if a is not None and a == b else None
        return None

    # ------------------------------------------------------------ pools and stages
    def pool(self, p) -> I.Pool:
        opts = {}
        for o in p.opts:
            key = o.kind.split("_")[0] if o.kind not in ("reserve_held",) else o.kind
            if key in opts:
                raise SerqError("L240", f"pool `{p.name}` says `{key}` twice", o.span)
            opts[key] = o
        at = self.x.loc(p.span)
        cap = I.Inf() if p.cap is None else self.x.link(p.cap, N.CAP)
        capv = const_value(cap)
        if p.cap is not None and R.pool_cap_problem(capv):
            raise SerqError("L241", R.pool_cap_problem(capv), p.cap.span)
        block = None
        if "block" in opts:
            be = opts["block"].args[0]
            block = self.x.link(be, N.CAP)
            bv = const_value(block)
            if R.block_problem(bv):
                raise SerqError("L241", R.block_problem(bv), be.span)
            p.block_value = bv
        engine_mem = p.memory
        evict = I.EvictLru()
        if "evict" in opts and opts["evict"].kind == "evict_by":
            evict = I.EvictBy(keys=[self.x.link(e, N.EVICT_KEY) for e in opts["evict"].args])
        preempt = I.PreemptNone()
        if "preempt" not in opts and engine_mem is not None:
            # an engine's memory preempts LIFO unless it says otherwise: vLLM's running[-1]
            preempt = I.PreemptBy(keys=[I.Un(op="-", e=I.Ctx(name="admission"))], requeue="head")
        if "preempt" in opts:
            o = opts["preempt"]
            pm = N.Moment(N.PREEMPT_KEY.name, ctx=N.PREEMPT_KEY.ctx, attrs=True,
                          engine_values=N.PREEMPT_KEY.engine_values if engine_mem else frozenset(),
                          registers=engine_mem is not None, engine=engine_mem)
            if o.kind == "preempt_lifo":  # preempt lifo is preempt by (-admission), as the parser writes it
                preempt = I.PreemptBy(keys=[I.Un(op="-", e=I.Ctx(name="admission"))], requeue="head")
            elif o.kind == "preempt_by":
                keys, requeue = o.args
                preempt = I.PreemptBy(keys=[self.x.link(e, pm) for e in keys], requeue=requeue)
        queue = I.QueueFifo()
        if "queue" in opts and opts["queue"].kind == "queue_by":
            via = p.admit_via
            qm = N.Moment(N.QUEUE_KEY.name, ctx=N.QUEUE_KEY.ctx, attrs=True, obs=N.QUEUE_KEY.obs,
                          registers=via is not None, engine=via)
            queue = I.QueueBy(keys=[self.x.link(e, qm) for e in opts["queue"].args])
        spill = None
        if "spill" in opts:
            tier, via, amount, when = opts["spill"].args
            spill = I.Spill(pool=self.x.target(tier, N.SPILL, "pool", "`spill`"),
                            via=self.x.target(via, N.SPILL, "stage", "`spill … via`"),
                            amount=self.x.link(amount, N.SPILL), when=self.x.link(when, N.SPILL))
        content = None
        if "cache" in opts:
            # the content-addressed cache (docs/reference/content.md): whole blocks, vLLM's free order
            if block is None or evict.k != "lru" or spill is not None or \
                    not (capv is not None and capv < math.inf):
                raise SerqError("L252", f"pool `{p.name}` with `cache content` caches whole blocks in the order they "
                                "are freed: it says `block` and a finite `cap`, and neither `evict by` nor `spill`",
                                opts["cache"].span)
            content = True
        return I.Pool(name=p.name, count=p.count, cap=cap, block=block, evict=evict, preempt=preempt, queue=queue,
                      reserve_held="reserve_held" in opts, content=content, spill=spill, admit_via=p.admit_via,
                      memory=p.memory, at=at)

    def stage(self, s) -> I.Stage:
        at = self.x.loc(s.span)
        if isinstance(s.kind, A.Kind):
            kd = s.kind
            if kd.kind == "fifo":
                c = I.Num(v=1)
                if kd.arg is not None:
                    c = self.x.link(kd.arg, N.STAGE_COUNT)
                    v = const_value(c)
                    if R.fifo_servers_problem(v):
                        raise SerqError("L022", R.fifo_servers_problem(v), kd.arg.span)
                kind = I.Fifo(servers=c)
            elif kd.kind == "ps":
                kind = I.Ps(phi=self.x.link(kd.arg, N.PS_CAP))
                v = const_value(kind.phi)
                if R.ps_cap_problem(v):
                    raise SerqError("L026", R.ps_cap_problem(v), kd.arg.span)
            else:  # delay is ps(present), and links to it (*Stages*)
                kind = I.Ps(phi=I.Ctx(name="present"))
            return I.Stage(name=s.name, count=s.count, kind=kind, at=at)
        st: KStep = s.kind
        lk = self.x.link
        budget = lk(st.budget, N.engine_moment("tokens", s.name))
        chunk = _zero_inf(lk(st.chunk, N.engine_moment("chunk", s.name))) if st.chunk is not None else I.Num(v=0)
        granule = None
        if st.granule is not None:
            granule = lk(st.granule, N.engine_moment("granule", s.name))
            if R.granule_problem(const_value(granule)):
                raise SerqError("L118", R.granule_problem(const_value(granule)), st.granule.span)
        key = N.engine_moment("key", s.name)
        serve = I.ExclusivePrefill() if st.serve[0] == "exclusive" else I.By(keys=[lk(k, key) for k in st.serve[1]])
        iteration = None
        if st.iteration is not None:
            iteration = [self.istmt(x, s.name) for x in st.iteration]
        cost = lk(st.cost, N.engine_moment("execute", s.name))
        regs = [I.Register(name=n, init=lk(v, N.engine_moment("register", s.name))) for n, v, _ in st.registers]
        return I.Stage(name=s.name, count=s.count, kind=I.Step(budget=budget, chunk=chunk, granule=granule, serve=serve,
                                                                iteration=iteration, cost=cost, registers=regs), at=at)

    def istmt(self, s, stage):
        lk = self.x.link
        at = self.x.loc(s.span)
        sched = N.engine_moment("schedule", stage)
        key = N.engine_moment("key", stage)
        chunk = N.engine_moment("chunk", stage)
        if isinstance(s, A.Advance):
            order = I.By(keys=[lk(k, key) for k in s.order[1]]) if s.order is not None else None
            return I.IServe(only=lk(s.only, key) if s.only is not None else None, order=order,
                            chunk=_zero_inf(lk(s.each, chunk)) if s.each is not None else None, at=at)
        if isinstance(s, A.Admit):
            return I.IAdmit(only=lk(s.only, key) if s.only is not None else None,
                            gate=lk(s.while_, sched) if s.while_ is not None else None,
                            chunk=_zero_inf(lk(s.each, chunk)) if s.each is not None else None, at=at)
        if isinstance(s, A.SBranch):
            cond = lk(s.cond, sched)
            _const_guard(cond, s.cond.span)
            return I.IBranch(cond=cond, then=[self.istmt(x, stage) for x in s.then],
                             else_=[self.istmt(x, stage) for x in (s.else_ or ())], at=at)
        if isinstance(s, A.SSet):
            return I.ISet(name=s.name.split(".", 1)[1], e=lk(s.e, sched), at=at)
        raise SerqError("L116", "`exclusive prefill` appears only in its own two-statement schedule", s.span)

    # ------------------------------------------------------------ workload
    def workload(self) -> I.Workload:
        wl = self.k.workload
        if wl is None:
            raise SerqError("L232", "the program has no `workload { … }`: it says how sessions arrive",
                            self.k.main_span or Span(self.k.files[0], 1, 1))
        for what, sp in wl.dups:
            raise SerqError("L237", f"the workload writes `{what}` twice", sp)
        if wl.arrive is None:
            raise SerqError("L232", "the workload has no `arrive …;`: it says how sessions arrive", wl.span)
        law, e, sp = wl.arrive
        arrive_m = N.Moment("an arrival law", draws=law == "renewal")
        if law == "poisson":
            rate = self.x.link(e, arrive_m)
            v = const_value(rate)
            if R.poisson_rate_problem(v):
                raise SerqError("L230", R.poisson_rate_problem(v), e.span)
            arrive = I.Poisson(rate=rate)
        elif law == "renewal":
            gap = self.x.link(e, arrive_m)
            v = const_value(gap)
            if R.renewal_gap_problem(v):
                raise SerqError("L231", R.renewal_gap_problem(v), e.span)
            arrive = I.Renewal(gap=gap)
        elif law in ("closed", "batch"):
            n = self.x.link(e, N.CONST)
            v = const_value(n)
            if R.sessions_problem(law, v):
                raise SerqError("L022", R.sessions_problem(law, v), e.span)
            arrive = I.Closed(n=int(v)) if law == "closed" else I.Batch(n=int(v))
        elif law == "trace":
            if wl.trace is None:
                raise SerqError("L238", "`arrive trace;` replays a trace's arrival times: the workload needs "
                                "`trace \"file.csv\";`, whose `arrival` column gives them", sp)
            arrive = I.TraceArrivals()
        else:
            arrive = I.NoArrivals()
        arrive = arrive.model_copy(update={"at": self.x.loc(sp)})
        trace = None
        if wl.trace is not None:
            path, ordered, tsp = wl.trace
            full = os.path.normpath(os.path.join(os.path.dirname(tsp.file), path))
            if not os.path.isfile(full):
                raise SerqError("L236", f"cannot find the trace `{path}` (looked for {full})", tsp)
            load_trace(full, law == "trace")  # a malformed trace is its diagnostic here (serq check), not at the run
            trace = I.Trace(file=full, ordered=ordered)
        for n, hsp in wl.hidden:
            if n in N.SCHEDULER_SET:
                raise SerqError("L235", f"`{n}` is set by the scheduler and cannot be hidden", hsp)
            if n not in self.t.attrs:
                raise SerqError("L234", f"`hidden {n}`: the workload sets no attribute `{n}`", hsp)
        init = self.block(wl.init or (), Scope("init"))
        turn = self.block(wl.turn or (), Scope("turn"))
        session = None
        if wl.session is not None:
            if not any(isinstance(s, A.Turn) for s in iter_stmts(wl.session)):
                raise SerqError("L233", "an explicit session contains a `turn;`", wl.span)
            session = self.block(wl.session, Scope("session"))
        return I.Workload(arrive=arrive, trace=trace, init=init, turn=turn, session=session,
                          hidden=[n for n, _ in wl.hidden])

    # ------------------------------------------------------------ claims
    def claim(self, c: A.Claim) -> I.Claim:
        given = self.x.link(c.given, N.GIVEN) if c.given is not None else None
        if given is not None:
            self._given_reads_init(given, c.given.span)
        at = self.x.loc(c.span)
        if c.form == "end":
            return I.Claim(name=c.name, form="end", e=self.x.link(c.e, N.CLAIM_END), given=given, at=at)
        tgt = self.x.target(c.stage, N.CLAIM_ITER, "stage", "a claim over iterations")
        if tgt.name not in self.t.steps:
            raise SerqError("L250", f"a claim over iterations names a step engine; `{tgt.name}` is not one",
                            c.stage.span)
        m = N.Moment(N.CLAIM_ITER.name, ctx=N.CLAIM_ITER.ctx, obs=N.CLAIM_ITER.obs, const_index=True,
                     claim_iter=True, registers=True)
        return I.Claim(name=c.name, form=c.form, stage=tgt, e=self.x.link(c.e, m), given=given, at=at)

    def _given_reads_init(self, given, span):
        """given is read once the init block has run, from the session's attributes (*Claims*): an
        attribute no statement of the init block sets, nor the interpreter at the start, has no value."""
        wl = self.k.workload
        init = set()
        for s in iter_stmts(wl.init or () if wl is not None else ()):
            if isinstance(s, (A.Set, A.Choose)):
                init.add(s.name)
            elif isinstance(s, A.CostFields):
                init |= {f"{s.name}.{f}" for f, _ in s.fields}
        for n in sorted(attrs_read(given) - init - N.BUILTIN_ATTRS):
            raise SerqError("L251", f"a claim's `given` is read once the init block has run: `{n}` is not set "
                            "there", span)

    # ------------------------------------------------------------ statements
    def block(self, stmts, sc: Scope) -> list:
        out = []
        for s in stmts:
            r = self.stmt(s, sc)
            out.extend(r) if isinstance(r, list) else out.append(r)
        return out

    def _need_cost(self, e_ir, names, what, span):
        res = self.cost_resources(e_ir)
        if res is None:
            raise SerqError("L088", f"{what} needs a cost: write cost({', '.join(names)}, …)", span)
        missing = [n for n in names if n not in res]
        if missing:
            raise SerqError("L088", f"{what} needs a cost on {', '.join(missing)}; this one is on {', '.join(res)}",
                            span)

    def cost_resources(self, e):
        if e.k == "cost":
            return tuple(e.on)
        if e.k == "attr":
            return self.t.cost_attrs.get(e.name)
        if e.k == "if":
            a, b = self.cost_resources(e.a), self.cost_resources(e.b)
            return a if a is not None and a == b else None
        return None

    def _amount(self, e_ir, span, what):
        v = const_value(e_ir)
        if R.amount_problem(v, what):
            raise SerqError("L093", R.amount_problem(v, what), span)
        return v

    def stmt(self, s, sc: Scope):
        x = self.x
        at = x.loc(s.span)
        S = N.SESSION
        side = sc.side
        if side in ("init", "turn") and not isinstance(s, (A.Set, A.Observe, A.CostFields)):
            raise SerqError("L204", f"a workload's `{side}` block holds Size, set and observe statements", s.span)
        if isinstance(s, A.Turn):
            if side != "session":
                raise SerqError("L200", "`turn;` stands in the workload's session block" +
                                (": the server handles the turn" if side == "server" else ""), s.span)
            if sc.leg:
                raise SerqError("L205", "a leg may not turn, end, fork or join", s.span)
            return I.Turn(at=at)
        if isinstance(s, A.Set):
            typ = {"set": "attr", "Size": "size", "Cost": "cost"}[s.kind]
            if typ == "size" and side == "server":
                raise SerqError("L201", "`Size` is the workload's: a server computes its own bookkeeping with `set`",
                                s.span)
            if side == "server":
                t0 = self.attr_types.get(s.name)
                if t0 is not None and t0[0] == "size":
                    raise SerqError("L202", f"`{s.name}` is a Size attribute of the workload, read-only to the "
                                    "server", s.span)
            e = x.link(s.e, S)
            if typ == "cost" and self.cost_resources(e) is None:
                raise SerqError("L203", f"`Cost {s.name}` must have a resource cost type: write cost(R, …)",
                                s.e.span)
            return I.Set(name=s.name, e=e, type=typ, at=at)
        if isinstance(s, A.CostFields):
            # a composite Cost evaluates each field once in written order (*The serving vocabulary*)
            return [I.Set(name=f"{s.name}.{f}", e=I.Cost(on=[f], e=x.link(e, S), at=at), type="cost", at=at)
                    for f, e in s.fields]
        if isinstance(s, A.Observe):
            return I.Observe(name=s.name, e=x.link(s.e, S), at=at)
        if isinstance(s, A.Hold):
            return self.hold(s, sc, at)
        if isinstance(s, A.Grow):
            tgt = self._in_hold(s.pool, sc, "grow")
            e = x.link(s.e, S)
            self._need_cost(e, [tgt.name], "`grow`", s.e.span)
            self._amount(e, s.e.span, "a grow")
            return I.Grow(pool=tgt, e=e, at=at)
        if isinstance(s, A.Load):
            tgt = self._in_hold(s.pool, sc, "load")
            e = x.link(s.e, S)
            self._need_cost(e, [tgt.name], "`load`", s.e.span)
            self._amount(e, s.e.span, "a load")
            return I.Load(pool=tgt, e=e, at=at)
        if isinstance(s, A.Release):
            tgt = x.target(s.pool, INDEX, "pool", "`release`")
            if not any(same_target(h[0], tgt) for h in sc.holds) and not self._leases(tgt.name):
                raise SerqError("L094", f"`release {s.pool.dotted}` stands inside a hold of that pool, or in a session "
                                "that leases it", s.span)
            return I.Release(pool=tgt, at=at)
        if isinstance(s, A.Drop):
            tgt = x.target(s.pool, INDEX, "pool", "`drop`")
            if self._content_pool(tgt.name):
                raise SerqError("L255", f"`drop {tgt.name}`: a content-addressed cache is no session's to drop; its "
                                "blocks go when evicted", s.span)
            return I.Drop(pool=tgt, at=at)
        if isinstance(s, A.Run):
            return self.run(s, sc, at)
        if isinstance(s, A.Branch):
            cond = x.link(s.cond, S)
            _const_guard(cond, s.cond.span)
            return I.Branch(cond=cond, then=self.block(s.then, sc), else_=self.block(s.else_ or (), sc), at=at)
        if isinstance(s, A.While):
            cond = x.link(s.cond, S)
            _const_guard(cond, s.cond.span)
            body = self.block(s.body, sc)
            return I.While(cond=cond, body=body, at=at)
        if isinstance(s, A.Loop):
            return I.Loop(body=self.block(s.body, sc), at=at)
        if isinstance(s, A.Fork):
            if sc.leg:
                raise SerqError("L205", "a leg may not turn, end, fork or join", s.span)
            if any(h[2] for h in sc.holds):
                raise SerqError("L206", "a fork stands in no hold that may be preempted: the hold would run again "
                                "and fork twice", s.span)
            inner = Scope(sc.side, leg=True, holds=[])
            return I.Fork(body=self.block(s.body, inner), at=at)
        if isinstance(s, A.Join):
            if sc.leg:
                raise SerqError("L205", "a leg may not turn, end, fork or join", s.span)
            return I.Join(at=at)
        if isinstance(s, A.Choose):
            n = x.link(s.count, S)
            v = const_value(n)
            if v is not None and not whole(v, 1):
                raise SerqError("L022", f"choose picks among a whole number >= 1 of indices, not {fmt(v)}",
                                s.count.span)
            keys = [x.link(k, N.Moment("a choose key", ctx=frozenset({"now"}), attrs=True, hidden=True,
                                       obs=N.ALL_OBS - {"budget_left"})) for k in s.keys]
            return I.Choose(name=s.name, n=n, keys=keys, at=at)
        if isinstance(s, A.End):
            if sc.leg:
                raise SerqError("L205", "a leg may not turn, end, fork or join", s.span)
            if side == "server" and sc.holds:
                raise SerqError("L207", "a server's `end;` refuses the request outside a `hold`", s.span)
            return I.End(at=at)
        if isinstance(s, (A.CallStmt, A.Mark, A.Transfer, A.Tool, A.EngineRun, A.AtAdmission, A.CacheItem)):
            raise SerqError("L208", "this statement has no place here", s.span)  # lowering consumed the rest
        raise SerqError("L208", "unknown statement", s.span)  # pragma: no cover

    def _leases(self, pool: str) -> bool:
        if self.leased is None:  # found once, not at every release
            blocks = [self.k.server]
            if self.k.workload is not None:
                blocks.append(self.k.workload.session or ())
            self.leased = {".".join(x.name for x in s.lease[0].segs) for b in blocks for s in iter_stmts(b)
                           if isinstance(s, A.Hold) and s.lease is not None}
        return pool in self.leased

    def _in_hold(self, ref, sc: Scope, what):
        tgt = self.x.target(ref, INDEX, "pool", f"`{what}`")
        if not any(same_target(h[0], tgt) for h in sc.holds):
            raise SerqError("L094", f"`{what} {ref.dotted}` stands inside a hold of that pool reference, index "
                            "included", ref.span)
        return tgt

    def hold(self, s: A.Hold, sc: Scope, at):
        x = self.x
        tgts = []
        first = None
        for hp in s.pools:
            tgt = x.target(hp.pool, INDEX, "pool", "a hold")
            if any(same_target(tgt, t) for t in tgts):
                raise SerqError("L224", f"a hold names each pool once: `{hp.pool.dotted}` twice", hp.pool.span)
            tgts.append(tgt)
            first = first or tgt
        via = self.t.admitted_by.get(first.name)
        hm = N.Moment(N.HEADER.name, ctx=N.HEADER.ctx, attrs=True, hidden=True, obs=N.HEADER.obs,
                      registers=via is not None, engine=via)
        pools = []
        for hp, tgt in zip(s.pools, tgts):
            units = x.link(hp.units, hm)
            self._need_cost(units, [tgt.name], "a hold's units", hp.units.span)
            uv = self._amount(units, hp.units.span, "a hold's units")
            reserve = None
            rv = None
            if hp.reserve is not None:
                reserve = x.link(hp.reserve, hm)
                self._need_cost(reserve, [tgt.name], "a hold's reserve", hp.reserve.span)
                rv = self._amount(reserve, hp.reserve.span, "a hold's reserve")
            capv = const_value(self.t_pool_cap(tgt.name))
            for v, e in ((uv, hp.units), (rv, hp.reserve)):
                if v is not None and capv is not None and v > capv:
                    raise SerqError("L225", f"a constant {fmt(v)} units above `{tgt.name}`'s cap {fmt(capv)}: the hold "
                                    "would be rejected whenever it is reached", e.span)
            pools.append(I.HoldPool(pool=tgt, units=units, reserve=reserve))
        names = [t.name for t in tgts]
        reuse = None
        if s.reuse is not None:
            if s.cache is None:
                raise SerqError("L222", "a hold without `cache` writes no `reuse`: cache is what makes it take part in "
                                "the prefix cache", s.reuse.span)
            reuse = x.link(s.reuse, hm)
            self._need_cost(reuse, names, "a hold's reuse", s.reuse.span)
            self._amount(reuse, s.reuse.span, "a hold's reuse")
        preemptible = any(self._preempts(t.name) for t in tgts)
        inner = Scope(sc.side, sc.leg, sc.holds + [(t, s.cache is not None, preemptible) for t in tgts])
        body = self.block(s.body, inner)
        cache = None
        if s.cache is not None:
            cache = x.link(s.cache, N.CACHE)
            self._need_cost(cache, names, "a hold's cache", s.cache.span)
        content = self._content(s, tgts)
        lease = None
        if s.lease is not None:
            lref, dur = s.lease
            lt = x.target(lref, INDEX, "pool", "a lease")
            if not any(same_target(lt, t) for t in tgts):
                raise SerqError("L226", "`lease P (t)` names one of the hold's pools", lref.span)
            d = x.link(dur, N.LEASE)
            self._amount(d, dur.span, "a lease's duration")
            lease = I.Lease(pool=lt, duration=d)
        return I.Hold(pools=pools, reuse=reuse, body=body, cache=cache, content=content, lease=lease, at=at)

    def _content_pool(self, name):
        return any(o.kind == "cache_content" for o in self.t.pools[name].opts)

    def _content(self, s, tgts):
        """A hold's `content (…)` (docs/reference/content.md): on a content pool, a hold that caches names it."""
        shared = [t for t in tgts if self._content_pool(t.name)]
        if s.content is None:
            if shared and s.cache is not None:
                raise SerqError("L254", f"a hold with `cache` on `{shared[0].name}`, a pool with `cache content`, names "
                                "its content: `cache (…) content (stream[, parent, at])`", s.cache.span)
            return None
        stream, parent, at_ = s.content
        if not shared:
            raise SerqError("L253", "`content (…)` names what a content-addressed cache keys the hold's blocks by: "
                            "none of the hold's pools says `cache content`", stream.span)
        link = lambda e: self.x.link(e, N.CONTENT) if e is not None else None  # noqa: E731
        return I.Content(stream=link(stream), parent=link(parent), at=link(at_))

    def t_pool_cap(self, name):
        p = self.t.pools[name]
        if p.cap is None:
            return I.Inf()
        try:
            return self.x.link(p.cap, N.CAP)
        except SerqError:
            return I.Inf()

    def _preempts(self, pool: str) -> bool:
        p = self.t.pools[pool]
        return any(o.kind in ("preempt_lifo", "preempt_by") for o in p.opts)

    def run(self, s: A.Run, sc: Scope, at):
        x = self.x
        if not s.stages:  # a queue's entry names its own stage (lowered before here); elsewhere there is none
            raise SerqError("L168", "`run (…)` names no stage: it runs on the queue's own stage, in a queue's entry",
                            s.span)
        tgts = [x.target(r, N.SESSION, "stage", "`run`") for r in s.stages]
        names = [t.name for t in tgts]
        steps = [t for t in tgts if t.name in self.t.steps]
        if steps:
            if len(tgts) > 1:
                raise SerqError("L089", "a run on a step engine names that engine alone", s.span)
            if s.mode is None:
                raise SerqError("L089", f"a run on engine `{tgts[0].name}` says its mode, `run {tgts[0].name} prefill "
                                "(…)` or `decode`", s.span)
        elif s.mode is not None:
            raise SerqError("L089", f"`{s.mode}` is the mode of a run on a step engine; `{names[0]}` is not one",
                            s.span)
        if len(tgts) > 1:
            if len(set(names)) != len(names):
                raise SerqError("L242", "a run names each stage array once (an index is known only when the run "
                                "starts)", s.span)
            for t in tgts:
                st = self.t.stages[t.name]
                ok = isinstance(st.kind, A.Kind) and st.kind.kind == "ps"
                v = None
                if ok:
                    try:
                        v = const_value(x.link(st.kind.arg, N.PS_CAP))
                    except SerqError:
                        v = None
                if not ok or v is None or not v > 0:
                    raise SerqError("L243", f"every stage of a run over several is ps(φ) with a constant φ above 0: "
                                    f"`{t.name}` is not", s.span)
            if self.k.share is None:
                raise SerqError("L244", "a program with a run over several stages declares its `share` (maxmin or "
                                "bottleneck), which has no default", s.span)
        work = x.link(s.work, N.SESSION)
        self._need_cost(work, names, "a run's work", s.work.span)
        self._amount(work, s.work.span, "a run's work")
        growing = None
        if s.growing is not None:
            growing = self._in_hold(s.growing, sc, "growing")
        return I.Run(stages=tgts, mode=s.mode, work=work, growing=growing, at=at)


def _zero_inf(e):
    """inf is no cap, which the linker writes 0 as the kernel reads it (*Engines on devices*)."""
    if e.k == "inf":
        return I.Num(v=0, at=e.at)
    if e.k == "if":
        return I.If(c=e.c, a=_zero_inf(e.a), b=_zero_inf(e.b), at=e.at)
    return e


def _const_guard(cond, span):
    v = const_value(cond)
    if v is not None and v not in (0.0, 1.0):
        raise SerqError("L095", f"a constant guard is 0 or 1, not {fmt(v)}: a guard is a test, and a test has two "
                        "answers", span)


def link_kernel(k: Kernel, settings: I.Settings | None = None) -> I.Program:
    return Linker(k, settings or I.Settings()).link()

