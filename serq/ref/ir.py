"""The fragment's IR, type for type lean/Serq/IR.lean (docs/lean.md has the table).

Plain frozen data: a constant in an expression is a rational (an `int`, or a `fractions.Fraction`
when it is not whole: serq/ref/num.py), a count, cap or block a natural, `None` where the IR says
`inf` (a pool's cap, a budget) or where an optional clause is absent. Sugar the linker left (`cost(...)`, `preempt lifo`
written as `by (-admission)`, constants) is gone: `fragment.convert` writes these from the linked IR.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

# ---------------------------------------------------------------- expressions (Lean: Serq.Expr)

BIN_OPS = ("+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||")
FUNS = ("min", "max", "sum", "floor", "ceil", "round", "abs", "reusable")
CTX = ("now", "admission", "decoding", "remaining", "waited", "demand", "served", "arrived", "present", "position")
STEP_VARS = ("Nres", "Ndec", "Kvb", "Kvp", "Preempted", "Admitted", "Ntok", "Npre", "Attn", "Queued")
OBS = ("used", "free", "holders", "queued", "queue", "busy", "cachedin", "budget_left", "work")
AGGS = ("total", "count", "largest", "smallest", "prefix_total")


@dataclass(frozen=True)
class Num:
    v: object          # int | Fraction: a rational, in lowest terms (Lean: Q)


@dataclass(frozen=True)
class Attr:
    name: str


@dataclass(frozen=True)
class Ctx:
    """A context variable of the moment (CTX): `now`, a request's key values, a claim's own."""
    name: str


@dataclass(frozen=True)
class StepVar:
    name: str          # one of STEP_VARS
    batch: bool = False


@dataclass(frozen=True)
class Reg:
    name: str


@dataclass(frozen=True)
class Obs:
    fn: str            # one of OBS
    of: str            # a pool's or the engine's name


# the client's samples of each answered turn (*What the client sees*): an aggregate of one of these
# names reads them, as the interpreter's end_aggregate does, whatever the program observes
CLIENT_METRICS = ("ttft", "tpot", "response")


@dataclass(frozen=True)
class Agg:
    fn: str            # one of AGGS
    name: str          # an observation's name, or one of CLIENT_METRICS (the client's, which win)


@dataclass(frozen=True)
class Not:
    e: "Expr"


@dataclass(frozen=True)
class Bin:
    op: str            # one of BIN_OPS
    l: "Expr"
    r: "Expr"


@dataclass(frozen=True)
class Ite:
    c: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Fn:
    name: str          # one of FUNS
    args: tuple


Expr = Union[Num, Attr, Ctx, StepVar, Reg, Obs, Agg, Not, Bin, Ite, Fn]

# The Lean constructor of each enumerated name (IR.lean): what the Lean generator writes.
LEAN_BIN_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "==": "eq", "!=": "ne", "<": "lt",
                "<=": "le", ">": "gt", ">=": "ge", "&&": "and", "||": "or"}
LEAN_FUNS = {f: f for f in FUNS}
LEAN_STEP_VARS = {v: v.lower() for v in STEP_VARS}
LEAN_OBS = {"used": "used", "free": "free", "holders": "holders", "queued": "queued", "queue": "queue",
            "busy": "busy", "cachedin": "cachedin", "budget_left": "budgetLeft", "work": "work"}
LEAN_AGGS = {"total": "total", "count": "count", "largest": "largest", "smallest": "smallest",
             "prefix_total": "prefixTotal"}
LEAN_MODES = {"prefill": "prefill", "decode": "decode"}
LEAN_FORMS = {"every": "every", "some": "someIter", "end": "atEnd"}
LEAN_ARRIVALS = {"batch": "batch", "renewal": "renewal", "poisson": "poisson", "closed": "closed"}

# ---------------------------------------------------------------- statements (Lean: Serq.Stmt)


@dataclass(frozen=True)
class SetA:
    name: str
    e: Expr


@dataclass(frozen=True)
class DrawA:
    """`set x = ~dist(...)` in init or turn: the workload gives the value (any natural)."""
    name: str


@dataclass(frozen=True)
class ObserveA:
    name: str
    e: Expr


@dataclass(frozen=True)
class BranchS:
    c: Expr
    then: tuple
    else_: tuple


@dataclass(frozen=True)
class WhileS:
    c: Expr
    body: tuple


@dataclass(frozen=True)
class TurnS:
    pass


@dataclass(frozen=True)
class HoldPool:
    pool: int                  # the pool's index in Program.pools
    units: Expr
    reserve: Optional[Expr]
    static_units: bool         # the units read attributes and numbers only: judged on joining
    static_reserve: bool       # the reserve likewise (each is judged on its own, *Pools*)


@dataclass(frozen=True)
class Content:
    """A hold's `content (stream, parent, at)` (docs/reference/content.md): its tokens are those of
    `stream`, whose first `common` (the clause's `at`, an amount) are those of `parent`; `parent`
    and `common` are None for `content (stream)`, a stream of its own tokens. Each is read with the
    session's attributes as the hold joins its queue."""
    stream: Expr
    parent: Optional[Expr] = None
    common: Optional[Expr] = None


@dataclass(frozen=True)
class HoldS:
    pools: tuple               # HoldPool, the first pool's queue is the one it waits in
    reuse: Optional[Expr]
    cache: Optional[Expr]      # None: the hold takes no part in the prefix cache
    body: tuple
    content: Optional[Content] = None  # on a content pool: what its blocks hold (None: no content)


@dataclass(frozen=True)
class RunS:
    """`run E prefill|decode (work) [growing P]` on the engine."""
    mode: str                  # "prefill" | "decode"
    work: Expr
    growing: Optional[int]     # a pool index


@dataclass(frozen=True)
class EndS:
    pass


@dataclass(frozen=True)
class JobS:
    """`run S (work)` on a ps or delay stage (a think or tool time, `tool Z;`): the session waits
    while the stage serves the work (*Stages*)."""
    stage: int                 # the stage's index in Program.stages
    work: Expr


Stmt = Union[SetA, DrawA, ObserveA, BranchS, WhileS, TurnS, HoldS, RunS, EndS, JobS]

# ---------------------------------------------------------------- the iteration (Lean: Serq.IStmt)


@dataclass(frozen=True)
class IServe:
    only: Optional[Expr]
    keys: Optional[tuple]      # None: the engine's serve keys
    chunk: Optional[Expr]      # None: the engine's chunk


@dataclass(frozen=True)
class IAdmit:
    only: Optional[Expr]
    gate: Optional[Expr]
    chunk: Optional[Expr]


@dataclass(frozen=True)
class IBranch:
    c: Expr
    then: tuple
    else_: tuple


@dataclass(frozen=True)
class ISet:
    name: str
    e: Expr


IStmt = Union[IServe, IAdmit, IBranch, ISet]

# ---------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Stage:
    """A ps stage: every job at once, each at phi(present)/present; `phi` None is a delay, every
    job at rate 1 (ps(present), which the IR writes)."""
    name: str
    phi: Optional[Expr]


@dataclass(frozen=True)
class Pool:
    name: str
    cap: Optional[int]         # None: no cap (inf)
    block: int                 # 0: no block
    preempt: Optional[tuple]   # `preempt by (keys)`: the victim has the least keys (lifo: (0 - admission,)); None: none
    queue_keys: tuple          # () is queue fifo
    admitted: bool             # the engine admits its queue (admit_via)
    memory: bool               # the engine's memory
    requeue_tail: bool = False  # a victim re-enters its queue as a newcomer (`requeue tail`), else at its head
    reserve_held: bool = False  # a hold's unallocated reservation counts against later admissions
    content: bool = False      # `cache content`: blocks keyed by content, shared by every holder


@dataclass(frozen=True)
class Engine:
    name: str
    budget: Optional[Expr]     # None: tokens cap inf
    chunk: Expr                # 0 reads as no cap
    granule: Optional[Expr]
    exclusive: bool            # serve ExclusivePrefill
    keys: tuple                # serve By(keys)
    body: tuple                # IStmt; the two-statement default written out when the IR has none
    cost: Expr
    registers: tuple           # (name, init) pairs


@dataclass(frozen=True)
class Claim:
    name: str
    form: str                  # "every" | "some" | "end"
    e: Expr
    given: Optional[Expr]


@dataclass(frozen=True)
class Program:
    pools: tuple
    engine: Engine
    arrive: str                # "batch" | "renewal" | "poisson" | "closed"
    gap: object                # renewal's constant gap, a rational above 0 (0 otherwise)
    n: int                     # batch's count, closed's population (0 otherwise)
    trace: bool                # sessions replay a trace (ordered)
    init: tuple
    turn: tuple
    session: Optional[tuple]   # None: one turn per session
    server: tuple
    claims: tuple
    side_server: bool = True   # an `end;` in the server refuses (kept for the report's count)
    stages: tuple = ()         # Stage: the ps and delay stages beside the engine


# ---------------------------------------------------------------- one concrete workload


@dataclass(frozen=True)
class Row:
    """One trace row: a turn's `new`, `out`, `think` and `forced`, and what its prompt shares
    (docs/reference/content.md, *Traces*): its `stream`, whose first `common` tokens are those of
    stream `parent` (0 each when the trace does not say)."""
    new: int
    out: int
    think: int
    forced: int
    stream: int = 0
    parent: int = 0
    common: int = 0


@dataclass(frozen=True)
class SessionIn:
    arrival: object            # when it arrives, a rational (batch: 0; renewal: the program's; poisson: any)
    draws: tuple = ()          # the values its init and turn draws take, in order
    rows: tuple = ()           # its trace rows


@dataclass(frozen=True)
class Workload:
    sessions: tuple            # SessionIn, in arrival order (serial)
