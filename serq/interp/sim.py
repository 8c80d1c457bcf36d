"""The interpreter: events and settling (*Events and settling*), the workload (*Workload*),
sessions, holds, growth and preemption (*Pools*), and the run's end (*A finite run*)."""
from __future__ import annotations

import gc
import heapq
import math
from collections import deque

from serq.interp.compile import Compiler, Ctx, RunError
from serq.interp.engine import Iterations
from serq.interp.enginepath import Unsupported
from serq.interp.enginepath import plan as engine_plan
from serq.interp.queueing import plan
from serq.interp.pools import ContentPool, Pool, round_up
from serq.interp.rng import LongStream, base, state1, stream, stream1
from serq.interp.sessions import (BLOCK, MAX_STEPS, Flat, HoldFrame, Ops, Preempted, Session, SessionEnd, TurnRec,
                                  run_block, run_sync, too_many)
from serq.interp.stages import PS, Fifo, FlowNet, FlowStage, MachineJob, Stage
from serq.interp.stats import Series, TimeAverage, Weighted, sum_of
from serq.interp.stats import PERCENTILES
from serq.interp.trace import load_trace
from serq.ir import model as I
from serq.lang.lower.constants import fmt
from serq.lang.lower.inputs import UsageError
from serq.link.exprs import const_value
from serq.link.rules import _exprs, expr_nodes, header_exprs, walk

INF = math.inf
MAX_READY = 1000
STALL = 100_000     # events at one instant before the watchdog looks (_stalled)
STALL_PER = 100
MAX_ARRIVALS = 10_000_000  # sessions a run takes: the report keeps each one's response (_bounded)
# what a caller may set on a simulator before its run (serq/api.py, the CLI, the tests): kept when a
# run is made again on the general path (Sim.run)
_USER = ("slo", "itl_max", "percentiles", "requests", "recorder", "step_log", "fast_forward", "queueing")


class Sim(Iterations):
    # slots for what the run reads and writes (a dict for the rest, Iterations': methods replaced by
    # tests, the engine path's events): 90-odd attributes are past the 30 of a shared-key dict,
    # where every read takes the slower lookup
    __slots__ = ("Session", "_evict_keys", "_made", "_members", "_preempt_keys", "_queue_keys",
                 "_steady_kind", "arrival_rng", "arrivals_n", "b_init", "b_session", "b_turn", "c_itl",
                 "c_response", "claim_state", "claims_end", "claims_given", "claims_iter", "client",
                 "closed", "compiler", "cur_at", "cur_engine", "end", "engine_of_req", "engine_specs",
                 "engines", "event_seq", "fast_forward", "flownet", "folded", "gauges", "good",
                 "growth_gauges", "heap", "horizon", "init_draws", "init_ops", "init_sync", "itl_max",
                 "joining", "live", "machine", "main_code", "max_arrivals", "next_id", "notes", "now", "obs",
                 "percentiles", "poisson", "pools", "prog", "queued", "queueing", "rate", "ready",
                 "recorder", "rel_seq", "requests", "running", "seed", "seq", "server_gen", "server_ops",
                 "sess_stream", "session_draws", "session_ops", "sessions_arrived", "sessions_completed",
                 "sessions_rejected", "slo", "spill_specs", "stages", "step_log", "streams", "stuck",
                 "tokens_cached", "tokens_in", "tokens_out", "trace", "trace_next", "trace_ordered",
                 "trace_rng", "turn_draws", "turn_ops", "turn_set", "want", "warmup", "workload")

    def __init__(self, prog: I.Program, settings: I.Settings | None = None, workload: dict | None = None):
        self.prog = prog
        # `serq run --workload`: each session's arrival time and draws (docs/reference/cli.md)
        self.workload = workload
        st = settings or prog.settings
        self.seed = st.seed
        self.horizon = st.horizon
        self.warmup = st.warmup
        self.arrivals_n = st.arrivals
        self.now = 0.0
        self.heap: list = []
        self.seq = 0
        self.event_seq = 0           # the sequence number of the event being handled
        self.ready: deque = deque()
        self.running = None
        self.cur_at = None
        self.rel_seq = 0
        self.streams: dict = {}      # content streams: stream -> (parent, at) or None (docs/reference/content.md)
        self.sess_stream: dict = {}  # session id -> the stream its latest hold with a content named
        self.compiler = Compiler(self)
        # sessions reach their Sim, and run the program's instructions (a leg has its own: fork)
        self.Session = type("Session", (Session,), {"__slots__": (), "sim": self, "code": None, "draws": False})
        self.machine = Ctx({}, LongStream(self.seed, "machine"), {}, None)
        self.sessions_arrived = 0
        self.sessions_completed = 0
        self.sessions_rejected = 0
        self.stuck: set = set()
        self.live = 0                # sessions arrived and not ended (legs apart)
        self.joining: dict = {}      # session id -> a session waiting at a join (the end's R044)
        self.next_id = 0
        self.obs: dict[str, Series] = {}        # warm-up included (claims at end read all of it)
        self.client = {"ttft": Series(self.warmup), "tpot": Series(self.warmup), "itl": Weighted(self.warmup),
                       "response": Series(self.warmup)}
        self.c_itl = self.client["itl"]
        # the answered turns' tokens after the warm-up (report.md, *Throughput, ITL and goodput*); `serq run --slo`:
        # each metric's least limit, and the turns that met them all; `--dump`: requests.csv's rows
        self.tokens_in = self.tokens_out = 0.0
        self.tokens_cached = 0.0   # the answered turns' prompt tokens a cache gave (vLLM's client counts them in)
        self.slo = None
        self.itl_max = False  # the turns keep their longest gap: --slo itl reads it
        self.good = 0
        self.queued = False   # it took queueing.py's path, where a turn keeps no record (report.py, goodput)
        self.requests = None
        self.notes: list[str] = []
        self.fast_forward = True  # steady decoding as one event (engine.py, _steady)
        self.folded = None  # the engine whose fast-forward an arrival falls in (engine.py, _fold_bound)
        self.queueing = True      # a network of queues takes queueing.py's path (tests turn it off)
        self._made = (settings, workload)  # what the run is made again from (run: off the engine path)
        self.c_response = self.client["response"]
        self.percentiles = PERCENTILES  # the summaries' (serq run --percentiles)
        self._build()
        k = prog.workload.arrive.k
        self.closed = k == "closed"
        self.poisson = k == "poisson"

    SLO = ("ttft", "tpot", "itl", "response")
    # a single engine's single-turn sessions take enginepath.py's path (off: the general one, which
    # the tests of its iterations observe; a run the engine path cannot finish turns it off)
    engine_path = True

    def set_slo(self, slo: dict):
        """`serq run --slo`: {metric: the least limit given for it} (report.md, *Throughput, ITL and goodput*)."""
        self.slo = tuple(slo.get(m) for m in self.SLO)
        self.itl_max = self.itl_max or "itl" in slo

    # ------------------------------------------------------------ building
    def run_error(self, code, msg, at):
        return self.compiler.error(code, msg, at)

    def machine_ctx(self, x=None):
        return Ctx({}, self.machine.rng, x or {}, None)

    def next_seq(self):
        self.seq += 1
        return self.seq

    def members(self, name):
        return self._members[name]

    def _build(self):
        prog = self.prog
        self._members: dict[str, list] = {}
        self.pools: list[Pool] = []
        for p in prog.pools:
            cap = const_value(p.cap)
            block = const_value(p.block) if p.block is not None else None
            kind = ContentPool if p.content else Pool
            ms = [kind(self, p, i if p.count is not None else None, cap, block) for i in range(p.count or 1)]
            self._members[p.name] = ms
            self.pools += ms
        flow_stages = self._flow_stage_names()
        self.flownet = FlowNet(self, prog.share or "maxmin") if flow_stages else None
        if self.flownet is not None:
            self.flownet.members = []
        self.stages = []
        for p in prog.stages:
            if p.kind.k == "step":
                continue
            ms = []
            for i in range(p.count or 1):
                idx = i if p.count is not None else None
                k = p.kind
                if p.name in flow_stages:
                    st = FlowStage(self, p.name, idx, const_value(k.phi), self.flownet)
                    self.flownet.members.append(st)
                elif k.k == "fifo":
                    st = Fifo(self, p.name, idx, const_value(k.servers))
                else:
                    delay = I.is_delay(k)
                    phi_c = const_value(k.phi)
                    st = PS(self, p.name, idx, None if delay else self.compiler.expr(k.phi), phi_c)
                st.at = p.at
                ms.append(st)
            self._members[p.name] = ms
            self.stages += ms
        self._build_engines()
        # pool orders
        self._evict_keys = {}
        self._queue_keys = {}
        self._preempt_keys = {}
        for p in prog.pools:
            if p.evict.k == "by":
                self._evict_keys[p.name] = [self.compiler.expr(k) for k in p.evict.keys]
            if p.queue.k == "by":
                self._queue_keys[p.name] = [self.compiler.expr(k) for k in p.queue.keys]
            if p.preempt.k == "by":
                self._preempt_keys[p.name] = [self.compiler.expr(k) for k in p.preempt.keys]
        ops = Ops(self)
        wl = prog.workload
        self.init_ops = ops.block(wl.init)
        self.turn_ops = ops.block(wl.turn)
        # streams are made only for blocks that draw (a stream costs a hash)
        self.init_draws = _draws(wl.init)
        self.turn_draws = _draws(wl.turn)
        self.init_sync = not any(g for g, _, _ in self.init_ops)
        self.session_ops = ops.block(wl.session) if wl.session is not None else None
        self.server_ops = Ops(self, "server").block(prog.server)
        self.session_draws = self.Session.draws = _draws(prog.server) or _draws(wl.session or [])
        self.b_init, self.b_turn, self.b_session = (base(self.seed, p) for p in ("init", "turn", "session"))
        # the server's statements as one generator function (a single blocking op is called directly)
        sops = self.server_ops
        if len(sops) == 1 and sops[0][0]:
            self.server_gen = sops[0][1]
        else:
            self.server_gen = lambda sess: run_block(sess, sops)
        self.gauges = [(g.name, self.compiler.expr(g.e), TimeAverage(self.warmup)) for g in prog.gauges]
        # those a fast-forward's growths can change (engine.py, _grow_steady): the others read only
        # what a growth leaves as it was, so their value at each of its instants is the one before
        self.growth_gauges = [(f, avg) for g, (_, f, avg) in zip(prog.gauges, self.gauges) if _growth_reads(g.e)]
        self.recorder = None  # `--dump`: read with the gauges at each instant's end (dump.Recorder)
        # opt-in, off (None) but in tools/vllm_oracle.py check --steps: told before each iteration is
        # planned (before), once one is (planned) and of each preemption (preempted); it runs with
        # fast_forward off, so that every iteration is planned as one
        self.step_log = None
        self.trace = load_trace(wl.trace.file, wl.arrive.k == "trace") if wl.trace is not None else None
        # `arrive trace;` replays trace session i as session i, at its arrival
        self.trace_ordered = wl.trace is not None and (wl.trace.ordered or wl.arrive.k == "trace")
        self.trace_rng = LongStream(self.seed, "trace")
        self.trace_next = 0
        self.claims_end = [(c, self.compiler.expr(c.e), self.compiler.expr(c.given) if c.given is not None else None)
                           for c in prog.claims if c.form == "end"]
        self.claims_given = [(c, self.compiler.expr(c.given)) for c in prog.claims if c.given is not None]
        self.main_code = self.Session.code = self._main_code(wl)
        self.claim_state = {c.name: {"status": "not_evaluated", "at": None, "session": None} for c in prog.claims}
        self._compile_engines()
        self.claims_iter = {}  # engine member -> [(claim, closure)]
        self._steady_kind = {}  # claim name -> how a steady run reads it (engine.py, _steady_reads)
        for c in prog.claims:
            if c.form in ("every", "some"):
                idx = int(const_value(c.stage.index)) if c.stage.index is not None else 0
                eng = self._members[c.stage.name][idx]
                self.claims_iter.setdefault(id(eng), []).append((c, self.compiler.expr(c.e)))
        self.spill_specs = {}
        for p in prog.pools:
            if p.spill is not None:
                sp = p.spill
                self.spill_specs[p.name] = (self.compiler.target(sp.pool, p.at), self.compiler.target(sp.via, p.at),
                                            self.compiler.expr(sp.amount), self.compiler.expr(sp.when))

    def _flow_stage_names(self):
        names = set()
        blocks = [self.prog.server, self.prog.workload.init, self.prog.workload.turn, self.prog.workload.session or []]
        for b in blocks:
            for s in walk(b):
                if s.k == "run" and len(s.stages) > 1:
                    names |= {t.name for t in s.stages}
        return names

    # ------------------------------------------------------------ observables
    def observable(self, fn, tgt, const=None):
        if const is not None:
            m = const
            if fn == "used":
                return lambda c: m.used
            if fn == "free":
                return lambda c: m.cap - m.used
            if fn in ("holders", "queued", "busy"):
                f = getattr(m, "busy_now" if fn == "busy" and hasattr(m, "busy_now") else fn)
                return lambda c: f()
            if fn == "queue":
                if isinstance(m, Stage):  # read at every instant's end by a gauge: one call, not two
                    return m.queue_of
                f = m.queue_len
                return lambda c: f()
        if fn == "used":
            return lambda c: tgt(c).used
        if fn == "free":
            return lambda c: (lambda m: m.cap - m.used)(tgt(c))
        if fn == "holders":
            return lambda c: tgt(c).holders()
        if fn == "queued":
            return lambda c: tgt(c).queued()
        if fn == "cachedin":
            return lambda c: tgt(c).cachedin(c.sess) if c.sess is not None else 0.0
        if fn == "queue":
            return lambda c: tgt(c).queue_len()
        if fn == "busy":
            return lambda c: (lambda s: s.busy_now() if hasattr(s, "busy_now") else s.busy())(tgt(c))
        if fn == "work":
            return lambda c: tgt(c).work_left()
        if fn == "budget_left":
            return lambda c: tgt(c).budget_left()
        if fn == "blocksize":  # the linker writes blocksize(P) as its number; an IR file may not
            return lambda c: tgt(c).block or 1.0
        raise ValueError(fn)

    def end_aggregate(self, fn, name):
        def values():
            if name in self.client:
                return self.client[name].v
            s = self.obs.get(name)
            return s.v if s is not None else []
        if fn == "total":
            return lambda c: sum_of(values())  # fsum, total beyond the float range
        if fn == "count":
            return lambda c: float(len(values()))
        if fn == "largest":
            return lambda c: max(values(), default=0.0)
        if fn == "smallest":
            return lambda c: min(values(), default=0.0)
        if fn == "prefix_total":
            def f(c):
                t = acc = 0.0
                for v in sorted(values()):
                    acc += v
                    t += acc
                return t
            return f
        raise ValueError(fn)

    # ------------------------------------------------------------ events
    def at(self, t, fn, arg=None):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg))

    def wake(self, sess, value=None):
        now = self.now
        if sess.ready_at == now:
            sess.ready_n += 1
            if sess.ready_n > MAX_READY:
                raise self.run_error("R021", f"a session became ready {MAX_READY:,} times at one instant", self.cur_at)
        else:
            sess.ready_at = now
            sess.ready_n = 1
        self.ready.append((sess, sess.epoch, value))

    def job_done(self, job):
        sess = job.sess
        if sess is not None and sess.wait is job:
            sess.wait = None
            self.wake(sess)
        elif sess is None and job.done_cb is not None:
            job.done_cb()

    def amount(self, v, at, what):
        if v != v or v < 0:
            raise self.run_error("R007", f"{what} is an amount, not negative and not NaN: this one is {fmt(v)}", at)
        return v

    def _step(self, sess, value):
        """Run one session now, until it blocks."""
        self._drain(deque(((sess, sess.epoch, value),)))

    def _drain(self, queue):
        """Run each session of the queue (and those it makes ready, when it is self.ready) in order,
        each until it blocks (Flat): the generator it waits in first, if any, then its instructions
        from where it stopped. What is thrown in is raised where the session stands."""
        pop = queue.popleft
        while queue:
            sess, epoch, value = pop()
            if epoch != sess.epoch or not sess.alive:
                continue
            self.running = sess
            sess.steps = 0
            try:
                sub = sess.sub
                if sub is not None:
                    try:
                        if value is None:
                            sub.send(None)
                        else:
                            sub.throw(value)
                        continue  # still waiting in it
                    except StopIteration:
                        sess.sub = None
                elif value is not None:
                    raise value
                code = sess.code
                pc = sess.pc
                while True:
                    f, at = code[pc]
                    if at is not None:  # a statement: counted as run_block counts it
                        sess.steps += 1
                        if sess.steps > MAX_STEPS:
                            raise too_many(sess, at)
                    r = f(sess)
                    if r is None:
                        pc += 1
                    elif r is BLOCK:
                        sess.pc = pc + 1
                        break
                    elif r.__class__ is int:
                        pc = r
                    elif r.__class__ is tuple:  # ONCE, or () (a run that did not block)
                        pc += 1
                        if r:
                            sess.pc = pc
                            break
                    else:  # a generator: run until it waits, and go on from the next instruction after it
                        pc += 1
                        try:
                            r.send(None)
                        except StopIteration:
                            continue
                        sess.sub = r
                        sess.pc = pc
                        break
            except SessionEnd as e:
                if sess.sub is not None:
                    sess.sub = None
                self._ended(sess, e.refused)
            finally:
                self.running = None

    def settle(self):
        """Run every ready session in the order it became ready, then retry growers and admissions
        at every pool not served by a stage, until nothing changes."""
        while True:
            if self.ready:
                self._drain(self.ready)
            if not (self.pools and self._retry_pools()):
                break

    def live_jobs(self, stage):
        """The jobs in service at a fifo stage (for work(S)): the events it scheduled."""
        return [arg for t, _, fn, arg in self.heap if getattr(fn, "__self__", None) is stage and arg.alive]

    def _retry_pools(self) -> bool:
        changed = False
        for m in self.pools:
            while m.growers:
                g = m.growers[0]
                sess, a, delta = g
                if a.pool.room_for(delta - self._own_extra(a)):
                    m.growers.pop(0)
                    m.make_room(delta)
                    m.grow_alloc(a, delta)
                    sess.wait = None
                    self.wake(sess)
                    changed = True
                else:
                    break
            if m.engine is not None:
                continue
            while m.queue:
                fr = self._head(m)
                if not self._try_admit(fr):
                    break
                changed = True
        return changed

    # ------------------------------------------------------------ the run
    def run(self, progress=None):
        """The report. `progress`, if given, is called with the run at each instant the clock moves
        to; one with a `start` method (serq run's watch, cli._Watch) is given the run first, and
        what `start` returns is called so instead (None: nothing is, and the loop costs nothing)."""
        start = getattr(progress, "start", None)
        if start is not None:
            progress = start(self)
        if self.requests is not None:   # requests.csv's itl_max: each turn's longest gap
            self.itl_max = True
        # a run allocates many short-lived objects and few cycles: collect the young generation
        # less often (restored after the run)
        old = gc.get_threshold()
        gc.set_threshold(max(old[0], 20000), old[1], old[2])
        gc.freeze()  # the program, its closures and the run's tables live as long as the run: skip them
        user = {k: getattr(self, k) for k in _USER}
        try:
            return self._run(progress)
        except Unsupported:
            pass
        finally:
            gc.unfreeze()
            gc.set_threshold(*old)
        # the engine path reached what it does not take (a preemption): the run made again, from the
        # start, on the general path, by this simulator made again in place (its closures read it).
        # What __init__ does not set is set again by the run before it is read.
        recorder = self.recorder is not None
        prog, made = self.prog, self._made
        self.__dict__.clear()
        Sim.__init__(self, prog, *made)
        for k, v in user.items():
            setattr(self, k, v)
        if recorder:  # --dump's, made again: it reads this simulator's stages and pools
            from serq.interp.dump import Recorder, Requests
            self.recorder, self.requests = Recorder(self), Requests()
        self.engine_path = False
        return self.run(progress)

    def _run(self, progress=None):
        wl = self.prog.workload
        arr = wl.arrive
        self.max_arrivals = MAX_ARRIVALS  # read at the run (a test lowers it)
        self.arrival_rng = LongStream(self.seed, "arrival")
        if self.workload is not None:
            self._replay_arrivals(arr)
        else:
            self._bounded(arr)
            if arr.k == "poisson":
                self.rate = const_value(arr.rate)
            elif arr.k == "renewal":
                self.gap_f = self.compiler.expr(arr.gap)
            q = plan(self) if self.queueing else None
            if q is not None:  # a network of queues: the shorter path (queueing.py)
                q.install()
                self.queued = True
            elif self.engine_path:  # a single engine's single-turn sessions (enginepath.py)
                ep = engine_plan(self)
                if ep is not None:
                    ep.install()
            if arr.k == "poisson":
                self.at(0.0, self._arrive_open)
            elif arr.k == "renewal":
                self.at(self._gap(), self._arrive_open)
            elif arr.k == "trace":
                self.at(self.trace[0][0]["arrival"], self._arrive_traced)
            elif arr.k in ("closed", "batch") and arr.n:
                # the n arrivals at 0 take the sequence numbers n events scheduled at once would
                # (before anything scheduled later), one event at a time: the same order, without
                # n events held at once (a million sessions, issue 12)
                self.start_seq, self.started = self.seq + 1, 0
                self.seq += arr.n
                heapq.heappush(self.heap, (0.0, self.start_seq, self._arrive_start, None))
        horizon = self.horizon if self.horizon != INF else None  # an infinite one ends nothing
        hz = horizon if horizon is not None else INF
        heap = self.heap
        self._events(progress, hz)
        self._co_flush_all()  # the runs left as they stand
        if not heap and self.live:
            # nothing will ever happen again: a session at a join whose legs wait on what it holds
            # (the first to arrive: ids grow with arrivals)
            for sess in sorted(self.joining.values(), key=lambda s: s.id):
                if sess.wait == "join":
                    raise self.run_error("R044", "the run ends with this session waiting at a join for legs that "
                                         "wait for what it holds (a hold-and-wait cycle; a finite lease breaks it)",
                                         sess.fork_at)
        drained = not heap and not self.live
        self.end = self.now if (horizon is None or drained) else horizon
        if horizon is not None and not drained:
            self.now = horizon
        if self.arrivals_n is not None:
            where = self.compiler.span(self.prog.workload.arrive.at)
            if not drained:  # without a horizon: nothing was left to happen, and sessions were
                by = (f"by the horizon {fmt(horizon)}" if horizon is not None else
                      f"({self.live} still live when nothing was left to happen)")
                raise RunError("R032", f"--arrivals {self.arrivals_n}: the sessions did not drain {by}", where)
            if self.end <= self.warmup:
                raise RunError("R033", f"--arrivals {self.arrivals_n}: the run drained at {fmt(self.end)}, at or "
                               f"before the warm-up {fmt(self.warmup)}", where)
        self._gauges()
        self._claims_at_end()
        from serq.interp.report import build
        return build(self)

    def _events(self, progress, hz):
        """Handle the events in order up to the horizon, settling after each (*Events and settling*)."""
        heap = self.heap
        ready = self.ready
        pools = bool(self.pools)
        gauges = bool(self.gauges) or self.recorder is not None
        pop = heapq.heappop
        last_t = 0.0
        now = self.now
        stall_t, stall, stall_at = None, 0, STALL  # the instant, its events, when the watchdog looks
        while True:
            if ready or pools:
                self.settle()
            if self.want and (not heap or heap[0][0] > self.now):
                # a scheduler step sees every arrival up to it: engines start once nothing else is pending
                self.start_iterations()
                continue
            if gauges and (not heap or heap[0][0] > self.now):
                self._gauges()
            if not heap or heap[0][0] > hz:
                break
            t, self.event_seq, fn, arg = pop(heap)
            if t != now:
                now = self.now = t
            else:  # the watchdog: a counter, kept only while the clock stands still
                if stall_t != now:
                    stall_t, stall, stall_at = now, 0, STALL
                stall += 1
                if stall > stall_at:
                    stall_at = self._stalled(fn, arg, stall)
            if arg is not None:
                fn(arg)
            else:
                fn()
            if progress is not None and t - last_t > 0:
                progress(self)
                last_t = t

    def _bounded(self, arr):
        """A run that could not finish is refused before it starts (*A finite run*): an open or
        closed workload needs a finite horizon (or, open, --arrivals N), and a run takes at most
        MAX_ARRIVALS sessions, counted or, under a constant rate, expected by the horizon."""
        hz, n = self.horizon, self.arrivals_n
        finite = hz is not None and hz < INF
        if not finite and n is None and arr.k in ("poisson", "renewal"):
            raise UsageError("an open workload runs until a finite --horizon T or for --arrivals N: give one")
        if n is not None and arr.k not in ("poisson", "renewal", "trace"):
            raise UsageError(f"--arrivals N counts open arrivals (poisson, renewal or a trace's); this workload is "
                             f"{arr.k}")
        if arr.k == "trace" and n is None and len(self.trace) > MAX_ARRIVALS:
            raise UsageError(f"the trace has {len(self.trace):,} sessions; a run takes at most {MAX_ARRIVALS:,}: give "
                             "--arrivals N (the first N) or a shorter trace (serq import --limit)")
        if arr.k == "closed" and not finite:
            raise UsageError("a closed workload's population never ends: give a finite --horizon T")
        if n is not None and n > MAX_ARRIVALS:
            raise UsageError(f"--arrivals is at most {MAX_ARRIVALS:,}, not {n:,} (the report keeps every response)")
        rate = const_value(arr.rate) if arr.k == "poisson" else None
        if arr.k == "renewal":
            gap = const_value(arr.gap)
            rate = 1 / gap if gap else None
        if n is None and rate is not None and rate * hz > MAX_ARRIVALS:
            many = rate * hz
            raise UsageError(f"--horizon {fmt(hz)} at {fmt(rate)} arrivals a unit of time expects "
                             + (f"{many:.3g} sessions" if many < INF else "too many sessions to count")
                             + f"; a run takes at most {MAX_ARRIVALS:,}: give a shorter --horizon or --arrivals N")

    def _stalled(self, fn, arg, n):
        """The clock has not moved for n events: many events at one instant may be a batch's sessions
        (or legs) at work, so each one started allows STALL_PER more; past that, the run is stuck,
        and the event that tripped names where."""
        allowed = STALL + STALL_PER * self.next_id  # sessions and legs started
        if n <= allowed:
            return allowed
        owner = getattr(fn, "__self__", None)
        what, at = "the run's events", None
        if isinstance(owner, FlowNet):
            due = [f for f in owner.flows if f.tag <= self.now] or owner.flows
            names = sorted({st.label for f in due for st in f.stages})
            what = "the flows over " + ", ".join(f"`{x}`" for x in names)
            at = due[0].stages[0].at if due else None
        elif owner is not None and hasattr(owner, "label"):
            what, at = f"stage `{owner.label}`", owner.at
        elif fn == self._lease_expired:
            what, at = f"the leases on pool `{arg[0].pool.label}`", arg[0].pool.decl.at
        elif getattr(fn, "__name__", "") == "_iteration_end":
            what, at = f"engine `{arg.label}`'s iterations", arg.at
        elif fn in (self._arrive_open, self._arrive_start):
            what, at = "the arrivals", self.prog.workload.arrive.at
        raise self.run_error("R022", f"the clock has stood at {fmt(self.now)} for {n:,} events, scheduled by "
                             f"{what}, which do not advance it", at)

    def _gap(self):
        v = self.gap_f(Ctx({}, self.arrival_rng, {}, None))
        t = self.now + v
        if not (0 < v < INF) or t == self.now:
            raise self.run_error("R034", f"a renewal gap must be positive and finite, not {fmt(v)}: the run stops"
                                 if t != self.now or v <= 0 else f"a renewal gap of {fmt(v)} does not advance the "
                                 f"clock at {fmt(self.now)}: the run stops", self.prog.workload.arrive.at)
        return t

    def _replay_arrivals(self, arr):
        """The workload's sessions arrive at its times: all scheduled at the start under `batch`,
        each when the one before it arrives otherwise, as the program's law schedules them."""
        times = [float(s["arrival"]) for s in self.workload["sessions"]]
        if arr.k == "batch":
            for t in times:
                self.at(t, self._arrive_replayed)
        elif arr.k == "closed":  # its population at 0; each later session when one ends (_finish)
            for _ in times[:arr.n]:
                self.at(0.0, self._arrive_replayed)
        elif times:
            self.at(times[0], self._arrive_replayed)

    def _arrive_replayed(self):
        k = self.sessions_arrived
        sessions = self.workload["sessions"]
        if k >= len(sessions):   # closed: its sessions all in (one refused at 0 brought the next early)
            return
        self._arrive_one().replay = list(sessions[k]["draws"])
        if self.prog.workload.arrive.k not in ("batch", "closed") and k + 1 < len(sessions):
            self.at(float(sessions[k + 1]["arrival"]), self._arrive_replayed)

    def too_many_arrivals(self):
        raise RunError("R036", f"a run takes at most {MAX_ARRIVALS:,} sessions (the report keeps every "
                       f"response), and this one reached that at {fmt(self.now)}: give a shorter --horizon",
                       self.compiler.span(self.prog.workload.arrive.at))

    def _arrive_open(self):
        if self.folded is not None:  # in a fast-forward's last iteration: its growths made first
            self._unfold()
        if self.sessions_arrived >= self.max_arrivals:  # a drawn gap's count is known only as they come
            self.too_many_arrivals()
        self._arrive_one()
        if self.arrivals_n is not None and self.sessions_arrived >= self.arrivals_n:
            return
        if self.poisson:
            self.at(self.now + self.arrival_rng.expovariate(self.rate), self._arrive_open)
        else:
            self.at(self._gap(), self._arrive_open)

    def _arrive_traced(self):
        """`arrive trace;`: the next trace session, at its arrival; the next one scheduled (--arrivals
        N: the first N)."""
        self._arrive_one()
        k = self.sessions_arrived
        if k < len(self.trace) and (self.arrivals_n is None or k < self.arrivals_n):
            self.at(self.trace[k][0]["arrival"], self._arrive_traced)

    def _arrive_start(self):
        """The next of a closed or batch workload's sessions at 0 (_run)."""
        self.started += 1
        if self.started < self.prog.workload.arrive.n:
            heapq.heappush(self.heap, (0.0, self.start_seq + self.started, self._arrive_start, None))
        self._arrive_one()

    def _arrive_one(self):
        serial = self.sessions_arrived
        self.sessions_arrived += 1
        self.next_id += 1
        attrs = {"serial": float(serial), "turn_no": 0.0, "cached": 0.0, "computed": 0.0}  # turn_no 0: the first
        sess = self.Session(serial, serial, attrs)  # a session's id is its serial; a leg's is negative
        if self.session_draws:
            sess.s = state1(self.b_session, serial)
            sess.rng = sess
        if self.trace is not None:
            n = len(self.trace)
            if self.trace_ordered:
                sess.trace = [self.trace[serial % n], 0]
            else:
                sess.trace = [self.trace[int(self.trace_rng.random() * n)], 0]
        self.live += 1
        self.wake(sess)
        return sess

    def _main_code(self, wl):
        """A session's instructions (Flat): init, the given claims, then the session block, or one
        turn (its trace row first, with a trace)."""
        flat = Flat(self)
        code: list = []
        if self.init_ops:
            code.append((self._init_begin, None))
            if self.init_sync:
                code.append((self._init_sync, None))
            else:
                flat.block(code, wl.init, "session")
            code.append((self._init_end, None))
        if self.claims_given:
            code.append((self._given, None))
        if wl.session is not None:
            flat.block(code, wl.session, "session")
        else:
            if self.trace is not None:
                code.append((lambda sess: self.turn_begin(sess, None), None))
            flat.turn_rest(code, last=True)
            return code
        code.append((self._main_done, None))
        return code

    def _init_begin(self, sess):
        sess.rng = stream1(self.b_init, sess.serial) if self.init_draws else None

    def _init_sync(self, sess):
        run_sync(sess, self.init_ops)

    def _init_end(self, sess):
        sess.rng = sess.stream()

    def _main_done(self, sess):
        self._finish(sess, False)
        return BLOCK  # ended: never resumed

    def _ended(self, sess, refused):
        """`end;` or a refusal ended the session (or leg) where it stood."""
        if sess.parent is not None:
            self._leg_end(sess, refused)
        else:
            self._finish(sess, refused)

    def _given(self, sess):
        """given (e) is read for each session once its init block has run (*Claims*)."""
        for c, g in self.claims_given:
            st = self.claim_state[c.name]
            if st["status"] == "out_of_scope":
                continue
            if g(sess) == 0:  # out of scope: an earlier failure or witness no longer names an iteration
                st.update(status="out_of_scope", session=sess.serial, at=None)

    def turn(self, sess, at):
        """A turn inside a hold's body (Ops): the flat instructions' steps, in one generator."""
        if self.turn_begin(sess, at) is BLOCK:
            yield
        self.turn_set(sess)  # Flat.turn_rest's
        yield from self.server_gen(sess)
        self.turn_end(sess)

    def turn_begin(self, sess, at):
        """With a trace, the session's next row, and its think time first (BLOCK) when it has one."""
        tr = sess.trace
        if tr is not None:
            rows, i = tr
            if i >= len(rows):
                raise self.run_error("R035", f"session {sess.serial} replays a trace session of {len(rows)} turn(s) "
                                     "and asks for another", at)
            tr[1] = i + 1
            think = rows[i]["think"]
            if think > 0:
                self.at(self.now + think, self.wake, sess)
                sess.wait = "think"
                return BLOCK
        return None

    def trace_row(self, sess):
        """The attributes of the trace row turn_begin took."""
        rows, i = sess.trace
        row = rows[i - 1]
        a = sess.a
        a["new"], a["out"], a["think"], a["forced"] = row["new"], row["out"], row["think"], row["forced"]
        a["stream"], a["parent"], a["common"] = row.get("stream", 0.0), row.get("parent", 0.0), row.get("common", 0.0)
        a["more"] = 1.0 if i < len(rows) else 0.0

    def turn_end(self, sess):
        """The server's statements are done: the turn is answered."""
        rec = sess.turn_rec
        sess.turn_rec = None
        sess.turn_idx += 1
        self._answered(rec, sess)

    def _answered(self, rec: TurnRec, sess=None):
        now = self.now
        self.c_response.add(now, now - rec.start)
        if rec.first is None and rec.pf is not None:  # no decode token: the last prefill's is the first
            rec.first = rec.pf
            self.client["ttft"].add(now, rec.first - rec.start)
        tpot = None
        if rec.ntok > 1 and rec.first is not None:
            tpot = (now - rec.first) / (rec.ntok - 1)
            self.client["tpot"].add(now, tpot)
        if now >= self.warmup:  # a request the report counts, as its response is (Series.add)
            if rec.prompt is not None:
                self.tokens_in += rec.prompt
                self.tokens_cached += rec.cached
                self.tokens_out += rec.ntok
            if self.slo is not None and self._good(rec, now, tpot):
                self.good += 1
            if self.requests is not None:
                self.requests.add(sess, rec, now, tpot)

    def _good(self, rec, now, tpot) -> bool:
        """Whether the turn met every objective of --slo; one it has no value for (no first token, a
        single output token, no gap) it meets, as vLLM's benchmark client counts a tpot of 0 for a
        request of one output token (report.md, *Throughput, ITL and goodput*)."""
        ttft, tp, itl, resp = self.slo
        if ttft is not None and rec.first is not None and not rec.first - rec.start <= ttft:
            return False
        if tp is not None and tpot is not None and not tpot <= tp:
            return False
        if itl is not None and not rec.gap <= itl:
            return False
        return resp is None or now - rec.start <= resp

    def _finish(self, sess, refused):
        """The session ends: every hold released (caches kept), leases ended."""
        if sess.frames:
            for fr in reversed(list(sess.frames)):
                self.release_frame(fr)
            sess.frames = ()
        if sess.leases:
            for a in list(sess.leases):
                self._end_lease(a)
        if sess.wait is not None and hasattr(sess.wait, "cancel"):
            sess.wait.cancel()
        sess.alive = False
        sess.epoch += 1
        if sess.parent is not None:
            return
        if sess.live_legs and not refused:
            raise self.run_error("R040", "a session may not end while a leg it forked here runs: `join;` first",
                                 sess.fork_at)
        self.live -= 1
        if self.joining:
            self.joining.pop(sess.id, None)
        if self.sess_stream:
            self.sess_stream.pop(sess.id, None)
        if refused:
            self.sessions_rejected += 1
        else:
            self.sessions_completed += 1
        if self.closed:
            if self.workload is None:
                self._arrive_one()
            elif self.sessions_arrived < len(self.workload["sessions"]):
                self._arrive_replayed()   # the workload's next session takes the place of this one

    # ------------------------------------------------------------ observations
    def observe(self, name, v, sess):
        s = self.obs.get(name)
        if s is None:
            s = self.obs[name] = Series(self.warmup, rows=True)
        s.add(self.now, v, sess.serial, sess.turn_idx)

    def _growth_gauges(self):
        """_gauges at an instant where only pools grew (and evicted): the gauges that can change."""
        c = self.machine
        now = self.now
        for f, avg in self.growth_gauges:
            v = f(c)
            if v != avg.v:
                avg.set(now, v)

    def _gauges(self):
        c = self.machine
        now = self.now
        for _, f, avg in self.gauges:
            v = f(c)
            if v != avg.v:
                avg.set(now, v)
        if self.recorder is not None:
            self.recorder(now)

    def _claims_at_end(self):
        for lst in self.claims_iter.values():
            for c, _ in lst:
                st = self.claim_state[c.name]
                if st["status"] == "not_evaluated":  # never failed, or never witnessed
                    st["status"] = "held" if c.form == "every" else "not_witnessed"
        # a closed population never ends: a replayed workload's last session only cuts its path
        live = bool(self.live) or (self.closed and self.workload is not None)
        for c, f, _ in self.claims_end:
            st = self.claim_state[c.name]
            if st["status"] == "out_of_scope":
                continue
            if live:
                st["status"] = "not_evaluated"
                continue
            ok = f(self.machine) != 0
            st.update(status="held" if ok else "failed", at=self.end)

    # ------------------------------------------------------------ legs
    def fork(self, sess, body, at):
        sess.leg_no += 1
        self.next_id += 1
        leg = self.Session(-self.next_id, sess.serial, dict(sess.a), parent=sess)
        leg.s = stream(self.seed, "leg", sess.serial, sess.leg_no).s  # its own stream
        leg.rng = leg
        leg.turn_rec = sess.turn_rec
        leg.turn_idx = sess.turn_idx
        sess.live_legs += 1
        leg.code = [(lambda lg: run_block(lg, body), None), (self._leg_done, None)]
        self.wake(leg)

    def _leg_done(self, leg):
        self._leg_end(leg, False)
        return BLOCK  # ended: never resumed

    def _leg_end(self, leg, refused):
        parent = leg.parent
        # what the leg leases passes to the session
        leases = list(leg.leases)
        leg.leases = ()
        self._finish(leg, refused)
        for a in leases:
            was = a.frame.sess
            a.frame.sess = parent
            for x in a.frame.allocs:  # their holder is another session now
                m = x.pool
                m.n_holders = None
                if m.engine is not None and not x.leased and x.held:
                    m.engine.res_out(was.id)
                    m.engine.res_in(parent.id)
            _push(parent, "leases", a)
        parent.live_legs -= 1
        if refused and parent.alive:  # a refused leg ends its session
            self._kill(parent, refused=True)
        elif parent.wait == "join" and parent.live_legs == 0:
            parent.wait = None
            self.joining.pop(parent.id, None)
            self.wake(parent)

    def _kill(self, sess, refused):
        if sess.wait is not None and hasattr(sess.wait, "cancel"):
            sess.wait.cancel()
        sess.epoch += 1
        self.ready.append((sess, sess.epoch, SessionEnd(refused)))

    # ------------------------------------------------------------ holds
    def hold(self, sess, spec):
        computed = 0.0
        head = False
        again = False
        while True:
            fr = self.hold_frame(sess, spec, computed, again)
            if spec.content is not None:
                fr.stream = self._stream(sess, spec)
            self._join(fr, head)
            sess.wait = fr
            yield
            _push(sess, "frames", fr)
            try:
                yield from run_block(sess, spec.body)
            except Preempted as p:
                if p.frame is not fr:
                    raise
                computed = p.pos
                head = self._requeue_head(fr)
                again = True
                continue
            if fr in sess.frames:
                sess.frames.remove(fr)
            self.release_frame(fr)
            sess.a["computed"] = 0.0
            return

    def hold_frame(self, sess, spec, computed=0.0, again=False):
        """The frame of a hold as it joins, its members named; SessionEnd(refused) where one of its
        units or reserves can never fit."""
        c = sess
        self.cur_at = spec.at
        sess.a["computed"] = computed
        fr = HoldFrame(sess, spec)
        fr.again = again
        fr.members = [t(c) for t, _, _, _ in spec.pools]
        if len({id(m) for m in fr.members}) != len(fr.members):
            raise self.run_error("R041", "two indices of one hold name one member", spec.at)
        self.refuse_never_fitting(fr, c)
        return fr

    def refuse_never_fitting(self, fr, c):
        """Each of a joining hold's units and reserve that reads only attributes and numbers is
        judged as the hold joins: above the cap, the request can never fit and is rejected
        (*Pools*): SessionEnd(refused)."""
        spec = fr.spec
        for (_, uf, rf, (su, sr)), m in zip(spec.pools, fr.members):
            if su and round_up(self.amount(uf(c), spec.at, "a hold's units"), m.block) > m.cap or \
                    sr and self.amount(rf(c), spec.at, "a hold's reserve") > m.cap:
                m.rejected += 1
                raise SessionEnd(refused=True)

    # ------------------------------------------------------------ content streams
    def _stream(self, sess, spec):
        """A hold's content, read as it joins: its stream, defined by its parent and where it leaves it."""
        c = sess
        sf, pf, af = spec.content
        stream = sf(c)
        d = None
        if pf is not None:
            at = self.amount(af(c), spec.at, "a content's `at`")
            if at > 0:
                d = (pf(c), at)
        old = self.streams.get(stream, 0)
        if old == 0:
            s = d[0] if d is not None else None
            while s is not None:  # a stream does not begin with itself
                if s == stream:
                    raise self.run_error("R045", f"content {fmt(stream)} would begin with its own tokens", spec.at)
                s = (self.streams.get(s) or (None,))[0]
            self.streams[stream] = d
            if d is not None and d[0] not in self.streams:
                # a parent no hold has named is a stream of its own tokens from now on: its blocks'
                # keys, once read, never change
                self.streams[d[0]] = None
        elif old != d:
            raise self.run_error("R045", f"content {fmt(stream)} is defined twice, as {self._show_stream(old)} "
                                 f"and as {self._show_stream(d)}", spec.at)
        self.sess_stream[sess.id] = stream
        return stream

    @staticmethod
    def _show_stream(d):
        return "its own tokens" if d is None else f"the first {fmt(d[1])} of content {fmt(d[0])}"

    def origin(self, stream, pos):
        """The stream whose own token is at position `pos` of `stream`."""
        d = self.streams.get(stream)
        while d is not None and pos < d[1]:
            stream = d[0]
            d = self.streams.get(stream)
        return stream

    def _requeue_head(self, fr):
        for m in fr.members:
            if m.decl.preempt.k == "by" and m.decl.preempt.requeue == "tail":
                return False
        return True

    def _join(self, fr, head):
        m = fr.members[0]
        fr.join_seq = self.next_seq()
        fr.join_t = self.now
        fr.head = head
        if head:  # a preempted hold re-enters at the head, ahead of the keys
            m.queue.insert(0, fr)
        else:
            m.queue.append(fr)
        if m.engine is not None:
            self.engine_wants(m.engine)

    def _head(self, m):
        q = m.queue
        if q[0].head:
            return q[0]
        keys = self._queue_keys.get(m.name)
        if keys is None:
            return q[0]
        best = None
        bk = None
        for fr in q:
            if fr.head:
                return fr
            c = fr.sess
            c.xdict()["waited"] = self.now - fr.join_t
            k = tuple(f(c) for f in keys) + (fr.join_seq,)
            if bk is None or k < bk:
                best, bk = fr, k
        return best

    def _try_admit(self, fr, sync=False) -> bool:
        spec = fr.spec
        sess = fr.sess
        c = sess
        units, reserves = [], []
        content = spec.content is not None
        if content:  # a content pool's hit is known before its room: what others hold takes none
            self.sess_stream[sess.id] = fr.stream
            hits = []
        for i, (t, uf, rf, _) in enumerate(spec.pools):
            m = fr.members[i]
            if t(c) is not m:
                raise self.run_error("R041", "a hold's index names another member at admission than when it joined",
                                     spec.at)
            self.cur_at = spec.at
            u = round_up(self.amount(uf(c), spec.at, "a hold's units"), m.block)
            r = self.amount(rf(c), spec.at, "a hold's reserve") if rf is not None else 0.0
            need = max(u, r)
            if need > m.cap:
                m.over = fr
                return False
            if content:
                hit = []
                if m.content:
                    rho = self.amount(spec.reuse(c), spec.at, "a hold's reuse") if spec.reuse is not None else INF
                    hit = m.lookup(fr.stream, min(rho, u))
                    need -= m.shared_units(hit)
                hits.append(hit)
            if not m.room_for(need):
                return False
            units.append(u)
            reserves.append(r)
        rho = INF
        if spec.reuse is not None:
            rho = self.amount(spec.reuse(c), spec.at, "a hold's reuse")
        consumed = []
        for i, m in enumerate(fr.members):
            if content and m.content:
                got = len(hits[i]) * m.block
            else:
                got = m.consume(sess, rho, units[i]) if spec.has_cache else 0.0
            consumed.append(got)
        # cached: the prefix the admission consumed, the most any of the hold's pools gave (a slot
        # pool beside the KV pool gives at most its unit)
        sess.a["cached"] = max(consumed) if consumed else 0.0
        rec = sess.turn_rec
        if rec is not None and not fr.again:
            rec.cached += sess.a["cached"]
        for i, m in enumerate(fr.members):
            if content and m.content:
                a = m.allocate_content(fr, units[i], reserves[i], fr.stream, hits[i])
            else:
                m.make_room(units[i])
                a = m.allocate(fr, units[i], reserves[i])
            a.pos = a.consumed = consumed[i]
            fr.allocs.append(a)
        fr.members[0].queue.remove(fr)
        fr.admitted = True
        sess.wait = None
        if not sync:
            self.wake(sess)
        return True

    def release_frame(self, fr, preempted=False):
        """The scope's end (or a preemption): each allocation given back, caching per the clause;
        a leased pool's allocation stays the session's."""
        spec = fr.spec
        sess = fr.sess
        for i, a in enumerate(fr.allocs):
            if a.leased or not a.held:
                continue
            if spec.lease is not None and spec.lease[0] == i and not preempted:
                dur = self.amount(spec.lease[1](sess), spec.at, "a lease's duration")
                a.leased = True
                if a.pool.engine is not None:  # a lease is no resident (Engine.rc)
                    a.pool.engine.res_out(sess.id)
                _push(sess, "leases", a)
                if dur < INF:
                    a.lease_version += 1
                    self.at(self.now + dur, self._lease_expired, (a, a.lease_version))
                continue
            self._give_back(a, sess, preempted)
        fr.done = True

    def _computed(self, a, preempted):
        if a.advanced:
            return a.pos
        return a.consumed if preempted else a.units

    def _give_back(self, a, sess, preempted=False):
        spec = a.frame.spec
        if a.blks is not None:  # a content pool: what stays cached is decided block by block as it frees
            ell = self.amount(spec.cache(sess), spec.at, "a hold's cache")
            a.pool.publish(a, min(ell, self._computed(a, preempted)))
            a.pool.free(a, ell)
            for e in (a.pool.engine, a.pool.memory_of):
                if e is not None:
                    self.engine_wants(e)
            return
        a.pool.free(a)
        for e in (a.pool.engine, a.pool.memory_of):
            if e is not None:  # room freed: the engine may admit at its next step
                self.engine_wants(e)
        if spec.has_cache:
            ell = self.amount(spec.cache(sess), spec.at, "a hold's cache")
            a.pool.put_cache(sess, min(ell, self._computed(a, preempted)))

    def _lease_expired(self, arg):
        a, version = arg
        if a.lease_version == version and a.leased and a.held:
            self._end_lease(a)

    def _end_lease(self, a):
        sess = a.frame.sess
        a.leased = False
        if a.pool.engine is not None:
            a.pool.engine.res_in(sess.id)
        if a in sess.leases:
            sess.leases.remove(a)
        self._give_back(a, sess)

    def innermost(self, sess, pool, at, what):
        for fr in reversed(sess.frames):
            for a in fr.allocs:
                if a.pool is pool and not a.leased and a.held:
                    return a
        raise self.run_error("R042", f"`{what} {pool.label}`: the session holds no allocation on {pool.label} here",
                             at)

    def release_stmt(self, sess, pool, at):
        for fr in reversed(sess.frames):
            for a in fr.allocs:
                if a.pool is pool and not a.leased and a.held:
                    self._give_back(a, sess)
                    return
        for a in list(sess.leases):
            if a.pool is pool:
                self._end_lease(a)
                return
        # a session that holds and leases nothing on the pool releases nothing

    def load(self, sess, pool, n, at):
        a = self.innermost(sess, pool, at, "load")
        if a.pos + n > a.units + 1e-9:
            raise self.run_error("R043", f"`load {pool.label}` of {fmt(n)} takes the position to {fmt(a.pos + n)}, "
                                 f"past the hold's allocation {fmt(a.units)}", at)
        a.pos += n
        a.advanced = True
        if a.blks is not None:
            pool.publish(a, a.pos)

    def spill(self, pool, entry, units):
        spec = self.spill_specs.get(pool.name)
        if spec is None or entry.owner is None:
            return
        tier_t, via_t, amount_f, when_f = spec
        c = entry.owner.c
        if when_f(c) == 0:
            return
        tier, via = tier_t(c), via_t(c)
        work = self.amount(amount_f(c), None, "a spill")
        owner = entry.owner

        def arrived():
            tier.put_cache(owner, units + tier.cachedin(owner))
        job = MachineJob(work, [via], self.next_seq(), self.now, arrived)
        via.submit(job)

    # ------------------------------------------------------------ growth and preemption
    def _own_extra(self, a):
        return max(0.0, a.reserve - a.units) if a.pool.reserve_held else 0.0

    def grow(self, sess, a, delta, at):
        if delta <= 0:
            return
        m = a.pool
        while True:
            if m.room_for(delta - self._own_extra(a)):
                m.make_room(delta)
                m.grow_alloc(a, delta)
                return
            victim = self._victim(m, a)
            if victim is None:
                # preempt none, or nothing the pool's preempt may take: wait for room another frees
                g = (sess, a, delta)
                m.growers.append(g)
                sess.wait = _Grower(m, g)
                yield
                return
            self._preempt(victim.frame, m, victim)

    def _victim(self, m, grower):
        p = m.decl.preempt
        if p.k != "by":
            return None
        self._co_flush_all()  # the keys read positions
        cands = [x for x in m.allocs if not x.leased and not x.frame.done]
        if not cands:
            return None
        keys = self._preempt_keys[m.name]
        best, bk = None, None
        for rank, x in enumerate(cands):
            c = x.frame.sess
            xd = c.xdict()
            xd["admission"] = float(rank)
            xd["position"] = x.pos
            xd["decoding"] = 0.0
            xd["remaining"] = 0.0
            k = tuple(f(c) for f in keys) + (-rank,)  # ties to the one admitted last
            if bk is None or k < bk:
                best, bk = x, k
        return best

    def _preempt(self, fr, m, victim):
        self._co_flush_all()
        sess = fr.sess
        m.preempted += 1
        if self.step_log is not None:
            self.step_log.preempted(sess)
        pos = self._computed(victim, True)
        # inner holds of the victim's session go with it
        if fr in sess.frames:
            i = sess.frames.index(fr)
            inner = sess.frames[i:]
            del sess.frames[i:]
        else:
            inner = [fr]
        for f in reversed(inner):
            self.release_frame(f, preempted=True)
        if sess.wait is not None and hasattr(sess.wait, "cancel"):
            sess.wait.cancel()
        sess.wait = None
        rec = sess.turn_rec
        if rec is not None:
            rec.preempted += 1
        if sess.stuck_pos is not None and pos <= sess.stuck_pos:
            self.stuck.add(sess.serial)
        sess.stuck_pos = pos
        exc = Preempted(fr, pos)
        if sess is self.running:
            raise exc
        sess.epoch += 1
        self.ready.append((sess, sess.epoch, exc))

    # ------------------------------------------------------------ eviction order
    def evict_order(self, m):
        keys = self._evict_keys.get(m.name)
        ents = [e for e in m.entries if e.alive]
        if keys is None:
            # lru: release time, then release order, which is the order entries are appended in
            # (put_cache stamps now and the next release number, both never decreasing)
            return ents
        out = []
        for e in ents:
            c = e.owner.c if e.owner is not None else self.machine
            out.append((tuple(f(c) for f in keys), e.seq, e))
        out.sort(key=lambda x: (x[0], x[1]))
        return [x[2] for x in out]


class _Grower:
    __slots__ = ("pool", "g")

    def __init__(self, pool, g):
        self.pool = pool
        self.g = g

    def cancel(self):
        if self.g in self.pool.growers:
            self.pool.growers.remove(self.g)



def _draws(stmts) -> bool:
    """Whether a block draws anywhere (its streams are made lazily otherwise)."""
    for s in walk(stmts):
        es = list(_exprs(s))
        if s.k == "hold":
            es += header_exprs(s)
        if s.k == "run":
            es += [t.index for t in s.stages if t.index is not None]
        if any(x.k == "draw" for e in es for x in expr_nodes(e)):
            return True
    return False


def _push(sess, field, x):
    """Append to a session's frames or leases, the shared empty tuple until the first."""
    lst = getattr(sess, field)
    if lst:
        lst.append(x)
    else:
        setattr(sess, field, [x])


# observables a pool's growth or eviction leaves unchanged: who holds and waits, a stage's or an
# engine's jobs (*Observables*). A gauge reads these, used and free (link/names.py, GAUGE); used and
# free, and anything else, are read again
_GROWTH_STILL = frozenset({"holders", "queued", "queue", "busy", "blocksize"})
_PLAIN = frozenset({"num", "inf", "un", "bin", "if", "fn"})


def _growth_reads(e) -> bool:
    """Whether a gauge's expression may read something a growth changes: an observable not in
    _GROWTH_STILL, or any node but numbers, operators, functions and observables (read as may)."""
    k = getattr(e, "k", None)
    if k == "obs":
        if e.fn not in _GROWTH_STILL:
            return True
        return e.of.index is not None and _growth_reads(e.of.index)
    if k not in _PLAIN:
        return True
    for name in type(e).model_fields:
        if name in ("k", "at"):
            continue
        v = getattr(e, name)
        for x in (v if isinstance(v, list) else [v]):
            if hasattr(x, "k") and _growth_reads(x):
                return True
    return False
