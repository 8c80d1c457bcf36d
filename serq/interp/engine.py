"""The step stage (*Engines*, *The iteration as a program*, *Engines on devices*): an engine runs
iterations; each serves the running requests their tokens, growing their holds block by block and
preempting when memory runs out, then admits the waiting; its tokens are applied when it ends."""
from __future__ import annotations

import heapq
import math
import os
from itertools import islice
from operator import sub

from serq.interp.compile import _DEPTH, _NoSource, _Source
from serq.interp.pools import Pool, round_up
from serq.interp.stats import BusyAverage
from serq.lang.lower.constants import FUNCS
from serq.link.exprs import const_value

_floor = FUNCS["floor"][2]  # keeps inf

INF = math.inf
BIG = 1 << 62  # no bound on a loop's iterations (the next event or the horizon ends it)
RUNNING = ("Nres", "Ndec", "Kvb", "Kvp")
_W = 2.0 ** 53  # float sums of whole numbers below it are exact in any grouping
_G = 2.0 ** 49  # a pool's used below it, a member's units a whole number of blocks grows by one block
_BL = 2.0 ** 30  # (round_up's 1e-12 slack is below 1/block then)
CO_MIN = 16     # a cohort forms where this many run at least (below, one at a time costs less)


class Req:
    """A run on the engine: `run E prefill|decode (w) [growing P]`."""
    __slots__ = ("sess", "mode", "work", "left", "alloc", "served", "alive", "seq", "it", "adm", "e0", "cn",
                 "u0", "g0")

    def __init__(self, sess, mode, work, alloc, seq):
        self.sess = sess
        self.mode = mode
        self.work = work
        self.left = work
        self.alloc = alloc      # the growing hold's allocation, or None
        self.served = 0.0       # the tokens the iteration being planned gives it
        self.alive = True
        self.seq = seq
        self.it = -1                                  # the iteration that served it last
        self.adm = getattr(sess, "eng_adm", 0)        # its session's admission: the running order
        self.cn = -1                                  # its number in the engine's cohort, -1 out of it
        self.u0 = None  # (enginepath.py: True once its numbers are checked whole, as a steady decode keeps them)
        self.g0 = None  # in a cohort's group: its alloc's units are u0 and a block more at each bl-th
        #                 epoch from g0 (_co_units), alloc.units only as last written out

    def cancel(self):
        if self.alive:
            self.alive = False
            eng = self.sess.sim.engine_of_req.get(id(self))
            if eng is not None:
                eng.drop(self)


class Engine:
    """One member of a step stage."""
    # slots (and a dict for any other): past 30 attributes an instance's dict is no longer
    # shared-key, and every read of one takes the slower lookup (EnginePath's too)
    __slots__ = ("sim", "decl", "name", "index", "label", "at", "reqs", "rc", "registers", "vars", "batch",
                 "batch_reqs", "budget", "admit_cap", "chunk", "granule", "planning", "at_start", "no_admit",
                 "stop_serving", "pending", "busy", "busy_avg", "iter_no", "iterations", "served_total",
                 "completed", "completed_after_warmup", "admitted", "adm_seq", "memory", "ends", "grows",
                 "first_end", "tail_start", "repeat", "co", "co_ep", "co_fin", "co_gq", "co_grow", "co_it",
                 "co_last", "co_n", "co_on", "co_pre", "co_s", "__dict__")

    def __init__(self, sim, decl, index):
        self.sim = sim
        self.decl = decl
        self.name = decl.name
        self.index = index
        self.label = decl.name if index is None else f"{decl.name}[{index}]"
        self.at = decl.at
        self.reqs: list[Req] = []      # the runs at the engine
        # running.count's sessions (*Engines*: those with a run here or holding on a pool it admits,
        # not on a lease), each with how many of those it has: kept as they change, not counted
        # again an iteration (Iterations._resident_ids counts them afresh)
        self.rc: dict = {}
        self.admitted: list = []       # pools whose queues it admits, in declaration order
        self.memory: list = []         # pools it is the memory of
        self.busy = False
        self.planning = False
        self.at_start = False
        self.budget = 0.0
        self.chunk = INF
        self.completed = 0
        self.completed_after_warmup = 0
        self.iterations = 0
        self.busy_avg = BusyAverage(sim.warmup)
        self.registers: dict = {}
        self.vars = {"Nres": 0.0, "Ndec": 0.0, "Kvb": 0.0, "Kvp": 0.0, "Preempted": 0.0, "Admitted": 0.0,
                     "Ntok": 0.0, "Npre": 0.0, "Attn": 0.0, "Queued": 0.0}
        self.batch = {"Ndec": 0.0, "Kvb": 0.0, "Kvp": 0.0}
        self.served_total = 0.0
        self.batch_reqs: list[Req] = []
        self.adm_seq = 0
        self.pending = False
        self.admit_cap = INF
        self.repeat = 1
        self.grows: list = []          # a fast-forward's block growths: (iteration start, request)
        self.iter_no = 0
        self.first_end = None          # a fast-forward's first iteration's end, where it commits a first token
        self.ends: list = []           # a fast-forward's iterations' ends, its first's first (_itl_run)
        self.tail_start = None         # a fast-forward's last iteration's start, where one that ends a run starts
        # the cohort (Iterations._co_*): the plain decoders at the head of reqs, advanced together;
        # each member's left, alloc.pos and turn record's ntok are as of its epoch e0, last as of co_last
        self.co: list[Req] = []
        self.co_on = None              # whether it may form (_co_ok: what decides it is set before the run)
        self.co_ep = 0                 # the cohort's advances so far
        self.co_last = 0.0             # the end of its last advance
        self.co_it = -1                # the iteration that serves it (iter_no), while planned or running
        self.co_s = 0                  # the sum of its members' pos - e0 (an int: exact)
        self.co_n = 0                  # members numbered in joining order (their order in reqs)
        self.co_grow: dict = {}        # epoch -> [(cn, member)] that grow as it is planned, each alone
        self.co_gq: dict = {}          # epoch -> {id(pool): (pool, {cn: member})}: members whose units
        #                                are whole blocks, each growing one block then (_co_place)
        self.co_fin: dict = {}         # epoch -> [(cn, member)] whose run ends with that advance
        self.co_pre = 0                # epochs of a fast-forward in flight whose growths are made (_unfold)

    def res_in(self, sid):
        rc = self.rc
        rc[sid] = rc.get(sid, 0) + 1

    def res_out(self, sid):
        rc = self.rc
        n = rc[sid] - 1
        if n:
            rc[sid] = n
        else:
            del rc[sid]

    # -- observables
    def queue_len(self):
        return float(len(self.reqs))

    def busy_now(self):
        return 1.0 if self.reqs else 0.0

    def work_left(self):
        if self.co:
            self.sim._co_flush(self)
        return sum(r.left for r in self.reqs)

    def budget_left(self):
        """The tokens the iteration being planned has left; read by an admission's header, what the
        admitted request can take now: the budget left, within the admission's `each at most`."""
        if self.planning:
            return min(self.budget, self.admit_cap)
        return self.sim.eval_budget(self)

    def utilisation(self, end):
        return self.busy_avg.mean_to(end)

    # -- the runs
    def add(self, req: Req):
        reqs = self.reqs
        if reqs and reqs[-1].adm > req.adm:  # kept in admission order (a decode after its prefill)
            if self.co:  # it may go among the cohort, which is the head of reqs
                self.sim._co_flush(self)
            i = len(reqs)
            while i and reqs[i - 1].adm > req.adm:
                i -= 1
            reqs.insert(i, req)
        else:
            reqs.append(req)
        self.res_in(req.sess.id)
        self.sim.engine_of_req[id(req)] = self
        if self.planning:
            self.sim.serve_now(self, req)
        else:
            self.sim.engine_wants(self)

    def drop(self, req: Req):
        if self.co:
            self.sim._co_flush(self)
        if req in self.reqs:
            self.reqs.remove(req)
            self.res_out(req.sess.id)
        if req in self.batch_reqs:
            self.budget += req.served
            req.served = 0.0
            self.batch_reqs.remove(req)
        self.sim.engine_of_req.pop(id(req), None)


class Iterations:
    """The iteration procedure, mixed into the simulator (it needs its sessions and pools)."""

    _steady_src = None  # while step_src writes _steady_cost's source: the locals it has named
    cohort = os.environ.get("SERQ_COHORT", "1") != "0"  # 0: every request one at a time (tests compare)
    # a fast-forward's iterations in one cost loop (_steady_once) and its growths in line
    # (_grow_steady); off: growth by growth, through the pool's calls (tests compare the two)
    steady_once = True
    grow_inline = True
    co_walk = True  # _steady reads the cohort from its calendars (_co_walk); off: each member written out
    # a fast-forward runs through the iteration an arrival falls in (_fold_bound); off: it stops before
    # that iteration, which is planned on its own (tests compare the two)
    fold = True
    _fold_static_ok = None  # _fold_static's answer, asked once

    # -- the cohort: the running requests that decode plainly, advanced as one (issue 49). Its members
    # are the head of eng.reqs, so the head of the batch; each is served a token an iteration, grows
    # a block at an epoch the calendars co_gq (by pool, a group's together) and co_grow (alone) keep
    # and ends at one co_fin keeps; every position and tokens left is whole below 2**53, so the sums
    # are exact. Whatever reads a member otherwise writes the cohort out first (_co_flush); its
    # pool's used is exact at every instant, and its alloc.units too but for a group's member,
    # whose units its group's epochs keep (_co_units), written out with the rest.
    def _co_ok(self, eng, spec):
        return self.cohort and spec["co"] and not self.itl_max and self.step_log is None \
            and self.recorder is None and not self.claims_iter.get(id(eng))

    def _co_flush(self, eng, served=None):
        """Write every member out and dissolve the cohort: each as of the last advance, and served
        this iteration where the cohort is (at the head of the batch, as one at a time has it); with
        `served`, only the first that many members are (_co_engage)."""
        co = eng.co
        if not co:
            return
        ep, last = eng.co_ep, eng.co_last
        done = _co_made(eng)
        for r in co:
            d = ep - r.e0
            if d:
                r.left -= d
                r.alloc.pos += d
                r.sess.turn_rec.ntok += float(d)
            r.sess.turn_rec.last = last
            r.cn = -1
            r.served = 0.0  # (_co_rebase's 1.0)
            if r.g0 is not None:
                r.alloc.units = _co_units(r, done)
                r.g0 = None
        if served is None and eng.co_it == eng.iter_no:
            served = len(co)
        if served:
            it = eng.iter_no
            for r in co[:served]:
                r.served = 1.0
                r.it = it
            eng.batch_reqs[0:0] = co[:served]
        eng.co_it = -1
        eng.co = []
        eng.co_grow = {}
        eng.co_gq = {}
        eng.co_fin = {}
        eng.co_s = 0

    def _co_rebase(self, eng):
        """Write every member out as of the last advance, keeping the cohort, each served a token as
        the iteration planned has it (_steady's walk reads them)."""
        ep, last = eng.co_ep, eng.co_last
        done = _co_made(eng)
        for r in eng.co:
            d = ep - r.e0
            if d:
                r.left -= d
                r.alloc.pos += d
                r.sess.turn_rec.ntok += float(d)
                r.e0 = ep
            r.sess.turn_rec.last = last
            r.served = 1.0
            if r.g0 is not None:  # written out, still grown by its group
                r.alloc.units = _co_units(r, done)

    def cohort_units(self) -> dict:
        """id(alloc) -> its units as they stand, for each cohort member whose group keeps them (its
        alloc.units is as last written out): what a check of the pools reads (tests)."""
        out = {}
        for e in self.engines:
            done = _co_made(e)
            for r in e.co:
                if r.g0 is not None:
                    out[id(r.alloc)] = _co_units(r, done)
        return out

    def _co_flush_all(self):
        for e in self.engines:
            if e.co:
                self._co_flush(e)

    def _co_engage(self, eng, budget) -> bool:
        """Serve the cohort this iteration (the head of the batch), its due blocks grown in its order,
        where the budget serves every member and the pool has room for each growth; else write it out
        (its members before a growth without room served, as they would be) and answer False."""
        co = eng.co
        k = len(co)
        ep = eng.co_ep
        tot = eng.co_s + k * ep  # the members' positions' sum
        if not (budget >= k and (budget == INF or (float(budget).is_integer() and budget < _W))) \
                or tot + k >= _W:
            self._co_flush(eng, 0)
            return False
        due = eng.co_grow.pop(ep, None)
        gq = eng.co_gq.pop(ep, None)
        if (due or gq) and not self._co_grow_all(eng, ep, due, gq):
            # one at a time in the cohort's order, as the requests would be
            items = [t for t in due if t[1].cn == t[0]] if due else []
            if gq:
                for _m, d in gq.values():
                    items.extend(d.items())
                    for r in d.values():  # written out as of the epoch before: each grows below, then placed anew
                        r.alloc.units = _co_units(r, ep - 1)
                        r.g0 = None
            items.sort()
            noted = None  # plain pools grown in place, their used noted once (the instant's last holds)
            ceil = math.ceil
            place = self._co_place
            for cn, r in items:
                a = r.alloc
                m = a.pool
                pos = a.pos + (ep - r.e0)
                bl = m.block
                need = ceil((pos + 1.0) / bl - 1e-12) * bl - a.units  # round_up's (bl whole, pos finite)
                if need > 0:
                    if type(m) is Pool and not m.reserve_held and m.used + need <= m.cap + 1e-9 and \
                            m.used + m.cached + need - m.cap <= 1e-9:
                        # room_for, make_room that evicts nothing and grow_alloc, in place
                        a.units += need
                        m.used += need
                        if noted is None:
                            noted = [m]
                        elif m not in noted:
                            noted.append(m)
                    else:
                        if noted:
                            for x in noted:
                                x._note()
                            noted = None
                        if not m.room_for(need - self._own_extra(a)):  # preempts: one at a time from r
                            i = co.index(r)
                            self._co_flush(eng, i)
                            eng.budget = budget - i
                            return False
                        m.make_room(need)
                        m.grow_alloc(a, need)
                place(eng, cn, r, a, pos, ep)
            if noted:
                for x in noted:
                    x._note()
        eng.co_it = eng.iter_no
        eng.budget = budget - k
        return True

    def _co_grow_all(self, eng, ep, due, gq) -> bool:
        """The growths due at epoch ep, where each of their pools is plain and has room for all of
        them and every amount is whole (then the order they go in cannot show, and one addition to
        used is the same float as one a member): a pool's used and _note once (the instant's last
        holds), a group's members a block each; where the cache must give room, a pool's growths
        all a block (only its groups'), each's eviction in turn (make_room reads used as the one
        before leaves it: it evicts what one at a time evicts); else False, nothing done."""
        tot = {}  # id(pool) -> [pool, the units it grows by, a member due alone grows it]
        ind = None
        if due:
            ceil = math.ceil
            ind = []
            for cn, r in due:
                if r.cn != cn:  # left the cohort since
                    continue
                a = r.alloc
                m = a.pool
                pos = a.pos + (ep - r.e0)
                bl = m.block
                need = ceil((pos + 1.0) / bl - 1e-12) * bl - a.units  # round_up's (bl whole, pos finite)
                ind.append((cn, r, a, pos, need))
                if need > 0:
                    t = tot.get(id(m))
                    if t is None:
                        tot[id(m)] = [m, need, True]
                    else:
                        t[1] += need
                        t[2] = True
        if gq:
            for pid, (m, d) in gq.items():
                if d:
                    t = tot.get(pid)
                    if t is None:
                        tot[pid] = [m, len(d) * m.block, False]
                    else:
                        t[1] += len(d) * m.block
        evict = None  # pools whose cache gives room
        sim = self
        for t in tot.values():
            m, need, alone = t
            u, c = float(m.used), float(m.cached)
            if not (type(m) is Pool and not m.reserve_held and u.is_integer() and u + need < _G
                    and u + need <= m.cap + 1e-9):
                return False
            if not (c.is_integer() and u + c + need < _W and u + c + need - m.cap <= 1e-9):
                if alone or m.name in sim.spill_specs or m.name in sim._evict_keys:
                    return False
                if evict is None:
                    evict = []
                evict.append(m)
        if evict:
            inline = self.grow_inline
            for m in evict:  # each growth's make_room as one at a time calls it (in place of grow_alloc)
                bl = m.block
                for _ in range(int(tot[id(m)][1] // bl)):
                    _room_for_block(m, bl, inline)
                    m.used += bl
                tot[id(m)][1] = 0.0
        if ind:
            place = self._co_place
            for cn, r, a, pos, need in ind:
                if need > 0:
                    a.units += need
                place(eng, cn, r, a, pos, ep)
        if gq:
            cal = eng.co_gq
            for pid, g in gq.items():
                m, d = g
                if not d:
                    continue
                # each member a block more: kept by its group's epochs (_co_units), not written
                _co_file(cal, ep + int(m.block), pid, g)  # each at its units again a block later
        for m, need, _ in tot.values():
            if need:
                m.used += need
            m._note()
        return True

    def _co_place(self, eng, cn, r, a, pos, ep):
        """Calendar a member's next growth (at the epoch its position reaches its units): with its
        units whole blocks, in its pool's group for that epoch, which grows a block each together."""
        e = int(a.units - pos) + ep
        m = a.pool
        bl = m.block
        u = a.units
        if bl < _BL and u < _G and u % bl == 0:
            r.u0, r.g0 = u, e
            gs = eng.co_gq.get(e)
            if gs is None:
                eng.co_gq[e] = {id(m): (m, {cn: r})}
            else:
                g = gs.get(id(m))
                if g is None:
                    gs[id(m)] = (m, {cn: r})
                else:
                    g[1][cn] = r
        else:
            eng.co_grow.setdefault(e, []).append((cn, r))

    def _co_ahead(self, eng, extra) -> bool:
        """A fast-forward of `extra` iterations after this one keeps the cohort (it advances by
        1 + extra epochs as the run ends, _iteration_end): the groups due within it move past it, as
        the run grows each of their members a block at each of those epochs (_steady's crossings,
        _grow_steady); False, nothing changed, where a member due alone is among them. The walk
        bounds the run so that no member ends before its last iteration."""
        ep = eng.co_ep
        hi = ep + extra
        gone = [e for e in eng.co_grow if ep < e <= hi]
        for e in gone:
            for cn, r in eng.co_grow[e]:
                if r.cn == cn:
                    return False
        for e in gone:  # only members that left: no epoch of the run pops them
            del eng.co_grow[e]
        cal = eng.co_gq
        for e in [e for e in cal if ep < e <= hi]:
            for pid, g in cal.pop(e).items():
                m, d = g
                if not d:
                    continue
                bl = int(m.block)
                _co_file(cal, e + ((hi - e) // bl + 1) * bl, pid, g)  # its first growth after the run
        return True

    def _co_join(self, eng, now):
        """The requests after the cohort in eng.reqs that this iteration served a plain decode token
        join it, while each does."""
        co = eng.co
        reqs = eng.reqs
        i, n = len(co), len(reqs)
        if i >= n:
            return
        it = eng.iter_no
        ep = eng.co_ep
        if not co:
            eng.co_last = now
        fin = eng.co_fin
        place = self._co_place
        while i < n:
            r = reqs[i]
            a = r.alloc
            if r.it != it or r.mode != "decode" or a is None or a.blks is not None or not r.alive:
                return
            sess = r.sess
            rec = sess.turn_rec
            if rec is None or rec.first is None or rec.last != now or sess.parent is not None or sess.live_legs:
                return
            left, pos, units, bl = r.left, a.pos, a.units, a.pool.block
            if not (0 <= pos < _W and float(pos).is_integer() and (left == INF or (
                    1 <= left < _W and float(left).is_integer())) and units < _W and float(units).is_integer()
                    and bl is not None and 0 < bl < _W and float(bl).is_integer()):
                return
            cn = eng.co_n
            eng.co_n = cn + 1
            r.cn = cn
            r.e0 = ep
            co.append(r)
            eng.co_s += int(pos) - ep
            if left != INF:
                fin.setdefault(int(left) + ep, []).append((cn, r))
            place(eng, cn, r, a, pos, ep)
            i += 1

    # -- building
    def _build_engines(self):
        prog = self.prog
        self.engines: list[Engine] = []
        self.engine_of_req: dict = {}
        self.cur_engine = None
        self.engine_specs = {}
        self.want: list = []
        for p in prog.stages:
            if p.kind.k != "step":
                continue
            ms = [Engine(self, p, i if p.count is not None else None) for i in range(p.count or 1)]
            self._members[p.name] = ms
            self.engines += ms
            self.stages += ms
        for m in self.pools:
            d = m.decl
            for attr, via in (("engine", d.admit_via), ("memory_of", d.memory)):
                if via is None:
                    continue
                engs = self._members[via]
                if d.count is not None and len(engs) == d.count:
                    e = engs[m.index]
                elif len(engs) == 1:
                    e = engs[0]
                else:
                    e = engs[m.index or 0]
                setattr(m, attr, e)
                (e.admitted if attr == "engine" else e.memory).append(m)

    def _compile_engines(self):
        x = self.compiler
        from serq.ir import model as I
        for p in self.prog.stages:
            if p.kind.k != "step":
                continue
            k = p.kind
            spec = {
                "budget": x.expr(k.budget),
                "chunk": x.expr(k.chunk),
                "granule": x.expr(k.granule) if k.granule is not None else None,
                "cost": x.expr(k.cost),
                "exclusive": k.serve.k == "exclusive_prefill",
                "keys": [x.expr(e) for e in k.serve.keys] if k.serve.k == "by" else [],
                "regs": [(r.name, x.expr(r.init)) for r in k.registers],
            }
            body = k.iteration
            if body is None:
                body = [I.IServe(), I.IAdmit(gate=I.Bin(op="==", l=I.StepVar(name="Preempted"), r=I.Num(v=0)))]
            spec["steady_cost"] = self._steady_cost(k.cost, spec["cost"])
            spec["body"] = [self._istmt(s) for s in body]
            spec["body_default"] = k.iteration is None and k.serve.k == "by"
            # the cohort serves in admission order: no serve with an order or an only
            spec["co"] = not spec["exclusive"] and not spec["keys"] and _plain_serves(spec["body"])
            self.engine_specs[p.name] = spec
            for e in self._members[p.name]:
                for n, f in spec["regs"]:
                    e.registers[n] = f(self.machine)

    def _steady_cost(self, e, full):
        """The execute expression as _steady reads it: (run, stored), each a function
        (c, eng, bk, vk, at, n, end, nxt, lim, fold) that runs at most lim steady iterations of
        engine eng in one loop, each adding n to batch.kv_decode (bk), running.kv_decode (vk) and
        the attention sum (at), the only values that change between them, and its cost to end; it
        stops before one whose cost is not in (0, inf) or whose end reaches nxt, but that one is
        run, the last, where it ends before `fold` (_fold_bound). It answers (iterations run, end,
        bk, vk, at, stopped), the three as the last cost read them; run.named are those of the
        three it adds to, the others come back as they went in (the caller adds them up).

        stored keeps the three in the engine's dicts and reads the expression as compiled, as one
        iteration at a time does. run, where it can be made (None otherwise), is the expression as
        source with the three as locals and what does not change between the iterations read once
        as the loop starts (_SteadySource): the same operations on the same values, so the same
        floats. A value it cannot read (an unset one: KeyError) raises _Miss, and the caller runs
        the iterations again with stored, which raises the diagnostic."""

        def stored(c, eng, bk, vk, at, n, end, nxt, lim, fold=-INF):
            b, v = eng.batch, eng.vars
            b["Kvb"], v["Kvb"], v["Attn"] = bk, vk, at
            app = eng.ends.append
            i = 0
            while i < lim:
                b["Kvb"] += n
                v["Kvb"] += n
                v["Attn"] += n
                nc = full(c)
                if not (0 < nc < INF) or end + nc >= nxt:
                    if 0 < nc < INF and end + nc < fold:  # the iteration the next event falls in: the last
                        end += nc
                        app(end)
                        return i + 1, end, b["Kvb"], v["Kvb"], v["Attn"], False
                    return i, end, b["Kvb"], v["Kvb"], v["Attn"], True
                end += nc
                app(end)
                i += 1
            return i, end, b["Kvb"], v["Kvb"], v["Attn"], False
        stored.named = ("_bk", "_vk", "_at")
        if _budget_read(e):  # budget_left() stores the residents' values: read as compiled
            return None, stored
        gen = _SteadySource(self.compiler)
        self._steady_src = named = set()
        try:
            gen.mark(e, True, 0)
            body = gen.src(e, 0)
        except _NoSource:
            return None, stored
        finally:
            self._steady_src = None
        env = gen.env
        env.update(_Miss=_Miss, INF=INF, NAN=math.nan)
        pre = "".join(f"        {n} = {src}\n" for n, src in gen.hoisted) or "        pass\n"
        adds = "".join(f"        {x} += n\n" for x in ("_bk", "_vk", "_at") if x in named)
        # n is a float (the batch's size), lim a whole number: the loop's operations are on floats
        # and on ints, each with its fast path; each iteration's end is kept (the client's ITL)
        # the constants and helpers bound as defaults: read as locals in the loop
        binds = "".join(f", {k}={k}" for k in env if k.isidentifier() and not k.startswith("__"))
        code = (f"def _run(c, eng, _bk, _vk, _at, n, end, nxt, lim, fold=-INF{binds}):\n"
                f"    try:\n"
                f"{pre}"
                f"    except KeyError:\n"
                f"        raise _Miss from None\n"
                f"    app = eng.ends.append\n"
                f"    for i in range(lim):\n"
                f"{adds}"
                f"        try:\n"
                f"            nc = {body}\n"
                f"        except KeyError:\n"
                f"            raise _Miss from None\n"
                f"        _e = end + nc\n"
                f"        if _e < nxt and nc > 0.0:  # (a cost of inf or NaN: _e is too, never below nxt)\n"
                f"            end = _e\n"
                f"            app(_e)\n"
                f"            continue\n"
                f"        if 0.0 < nc < INF and _e < fold:\n"
                f"            app(_e)\n"
                f"            return i + 1, _e, _bk, _vk, _at, False\n"
                f"        return i, end, _bk, _vk, _at, True\n"
                f"    return lim, end, _bk, _vk, _at, False\n")
        try:
            exec(compile(code, "<serq steady cost>", "exec"), env)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            return None, stored
        run = env["_run"]
        run.named = tuple(x for x in ("_bk", "_vk", "_at") if x in named)
        return run, stored

    def _istmt(self, s):
        x = self.compiler
        if s.k == "serve":
            return ("serve", x.expr(s.only) if s.only is not None else None,
                    [x.expr(k) for k in s.order.keys] if s.order is not None else None,
                    x.expr(s.chunk) if s.chunk is not None else None)
        if s.k == "admit":
            return ("admit", x.expr(s.only) if s.only is not None else None,
                    x.expr(s.gate) if s.gate is not None else None,
                    x.expr(s.chunk) if s.chunk is not None else None)
        if s.k == "branch":
            return ("branch", x.expr(s.cond), [self._istmt(t) for t in s.then], [self._istmt(t) for t in s.else_])
        return ("set", s.name, x.expr(s.e))

    # -- values
    def step_src(self, e, closure: str):
        """Python source that reads the step variable as step_var's closure (named `closure` in the
        generated function) does (serq/interp/compile.py, _Source)."""
        name, batch = e.name, e.batch
        if self._steady_src is not None and name in ("Kvb", "Attn"):  # _steady_cost's locals (never planning)
            local = "_bk" if batch and name == "Kvb" else "_vk" if name == "Kvb" else "_at"
            self._steady_src.add(local)
            return local
        if batch and name in ("Ndec", "Kvb", "Kvp"):
            return f"sim.cur_engine.batch[{name!r}]"
        if name in RUNNING and not batch:
            return (f"({closure}(c) if (sim.cur_engine.planning and not sim.cur_engine.at_start) "
                    f"else sim.cur_engine.vars[{name!r}])")
        if name in ("Ntok", "Npre"):
            return f"({closure}(c) if sim.cur_engine.planning else sim.cur_engine.vars[{name!r}])"
        return f"sim.cur_engine.vars[{name!r}]"

    def step_var(self, e):
        name, batch = e.name, e.batch
        sim = self
        if batch and name in ("Ndec", "Kvb", "Kvp"):
            return lambda c: sim.cur_engine.batch[name]
        if name in RUNNING and not batch:
            i = RUNNING.index(name)

            def live(c):
                # while an iteration is planned, a key, an only and a guard read the residents as
                # they stand at that read; an `each at most` as the iteration started (*The
                # iteration as a program*)
                eng = sim.cur_engine
                if eng.planning and not eng.at_start:
                    return sim._running(eng)[i]
                return eng.vars[name]
            return live
        if name in ("Ntok", "Npre"):
            prefill = name == "Npre"

            def so_far(c):
                # while an iteration is planned, what it has scheduled so far, which a schedule's
                # guard reads (*The iteration as a program*): summed when read, not kept per token
                eng = sim.cur_engine
                if eng.planning:
                    if eng.co:
                        sim._co_flush(eng)
                    return float(sum(r.served for r in eng.batch_reqs if not prefill or r.mode == "prefill"))
                return eng.vars[name]
            return so_far
        return lambda c: sim.cur_engine.vars[name]

    def register(self, e):
        ms = self._members[e.stage]
        name = e.name
        sim = self

        def f(c):
            eng = sim.cur_engine if sim.cur_engine is not None and sim.cur_engine.name == e.stage else ms[0]
            return eng.registers[name]
        return f

    def eval_budget(self, eng):
        self._values(eng)
        return self.engine_specs[eng.name]["budget"](self.machine)

    def _values(self, eng):
        """running.* and waiting.count as the residents stand."""
        self.cur_engine = eng
        v = eng.vars
        v["Nres"], v["Ndec"], v["Kvb"], v["Kvp"] = self._running(eng)
        q = 0
        for p in eng.admitted:
            q += len(p.queue)
        v["Queued"] = float(q)

    def _running(self, eng):
        """running.count, .decoding, .kv_decode and .kv_prefill as the residents stand."""
        ndec = 0
        kvb = kvp = 0.0
        reqs = eng.reqs
        rest = reqs
        k = len(eng.co)
        if k:  # the cohort's, decoders at the head of reqs
            tot = eng.co_s + k * eng.co_ep
            if tot < _W:
                ndec = k
                kvb = float(tot)
                rest = reqs[k:]  # (islice would step over the k members one by one)
            else:
                self._co_flush(eng)
        for r in rest:
            if not r.alive:
                continue
            a = r.alloc
            if r.mode == "decode":
                ndec += 1
                if a is not None:
                    kvb += a.pos
            elif a is not None:
                kvp += a.pos
        return float(len(eng.rc)), float(ndec), kvb, kvp  # the sessions, _resident_ids's, as kept (Engine.rc)

    # -- runs on an engine
    def engine_run_op(self, s, tgt, f, grow_t):
        sim = self
        mode = s.mode
        prefill = mode == "prefill"
        at = s.at

        def op(sess):
            work = sim.amount(f(sess), at, "a run's work")
            eng = tgt(sess)
            alloc = sim.innermost(sess, grow_t(sess), at, "growing") if grow_t is not None else None
            if work <= 0:
                return
            rec = sess.turn_rec
            if rec is not None:  # a turn that runs on an engine has prompt tokens, 0 or more
                if rec.prompt is None:
                    rec.prompt = 0.0
                if prefill:
                    for fr in sess.frames:
                        if fr.again:  # a hold executed again after a preemption: its prefill counted once
                            break
                    else:
                        rec.prompt += work
            sim.seq += 1
            req = Req(sess, mode, work, alloc, sim.seq)
            sess.wait = req
            eng.add(req)
            yield
        return op

    def engine_wants(self, eng):
        if not eng.pending:
            eng.pending = True
            self.want.append(eng)

    def serve_now(self, eng, req):
        """A request that reaches its run while its engine plans (it was just admitted): served at
        once, in the admission statement that admitted it."""
        eng.just_added.append(req)

    # -- the iteration
    def start_iterations(self):
        """Start an iteration on every idle engine that has work, once nothing else is pending now."""
        want, self.want = self.want, []
        for eng in want:
            eng.pending = False
        if len(want) > 1:  # each engine is in it once (pending)
            want = sorted(want, key=self.engines.index)
        for eng in want:
            if not eng.busy:
                self._iterate(eng)

    def _iterate(self, eng):
        spec = self.engine_specs[eng.name]
        c = self.machine
        steps = self.step_log  # Sim.step_log: an opt-in recorder of each iteration
        if steps is not None:
            steps.before(eng)
        if eng.co_on is None:
            eng.co_on = self._co_ok(eng, spec)
        self._values(eng)
        v = eng.vars
        v["Preempted"] = v["Admitted"] = v["Ntok"] = v["Npre"] = v["Attn"] = 0.0
        eng.batch = {"Ndec": 0.0, "Kvb": 0.0, "Kvp": 0.0}
        saved_regs = dict(eng.registers)
        budget = spec["budget"](c)
        if not budget >= 0:
            raise self.run_error("R110", f"engine `{eng.label}`'s tokens cap is {fmt(budget)}: a number >= 0",
                                 eng.at)
        chunk = spec["chunk"](c)
        eng.chunk = INF if chunk == 0 else chunk
        eng.granule = spec["granule"](c) if spec["granule"] is not None else None
        eng.budget = budget
        eng.batch_reqs = []
        eng.just_added = []
        eng.admit_cap = INF
        eng.planning = True
        eng.stop_serving = False
        eng.no_admit = False
        eng.iter_no += 1
        try:
            if spec["exclusive"]:
                self._exclusive(eng, spec, budget)
            else:
                self._body(eng, spec["body"], spec)
        finally:
            eng.planning = False
        if eng.co and eng.co_it != eng.iter_no:  # not served: written out as it stands
            self._co_flush(eng)
        k = len(eng.co)
        ntok, npre, ndec, kvb, kvp, attn = batch_sums(eng.batch_reqs, k, eng.co_s + k * eng.co_ep)
        if ntok <= 0 and v["Preempted"] == 0:
            # a try that schedules no token is no iteration unless it preempted (*Engines*): what it
            # admitted stays admitted, and its sets, which take effect with an iteration, are undone
            eng.registers = saved_regs
            return
        cost = self.batch_cost(eng, spec, ntok, npre, ndec, kvb, kvp, attn)
        if steps is not None:
            steps.planned(eng)
        self.iteration_claims(eng)
        eng.served_total += ntok
        eng.iterations += 1
        eng.busy = True
        eng.busy_avg.set(self.now, 1.0)
        eng.repeat = 1
        end = self.now + cost
        if self.fast_forward:
            end = self._steady(eng, spec, end)
        self.at(end, self._iteration_end, eng)

    def batch_cost(self, eng, spec, ntok, npre, ndec, kvb, kvp, attn):
        """The planned batch's values where the execute expression reads them, and its cost."""
        v = eng.vars
        v["Ntok"] = float(ntok)
        v["Npre"] = float(npre)
        b = eng.batch
        b["Ndec"] = float(ndec)
        b["Kvb"] = kvb
        b["Kvp"] = kvp
        v["Attn"] = attn
        # the residents as they stand: those the iteration admitted in, those it preempted out
        v["Nres"] = v["Nres"] + v["Admitted"] - v["Preempted"]
        cost = spec["cost"](self.machine)
        if not cost >= 0 or cost == INF:
            raise self.run_error("R111", f"engine `{eng.label}`'s execute is {fmt(cost)}: a finite time >= 0",
                                 eng.at)
        if ntok > 0 and cost <= 0:
            raise self.run_error("R112", f"an iteration of engine `{eng.label}` that schedules {fmt(ntok)} tokens "
                                 "lasts no time: its execute must be above 0", eng.at)
        return cost

    def _steady(self, eng, spec, end):
        """Steady decoding, fast-forwarded: while every request decodes one token an iteration, none
        grows a block it has no room for, none ends (but at the last of them), nothing waits and no
        event falls in between, the next iterations are this one again; they are run as one event,
        each costed with its own batch values. The result is the same as running them one by one
        (tests/test_workloads.py, tests/test_engine_steady.py compare)."""
        batch = eng.batch_reqs
        n = len(batch) + (len(eng.co) if eng.co_it == eng.iter_no else 0)  # the cohort heads the batch
        v = eng.vars
        if n == 0 or v["Admitted"] or n != len(eng.reqs) or v["Preempted"] or spec["body_default"] is False \
                or eng.granule or self.ready:
            return end
        heap = self.heap
        nxt = heap[0][0] if heap else INF
        if self.horizon is not None:
            nxt = min(nxt, self.horizon)
        if nxt <= end:  # an event before this iteration ends: no steady one can end first
            return end
        run = spec["steady_cost"][0]
        if run is not None and nxt < INF and self.cur_engine is eng:
            # the next iteration's cost first, as _steady_run would read it: one that ends at or
            # after the next event is not run, whatever the batch (the walk below is not needed;
            # nor a fast-forward of that iteration alone, folded: planned on its own, it costs less)
            b, v = eng.batch, eng.vars
            try:
                cnt = run(self.machine, eng, b["Kvb"], v["Kvb"], v["Attn"], float(n), end, nxt, 1)[0]
            except _Miss:
                cnt = 1
            if cnt == 0:
                return end
        watch = None  # the undecided claims over this engine's iterations that read a pool's use
        if self.claims_iter.get(id(eng)):
            watch = self._steady_claims(eng)
            if watch is False:
                return end
        for p in eng.admitted:
            if p.queue:
                return end
        co = eng.co
        k = k_left = k_room = None
        base = 0         # the batch order of the walk's first request
        groups = None    # the cohort's groups that grow in the run: (iteration, {cn: member})
        if co:  # served (else written out as planning ended): the head of the batch
            if eng.co_ep + 1 in eng.co_fin:  # a run ends with this iteration: the walk below finds k < 0
                return end
            groups = self._co_walk(eng) if self.co_walk else None
            if groups is None:
                self._co_rebase(eng)  # the walk reads every request; a fast-forward keeps the cohort (_co_ahead)
                batch = co + batch
            else:
                k, k_left, k_room, groups = groups
                if k < 0:
                    return end
                base = eng.co_n  # after every member's number (cn): the members' order is theirs
        first = False    # a request's first token is this iteration's
        whole = True     # every position and every run's tokens left whole: sums in any grouping exact
        crossings = []   # (the extra iteration whose start grows the hold a block, batch order, request)
        for j, r in enumerate(batch, base):
            a = r.alloc
            rec = r.sess.turn_rec
            if r.mode != "decode" or r.served != 1.0 or a is None or rec is None:
                return end
            if rec.first is None:
                first = True
            left = r.left
            if whole and not (float(a.pos).is_integer() and (float(left).is_integer() or left == INF)):
                whole = False
            # iterations after this one that leave the run one token at least, and, where its pool
            # cannot grow it here, that need no growth
            m = _floor(left) - 2  # inf for an infinite output: the horizon or the next event bounds it
            if k_left is None or m < k_left:
                k_left = m
            pool = a.pool
            ok = pool.ff_plain  # (the hot path: the method only the first time)
            if ok is None:
                ok = self._ff_plain(pool)
            if ok and not pool.queue and not pool.growers and a.blks is None and a.units % pool.block == 0 \
                    and a.pos == int(a.pos):
                crossings.append((int(a.units - a.pos), j, r))  # iteration i serves position pos + i
            else:
                room = _floor(a.units - a.pos) - 1
                m = min(room, m)
                if k_room is None or room < k_room:
                    k_room = room
            if k is None or m < k:
                k = m
                if k < 0:  # at most 0 with a tail's one: no steady iteration (the rest of the walk decides none)
                    return end
        # without these two, the iteration that commits a turn's first token and the one that ends
        # a run are events of their own, next to a fast-forward. Where the sums are exact in any
        # grouping, the fast-forward takes them in, their instants kept (_iteration_end): from
        # this iteration when it commits a first token, and to the one that ends a run when the
        # least tokens left bound it (not a hold's room)
        first = first and whole
        tail = whole and k_left < INF and (k_room is None or k_left < k_room)
        if tail:
            k += 1
        if k <= 0:
            return end
        if groups:  # the members that grow within the run, each by its number
            for i, d in groups:
                if i <= k:
                    crossings += [(i, cn, r) for cn, r in d.items()]
        heapq.heapify(crossings)
        if k == INF and nxt == INF:
            return end
        fold = self._fold_bound(nxt) if self.fold else -INF
        run, stored = spec["steady_cost"]
        if run is None or self.cur_engine is not eng:  # the source reads the engine it was given as cur_engine
            run = stored
        eng.ends = [end]
        try:
            out = self._steady_run(eng, run, list(crossings), k, n, end, nxt, tail, watch, fold)
        except _Miss:  # a value the source cannot read: the iterations again, as compiled
            eng.ends = [end]
            out = self._steady_run(eng, stored, crossings, k, n, end, nxt, tail, watch, fold)
        extra, end1, grows, tail_start = out
        if extra and end1 >= nxt:  # its last iteration runs past the arrival: its growths made then (_unfold)
            self.folded = eng
        if extra and eng.co and not self._co_ahead(eng, extra):
            self._co_flush(eng)  # its iterations' tokens applied one request at a time (_iteration_end)
        if extra:
            if first:  # recorded as this iteration ends (_iteration_end)
                eng.first_end = end
            eng.tail_start = tail_start
            end = end1
            eng.grows = grows
            eng.repeat = 1 + extra
            eng.iterations += extra
            eng.served_total += extra * n
        return end

    def _co_walk(self, eng):
        """_steady's walk over the cohort from its calendars, without reading each member: (k, its
        bound by tokens left, its bound by room, the groups that cross: [(iteration, {cn: member})]),
        as the walk over the members written out finds them; None where a member grows alone (the
        walk reads each then). A member's tokens left are its finish epoch less the cohort's, its
        crossing its group's epoch less the cohort's; every position and tokens left is whole."""
        ep = eng.co_ep
        if any(r.cn == cn for lst in eng.co_grow.values() for cn, r in lst):
            return None
        k_left, k_room = INF, None  # a member without end: INF (_floor(inf) - 2)
        fin = eng.co_fin
        if fin:
            for e in sorted(fin):
                if any(r.cn == cn for cn, r in fin[e]):
                    k_left = e - ep - 2  # _floor(left) - 2 of the member that ends first
                    break
        groups = []
        for e, gs in eng.co_gq.items():
            for m, d in gs.values():
                if not d:
                    continue
                if self._ff_plain(m) and not m.queue and not m.growers:
                    groups.append((e - ep, d))
                else:  # cannot grow in the run: bounded by its room
                    room = e - ep - 1
                    if k_room is None or room < k_room:
                        k_room = room
        k = k_left if k_room is None or k_left <= k_room else k_room
        return k, k_left, k_room, groups

    def _fold_bound(self, nxt) -> float:
        """The time before which a fast-forward may end an iteration the next event falls in, that
        iteration its last (_steady_cost's fold): where that event, at nxt, is an arrival and the
        program's arrivals read nothing the run leaves to its end (_fold_static), the next event
        after it or the horizon; else -inf. The arrival then finds the engine mid-iteration, as it
        would had that iteration been planned on its own, and the run's growths, which pools'
        readers see, made up to it (_unfold): the rest of the run (tokens, gaps, busy time) is
        read by nothing until its end. Every report is the same (tests/test_engine_steady.py)."""
        ok = self._fold_static_ok
        if ok is None:
            ok = self._fold_static_ok = self._fold_static()
        heap = self.heap
        if not ok or not heap or heap[0][0] != nxt or heap[0][2] != self._arrive_open:
            return -INF
        b = heap[1][0] if len(heap) > 1 else INF  # the second least of a heap is a child of the root
        if len(heap) > 2 and heap[2][0] < b:
            b = heap[2][0]
        hz = self.horizon
        return b if hz is None or b < hz else hz

    def _fold_static(self) -> bool:
        """Whether an arrival may fall inside a fast-forward (_fold_bound): one engine and no other
        stage, open arrivals drawn here, no claim, --dump or step log; every hold waits in a pool
        the engine admits (no other pool tries an admission at the arrival's instant); and what a
        session runs outside its holds' admissions reads no engine's work, budget, values or
        registers, which the run leaves as they stood at its start."""
        prog = self.prog
        wl = prog.workload
        if len(self.stages) != 1 or len(self.engines) != 1 or prog.claims or self.recorder is not None \
                or self.step_log is not None or self.trace is not None or self.workload is not None \
                or wl.arrive.k not in ("poisson", "renewal") or self.spill_specs:
            return False
        stack = [wl, *prog.server]
        while stack:
            x = stack.pop()
            k = getattr(x, "k", None)
            if k in ("step", "reg") or k == "obs" and x.fn in ("work", "budget_left"):
                return False
            if k == "hold":
                if x.lease is not None or any(m.engine is None for m in self.members(x.pools[0].pool.name)):
                    return False
                # the units, reserves and reuse are read at the admission, as the engine plans
                stack += [hp.pool for hp in x.pools]
                stack += [v for v in (x.body, x.cache, x.content) if v is not None]
                continue
            if isinstance(x, list):
                stack += x
            elif hasattr(type(x), "model_fields"):
                stack += [getattr(x, f) for f in type(x).model_fields if f not in ("k", "at")]
        return True

    def _unfold(self):
        """An arrival inside a fast-forward's last iteration (_fold_bound): the run's growths, each
        at its iteration's start, all before the arrival, made now, as they are where that
        iteration is planned on its own."""
        eng, self.folded = self.folded, None
        if eng.grows:
            self._grow_steady(eng)
        eng.co_pre = eng.repeat - 1  # a group's members' units count them from now (_co_units)

    def _ff_plain(self, pool) -> bool:
        """_pool_plain and spilling nothing: what never changes, asked once (Pool.ff_plain)."""
        ok = pool.ff_plain
        if ok is None:
            ok = pool.ff_plain = _pool_plain(pool) and pool.name not in self.spill_specs
        return ok

    def _steady_claims(self, eng):
        """The engine's undecided claims over iterations as a steady run reads them (*Claims*: read
        as each iteration starts): False where one reads a value the run changes (the clock,
        `served`, the KV positions, `work`, a register), so the iterations are run one at a time;
        else those that read a pool's used or free, which change at the run's growths only (read
        again there, _steady_run); the rest read at every one of its iterations what they read at
        its first (the batch, the residents, the queues, the holders, `arrived`, `demand`)."""
        watch = []
        for cl, f in self.claims_iter[id(eng)]:
            if self.claim_state[cl.name]["status"] != "not_evaluated":
                continue
            kind = self._steady_kind.get(cl.name)
            if kind is None:
                kind = self._steady_kind[cl.name] = _steady_reads(cl.e)
            if kind is False:
                return False
            if kind == "used":
                watch.append((cl, f))
        return watch

    def _steady_watch(self, watch, used, t):
        """The watched claims read at the steady iteration that starts at t, each growing pool's use
        as its growths then leave it."""
        saved = [(p, p.used) for p in used]
        try:
            for p, u in used.items():
                p.used = u
            self._read_claims(watch, t)
        finally:
            for p, u in saved:
                p.used = u

    def _steady_run(self, eng, run, crossings, k, n, end, nxt, tail=False, watch=None, fold=-INF):
        """_steady's iterations from the one after this one: (how many, their end, the growths
        they make at their starts, the start of the k-th when it is run and it is a tail, an event
        of its own one at a time); the batch's values in the engine's dicts as the last cost read
        them; the watched claims (_steady_claims) read at each iteration that grows a hold. It
        changes nothing else."""
        if not watch and self.steady_once:  # no claim reads a growth: the iterations in one loop, their growths after
            out = self._steady_once(eng, run, list(crossings), k, n, end, nxt, tail, fold)
            if out is not None:
                return out
            eng.ends = [end]  # a growth found no room: walked growth by growth below (no fold)
        b, v = eng.batch, eng.vars
        c = self.machine
        used = {}        # each growing pool's used as the growths so far leave it
        grows = []
        extra = adds = 0
        tail_start = None
        bk, vk, at = b["Kvb"], v["Kvb"], v["Attn"]
        head = crossings[0][0] if crossings else INF  # the next iteration that grows a hold
        pop, push = heapq.heappop, heapq.heappush
        fn = float(n)  # added to floats: the same sums as the int
        while extra < k:
            i = extra + 1
            mark = None
            if i == head:
                # the holds this iteration grows, at its start, in batch order, each by a block the
                # pool has room for (else the steady run ends here, and that iteration grows as one
                # of its own)
                mark, fits = len(grows), True
                while crossings and crossings[0][0] == i:
                    _, j, r = pop(crossings)
                    pool = r.alloc.pool
                    u = used.get(pool, pool.used)
                    bl = pool.block
                    # _engine_grow's room_for as it would find the pool then (cached blocks never
                    # block: make_room evicts them then, in the pool's order, _grow_steady)
                    if not u + bl <= pool.cap + 1e-9:
                        fits = False
                        break
                    used[pool] = u + bl
                    grows.append((end, r))  # at the start of iteration i, which is `end`
                    push(crossings, (i + int(bl), j, r))
                if not fits:
                    del grows[mark:]
                    break
                head = crossings[0][0] if crossings else INF
            # iteration i and those after it before the next growth (and a tail), in one loop
            bound = min(k, head - 1)
            start = None
            if tail:
                if i == k:
                    start = end  # the tail alone (bound is k)
                elif bound == k:
                    bound = k - 1
            lim = bound - extra
            t_i = end
            cnt, end, bk, vk, at, stopped = run(c, eng, bk, vk, at, fn, end, nxt, int(lim) if lim < INF else BIG)
            if cnt == 0 and mark is not None:
                del grows[mark:]  # iteration i is not run here: it grows as an iteration of its own
            elif mark is not None and watch:
                self._steady_watch(watch, used, t_i)  # iteration i, its growths made
            if cnt and start is not None:
                tail_start = start
            extra += cnt
            adds += cnt + stopped
            if stopped:
                break
        named = run.named
        # as the last iteration read them: those run did not add to, added up now
        b["Kvb"] = bk if "_bk" in named else _adv(bk, fn, adds)
        v["Kvb"] = vk if "_vk" in named else _adv(vk, fn, adds)
        v["Attn"] = at if "_at" in named else _adv(at, fn, adds)
        return extra, end, grows, tail_start

    def _steady_once(self, eng, run, crossings, k, n, end, nxt, tail, fold=-INF):
        """_steady_run's answer from one run of the cost loop: a growth changes nothing the cost
        reads, so the iterations are run to k (or the event, or through the iteration it falls in:
        fold) at once and their growths read off after, each at its iteration's start, in the
        walk's order; None where one finds no room (the walk then stops there: the caller walks
        instead)."""
        b, v = eng.batch, eng.vars
        fn = float(n)
        cnt, end1, bk, vk, at, stopped = run(self.machine, eng, b["Kvb"], v["Kvb"], v["Attn"], fn, end, nxt,
                                            int(k) if k < INF else BIG, fold)
        ends = eng.ends  # ends[i]: iteration i's end, the start of i + 1 (ends[0] this one's)
        used = {}
        grows = []
        pop, push = heapq.heappop, heapq.heappush
        while crossings and crossings[0][0] <= cnt:
            i, j, r = pop(crossings)
            pool = r.alloc.pool
            u = used.get(pool, pool.used)
            bl = pool.block
            if not u + bl <= pool.cap + 1e-9:
                return None
            used[pool] = u + bl
            grows.append((ends[i - 1], r))
            push(crossings, (i + int(bl), j, r))
        adds = cnt + stopped
        named = run.named
        b["Kvb"] = bk if "_bk" in named else _adv(bk, fn, adds)
        v["Kvb"] = vk if "_vk" in named else _adv(vk, fn, adds)
        v["Attn"] = at if "_at" in named else _adv(at, fn, adds)
        return cnt, end1, grows, (ends[int(k) - 1] if tail and cnt == k else None)

    def _body(self, eng, body, spec):
        c = self.machine
        for st in body:
            k = st[0]
            if k == "serve":
                self._serve(eng, st[1], st[2] if st[2] is not None else spec["keys"], st[3])
            elif k == "admit":
                gate = st[2]
                self._admit(eng, st[1], gate, st[3])
            elif k == "branch":
                g = st[1](c)
                if g not in (0.0, 1.0):
                    raise self.run_error("R006", f"a schedule's guard is 0 or 1, not {fmt(g)}", eng.at)
                self._body(eng, st[2] if g == 1.0 else st[3], spec)
            else:
                eng.registers[st[1]] = st[2](c)

    def _exclusive(self, eng, spec, full):
        """exclusive prefill: one prefill alone or a decode-only batch. A running prefill takes
        precedence; otherwise a waiting prefill that fits displaces the tentative decodes and takes the
        full budget, and once a prefill is selected nothing more is admitted (*Engines*)."""
        reqs = sorted((r for r in eng.reqs if r.alive), key=lambda r: getattr(r.sess, "eng_adm", 0))
        pre = [r for r in reqs if r.mode == "prefill"]
        if pre:
            self._give(eng, pre[0], eng.chunk)
            return
        for r in reqs:
            if eng.stop_serving:
                break
            self._give(eng, r, eng.chunk)
        if eng.vars["Preempted"] != 0 or eng.no_admit:
            return  # vLLM's gate: no admission in a step that preempted
        tentative = list(eng.batch_reqs)
        left = eng.budget
        eng.budget = full  # the waiting prefill's header sees the full budget
        eng.admit_cap = eng.chunk
        for m in eng.admitted:
            if not m.queue:
                continue
            added = self._admit_head(eng, m)
            if added is None:
                break
            new = [r for r in added if r.alive and r.mode == "prefill"]
            if new:
                for r in tentative:  # displaced: no token this iteration; each keeps what it holds
                    if r in eng.batch_reqs:
                        eng.batch_reqs.remove(r)
                        r.it = -1
                    r.served = 0.0
                eng.budget = full
                self._give(eng, new[0], eng.chunk)
                return
            break
        eng.budget = left

    def _chunk_of(self, eng, chunk_f):
        if chunk_f is None:
            return eng.chunk
        eng.at_start = True  # an `each at most` reads the residents as the iteration started
        try:
            v = chunk_f(self.machine)
        finally:
            eng.at_start = False
        return INF if v == 0 else v

    def _req_ctx(self, eng, req):
        x = self.machine.x
        x["decoding"] = 1.0 if req.mode == "decode" else 0.0
        x["admission"] = float(getattr(req.sess, "eng_adm", 0))
        x["remaining"] = req.left
        return self.machine

    def _serve(self, eng, only, keys, chunk_f):
        """advance running: the running requests not yet served, in the order, skipping those p excludes."""
        if eng.stop_serving:
            return
        cap = self._chunk_of(eng, chunk_f)
        it = eng.iter_no
        budget = eng.budget  # kept here, and in eng.budget wherever another reads it (only, _give)
        if eng.co:
            if eng.co_it != it:  # the cohort served first, or written out to be served one at a time
                if only is not None or keys or eng.batch_reqs or not self._co_engage(eng, budget):
                    self._co_flush(eng, 0)
            elif keys:  # served already: written out as such, skipped below
                self._co_flush(eng)
            budget = eng.budget
        if keys:
            reqs = [r for r in eng.reqs if r.alive and r.it != it]
            order = []
            for r in reqs:
                c = self._req_ctx(eng, r)
                order.append((tuple(f(c) for f in keys), getattr(r.sess, "eng_adm", 0), r))
            order.sort(key=lambda t: (t[0], t[1]))
            reqs = [t[2] for t in order]
        else:  # a copy (a grower's preemption drops from eng.reqs); the loop skips the dead and the served
            reqs = eng.reqs[len(eng.co):]  # a cohort left is served already
        give = self._give
        app = eng.batch_reqs.append
        for r in reqs:  # without keys, eng.reqs is in admission order already
            if not r.alive or r.it == it:
                continue
            if only is not None:
                eng.budget = budget
                if only(self._req_ctx(eng, r)) == 0:
                    continue
            # _give's common case in place: a decode's one token within its allocation, filling no
            # block the content cache publishes
            a = r.alloc
            if r.mode == "decode" and budget >= 1.0 and r.left >= 1.0 and a is not None and \
                    a.pos + 1.0 <= a.units and a.blks is None:
                r.served = 1.0
                budget -= 1.0
                app(r)
                r.it = it
            else:
                eng.budget = budget
                give(eng, r, cap)
                budget = eng.budget
                if eng.stop_serving:  # the grower preempted itself: the iteration serves no more
                    break
        eng.budget = budget

    def _tokens(self, eng, r, cap):
        if r.mode == "decode":
            return min(1.0, eng.budget, r.left)
        n = min(r.left, cap, eng.budget)
        g = eng.granule
        if g and n < r.left:
            n = math.floor(n / g) * g  # a multiple of the granule, short of the remainder
            if n <= 0:
                eng.no_admit = True  # such a prefill is passed over, and no one is admitted after it
        return n

    def _give(self, eng, r, cap) -> bool:
        if not r.alive:  # preempted earlier in this iteration: it holds nothing to grow
            return False
        if r.mode == "decode":
            n = 1.0 if eng.budget >= 1.0 and r.left >= 1.0 else min(1.0, eng.budget, r.left)
        else:
            n = self._tokens(eng, r, cap)
        if n <= 0:
            return False
        a = r.alloc
        if a is not None and a.pos + n > a.units:  # it grows, block by block, to the position it will reach
            need = round_up(a.pos + n, a.pool.block) - a.units
            if need > 0 and not self._engine_grow(eng, r, need):
                return False
        if not r.alive:
            return False
        if a is not None and a.blks is not None and a.pos + n >= (a.nhash + 1) * a.pool.block:
            a.pool.publish(a, a.pos + n)  # vLLM caches a block as the step that fills it is scheduled
        r.served = n
        eng.budget -= n
        eng.batch_reqs.append(r)
        r.it = eng.iter_no
        return True

    def _engine_grow(self, eng, r, need) -> bool:
        """The hold grows block by block to the position the run will reach, preempting if needed;
        a grower that preempts itself ends the iteration's serving."""
        a = r.alloc
        m = a.pool
        while not m.room_for(need - self._own_extra(a)):
            victim = self._engine_victim(m)
            if victim is None:
                return False
            vs = victim.frame.sess
            eng.vars["Preempted"] += 1
            self._preempt(victim.frame, m, victim)
            if vs is r.sess:
                eng.stop_serving = True
                return False
        m.make_room(need)
        m.grow_alloc(a, need)
        return True

    def _engine_victim(self, m):
        """The holders that are residents of the engine the pool is the memory of; the least keys,
        ties to the one admitted last (*Pools*)."""
        p = m.decl.preempt
        if p.k != "by":
            return None
        self._co_flush_all()  # the keys read positions and tokens left
        eng = m.memory_of
        resident = {r.sess.id: r for r in eng.reqs if r.alive} if eng is not None else {}
        cands = [x for x in m.allocs if not x.leased and not x.frame.done and
                 (eng is None or x.frame.sess.id in resident or x.frame.sess.id in self._resident_ids(eng))]
        if not cands:
            return None
        cands.sort(key=lambda x: getattr(x.frame.sess, "eng_adm", x.admission))
        keys = self._preempt_keys[m.name]
        best, bk = None, None
        for rank, x in enumerate(cands):
            c = x.frame.sess
            xd = c.xdict()
            rq = resident.get(c.id)
            xd["admission"] = float(rank)
            xd["position"] = x.pos
            xd["decoding"] = 1.0 if rq is not None and rq.mode == "decode" else 0.0
            xd["remaining"] = rq.left if rq is not None else 0.0
            k = tuple(f(c) for f in keys) + (-rank,)
            if bk is None or k < bk:
                best, bk = x, k
        return best

    def _resident_ids(self, eng):
        ids = {a.frame.sess.id for p in eng.admitted for a in p.allocs if not a.leased}
        ids.update(r.sess.id for r in eng.reqs)
        return ids

    def _admit(self, eng, only, gate, chunk_f):
        """admit waiting: the heads of the queues the engine admits, one at a time, each served at
        once, while budget is left, the head fits and the gate is 1."""
        if eng.no_admit:
            return
        cap = self._chunk_of(eng, chunk_f)
        c = self.machine
        eng.admit_cap = cap
        for m in eng.admitted:
            while m.queue:
                if eng.budget <= 0 or eng.no_admit:
                    return
                if gate is not None and gate(c) == 0:
                    return
                added = self._admit_head(eng, m)
                if added is None:
                    eng.no_admit = True  # the first head that does not fit stops the admissions
                    return
                for r in added:
                    if r.alive and (only is None or only(self._req_ctx(eng, r)) != 0):
                        self._give(eng, r, cap)

    def _admit_head(self, eng, m):
        """Admit the head of pool m's queue and run its session at once, until it blocks: the runs it
        brought to the engine, or None when the head does not fit."""
        fr = self._head(m)
        if not self._try_admit(fr, sync=True):
            return None
        eng.vars["Admitted"] += 1
        eng.adm_seq += 1
        fr.sess.eng_adm = eng.adm_seq
        eng.just_added = []
        fr.sess.wait = None
        self._step(fr.sess, None)
        self.cur_engine = eng
        added, eng.just_added = eng.just_added, []
        return added

    def _iteration_end(self, eng):
        """The iteration's tokens are applied when it ends."""
        fe = eng.first_end  # a fast-forward's first iteration ended there, and a first token with it
        eng.first_end = eng.tail_start = None
        if eng.repeat > 1:
            # one at a time, each iteration's end is an event of its own: the engine idles and starts
            # again then, a change point of its busy time; so at each of a fast-forwarded run's ends
            # but the last (now), in order, that the sums are the same to the last bit (a run's whole
            # time at once is another rounding: issue 48's defaults showed it, 1 ulp of utilisation)
            eng.busy_avg.split_all(eng.ends[:-1])
        if self.folded is eng:  # (its arrival, always before this end, cleared it: _unfold)
            self.folded = None
        eng.co_pre = 0
        if eng.grows:  # before anything at this instant: they are earlier
            self._grow_steady(eng)
        eng.busy = False
        eng.busy_avg.set(self.now, 0.0)  # a next iteration at this instant sets it again
        now = self.now
        done = []
        rep = eng.repeat  # a fast-forwarded run of steady iterations
        co = eng.co
        co_on = co and eng.co_it == eng.iter_no
        if rep > 1:  # its gaps, read before its first tokens are set; the cohort's the batch's head
            self._itl_run(eng, len(co), eng.ends[0] - eng.co_last) if co_on else self._itl_run(eng)
        itl = self.c_itl
        gmax = self.itl_max
        one = rep == 1
        gv, gk = None, 0  # one at a time, a run of equal gaps not yet recorded (ITL), one a request
        if co_on:
            # the cohort, the head of the batch: a token each (rep each in a fast-forward), one at a
            # time all with the same gap, one run of samples; those whose runs end now written out,
            # first in done as in the batch
            g = now - eng.co_last
            if g and one:
                gv, gk = g, len(co)
            ep = eng.co_ep = eng.co_ep + rep
            eng.co_last = now
            eng.co_it = -1
            fin = eng.co_fin.pop(ep, None)
            if fin:
                fin.sort()
                for cn, r in fin:
                    if r.cn != cn:
                        continue
                    a = r.alloc
                    if r.g0 is not None:
                        a.units = _co_units(r, ep - 1)
                        r.g0 = None
                    eng.co_s -= int(a.pos) - r.e0
                    d = ep - r.e0
                    r.left -= d
                    a.pos += d
                    rec = r.sess.turn_rec
                    rec.ntok += float(d)
                    rec.last = now
                    gs = eng.co_gq.get(ep + int(a.units - a.pos))  # out of its group (if in one)
                    if gs is not None:
                        g = gs.get(id(a.pool))
                        if g is not None:
                            g[1].pop(cn, None)
                    r.cn = -1
                    co.remove(r)
                    done.append(r)
        for r in eng.batch_reqs:
            n = r.served * rep
            r.served = 0.0
            if not r.alive or n <= 0:
                continue
            r.left -= n
            a = r.alloc
            if a is not None:
                a.pos += n
                a.advanced = True
                if a.blks is not None and a.pos >= (a.nhash + 1) * a.pool.block:
                    a.pool.publish(a, a.pos)
            if r.mode == "decode":
                rec = r.sess.turn_rec
                if rec is not None:
                    if rec.first is not None:
                        rec.ntok += n
                        if one:
                            g = now - rec.last
                            rec.last = now
                            if g == gv:
                                gk += 1
                            elif g:  # 0: a token of the turn (a leg's) came at this instant already
                                if gk:
                                    itl.add(now, gv, gk)
                                gv, gk = g, 1
                            if gmax and g > rec.gap:
                                rec.gap = g
                    else:
                        self._decode_token(rec, n, fe)
                        if one:
                            rec.last = now
                            if rec.pf is not None and now != rec.pf:  # the first token was the prefill's
                                if gk:
                                    itl.add(now, gv, gk)
                                gv, gk = now - rec.pf, 1
                                if gmax and gv > rec.gap:
                                    rec.gap = gv
            if r.left <= 1e-9:
                done.append(r)
        if gk:
            itl.add(now, gv, gk)
        eng.batch_reqs = []
        eng.co_it = -1
        reqs = eng.reqs
        if len(done) > 4:  # many at once (a batch's last iteration): the list read once, not once each
            ds = {id(r) for r in done}
            kept = []
            for x in reqs:
                if id(x) in ds:
                    eng.res_out(x.sess.id)
                else:
                    kept.append(x)
            reqs[:] = kept
        else:
            for r in done:
                try:
                    reqs.remove(r)  # one scan (in, then remove, read it twice)
                except ValueError:
                    pass
                else:
                    eng.res_out(r.sess.id)
        for r in done:
            r.alive = False
            self.engine_of_req.pop(id(r), None)
            eng.completed += 1
            if now >= self.warmup:
                eng.completed_after_warmup += 1
            rec = r.sess.turn_rec
            if r.mode == "prefill" and rec is not None:
                self._prefill_token(rec)
            if r.sess.wait is r:
                r.sess.wait = None
                self.wake(r.sess)
        if eng.co_on and (eng.co or len(eng.reqs) >= CO_MIN):
            self._co_join(eng, now)
        self.engine_wants(eng)

    def _grow_steady(self, eng):
        """The block growths of a fast-forwarded run, each at the start of its iteration as that
        iteration would have made it (the pool's used and its time average then), and the gauges
        read at each of those instants, as the run reads them after every instant. The result is
        the report a fast-forward that stops at each growth gives (tests/test_golden_reports.py)."""
        grows, eng.grows = eng.grows, []
        end = self.now
        if self.recorder is not None:  # --dump reads the queues with the gauges at every instant
            gauges = self._gauges if self.gauges else None
        else:
            gauges = self._growth_gauges if self.growth_gauges else None
        t = None
        keyed = self._evict_keys
        inline = self.grow_inline
        for t1, r in grows:
            if t1 != t:
                if gauges is not None and t is not None:
                    gauges()  # the instant before's
                t = self.now = t1   # (the engine's busy time has its change point there: _iteration_end)
            a = r.alloc
            pool = a.pool
            bl = pool.block
            if not inline:
                pool.make_room(bl)
                if r.g0 is None:
                    pool.grow_alloc(a, bl)
                else:  # a cohort group's member: its units kept by its epochs (_co_units)
                    pool.used += bl
                    pool._note()
                continue
            # make_room and grow_alloc of a plain pool (_pool_plain, no spill) in line: a growth is
            # the hot path of a long decode
            _room_for_block(pool, bl, pool.name not in keyed)
            if r.g0 is None:
                a.units += bl
            u = pool.used = pool.used + bl
            if u > pool.max_used:
                pool.max_used = u
            pool.used_avg.set(t, u)
        if gauges is not None and t is not None:
            gauges()
        self.now = end

    def _prefill_token(self, rec):
        """A prefill that ends samples a token (*What the client sees*): until a decode token is
        committed, the latest is the turn's first; every one is an output token. One after the
        first (a resumed prefill's) comes a gap after the turn's token before it (ITL)."""
        rec.ntok += 1
        if rec.first is None:
            rec.pf = self.now
        else:
            now = self.now
            g = now - rec.last
            rec.last = now
            if g:  # 0: a token of the turn came at this instant already, in the same chunk
                self.c_itl.add(now, g)
                if self.itl_max and g > rec.gap:
                    rec.gap = g

    def _itl_run(self, eng, nco=0, gco=None):
        """A fast-forwarded run's gaps (ITL), as its iterations one at a time record them: at the
        first one's end, each turn's from its token before (the prefill's when this one is its first,
        none without a prefill), in batch order; at each later one's end, that iteration's duration
        for each turn, the same for all: one run of samples (Weighted). A turn whose legs decode in
        the batch gets their tokens at one instant, one gap (report.md, *Throughput, ITL and goodput*)."""
        ends = eng.ends
        t0, t1 = ends[0], ends[-1]
        gaps = list(map(sub, islice(ends, 1, None), ends))
        itl = self.c_itl
        gmax = self.itl_max
        m = max(gaps) if gmax else None
        # the cohort's nco members first (the batch's head): each its last token at co_last, a gap gco
        turns = nco
        gv, gk = (gco, nco) if nco and gco else (None, 0)  # a run of equal gaps at t0 not yet recorded
        for r in eng.batch_reqs:
            rec = r.sess.turn_rec
            last = rec.last
            if last == t1:  # a leg's request after another of its turn: its tokens came with that one's
                continue
            turns += 1
            rec.last = t1
            if rec.first is not None:
                g = t0 - last
            elif rec.pf is not None:
                g = t0 - rec.pf
            else:  # no prefill: this iteration's token is the turn's first
                if gmax and m > rec.gap:
                    rec.gap = m
                continue
            if g == gv:
                gk += 1
            elif g:
                if gk:
                    itl.add(t0, gv, gk)
                gv, gk = g, 1
            if gmax:
                x = g if g > m else m
                if x > rec.gap:
                    rec.gap = x
        if gk:
            itl.add(t0, gv, gk)
        itl.extend(ends, gaps, turns)
        eng.ends = []

    def _decode_token(self, rec, n, t=None):
        """n tokens committed; the first of them at t (a fast-forward's first iteration's end), or
        now."""
        if t is None:
            t = self.now
        if rec.first is None:  # the first token: the last prefill's before this decode, or this one
            rec.first = rec.pf if rec.pf is not None else t
            self.client["ttft"].add(t, rec.first - rec.start)
        rec.ntok += n

    def iteration_claims(self, eng):
        """Claims over iterations, read as the iteration starts, after its batch is scheduled, where
        its cost is read (*Claims*)."""
        claims = self.claims_iter.get(id(eng))
        if not claims:
            return
        x = self.machine.x
        x["served"] = eng.served_total
        x["arrived"] = float(self.sessions_arrived)
        demand = 0.0
        for r in eng.reqs:
            if not r.alive or r.left <= 0:
                continue
            demand += 1.0 if r.mode == "decode" else min(r.left, eng.chunk)
        x["demand"] = demand
        self._read_claims(claims, self.now)

    def _read_claims(self, claims, t):
        """Each undecided claim read on the machine as it stands, at the iteration that starts at t."""
        c = self.machine
        for cl, f in claims:
            st = self.claim_state[cl.name]
            if st["status"] != "not_evaluated":
                continue  # failed, witnessed, or out of scope: checked no further
            ok = f(c) != 0
            if cl.form == "every" and not ok:
                st.update(status="failed", at=t)
            elif cl.form == "some" and ok:
                st.update(status="witnessed", at=t)


def batch_sums(batch, k, tot):
    """An iteration's batch.tokens, .prefilled, .decoding, .kv_decode, .kv_prefill and .attention in
    one pass, each added in batch order as sum() would (the same floats); a cohort of k members, the
    batch's head, from the sum tot of their positions (whole numbers: exact)."""
    npre = kvp = 0
    if k:
        ntok, kvb, attn, ndec = float(k), float(tot), float(tot + k), k
    else:
        ntok = kvb = attn = 0
        ndec = 0
    for r in batch:
        n = r.served
        ntok += n
        a = r.alloc
        pos = a.pos if a is not None else 0.0
        attn += n * (pos + n)
        if r.mode == "decode":
            ndec += 1
            if a is not None:
                kvb += pos
        else:
            npre += n
            if a is not None:
                kvp += pos
    return ntok, npre, ndec, kvb, kvp, attn


def _room_for_block(pool, bl, fast: bool):
    """A plain pool's make_room(bl) (no spill): with `fast`, its common eviction in line, one block
    off the oldest entry that holds one where `over` is exactly a block, as make_room makes it (the
    same operations on the same floats); any other through make_room."""
    over = pool.used + pool.cached + bl - pool.cap
    if over <= 1e-9:
        return
    ents = pool.entries
    e = ents[0] if ents and fast else None
    if over == bl and e is not None and e.alive and e.units >= bl:
        e.units -= bl
        pool.cached -= bl
        pool.evicted += 1
        if e.units <= 1e-9:
            e.alive = False
            del ents[0]
            if e.owner is not None and pool.own.get(e.owner.cid) is e:
                del pool.own[e.owner.cid]
    else:
        pool.make_room(bl)


def _co_made(eng) -> int:
    """The last epoch whose growths the cohort has made: its own once it is served (the iteration
    being planned or run, and those of a fast-forward in flight made ahead of its end: _unfold),
    else the one before."""
    return eng.co_ep + eng.co_pre if eng.co_it == eng.iter_no else eng.co_ep - 1


def _co_units(r, done: int) -> float:
    """A cohort group member's alloc units once its growths through epoch `done` are made: u0 and a
    block at each of g0, g0 + bl, ... (whole numbers below 2**53: the sum its growths one by one
    make)."""
    if done < r.g0:
        return r.u0
    bl = r.alloc.pool.block
    return r.u0 + bl * ((done - r.g0) // int(bl) + 1)


def _co_file(cal: dict, e: int, pid: int, g):
    """A pool's group of cohort members filed at epoch e, merged into one there already (the
    smaller into the larger: the order of a group's members never shows)."""
    gs = cal.get(e)
    if gs is None:
        cal[e] = {pid: g}
        return
    h = gs.get(pid)
    if h is None:
        gs[pid] = g
    elif len(h[1]) >= len(g[1]):
        h[1].update(g[1])
    else:
        g[1].update(h[1])
        gs[pid] = g


def _plain_serves(body) -> bool:
    """No serve statement of the iteration body has an order or an only."""
    for st in body:
        if st[0] == "serve" and (st[1] is not None or st[2]):
            return False
        if st[0] == "branch" and not (_plain_serves(st[2]) and _plain_serves(st[3])):
            return False
    return True


class _Miss(Exception):
    """The steady loop's source met a value it cannot read."""


def _adv(x, n, k):
    """x with n added k times, one addition at a time: at once where every partial sum is a whole
    number within 2**53 (each addition is exact then, and so is x + n * k)."""
    if k and float(x).is_integer() and float(n).is_integer() and abs(x) + abs(n) * k <= 2.0 ** 53:
        return x + n * k
    for _ in range(k):
        x += n
    return x


def _kids(e):
    k = e.k
    if k == "bin":
        return (e.l, e.r)
    if k in ("un", "cost"):
        return (e.e,)
    if k == "if":
        return (e.c, e.a, e.b)
    if k in ("fn", "draw"):
        return e.args
    if k == "obs" and e.of.index is not None:
        return (e.of.index,)
    return ()


def _nodes(e):
    todo = [e]
    while todo:
        x = todo.pop()
        yield x
        todo.extend(_kids(x))


def _budget_read(e) -> bool:
    return any(x.k == "obs" and x.fn == "budget_left" for x in _nodes(e))


def _varies(e) -> bool:
    """It reads a value a steady iteration changes: batch.kv_decode, running.kv_decode, the attention sum."""
    return any(x.k == "step" and x.name in ("Kvb", "Attn") for x in _nodes(e))


class _SteadySource(_Source):
    """The execute expression's source for _steady's loop (step_src names the three values that
    change as locals): a part that reads none of them, evaluated at every read (under no branch
    that may skip it), is read once before the loop into a local; min and max of two are written
    out as the comparisons constants._min and _max make, without the call."""

    def __init__(self, comp):
        super().__init__(comp)
        self.hoist: set = set()     # the ids of the parts read once
        self.hoisted: list = []     # (local, source), in the order the loop's reads would meet them

    def mark(self, e, every: bool, depth: int):
        if depth > _DEPTH:
            raise _NoSource()
        k = e.k
        if not _varies(e):
            v = const_value(e) if k in ("bin", "un", "if", "fn") else None
            if every and k not in ("num", "inf") and not (v is not None and v == v):  # constants are folded
                self.hoist.add(id(e))
            return
        if k == "bin":
            self.mark(e.l, every, depth + 1)
            self.mark(e.r, every and e.op not in ("&&", "||"), depth + 1)
        elif k == "if":
            self.mark(e.c, every, depth + 1)
            self.mark(e.a, False, depth + 1)
            self.mark(e.b, False, depth + 1)
        else:
            for x in _kids(e):
                self.mark(x, every and k in ("un", "fn", "cost"), depth + 1)

    def src(self, e, depth: int) -> str:
        if depth > _DEPTH or e.k == "draw":  # (a draw: each iteration's own, never read once or again)
            raise _NoSource()
        if id(e) in self.hoist:
            self.hoist.discard(id(e))  # its own source below is written in full
            s = self.src(e, depth)
            n = f"_h{len(self.hoisted)}"
            self.hoisted.append((n, s))
            return n
        return super().src(e, depth)


_STEADY_STEP = frozenset(("Nres", "Ndec", "Kvp", "Preempted", "Admitted", "Ntok", "Npre", "Queued"))


def _steady_reads(e):
    """How a claim reads the iterations of a steady run (_steady_claims): "used" where it reads a
    pool's used or free, which its growths change; True where it reads nothing they change; False
    otherwise."""
    kind = True
    for x in _nodes(e):
        k = x.k
        if k in ("num", "inf", "bin", "un", "if", "fn"):
            continue
        if k == "step" and x.name in _STEADY_STEP:
            continue
        if k == "ctx" and x.name in ("arrived", "demand"):
            continue
        if k == "obs" and x.fn in ("holders", "queued", "queue", "busy"):
            continue
        if k == "obs" and x.fn in ("used", "free"):
            kind = "used"
            continue
        return False
    return kind


def _pool_plain(pool) -> bool:
    """A pool on which a fast-forward may grow holds block by block, when nothing waits on it: a
    plain pool (no content cache, no held reservation) of whole blocks. The caller also asks that
    it spill nothing it evicts (a spill is a job, which would start then), that nothing wait on it,
    and that the hold have whole blocks and a whole position (each growth is then one block, a
    block's tokens apart). What it asks of the pool never changes (Pool.ff_plain keeps it)."""
    bl = pool.block
    return type(pool) is Pool and not pool.reserve_held and bool(bl) and bl < INF and bl == int(bl)


def fmt(v):
    from serq.lang.lower.constants import fmt as f
    return f(v)
