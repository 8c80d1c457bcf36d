"""A shorter path for programs that are networks of queues (issue 12): open arrivals, one turn
per session, and a server that runs stages one after another (`run S (w);` ...), with no pool,
engine, claim, trace or replayed workload. Such a session's whole life is its turn block, its runs
and its answer, so it needs neither the instruction list (sessions.Flat) nor the ready queue's
generic resume (Sim._drain): each arrival and each job's end continue it directly.

The events, their sequence numbers, the draws and the statistics are the general path's, in the
same order, so the report is the same to the byte (tests/test_queueing.py runs both)."""
from __future__ import annotations

import heapq
from math import inf as INF
from math import log

from serq.interp.rng import GOLDEN, M1, M2, MASK, SCALE, Stream, state1
from serq.interp.sessions import SessionEnd
from serq.interp.stages import PS, Job, Stage
from serq.link.exprs import const_value

# a session here runs at most MAX_TURN + MAX_RUNS statements without blocking (a turn block holds
# no loop), far under sessions.MAX_STEPS: none is counted
MAX_RUNS = 8   # each run's continuation is written out: a longer server takes the general path
MAX_TURN = 1000


def plan(sim):
    """The queueing path for this run, or None when the program needs the general one."""
    prog, wl = sim.prog, sim.prog.workload
    if (sim.workload is not None or sim.trace is not None or sim.recorder is not None
            or wl.arrive.k not in ("poisson", "renewal") or wl.session is not None or sim.init_ops
            or prog.claims or sim.pools or sim.engines or sim.flownet is not None or sim.spill_specs):
        return None
    if not 0 < len(prog.server) <= MAX_RUNS or len(wl.turn) > MAX_TURN or any(g for g, _, _ in sim.turn_ops):
        return None
    for s in prog.server:
        if s.k != "run" or len(s.stages) != 1 or s.growing is not None or s.mode is not None:
            return None
    return Queueing(sim)


class Queueing:
    def __init__(self, sim):
        self.sim = sim

    def install(self):
        """Take the arrivals, the jobs' ends and the event loop over from the general path.

        A job's end is the last act of its event (a fifo's), or the ends of a ps's jobs are its
        event's last acts, each session's state final but for the stage's completed count, which
        no expression reads: each session goes on at once, in the order settling would run them
        (Sim.settle after the event), so nothing waits in a ready queue."""
        sim = self.sim
        env = _env(sim)
        exec(compile(_source(sim), "<serq queueing path>", "exec"), env)
        self.arrive, self.done, self.events = env["arrive"], env["done"], env["events"]
        for st, k in _ps_index(sim).items():
            st.qsubmit = env[f"SUBMIT{k}"] = env[f"submit{k}"]
            env["OWNER"][env[f"fire{k}"]] = st.fire  # the watchdog names the stage (Sim._stalled)
        sim._arrive_open = self.arrive
        sim.job_done = self.done
        sim._events = self.events
        for st in sim.stages:  # fifo and ps (delay too): plan() admits no other stage
            st.done = self.done


# ---------------------------------------------------------------- the session's path, as source
# Written once for the program: the arrival (Sim._arrive_open, _arrive_one), the turn (Flat's
# turn_set), each run (sessions.Ops._run's plain run) and the answer and end (turn_end_last),
# statement for statement, with the server's runs unrolled. resume[k] goes on from the k-th run.

def _source(sim) -> str:
    n = len(sim.prog.server)
    lets = _lets(sim)
    lean = _lean(sim)
    out = ["def arrive():",
           "    serial = sim.sessions_arrived",
           f"    if serial >= {int(sim.max_arrivals)}:",
           "        sim.too_many_arrivals()",
           "    sim.sessions_arrived = serial + 1",
           "    sim.next_id += 1",
           "    now = sim.now"]
    if lean is not None:
        out.append("    sess = Customer()")
    else:
        out += ["    a = {'serial': float(serial), 'turn_no': 0.0, 'cached': 0.0, 'computed': 0.0}",
                "    sess = Session(serial, serial, a)"]
    if sim.session_draws:
        out += ["    sess.s = state1(B_SESSION, serial)", "    sess.rng = sess"]
    out.append("    sim.live += 1")
    # the next arrival is scheduled before the session runs, as the general path settles the
    # woken session after the arrival's event; --arrivals N: the N-th schedules none
    if sim.arrivals_n is not None:
        out.append(f"    if serial + 1 < {int(sim.arrivals_n)}:")
    else:
        out.append("    if True:")
    if sim.poisson:  # random.expovariate's own arithmetic, without its call
        out += ["        sim.seq += 1",
                "        heappush(heap, (now - log(1.0 - arrival_random()) / RATE, sim.seq, arrive, None))"]
    else:
        out.append("        sim.at(sim._gap(), arrive)")
    if lets is not None:  # turn_set's, shortened: turn_no is 0 already, no trace
        rates = _exp_rates(sim)
        if sim.turn_draws:  # the turn's stream (rng.stream1(B_TURN, serial << 32)), its state in s
            out += ["    z = (B_TURN ^ (((serial << 32) + 1) * GOLDEN)) & MASK",
                    f"    z = ((z ^ (z >> 30)) * {M1}) & MASK",
                    f"    z = ((z ^ (z >> 27)) * {M2}) & MASK",
                    "    s = z ^ (z >> 31)"]
        for i, name in enumerate(lets):
            into = f"a[{name!r}]" if lean is None else f"L{i}"  # a lean customer's lets are locals
            if rates[i] is not None:  # ~exp of a constant mean: Stream.expovariate written out
                out += ["    s = (s + GOLDEN) & MASK",
                        f"    z = ((s ^ (s >> 30)) * {M1}) & MASK",
                        f"    z = ((z ^ (z >> 27)) * {M2}) & MASK",
                        f"    {into} = -log(1.0 - ((z ^ (z >> 31)) >> 11) * SCALE) / RATE{i}"]
            elif lean is not None:  # a constant
                out.append(f"    {into} = CONST{i}")
            elif sim.turn_draws:  # the let's closure draws from the stream object
                out += ["    turn_stream.s = s", "    sess.rng = turn_stream",
                        f"    a[{name!r}] = LET{i}(sess)", "    s = turn_stream.s"]
            else:
                out.append(f"    a[{name!r}] = LET{i}(sess)")
        if sim.session_draws:
            out.append("    sess.rng = sess")
        elif sim.turn_draws and not all(r is not None for r in rates) and lean is None:
            out.append("    sess.rng = None")
        out += [f"    sess.L{i} = L{i}  # read by a later run" for i in sorted(lean or {}) if lean[i]]
        out.append("    sess.turn_rec = now  # the turn's start: all its record holds here")
    else:
        out += ["    try:", "        turn_set(sess)", "    except SessionEnd as e:",
                "        sim._ended(sess, e.refused)", "        return",
                "    sess.turn_rec = sess.turn_rec.start"]
    out += _runs(sim, 0, "    ")
    for k in range(1, n + 1):
        out += ["", f"def resume{k}(sess):"] + _runs(sim, k, "    ")
    out += ["", "resume = [None] + [" + ", ".join(f"resume{k}" for k in range(1, n + 1)) + "]",
            "", "def done(job):",
            '    """A stage ended a job: the session goes on now (Queueing.install)."""',
            "    sess = job.sess"]
    if n == 1:
        out += _runs(sim, 1, "    ")
    else:
        out.append("    resume[sess.pc](sess)")
    if lean is not None:
        out += _customer(lean)
    return "\n".join(out + _ps_source(sim) + [""] + _loop(sim)) + "\n"


def _ps_index(sim) -> dict:
    """Each ps stage (delay too) and its number k in the source: SUBMITk, FIREk, its pending end Pk."""
    return {st: k for k, st in enumerate(x for x in sim.stages if isinstance(x, PS))}


def _ps_source(sim) -> list:
    """Each ps stage's submit and end (PS.submit, _schedule, _fire) written for the path.

    A job here is its session: (finish tag, sequence number, session) on the stage's heap (no
    preemption takes a job off, so each entry is live until it ends, and its session with it).
    The stage's next end is not pushed onto the event heap but held in Pk (time, sequence number),
    which the loop compares with the heap's head: PS._schedule pushes an event at every arrival
    and departure, and the one it replaces stays on the heap to do nothing when it comes up. Those
    events change nothing but the clock, so the path only notes the latest such time within the
    horizon (SHI: the run's last instant, when it drains after it) and whether one lies beyond it
    (SGT: the run does not drain). The clock's watchdog does not count them (Sim._stalled)."""
    ps = _ps_index(sim)
    n_runs = len(sim.prog.server)
    out = []
    for st, k in ps.items():
        if st.phi is None:
            rate = "1.0"
        elif st.phi_const is not None:
            rate = f"PHI{k} / n"
        else:
            rate = "st._rate()"  # φ(present) / present, its checks with it
        resched = [f"        sim.seq = seq = sim.seq + 1",
                   f"        P{k}T = now + (dt if dt > 0.0 else 0.0)",
                   f"        P{k}S = st.version = seq"]
        out += ["", f"def submit{k}(sess, work):",
                f"    global P{k}T, P{k}S, SHI, SGT",
                f"    st = ST{k}",
                "    now = sim.now",
                "    seq = sim.seq = sim.seq + 1  # the job's number",
                "    n = st.n",
                "    v = st.v",
                "    if n:",
                "        st.v = v = v + st.rate * (now - st.last)",
                "    st.last = now",
                "    st.n = n = n + 1",
                "    h = st.heap",
                "    heappush(h, (v + work, seq, sess))",
                f"    st.rate = rate = {rate}",
                "    busy = st.busy_avg",
                "    if busy.v != 1.0:",
                "        busy.set(now, 1.0)",
                f"    if P{k}T != INF:  # the end it held is replaced",
                f"        if P{k}T <= HZ:",
                f"            if P{k}T > SHI:",
                f"                SHI = P{k}T",
                "        else:",
                "            SGT = True",
                f"        P{k}T = INF",
                "    if rate > 0:",
                "        dt = (h[0][0] - v) / rate"] + resched + [
                "    else:",
                "        st.version = None",
                "",
                f"def fire{k}():",
                f"    global P{k}T, P{k}S",
                f"    st = ST{k}",
                "    now = sim.now",
                "    v = st.v",
                "    n = st.n",
                "    if n:",
                "        v += st.rate * (now - st.last)",
                "    st.last = now",
                "    # the head job has received its work exactly, whatever the rounding of v (PS._fire)",
                "    h = st.heap",
                "    if h and h[0][0] > v:",
                "        v = h[0][0]",
                "    st.v = v",
                "    done = []",
                "    while h and h[0][0] <= v:",
                "        done.append(heappop(h)[2])",
                "        n -= 1",
                "    st.n = n",
                "    if n:",
                f"        st.rate = rate = {rate}",
                "    else:",
                "        st.rate = rate = 0.0",
                "        busy = st.busy_avg",
                "        if busy.v != 0.0:",
                "            busy.set(now, 0.0)",
                "    if h and rate > 0:",
                "        dt = (h[0][0] - v) / rate"] + resched + [
                "    else:",
                "        st.version = None",
                "    after = now >= sim.warmup",
                "    for sess in done:",
                "        st.completed += 1",
                "        if after:",
                "            st.completed_after_warmup += 1"]
        out += _runs(sim, 1, "        ") if n_runs == 1 else ["        resume[sess.pc](sess)"]
    return out


def _loop(sim):
    """Sim._events without what a network of queues never has (engines to start, pools to retry, a
    recorder, sessions to settle: Queueing.install), its gauges (Sim._gauges) written out: a gauge of a stage's queue
    reads the stage's count (Stage.queue_of) without a call, and each gauge's TimeAverage.set is
    written out on locals (its value, last change and integral; its arrays appended to in place),
    put back on the TimeAverage when the loop ends. The next event is popped first, and put back
    when it is past the horizon."""
    n = len(sim.gauges)
    gauges, load, store = [], [], []
    for i, (_, f, _) in enumerate(sim.gauges):
        read = f"float(GST{i}.n)" if getattr(f, "__func__", None) is Stage.queue_of else f"GF{i}(machine)"
        gauges += [f"                v = {read}",
                   f"                if v != gv{i}:",
                   f"                    if gl{i} == now:  # a second change at one instant",
                   f"                        gvals{i}[-1] = v",
                   "                    else:",
                   f"                        ga{i} = ga{i} + gv{i} * (now - gl{i})",
                   f"                        gl{i} = now",
                   f"                        gcum{i}.append(ga{i})",
                   f"                        gt{i}.append(now)",
                   f"                        gvals{i}.append(v)",
                   f"                        if len(gt{i}) >= gcap{i}:",
                   f"                            GAVG{i}._flush()",
                   f"                            gcap{i} = GAVG{i}.cap",
                   f"                    gv{i} = v"]
        load.append(f"    gv{i}, gl{i}, ga{i}, gcap{i} = GAVG{i}.v, GAVG{i}.last, GAVG{i}.acc, GAVG{i}.cap")
        load.append(f"    gt{i}, gvals{i}, gcum{i} = GAVG{i}.t, GAVG{i}.vals, GAVG{i}.cum")
        store.append(f"        GAVG{i}.v, GAVG{i}.last, GAVG{i}.acc = gv{i}, gl{i}, ga{i}")
    ps = list(_ps_index(sim).values())
    if not ps:
        pick = ["        if not heap:",
                "            break",
                "        t, seq, fn, arg = heappop(heap)"]
    elif len(ps) == 1:  # the heap's head or the stage's end, whichever is first
        pick = ["        if heap:",
                "            t, seq, fn, arg = heap[0]",
                "            if P0T < t or (P0T == t and P0S < seq):",
                "                t, seq, fn, arg = P0T, P0S, fire0, None",
                "                P0T = INF",
                "            else:",
                "                heappop(heap)",
                "        elif P0T != INF:",
                "            t, seq, fn, arg = P0T, P0S, fire0, None",
                "            P0T = INF",
                "        else:",
                "            break"]
    else:
        pick = ["        if heap:",
                "            t, seq, fn, arg = heap[0]",
                "        else:",
                "            t, seq = INF, -1",
                "        k = -1"]
        for k in ps:
            pick += [f"        if P{k}T < t or (P{k}T == t and P{k}S < seq):",
                     f"            t, seq, k = P{k}T, P{k}S, {k}"]
        pick += ["        if k < 0:",
                 "            if not heap:",
                 "                break",
                 "            heappop(heap)"]
        for k in ps:
            pick += [f"        elif k == {k}:",
                     f"            fn, arg, P{k}T = fire{k}, None, INF"]
    body = ["    while True:"] + pick + [
            "        if t > now:"] + (["            if True:  # the instant is over: its gauges"] + gauges if n else []) + [
            "            if t > hz:",
            "                heappush(heap, (t, seq, fn, arg))",
            "                break",
            "            now = sim.now = t",
            "        else:  # the watchdog, as Sim._events keeps it",
            "            if stall_t != now:",
            "                stall_t, stall, stall_at = now, 0, STALL",
            "            stall += 1",
            "            if stall > stall_at:",
            "                stall_at = sim._stalled(OWNER.get(fn, fn), arg, stall)"] + (
            [] if ps else ["        sim.event_seq = seq"]) + [
            "        if arg is not None:",
            "            fn(arg)",
            "        else:",
            "            fn()",
            "        if progress is not None and t - last_t > 0:",
            "            progress(sim)",
            "            last_t = t"]
    out = ["def events(progress, hz):"]
    if ps:
        out += ["    global HZ, " + ", ".join(f"P{k}T" for k in ps), "    HZ = hz"]
    out += ["    last_t = 0.0",
           "    now = sim.now",
           "    stall_t, stall, stall_at = None, 0, STALL"] + load
    if n:
        out += ["    try:"] + ["    " + ln for ln in body] + ["    finally:"] + store
    else:
        out += body
    # the run drained: the last instant's gauges (Sim._events reads them before it stops); then
    # the clock as the ps stages' replaced ends would have left it (_ps_source)
    out += ["    if not heap:", "        sim._gauges()"]
    if ps:
        out += ["        if SGT:  # one lies past the horizon: the run has not drained",
                "            heappush(heap, (INF, 0, NOTHING, None))",
                "    if SHI > sim.now:",
                "        sim.now = SHI"]
    return out


def _lean(sim):
    """When no closure of the program reads a session (every let of the turn an ~exp of a constant
    mean or a constant, written out; every run's work one of those lets or a constant; no stage
    picked by an index; no draw of the session's own), its session is a Customer: the turn's start,
    the run it is at, and the lets a later run reads. {let's number: read by a run after the first},
    or None when a session is needed."""
    lets = _lets(sim)
    if lets is None or sim.session_draws:
        return None
    rates = _exp_rates(sim)
    consts = _const_lets(sim)
    if any(r is None and c is None for r, c in zip(rates, consts)):
        return None
    later = {i: False for i in range(len(lets))}
    for j, s in enumerate(sim.prog.server):
        e = s.work.e if s.work.k == "cost" else s.work
        if s.stages[0].index is not None:
            return None
        if e.k == "attr" and e.name in lets:
            later[lets.index(e.name)] |= j > 0
        elif const_value(e) is None:
            return None
    return later


def _const_lets(sim):
    """Each let's value when it is a constant (under cost(…)), else None."""
    out = []
    for st in sim.prog.workload.turn:
        e = st.e.e if st.e.k == "cost" else st.e
        c = const_value(e)
        out.append(float(c) if c is not None else None)
    return out


def _customer(lean) -> list:
    """The session of a program no closure reads it in (_lean): what the path itself reads of it.
    A ps stage reads `alive` of its entries (work_left): a customer is live while it has one."""
    return ["", "class Customer:",
            "    __slots__ = (" + "".join(f"{x!r}, " for x in ["turn_rec", "pc"] + [f"L{i}" for i in sorted(lean) if lean[i]]) + ")",
            "    alive = True"]


def _lets(sim):
    turn = sim.prog.workload.turn
    return [s.name for s in turn] if all(s.k == "set" for s in turn) else None


def _exp_rates(sim):
    """For each let of the turn, its rate when it is ~exp of a constant mean (as the closure
    Compiler._drawn makes for it, through cost(…) and a branch on a constant), else None."""
    out = []
    for st in sim.prog.workload.turn:
        e = st.e
        while e.k in ("cost", "if"):
            if e.k == "cost":
                e = e.e
                continue
            cv = const_value(e.c)
            if cv is None or cv != cv:
                break
            e = e.a if cv != 0 else e.b
        mc = const_value(e.args[0]) if e.k == "draw" and e.dist == "exp" else None
        out.append(1.0 / float(mc) if mc is not None and 0 < mc < INF else None)
    return out


def _runs(sim, k, ind):
    """The runs from the k-th on, then the answer: a run of no work goes on at once."""
    out = []
    lets, lean = _lets(sim), _lean(sim)
    known = set(lets or ()) | {"serial", "turn_no", "cached", "computed"}  # set before any run
    ps = _ps_index(sim)
    for j, s in enumerate(sim.prog.server[k:], start=k):
        stage = f"STAGE{j}" if s.stages[0].index is None else f"PICK{j}(sess)"
        e = s.work.e if s.work.k == "cost" else s.work
        # the work is an attribute the session has: read, as its closure would (Compiler._attr)
        work = f"sess.a[{e.name!r}]" if e.k == "attr" and e.name in known else f"WORK{j}(sess)"
        if lean is not None:  # a let of the arrival's (a local there, on the customer after), or a constant
            i = lets.index(e.name) if e.k == "attr" else None
            work = f"WORKC{j}" if i is None else f"L{i}" if k == 0 else f"sess.L{i}"
        out += [f"{ind}work = {work}",
                f"{ind}if not work >= 0:",
                f"{ind}    sim.amount(work, AT{j}, \"a run's work\")",
                f"{ind}if work > 0:",
                f"{ind}    sess.pc = {j + 1}"]
        member = sim.members(s.stages[0].name)[0]
        if member in ps:  # the stage's own submit (_ps_source); an array's members are all ps
            call = f"SUBMIT{ps[member]}" if s.stages[0].index is None else f"{stage}.qsubmit"
            out.append(f"{ind}    {call}(sess, work)")
        else:
            out += [f"{ind}    st = {stage}",
                    f"{ind}    sim.seq += 1",
                    f"{ind}    st.submit(Job(sess, work, st.alone, sim.seq, None))"]
        out.append(f"{ind}    return")
    # the turn is answered (Sim.turn_end: a run of stages gives no token) and the session ends
    # (Sim._finish: it holds nothing, nothing waits on it)
    end = [f"{ind}sess.turn_rec = None", f"{ind}sess.turn_idx += 1", f"{ind}sess.alive = False"]
    return out + [f"{ind}now = sim.now",
                  f"{ind}response_add(now, now - sess.turn_rec)"] + (end if lean is None else []) + [
                  f"{ind}sim.live -= 1",
                  f"{ind}sim.sessions_completed += 1"]


def _nothing():
    """What stands for a replaced ps end beyond the horizon (_ps_source)."""


def _env(sim) -> dict:
    x = sim.compiler
    env = {"sim": sim, "heap": sim.heap, "heappush": heapq.heappush, "log": log, "Job": Job,
           "Session": sim.Session, "SessionEnd": SessionEnd, "state1": state1, "turn_set": sim.turn_set,
           "B_SESSION": sim.b_session, "B_TURN": sim.b_turn,
           "arrival_random": sim.arrival_rng.random, "RATE": sim.rate if sim.poisson else None,
           "turn_stream": Stream(0), "response_add": sim.c_response.add, "GOLDEN": GOLDEN, "MASK": MASK,
           "SCALE": SCALE}
    from serq.interp.sim import STALL
    env.update(STALL=STALL, heappop=heapq.heappop, machine=sim.machine, INF=INF, HZ=INF, SHI=-INF, SGT=False,
               NOTHING=_nothing, OWNER={})
    for st, k in _ps_index(sim).items():
        env[f"ST{k}"], env[f"PHI{k}"], env[f"P{k}T"], env[f"P{k}S"] = st, st.phi_const, INF, 0
    for i, (_, f, avg) in enumerate(sim.gauges):
        env[f"GST{i}"], env[f"GF{i}"], env[f"GAVG{i}"] = getattr(f, "__self__", None), f, avg
    lets = _lets(sim)
    if lets is not None:
        for i, (s, rate, c) in enumerate(zip(sim.prog.workload.turn, _exp_rates(sim), _const_lets(sim))):
            env[f"LET{i}"] = x.expr(s.e)
            env[f"RATE{i}"] = rate
            env[f"CONST{i}"] = c
    for j, s in enumerate(sim.prog.server):
        t = s.stages[0]
        env[f"WORK{j}"] = x.expr(s.work)
        e = s.work.e if s.work.k == "cost" else s.work
        env[f"WORKC{j}"] = None if const_value(e) is None else float(const_value(e))
        env[f"AT{j}"] = s.at
        if t.index is None:
            env[f"STAGE{j}"] = sim.members(t.name)[0]
        else:
            env[f"PICK{j}"] = x.target(t, s.at)
    return env
