"""The executable semantics of the fragment, definition for definition lean/Serq/Exec.lean
(docs/lean.md has the table of twins). Pure functions over immutable state: every function takes
the program and a machine and returns a new machine. Values and times are rationals, computed
exactly (serq/ref/num.py: 7 / 2 is 7/2, a decimal cost is the rational it writes); amounts (units,
tokens) are naturals, and a value the interpreter would give that no rational is (x / 0) or that
no amount is (a fraction of a token) is refused (F016), never rounded; `None` is inf where a cap or
a budget may be one. No speed tricks: the run is `step` applied until nothing is left or the fuel
runs out.

The order of everything follows the reference's *Ties* and the interpreter's settling (*Events and
settling*): events by time then the order they were scheduled, sessions in the order they became
ready, an engine starting its iteration once no other event is pending at its instant.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from serq.ref import ir as R
from serq.ref.num import nat_of, q, qabs, qceil, qdiv, qfloor, qmod, qround


def replace(record, /, **changes):
    """Lean's structure update `{ record with f := v, ... }`: the record's fields, the named ones
    changed. What dataclasses.replace does for these records (plain fields, no __post_init__),
    without running the class's __init__ again, which was a fifth of a proof's CPU time in serq
    verify (bari_tiling.sq). A name that is not a field is refused, as there."""
    fields = record.__dict__
    for name in changes:
        if name not in fields:
            raise TypeError(f"{type(record).__name__} has no field {name!r}")
    new = object.__new__(type(record))
    d = new.__dict__
    d.update(fields)
    d.update(changes)
    return new


class KernelError(Exception):
    """A run-time error of the program (the interpreter's R-codes): the kernel stops."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


# ---------------------------------------------------------------- the machine (Lean: Serq.Machine)


@dataclass(frozen=True)
class Req:
    """A run on the engine: its request id, session, mode, tokens left, growing pool, admission."""
    rid: int
    sid: int
    mode: str
    left: int
    growing: Optional[int]
    adm: int
    it: int = 0                # the iteration that served it last (0: none; iterations count from 1)


@dataclass(frozen=True)
class Alloc:
    sid: int
    units: int
    pos: int
    consumed: int
    advanced: bool = False     # a growing run moved the position
    reserve: int = 0           # the hold's reserve on the pool, which `reserve held` keeps
    blks: Optional[tuple] = None  # on a content pool, a hold with a content: its blocks (ids), in order
    stream: object = 0         # that content's stream
    nhash: int = 0             # its blocks published so far (the first nhash are keyed)


@dataclass(frozen=True)
class Entry:
    """A cached prefix: its owner (None: dead), units, release time and release order."""
    owner: Optional[int]
    units: int
    t: int
    seq: int


@dataclass(frozen=True)
class QItem:
    sid: int
    seq: int
    t: int
    head: bool


@dataclass(frozen=True)
class PoolSt:
    used: int = 0
    allocs: tuple = ()         # Alloc, in admission order
    entries: tuple = ()        # Entry, in release order
    queue: tuple = ()          # QItem
    # a content pool's (docs/reference/content.md): the published blocks, (key, block id) in the
    # order they were published (a key's oldest first), the key (origin, index); the cached blocks no
    # holder references, in eviction order (vLLM's free queue); the last block id given
    table: tuple = ()
    free_q: tuple = ()
    next_blk: int = 0


@dataclass(frozen=True)
class TurnRec:
    """What a request (a turn) did: its start, first and last token times, preemptions, hit."""
    start: int
    first: Optional[int] = None
    pf: Optional[int] = None
    last: Optional[int] = None
    preemptions: int = 0
    cached: Optional[int] = None
    ntok: int = 0                  # its output tokens: each prefill's sampled one and each decode token


# frames of a session's continuation (the top is the last)
@dataclass(frozen=True)
class Blk:
    stmts: tuple


@dataclass(frozen=True)
class Loop:
    w: R.WhileS


@dataclass(frozen=True)
class Scope:
    """The end of a hold's body: release it."""
    h: R.HoldS


@dataclass(frozen=True)
class TurnGo:
    row: Optional[R.Row]


@dataclass(frozen=True)
class TurnEnd:
    pass


@dataclass(frozen=True)
class Given:
    pass


@dataclass(frozen=True)
class Sess:
    sid: int
    attrs: tuple               # (name, value) pairs
    cont: tuple                # frames
    rows: tuple = ()
    row_i: int = 0
    draws: tuple = ()
    draw_i: int = 0
    turn_idx: int = 0
    eng_adm: int = 0
    hold: Optional[R.HoldS] = None   # the hold it waits for or holds
    held: bool = False
    retry: Optional[int] = None      # a preempted hold's computed position, read when it runs again
    at_run: Optional[int] = None     # the request id it waits for
    rec: Optional[TurnRec] = None
    alive: bool = True
    at_stage: Optional[int] = None   # the ps stage it is a job at
    tail: bool = False               # its preempted hold re-enters its queue as a newcomer (requeue tail)
    stream: object = None            # the stream its latest hold with a content named (content pools' cachedin)


@dataclass(frozen=True)
class Plan:
    """The iteration being planned."""
    budget: Optional[int]
    chunk: Optional[int]
    granule: Optional[int]
    admit_cap: Optional[int] = None
    stop: bool = False
    no_admit: bool = False
    batch: tuple = ()          # (rid, tokens) in the order served
    just: tuple = ()           # request ids an admission just brought


@dataclass(frozen=True)
class Eng:
    reqs: tuple = ()           # Req, in admission order
    busy: bool = False
    want: bool = False
    served_total: int = 0
    adm_seq: int = 0
    iter_no: int = 0
    iterations: int = 0
    regs: tuple = ()
    vars: tuple = ()           # the running.* and iteration values
    bvars: tuple = ()          # the batch's Ndec, Kvb, Kvp
    plan: Optional[Plan] = None
    batch: tuple = ()          # the iteration in flight: (rid, tokens)


@dataclass(frozen=True)
class PsSt:
    """A ps stage's state (*Stages*): its virtual time v, the work each present job has received,
    as of `last`, each job's rate since, and its jobs (finish tag, start order, session) in the
    order they started; `ev` the sequence number of the event set for the next end."""
    v: object = 0
    last: object = 0
    rate: object = 0
    jobs: tuple = ()
    ev: Optional[int] = None
    started: int = 0


@dataclass(frozen=True)
class Machine:
    now: int
    events: tuple              # (t, seq, kind, arg), sorted
    seq: int
    ready: tuple               # session ids
    sess: tuple                # Sess, by serial
    pools: tuple               # PoolSt
    eng: Eng
    wl: R.Workload
    rel_seq: int = 0
    join_seq: int = 0
    rid_seq: int = 0
    arrived: int = 0
    obs: tuple = ()            # (name, value, t, sid, turn)
    path: tuple = ()           # per iteration: (t, the machine its claims read: claim_value)
    given: tuple = ()          # (sid, attrs after init)
    requests: tuple = ()       # (sid, turn, TurnRec)
    client: tuple = ()         # (metric, value): the client's samples in the order recorded (*What the client sees*)
    ps: tuple = ()             # PsSt, one per Program.stages
    streams: tuple = ()        # (stream, (parent, at)): each stream named so far, at 0 for its own tokens


@dataclass(frozen=True)
class Env:
    """What an expression reads besides the machine: a session's attributes and id, the moment's
    context variables."""
    attrs: Optional[tuple] = None
    sid: Optional[int] = None
    x: tuple = ()
    start: bool = False        # an `each at most`: the residents as the iteration started


# ---------------------------------------------------------------- small helpers

# the bounds that make every definition total (Lean: exprFuel, sessFuel, ...): far above any run's
EXPR_FUEL = 1000            # an expression's depth
SESS_FUEL = 1_000_000       # frames a session runs without blocking
GROW_FUEL = 100_000         # preemptions one growth makes
ADMIT_FUEL = 100_000        # admissions from one queue in one iteration
SETTLE_FUEL = 1_000_000     # sessions one settling runs
BODY_FUEL = 100_000         # statements one iteration's schedule runs


def out_of_fuel(what: str):
    raise KernelError("R020", f"{what} ran out of fuel")



def lookup(pairs: tuple, name: str):
    for k, v in pairs:
        if k == name:
            return v
    return None


def assign(pairs: tuple, name: str, v) -> tuple:
    out = tuple((k, w) for k, w in pairs if k != name)
    return out + ((name, v),)


def put(t: tuple, i: int, v) -> tuple:
    """The tuple with its i-th element replaced; past its end, the tuple as it is (Lean's `put`)."""
    if not 0 <= i < len(t):
        return t
    return t[:i] + (v,) + t[i + 1:]


def round_up(u: int, b: int) -> int:
    return u if b == 0 else (u + b - 1) // b * b


def round_down(u: int, b: int) -> int:
    return u if b == 0 else u // b * b


def omin(a: Optional[int], b: Optional[int]) -> Optional[int]:
    """The least of two caps, None being inf."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def sess_env(m: Machine, sid: int, x: tuple = ()) -> Env:
    return Env(m.sess[sid].attrs, sid, x)


def set_sess(m: Machine, s: Sess) -> Machine:
    return replace(m, sess=put(m.sess, s.sid, s))


def set_pool(m: Machine, i: int, st: PoolSt) -> Machine:
    return replace(m, pools=put(m.pools, i, st))


def set_eng(m: Machine, **kw) -> Machine:
    return replace(m, eng=replace(m.eng, **kw))


def set_plan(m: Machine, **kw) -> Machine:
    return set_eng(m, plan=replace(m.eng.plan, **kw))


def set_var(m: Machine, name: str, v: int) -> Machine:
    return set_eng(m, vars=assign(m.eng.vars, name, v))


def schedule(m: Machine, t: int, kind: str, arg) -> Machine:
    ev = (t, m.seq + 1, kind, arg)
    return replace(m, seq=m.seq + 1, events=tuple(sorted(m.events + (ev,), key=lambda e: (e[0], e[1]))))


def wake(m: Machine, sid: int) -> Machine:
    return replace(m, ready=m.ready + (sid,))


def want(m: Machine) -> Machine:
    return set_eng(m, want=True)


def find_req(m: Machine, rid: int) -> Optional[Req]:
    for r in m.eng.reqs:
        if r.rid == rid:
            return r
    return None


def find_alloc(m: Machine, pool: int, sid: int) -> Optional[Alloc]:
    for a in m.pools[pool].allocs:
        if a.sid == sid:
            return a
    return None


def set_alloc(m: Machine, pool: int, a: Alloc) -> Machine:
    st = m.pools[pool]
    return set_pool(m, pool, replace(st, allocs=tuple(a if b.sid == a.sid else b for b in st.allocs)))


def cached_units(st: PoolSt, block: int = 0) -> int:
    """The units cached: the entries', and a content pool's free queue's blocks."""
    return sum(e.units for e in st.entries) + len(st.free_q) * block


# ---------------------------------------------------------------- expressions


def eval_expr(p: R.Program, m: Machine, env: Env, e, fuel: int = EXPR_FUEL):
    """The value of an expression, a rational computed exactly; fuel bounds its depth (Lean:
    evalExpr, eval)."""
    if fuel == 0:
        out_of_fuel("an expression")
    fuel -= 1
    if isinstance(e, R.Num):
        return e.v
    if isinstance(e, R.Attr):
        v = lookup(env.attrs or (), e.name)
        if v is None:
            raise KernelError("R001", f"`{e.name}` is read before it is set")
        return v
    if isinstance(e, R.Ctx):
        if e.name == "now":
            return m.now
        v = lookup(env.x, e.name)
        if v is None:
            raise KernelError("R002", f"`{e.name}` has no value here")
        return v
    if isinstance(e, R.StepVar):
        if e.name in RUNNING and not e.batch and m.eng.plan is not None and not env.start:
            # while an iteration is planned, a key, an only and a guard read the residents as they
            # stand at that read (*The iteration as a program*)
            return lookup(running_values(p, m), e.name)
        v = lookup(m.eng.bvars if e.batch and e.name in ("Ndec", "Kvb", "Kvp") else m.eng.vars, e.name)
        return 0 if v is None else v
    if isinstance(e, R.Reg):
        return lookup(m.eng.regs, e.name)
    if isinstance(e, R.Obs):
        return eval_obs(p, m, env, e, fuel)
    if isinstance(e, R.Agg):
        return eval_agg(m, e)
    if isinstance(e, R.Not):
        return 1 if eval_expr(p, m, env, e.e, fuel) == 0 else 0
    if isinstance(e, R.Bin):
        return eval_bin(e.op, eval_expr(p, m, env, e.l, fuel), eval_expr(p, m, env, e.r, fuel))
    if isinstance(e, R.Ite):
        c = eval_expr(p, m, env, e.c, fuel)
        return eval_expr(p, m, env, e.a, fuel) if c != 0 else eval_expr(p, m, env, e.b, fuel)
    if isinstance(e, R.Fn):
        return eval_fn(e.name, [eval_expr(p, m, env, a, fuel) for a in e.args])
    raise AssertionError(e)


def refuse(what: str):
    """A value no rational is, where the interpreter's is inf or NaN (a division by 0): the kernel
    refuses the workload (F016) rather than give it another (docs/lean.md, *Arithmetic*)."""
    raise KernelError("F016", f"{what}: no rational is the interpreter's value")


def eval_bin(op: str, l, r):
    """Rational arithmetic, exact: `/` is the quotient, `%` the interpreter's fmod; a division by 0
    (the interpreter's inf or NaN) is refused (F016), never given a value (*Amounts and indices*)."""
    if op == "+":
        return q(l + r)
    if op == "-":
        return q(l - r)
    if op == "*":
        return q(l * r)
    if op in ("/", "%"):
        if r == 0:
            refuse(f"{l} {op} 0 is inf or NaN to the interpreter")
        return qdiv(l, r) if op == "/" else qmod(l, r)
    # only the operator's own test is made: serq/verify runs this on values that record each test
    return int(_TESTS[op](l, r))


_TESTS = {"==": lambda l, r: l == r, "!=": lambda l, r: l != r, "<": lambda l, r: l < r,
          "<=": lambda l, r: l <= r, ">": lambda l, r: l > r, ">=": lambda l, r: l >= r,
          "&&": lambda l, r: l != 0 and r != 0, "||": lambda l, r: l != 0 or r != 0}


def eval_fn(name: str, vs: list):
    """The catalogue's functions on rationals: floor, ceil, round (half up) and abs exactly;
    `reusable(n, b)` the whole blocks of n tokens but the last, floor((n - 1) / b) * b."""
    if name == "min":
        return min(vs)
    if name == "max":
        return max(vs)
    if name == "sum":
        return q(sum(vs))
    if name == "reusable":
        n, b = vs
        if b <= 0:
            refuse(f"`reusable` of a block of {b} is NaN to the interpreter")
        return q(qfloor(qdiv(n - 1, b)) * b) if n >= 1 else 0
    if name == "floor":
        return qfloor(vs[0])
    if name == "ceil":
        return qceil(vs[0])
    if name == "round":
        return qround(vs[0])
    return qabs(vs[0])


def amount(v, what: str, code: str = "R007") -> int:
    """The natural an amount is (units, tokens, a reserve, a budget): a negative one is the
    program's run error, as the interpreter's (R007, *Amounts and indices*); a fraction is refused
    (F016): the kernel's units and tokens are whole, and it does not round them."""
    why = nat_of(v)
    if why == "negative":
        raise KernelError(code, f"{what} is an amount, not negative: this one is {v}")
    if why is not None:
        refuse(f"{what} of {v}, not a whole number of units or tokens")
    return qfloor(v)


def pool_index(p: R.Program, name: str) -> int:
    for i, pool in enumerate(p.pools):
        if pool.name == name:
            return i
    raise AssertionError(name)


def eval_obs(p: R.Program, m: Machine, env: Env, e: R.Obs, fuel: int = EXPR_FUEL) -> int:
    fn = e.fn
    if e.of == p.engine.name:
        if fn in ("queue", "busy"):
            n = len(m.eng.reqs)
            return n if fn == "queue" else int(n > 0)
        if fn == "work":
            return sum(r.left for r in m.eng.reqs)
        if fn == "budget_left":
            return budget_left(p, m, fuel)   # the tokens cap read within the expression's fuel (Lean)
        raise KernelError("R002", f"`{fn}({e.of})` has no value here")
    i = pool_index(p, e.of)
    st = m.pools[i]
    if fn == "used":
        return st.used
    if fn == "free":
        cap = p.pools[i].cap
        if cap is None:
            raise KernelError("R002", f"`free({e.of})` of a pool with no cap")
        return max(0, cap - st.used)
    if fn == "holders":
        return len({a.sid for a in st.allocs})
    if fn == "queued":
        return len(st.queue)
    if fn == "cachedin":
        if p.pools[i].content:   # the run of cached blocks of the session's stream (content.md, *The hit*)
            stream = m.sess[env.sid].stream if env.sid is not None else None
            return 0 if stream is None else len(hit_run(p, m, i, stream, None)) * p.pools[i].block
        return sum(x.units for x in st.entries if env.sid is not None and x.owner == env.sid)
    raise KernelError("R002", f"`{fn}({e.of})` has no value here")


def budget_left(p: R.Program, m: Machine, fuel: int = EXPR_FUEL) -> int:
    """The tokens the iteration being planned has left, within the admission's `each at most`."""
    pl = m.eng.plan
    v = omin(pl.budget, pl.admit_cap) if pl is not None else (
        budget_of(p, m, fuel) if p.engine.budget is not None else None)
    if v is None:
        raise KernelError("R002", "`budget_left` of an engine with no tokens cap and no chunk cap")
    return v


def budget_of(p: R.Program, m: Machine, fuel: int = EXPR_FUEL) -> int:
    """The engine's tokens cap, read now: a number of tokens >= 0 (the interpreter's R110)."""
    return amount(eval_expr(p, m, Env(), p.engine.budget, fuel), "the tokens cap", "R110")


def answered(m: Machine, rec: TurnRec) -> tuple:
    """The client's samples a turn answered now records: its response; its ttft when its first token
    is its last prefill's (no decode token); its tpot when it has an output token after the first
    (*What the client sees*)."""
    out = (("response", q(m.now - rec.start)),)
    first = rec.first
    if first is None and rec.pf is not None:
        first = rec.pf
        out += (("ttft", q(first - rec.start)),)
    if rec.ntok > 1 and first is not None:
        out += (("tpot", qdiv(m.now - first, rec.ntok - 1)),)
    return out


def eval_agg(m: Machine, e: R.Agg):
    if e.name in R.CLIENT_METRICS:
        vs = [v for n, v in m.client if n == e.name]
    else:
        vs = [v for n, v, _, _, _ in m.obs if n == e.name]
    if e.fn == "total":
        return q(sum(vs))
    if e.fn == "count":
        return len(vs)
    if e.fn == "largest":
        return max(vs, default=0)
    if e.fn == "smallest":
        return min(vs, default=0)
    acc = tot = 0  # prefix_total: Σ_k (v_1 + … + v_k) over the values sorted ascending
    for v in sorted(vs):
        acc += v
        tot += acc
    return q(tot)


def guard(p: R.Program, m: Machine, env: Env, e) -> bool:
    """A test has two answers (*Branching*)."""
    v = eval_expr(p, m, env, e)
    if v not in (0, 1):
        raise KernelError("R006", f"a guard is 0 or 1, not {v}")
    return v == 1


# ---------------------------------------------------------------- pools


def held_extra(p: R.Program, m: Machine, i: int) -> int:
    """What the holders reserved and have not allocated, which `reserve held` counts against the
    pool's later admissions and growths: Σ max(0, reserve - units) (*Pools*)."""
    if not p.pools[i].reserve_held:
        return 0
    return sum(max(0, a.reserve - a.units) for a in m.pools[i].allocs)


def room_for(p: R.Program, m: Machine, i: int, r: int) -> bool:
    cap = p.pools[i].cap
    return cap is None or m.pools[i].used + held_extra(p, m, i) + r <= cap


def make_room(p: R.Program, m: Machine, i: int, need: int) -> Machine:
    """Evict cached entries least recently released first, per block from an entry's tail, until
    allocations and cache fit (*Pools*)."""
    cap, block = p.pools[i].cap, p.pools[i].block
    st = m.pools[i]
    if cap is None:
        return m
    over = st.used + cached_units(st, block) + need - cap
    if over <= 0:
        return m
    if p.pools[i].content:   # from the front of the free queue (content.md, *Eviction*)
        fq, table = evict_free(block, over, st.table, st.free_q)
        return set_pool(m, i, replace(st, free_q=fq, table=table))
    entries = st.entries
    for e in sorted(st.entries, key=lambda e: (e.t, e.seq)):
        if over <= 0:
            break
        take = min(e.units, round_up(over, block)) if block and e.units > over else e.units
        entries = evict_units(entries, e, take)
        over -= take
    return set_pool(m, i, replace(st, entries=entries))


def evict_units(entries: tuple, e: Entry, take: int) -> tuple:
    """Evict `take` units of one entry; the entry goes when nothing is left of it."""
    return tuple(x if x.seq != e.seq else replace(x, units=x.units - take) for x in entries
                 if x.seq != e.seq or x.units - take > 0)


def consume(p: R.Program, m: Machine, i: int, sid: int, rho: Optional[int], units: int) -> tuple:
    """At admission with a cache clause: at most rho of the own prefix, in blocks; the rest of the
    entry stays cached, dead, with its age. Returns (machine, units consumed)."""
    st = m.pools[i]
    own = [e for e in st.entries if e.owner == sid]
    if not own:
        return m, 0
    e = own[0]
    take = round_down(min(e.units if rho is None else min(rho, e.units), units), p.pools[i].block)
    rest = e.units - take
    entries = tuple((replace(x, owner=None, units=rest) if x is e else x) for x in st.entries
                    if not (x is e and rest <= 0))
    return set_pool(m, i, replace(st, entries=entries)), take


def put_cache(p: R.Program, m: Machine, i: int, sid: int, units: int) -> Machine:
    """A release caches its prefix, in whole blocks; the session's previous prefix is dead. A
    content pool's cache is no session's: nothing (its holds release by `free_blocks`)."""
    units = round_down(units, p.pools[i].block)
    if units <= 0 or p.pools[i].content:
        return m
    st = m.pools[i]
    entries = tuple(replace(e, owner=None) if e.owner == sid else e for e in st.entries)
    entries += (Entry(sid, units, m.now, m.rel_seq + 1),)
    m = replace(m, rel_seq=m.rel_seq + 1)
    m = set_pool(m, i, replace(st, entries=entries))
    return make_room(p, m, i, 0)


# ---------------------------------------------------------------- content pools (docs/reference/content.md)


def begins_with(streams: tuple, stream, d: tuple, fuel: int) -> bool:
    """Whether `stream`, defined as d = (parent, at), would begin with its own tokens: the chain of
    parents from d's reaches it (within `fuel` links; a chain of the table, which has no cycle, has
    fewer than it has streams, and `define_stream` gives one more)."""
    for _ in range(fuel):
        s, at = d
        if at == 0:
            return False
        if s == stream:
            return True
        d = lookup(streams, s)
        if d is None:
            return False
    return False


def define_stream(p: R.Program, m: Machine, sid: int, c: R.Content) -> tuple:
    """A hold's content, read as it joins (*Streams*): its stream, defined by the first hold that
    names it as (parent, at), at 0 for its own tokens; a parent no hold has named is its own tokens
    from then on. A later hold naming the stream gives the same definition, and a stream does not
    begin with itself, or the run fails (R045). Returns (machine, the stream)."""
    env = sess_env(m, sid)
    stream = eval_expr(p, m, env, c.stream)
    d = (0, 0)
    if c.parent is not None:
        at = amount(eval_expr(p, m, env, c.common), "a content's `at`")
        if at > 0:
            d = (eval_expr(p, m, env, c.parent), at)
    old = lookup(m.streams, stream)
    if old is None:
        if begins_with(m.streams, stream, d, len(m.streams) + 1):
            raise KernelError("R045", f"content {stream} would begin with its own tokens")
        streams = m.streams + ((stream, d),)
        if d[1] > 0 and lookup(streams, d[0]) is None:
            streams += ((d[0], (0, 0)),)
        return replace(m, streams=streams), stream
    if old != d:
        raise KernelError("R045", f"content {stream} is defined twice, as {old} and as {d}")
    return m, stream


def origin(streams: tuple, stream, pos: int, fuel: int):
    """The stream whose own token is at position `pos` of `stream` (within `fuel` links)."""
    for _ in range(fuel):
        d = lookup(streams, stream)
        if d is None or not pos < d[1]:
            return stream
        stream = d[0]
    return stream


def block_key(streams: tuple, stream, j: int, b: int) -> tuple:
    """Block j's key: the origin of its last position, and j (vLLM's chained hash: two streams agree
    on the block and every block before it exactly when these agree)."""
    return origin(streams, stream, (j + 1) * b - 1, len(streams) + 1), j


def hit_run(p: R.Program, m: Machine, i: int, stream, limit: Optional[int]) -> tuple:
    """The longest run of published blocks of the stream from block 0, each key's oldest, of at most
    `limit` units (None: any number); the table's length bounds it (its keys differ in j)."""
    st, b = m.pools[i], p.pools[i].block
    out = ()
    for j in range(len(st.table)):
        if limit is not None and not (j + 1) * b <= limit:
            break
        k = block_key(m.streams, stream, j, b)
        hit = next((bid for key, bid in st.table if key == k), None)
        if hit is None:
            break
        out += (hit,)
    return out


def blk_held(allocs: tuple, bid: int) -> bool:
    """Whether some allocation of the list references the block (vLLM's ref_cnt > 0)."""
    return any(a.blks is not None and bid in a.blks for a in allocs)


def evict_free(b: int, over: int, table: tuple, free_q: tuple) -> tuple:
    """Evict from the front of the free queue, one block at a time, until `over` units are freed:
    each evicted block leaves the table. Returns (free queue, table)."""
    while free_q and over > 0:
        bid, free_q = free_q[0], free_q[1:]
        table = tuple(e for e in table if e[1] != bid)
        over -= b
    return free_q, table


def alloc_content(p: R.Program, m: Machine, i: int, sid: int, units: int, reserve: int, stream,
                  hit: tuple) -> Machine:
    """Admission on a content pool: the hit's blocks referenced (one no holder referenced leaves the
    free queue and counts in `used` again), the rest of the units new blocks, room made for them
    from the free queue's front (*Rules*)."""
    b = p.pools[i].block
    st = m.pools[i]
    back = tuple(x for x in hit if not blk_held(st.allocs, x))
    m = set_pool(m, i, replace(st, free_q=tuple(x for x in st.free_q if x not in back), used=st.used + len(back) * b))
    fresh = units - len(hit) * b
    m = make_room(p, m, i, fresh)
    st = m.pools[i]
    n = fresh // b
    a = Alloc(sid, units, len(hit) * b, len(hit) * b, False, reserve, hit + tuple(range(st.next_blk + 1, st.next_blk + n + 1)),
              stream, len(hit))
    return set_pool(m, i, replace(st, used=st.used + fresh, allocs=st.allocs + (a,), next_blk=st.next_blk + n))


def publish(p: R.Program, m: Machine, i: int, sid: int, upto: int) -> Machine:
    """The hold's whole blocks below `upto` are published, keyed by content, visible to every hold,
    from now on (vLLM caches a block once the step that fills it is scheduled)."""
    a = find_alloc(m, i, sid)
    if a is None or a.blks is None:
        return m
    b = p.pools[i].block
    k = min(upto, a.units) // b
    if k <= a.nhash:
        return m
    st = m.pools[i]
    keyed = tuple((block_key(m.streams, a.stream, j, b), a.blks[j]) for j in range(a.nhash, k))
    m = set_pool(m, i, replace(st, table=st.table + keyed))
    return set_alloc(m, i, replace(a, nhash=k))


def free_blocks(p: R.Program, m: Machine, i: int, a: Alloc, keep: int) -> Machine:
    """A content hold's release: its blocks given back, the last first (vLLM's `free`); one another
    holder references stays as it is; one no holder references counts no more in `used`, and is
    cached at the back of the free queue when it is published and below `keep`, else forgotten."""
    b = p.pools[i].block
    st = m.pools[i]
    allocs = tuple(x for x in st.allocs if x.sid != a.sid)
    used, fq, table = st.used, st.free_q, st.table
    for j in range(len(a.blks) - 1, -1, -1):
        bid = a.blks[j]
        if blk_held(allocs, bid):
            continue
        used -= b
        keyed = any(e[1] == bid for e in table)
        if keyed and (j + 1) * b <= keep:
            fq += (bid,)
        elif keyed:
            table = tuple(e for e in table if e[1] != bid)
    return set_pool(m, i, replace(st, allocs=allocs, used=used, free_q=fq, table=table))


def computed_of(a: Alloc, preempted: bool) -> int:
    """What a released allocation computed: its position when a growing run moved it, else the
    prefix it consumed after a preemption, or its allocation."""
    if a.advanced:
        return a.pos
    return a.consumed if preempted else a.units


def release(p: R.Program, m: Machine, sid: int, h: R.HoldS, preempted: bool) -> Machine:
    """The hold's allocations given back, each caching min(cache, computed) (*Pools*)."""
    for hp in h.pools:
        a = find_alloc(m, hp.pool, sid)
        if a is None:
            continue
        if a.blks is not None:   # a content pool: published up to min(cache, computed), then freed
            ell = amount(eval_expr(p, m, sess_env(m, sid), h.cache), "a hold's cache") if h.cache is not None else 0
            m = publish(p, m, hp.pool, sid, min(ell, computed_of(a, preempted)))
            m = want(free_blocks(p, m, hp.pool, find_alloc(m, hp.pool, sid), ell))
            continue
        st = m.pools[hp.pool]
        m = set_pool(m, hp.pool, replace(st, used=st.used - a.units,
                                         allocs=tuple(b for b in st.allocs if b.sid != sid)))
        m = want(m)
        if h.cache is not None:
            ell = amount(eval_expr(p, m, sess_env(m, sid), h.cache), "a hold's cache")
            m = put_cache(p, m, hp.pool, sid, min(ell, computed_of(a, preempted)))
    return set_sess(m, replace(m.sess[sid], held=False))


def head_of(p: R.Program, m: Machine, i: int) -> QItem:
    """The queue's head: a preempted hold first, else the least keys then the joining order."""
    waiting = m.pools[i].queue
    keys = p.pools[i].queue_keys
    if waiting[0].head or not keys:
        return waiting[0]
    best = bk = None
    for it in waiting:
        if it.head:
            return it
        env = sess_env(m, it.sid, (("waited", q(m.now - it.t)),))
        k = tuple(eval_expr(p, m, env, f) for f in keys) + (it.seq,)
        if bk is None or k < bk:
            best, bk = it, k
    return best


def try_admit(p: R.Program, m: Machine, it: QItem, i: int) -> tuple:
    """Admit a waiting hold if every pool has room for max(units, reserve) (*Pools*): consume the
    cached prefix, evict to fit, allocate. Returns (machine, admitted)."""
    sid = it.sid
    h = m.sess[sid].hold
    env = sess_env(m, sid)
    units, needs, reserves = [], [], []
    for hp in h.pools:
        u = round_up(amount(eval_expr(p, m, env, hp.units), "a hold's units"), p.pools[hp.pool].block)
        r = amount(eval_expr(p, m, env, hp.reserve), "a hold's reserve") if hp.reserve is not None else 0
        units.append(u)
        needs.append(max(u, r))
        reserves.append(r)
    # on a content pool a hold with a content hits the run of its stream's published blocks, known
    # before its room: the blocks of it that other holders reference take none (content.md, *The hit*)
    hits = [None] * len(h.pools)
    if h.content is not None and any(p.pools[hp.pool].content for hp in h.pools):
        rho = amount(eval_expr(p, m, env, h.reuse), "a hold's reuse") if h.reuse is not None else None
        stream = m.sess[sid].stream
        hits = [(() if stream is None else hit_run(p, m, hp.pool, stream, u if rho is None else min(rho, u)))
                if p.pools[hp.pool].content else None for hp, u in zip(h.pools, units)]
    for hp, need, hit in zip(h.pools, needs, hits):
        cap = p.pools[hp.pool].cap
        shared = 0 if hit is None else sum(1 for x in hit if blk_held(m.pools[hp.pool].allocs, x)) * p.pools[hp.pool].block
        if (cap is not None and need > cap) or not room_for(p, m, hp.pool, need - shared):
            return m, False
    rho = amount(eval_expr(p, m, env, h.reuse), "a hold's reuse") if h.reuse is not None else None
    got = []
    for hp, u, hit in zip(h.pools, units, hits):
        if hit is not None:
            c = len(hit) * p.pools[hp.pool].block
        elif h.cache is not None:
            m, c = consume(p, m, hp.pool, sid, rho, u)
        else:
            c = 0
        got.append(c)
    s = m.sess[sid]
    cached = max(got) if got else 0
    rec = s.rec if s.rec is None or s.rec.cached is not None else replace(s.rec, cached=cached)
    m = set_sess(m, replace(s, attrs=assign(s.attrs, "cached", cached), held=True, rec=rec))
    for hp, u, c, r, hit in zip(h.pools, units, got, reserves, hits):
        if hit is not None:
            stream = m.sess[sid].stream
            m = alloc_content(p, m, hp.pool, sid, u, r, 0 if stream is None else stream, hit)
            continue
        m = make_room(p, m, hp.pool, u)
        st = m.pools[hp.pool]
        m = set_pool(m, hp.pool, replace(st, used=st.used + u, allocs=st.allocs + (Alloc(sid, u, c, c, False, r),)))
    st = m.pools[i]
    return set_pool(m, i, replace(st, queue=tuple(x for x in st.queue if x is not it))), True


# ---------------------------------------------------------------- sessions


def arrive(p: R.Program, m: Machine, k: int) -> Machine:
    """Session k arrives: its init, the claims' given, then its turns (*Workload*)."""
    w = m.wl.sessions[k]
    main = p.session if p.session is not None else (R.TurnS(),)
    s = Sess(k, (("serial", k), ("turn_no", 0), ("cached", 0), ("computed", 0)),
             (Blk(main), Given(), Blk(p.init)), rows=w.rows, draws=w.draws)
    m = replace(m, sess=m.sess + (s,), arrived=m.arrived + 1)
    m = wake(m, k)
    if p.arrive not in ("batch", "closed") and k + 1 < len(m.wl.sessions):
        m = schedule(m, m.wl.sessions[k + 1].arrival, "arrive", k + 1)
    return m


def finish(p: R.Program, m: Machine, sid: int) -> Machine:
    """The session ends: its hold released (caches kept), its waiting undone."""
    s = m.sess[sid]
    if s.hold is not None and s.held:
        m = release(p, m, sid, s.hold, False)
    elif s.hold is not None:
        i = s.hold.pools[0].pool
        st = m.pools[i]
        m = set_pool(m, i, replace(st, queue=tuple(x for x in st.queue if x.sid != sid)))
    if s.at_run is not None:
        m = drop_req(m, s.at_run)
    if s.at_stage is not None:
        m = ps_remove(p, m, s.at_stage, sid)
    s = m.sess[sid]
    m = set_sess(m, replace(s, alive=False, cont=(), hold=None, held=False, at_run=None, at_stage=None, stream=None))
    if p.arrive == "closed" and m.arrived < len(m.wl.sessions):
        m = arrive(p, m, m.arrived)   # a closed population: the next session takes this one's place
    return m


def run_sess(p: R.Program, m: Machine, sid: int, fuel: int = SESS_FUEL) -> Machine:
    """Run a session's statements until it blocks or ends (Lean: runSess, fuel-bounded)."""
    while fuel > 0:
        fuel -= 1
        s = m.sess[sid]
        if not s.alive:
            return m
        if not s.cont:
            return finish(p, m, sid)
        m, blocked = exec_frame(p, m, sid)
        if blocked:
            return m
    raise KernelError("R020", f"session {sid} ran out of fuel without blocking")


def push(s: Sess, *frames) -> Sess:
    return replace(s, cont=s.cont + frames)


def exec_frame(p: R.Program, m: Machine, sid: int) -> tuple:
    """One frame of the continuation: (machine, whether the session blocked)."""
    s = m.sess[sid]
    top, rest = s.cont[-1], s.cont[:-1]
    s = replace(s, cont=rest)
    if isinstance(top, Blk):
        if not top.stmts:
            return set_sess(m, s), False
        s = push(s, Blk(top.stmts[1:]))
        return exec_stmt(p, set_sess(m, s), sid, top.stmts[0])
    if isinstance(top, Loop):
        if guard(p, m, sess_env(m, sid), top.w.c):
            s = push(s, top, Blk(top.w.body))
        return set_sess(m, s), False
    if isinstance(top, Scope):
        m = release(p, set_sess(m, s), sid, top.h, False)
        s = m.sess[sid]
        return set_sess(m, replace(s, hold=None, attrs=assign(s.attrs, "computed", 0))), False
    if isinstance(top, Given):
        return replace(set_sess(m, s), given=m.given + ((sid, s.attrs),)), False
    if isinstance(top, TurnEnd):
        m = replace(m, requests=m.requests + ((sid, s.turn_idx, s.rec),), client=m.client + answered(m, s.rec))
        return set_sess(m, replace(s, turn_idx=s.turn_idx + 1, rec=None)), False
    if isinstance(top, TurnGo):
        attrs = s.attrs
        row = top.row
        if row is not None:
            for k, v in (("new", row.new), ("out", row.out), ("think", row.think), ("forced", row.forced),
                         ("stream", row.stream), ("parent", row.parent), ("common", row.common),
                         ("more", int(s.row_i < len(s.rows)))):
                attrs = assign(attrs, k, v)
        attrs = assign(attrs, "turn_no", s.turn_idx)
        s = push(replace(s, attrs=attrs, rec=TurnRec(m.now)), TurnEnd(), Blk(p.turn + p.server))
        return set_sess(m, s), False
    raise AssertionError(top)


def exec_stmt(p: R.Program, m: Machine, sid: int, st) -> tuple:
    s = m.sess[sid]
    env = sess_env(m, sid)
    if isinstance(st, R.SetA):
        return set_sess(m, replace(s, attrs=assign(s.attrs, st.name, eval_expr(p, m, env, st.e)))), False
    if isinstance(st, R.DrawA):
        if s.draw_i >= len(s.draws):
            raise KernelError("R003", f"session {sid}'s workload gives no value for its draw of `{st.name}`")
        return set_sess(m, replace(s, attrs=assign(s.attrs, st.name, s.draws[s.draw_i]),
                                   draw_i=s.draw_i + 1)), False
    if isinstance(st, R.ObserveA):
        v = eval_expr(p, m, env, st.e)
        return replace(m, obs=m.obs + ((st.name, v, m.now, sid, s.turn_idx),)), False
    if isinstance(st, R.BranchS):
        return set_sess(m, push(s, Blk(st.then if guard(p, m, env, st.c) else st.else_))), False
    if isinstance(st, R.WhileS):
        return set_sess(m, push(s, Loop(st))), False
    if isinstance(st, R.TurnS):
        return turn(p, m, sid)
    if isinstance(st, R.HoldS):
        return hold(p, m, sid, st)
    if isinstance(st, R.RunS):
        return run_stmt(p, m, sid, st)
    if isinstance(st, R.EndS):
        return finish(p, m, sid), True
    if isinstance(st, R.JobS):
        return job_stmt(p, m, sid, st)
    raise AssertionError(st)


def turn(p: R.Program, m: Machine, sid: int) -> tuple:
    """A turn: with a trace, the next row (after its think time), then the turn block and the server."""
    s = m.sess[sid]
    if not p.trace:
        return set_sess(m, push(s, TurnGo(None))), False
    if s.row_i >= len(s.rows):
        raise KernelError("R035", f"session {sid} replays a trace session of {len(s.rows)} turn(s) and asks "
                                  "for another")
    row = s.rows[s.row_i]
    s = push(replace(s, row_i=s.row_i + 1), TurnGo(row))
    m = set_sess(m, s)
    if row.think > 0:
        return schedule(m, q(m.now + row.think), "wake", sid), True
    return m, False


def hold(p: R.Program, m: Machine, sid: int, h: R.HoldS) -> tuple:
    """A hold joins its first pool's queue (a preempted one at the head), after each of its units and
    reserves that reads only attributes and numbers is judged: above the cap, the request can never
    fit and is refused (*Pools*)."""
    s = m.sess[sid]
    computed = s.retry if s.retry is not None else 0
    s = replace(s, attrs=assign(s.attrs, "computed", computed))
    m = set_sess(m, s)
    env = sess_env(m, sid)
    if any(never_fits(p, m, env, hp) for hp in h.pools):
        return finish(p, m, sid), True
    if h.content is not None:   # its content read as it joins (*Streams*)
        m, stream = define_stream(p, m, sid, h.content)
        s = replace(s, stream=stream)
    i = h.pools[0].pool
    # a preempted hold re-enters at its queue's head, or with `requeue tail` as a newcomer, waited
    # from 0 (*Pools*)
    it = QItem(sid, m.join_seq + 1, m.now, s.retry is not None and not s.tail)
    st = m.pools[i]
    line = (it,) + st.queue if it.head else st.queue + (it,)
    m = set_pool(replace(m, join_seq=m.join_seq + 1), i, replace(st, queue=line))
    s = push(replace(s, hold=h, held=False, retry=None, tail=False), Scope(h), Blk(h.body))
    return want(set_sess(m, s)), True


def never_fits(p: R.Program, m: Machine, env: Env, hp: R.HoldPool) -> bool:
    """Whether a hold's units (rounded up to the block) or its reserve on one pool, each judged as
    it joins when it reads only attributes and numbers, is above the pool's cap (Lean: the `never`
    of `hold`; the reserve read only when the units do not refuse it)."""
    pool = p.pools[hp.pool]
    if pool.cap is None:
        return False
    return bool(hp.static_units and round_up(amount(eval_expr(p, m, env, hp.units), "a hold's units"),
                                             pool.block) > pool.cap or
                hp.static_reserve and amount(eval_expr(p, m, env, hp.reserve), "a hold's reserve") > pool.cap)


def run_stmt(p: R.Program, m: Machine, sid: int, st: R.RunS) -> tuple:
    """`run E prefill|decode (w) [growing P]`: a request on the engine; a run of no work completes
    at once. One that arrives while the engine plans is served in the admission that brought it."""
    s = m.sess[sid]
    work = amount(eval_expr(p, m, sess_env(m, sid), st.work), "a run's work")
    if st.growing is not None and find_alloc(m, st.growing, sid) is None:
        raise KernelError("R042", f"`growing {p.pools[st.growing].name}`: session {sid} holds nothing there")
    if work <= 0:
        return m, False
    rid = m.rid_seq + 1
    r = Req(rid, sid, st.mode, work, st.growing, s.eng_adm)
    m = replace(m, rid_seq=rid)
    m = set_eng(m, reqs=insert_req(r, m.eng.reqs))
    m = set_sess(m, replace(s, at_run=rid))
    if m.eng.plan is not None:
        return set_plan(m, just=m.eng.plan.just + (rid,)), True
    return want(m), True


def insert_req(r: Req, reqs: tuple) -> tuple:
    """Insert a request after those admitted no later (the engine keeps admission order)."""
    j = len(reqs)
    while j and reqs[j - 1].adm > r.adm:
        j -= 1
    return reqs[:j] + (r,) + reqs[j:]


def settle(p: R.Program, m: Machine, fuel: int = SETTLE_FUEL) -> Machine:
    """Run every ready session, in the order it became ready."""
    while m.ready:
        if fuel == 0:
            out_of_fuel("settling")
        fuel -= 1
        sid, m = m.ready[0], replace(m, ready=m.ready[1:])
        m = run_sess(p, m, sid)
    return m


# ---------------------------------------------------------------- ps and delay stages


def job_stmt(p: R.Program, m: Machine, sid: int, st: R.JobS) -> tuple:
    """`run S (w)` on a ps or delay stage: the session waits while the stage serves w, a time >= 0
    (R007 below it); a job of no work completes at once."""
    w = eval_expr(p, m, sess_env(m, sid), st.work)
    if w < 0:
        raise KernelError("R007", f"a run's work is an amount, not negative: this one is {w}")
    if w == 0:
        return m, False
    m = ps_submit(p, m, st.stage, sid, w)
    return set_sess(m, replace(m.sess[sid], at_stage=st.stage)), True


def set_ps(m: Machine, i: int, st: PsSt) -> Machine:
    return replace(m, ps=put(m.ps, i, st))


def ps_rate(p: R.Program, m: Machine, i: int, n: int):
    """Each of n jobs' rate, phi(n) / n (a delay's is 1); phi is a rate above 0 (R010)."""
    phi = p.stages[i].phi
    if n == 0:
        return 0
    if phi is None:
        return 1
    v = eval_expr(p, m, Env(x=(("present", n),)), phi)
    if v <= 0:
        raise KernelError("R010", f"stage `{p.stages[i].name}`'s capacity ps(phi) is {v} with {n} present: "
                                  "it must be above 0")
    return qdiv(v, n)


def ps_advance(m: Machine, i: int) -> Machine:
    """The stage's virtual time brought to now: each present job has received rate * elapsed."""
    st = m.ps[i]
    v = q(st.v + st.rate * (m.now - st.last)) if st.jobs else st.v
    return set_ps(m, i, replace(st, v=v, last=m.now))


def ps_schedule(p: R.Program, m: Machine, i: int) -> Machine:
    """The event for the stage's next end, set anew (a new sequence number: *Ties*, events at one
    instant in the order they were scheduled) whenever the stage changes, the one before dropped."""
    st = m.ps[i]
    rate = ps_rate(p, m, i, len(st.jobs))
    m = replace(m, events=tuple(e for e in m.events if not (e[2] == "stage" and e[3] == i)))
    if not st.jobs:
        return set_ps(m, i, replace(st, rate=rate, ev=None))
    tag = min(j[0] for j in st.jobs)
    t = q(m.now + max(0, qdiv(tag - st.v, rate)))
    m = schedule(m, t, "stage", i)
    return set_ps(m, i, replace(st, rate=rate, ev=m.seq))


def ps_submit(p: R.Program, m: Machine, i: int, sid: int, w) -> Machine:
    """A job joins: its finish tag is the virtual time now plus its work."""
    m = ps_advance(m, i)
    st = m.ps[i]
    m = set_ps(m, i, replace(st, jobs=st.jobs + ((q(st.v + w), st.started + 1, sid),), started=st.started + 1))
    return ps_schedule(p, m, i)


def ps_remove(p: R.Program, m: Machine, i: int, sid: int) -> Machine:
    """A job leaves before its end (its session ended, or its hold was preempted)."""
    m = ps_advance(m, i)
    st = m.ps[i]
    return ps_schedule(p, set_ps(m, i, replace(st, jobs=tuple(j for j in st.jobs if j[2] != sid))), i)


def ps_fire(p: R.Program, m: Machine, i: int) -> Machine:
    """The stage's next end: the jobs whose tags the virtual time has reached end, ties in the order
    they started, each session woken in that order."""
    m = ps_advance(m, i)
    st = m.ps[i]
    v = max([st.v] + [min(j[0] for j in st.jobs)] if st.jobs else [st.v])
    done = sorted((j for j in st.jobs if j[0] <= v), key=lambda j: (j[0], j[1]))
    m = set_ps(m, i, replace(st, v=v, jobs=tuple(j for j in st.jobs if j[0] > v)))
    m = ps_schedule(p, m, i)
    for _, _, sid in done:
        m = wake(set_sess(m, replace(m.sess[sid], at_stage=None)), sid)
    return m


# ---------------------------------------------------------------- the engine


def drop_req(m: Machine, rid: int) -> Machine:
    """A request leaves the engine; its tokens in the iteration being planned return to the budget."""
    r = find_req(m, rid)
    m = set_eng(m, reqs=tuple(x for x in m.eng.reqs if x.rid != rid))
    pl = m.eng.plan
    if pl is not None and r is not None:
        for x, n in pl.batch:
            if x == rid:
                m = untally(m, r, n)
                return set_plan(m, batch=tuple(b for b in pl.batch if b[0] != rid),
                                budget=None if pl.budget is None else pl.budget + n)
    return m


def tally(m: Machine, r: Req, n: int) -> Machine:
    """batch.tokens and batch.prefilled: what the iteration has scheduled so far, which a schedule's
    guard reads (*The iteration as a program*)."""
    m = set_var(m, "Ntok", lookup(m.eng.vars, "Ntok") + n)
    return set_var(m, "Npre", lookup(m.eng.vars, "Npre") + n) if r.mode == "prefill" else m


def untally(m: Machine, r: Req, n: int) -> Machine:
    """A request's tokens leave the batch being planned."""
    m = set_var(m, "Ntok", max(0, lookup(m.eng.vars, "Ntok") - n))
    return set_var(m, "Npre", max(0, lookup(m.eng.vars, "Npre") - n)) if r.mode == "prefill" else m


def resident_ids(p: R.Program, m: Machine) -> set:
    ids = {r.sid for r in m.eng.reqs}
    for i, pool in enumerate(p.pools):
        if pool.admitted:
            ids |= {a.sid for a in m.pools[i].allocs}
    return ids


def growing_pos(m: Machine, r: Req) -> int:
    """The position of the hold a request's run grows (0 when it grows none)."""
    a = find_alloc(m, r.growing, r.sid) if r.growing is not None else None
    return a.pos if a is not None else 0


def running_values(p: R.Program, m: Machine) -> tuple:
    """running.count, .decoding, .kv_decode, .kv_prefill and waiting.count as the residents stand."""
    ndec = kvb = kvp = 0
    for r in m.eng.reqs:
        if r.mode == "decode":
            ndec += 1
            kvb += growing_pos(m, r)
        else:
            kvp += growing_pos(m, r)
    queued = sum(len(m.pools[i].queue) for i, q in enumerate(p.pools) if q.admitted)
    return (("Nres", len(resident_ids(p, m))), ("Ndec", ndec), ("Kvb", kvb), ("Kvp", kvp), ("Queued", queued),
            ("Preempted", 0), ("Admitted", 0), ("Ntok", 0), ("Npre", 0), ("Attn", 0))


RUNNING = ("Nres", "Ndec", "Kvb", "Kvp")


def cap_of(p: R.Program, m: Machine, e) -> Optional[int]:
    """An `each at most`, read with the residents as the iteration started: 0 reads as no cap."""
    v = amount(eval_expr(p, m, Env(start=True), e if e is not None else p.engine.chunk), "an `each at most`")
    return None if v == 0 else v


def start_iteration(p: R.Program, m: Machine) -> Machine:
    """Plan an iteration: the schedule's statements, then its cost and its claims; a try that
    schedules no token is no iteration unless it preempted (*Engines*): what it admitted stays
    admitted, and its register sets are undone."""
    eng = p.engine
    m = set_eng(m, vars=running_values(p, m), bvars=(("Ndec", 0), ("Kvb", 0), ("Kvp", 0)),
                iter_no=m.eng.iter_no + 1)
    saved = m.eng.regs
    budget = budget_of(p, m) if eng.budget is not None else None
    granule = amount(eval_expr(p, m, Env(), eng.granule), "a granule") if eng.granule is not None else None
    m = set_eng(m, plan=Plan(budget, cap_of(p, m, eng.chunk), granule or None))
    m = exclusive(p, m, budget) if eng.exclusive else run_body(p, m, eng.body)
    batch = m.eng.plan.batch
    ntok = sum(n for _, n in batch)
    v = m.eng.vars
    if ntok <= 0 and lookup(v, "Preempted") == 0:
        return set_eng(m, regs=saved, plan=None)
    reqs = {r.rid: r for r in m.eng.reqs}
    pos = {rid: growing_pos(m, reqs[rid]) for rid, _ in batch}
    dec = [(rid, n) for rid, n in batch if reqs[rid].mode == "decode"]
    pre = [(rid, n) for rid, n in batch if reqs[rid].mode == "prefill"]
    v = assign(v, "Ntok", ntok)
    v = assign(v, "Npre", sum(n for _, n in pre))
    v = assign(v, "Attn", sum(n * (pos[rid] + n) for rid, n in batch))
    v = assign(v, "Nres", max(0, lookup(v, "Nres") + lookup(v, "Admitted") - lookup(v, "Preempted")))
    m = set_eng(m, vars=v, bvars=(("Ndec", len(dec)), ("Kvb", sum(pos[r] for r, _ in dec)),
                                  ("Kvp", sum(pos[r] for r, _ in pre))))
    cost = eval_expr(p, m, Env(), eng.cost)
    if cost < 0:
        raise KernelError("R111", f"an iteration's `execute` is a time >= 0, not {cost}")
    if ntok > 0 and cost <= 0:
        raise KernelError("R112", "an iteration that schedules tokens lasts no time")
    # the machine each claim over iterations reads at this iteration, read when asked (claim_value)
    m = replace(m, path=m.path + ((m.now, m),))
    m = set_eng(m, served_total=m.eng.served_total + ntok, iterations=m.eng.iterations + 1, busy=True,
                batch=batch, plan=None)
    return schedule(m, q(m.now + cost), "end", None)


def claim_value(p: R.Program, m: Machine, j: int):
    """Claim j over iterations read as its iteration starts, after the batch is scheduled (*Claims*),
    on the machine then (the path keeps it); None for a claim at end. A claim is read when it is
    asked about, iteration by iteration until it is decided, as the interpreter checks it no further
    (Lean's claimValues reads every claim at every iteration: the same values)."""
    c = p.claims[j]
    if c.form == "end":
        return None
    return eval_expr(p, m, claim_env(m), c.e) != 0


def claim_env(m: Machine) -> Env:
    """What a claim over iterations reads besides the machine: served, arrived and demand."""
    chunk = m.eng.plan.chunk  # the iteration's cap, read as it started
    demand = sum(1 if r.mode == "decode" else (r.left if chunk is None else min(r.left, chunk))
                 for r in m.eng.reqs if r.left > 0)
    return Env(None, None, (("served", m.eng.served_total), ("arrived", m.arrived), ("demand", demand)))


def claim_values(p: R.Program, m: Machine) -> tuple:
    """Every claim read on an iteration's machine (Lean: claimValues)."""
    return tuple(claim_value(p, m, j) for j in range(len(p.claims)))


def run_body(p: R.Program, m: Machine, body: tuple, fuel: int = BODY_FUEL) -> Machine:
    """The iteration's statements, in order; fuel bounds the statements and branches run."""
    for st in body:
        if fuel == 0:
            out_of_fuel("an iteration's statements")
        fuel -= 1
        if isinstance(st, R.IServe):
            m = serve(p, m, st.only, st.keys if st.keys is not None else p.engine.keys, st.chunk)
        elif isinstance(st, R.IAdmit):
            m = admit(p, m, st.only, st.gate, st.chunk)
        elif isinstance(st, R.IBranch):
            m = run_body(p, m, st.then if guard(p, m, Env(), st.c) else st.else_, fuel)
        else:
            m = set_eng(m, regs=assign(m.eng.regs, st.name, eval_expr(p, m, Env(), st.e)))
    return m


def req_env(m: Machine, r: Req) -> Env:
    return Env(None, None, (("decoding", int(r.mode == "decode")), ("admission", m.sess[r.sid].eng_adm),
                            ("remaining", r.left)))


def serve(p: R.Program, m: Machine, only, keys: tuple, chunk_e) -> Machine:
    """`advance running`: the residents not yet served, in the order, skipping those `only` excludes."""
    if m.eng.plan.stop:
        return m
    cap = cap_of(p, m, chunk_e)
    reqs = [r for r in m.eng.reqs if r.it != m.eng.iter_no]
    if keys:
        reqs.sort(key=lambda r: (tuple(eval_expr(p, m, req_env(m, r), k) for k in keys), m.sess[r.sid].eng_adm))
    return serve_list(p, only, cap, reqs, m)


def serve_list(p: R.Program, only, cap: Optional[int], reqs, m: Machine) -> Machine:
    """Give each request of a list its tokens, in order, skipping those served already or excluded
    by `only`, until the serving stops."""
    for r0 in reqs:
        if m.eng.plan.stop:
            break
        r = find_req(m, r0.rid)
        if r is None or r.it == m.eng.iter_no:
            continue
        if only is not None and eval_expr(p, m, req_env(m, r), only) == 0:
            continue
        m, _ = give(p, m, r.rid, cap)
    return m


def tokens_for(m: Machine, r: Req, cap: Optional[int]) -> tuple:
    """One token to a decode; up to the cap to a prefill, a multiple of the granule short of its
    remainder (none: passed over, and no one admitted after it). Returns (machine, tokens)."""
    pl = m.eng.plan
    if r.mode == "decode":
        return m, min(1, r.left) if pl.budget is None else min(1, pl.budget, r.left)
    n = min((r.left,) + tuple(x for x in (cap, pl.budget) if x is not None))
    g = pl.granule
    if g and n < r.left:
        n = n // g * g
        if n <= 0:
            m = set_plan(m, no_admit=True)
    return m, n


def give(p: R.Program, m: Machine, rid: int, cap: Optional[int]) -> tuple:
    """Serve a request its tokens, growing its hold to the position it will reach. (machine, served)."""
    r = find_req(m, rid)
    m, n = tokens_for(m, r, cap)
    if n <= 0:
        return m, False
    if r.growing is not None:
        a = find_alloc(m, r.growing, r.sid)
        if a.pos + n > a.units:
            need = round_up(a.pos + n, p.pools[r.growing].block) - a.units
            if need > 0:
                m, ok = grow(p, m, r, need)
                if not ok:
                    return m, False
    r = find_req(m, rid)
    if r is None:
        return m, False
    a = find_alloc(m, r.growing, r.sid) if r.growing is not None else None
    if a is not None:   # a content pool publishes the blocks the tokens fill as they are scheduled
        m = publish(p, m, r.growing, r.sid, a.pos + n)
    pl = m.eng.plan
    m = tally(m, r, n)
    m = set_plan(m, batch=pl.batch + ((rid, n),), budget=None if pl.budget is None else pl.budget - n)
    return set_eng(m, reqs=tuple(replace(x, it=m.eng.iter_no) if x.rid == rid else x for x in m.eng.reqs)), True


def grow(p: R.Program, m: Machine, r: Req, need: int) -> tuple:
    """Grow block by block, preempting the last admitted resident while there is no room; a grower
    that preempts itself ends the iteration's serving (*Engines*)."""
    i = r.growing
    fuel = GROW_FUEL
    # under `reserve held` the grower grows into its own reservation first
    while not room_for(p, m, i, need - own_extra(p, m, i, r.sid)):
        if fuel == 0:
            out_of_fuel("a growth")
        fuel -= 1
        v = victim(p, m, i)
        if v is None:
            return m, False
        m = set_var(m, "Preempted", lookup(m.eng.vars, "Preempted") + 1)
        m = preempt(p, m, v, i)
        if v == r.sid:
            return set_plan(m, stop=True), False
    return grow_into(p, m, r, need)


def grow_into(p: R.Program, m: Machine, r: Req, need: int) -> tuple:
    """The growth once there is room: cached entries evicted to fit, the allocation enlarged."""
    i = r.growing
    m = make_room(p, m, i, need)
    a = find_alloc(m, i, r.sid)
    st = m.pools[i]
    if a.blks is not None:   # a content hold grows by new blocks
        n = need // p.pools[i].block
        a = replace(a, blks=a.blks + tuple(range(st.next_blk + 1, st.next_blk + n + 1)))
        st = replace(st, next_blk=st.next_blk + n)
    m = set_pool(m, i, replace(st, used=st.used + need))
    return set_alloc(m, i, replace(a, units=a.units + need)), True


def own_extra(p: R.Program, m: Machine, i: int, sid: int) -> int:
    """What a holder reserved on a `reserve held` pool and has not allocated (0 on another pool)."""
    a = find_alloc(m, i, sid)
    return max(0, a.reserve - a.units) if p.pools[i].reserve_held and a is not None else 0


def victim(p: R.Program, m: Machine, i: int) -> Optional[int]:
    """`preempt by (keys)`: of the holders that are the engine's residents, in the order of their
    latest admission, the least keys, read for each with its attributes, `admission` its place in
    that order, `position` its hold's computed position, `decoding` and `remaining` its run's;
    ties to the one admitted last (*Pools*; `preempt lifo` is `by (-admission)`)."""
    keys = p.pools[i].preempt
    if keys is None:
        return None
    res = resident_ids(p, m)
    cands = sorted((a for a in m.pools[i].allocs if a.sid in res), key=lambda a: m.sess[a.sid].eng_adm)
    best = bk = None
    for rank, a in enumerate(cands):
        r = next((x for x in m.eng.reqs if x.sid == a.sid), None)
        env = sess_env(m, a.sid, (("admission", rank), ("position", a.pos),
                                  ("decoding", int(r is not None and r.mode == "decode")),
                                  ("remaining", r.left if r is not None else 0)))
        k = tuple(eval_expr(p, m, env, f) for f in keys) + (-rank,)
        if bk is None or k < bk:
            best, bk = a.sid, k
    return best


def preempt(p: R.Program, m: Machine, sid: int, i: int) -> Machine:
    """The victim's hold is released with its computed prefix cached, its request leaves the engine,
    and the hold executes again, at the head of its queue, reading `computed` (*Pools*)."""
    s = m.sess[sid]
    pos = computed_of(find_alloc(m, i, sid), True)
    m = release(p, m, sid, s.hold, True)
    if s.at_run is not None:
        m = drop_req(m, s.at_run)
    if s.at_stage is not None:   # a job inside the hold's body, on a ps stage: it leaves it
        m = ps_remove(p, m, s.at_stage, sid)
    s = m.sess[sid]
    k = max(j for j, f in enumerate(s.cont) if isinstance(f, Scope))
    rec = replace(s.rec, preemptions=s.rec.preemptions + 1) if s.rec is not None else None
    s = replace(s, cont=s.cont[:k] + (Blk((s.hold,)),), hold=None, held=False, retry=pos, at_run=None, rec=rec,
                at_stage=None, tail=p.pools[i].requeue_tail)
    m = set_sess(m, s)
    return replace(m, ready=tuple(x for x in m.ready if x != sid) + (sid,))


def admit(p: R.Program, m: Machine, only, gate, chunk_e) -> Machine:
    """`admit waiting`: the heads of the queues the engine admits, one at a time, each served at
    once unless `only` excludes it, while budget is left, the head fits and the gate is 1."""
    if m.eng.plan.no_admit:
        return m
    cap = cap_of(p, m, chunk_e)
    m = set_plan(m, admit_cap=cap)
    for i, pool in enumerate(p.pools):
        if pool.admitted:
            m, stop = admit_pool(p, m, i, only, gate, cap)
            if stop:
                return m
    return m


def admit_pool(p: R.Program, m: Machine, i: int, only, gate, cap: Optional[int], fuel: int = ADMIT_FUEL) -> tuple:
    """Admit from pool i while its queue has a head, budget is left and the gate is 1.
    Returns (machine, whether the admissions stop for the iteration)."""
    while m.pools[i].queue:
        if fuel == 0:
            out_of_fuel("admission")
        fuel -= 1
        pl = m.eng.plan
        if (pl.budget is not None and pl.budget <= 0) or pl.no_admit:
            return m, True
        if gate is not None and eval_expr(p, m, Env(), gate) == 0:
            return m, True
        m, added = admit_head(p, m, i)
        if added is None:
            return set_plan(m, no_admit=True), True
        m = give_added(p, only, cap, added, m)
    return m, False


def give_added(p: R.Program, only, cap: Optional[int], rids, m: Machine) -> Machine:
    """Give each of the requests just admitted its tokens, unless `only` excludes it."""
    for rid in rids:
        r = find_req(m, rid)
        if r is not None and (only is None or eval_expr(p, m, req_env(m, r), only) != 0):
            m, _ = give(p, m, rid, cap)
    return m


def admit_head(p: R.Program, m: Machine, i: int) -> tuple:
    """Admit the head of pool i's queue and run its session at once until it blocks: (machine, the
    requests it brought), or (machine, None) when the head does not fit."""
    it = head_of(p, m, i)
    m, ok = try_admit(p, m, it, i)
    if not ok:
        return m, None
    m = set_var(m, "Admitted", lookup(m.eng.vars, "Admitted") + 1)
    m = set_eng(m, adm_seq=m.eng.adm_seq + 1)
    m = set_sess(m, replace(m.sess[it.sid], eng_adm=m.eng.adm_seq))
    m = set_plan(m, just=())
    m = run_sess(p, m, it.sid)
    added = m.eng.plan.just
    return set_plan(m, just=()), added


def exclusive(p: R.Program, m: Machine, full: Optional[int]) -> Machine:
    """`exclusive prefill`: a running prefill alone, else the decodes, which a waiting prefill that
    fits displaces, taking the full budget; nothing is admitted after a prefill (*Engines*)."""
    reqs = sorted(m.eng.reqs, key=lambda r: m.sess[r.sid].eng_adm)
    chunk = m.eng.plan.chunk
    pre = [r for r in reqs if r.mode == "prefill"]
    if pre:
        return give(p, m, pre[0].rid, chunk)[0]
    m = serve_list(p, None, chunk, reqs, m)
    if lookup(m.eng.vars, "Preempted") != 0 or m.eng.plan.no_admit:
        return m
    tentative = m.eng.plan.batch
    left = m.eng.plan.budget
    m = set_plan(m, budget=full, admit_cap=chunk)
    for i, pool in enumerate(p.pools):
        if not pool.admitted or not m.pools[i].queue:
            continue
        m, added = admit_head(p, m, i)
        if added is None:
            break
        new = [rid for rid in added if find_req(m, rid) is not None and find_req(m, rid).mode == "prefill"]
        if new:
            gone = {rid for rid, _ in tentative}
            for rid, n in tentative:
                r = find_req(m, rid)
                if r is not None and rid in {b[0] for b in m.eng.plan.batch}:
                    m = untally(m, r, n)
            m = set_plan(m, batch=tuple(b for b in m.eng.plan.batch if b[0] not in gone), budget=full)
            m = set_eng(m, reqs=tuple(replace(r, it=0) if r.rid in gone else r for r in m.eng.reqs))
            return give(p, m, new[0], chunk)[0]
        break
    return set_plan(m, budget=left)


def advance_hold(m: Machine, r: Req, n: int) -> Machine:
    """A growing run's hold advances by the tokens the iteration gave it."""
    a = find_alloc(m, r.growing, r.sid) if r.growing is not None else None
    return m if a is None else set_alloc(m, r.growing, replace(a, pos=a.pos + n, advanced=True))


def decode_token(m: Machine, r: Req, n: int) -> Machine:
    """n decode tokens: the request's first when it has none (the last prefill's, else this one),
    recorded as its ttft then, and its last (*What the client sees*)."""
    s = m.sess[r.sid]
    if r.mode != "decode" or s.rec is None:
        return m
    rec = s.rec
    if rec.first is None:
        first = rec.pf if rec.pf is not None else m.now
        m = replace(m, client=m.client + (("ttft", q(first - rec.start)),))
    else:
        first = rec.first
    return set_sess(m, replace(s, rec=replace(rec, first=first, last=m.now, ntok=rec.ntok + n)))


def apply_tokens(acc: tuple, b: tuple) -> tuple:
    """One request's tokens of the iteration that ends; the finished requests collected."""
    m, done = acc
    rid, n = b
    r = find_req(m, rid)
    if r is None or n <= 0:
        return m, done
    r = replace(r, left=r.left - n)
    m = set_eng(m, reqs=tuple(r if x.rid == rid else x for x in m.eng.reqs))
    m = decode_token(advance_hold(m, r, n), r, n)
    return m, done + ((r,) if r.left <= 0 else ())


def end_iteration(p: R.Program, m: Machine) -> Machine:
    """The iteration's tokens are applied when it ends; a finished run wakes its session, a prefill
    samples a token (*What the client sees*)."""
    done: tuple = ()
    for b in m.eng.batch:
        m, done = apply_tokens((m, done), b)
    m = set_eng(m, batch=(), busy=False)
    for r in done:
        m = set_eng(m, reqs=tuple(x for x in m.eng.reqs if x.rid != r.rid))
        s = m.sess[r.sid]
        if r.mode == "prefill" and s.rec is not None:   # it samples an output token
            s = replace(s, rec=replace(s.rec, pf=m.now if s.rec.first is None else s.rec.pf, last=m.now,
                                       ntok=s.rec.ntok + 1))
        if s.at_run == r.rid:
            m = wake(set_sess(m, replace(s, at_run=None)), r.sid)
        else:
            m = set_sess(m, s)
    return want(m)


# ---------------------------------------------------------------- the run


def initial(p: R.Program, wl: R.Workload) -> Machine:
    m = Machine(0, (), 0, (), (), tuple(PoolSt() for _ in p.pools), Eng(regs=p.engine.registers), wl,
                ps=tuple(PsSt() for _ in p.stages))
    if not wl.sessions:
        return m
    if p.arrive in ("batch", "closed"):   # a closed population's first n at 0, the rest as sessions end
        for k, s in enumerate(wl.sessions[:p.n] if p.arrive == "closed" else wl.sessions):
            m = schedule(m, s.arrival, "arrive", k)
        return m
    return schedule(m, wl.sessions[0].arrival, "arrive", 0)


def step(p: R.Program, m: Machine, horizon: Optional[int] = None) -> tuple:
    """One move of the machine: settle, then start the engine's iteration when nothing else is
    pending at this instant, else the next event up to the horizon. (machine, whether it is over)."""
    m = settle(p, m)
    if m.eng.want and (not m.events or m.events[0][0] > m.now):
        m = set_eng(m, want=False)
        return (m if m.eng.busy else start_iteration(p, m)), False
    if not m.events or (horizon is not None and m.events[0][0] > horizon):
        return m, True
    (t, _, kind, arg), m = m.events[0], replace(m, events=m.events[1:])
    m = replace(m, now=t)
    if kind == "arrive":
        if p.arrive == "closed":   # the next session, whichever event brings it (a start or an end)
            return (arrive(p, m, m.arrived) if m.arrived < len(m.wl.sessions) else m), False
        return arrive(p, m, arg), False
    if kind == "wake":
        return wake(m, arg), False
    if kind == "stage":
        return ps_fire(p, m, arg), False
    return end_iteration(p, m), False


@dataclass(frozen=True)
class Run:
    machine: Machine
    done: bool                 # False: the fuel ran out first


def run(p: R.Program, wl: R.Workload, fuel: int = 10_000_000, horizon: Optional[int] = None) -> Run:
    """`step` from the initial machine until the run is over or the fuel is spent."""
    return run_from(p, horizon, fuel, initial(p, wl))


def run_from(p: R.Program, horizon: Optional[int], fuel: int, m: Machine) -> Run:
    while fuel > 0:
        fuel -= 1
        m, over = step(p, m, horizon)
        if over:
            return Run(m, True)
    return Run(m, False)
