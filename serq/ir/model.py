"""The kernel IR: plain data, typed once (architecture principle 1).

Everything the reference calls sugar (engines, devices, queues, roles, serving forms, `branch
with`, `at admission`, aggregates, `def`, `use`, `args.number`) is gone before this exists. The
interpreter, the Lean generator, the drawer and `serq target` read only these models.

Numbers are JSON numbers; infinity is its own node (`{"k": "inf"}`) so the JSON stays strict.
Every statement and expression keeps where it came from (`at`: file index, line, column).
"""
# No `from __future__ import annotations`: pydantic would evaluate every annotation from its text,
# a fifth of this module's import; forward references are written as strings instead.
from typing import Annotated, Literal, Optional, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field


class Node(BaseModel):
    # each model is completed at its first use, from the schema cache at the end of this module: a
    # command completes the few it needs (defaults below are built with model_construct for this)
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings", defer_build=True)


class Loc(Node):
    file: int = 0
    line: int
    col: int
    end_line: int = 0
    end_col: int = 0


# ---------------------------------------------------------------- expressions


class Num(Node):
    k: Literal["num"] = "num"
    v: float
    at: Optional[Loc] = None


class Inf(Node):
    k: Literal["inf"] = "inf"
    at: Optional[Loc] = None


class Attr(Node):
    """A session attribute (set, chosen, drawn, or built in)."""
    k: Literal["attr"] = "attr"
    name: str
    at: Optional[Loc] = None


class Ctx(Node):
    """A context variable, available only at the moments that supply it (`now`, `present`, ...)."""
    k: Literal["ctx"] = "ctx"
    name: str
    at: Optional[Loc] = None


STEP_VARS = ("Nres", "Ndec", "Kvb", "Kvp", "Preempted", "Admitted", "Ntok", "Npre", "Attn", "Queued")


class StepVar(Node):
    """A step stage's iteration value (*Engines on devices*: running.count is Nres, ...)."""
    k: Literal["step"] = "step"
    name: Literal["Nres", "Ndec", "Kvb", "Kvp", "Preempted", "Admitted", "Ntok", "Npre", "Attn", "Queued"]
    batch: bool = False  # batch.kv_decode reads the batch's Kvb, running.kv_decode the residents'
    at: Optional[Loc] = None


class Reg(Node):
    """A step stage's register (`state NAME = c;`)."""
    k: Literal["reg"] = "reg"
    stage: str
    name: str
    at: Optional[Loc] = None


class Target(Node):
    """A pool or stage, or one member of an array of them."""
    name: str
    index: Optional["Expr"] = None


class Obs(Node):
    """An observable of a pool or stage: used, free, holders, queued, queue, busy, cachedin,
    budget_left, work, blocksize."""
    k: Literal["obs"] = "obs"
    fn: Literal["used", "free", "holders", "queued", "queue", "busy", "cachedin", "budget_left", "work",
                "blocksize"]
    of: Target
    at: Optional[Loc] = None


class Agg(Node):
    """An aggregate of an observation for a claim at end: total, count, largest, smallest, prefix_total."""
    k: Literal["agg"] = "agg"
    fn: Literal["total", "count", "largest", "smallest", "prefix_total"]
    name: str
    at: Optional[Loc] = None


class Un(Node):
    k: Literal["un"] = "un"
    op: Literal["-", "!"]
    e: "Expr"
    at: Optional[Loc] = None


class Bin(Node):
    k: Literal["bin"] = "bin"
    op: Literal["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||"]
    l: "Expr"
    r: "Expr"
    at: Optional[Loc] = None


class If(Node):
    k: Literal["if"] = "if"
    c: "Expr"
    a: "Expr"
    b: "Expr"
    at: Optional[Loc] = None


FUNCTIONS = ("min", "max", "sum", "floor", "ceil", "round", "abs", "sqrt", "log", "pow", "reusable")


class Fn(Node):
    """A function of numbers; `sum(a, b, …)` adds left to right (what `sum j in n (e)` writes out)."""
    k: Literal["fn"] = "fn"
    name: Literal["min", "max", "sum", "floor", "ceil", "round", "abs", "sqrt", "log", "pow", "reusable"]
    args: list["Expr"]
    at: Optional[Loc] = None


# each distribution's parameters in the IR (`~empirical("f.csv")` names a file in the source; the IR holds
# the values read from it, `values` and `weights`, and no parameter)
DISTRIBUTIONS = {"exp": 1, "det": 1, "uniform": 2, "erlang": 2, "h2": 2, "bernoulli": 1, "lognormal": 2,
                 "lognormal_mean": 2, "empirical": 0}


class Draw(Node):
    k: Literal["draw"] = "draw"
    dist: Literal["exp", "det", "uniform", "erlang", "h2", "bernoulli", "lognormal", "lognormal_mean", "empirical"]
    args: list["Expr"]
    values: Optional[list[float]] = None    # empirical: the values, each drawn with its weight
    weights: Optional[list[float]] = None
    at: Optional[Loc] = None


class Cost(Node):
    """`cost(R1, ..., Rk, e)`: e as a cost on the resources named, the nominal type runs and holds need."""
    k: Literal["cost"] = "cost"
    on: list[str]
    e: "Expr"
    at: Optional[Loc] = None


Expr = Annotated[Union[Num, Inf, Attr, Ctx, StepVar, Reg, Obs, Agg, Un, Bin, If, Fn, Draw, Cost],
                 Field(discriminator="k")]

# ---------------------------------------------------------------- statements


class Turn(Node):
    k: Literal["turn"] = "turn"
    at: Optional[Loc] = None


class Set(Node):
    k: Literal["set"] = "set"
    name: str
    e: Expr
    type: Literal["attr", "size", "cost"] = "attr"
    at: Optional[Loc] = None


class Observe(Node):
    k: Literal["observe"] = "observe"
    name: str
    e: Expr
    at: Optional[Loc] = None


class HoldPool(Node):
    pool: Target
    units: Expr
    reserve: Optional[Expr] = None


class Lease(Node):
    pool: Target
    duration: Expr


class Content(Node):
    """`content (stream, parent, at)`: the hold's tokens are the stream's; its first `at` are the parent's."""
    stream: Expr
    parent: Optional[Expr] = None
    at: Optional[Expr] = None


class Hold(Node):
    k: Literal["hold"] = "hold"
    pools: list[HoldPool]
    reuse: Optional[Expr] = None
    body: list["Stmt"]
    cache: Optional[Expr] = None
    content: Optional[Content] = None
    lease: Optional[Lease] = None
    at: Optional[Loc] = None


class Grow(Node):
    k: Literal["grow"] = "grow"
    pool: Target
    e: Expr
    at: Optional[Loc] = None


class Drop(Node):
    k: Literal["drop"] = "drop"
    pool: Target
    at: Optional[Loc] = None


class Release(Node):
    k: Literal["release"] = "release"
    pool: Target
    at: Optional[Loc] = None


class Load(Node):
    k: Literal["load"] = "load"
    pool: Target
    e: Expr
    at: Optional[Loc] = None


class Run(Node):
    """One job: on one stage, or a flow holding several at once. `mode` on a step stage only."""
    k: Literal["run"] = "run"
    stages: list[Target]
    mode: Optional[Literal["prefill", "decode"]] = None
    work: Expr
    growing: Optional[Target] = None
    at: Optional[Loc] = None


class Branch(Node):
    k: Literal["branch"] = "branch"
    cond: Expr
    then: list["Stmt"]
    else_: list["Stmt"] = []
    at: Optional[Loc] = None


class While(Node):
    k: Literal["while"] = "while"
    cond: Expr
    body: list["Stmt"]
    at: Optional[Loc] = None


class Loop(Node):
    k: Literal["loop"] = "loop"
    body: list["Stmt"]
    at: Optional[Loc] = None


class Fork(Node):
    k: Literal["fork"] = "fork"
    body: list["Stmt"]
    at: Optional[Loc] = None


class Join(Node):
    k: Literal["join"] = "join"
    at: Optional[Loc] = None


class Choose(Node):
    k: Literal["choose"] = "choose"
    name: str
    n: Expr
    keys: list[Expr]
    at: Optional[Loc] = None


class End(Node):
    k: Literal["end"] = "end"
    at: Optional[Loc] = None


Stmt = Annotated[Union[Turn, Set, Observe, Hold, Grow, Drop, Release, Load, Run, Branch, While, Loop, Fork,
                       Join, Choose, End], Field(discriminator="k")]

# ---------------------------------------------------------------- pools


class EvictLru(Node):
    k: Literal["lru"] = "lru"


class EvictBy(Node):
    k: Literal["by"] = "by"
    keys: list[Expr]


class PreemptNone(Node):
    k: Literal["none"] = "none"


class PreemptBy(Node):
    """`preempt lifo` is `preempt by (-admission)`, as the parser writes it."""
    k: Literal["by"] = "by"
    keys: list[Expr]
    requeue: Literal["head", "tail"] = "head"


class QueueFifo(Node):
    k: Literal["fifo"] = "fifo"


class QueueBy(Node):
    k: Literal["by"] = "by"
    keys: list[Expr]


class Spill(Node):
    pool: Target
    via: Target
    amount: Expr
    when: Expr


class Pool(Node):
    name: str
    count: Optional[int] = None  # an array of `count` members, None for a single pool
    cap: Expr = Inf.model_construct()
    block: Optional[Expr] = None
    evict: Annotated[Union[EvictLru, EvictBy], Field(discriminator="k")] = EvictLru.model_construct()
    preempt: Annotated[Union[PreemptNone, PreemptBy], Field(discriminator="k")] = PreemptNone.model_construct()
    queue: Annotated[Union[QueueFifo, QueueBy], Field(discriminator="k")] = QueueFifo.model_construct()
    reserve_held: bool = False
    content: Optional[bool] = None   # `cache content`: the cache is keyed by content, shared by every holder
    spill: Optional[Spill] = None
    admit_via: Optional[str] = None  # the step stage whose iterations admit this pool's queue
    memory: Optional[str] = None     # the step stage this pool is the memory of
    at: Optional[Loc] = None


# ---------------------------------------------------------------- stages


class Fifo(Node):
    k: Literal["fifo"] = "fifo"
    servers: Expr = Num.model_construct(v=1.0)


class Ps(Node):
    k: Literal["ps"] = "ps"
    phi: Expr


class Delay(Node):
    k: Literal["delay"] = "delay"


def is_delay(kind) -> bool:
    """Whether a stage's kind is a delay: `stage S : delay;` links to `ps(present)`, each job served
    at rate 1 on its own (no wait), and the simulator runs it, the report names it (`kind`
    "delay") and `serq draw` draws it as one."""
    if isinstance(kind, Delay):
        return True
    phi = getattr(kind, "phi", None) if getattr(kind, "k", None) == "ps" else None
    return getattr(phi, "k", None) == "ctx" and getattr(phi, "name", None) == "present"


class By(Node):
    """Serve the running requests in ascending keys, ties in admission order (`By([])` is admission)."""
    k: Literal["by"] = "by"
    keys: list[Expr] = []


class ExclusivePrefill(Node):
    k: Literal["exclusive_prefill"] = "exclusive_prefill"


class IServe(Node):
    """`advance running`: serve the residents not yet served."""
    k: Literal["serve"] = "serve"
    only: Optional[Expr] = None
    order: Optional[By] = None   # None: the stage's serve order
    chunk: Optional[Expr] = None  # None: the stage's chunk
    at: Optional[Loc] = None


class IAdmit(Node):
    """`admit waiting`: admit heads of the queues the stage admits while budget is left and gate is 1."""
    k: Literal["admit"] = "admit"
    only: Optional[Expr] = None
    gate: Optional[Expr] = None
    chunk: Optional[Expr] = None
    at: Optional[Loc] = None


class IBranch(Node):
    k: Literal["branch"] = "branch"
    cond: Expr
    then: list["IStmt"]
    else_: list["IStmt"] = []
    at: Optional[Loc] = None


class ISet(Node):
    k: Literal["set"] = "set"
    name: str
    e: Expr
    at: Optional[Loc] = None


IStmt = Annotated[Union[IServe, IAdmit, IBranch, ISet], Field(discriminator="k")]


class Register(Node):
    name: str
    init: Expr


class Step(Node):
    """The IR's step stage (`CStep`): an engine runs iterations."""
    k: Literal["step"] = "step"
    budget: Expr
    chunk: Expr = Num.model_construct(v=0.0)  # 0: no per-run cap, as the kernel reads it
    granule: Optional[Expr] = None
    serve: Annotated[Union[By, ExclusivePrefill], Field(discriminator="k")] = By.model_construct()
    iteration: Optional[list[IStmt]] = None
    cost: Expr
    registers: list[Register] = []


class Stage(Node):
    name: str
    count: Optional[int] = None
    kind: Annotated[Union[Fifo, Ps, Delay, Step], Field(discriminator="k")]
    at: Optional[Loc] = None


# ---------------------------------------------------------------- workload, claims, program


class Poisson(Node):
    k: Literal["poisson"] = "poisson"
    rate: Expr
    at: Optional[Loc] = None


class Renewal(Node):
    k: Literal["renewal"] = "renewal"
    gap: Expr
    at: Optional[Loc] = None


class Closed(Node):
    k: Literal["closed"] = "closed"
    n: int
    at: Optional[Loc] = None


class Batch(Node):
    k: Literal["batch"] = "batch"
    n: int
    at: Optional[Loc] = None


class NoArrivals(Node):
    k: Literal["none"] = "none"
    at: Optional[Loc] = None


class TraceArrivals(Node):
    """`arrive trace;`: each session of the trace once, at its `arrival` (the first at 0)."""
    k: Literal["trace"] = "trace"
    at: Optional[Loc] = None


class Trace(Node):
    file: str
    ordered: bool = False


class Workload(Node):
    arrive: Annotated[Union[Poisson, Renewal, Closed, Batch, NoArrivals, TraceArrivals], Field(discriminator="k")]
    trace: Optional[Trace] = None
    init: list[Stmt] = []
    turn: list[Stmt] = []
    session: Optional[list[Stmt]] = None  # None: one turn per arriving session
    hidden: list[str] = []


class Gauge(Node):
    name: str
    e: Expr
    at: Optional[Loc] = None


class Claim(Node):
    name: str
    form: Literal["every", "some", "end"]
    stage: Optional[Target] = None
    e: Expr
    given: Optional[Expr] = None
    at: Optional[Loc] = None


class Attribute(Node):
    """A session attribute with its type (Size: the workload's; Cost: a resource cost) and side."""
    name: str
    type: Literal["attr", "size", "cost", "builtin"]
    side: Literal["workload", "server", "builtin"]


class Settings(Node):
    """The execution settings (CLI flags, an instance file, the host API), part of the resolved IR."""
    seed: int = 1
    horizon: Optional[float] = None
    warmup: float = 0.0
    arrivals: Optional[int] = None
    inputs: dict[str, float] = {}


class Program(Node):
    version: Literal[1] = 1
    files: list[str] = []
    constants: dict[str, float] = {}  # inf, -inf, NaN written as strings (ser_json_inf_nan)
    pools: list[Pool] = []
    stages: list[Stage] = []
    share: Optional[Literal["maxmin", "bottleneck"]] = None
    workload: Workload
    server: list[Stmt] = []
    attributes: list[Attribute] = []
    gauges: list[Gauge] = []
    claims: list[Claim] = []
    settings: Settings = Settings.model_construct()


def _models() -> list:
    return [m for m in globals().values() if isinstance(m, type) and issubclass(m, Node)]


def _schemas_from_cache():
    """Give every model its core schema from the per-user cache (serq/_cache.py), written at first
    use: generating the schemas is most of pydantic's share of a short command's CPU time (tenths
    of a second), and pydantic builds a model from a schema it already has in milliseconds. The
    file is named by this module's source and the versions of pydantic, pydantic-core and Python,
    so it is never stale. Each model is still completed by pydantic, at its first use."""
    import pickle
    import sys

    import pydantic_core

    from serq import _cache
    try:
        with open(__file__, encoding="utf-8") as fh:
            source = fh.read()
    except OSError:  # no source beside the module: no key, no cache
        return
    path = _cache.path("ir-schemas", source, pydantic.VERSION, pydantic_core.__version__, sys.version)
    if path is None:
        return
    models = _models()
    names = {m.__name__ for m in models}

    def load(fh):
        schemas = pickle.load(fh)
        if set(schemas) != names:
            raise ValueError("another set of models")
        return schemas

    schemas = _cache.read(path, load)
    if schemas is not None:
        for m in models:
            m.__pydantic_core_schema__ = schemas[m.__name__]
        return
    # absent, unreadable or damaged: all built (as before) and written
    if not _cache.writable(path):  # nowhere to keep them: build each at its first use only
        return
    for m in models:
        m.model_rebuild()
    built = {m.__name__: m.__pydantic_core_schema__ for m in models}
    _cache.save(path, lambda fh: pickle.dump(built, fh, protocol=pickle.HIGHEST_PROTOCOL))


_schemas_from_cache()
