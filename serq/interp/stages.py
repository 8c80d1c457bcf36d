"""Stages (*Stages*): fifo(c), ps(φ) (delay is ps(present)), and flows, runs holding several
stages at once whose rates the program's share sets, recomputed at every arrival and departure."""
from __future__ import annotations

import heapq
import math
from collections import deque

from serq.interp.stats import BusyAverage, TimeAverage
from serq.lang.lower.constants import fmt

INF = math.inf


class Job:
    __slots__ = ("sess", "work", "left", "stages", "seq", "tag", "rate", "alive", "started")
    done_cb = None  # a machine job's (a spill's) continuation: MachineJob

    def __init__(self, sess, work, stages, seq, now):
        self.sess = sess
        self.work = work
        self.left = work
        self.stages = stages
        self.seq = seq
        self.tag = 0.0
        self.rate = 0.0
        self.started = False
        self.alive = True

    def cancel(self):
        """A preemption takes the job off its stages."""
        if self.alive:
            self.alive = False
            for st in self.stages:
                st.remove(self)


class MachineJob(Job):
    """A job the machine runs for no session (a spill), and what follows when it is done."""
    __slots__ = ("done_cb",)

    def __init__(self, work, stages, seq, now, done_cb):
        super().__init__(None, work, stages, seq, now)
        self.done_cb = done_cb


class Stage:
    """One member of a stage declaration."""

    at = None  # the declaration's place, for run-time errors

    def __init__(self, sim, name: str, index):
        self.sim = sim
        self.name = name
        self.index = index
        self.label = name if index is None else f"{name}[{index}]"
        self.completed = 0
        self.busy_avg = BusyAverage(sim.warmup)
        self.n = 0
        self.completed_after_warmup = 0
        self.alone = (self,)  # a one-stage job's stages, shared by every such job

    def _done(self, job):
        self.completed += 1
        if self.sim.now >= self.sim.warmup:
            self.completed_after_warmup += 1

    # observables
    def queue_len(self):
        return float(self.n)

    def queue_of(self, c):
        """queue(S) as a compiled expression reads it (Sim.observable)."""
        return float(self.n)

    def busy(self):
        return 1.0 if self.n else 0.0

    def work_left(self):
        return 0.0

    def utilisation(self, end):
        return self.busy_avg.mean_to(end)


class Fifo(Stage):
    """c servers, one job each at rate 1, jobs in arrival order."""

    def __init__(self, sim, name, index, servers: float):
        super().__init__(sim, name, index)
        self.c = servers
        self.waiting = deque()
        self.serving = 0
        self.finish = self._finish  # one bound method for every event it schedules (a million at once)
        self.done = sim.job_done    # what a job's end tells (queueing.py continues its session at once)

    def submit(self, job):
        self.n += 1
        if self.serving < self.c:
            self.serving += 1
            self._begin(job)
            self._util()
        else:
            self.waiting.append(job)

    def _start(self, job):
        self.serving += 1
        self._begin(job)

    def _begin(self, job):
        """The job enters service on a server already counted busy."""
        sim = self.sim
        job.started = True
        job.tag = fin = sim.now + job.work
        sim.seq += 1
        heapq.heappush(sim.heap, (fin, sim.seq, self.finish, job))

    def _finish(self, job):
        if not job.alive:
            return
        self.n -= 1
        job.alive = False
        self.completed += 1
        if job.tag >= self.sim.warmup:
            self.completed_after_warmup += 1
        waiting = self.waiting
        while waiting:  # the freed server takes the next live job: the busy count stays as it is
            j = waiting.popleft()
            if j.alive:
                self._begin(j)
                break
        else:
            self.serving -= 1
            self._util()
        self.done(job)

    def _next(self):
        while self.waiting and self.serving < self.c:
            j = self.waiting.popleft()
            if j.alive:
                self._start(j)

    def remove(self, job):
        if job.started:
            self.serving -= 1
            self.n -= 1
            self._next()
            self._util()
        else:
            try:
                self.waiting.remove(job)
                self.n -= 1
            except ValueError:
                pass

    def _util(self):
        v = self.serving / self.c if self.c != INF else float(self.serving > 0)
        if v != self.busy_avg.v:
            self.busy_avg.set(self.sim.now, v)

    def busy(self):
        return float(self.serving)

    def work_left(self):
        now = self.sim.now
        return sum(max(0.0, j.tag - now) for j in self.sim.live_jobs(self) if j.started) + \
            sum(j.work for j in self.waiting if j.alive)


class PS(Stage):
    """Every job at once, each at φ(present)/present. Virtual time: every job's finish tag is the
    virtual time at its start plus its work; ties finish in the order they started."""

    share_ends = True  # an end at the time of the one on the heap rides on it (_schedule; a test turns it off)

    def __init__(self, sim, name, index, phi, phi_const: float | None):
        super().__init__(sim, name, index)
        self.phi = phi              # closure of `present`, or None when φ is present itself (delay)
        self.phi_const = phi_const
        self.heap: list = []
        self.v = 0.0                # virtual time: the work each present job has received
        self.last = 0.0
        self.rate = 0.0
        self.version = None         # the sequence number of the event that ends the head job
        self.due = 0.0              # and its time
        self.carrier = None         # the number of the event on the heap at `due` that stands for it
        self.ctx = sim.machine_ctx({"present": 0.0})
        self.fire = self._fire  # one bound method for every event it schedules
        self.done = sim.job_done  # what a job's end tells (queueing.py: the session goes on at once)

    def _advance(self):
        now = self.sim.now
        if self.n:
            self.v += self.rate * (now - self.last)
        self.last = now

    def _rate(self):
        n = self.n
        if n == 0:
            return 0.0
        if self.phi is None:
            return 1.0
        if self.phi_const is not None:
            return self.phi_const / n
        self.ctx.x["present"] = float(n)
        phi = self.phi(self.ctx)
        if not 0 < phi < INF:
            raise self.sim.run_error("R010", f"stage `{self.label}`'s capacity ps(φ) is {fmt(phi)} with {n} present: "
                                     "it must be above 0 and finite", self.at)
        return phi / n

    def _schedule(self):
        # the event set last is the one that fires, named by its sequence number (no number of
        # its own kept for each of a million pending events)
        n = self.n
        sim = self.sim
        if n == 0:
            rate = 0.0
        elif self.phi is None:
            rate = 1.0
        elif self.phi_const is not None:
            rate = self.phi_const / n
        else:
            rate = self._rate()
        self.rate = rate
        busy = 1.0 if n else 0.0
        if busy != self.busy_avg.v:
            self.busy_avg.set(sim.now, busy)
        heap = self.heap
        while heap and not heap[0][2].alive:
            heapq.heappop(heap)
        if heap and rate > 0:
            dt = (heap[0][0] - self.v) / rate
            sim.seq += 1
            t = sim.now + (dt if dt > 0.0 else 0.0)
            self.version = sim.seq
            # an end at the same time as the one the heap holds (a delay stage's arrival that is not
            # its first to finish, a ps below its capacity's knee): that event stands for this one
            # (_fire), rather than each arrival leaving a replaced event on the heap (a million at
            # a closed workload's start)
            if self.carrier is None or t != self.due or not self.share_ends:
                heapq.heappush(sim.heap, (t, sim.seq, self.fire, None))
                self.carrier, self.due = sim.seq, t
        else:
            self.version = self.carrier = None

    def submit(self, job):
        now = self.sim.now
        if self.n:  # _advance
            self.v += self.rate * (now - self.last)
        self.last = now
        job.tag = self.v + job.work
        job.started = True
        self.n += 1
        heapq.heappush(self.heap, (job.tag, job.seq, job))
        self._schedule()

    def _fire(self):
        sim = self.sim
        seq = sim.event_seq
        if seq != self.version:
            if seq != self.carrier:
                return  # replaced
            # the event standing for a later one at its time (_schedule): what comes between them
            # comes first, then the end, as if that later event had been on the heap
            head = sim.heap[0] if sim.heap else None
            if head is not None and (head[0] < self.due or (head[0] == self.due and head[1] < self.version)):
                heapq.heappush(sim.heap, (self.due, self.version, self.fire, None))
                self.carrier = self.version
                return
        self.carrier = None
        now = sim.now
        v = self.v
        if self.n:  # _advance
            v += self.rate * (now - self.last)
        self.last = now
        # the event was set for the head job's finish tag and nothing changed since: that job has
        # received its work exactly, whatever the rounding of v (a tiny remainder must not
        # schedule its end at this same instant again); jobs with the same tag end with it
        heap = self.heap
        while heap and not heap[0][2].alive:
            heapq.heappop(heap)
        if heap and heap[0][0] > v:
            v = heap[0][0]
        self.v = v
        done = []
        while heap and (heap[0][0] <= v or not heap[0][2].alive):
            tag, seq, job = heapq.heappop(heap)
            if job.alive:
                job.alive = False
                self.n -= 1
                done.append(job)
        self._schedule()
        after = sim.now >= sim.warmup
        done_cb = self.done
        for job in done:
            self.completed += 1  # _done
            if after:
                self.completed_after_warmup += 1
            done_cb(job)

    def remove(self, job):
        self._advance()
        self.n -= 1
        job.alive = False
        self._schedule()

    def work_left(self):
        self._advance()
        return sum(max(0.0, t - self.v) for t, _, j in self.heap if j.alive)


class FlowNet:
    """Stages shared by runs over several stages: every job on them is a flow with one rate, set by
    the share policy from the stages' constant capacities (*Stages*). A flow's `left` is its work
    still to do and its `tag` the instant it ends at its present rate; the event set for the
    earliest tag ends the flows due then exactly, so no remainder is left over to round."""

    def __init__(self, sim, policy: str):
        self.sim = sim
        self.policy = policy
        self.flows: list = []
        self.last = 0.0
        self.version = 0

    def _advance(self):
        now = self.sim.now
        dt = now - self.last
        if dt > 0:
            for f in self.flows:
                left = f.left - f.rate * dt
                f.left = left if left > 0.0 else 0.0
        self.last = now

    def add(self, job):
        self._advance()
        job.started = True
        self.flows.append(job)
        for st in job.stages:
            st.n += 1
        self._rates()

    def remove(self, job):
        if job in self.flows:
            self._advance()
            self.flows.remove(job)
            for st in job.stages:
                st.n -= 1
            job.alive = False
            self._rates()

    def _rates(self):
        flows = self.flows
        stages: dict = {}
        for f in flows:
            for st in f.stages:
                stages.setdefault(st, []).append(f)
        if self.policy == "bottleneck":
            for f in flows:
                f.rate = min(st.cap / len(stages[st]) for st in f.stages)
        else:
            _maxmin(flows, stages)
        now = self.sim.now
        for st in self.members:
            fl = stages.get(st)
            st.flow_rate = sum(f.rate for f in fl) if fl else 0.0
            st.busy_avg.set(now, st.flow_rate / st.cap if fl else 0.0)
        self.version += 1
        nxt = INF
        for f in flows:
            # a rate is above 0 as each capacity is, unless a share of a denormal capacity
            # underflowed: that flow never ends; the tag is never before now
            f.tag = t = now + f.left / f.rate if f.rate > 0 else INF
            if t < nxt:
                nxt = t
        if nxt < INF:
            self.sim.at(nxt, self._fire, self.version)

    def _fire(self, version):
        if version != self.version:
            return
        self._advance()
        now = self.sim.now
        # nothing changed since the tags were set, and this is the earliest: its flows are done
        done = [f for f in self.flows if f.tag <= now]
        for f in done:
            f.left = 0.0
            self.flows.remove(f)
            for st in f.stages:
                st.n -= 1
            f.alive = False
        self._rates()
        for f in done:
            for st in f.stages:
                st._done(f)
            self.sim.job_done(f)


def _maxmin(flows, stages):
    """Max-min fair rates: every unfrozen flow's rate rises by the same share until a stage fills;
    the flows through the stages that filled (those whose share was the least) stop there. Each
    round fills one stage at least, so there are at most as many rounds as stages."""
    left = {st: st.cap for st in stages}
    count = {st: len(fl) for st, fl in stages.items()}
    frozen: set = set()
    for f in flows:
        f.rate = 0.0
    while count:
        share = min(left[st] / n for st, n in count.items())
        full = [st for st, n in count.items() if left[st] / n == share]
        for f in flows:
            if f not in frozen:
                f.rate += share
        for st, n in count.items():
            v = left[st] - share * n
            left[st] = v if v > 0.0 else 0.0
        for st in full:
            for f in stages[st]:
                if f not in frozen:
                    frozen.add(f)
                    for s2 in f.stages:
                        count[s2] -= 1
        count = {st: n for st, n in count.items() if n > 0}


class FlowStage(Stage):
    """A ps stage with a constant capacity, held by flows."""

    def __init__(self, sim, name, index, cap: float, net: FlowNet):
        super().__init__(sim, name, index)
        # its busy time is the flows' share of its capacity (FlowNet): a fraction, NaN where both
        # are infinite, so the whole average (BusyAverage's folds are for values never NaN)
        self.busy_avg = TimeAverage(sim.warmup)
        self.cap = cap
        self.net = net
        self.flow_rate = 0.0

    def submit(self, job):
        self.net.add(job)

    def remove(self, job):
        self.net.remove(job)

    def work_left(self):
        self.net._advance()
        return sum(f.left for f in self.net.flows if self in f.stages)
