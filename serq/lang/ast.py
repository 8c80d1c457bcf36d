"""The surface AST: one frozen dataclass per production, each with its span.

Lowering (serq/lang/lower/) rewrites the sugar away; the linker turns what is left into IR.
"""
from __future__ import annotations

from typing import Optional, Union

from serq._records import Records as _Records
from serq.diagnostics import Span

_record = _Records()  # dataclass(frozen=True), compiled together at the end (serq/_records.py)

# ---------------------------------------------------------------- expressions


@_record
class Num:
    value: float
    span: Span


@_record
class Str:
    value: str
    span: Span


@_record
class Seg:
    name: str
    index: Optional["Expr"]
    span: Span


@_record
class Ref:
    """A name path, `kv`, `kv[k]`, `D[j].kv`, `running.count`, `P.nic.latency[j]`."""

    segs: tuple[Seg, ...]
    span: Span

    @property
    def head(self) -> str:
        return self.segs[0].name

    @property
    def dotted(self) -> str:
        return ".".join(s.name for s in self.segs)

    @property
    def simple(self) -> bool:
        return len(self.segs) == 1 and self.segs[0].index is None


@_record
class Call:
    fn: Ref
    args: tuple["Expr", ...]
    span: Span


@_record
class Draw:
    dist: str
    args: tuple["Expr", ...]
    span: Span


@_record
class Unary:
    op: str  # '-' or '!'
    e: "Expr"
    span: Span


@_record
class Binary:
    op: str  # + - * / % == != < <= > >= && ||
    l: "Expr"
    r: "Expr"
    span: Span


@_record
class Cond:
    c: "Expr"
    a: "Expr"
    b: "Expr"
    span: Span


@_record
class Aggregate:
    op: str  # max, min, sum
    var: str
    count: "Expr"
    body: "Expr"
    span: Span


Expr = Union[Num, Str, Ref, Call, Draw, Unary, Binary, Cond, Aggregate]

# ---------------------------------------------------------------- statements


@_record
class Turn:
    span: Span


@_record
class Set:
    name: str
    e: Expr
    span: Span
    kind: str = "set"  # set | Size | Cost


@_record
class CostFields:
    name: str
    fields: tuple[tuple[str, Expr], ...]
    span: Span


@_record
class Observe:
    name: str
    e: Expr
    span: Span


@_record
class HoldPool:
    pool: Ref
    units: Expr
    reserve: Optional[Expr]
    span: Span


@_record
class Hold:
    pools: tuple[HoldPool, ...]
    reuse: Optional[Expr]
    bindings: tuple[tuple[str, Expr, Span], ...]
    body: tuple["Stmt", ...]
    cache: Optional[Expr]
    lease: Optional[tuple[Ref, Expr]]
    span: Span
    content: Optional[tuple] = None  # (stream, parent, at) of `cache (…) content (…)`, parent and at None when absent


@_record
class Grow:
    pool: Ref
    e: Expr
    span: Span


@_record
class Drop:
    pool: Ref
    span: Span


@_record
class Release:
    pool: Ref
    span: Span


@_record
class Load:
    pool: Ref
    e: Expr
    span: Span


@_record
class Run:
    """`run S [mode] (e) [growing P]`, `run S1, S2 (e)`, or `run (e)` (stages empty: the queue's own)."""

    stages: tuple[Ref, ...]
    mode: Optional[str]
    work: Expr
    growing: Optional[Ref]
    span: Span


@_record
class Branch:
    cond: Expr
    then: tuple["Stmt", ...]
    else_: Optional[tuple["Stmt", ...]]
    span: Span
    with_: bool = False  # branch with (p): sugar for branch (~bernoulli(p))


@_record
class While:
    cond: Expr
    body: tuple["Stmt", ...]
    span: Span


@_record
class Loop:
    body: tuple["Stmt", ...]
    span: Span


@_record
class Fork:
    body: tuple["Stmt", ...]
    span: Span


@_record
class Join:
    span: Span


@_record
class Choose:
    name: str
    count: Expr
    keys: tuple[Expr, ...]
    span: Span


@_record
class End:
    span: Span


@_record
class Mark:
    name: str
    span: Span


@_record
class CallStmt:
    """`NAME(args);` (a def or an engine's request) or `Q[i].VERB(args) [from Q[j]] [to P(e)];`."""

    call: Call
    from_: Optional[Ref]
    to: Optional[tuple[Ref, Expr]]
    span: Span


@_record
class Transfer:
    index: Optional[Expr]
    on: Optional[tuple[Ref, ...]]
    amount: Expr
    src: Ref
    dst: Ref
    n: Expr
    span: Span


@_record
class Tool:
    index: Optional[Expr]
    on: Optional[tuple[Ref, ...]]
    amount: Expr
    span: Span


# items of an engine's request only
@_record
class EngineRun:
    mode: str  # prefill | decode
    e: Expr
    growing: Optional[Ref]
    span: Span


@_record
class AtAdmission:
    bindings: tuple[tuple[str, Expr, Span], ...]
    span: Span


@_record
class CacheItem:
    e: Expr
    span: Span
    content: Optional[tuple] = None  # as a Hold's


Stmt = Union[Turn, Set, CostFields, Observe, Hold, Grow, Drop, Release, Load, Run, Branch, While,
             Loop, Fork, Join, Choose, End, Mark, CallStmt, Transfer, Tool, EngineRun, AtAdmission,
             CacheItem]

# ---------------------------------------------------------------- declarations


@_record
class PoolOpt:
    kind: str  # cap block evict_lru evict_by preempt_none preempt_lifo preempt_by queue_fifo queue_by reserve_held spill
    args: tuple  # expressions, plus requeue / spill refs
    span: Span


@_record
class Pool:
    name: str
    count: Optional[Expr]
    opts: tuple[PoolOpt, ...]
    span: Span
    owner: Optional[str] = None      # pool NAME on OWNER
    owner_dev: Optional[str] = None  # pool NAME on ENGINE.DEVICE


@_record
class Kind:
    kind: str  # fifo | ps | delay
    arg: Optional[Expr]
    span: Span


@_record
class Stage:
    name: str
    count: Optional[Expr]
    kind: Kind
    span: Span


@_record
class TimeResource:
    name: str
    params: tuple[str, ...]
    e: Expr
    span: Span


@_record
class CapResource:
    name: str
    e: Expr
    span: Span


@_record
class Device:
    name: str
    count: Optional[Expr]
    resources: tuple[Union[TimeResource, CapResource], ...]
    span: Span


@_record
class Advance:
    only: Optional[Expr]
    order: Optional[tuple[str, tuple[Expr, ...]]]  # ('admission'|'by'|'decode_first', keys)
    each: Optional[Expr]
    span: Span


@_record
class Take:
    pool: Ref
    units: Expr
    reserve: Optional[Expr]
    span: Span


@_record
class Admit:
    only: Optional[Expr]
    while_: Optional[Expr]
    each: Optional[Expr]
    taking: Optional[tuple[tuple[Take, ...], Optional[Expr]]]
    span: Span


@_record
class Exclusive:
    each: Optional[Expr]
    span: Span


@_record
class SBranch:
    cond: Expr
    then: tuple
    else_: Optional[tuple]
    span: Span


@_record
class SSet:
    name: str
    e: Expr
    span: Span


SStmt = Union[Advance, Admit, Exclusive, SBranch, SSet]


@_record
class Schedule:
    lets: tuple[tuple[str, Expr, Span], ...]
    body: tuple[SStmt, ...]
    span: Span


@_record
class Request:
    params: tuple[str, ...]
    items: tuple[Stmt, ...]
    span: Span


@_record
class EngineCap:
    name: str
    count: Optional[Expr]
    e: Expr
    span: Span


@_record
class Engine:
    name: str
    count: Optional[Expr]
    device: str
    caps: tuple[EngineCap, ...]
    tokens: Optional[Expr]
    granule: Optional[Expr]
    states: tuple[tuple[str, Expr, Span], ...]
    schedule: Optional[Schedule]
    execute: Optional[Expr]
    request: Optional[Request]
    span: Span
    items_spans: tuple = ()  # (clause, span) for duplicate detection


@_record
class Workload:
    arrive: Optional[tuple[str, Optional[Expr], Span]]
    trace: Optional[tuple[str, bool, Span]]
    init: Optional[tuple]
    turn: Optional[tuple]
    session: Optional[tuple]
    hidden: tuple[tuple[str, Span], ...]
    span: Span
    dups: tuple = ()  # (what, span) written twice


@_record
class Server:
    body: tuple
    span: Span


@_record
class Entry:
    verb: str
    params: Optional[tuple[str, ...]]
    from_: Optional[str]
    body: tuple
    span: Span


@_record
class Serve:
    kind: Kind
    latency: Optional[Expr]
    span: Span


@_record
class Queue:
    name: str
    count: Optional[Expr]
    roles: tuple[tuple[str, Span], ...]
    pools: tuple[Pool, ...]
    devices: tuple[Device, ...]
    engine: Optional[Engine]
    serve: Optional[Serve]
    nic: Optional[Kind]
    entries: tuple[Entry, ...]
    span: Span
    order: tuple = ()  # the items' kinds in written order, for the declaration-order rules


@_record
class Share:
    policy: str
    span: Span


@_record
class Relation:
    left: str
    kind: str  # pull | push
    right: str
    latency: Optional[Expr]
    policy: str
    span: Span


@_record
class Gauge:
    name: str
    e: Expr
    span: Span


@_record
class Claim:
    name: str
    given: Optional[Expr]
    form: str  # every | some | end
    stage: Optional[Ref]
    e: Expr
    span: Span


@_record
class Let:
    name: str
    e: Expr
    span: Span
    input: Optional[tuple[str, Expr]] = None  # args.number("name", default)


@_record
class Def:
    name: str
    params: tuple[str, ...]
    body: Union[Expr, tuple]  # an expression, or a block of statements
    is_block: bool
    span: Span


@_record
class Use:
    path: str
    span: Span


@_record
class Main:
    name: str
    items: tuple
    span: Span


@_record
class Program:
    items: tuple  # top-level: Let, Def, Use, Main
    span: Span
    file: str = "<input>"


_record.finish()

__all__ = [n for n in dir() if not n.startswith("_")]
