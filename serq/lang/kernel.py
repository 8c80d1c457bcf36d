"""The kernel AST: what lowering leaves (pools, stages with the step stage, the workload, the
server, gauges, claims), still AST expressions with spans, for the linker to resolve into IR."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from serq.diagnostics import Span
from serq.lang import ast as A


@dataclass
class KPool:
    name: str
    count: Optional[int]
    cap: Optional[A.Expr]           # None: inf
    opts: tuple                      # A.PoolOpt, as written
    span: Span
    admit_via: Optional[str] = None
    memory: Optional[str] = None
    queue: Optional[str] = None      # the queue that declared it (its name is `Q.x`)
    block_value: Optional[float] = None  # the block's constant value, set by the linker


@dataclass
class KStep:
    budget: A.Expr
    chunk: Optional[A.Expr]          # each at most, the schedule's lets written in; None: no cap
    granule: Optional[A.Expr]
    serve: tuple                     # ('by', keys) | ('exclusive',)
    iteration: Optional[tuple]       # A.Advance / A.Admit / A.SBranch / A.SSet, or None
    cost: A.Expr
    registers: tuple                 # (name, expr, span)
    engine: str                      # the engine's name as written (a queue's engine: the queue's)
    span: Span


@dataclass
class KStage:
    name: str
    count: Optional[int]
    kind: Union[A.Kind, KStep]
    span: Span
    queue: Optional[str] = None
    implicit: bool = False           # `stage tool : delay;` supplied for the workload's tool calls


@dataclass
class Kernel:
    files: list[str]
    consts: dict[str, float]
    const_spans: dict[str, Span]
    inputs: dict[str, float]
    pools: list[KPool]
    stages: list[KStage]
    share: Optional[tuple[str, Span]]
    workload: Optional[A.Workload]
    server: tuple
    server_span: Optional[Span]
    gauges: list[A.Gauge]
    claims: list[A.Claim]
    defs: dict[str, A.Def]
    declared: dict[str, tuple[str, Span]] = field(default_factory=dict)  # name -> (kind, span)
    bindings: dict[str, Span] = field(default_factory=dict)             # at admission names
    main_span: Optional[Span] = None
