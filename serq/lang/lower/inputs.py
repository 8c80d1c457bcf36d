"""`args.number("name", default)` inputs and the constants (*Entry point and external inputs*):
defaults and supplied values are resolved at link time, to the IR of the program written with them."""
from __future__ import annotations

import math

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.lower.constants import NotConstant, fold
from serq.lang.walk import iter_expr


class UsageError(Exception):
    """A mistake on the command line or in the settings (exit status 2), not in the program."""


def resolve_inputs(lets: list[A.Let], uses_args: bool, supplied: dict[str, float], defs):
    consts: dict[str, float] = {}
    spans = {}
    by_let: dict[str, tuple[str, float, bool]] = {}
    args_seen: dict[str, A.Let] = {}
    for let in lets:
        if let.name in consts:
            raise SerqError("L060", f"`{let.name}` is declared twice (let and let): declarations do not share a name",
                            let.span)
        if let.input is not None:
            if not uses_args:
                raise SerqError("L010", '`args.number` needs `use "std/args";`', let.e.span)
            arg, default = let.input
            if arg in args_seen:
                raise SerqError("L012", f'the input "{arg}" is declared twice', let.e.span)
            args_seen[arg] = let
            dv = _const(defs.expr(default), consts, f"the default of input \"{arg}\"")
            value = supplied.get(arg, dv)
            if isinstance(value, float) and math.isnan(value):
                raise UsageError(f"the input {arg} is NaN")
            by_let[let.name] = (arg, float(value), arg in supplied and float(value) != dv)
            consts[let.name] = float(value)
        else:
            for x in iter_expr(let.e):
                if isinstance(x, A.Call) and x.fn.dotted == "args.number":
                    raise SerqError("L011", "`args.number` is the whole initializer of a `let` inside main, not a "
                                    "part of it", x.span)
            consts[let.name] = _const(defs.expr(let.e), consts, f"the constant `{let.name}`")
        spans[let.name] = let.span
    unknown = sorted(set(supplied) - set(args_seen))
    if unknown:
        have = ", ".join(sorted(args_seen)) or "none"
        raise UsageError(f"the program declares no input {', '.join(unknown)} (its inputs: {have})")
    return consts, spans, by_let


def _const(e, consts, what):
    try:
        v = fold(e, consts)
    except NotConstant as nc:
        raise SerqError("L020", f"{what} must be a constant (a number or inf): {nc.why}",
                        getattr(nc.node, "span", e.span)) from None
    if math.isnan(v):
        raise SerqError("L021", f"{what} evaluates to NaN, which does not link", e.span)
    return v

