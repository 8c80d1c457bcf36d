"""A shorter path for programs that are networks of queues (issue 12): open arrivals, one turn
per session, and a server that runs stages one after another (`run S (w);` ...), with no pool,
engine, claim, trace or replayed workload. Such a session's whole life is its turn block, its runs
and its answer, so it needs neither the instruction list (sessions.Flat) nor the ready queue's
generic resume (Sim._drain): each arrival and each job's end continue it directly.

The events, their sequence numbers, the draws and the statistics are the general path's, in the
same order, so the report is the same to the byte (tests/test_queueing.py runs both)."""
from __future__ import annotations

import heapq
from math import log

from serq.interp.rng import Stream, state1
from serq.interp.sessions import MAX_STEPS, SessionEnd, too_many
from serq.interp.stages import Fifo, Job

MAX_RUNS = 64     # a longer server takes the general path (nothing gained, a bound kept simple)
MAX_LETS = 1000   # the turn block's lets: far under MAX_STEPS, so they need no count


def plan(sim):
    """The queueing path for this run, or None when the program needs the general one."""
    prog, wl = sim.prog, sim.prog.workload
    if (sim.workload is not None or sim.trace is not None or sim.recorder is not None
            or wl.arrive.k not in ("poisson", "renewal") or wl.session is not None or sim.init_ops
            or prog.claims or sim.pools or sim.engines or sim.flownet is not None or sim.spill_specs):
        return None
    if not 0 < len(prog.server) <= MAX_RUNS or any(g for g, _, _ in sim.turn_ops):
        return None
    for s in prog.server:
        if s.k != "run" or len(s.stages) != 1 or s.growing is not None or s.mode is not None:
            return None
    return Queueing(sim)


class Queueing:
    def __init__(self, sim):
        self.sim = sim
        x = sim.compiler
        # each run: its work, its stage (None when an index picks it), the index's pick, where it is
        self.runs = [(x.expr(s.work), None if s.stages[0].index is not None else sim.members(s.stages[0].name)[0],
                      x.target(s.stages[0], s.at), s.at) for s in sim.prog.server]
        self.n_runs = len(self.runs)
        self.Session = sim.Session
        self.pending: list = []  # sessions whose job ended in this event, in the order they ended
        turn = sim.prog.workload.turn
        # a turn block of lets only is run here (its names and values); any other, by Sim.turn_set
        self.lets = ([(s.name, x.expr(s.e)) for s in turn]
                     if all(s.k == "set" for s in turn) and len(turn) <= MAX_LETS else None)
        # the turn's stream: one object, its state set for each turn (the lets are done with it
        # before the turn ends, and nothing keeps it)
        self.turn_stream = Stream(0) if sim.turn_draws else None

    def install(self):
        """Take the arrivals, the jobs' ends and the settling over from the general path."""
        sim = self.sim
        sim._arrive_open = self.arrive
        sim.job_done = self.job_done
        sim.settle = self.settle
        sim.ready = self.pending
        self.rate = sim.rate if sim.poisson else None
        self.session_draws = sim.session_draws
        sim._events = self.events
        self.arrival_random = sim.arrival_rng.random
        for st in sim.stages:
            if st.__class__ is Fifo:  # its job's end is the event's last act: the session goes on at once
                st.done = self.job_done_now

    def events(self, progress, hz):
        """Sim._events, without what a network of queues never has (engines to start, pools to
        retry, a recorder), its settling and its gauges written out in the loop."""
        from serq.interp.sim import STALL
        sim = self.sim
        heap = sim.heap
        pending = self.pending
        step = self.step
        gauges = [(f, avg) for _, f, avg in sim.gauges]
        c = sim.machine
        pop = heapq.heappop
        last_t = 0.0
        now = sim.now
        stall_t, stall, stall_at = None, 0, STALL
        while True:
            if pending:  # settle: the sessions whose jobs ended, in order
                for sess in pending:
                    sess.steps = 0
                    step(sess, sess.pc)
                pending.clear()
            if not heap:
                sim._gauges()
                break
            t = heap[0][0]
            if gauges and t > now:  # the instant is over: Sim._gauges
                for f, avg in gauges:
                    v = f(c)
                    if v != avg.v:
                        avg.set(now, v)
            if t > hz:
                break
            t, sim.event_seq, fn, arg = pop(heap)
            if t != now:
                now = sim.now = t
            else:  # the watchdog, as Sim._events keeps it
                if stall_t != now:
                    stall_t, stall, stall_at = now, 0, STALL
                stall += 1
                if stall > stall_at:
                    stall_at = sim._stalled(fn, arg, stall)
            if arg is not None:
                fn(arg)
            else:
                fn()
            if progress is not None and t - last_t > 0:
                progress(sim)
                last_t = t

    # ------------------------------------------------------------ arrivals (Sim._arrive_open)
    def arrive(self):
        sim = self.sim
        serial = sim.sessions_arrived
        if serial >= sim.max_arrivals:
            sim.too_many_arrivals()
        sim.sessions_arrived = serial + 1
        sim.next_id += 1
        sess = self.Session(serial, serial, {"serial": float(serial), "turn_no": 0.0, "cached": 0.0,
                                             "computed": 0.0})
        if self.session_draws:
            sess.s = state1(sim.b_session, serial)
            sess.rng = sess
        sim.live += 1
        # the next arrival is scheduled before the session runs, as the general path settles
        # the woken session after the arrival's event
        n = sim.arrivals_n
        if n is None or serial + 1 < n:  # --arrivals N: the N-th schedules none
            if self.rate is not None:
                sim.seq += 1  # random.expovariate's own arithmetic, without its call
                heapq.heappush(sim.heap, (sim.now - log(1.0 - self.arrival_random()) / self.rate, sim.seq,
                                          self.arrive, None))
            else:
                sim.at(sim._gap(), self.arrive)
        lets = self.lets
        if lets is not None:  # Flat.turn_set's, shortened: turn_no is 0 already, no trace
            ts = self.turn_stream
            if ts is not None:
                ts.s = state1(sim.b_turn, serial << 32)
                sess.rng = ts
            a = sess.a
            for name, f in lets:
                a[name] = f(sess)
            sess.rng = sess if sim.session_draws else None
            sess.steps = len(lets)
            sess.turn_rec = sim.now  # the turn's start: all its record holds here
        else:
            sess.steps = 0
            try:
                sim.turn_set(sess)
            except SessionEnd as e:
                sim._ended(sess, e.refused)
                return
            sess.turn_rec = sess.turn_rec.start
        self.step(sess, 0)

    # ------------------------------------------------------------ the server's runs
    def step(self, sess, i):
        """Run the server's statements from the i-th: each run submits its job and waits for it
        (a run of no work goes on at once); after the last, the turn is answered and the session
        ends (Flat.turn_rest's turn_end_last)."""
        runs = self.runs
        n = self.n_runs
        while i < n:
            f, st, tgt, at = runs[i]
            i += 1
            steps = sess.steps + 1  # a statement, counted as Sim._drain counts it
            sess.steps = steps
            if steps > MAX_STEPS:
                raise too_many(sess, at)
            work = f(sess)
            if not work >= 0:
                self.sim.amount(work, at, "a run's work")
            if work > 0:
                if st is None:
                    st = tgt(sess)
                sim = self.sim
                sim.seq += 1
                sess.pc = i
                st.submit(Job(sess, work, st.alone, sim.seq, None))
                return
        # the turn is answered (Sim.turn_end: a run of stages gives no token) and the session ends
        # (Sim._finish: it holds nothing, nothing waits on it)
        sim = self.sim
        now = sim.now
        sim.c_response.add(now, now - sess.turn_rec)
        sess.turn_rec = None
        sess.turn_idx += 1
        sess.alive = False
        sim.live -= 1
        sim.sessions_completed += 1

    def job_done(self, job):
        """A stage ended a job: its session goes on once the event is over (Sim.wake)."""
        self.pending.append(job.sess)

    def job_done_now(self, job):
        """A fifo stage ended a job, the last act of its event: the session goes on now, as
        settling would run it next (unless others already wait to, then after them)."""
        sess = job.sess
        if self.pending:
            self.pending.append(sess)
        else:
            sess.steps = 0
            self.step(sess, sess.pc)

    def settle(self):
        pending = self.pending
        step = self.step
        for sess in pending:  # the list grows while it is read: each one is read in turn
            sess.steps = 0
            step(sess, sess.pc)
        pending.clear()

