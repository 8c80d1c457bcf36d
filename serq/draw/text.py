"""Expressions and names as the picture writes them: short, in the language's own spelling."""
from __future__ import annotations

from serq.ir import model as I
from serq.lang.lower.constants import fmt

# a step stage's values as the program writes them (*Engines on devices*)
STEP_NAMES = {"Nres": "running.count", "Ndec": "running.decoding", "Kvb": "kv_decode", "Kvp": "kv_prefill",
              "Preempted": "running.preempted", "Admitted": "waiting.admitted", "Ntok": "batch.tokens",
              "Npre": "batch.prefilled", "Attn": "batch.attention", "Queued": "waiting.count"}
PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "+": 5, "-": 5,
        "*": 6, "/": 6, "%": 6}


def number(v: float) -> str:
    """A number as the diagnostics write it, or to four digits when that is long (0.1 + 0.2)."""
    s = fmt(v)
    return s if len(s) < 12 else f"{v:.4g}"


def target(t: I.Target) -> str:
    return t.name if t.index is None else f"{t.name}[{expr(t.index)}]"


def expr(e, prec: int = 0) -> str:
    """`e` in the language's syntax, parenthesised where its operators need it."""
    if isinstance(e, I.Num):
        return number(e.v)
    if isinstance(e, I.Inf):
        return "inf"
    if isinstance(e, (I.Attr, I.Ctx)):
        return e.name
    if isinstance(e, I.StepVar):
        n = STEP_NAMES[e.name]
        return ("batch." if e.batch else "running.") + n if n.startswith("kv_") else n
    if isinstance(e, I.Reg):
        return e.name
    if isinstance(e, I.Obs):
        return f"{e.fn}({target(e.of)})"
    if isinstance(e, I.Agg):
        return f"{e.fn}({e.name})"
    if isinstance(e, I.Un):
        return e.op + expr(e.e, 7)
    if isinstance(e, I.Bin):
        p = PREC[e.op]
        s = f"{expr(e.l, p)} {e.op} {expr(e.r, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, I.If):
        s = f"{expr(e.c, 1)} ? {expr(e.a, 1)} : {expr(e.b, 1)}"
        return f"({s})" if prec > 0 else s
    if isinstance(e, I.Fn):
        return f"{e.name}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, I.Draw):
        return f"~{e.dist}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, I.Cost):  # the nominal type says nothing a reader needs here
        return expr(e.e, prec)
    return "?"


def short(e, limit: int = 30) -> str:
    """`e`, or its first `limit` characters and an ellipsis."""
    s = expr(e)
    return s if len(s) <= limit else s[:limit - 1].rstrip() + "…"


def base(name: str) -> str:
    """A queue's member's own name (P.kv -> kv), as the queue's body calls it."""
    return name.rsplit(".", 1)[-1]
