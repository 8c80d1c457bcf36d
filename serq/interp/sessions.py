"""Sessions and their statements (*Semantics*, *The two sides*, *Legs*): each statement compiled
once to an op; a session runs as a generator that yields whenever it blocks."""
from __future__ import annotations

import math

from serq.interp.pools import round_up
from serq.interp.rng import Stream, stream1
from serq.interp.stages import Job
from serq.lang.lower.constants import fmt, whole
from serq.link.rules import expr_nodes

INF = math.inf
MAX_STEPS = 1_000_000
NO_X: dict = {}  # shared and never written: a session's x until a moment needs one
# `yield from ONCE` yields once, as a bare `yield` would; what is thrown in while it waits is raised
# where it stands (an iterator without throw), so a blocking op may return it instead of a generator
ONCE = (None,)


class TurnRec:
    """What the client sees of a turn: its start, its first token, its output tokens, and the gaps
    between them (ITL); the prompt tokens its engines were asked to prefill, the cached prefix its
    holds were admitted with, its preemptions (report.md, *Throughput, ITL and goodput*)."""
    __slots__ = ("start", "first", "ntok", "pf", "last", "gap", "prompt", "cached", "preempted")

    def __init__(self, start):
        self.start = start
        self.first = None
        self.ntok = 0
        self.pf = None  # the end of the last prefill before the first decode token
        self.last = None     # the time of its latest output token from the first on
        self.gap = 0.0       # the longest gap between two of them (read by --slo itl only)
        self.prompt = None   # None until it runs on an engine
        self.cached = 0.0
        self.preempted = 0


class SessionEnd(Exception):
    """`end;`, or a refusal: the session ends where it is."""

    def __init__(self, refused=False):
        super().__init__()
        self.refused = refused


class Preempted(Exception):
    """Thrown into a session whose hold was preempted: the hold executes again."""

    def __init__(self, frame, pos):
        super().__init__()
        self.frame = frame
        self.pos = pos


class Session(Stream):
    # a session is its own evaluation context (a, rng, x and sess, as a Ctx has them)
    # the hot fields in slots; the rare ones (a leg's parent, a trace, the frames of its holds, the
    # generator it waits in, ...) default on the class and are written to the instance's __dict__
    # only when a session uses them: a million waiting sessions fit in memory (issue 12). `sim` is
    # on the class too: each Sim makes its own subclass (Sim.Session). A session that draws is its
    # own stream (Stream's state `s`), one object fewer.
    __slots__ = ("id", "serial", "a", "rng", "pc", "epoch", "wait", "alive", "steps", "ready_at",
                 "ready_n", "turn_idx", "turn_rec", "cid", "__dict__")
    sim = None
    parent = None
    trace = None
    replay = None   # `serq run --workload`: the values its draws take, in order (a list, consumed)
    leg_no = 0
    stuck_pos = None
    fork_at = None
    x = NO_X
    sub = None      # the generator it runs in (a hold, an engine's run: Flat)
    frames: list | tuple = ()  # a list from the first hold on
    leases: list | tuple = ()
    live_legs = 0
    code = None     # its instructions (Flat): the program's, on Sim.Session; a leg's own

    def __init__(self, sid, serial, attrs, parent=None):
        self.id = sid
        self.serial = serial
        self.a = attrs
        self.rng = None
        self.pc = 0
        self.epoch = 0
        self.wait = None
        self.alive = True
        self.steps = 0
        self.ready_at = -1.0
        self.ready_n = 0
        self.turn_idx = 0
        self.turn_rec = None
        # the session whose cached prefix it uses (a pool's cache is keyed by it): a leg shares the
        # request's; fixed as it is made (its id and its parent's never change)
        if parent is not None:
            self.parent = parent
            self.cid = parent.cid
        else:
            self.cid = sid

    def stream(self):
        """The stream its statements draw from (between an init or turn block's): itself, when the
        program's session statements draw (Sim.Session.draws), or a leg's own."""
        return self if self.draws or self.parent is not None else None

    @property
    def c(self):
        """Its evaluation context: itself (the interpreter passes the session, not this property)."""
        return self

    @property
    def sess(self):
        return self

    def xdict(self) -> dict:
        """The context variables of a moment, written just before it reads them."""
        if self.x is NO_X:
            self.x = {}
        return self.x


class HoldFrame:
    """One execution of a hold statement."""
    __slots__ = ("sess", "spec", "members", "allocs", "units", "reserves", "admitted", "join_seq", "join_t", "head",
                 "consumed", "rejected", "done", "pos_prev", "stream", "again")

    def __init__(self, sess, spec):
        self.sess = sess
        self.spec = spec
        self.members = []
        self.allocs = []
        self.units = []
        self.reserves = []
        self.admitted = False
        self.join_seq = 0
        self.join_t = 0.0
        self.head = False
        self.consumed = 0.0
        self.rejected = False
        self.done = False
        self.pos_prev = None
        self.stream = None
        self.again = False  # executed again after a preemption: its prefills and cached prefix are counted once

    def cancel(self):
        """A waiting hold leaves its queue (its session was preempted or ended)."""
        if not self.admitted:
            q = self.members[0].queue if self.members else None
            if q is not None and self in q:
                q.remove(self)


class HoldSpec:
    __slots__ = ("pools", "reuse", "cache", "lease", "body", "at", "has_cache", "content")


def _reads_state(e) -> bool:
    """Units that read the deployment's state are judged at every try; the rest when joining."""
    return any(x.k in ("obs", "ctx", "step", "reg") for x in expr_nodes(e))


def run_sync(sess, ops):
    """A block of statements none of which blocks: no generator needed."""
    for _, op, _ in ops:
        sess.steps += 1
        op(sess)


def run_block(sess, ops):
    """The block's statements as an iterable to `yield from`. A block of one statement is that
    statement's own generator (or nothing, run at once): a live session keeps one generator frame
    fewer per level of nesting, which is most of what a blocked session weighs (issue 12)."""
    if len(ops) == 1:
        is_gen, op, at = ops[0]
        sess.steps += 1
        if sess.steps > MAX_STEPS:
            raise too_many(sess, at)
        if is_gen:
            return op(sess)
        op(sess)
        return ()
    return _run_block(sess, ops)


def _run_block(sess, ops):
    for is_gen, op, at in ops:
        sess.steps += 1
        if sess.steps > MAX_STEPS:
            raise too_many(sess, at)
        if is_gen:
            yield from op(sess)
        else:
            op(sess)


def too_many(sess, at):
    return sess.sim.run_error("R020", f"a session executed {MAX_STEPS:,} statements without blocking", at)


class Ops:
    """Compiles IR statements to ops: (is_generator, function of the session)."""

    def __init__(self, sim, side: str = "session"):
        self.sim = sim
        self.x = sim.compiler
        self.side = side  # a server's `end;` refuses the request

    def block(self, stmts):
        """The ops of a block: (is_generator, function of the session, where the statement is)."""
        return [self.stmt(s) + (s.at,) for s in stmts]

    def stmt(self, s):
        return getattr(self, "_" + s.k)(s)

    def straight(self, stmts):
        """A block of sets and observes as one generated function of the session, each statement
        its op's operations in its order (the expression written out as Compiler.expr writes it,
        with the same fallback to the closures on a read that misses), or None for any other
        block. Its caller counts the statements' steps as it counts the ops'."""
        if not stmts or any(s.k not in ("set", "observe") for s in stmts):
            return None
        from serq.interp.compile import _Source
        x = self.x
        gen = _Source(x)
        lines = ["def _blk(sess):", "    a = sess.a", "    c = sess"]
        for s in stmts:
            lines.append(f"    sim.cur_at = {gen.name(s.at)}")
            got = x.source(s.e, gen)
            if got is None:
                lines.append(f"    v = {gen.name(x.expr(s.e))}(c)")
            elif got[1] is None:
                lines.append(f"    v = {got[0]}")
            else:
                lines += ["    try:", f"        v = {got[0]}", "    except KeyError:",
                          f"        v = {gen.name(got[1])}(c)"]
            lines.append(f"    a[{s.name!r}] = v" if s.k == "set" else f"    sim.observe({s.name!r}, v, sess)")
        env = gen.env
        try:
            exec(compile("\n".join(lines) + "\n", "<serq statements>", "exec"), env)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            return None
        return env["_blk"]

    def _err(self, code, msg, at):
        return self.x.error(code, msg, at)

    # -- simple statements
    def _set(self, s):
        f = self.x.expr(s.e)
        name = s.name
        sim = self.sim

        def op(sess):
            sim.cur_at = s.at
            sess.a[name] = f(sess)
        return (False, op)

    def _observe(self, s):
        f = self.x.expr(s.e)
        name = s.name
        sim = self.sim

        def op(sess):
            sim.cur_at = s.at
            sim.observe(name, f(sess), sess)
        return (False, op)

    def _choose(self, s):
        n_f = self.x.expr(s.n)
        keys = [self.x.expr(k) for k in s.keys]
        name = s.name
        err = self._err

        def op(sess):
            n = n_f(sess)
            if not whole(n, 1):
                raise err("R005", f"choose picks among a whole number >= 1 of indices, not {fmt(n)}", s.at)
            best = None
            for j in range(int(n)):
                sess.a[name] = float(j)
                k = tuple(kf(sess) for kf in keys) + (j,)  # the keys, in order, then the smallest index
                if best is None or k < best:
                    best = k
            sess.a[name] = float(best[-1])
        return (False, op)

    def _end(self, s):
        refused = self.side == "server"

        def op(sess):
            raise SessionEnd(refused)
        return (False, op)

    def _drop(self, s):
        tgt = self.x.target(s.pool, s.at)

        def op(sess):
            tgt(sess).drop(sess)
        return (False, op)

    def _release(self, s):
        tgt = self.x.target(s.pool, s.at)
        sim = self.sim

        def op(sess):
            sim.release_stmt(sess, tgt(sess), s.at)
        return (False, op)

    def _load(self, s):
        tgt = self.x.target(s.pool, s.at)
        f = self.x.expr(s.e)
        sim = self.sim

        def op(sess):
            n = sim.amount(f(sess), s.at, "a load")
            sim.load(sess, tgt(sess), n, s.at)
        return (False, op)

    def _grow(self, s):
        tgt = self.x.target(s.pool, s.at)
        f = self.x.expr(s.e)
        sim = self.sim

        def op(sess):
            d = sim.amount(f(sess), s.at, "a grow")
            pool = tgt(sess)
            a = sim.innermost(sess, pool, s.at, "grow")
            yield from sim.grow(sess, a, round_up(a.units + d, pool.block) - a.units, s.at)
        return (True, op)

    # -- control
    def _guard(self, f, at):
        err = self._err

        def g(c):
            v = f(c)
            if v == 1.0:
                return True
            if v == 0.0:
                return False
            raise err("R006", f"a guard is 0 or 1, not {fmt(v)}: a test has two answers", at)
        return g

    # a blocking op returns what its caller runs with `yield from`: a generator, or the block's own
    # iterable; the loops run their bodies in their own frame (no generator per pass)
    def _branch(self, s):
        g = self._guard(self.x.expr(s.cond), s.at)
        then, else_ = self.block(s.then), self.block(s.else_)

        def op(sess):
            return run_block(sess, then if g(sess) else else_)
        return (True, op)

    def _while(self, s):
        return self._repeat(self._guard(self.x.expr(s.cond), s.at), s.body)

    def _loop(self, s):
        return self._repeat(lambda c: True, s.body)

    def _repeat(self, g, stmts):
        """The body again while g holds, run in the loop's own frame (a blocked session keeps no
        generator of a block between)."""
        body = self.block(stmts)
        n = len(body)

        def op(sess):
            while g(sess):
                i = 0  # by index: no list iterator kept while a statement blocks
                while i < n:
                    is_gen, f, at = body[i]
                    i += 1
                    sess.steps += 1
                    if sess.steps > MAX_STEPS:
                        raise too_many(sess, at)
                    if is_gen:
                        yield from f(sess)
                    else:
                        f(sess)
        return (True, op)

    def _fork(self, s):
        body = self.block(s.body)
        sim = self.sim

        def op(sess):
            sim.fork(sess, body, s.at)
            sess.fork_at = s.at
        return (False, op)

    def _join(self, s):
        def op(sess):
            if sess.live_legs:
                sess.wait = "join"
                sess.fork_at = s.at
                sess.sim.joining[sess.id] = sess
                return ONCE
            return ()
        return (True, op)

    def _turn(self, s):
        sim = self.sim

        def op(sess):
            return sim.turn(sess, s.at)
        return (True, op)

    # -- runs
    def _run(self, s):
        tgts = [self.x.target(t, s.at) for t in s.stages]
        f = self.x.expr(s.work)
        sim = self.sim
        grow_t = self.x.target(s.growing, s.at) if s.growing is not None else None
        mode = s.mode
        if mode is not None:
            return (True, sim.engine_run_op(s, tgts[0], f, grow_t))
        if grow_t is None and len(tgts) == 1:
            t0 = tgts[0]
            at = s.at

            def plain(sess):  # the common run: one stage, nothing grows
                c = sess
                work = f(c)
                if not work >= 0:
                    sim.amount(work, at, "a run's work")
                if work > 0:
                    st = t0(c)
                    sim.seq += 1
                    job = Job(sess, work, st.alone, sim.seq, sim.now)
                    sess.wait = job
                    st.submit(job)
                    return ONCE  # blocks once, with no generator frame kept while it waits
                return ()
            return (True, plain)

        def op(sess):
            sim.cur_at = s.at
            work = sim.amount(f(sess), s.at, "a run's work")
            stages = [t(sess) for t in tgts]
            a = None
            if grow_t is not None:  # the hold grows with the run: to the position it will reach
                pool = grow_t(sess)
                a = sim.innermost(sess, pool, s.at, "growing")
                target = a.pos + work
                if target > a.units:
                    yield from sim.grow(sess, a, round_up(target, pool.block) - a.units, s.at)
                if a.blks is not None:
                    pool.publish(a, target)
            if work > 0:
                sim.seq += 1
                job = Job(sess, work, stages, sim.seq, sim.now)
                sess.wait = job
                stages[0].submit(job)
                yield
            if a is not None:
                a.pos += work
                a.advanced = True  # the position, not the allocation, is what it computed
        return (True, op)

    # -- holds
    def _hold(self, s):
        spec = self.hold_spec(s)
        sim = self.sim

        def op(sess):
            return sim.hold(sess, spec)
        return (True, op)

    def hold_spec(self, s):
        """A hold statement compiled: its pools' targets, units and reserves, its clauses, its body."""
        x = self.x
        spec = HoldSpec()
        spec.pools = []
        for hp in s.pools:
            spec.pools.append((x.target(hp.pool, s.at), x.expr(hp.units),
                               x.expr(hp.reserve) if hp.reserve is not None else None,
                               (not _reads_state(hp.units), hp.reserve is not None and not _reads_state(hp.reserve))))
        spec.reuse = x.expr(s.reuse) if s.reuse is not None else None
        spec.cache = x.expr(s.cache) if s.cache is not None else None
        spec.has_cache = s.cache is not None
        spec.content = None
        if s.content is not None:  # (stream, parent, at), each read as the hold joins
            ct = s.content
            spec.content = (x.expr(ct.stream), x.expr(ct.parent) if ct.parent is not None else None,
                            x.expr(ct.at) if ct.at is not None else None)
        spec.lease = None
        if s.lease is not None:
            li = next(i for i, hp in enumerate(s.pools) if hp.pool.name == s.lease.pool.name)
            spec.lease = (li, x.expr(s.lease.duration))
        spec.body = self.block(s.body)
        spec.at = s.at
        return spec


# A flat program is a list of (instruction, where): `where` is the statement's place when the
# instruction is a statement's (counted toward MAX_STEPS), None for a jump or a turn's bookkeeping.
# An instruction returns None (go on), an int (go there), BLOCK (the session waits and resumes at
# the next instruction), or what a blocking op of Ops returns: ONCE (waits once), () (did not
# wait) or a generator (a hold, an engine's run) that the session runs to its end first.
BLOCK = object()


class Flat:
    """A session's top level as one flat list of instructions, run from an index (issue 12): the
    statements outside any hold (init, the session block, each turn and the server's statements
    it expands to, *Workload*) keep no generator frame while they wait, only the index. Control
    flow becomes jumps; a hold, an engine's run, a multi-stage or growing run and a grow stay
    generators (Ops), run to their end from the instruction that starts them. Statements count
    toward MAX_STEPS as run_block counts them, so a session that never blocks fails where it did."""

    def __init__(self, sim):
        self.sim = sim
        self.ops = {"session": Ops(sim), "server": Ops(sim, "server")}
        sim.turn_set = self._turn_set()  # a turn inside a hold (Sim.turn) runs it too

    def block(self, code: list, stmts, side: str):
        for s in stmts:
            self.stmt(code, s, side)

    def stmt(self, code: list, s, side: str):
        k = s.k
        if k == "branch":
            return self._branch(code, s, side)
        if k in ("while", "loop"):
            return self._repeat(code, s, side)
        if k == "turn" and side == "session":
            at = s.at
            code.append((lambda sess: self.sim.turn_begin(sess, at), at))
            return self.turn_rest(code)
        ops = self.ops[side]
        _, op = ops.stmt(s)
        code.append((op, s.at))  # None, or what a blocking op returns: Sim._drain tells them apart

    def _branch(self, code, s, side):
        ops = self.ops[side]
        g = ops._guard(ops.x.expr(s.cond), s.at)
        i = len(code)
        code.append(None)
        self.block(code, s.then, side)
        j = len(code)
        if s.else_:
            code.append(None)
            self.block(code, s.else_, side)
            end = len(code)
            code[j] = (lambda sess: end, None)  # the then-block's end jumps over the else-block
            j += 1
        else_at = j

        def br(sess):
            return None if g(sess) else else_at
        code[i] = (br, s.at)

    def _repeat(self, code, s, side):
        ops = self.ops[side]
        g = ops._guard(ops.x.expr(s.cond), s.at) if s.k == "while" else None
        i = len(code)
        code.append(None)
        self.block(code, s.body, side)
        first = i + 1
        end = len(code) + 1
        if g is None:
            code.append((lambda sess: first, None))

            def enter(sess):
                return None
        else:
            code.append((lambda sess: first if g(sess) else end, None))  # the guard again, not a statement

            def enter(sess):
                return None if g(sess) else end
        code[i] = (enter, s.at)

    def _turn_set(self):
        """A turn's attributes (its trace row's, turn_no, the turn block's draws) and its record."""
        sim = self.sim
        trace = sim.trace is not None
        ops = sim.turn_ops
        # one op, or the block as one generated function (Ops.straight): its steps as run_sync counts them
        one = ops[0][1] if len(ops) == 1 else Ops(sim).straight(sim.prog.workload.turn) if ops else None
        steps = len(ops)
        draws, b_turn = sim.turn_draws, sim.b_turn

        def turn_set(sess):
            if trace:
                sim.trace_row(sess)
            t = sess.turn_idx
            sess.a["turn_no"] = float(t)
            if ops:
                sess.rng = stream1(b_turn, (sess.serial << 32) | t) if draws else None
                if one is not None:
                    sess.steps += steps
                    one(sess)
                else:
                    run_sync(sess, ops)
                sess.rng = sess.stream()
            sess.turn_rec = TurnRec(sim.now)
        return turn_set

    def turn_rest(self, code: list, last: bool = False):
        """What follows a turn's start: the turn block, the server's statements, the answer (and,
        `last`, the session's end: the one turn of a workload without a session block)."""
        sim = self.sim
        code.append((sim.turn_set, None))
        self.block(code, sim.prog.server, "server")
        if not last:
            code.append((sim.turn_end, None))
            return

        def turn_end_last(sess):
            sim.turn_end(sess)
            sim._finish(sess, False)
            return BLOCK  # ended: never resumed
        code.append((turn_end_last, None))
