"""The surface AST: one frozen dataclass per production, each with its span.

Lowering (serq/lang/lower/) rewrites the sugar away; the linker turns what is left into IR.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from serq.diagnostics import Span

# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Num:
    value: float
    span: Span


@dataclass(frozen=True)
class Str:
    value: str
    span: Span


@dataclass(frozen=True)
class Seg:
    name: str
    index: Optional["Expr"]
    span: Span


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Call:
    fn: Ref
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Draw:
    dist: str
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Unary:
    op: str  # '-' or '!'
    e: "Expr"
    span: Span


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / % == != < <= > >= && ||
    l: "Expr"
    r: "Expr"
    span: Span


@dataclass(frozen=True)
class Cond:
    c: "Expr"
    a: "Expr"
    b: "Expr"
    span: Span


@dataclass(frozen=True)
class Aggregate:
    op: str  # max, min, sum
    var: str
    count: "Expr"
    body: "Expr"
    span: Span


Expr = Union[Num, Str, Ref, Call, Draw, Unary, Binary, Cond, Aggregate]

# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Turn:
    span: Span


@dataclass(frozen=True)
class Set:
    name: str
    e: Expr
    span: Span
    kind: str = "set"  # set | Size | Cost


@dataclass(frozen=True)
class CostFields:
    name: str
    fields: tuple[tuple[str, Expr], ...]
    span: Span


@dataclass(frozen=True)
class Observe:
    name: str
    e: Expr
    span: Span


@dataclass(frozen=True)
class HoldPool:
    pool: Ref
    units: Expr
    reserve: Optional[Expr]
    span: Span


@dataclass(frozen=True)
class Hold:
    pools: tuple[HoldPool, ...]
    reuse: Optional[Expr]
    bindings: tuple[tuple[str, Expr, Span], ...]
    body: tuple["Stmt", ...]
    cache: Optional[Expr]
    lease: Optional[tuple[Ref, Expr]]
    span: Span
    content: Optional[tuple] = None  # (stream, parent, at) of `cache (…) content (…)`, parent and at None when absent


@dataclass(frozen=True)
class Grow:
    pool: Ref
    e: Expr
    span: Span


@dataclass(frozen=True)
class Drop:
    pool: Ref
    span: Span


@dataclass(frozen=True)
class Release:
    pool: Ref
    span: Span


@dataclass(frozen=True)
class Load:
    pool: Ref
    e: Expr
    span: Span


@dataclass(frozen=True)
class Run:
    """`run S [mode] (e) [growing P]`, `run S1, S2 (e)`, or `run (e)` (stages empty: the queue's own)."""

    stages: tuple[Ref, ...]
    mode: Optional[str]
    work: Expr
    growing: Optional[Ref]
    span: Span


@dataclass(frozen=True)
class Branch:
    cond: Expr
    then: tuple["Stmt", ...]
    else_: Optional[tuple["Stmt", ...]]
    span: Span
    with_: bool = False  # branch with (p): sugar for branch (~bernoulli(p))


@dataclass(frozen=True)
class While:
    cond: Expr
    body: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True)
class Loop:
    body: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True)
class Fork:
    body: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True)
class Join:
    span: Span


@dataclass(frozen=True)
class Choose:
    name: str
    count: Expr
    keys: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class End:
    span: Span


@dataclass(frozen=True)
class Mark:
    name: str
    span: Span


@dataclass(frozen=True)
class CallStmt:
    """`NAME(args);` (a def or an engine's request) or `Q[i].VERB(args) [from Q[j]] [to P(e)];`."""

    call: Call
    from_: Optional[Ref]
    to: Optional[tuple[Ref, Expr]]
    span: Span


@dataclass(frozen=True)
class Transfer:
    index: Optional[Expr]
    on: Optional[tuple[Ref, ...]]
    amount: Expr
    src: Ref
    dst: Ref
    n: Expr
    span: Span


@dataclass(frozen=True)
class Tool:
    index: Optional[Expr]
    on: Optional[tuple[Ref, ...]]
    amount: Expr
    span: Span


# items of an engine's request only
@dataclass(frozen=True)
class EngineRun:
    mode: str  # prefill | decode
    e: Expr
    growing: Optional[Ref]
    span: Span


@dataclass(frozen=True)
class AtAdmission:
    bindings: tuple[tuple[str, Expr, Span], ...]
    span: Span


@dataclass(frozen=True)
class CacheItem:
    e: Expr
    span: Span
    content: Optional[tuple] = None  # as a Hold's


Stmt = Union[Turn, Set, CostFields, Observe, Hold, Grow, Drop, Release, Load, Run, Branch, While,
             Loop, Fork, Join, Choose, End, Mark, CallStmt, Transfer, Tool, EngineRun, AtAdmission,
             CacheItem]

# ---------------------------------------------------------------- declarations


@dataclass(frozen=True)
class PoolOpt:
    kind: str  # cap block evict_lru evict_by preempt_none preempt_lifo preempt_by queue_fifo queue_by reserve_held spill
    args: tuple  # expressions, plus requeue / spill refs
    span: Span


@dataclass(frozen=True)
class Pool:
    name: str
    count: Optional[Expr]
    opts: tuple[PoolOpt, ...]
    span: Span
    owner: Optional[str] = None      # pool NAME on OWNER
    owner_dev: Optional[str] = None  # pool NAME on ENGINE.DEVICE


@dataclass(frozen=True)
class Kind:
    kind: str  # fifo | ps | delay
    arg: Optional[Expr]
    span: Span


@dataclass(frozen=True)
class Stage:
    name: str
    count: Optional[Expr]
    kind: Kind
    span: Span


@dataclass(frozen=True)
class TimeResource:
    name: str
    params: tuple[str, ...]
    e: Expr
    span: Span


@dataclass(frozen=True)
class CapResource:
    name: str
    e: Expr
    span: Span


@dataclass(frozen=True)
class Device:
    name: str
    count: Optional[Expr]
    resources: tuple[Union[TimeResource, CapResource], ...]
    span: Span


@dataclass(frozen=True)
class Advance:
    only: Optional[Expr]
    order: Optional[tuple[str, tuple[Expr, ...]]]  # ('admission'|'by'|'decode_first', keys)
    each: Optional[Expr]
    span: Span


@dataclass(frozen=True)
class Take:
    pool: Ref
    units: Expr
    reserve: Optional[Expr]
    span: Span


@dataclass(frozen=True)
class Admit:
    only: Optional[Expr]
    while_: Optional[Expr]
    each: Optional[Expr]
    taking: Optional[tuple[tuple[Take, ...], Optional[Expr]]]
    span: Span


@dataclass(frozen=True)
class Exclusive:
    each: Optional[Expr]
    span: Span


@dataclass(frozen=True)
class SBranch:
    cond: Expr
    then: tuple
    else_: Optional[tuple]
    span: Span


@dataclass(frozen=True)
class SSet:
    name: str
    e: Expr
    span: Span


SStmt = Union[Advance, Admit, Exclusive, SBranch, SSet]


@dataclass(frozen=True)
class Schedule:
    lets: tuple[tuple[str, Expr, Span], ...]
    body: tuple[SStmt, ...]
    span: Span


@dataclass(frozen=True)
class Request:
    params: tuple[str, ...]
    items: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True)
class EngineCap:
    name: str
    count: Optional[Expr]
    e: Expr
    span: Span


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Workload:
    arrive: Optional[tuple[str, Optional[Expr], Span]]
    trace: Optional[tuple[str, bool, Span]]
    init: Optional[tuple]
    turn: Optional[tuple]
    session: Optional[tuple]
    hidden: tuple[tuple[str, Span], ...]
    span: Span
    dups: tuple = ()  # (what, span) written twice


@dataclass(frozen=True)
class Server:
    body: tuple
    span: Span


@dataclass(frozen=True)
class Entry:
    verb: str
    params: Optional[tuple[str, ...]]
    from_: Optional[str]
    body: tuple
    span: Span


@dataclass(frozen=True)
class Serve:
    kind: Kind
    latency: Optional[Expr]
    span: Span


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Share:
    policy: str
    span: Span


@dataclass(frozen=True)
class Relation:
    left: str
    kind: str  # pull | push
    right: str
    latency: Optional[Expr]
    policy: str
    span: Span


@dataclass(frozen=True)
class Gauge:
    name: str
    e: Expr
    span: Span


@dataclass(frozen=True)
class Claim:
    name: str
    given: Optional[Expr]
    form: str  # every | some | end
    stage: Optional[Ref]
    e: Expr
    span: Span


@dataclass(frozen=True)
class Let:
    name: str
    e: Expr
    span: Span
    input: Optional[tuple[str, Expr]] = None  # args.number("name", default)


@dataclass(frozen=True)
class Def:
    name: str
    params: tuple[str, ...]
    body: Union[Expr, tuple]  # an expression, or a block of statements
    is_block: bool
    span: Span


@dataclass(frozen=True)
class Use:
    path: str
    span: Span


@dataclass(frozen=True)
class Main:
    name: str
    items: tuple
    span: Span


@dataclass(frozen=True)
class Program:
    items: tuple  # top-level: Let, Def, Use, Main
    span: Span
    file: str = "<input>"


__all__ = [n for n in dir() if not n.startswith("_")]
