"""The names the language supplies and the evaluation moments that supply them (catalogue:
*Context variables*, *Observables*; reference: *Expressions*, *Engines on devices*)."""
from __future__ import annotations

from dataclasses import dataclass, field

CONTEXT_VARS = {"now", "present", "self", "decoding", "admission", "remaining", "position", "waited", "tokens",
                "prefilled", "decoders", "residents", "kv_decode", "kv_prefill", "attention", "demand", "served",
                "arrived"}
# the names the language supplies (*Expressions*: names do not collide)
SUPPLIED = CONTEXT_VARS | {"inf", "running", "waiting", "batch", "admitted"}
BUILTIN_ATTRS = {"serial", "turn_no", "cached", "computed"}
TRACE_ATTRS = {"new", "out", "think", "more", "forced", "stream", "parent", "common"}
SCHEDULER_SET = {"cached", "computed"}  # set by the admission and the preemption: never hidden
OBSERVABLES = {"used", "free", "holders", "queued", "queue", "busy", "cachedin", "budget_left", "work"}
POOL_OBS = {"used", "free", "holders", "queued", "cachedin"}
STAGE_OBS = {"queue", "busy", "budget_left", "work"}
END_AGGS = {"total", "count", "largest", "smallest", "prefix_total"}
FUNCTIONS = {"min", "max", "sum", "floor", "ceil", "round", "abs", "sqrt", "log", "pow", "reusable", "blocksize", "cost"}

# engine values: (IR name, reads the batch)
ENGINE_VALUES = {
    "running.count": ("Nres", False), "running.decoding": ("Ndec", False), "running.kv_decode": ("Kvb", False),
    "running.kv_prefill": ("Kvp", False), "running.preempted": ("Preempted", False),
    "waiting.admitted": ("Admitted", False), "waiting.count": ("Queued", False),
    "batch.tokens": ("Ntok", True), "batch.prefilled": ("Npre", True), "batch.decoding": ("Ndec", True),
    "batch.kv_decode": ("Kvb", True), "batch.kv_prefill": ("Kvp", True), "batch.attention": ("Attn", True),
}
# claims over iterations read the cost's variables by these names (*Claims*)
CLAIM_ITER_VALUES = {"tokens": ("Ntok", True), "prefilled": ("Npre", True), "decoders": ("Ndec", True),
                     "residents": ("Nres", False), "kv_decode": ("Kvb", True), "kv_prefill": ("Kvp", True),
                     "attention": ("Attn", True)}

# The engine's value table (*Engines on devices*): which clause reads which value.
_TOKENS = {"running.count", "waiting.count", "running.decoding", "running.kv_decode", "running.kv_prefill"}
_SCHEDULE = _TOKENS | {"running.preempted", "waiting.admitted", "batch.tokens", "batch.prefilled"}
_EXECUTE = {"running.count", "waiting.count", "batch.tokens", "batch.prefilled", "batch.decoding",
            "batch.kv_decode", "batch.kv_prefill", "batch.attention"}


@dataclass(frozen=True)
class Moment:
    """What an expression written at one place may read."""
    name: str                       # for messages: "a hold's header", "a gauge", ...
    ctx: frozenset = frozenset()    # context variables
    attrs: bool = False             # session attributes
    hidden: bool = False            # hidden attributes too
    draws: bool = False
    obs: frozenset = frozenset()    # observables
    const_index: bool = False       # a pool or stage it names has a number for its index
    engine_values: frozenset = frozenset()
    claim_iter: bool = False
    end_aggs: bool = False
    registers: bool = False
    engine: str | None = None       # the engine whose registers and values it reads
    extra: dict = field(default_factory=dict, compare=False, hash=False)


F = frozenset
ALL_OBS = F(OBSERVABLES)
SESSION = Moment("a session or server statement", ctx=F({"now"}), attrs=True, hidden=True, draws=True,
                 obs=F(OBSERVABLES - {"budget_left"}))
HEADER = Moment("a hold's header", ctx=F({"now"}), attrs=True, hidden=True, draws=False, obs=ALL_OBS,
                registers=True)
CACHE = Moment("a hold's cache", ctx=F({"now"}), attrs=True, hidden=True, draws=False, obs=F())
CONTENT = Moment("a hold's content", attrs=True, hidden=True)
LEASE = Moment("a lease's duration", ctx=F(), attrs=True, hidden=False, draws=False)
GAUGE = Moment("a gauge", obs=F(OBSERVABLES - {"cachedin", "work", "budget_left"}), const_index=True,
               registers=True)
CLAIM_ITER = Moment("a claim over iterations", ctx=F({"now", "demand", "served", "arrived"}),
                    obs=F({"queue", "busy", "used", "free", "holders", "queued"}), const_index=True,
                    claim_iter=True, registers=True)
CLAIM_END = Moment("a claim at end", ctx=F({"now"}), end_aggs=True)
GIVEN = Moment("a claim's given", attrs=True, hidden=True)
PS_CAP = Moment("a ps capacity", ctx=F({"present"}), draws=True)
CONST = Moment("a constant")
QUEUE_KEY = Moment("a pool's queue key", ctx=F({"now", "waited"}), attrs=True, obs=ALL_OBS - {"cachedin"},
                   registers=True)
EVICT_KEY = Moment("an eviction key", ctx=F({"now"}), attrs=True, draws=True)
PREEMPT_KEY = Moment("a preemption key", ctx=F({"decoding", "admission", "remaining", "position"}), attrs=True,
                     engine_values=F({"running.count", "running.decoding", "running.kv_decode",
                                      "running.kv_prefill"}), registers=True)
SPILL = Moment("a spill clause", ctx=F({"now"}), attrs=True, hidden=True, draws=True)
CAP = Moment("a pool's capacity")
INDEX = Moment("an index", attrs=True)  # a held, grown, loaded, released or leased pool's member
STAGE_COUNT = Moment("a fifo's servers")


def engine_moment(kind: str, engine: str) -> Moment:
    """The engine clauses: tokens cap, chunk (each at most), schedule, only/keys, execute, register."""
    if kind == "tokens":
        return Moment("`tokens cap`", engine_values=F(_TOKENS), registers=True, engine=engine)
    if kind == "chunk":
        return Moment("`each at most`", engine_values=F(_TOKENS), registers=True, engine=engine)
    if kind == "schedule":
        return Moment("a schedule's guard", engine_values=F(_SCHEDULE), registers=True, engine=engine)
    if kind == "key":
        return Moment("an `only` or `by` of the schedule", ctx=F({"decoding", "admission", "remaining"}),
                      engine_values=F(_TOKENS), registers=True, engine=engine)
    if kind == "execute":
        return Moment("`execute`", engine_values=F(_EXECUTE), registers=True, draws=True, engine=engine)
    if kind == "granule":
        return Moment("`granule`", engine=engine)
    if kind == "register":
        return Moment("a register's initial value", engine=engine)
    raise ValueError(kind)
