"""A shorter path for a single engine's single-turn sessions (issue 49): open arrivals, one
turn a session, and a server that holds the engine's slot pool and its KV pool and, in the hold,
runs a prefill and a decode on the engine growing the KV hold, as vLLM's request does
(examples/single-turn/vllm_single_turn.sq, ../shared/bench/blis_shared.sq). Such a session's life
is its arrival, its wait in the engine's queue, its admission, its two runs and its answer: the
engine drives it directly, with no instruction list, generator or ready queue (sessions.Flat,
Sim._drain), and its iterations are planned for the default schedule alone (*Engines*: every
running request served in admission order, then the waiting admitted while the budget lasts and the
gate is 1).

An iteration whose batch would be the one before it again (every running request decoding a token,
each of whose last token was the iteration before's, nothing waiting) is not planned: a stretch of
such iterations runs in the execute expression's loop (engine.py, _steady_cost) up to the first
that ends a run, the one the next arrival falls in, or the last that ends by the horizon, its
growths made at their iterations' starts, in order, before anything later reads a pool.

A growth the KV pool has no room for preempts as the general path does (Iterations._engine_grow:
the pool's victims by its keys, Sim._preempt; the cohort written out first, since the keys read
positions), and the preempted sessions' holds join the queue again once the iteration is planned,
as settling would run them (requeue).

The events, the draws, the expressions and the statistics are the general path's, in the same
order, so the report is the same to the byte (tests/test_enginepath.py runs both). A run that
reaches what this path does not take (Unsupported) stops, and is made again on the general path
(Sim.run)."""
from __future__ import annotations

import heapq
import math
from operator import sub

from serq.interp.engine import Req, _Miss, _room_for_block, batch_sums
from serq.interp.pools import Pool, round_up
from serq.interp.rng import state1
from serq.interp.sessions import HoldFrame, Preempted, SessionEnd
from serq.lang.lower.constants import fmt
from serq.link.exprs import const_value

INF = math.inf
BIG = 1 << 62
CO_MIN = 16  # the running requests from which the cohort forms (engine.py's CO_MIN)


class Unsupported(Exception):
    """The run reached what the engine path does not take: it is made again on the general path."""


# the observables a gauge may read here: a pool's, which change only where this path changes them
_GAUGE_OBS = ("used", "free", "holders", "queued")


def plan(sim):
    """The engine path for this run, or None when the program needs the general one."""
    prog, wl = sim.prog, sim.prog.workload
    if (not sim.engine_path or sim.workload is not None or sim.trace is not None
            or sim.step_log is not None or sim.requests is not None and sim.recorder is None
            or not sim.fast_forward or wl.arrive.k not in ("poisson", "renewal") or wl.session is not None
            or sim.init_ops
            or prog.claims or sim.spill_specs or sim.flownet is not None):
        return None
    if len(sim.engines) != 1 or len(sim.stages) != 1 or len(sim.pools) != 2:
        return None
    from serq.interp.sim import Sim
    if type(sim) is not Sim or any(callable(v) and callable(getattr(Sim, k, None)) for k, v in vars(sim).items()):
        return None  # a simulator whose methods are replaced (the tests' checks) runs them
    eng = sim.engines[0]
    spec = sim.engine_specs[eng.name]
    if spec["exclusive"] or spec["keys"] or spec["granule"] is not None or spec["regs"] \
            or spec["body_default"] is not True:
        return None
    decl = next(p for p in prog.stages if p.name == eng.name)
    if decl.count is not None or const_value(decl.kind.budget) is None:
        return None  # the budget the same at every iteration (a stretch plans none)
    if any(g for g, _, _ in sim.turn_ops):
        return None
    slots = [m for m in sim.pools if m.engine is eng]
    kv = [m for m in sim.pools if m.memory_of is eng]
    if len(slots) != 1 or len(kv) != 1 or slots[0] is kv[0]:
        return None
    slots, kv = slots[0], kv[0]
    for m in (slots, kv):
        if type(m) is not Pool or m.reserve_held or m.name in sim._queue_keys or m.name in sim._evict_keys \
                or m.decl.count is not None:
            return None
    if not kv.block or not float(kv.block).is_integer() or kv.engine is not None or slots.memory_of is not None:
        return None
    # the server: sets, then one hold of (slots, kv) whose body is sets and observes, a prefill and a
    # decode on the engine, each growing kv
    server = prog.server
    if not server or any(s.k != "set" for s in server[:-1]) or server[-1].k != "hold":
        return None
    h = server[-1]
    if h.lease is not None or h.content is not None or len(h.pools) != 2 \
            or h.pools[0].pool.name != slots.name or h.pools[1].pool.name != kv.name \
            or h.pools[0].pool.index is not None or h.pools[1].pool.index is not None:
        return None
    body = h.body
    if len(body) < 2 or any(s.k not in ("set", "observe") for s in body[:-2]):
        return None
    for s, mode in zip(body[-2:], ("prefill", "decode")):
        if s.k != "run" or s.mode != mode or len(s.stages) != 1 or s.stages[0].name != eng.name \
                or s.stages[0].index is not None or s.growing is None or s.growing.name != kv.name \
                or s.growing.index is not None:
            return None
    for g in prog.gauges:
        if not _reads_only(g.e, (), _GAUGE_OBS):
            return None
    # the execute expression reads the batch and the residents alone (a stretch applies its growths
    # after its loop); the sessions' expressions read no engine's values (the cohort's members are
    # written out only where this path reads them)
    if not _reads_only(decl.kind.cost, ("step",), ("blocksize",)):
        return None
    from serq.link.rules import _exprs
    for s in [*wl.turn, *server[:-1], h, *body]:
        for e in _exprs(s):
            if not _reads_only(e, ("attr", "ctx", "draw"), _SESSION_OBS):
                return None
    return EnginePath(sim, eng, spec, slots, kv, h, const_value(decl.kind.budget))


# what the sessions' expressions may read of the deployment: the pools, a cached prefix, the budget an
# admission has left (engine.py, Engine.budget_left), a block's size
_SESSION_OBS = ("used", "free", "holders", "queued", "cachedin", "budget_left", "blocksize")


def _reads_only(e, kinds, obs) -> bool:
    """An expression of numbers, operators and functions, and of these kinds of leaves and
    observables alone."""
    from serq.link.rules import expr_nodes
    for x in expr_nodes(e):
        if x.k in ("attr", "ctx", "step", "reg", "agg", "draw") and x.k not in kinds:
            return False
        if x.k == "obs" and x.fn not in obs:
            return False
    return True


class EnginePath:
    # slots: past 30 attributes an instance's dict is no longer shared-key, and every read of one
    # (the hot path reads them all the time) takes the slower lookup
    __slots__ = ("sim", "eng", "spec", "slots", "kv", "budget_c", "pre_ops", "hs", "body_ops", "pf_work",
                 "pf_at", "dc_work", "dc_at", "gate", "gauges", "recorder", "growth_gauges", "pool_gauges",
                 "budget", "run_cost", "stored_cost", "ibl",
                 # the run's state (events)
                 "t_arr", "t_end", "want", "batch", "grows", "co", "ep", "co_last", "co_s", "co_n", "co_k",
                 "fin", "fin_heap", "gcal", "hzp", "reps", "ends", "t_start", "co_now", "pbatch", "refund", "idle")

    def __init__(self, sim, eng, spec, slots, kv, hold, budget_c):
        self.budget_c = budget_c  # the tokens cap, a constant (plan)
        self.sim = sim
        self.eng = eng
        self.spec = spec
        self.slots = slots
        self.kv = kv
        x = sim.compiler
        from serq.interp.sessions import Ops
        ops = Ops(sim, "server")
        # a block of sets and observes: one generated function (Ops.straight), else its ops
        pre, body = sim.prog.server[:-1], hold.body[:-2]
        blk = ops.straight(pre)
        self.pre_ops = [blk] if blk is not None else [op for _, op, _ in ops.block(pre)]
        hs = ops.hold_spec(hold)
        self.hs = hs
        blk = ops.straight(body)
        self.body_ops = [blk] if blk is not None else [op for _, op, _ in ops.block(body)]
        pf, dc = hold.body[-2:]
        self.pf_work, self.pf_at = x.expr(pf.work), pf.at
        self.dc_work, self.dc_at = x.expr(dc.work), dc.at
        self.gate = spec["body"][1][2]
        self.gauges = [(_holders_of(g.e, slots, kv) or f, avg) for g, (_, f, avg) in zip(sim.prog.gauges, sim.gauges)]
        self.recorder = sim.recorder  # --dump: the queues read with the gauges at each instant's end
        self.growth_gauges = sim.growth_gauges  # those a growth can change (Sim._growth_gauges)
        # of those, the ones that read kv's used (1) or free (-1) alone: their values at a stretch's
        # growth instants are the pool's, without reading them (make_grows)
        from serq.interp.sim import _growth_reads
        self.pool_gauges = [(_pool_sign(g.e, kv.name), avg)
                            for g, (_, _, avg) in zip(sim.prog.gauges, sim.gauges) if _growth_reads(g.e)]
        self.budget = spec["budget"]
        self.run_cost, self.stored_cost = spec["steady_cost"]
        self.ibl = int(kv.block) if float(kv.block).is_integer() else None

    def install(self):
        sim = self.sim
        sim._events = self.events

    # ---------------------------------------------------------------- the sessions
    def arrive(self):
        """Sim._arrive_open and _arrive_one, then the session's instructions to its hold's wait
        (Flat: the turn, the server's sets, the hold joining the engine's queue)."""
        sim = self.sim
        if sim.sessions_arrived >= sim.max_arrivals:
            sim.too_many_arrivals()
        serial = sim.sessions_arrived
        sim.sessions_arrived += 1
        sim.next_id += 1
        attrs = {"serial": float(serial), "turn_no": 0.0, "cached": 0.0, "computed": 0.0}
        sess = sim.Session(serial, serial, attrs)
        if sim.session_draws:
            sess.s = state1(sim.b_session, serial)
            sess.rng = sess
        sim.live += 1
        if sim.arrivals_n is not None and sim.sessions_arrived >= sim.arrivals_n:
            self.t_arr = INF
        else:
            sim.seq += 1  # Sim.at's
            self.t_arr = sim.now + sim.arrival_rng.expovariate(sim.rate) if sim.poisson else sim._gap()
        # the session runs as settling runs it, after the event
        sim.turn_set(sess)
        for op in self.pre_ops:
            op(sess)
        try:
            self.join(sess)
        except SessionEnd as e:
            sim._ended(sess, e.refused)

    def join(self, sess):
        """Sim.hold up to its wait: the frame joins the slot pool's queue."""
        sim = self.sim
        fr = self.frame(sess)
        fr.join_seq = sim.next_seq()
        fr.join_t = sim.now
        fr.head = False
        self.slots.queue.append(fr)
        sess.wait = fr
        self.want = True

    def frame(self, sess, computed=0.0, again=False):
        """Sim.hold_frame for this path's hold: its members the slot and the KV pool (no index, two
        pools: plan); SessionEnd(refused) where units or a reserve known as it joins never fit."""
        sim = self.sim
        spec = self.hs
        c = sess
        sim.cur_at = spec.at
        sess.a["computed"] = computed
        fr = HoldFrame(sess, spec)
        fr.again = again
        fr.members = [self.slots, self.kv]
        sim.refuse_never_fitting(fr, c)
        return fr

    def try_admit(self, fr) -> bool:
        """Sim._try_admit(fr, sync=True) for this path's hold: the slot pool then the KV pool, each
        its own member (no index: plan), no content, no lease."""
        sim = self.sim
        spec = self.hs
        sess = fr.sess
        c = sess
        at = spec.at
        amount = sim.amount
        m0, m1 = ms = self.slots, self.kv
        ur = []  # each pool's (units, reserve)
        for (_, uf, rf, _), m in zip(spec.pools, ms):
            sim.cur_at = at
            u = uf(c)
            if u != u or u < 0:  # (Sim.amount's check in line: it raises)
                amount(u, at, "a hold's units")
            b = m.block
            if b and u != INF:  # round_up, in line
                u = math.ceil(u / b - 1e-12) * b
            if rf is not None:
                r = rf(c)
                if r != r or r < 0:
                    amount(r, at, "a hold's reserve")
            else:
                r = 0.0
            need = r if r > u else u  # max(u, r): the first of equals
            if need > m.cap:
                m.over = fr
                return False
            if not m.used + (m.reserved_extra if m.reserve_held else 0.0) + need <= m.cap + 1e-9:  # room_for
                return False
            ur.append((u, r))
        (u0, _), (u1, _) = ur
        if spec.has_cache:
            rho = amount(spec.reuse(c), at, "a hold's reuse") if spec.reuse is not None else INF
            cid = sess.cid  # (consume where the session has an entry: none else, 0)
            g0 = m0.consume(sess, rho, u0) if cid in m0.own else 0.0
            g1 = m1.consume(sess, rho, u1) if cid in m1.own else 0.0
            got = g0 if g0 >= g1 else g1  # max([g0, g1]): the first of equals
        else:
            if spec.reuse is not None:
                amount(spec.reuse(c), at, "a hold's reuse")
            g0 = g1 = got = 0.0
        sess.a["cached"] = got
        rec = sess.turn_rec
        if rec is not None and not fr.again:
            rec.cached += got
        for m, (u, r), g in zip(ms, ur, (g0, g1)):
            if m.used + m.cached + u - m.cap > 1e-9:  # (make_room's own test: nothing to evict else)
                m.make_room(u)
            a = m.allocate(fr, u, r)
            a.pos = a.consumed = g
            fr.allocs.append(a)
        m0.queue.remove(fr)
        fr.admitted = True
        sess.wait = None
        return True

    def admitted(self, fr):
        """The hold admitted (Iterations._admit_head): the session runs its body to its prefill (or
        further, where a run has no work): the requests it brought to the engine."""
        sim, eng = self.sim, self.eng
        sess = fr.sess
        sim.cur_engine = eng
        eng.vars["Admitted"] += 1
        eng.adm_seq += 1
        sess.eng_adm = eng.adm_seq
        sess.wait = None
        frames = sess.frames
        if frames:
            frames.append(fr)
        else:
            sess.frames = [fr]
        for op in self.body_ops:
            op(sess)
        sess.fr = fr
        sim.cur_engine = eng
        return self.run(sess, fr, True)

    def run(self, sess, fr, prefill):
        """Iterations.engine_run_op's op for the prefill (or the decode): its request, or None where
        its work is none (the session then goes on at once)."""
        sim = self.sim
        if prefill:
            work = self.pf_work(sess)
            if work != work or work < 0:  # (Sim.amount's check in line: it raises)
                sim.amount(work, self.pf_at, "a run's work")
            if work <= 0:
                return self.run(sess, fr, False)
        else:
            work = self.dc_work(sess)
            if work != work or work < 0:
                sim.amount(work, self.dc_at, "a run's work")
            if work <= 0:
                self.answer(sess, fr)
                return None
        alloc = fr.allocs[1]
        if not alloc.held:
            raise Unsupported  # innermost's R042 (the hold released): the general path says it
        rec = sess.turn_rec
        if rec.prompt is None:
            rec.prompt = 0.0
        if prefill and not fr.again:
            rec.prompt += work
        sim.seq += 1
        req = Req(sess, "prefill" if prefill else "decode", work, alloc, sim.seq)
        sess.wait = req
        reqs = self.eng.reqs
        if reqs and reqs[-1].adm > req.adm:  # a decode after its prefill: in admission order
            i = len(reqs)
            while i and reqs[i - 1].adm > req.adm:
                i -= 1
            if i < len(self.co):  # among the cohort (never: a member is older than any other)
                self.co_flush()
            reqs.insert(i, req)
        else:
            reqs.append(req)
        return req

    def answer(self, sess, fr):
        """The hold's end (Sim.hold: the frame released), the turn's answer and the session's end
        (Flat's turn_end_last)."""
        sim = self.sim
        sess.frames.remove(fr)
        self.release(fr)
        sess.a["computed"] = 0.0
        sim.turn_end(sess)
        sim._finish(sess, False)
        # the session has ended: what makes it, its hold and the hold's allocations cycles (its own
        # stream, its frame and the frame's, each allocation's frame) let go, so that each is freed
        # as its last reference goes (a cache entry keeps the session), not by the cyclic collector:
        # ~9 objects a request, a collection every ~1,600 requests, ~6% of the run's CPU
        sess.rng = None
        sess.fr = None
        fr.allocs = ()

    def release(self, fr):
        """Sim.release_frame(fr) at the hold's end, for this path's hold (no lease, no content): each
        allocation freed, the engine told, then what the cache clause keeps of it put in its pool's
        cache (Sim._give_back, its computed prefix Sim._computed's)."""
        sim, eng = self.sim, self.eng
        sess = fr.sess
        spec = self.hs
        for a in fr.allocs:
            if not a.held:
                continue
            m = a.pool
            m.free(a)
            if not eng.pending:  # Sim.engine_wants (the slot pool's engine, the KV pool's engine it is the memory of)
                sim.engine_wants(eng)
            if spec.has_cache:
                ell = spec.cache(sess)
                if ell != ell or ell < 0:  # (Sim.amount's check in line: it raises)
                    sim.amount(ell, spec.at, "a hold's cache")
                x = a.pos if a.advanced else a.units  # Sim._computed(a, False)
                m.put_cache(sess, x if x < ell else ell)  # min(ell, x): the first of equals
        fr.done = True

    # ---------------------------------------------------------------- the cohort
    # The plain decoders at the head of the running list (a prefix of it, in admission order: each
    # joins as the one before it decodes, so no request after it is older) are kept as a cohort, as
    # the general path keeps its own (engine.py, _co_*): each one's position, tokens left, and its
    # turn's tokens and last token are those of its joining epoch, advanced by the epochs since
    # (self.ep, one an iteration that serves them); its growths and its run's end are calendared by
    # epoch. An iteration's cost and tokens for them are sums, not a walk (whole numbers: exact).

    def co_out(self, r):
        """A member written out as it stands, out of the cohort (its run ends, or the cohort does)."""
        d = self.ep - r.e0
        self.co_s -= int(r.alloc.pos) - r.e0
        r.left -= d
        a = r.alloc
        a.pos += d
        a.advanced = True
        rec = r.sess.turn_rec
        rec.ntok += d
        rec.last = self.co_last
        r.cn = -1

    def co_flush(self):
        """Every member written out (the budget serves not all of them, or the run ends)."""
        for r in self.co:
            self.co_out(r)
        self.co = []
        self.fin = {}
        self.fin_heap = []
        self.gcal = {}
        self.co_s = 0

    def co_join(self, now, it):
        """The requests after the cohort that decoded a whole token this iteration (their first
        before it), each with its position, tokens left and units whole, join it, while each does."""
        co = self.co
        reqs = self.eng.reqs
        i, n = len(co), len(reqs)
        if not i and n < CO_MIN or self.sim.itl_max:
            # a few run: walked one by one costs less than the calendars; or each turn keeps its
            # longest gap (--slo itl), which the cohort's sums do not (engine.py's _co_ok: none)
            return
        ep = self.ep
        while i < n:
            r = reqs[i]
            if r.it != it or r.mode != "decode":
                return
            rec = r.sess.turn_rec
            if rec.first is None or rec.last != now or r.u0 is not True and not self.whole(r):
                return
            a = r.alloc
            left, pos, units = r.left, a.pos, a.units
            if not co:
                self.co_last = now
            self.co_n += 1
            r.cn = self.co_n
            r.e0 = ep
            co.append(r)
            self.co_s += int(pos) - ep
            e = ep + int(left)  # its run ends as the iteration that makes this epoch does
            f = self.fin.get(e)
            if f is None:
                self.fin[e] = [r]
                heapq.heappush(self.fin_heap, e)
            else:
                f.append(r)
            self.gcal.setdefault(ep + int(units - pos), []).append(r)  # the start that finds it full
            i += 1

    def whole(self, r) -> bool:
        """Whether a decode's position, units and tokens left are whole (its units whole blocks): they
        stay so while it decodes a token an iteration and grows by blocks (r.u0 keeps the answer;
        plan_iteration forgets it where it serves another amount)."""
        a = r.alloc
        if float(r.left).is_integer() and float(a.pos).is_integer() and float(a.units).is_integer() \
                and not a.units % self.kv.block:
            r.u0 = True
            return True
        return False

    def next_fin(self):
        h, fin = self.fin_heap, self.fin
        while h and h[0] not in fin:
            heapq.heappop(h)
        return h[0] if h else BIG

    # ---------------------------------------------------------------- the iterations
    def values(self):
        """Iterations._running: running.count, .decoding, .kv_decode and .kv_prefill."""
        eng = self.eng
        k = len(self.co)
        ndec = k
        kvb = float(self.co_s + k * self.ep) if k else 0.0
        kvp = 0.0
        reqs = eng.reqs
        for x in range(k, len(reqs)):
            r = reqs[x]
            if r.mode == "decode":
                ndec += 1
                kvb += r.alloc.pos
            else:
                kvp += r.alloc.pos
        return float(len(eng.rc)), float(ndec), kvb, kvp

    def plan_iteration(self):
        """Iterations._iterate with the default schedule: the iteration's batch and its end, or
        False where it schedules nothing."""
        sim, eng, spec = self.sim, self.eng, self.spec
        c = sim.machine
        eng.iter_no += 1
        sim.cur_engine = eng
        v = eng.vars
        v["Nres"], v["Ndec"], v["Kvb"], v["Kvp"] = self.values()
        slots = self.slots
        q = slots.queue
        v["Queued"] = float(len(q))
        v["Preempted"] = v["Admitted"] = v["Ntok"] = v["Npre"] = v["Attn"] = 0.0
        eng.batch = {"Ndec": 0.0, "Kvb": 0.0, "Kvp": 0.0}
        budget = self.budget(c)
        if not budget >= 0:
            raise sim.run_error("R110", f"engine `{eng.label}`'s tokens cap is {fmt(budget)}: a number >= 0",
                                eng.at)
        chunk = spec["chunk"](c)
        cap = eng.chunk = INF if chunk == 0 else chunk
        eng.granule = None
        eng.admit_cap = INF
        eng.planning = True
        eng.no_admit = False
        eng.stop_serving = False
        batch = []
        it = eng.iter_no
        kv = self.kv
        reqs = eng.reqs
        co = self.co
        k = len(co)
        try:
            # advance running: each in admission order, the cohort first (its due growths in its order)
            self.co_now = False
            if k:
                due = self.gcal.get(self.ep) if budget >= k else None
                if due:
                    due = [r for r in due if r.cn >= 0]  # (those that left the cohort since: not)
                if budget < k or due and not kv.room_for(len(due) * kv.block):
                    # the budget serves not all, or a growth without room preempts: each member one
                    # at a time (engine.py's _co_engage serves those before it in the cohort: the same)
                    self.co_flush()
                    k = 0
                else:
                    if due is not None:
                        del self.gcal[self.ep]
                        bl = kv.block
                        due.sort(key=_cn)
                        for r in due:
                            self.grow_one(r.alloc, bl)
                            self.gcal.setdefault(self.ep + int(bl), []).append(r)
                    budget -= k
                    self.co_now = True
            self.pbatch = batch
            self.refund = 0.0
            for r in reqs[k:]:  # a copy: a preemption drops from eng.reqs
                if not r.alive:  # preempted earlier in this iteration
                    continue
                a = r.alloc
                left = r.left
                if r.mode == "decode":
                    if budget >= 1.0 and left >= 1.0 and a.pos + 1.0 <= a.units:
                        r.served = 1.0
                        budget -= 1.0
                        batch.append(r)
                        r.it = it
                        continue
                    n = 1.0 if budget >= 1.0 and left >= 1.0 else min(1.0, budget, left)
                    r.u0 = None  # (steady checks its numbers again)
                else:
                    n = min(left, cap, budget)
                if n <= 0:
                    continue
                if a.pos + n > a.units:
                    need = round_up(a.pos + n, kv.block) - a.units
                    if need > 0:
                        ok = self.grow(r, need)
                        budget += self.refund  # one served before it, preempted
                        self.refund = 0.0
                        if k and not self.co:  # the cohort written out, served, to preempt
                            k = 0
                        if not ok:
                            if eng.stop_serving:  # the grower preempted itself: the iteration serves no more
                                break
                            continue
                r.served = n
                budget -= n
                batch.append(r)
                r.it = it
            # admit waiting: the queue's head while budget is left, it fits and the gate is 1
            eng.budget = budget
            eng.admit_cap = cap
            gate = self.gate
            while q:
                if eng.budget <= 0 or eng.no_admit:
                    break
                if gate is not None and gate(c) == 0:
                    break
                fr = q[0]
                if not self.try_admit(fr):
                    eng.no_admit = True
                    break
                r = self.admitted(fr)
                if r is None or not r.alive:
                    continue
                # Iterations._give
                if r.mode == "decode":
                    n = 1.0 if eng.budget >= 1.0 and r.left >= 1.0 else min(1.0, eng.budget, r.left)
                    r.u0 = None
                else:
                    n = min(r.left, cap, eng.budget)
                if n <= 0:
                    continue
                a = r.alloc
                if a.pos + n > a.units:
                    need = round_up(a.pos + n, kv.block) - a.units
                    if need > 0:
                        ok = self.grow(r, need)
                        eng.budget += self.refund
                        self.refund = 0.0
                        if k and not self.co:
                            k = 0
                        if not ok or not r.alive:
                            continue
                r.served = n
                eng.budget -= n
                batch.append(r)
                r.it = it
        finally:
            eng.planning = False
            self.pbatch = None
        ntok, npre, ndec, kvb, kvp, attn = batch_sums(batch, k, self.co_s + k * self.ep)  # as _iterate
        if ntok <= 0 and v["Preempted"] == 0:
            return False
        cost = sim.batch_cost(eng, spec, ntok, npre, ndec, kvb, kvp, attn)
        eng.served_total += ntok
        eng.iterations += 1
        eng.busy = True
        self.busy_from(sim.now)
        self.batch = batch
        self.co_k = k  # the cohort served (its head)
        self.reps = 1
        self.ends = None
        sim.seq += 1  # Sim.at's
        if sim.ready:  # the preempted, as settling runs them after the event
            self.requeue()
        self.t_end = sim.now + cost
        return True

    def grow_one(self, a, need):
        """A growth the pool has room for (make_room evicts the cache as it must)."""
        kv = self.kv
        if need == kv.block:  # one block (a cohort's due growth, a decode's next): _room_for_block's eviction in line
            self.grow_block(a, self.sim.now)
            return
        kv.make_room(need)
        kv.grow_alloc(a, need)

    def grow(self, r, need) -> bool:
        """Iterations._engine_grow: r's hold grows by need, each victim preempted (Sim._preempt) while
        the pool has no room; False where r is not served: no victim is left, or r is its own (the
        iteration then serves no more: eng.stop_serving). A victim served earlier in the iteration
        leaves the batch, its tokens added to self.refund for the caller's budget."""
        kv, sim, eng = self.kv, self.sim, self.eng
        while not kv.room_for(need):
            if self.co:  # the keys read positions: the cohort written out, served if it was
                self.co_served()
            victim = sim._engine_victim(kv)
            if victim is None:
                return False
            vs = victim.frame.sess
            vr = vs.wait
            eng.vars["Preempted"] += 1
            sim._preempt(victim.frame, kv, victim)
            if vr.__class__ is Req:
                eng.reqs.remove(vr)
                batch = self.pbatch
                if vr.it == eng.iter_no and vr in batch:
                    batch.remove(vr)
                    self.refund += vr.served
                    vr.served = 0.0
            if vs is r.sess:
                eng.stop_serving = True
                return False
        self.grow_one(r.alloc, need)
        return True

    def co_served(self):
        """The cohort written out (co_flush) where the iteration being planned has served it: each
        member then served one token on its own, at the batch's head in the cohort's order."""
        co = self.co
        it = self.eng.iter_no
        self.co_flush()
        if self.co_now:
            for r in co:
                r.served = 1.0
                r.it = it
            self.pbatch[:0] = co

    def requeue(self):
        """The preempted sessions, in the order preempted: each one's hold executed again (Sim.hold's
        Preempted: the frame joins the queue again, at its head but where the pool requeues at its
        tail, its position the computed prefix)."""
        sim = self.sim
        ready = sim.ready
        while ready:
            sess, _, p = ready.popleft()
            if not isinstance(p, Preempted):
                raise Unsupported
            try:
                fr = self.frame(sess, p.pos, True)
            except SessionEnd as e:
                sim._ended(sess, e.refused)
                continue
            sim._join(fr, sim._requeue_head(p.frame))
            sess.wait = fr
        self.want = True

    def steady(self):
        """Where the iteration that would start now is the one before again, a stretch of them (the
        engine busy to its last's end), else None. Every running request decodes a whole token an
        iteration (its position and tokens left whole, its units whole blocks), its last token was
        the iteration before's, nothing waits, and the budget serves them all; the stretch ends with
        the iteration that ends a run, or the first that starts at or after the next arrival, or
        before a growth the pool has no room for."""
        sim, eng = self.sim, self.eng
        reqs = eng.reqs
        n = len(reqs)
        if not n or self.slots.queue or n > self.budget_c:
            return None
        now = sim.now
        co = self.co
        kc = len(co)
        if kc < n:
            last = reqs[-1]  # the newest: the one most likely not decoding steadily yet
            rec = last.sess.turn_rec
            if last.mode != "decode" or rec.last != now and rec.pf != now:
                return None
        ep = self.ep
        if kc:
            if self.co_last != now:
                return None
            k = self.next_fin() - ep
            s = self.co_s + kc * ep
        else:
            k = BIG
            s = 0
        kv = self.kv
        bl = kv.block
        firsts = []  # (the iteration whose start grows it a block, batch order, its hold's allocation)
        for j in range(kc, n):
            r = reqs[j]
            a = r.alloc
            rec = r.sess.turn_rec
            left = r.left
            pos = a.pos
            units = a.units
            # its last token the iteration before's, or its first comes now: its prefill ended then
            if r.mode != "decode" or (rec.last != now if rec.first is not None else rec.pf != now):
                return None
            if r.u0 is not True and not self.whole(r):
                return None
            if left < k:
                k = left
            pos = int(pos)
            s += pos
            firsts.append((int(units) - pos + 1, j, a))
        k = int(k)
        if k < 1:
            return None
        v, b = eng.vars, eng.batch
        fn = float(n)
        v["Nres"] = float(len(eng.rc))
        v["Ndec"] = fn
        v["Kvp"] = 0.0
        v["Queued"] = 0.0
        v["Preempted"] = v["Admitted"] = 0.0
        v["Ntok"] = fn
        v["Npre"] = 0.0
        b["Ndec"] = fn
        b["Kvp"] = 0.0
        sim.cur_engine = eng
        s0 = float(s - n)
        # to the next arrival, that iteration the last where it falls in one; not past the horizon,
        # whose events are the last handled (the one that ends after it never ends)
        hzp = self.hzp
        nxt = self.t_arr if self.t_arr < hzp else hzp
        run = self.run_cost
        eng.ends = ends = []
        try:
            if run is None:
                raise _Miss
            out = run(sim.machine, eng, s0, s0, float(s), fn, now, nxt, k, hzp)
        except _Miss:
            run = self.stored_cost
            eng.ends = ends = []
            out = run(sim.machine, eng, s0, s0, float(s), fn, now, nxt, k, hzp)
        cnt, end, _, _, _, stopped = out
        # the growths within the stretch, in iteration order (the cohort's first, in its order, then
        # the others' in batch order), each with room as the ones before leave the pool: the stretch
        # ends before the first without
        grows = []
        ibl = self.ibl
        if kc:
            gcal = self.gcal
            for e in range(ep, ep + cnt) if len(gcal) > cnt else [e for e in gcal if ep <= e < ep + cnt]:
                due = gcal.get(e)
                if due:
                    for r in due:
                        if r.cn < 0:
                            continue
                        i = e - ep + 1
                        cn, a = r.cn, r.alloc
                        while i <= cnt:
                            grows.append((i, 0, cn, a))
                            i += ibl
        for i, j, a in firsts:
            while i <= cnt:
                grows.append((i, 1, j, a))
                i += ibl
        if grows:
            grows.sort()  # (iteration, kind, order) apart for any two: the allocation never compared
            room = kv.cap + 1e-9 - kv.used
            for x, g in enumerate(grows if len(grows) * bl > room else ()):  # (room for all: none to cut)
                if not bl <= room:
                    del grows[x:]
                    cnt, stopped = g[0] - 1, 0
                    del ends[cnt:]
                    end = ends[-1] if ends else now
                    break
                room -= bl
        if cnt == 0:
            return None
        adds = cnt + stopped  # the values as the last cost read them (whole numbers: exact)
        b["Kvb"] = v["Kvb"] = float(s - n + adds * n)
        v["Attn"] = float(s + adds * n)
        eng.iter_no += cnt
        eng.iterations += cnt
        eng.served_total += cnt * fn
        eng.busy = True
        self.busy_from(now)
        if kc or n >= CO_MIN:  # served this iteration: co_join reads it
            it = eng.iter_no
            for x in range(kc, n):
                reqs[x].it = it
        self.batch = reqs[kc:]
        self.co_k = kc
        self.reps = cnt
        self.ends = ends
        self.t_start = now
        if kc:  # the cohort's calendar of growths moved past the stretch
            gcal = self.gcal
            for e in [e for e in gcal if ep <= e < ep + cnt]:
                for r in gcal.pop(e):
                    if r.cn < 0:
                        continue
                    e2 = e + ((ep + cnt - 1 - e) // ibl + 1) * ibl  # its first growth after the stretch
                    gcal.setdefault(e2, []).append(r)
        # the growths, each at its iteration's start: the first iteration's now (the gauges read them
        # as this instant ends), the others' once the stretch ends or an arrival comes, whichever is
        # first (nothing reads the pool in between)
        later = None
        for x, g in enumerate(grows):
            if g[0] > 1:
                later = (grows, x, ends)  # grows[x:], each at ends[its iteration - 2]
                break
            self.grow_block(g[3], now)
        self.grows = later
        sim.seq += 1  # Sim.at's
        self.t_end = end
        return True

    def busy_from(self, now):
        """The busy time rises at now, an iteration's start; where the last iteration ended at now,
        its fall and this rise are one split (TimeAverage.split: set(now, 0.0) then set(now, 1.0),
        the same state), else the fall is set where it was (nothing else sets this average)."""
        avg = self.eng.busy_avg
        idle = self.idle
        if idle is None:
            avg.set(now, 1.0)
            return
        self.idle = None
        if idle == now:
            avg.split(now)
        else:
            avg.set(idle, 0.0)
            avg.set(now, 1.0)

    def grow_block(self, a, t):
        """A block more for a, at t (_room_for_block, and grow_alloc's sums, as _grow_steady)."""
        kv = self.kv
        bl = kv.block
        _room_for_block(kv, bl, True)
        a.units += bl
        u = kv.used = kv.used + bl
        if u > kv.max_used:
            kv.max_used = u
        kv.used_avg.set(t, u)

    def make_grows(self):
        """The stretch's growths after its first iteration's, each at its iteration's start, the
        gauges read at each of those instants (engine.py, _grow_steady)."""
        later, self.grows = self.grows, None
        if not later or self.grow_all(*later):
            return
        grows, x, ends = later
        sim = self.sim
        end = sim.now
        gauges = self.growth_gauges
        grow = self.grow_block
        t = None
        for g in grows[x:]:
            t1 = ends[g[0] - 2]
            if t1 != t:
                if gauges and t is not None:
                    sim.now = t
                    self.read_gauges(t, gauges)
                t = t1
            grow(g[3], t1)
        if gauges and t is not None:
            sim.now = t
            self.read_gauges(t, gauges)
        sim.now = end

    def grow_all(self, grows, x, ends) -> bool:
        """make_grows at once, where it can be: each growth of a block either fits in what the pool
        has free or takes a block off its oldest cache entry (_room_for_block's common eviction),
        whole numbers throughout, and the growth gauges read kv's used or free alone; the pool's
        time average and theirs given their points at once (TimeAverage.rise). False, having done
        nothing, where it cannot."""
        kv = self.kv
        bl = kv.block
        used, cached, cap = kv.used, kv.cached, kv.cap
        t0 = ends[grows[x][0] - 2]
        avg = kv.used_avg
        if not (used.is_integer() and cached.is_integer() and cap.is_integer()) or avg.v != used \
                or not t0 > avg.last:
            return False
        for sign, g in self.pool_gauges:
            if sign is None or g.v != (used if sign > 0 else cap - used) or not t0 > g.last:
                return False
        free = cap - used - cached
        fits = int(free // bl)
        if fits < 0:
            return False
        evict = len(grows) - x - fits
        ents = kv.entries
        if evict > 0:
            if free != fits * bl:  # the first to evict would find the pool over by less than a block
                return False
            left = evict
            for e in ents:  # the oldest entries, alive, of whole blocks, hold them all
                u = e.units
                if not e.alive or u < bl or u % bl:
                    return False
                left -= int(u // bl)
                if left <= 0:
                    break
            else:
                return False
            # the evictions, a block at a time as _room_for_block takes them (whole numbers: exact)
            own = kv.own
            while evict:
                e = ents[0]
                k = min(evict, int(e.units // bl))
                e.units -= k * bl
                kv.cached -= k * bl
                kv.evicted += k
                evict -= k
                if e.units <= 1e-9:
                    e.alive = False
                    del ents[0]
                    if e.owner is not None and own.get(e.owner.cid) is e:
                        del own[e.owner.cid]
        # the holds' units and the pool's used, each instant's last value, and the pool's integral
        # at each (TimeAverage.rise's additions, in its order, summed here in the one loop)
        acc0, last0 = acc, last = avg.acc, avg.last
        v = avg.v
        times, vals, cum = [], [], []
        u = used
        for g in grows[x:]:
            g[3].units += bl
            u += bl
            t = ends[g[0] - 2]
            if t == last:  # another growth at this instant (the first's is after avg.last)
                vals[-1] = u
            else:
                acc = acc + v * (t - last)
                times.append(t)
                vals.append(u)
                cum.append(acc)
                last = t
            v = u
        kv.used = u
        if u > kv.max_used:
            kv.max_used = u
        avg.add_points(times, vals, cum)
        k = len(times)
        for sign, g in self.pool_gauges:
            if sign > 0 and g.acc == acc0 and g.last == last0 and len(avg.t) > k:
                g.follow(avg, k)  # the pool's own signal, from the same point: its integrals
            else:
                g.rise(times, vals if sign > 0 else [cap - x for x in vals])
        return True

    def read_gauges(self, now, gauges=None):
        """Sim._gauges (or, of the growth gauges, _growth_gauges) at the instant now. (At a growth's
        instant the general path reads them all and --dump's recorder where it records: what else
        they read, the holders and queues, is as the instant before left it, so neither changes.)"""
        c = self.sim.machine
        for f, avg in gauges or self.gauges:
            val = f(c)
            if val != avg.v:
                avg.set(now, val)
        if gauges is None and self.recorder is not None:
            self.recorder(now)

    def iteration_end(self):
        """Iterations._iteration_end (one iteration, or a stretch's last), then the sessions whose
        runs ended, in the batch's order, as settling runs them."""
        sim, eng = self.sim, self.eng
        now = sim.now
        rep = self.reps
        ends = self.ends
        if ends is not None:
            if self.grows:
                self.make_grows()
            # the gaps between its iterations' ends: each turn's ITL, and the busy time's change
            # points but the last (its first from the stretch's start, the busy time's last change)
            starts = [self.t_start]  # each iteration's start: the stretch's, then each end but the last
            starts += ends
            gaps = list(map(sub, ends, starts))
            eng.busy_avg.split_diffs(ends[:-1], gaps[:-1])
        eng.busy = False
        self.idle = now  # the busy time's fall, set as the next iteration starts (busy_from)
        self.t_end = INF
        itl = sim.c_itl
        batch, self.batch = self.batch, None
        done = []
        kc = self.co_k
        if kc:  # the cohort, the batch's head: a token each (rep each), its finishers written out first
            g = now - self.co_last
            ep = self.ep = self.ep + rep
            self.co_last = now
            fin = self.fin.pop(ep, None)
            if fin:
                fin.sort(key=_cn)
                co = self.co
                for r in fin:
                    self.co_out(r)
                    co.remove(r)
                    done.append(r)
        if ends is not None:
            # a stretch: every request's token at each iteration, the same gap for all (from the
            # stretch's start: each one's last token, or the prefill that ends there before a first)
            t0 = ends[0]
            itl.extend(starts if itl.warm is None else ends, gaps, kc + len(batch))
            if sim.itl_max:  # each turn's longest gap (--slo itl): every one of the stretch's is each one's
                x = max(gaps)
                for r in batch:
                    rec = r.sess.turn_rec
                    if x > rec.gap:
                        rec.gap = x
            for r in batch:
                r.left -= rep
                a = r.alloc
                a.pos += rep
                a.advanced = True
                rec = r.sess.turn_rec
                if rec.first is None:  # its first token at the first iteration's end (TTFT)
                    sim._decode_token(rec, rep, t0)
                else:
                    rec.ntok += rep
                rec.last = now
                if r.left <= 1e-9:
                    done.append(r)
        else:
            gv, gk = (g, kc) if kc and g else (None, 0)
            gmax = sim.itl_max
            for r in batch:
                n = r.served
                r.served = 0.0
                if not r.alive or n <= 0:
                    continue
                r.left -= n
                a = r.alloc
                a.pos += n
                a.advanced = True
                if r.mode == "decode":
                    rec = r.sess.turn_rec
                    if rec.first is not None:
                        rec.ntok += n
                        g = now - rec.last
                        rec.last = now
                        if g == gv:
                            gk += 1
                        elif g:
                            if gk:
                                itl.add(now, gv, gk)
                            gv, gk = g, 1
                        if gmax and g > rec.gap:
                            rec.gap = g
                    else:
                        sim._decode_token(rec, n)
                        rec.last = now
                        if rec.pf is not None and now != rec.pf:
                            if gk:
                                itl.add(now, gv, gk)
                            gv, gk = now - rec.pf, 1
                            if gmax and gv > rec.gap:
                                rec.gap = gv
                if r.left <= 1e-9:
                    done.append(r)
            if gk:
                itl.add(now, gv, gk)
        if done:
            reqs = eng.reqs
            if len(done) > 4:  # many at once: the list read once
                ds = {id(r) for r in done}
                reqs[:] = [x for x in reqs if id(x) not in ds]
            else:
                for r in done:
                    reqs.remove(r)
            warm = now >= sim.warmup
            for r in done:
                r.alive = False
                eng.completed += 1
                if warm:
                    eng.completed_after_warmup += 1
                if r.mode == "prefill":
                    sim._prefill_token(r.sess.turn_rec)
            # the sessions go on in the order they were woken
            for r in done:
                sess = r.sess
                sess.wait = None
                fr = sess.fr
                if r.mode == "prefill":
                    self.run(sess, fr, False)
                else:
                    self.answer(sess, fr)
        if self.co or len(eng.reqs) >= CO_MIN:  # (co_join's first test: none joins else)
            self.co_join(now, eng.iter_no)
        self.want = True

    # ---------------------------------------------------------------- the event loop
    def events(self, progress, hz):
        """Sim._events for this path: the arrivals and the engine's iterations, in time order (an
        arrival first at one instant: the iteration planned after both sees it either way), the
        gauges read at each instant's end."""
        sim = self.sim
        heap = sim.heap
        # the first arrival, as Sim._run scheduled it
        t0, _, _, _ = heap.pop()
        self.t_arr = t0
        self.t_end = INF
        self.want = False
        self.batch = None
        self.grows = None
        self.co = []          # the cohort (a prefix of eng.reqs)
        self.ep = 0           # its epochs: the iterations that served it
        self.co_last = 0.0    # the end of its last one
        self.co_s = 0         # the sum of its members' pos - e0 (an int: exact)
        self.co_n = 0         # members numbered as they join (their order in eng.reqs)
        self.co_k = 0         # the members the iteration in flight serves
        self.fin = {}         # epoch -> the members whose run ends as it is reached
        self.fin_heap = []    # those epochs
        self.gcal = {}        # epoch -> the members that grow a block as the iteration of that epoch starts
        self.hzp = math.nextafter(hz, INF) if hz < INF else INF
        self.idle = None      # the end of the last iteration, where the busy time's fall is not yet set
        eng = self.eng
        gauges = bool(self.gauges) or self.recorder is not None
        last_t = 0.0
        now = sim.now
        while True:
            t_arr, t_end = self.t_arr, self.t_end
            nxt = t_arr if t_arr < t_end else t_end
            if self.want and nxt > now:
                self.want = False
                if not eng.busy:
                    sim.cur_engine = eng
                    if self.steady() is None:
                        self.plan_iteration()
                    continue
            if gauges and nxt > now:
                self.read_gauges(now)
            if nxt > hz or nxt == INF:
                if nxt != INF:  # events left past the horizon: the run did not drain (Sim._run)
                    heap.append((nxt, 0, None, None))
                break
            now = sim.now = nxt
            if t_arr <= t_end:
                if self.grows:  # the stretch's growths are all before its last iteration's start
                    self.make_grows()
                self.arrive()
            else:
                self.iteration_end()
            if progress is not None and now - last_t > 0:
                progress(sim)
                last_t = now
        self.co_flush()  # the runs left as they stand
        if self.idle is not None:
            eng.busy_avg.set(self.idle, 0.0)
            self.idle = None
        eng.reqs = [r for r in eng.reqs if r.alive]



def _pool_sign(e, name):
    """1 where a gauge's expression is used(name), -1 where free(name), else None."""
    if e.k == "obs" and e.fn in ("used", "free") and e.of.name == name and e.of.index is None:
        return 1 if e.fn == "used" else -1
    return None


def _holders_of(e, slots, kv):
    """Where a gauge is holders() of this path's slot or KV pool, its value as a count of the
    pool's allocations: a session holds one of each at most here (one hold, held once at a time),
    so the sessions holding the pool are its allocations (Pool.holders counts them again at each
    change); else None."""
    if e.k == "obs" and e.fn == "holders" and e.of.index is None:
        for m in (slots, kv):
            if e.of.name == m.name:
                allocs = m.allocs
                return lambda c: float(len(allocs))
    return None


def _cn(r):
    return r.cn

