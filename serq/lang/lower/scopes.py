"""What a queue's entry and an engine's request may read (*Queues*: an entry sees its own; *An
engine's request*: the rules are a queue entry's). The hidden rule at the queue's boundary."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.walk import iter_expr, stmt_exprs
from serq.link.names import BUILTIN_ATTRS, SUPPLIED

FUNCS = {"min", "max", "sum", "floor", "ceil", "round", "abs", "sqrt", "log", "pow", "reusable", "blocksize", "cost",
         "used", "free", "holders", "queued", "queue", "busy", "cachedin", "budget_left", "work"}


class ScopeCheck:
    def __init__(self, what: str, params, own: set[str], hidden: set[str], known: set[str], bindings=(),
                 pools: set[str] | None = None, foreign: set[str] = frozenset(), registers=(), engine=None):
        self.what = what
        self.registers = set(registers)  # the engine's registers, read as ENGINE.NAME (a hint when bare)
        self.engine = engine
        self.foreign = foreign  # other queues' attributes, Q.x
        self.pools = pools  # the pools its statements may hold, grow, load and release (None: any)
        self.params = set(params)
        self.own = own            # the pools, stage and NIC of the queue or engine, by the names it reads
        self.hidden = hidden
        self.known = known        # constants, defs, every declaration of the program
        self.bindings = set(bindings)

    def _names(self, e):
        """The attribute-like names an expression reads (functions, declarations and numbers aside)."""
        out = []
        local = {x.var for x in iter_expr(e) if isinstance(x, A.Aggregate)}
        for x in iter_expr(e):
            if isinstance(x, A.Call):
                continue
            if isinstance(x, A.Ref):
                h = x.segs[0].name
                if len(x.segs) > 1 and x.dotted in self.foreign:
                    out.append((x.dotted, x))
                    continue
                if h in SUPPLIED or h in self.known or h in self.own or h in FUNCS or h in local:
                    continue
                out.append((x.dotted if len(x.segs) > 1 and x.segs[0].index is None else h, x))
        return out

    def check(self, items, sets: set[str]):
        """Every name read in the body is a parameter, the entry's own set, a hidden attribute, a
        built-in attribute or a binding (*Queues*: its body reads nothing else the session has set)."""
        allowed = self.params | sets | self.hidden | BUILTIN_ATTRS | self.bindings
        for s in _all(items):
            if self.pools is not None:
                refs = [hp.pool for hp in s.pools] if isinstance(s, A.Hold) else \
                    [s.pool] if isinstance(s, (A.Grow, A.Load, A.Release)) else []
                for r in refs:
                    if r.head not in self.pools:
                        raise SerqError("L172", f"{self.what} holds, grows, loads and releases only its queue's own "
                                        f"pools and the pool its `from` names: `{r.dotted}` is neither", r.span)
            for e in stmt_exprs(s):
                for name, x in self._names(e):
                    if name.split(".")[0] in allowed or name in allowed:
                        continue
                    raise SerqError("L173", f"{self.what} reads `{name}`, which the session set: it reads its "
                                    "parameters, what it sets itself, the request's hidden attributes, now, and "
                                    "its pools and stage" + self._register_hint(name, False), x.span)
        self._headers(items, set())

    def _headers(self, items, above: set[str]):
        """A hold's header reads what the entry sets above the hold, not a set only in its body or after."""
        above = set(above)
        for s in items:
            if isinstance(s, A.Hold):
                for hp in s.pools:
                    for e in (hp.units, hp.reserve):
                        if e is not None:
                            self._header_expr(e, above)
                if s.reuse is not None:
                    self._header_expr(s.reuse, above)
                for _, be, _ in s.bindings:
                    self._header_expr(be, above)
                self._headers(s.body, above)
            elif isinstance(s, A.Branch):
                a = self._sets_after(s.then, above)
                b = self._sets_after(s.else_ or (), above)
                self._headers(s.then, above)
                self._headers(s.else_ or (), above)
                above |= a & b  # set in both arms of a branch
            elif isinstance(s, (A.While, A.Loop, A.Fork)):
                self._headers(s.body, above)  # a set in a loop or fork may not have run
            elif isinstance(s, A.Set):
                above.add(s.name)

    def _sets_after(self, items, above):
        out = set(above)
        for s in items:
            if isinstance(s, A.Set):
                out.add(s.name)
        return out

    def _header_expr(self, e, above):
        ok = self.params | above | {"cached", "computed"} | self.bindings
        for name, x in self._names(e):
            if name in ok:
                continue
            raise SerqError("L174", f"a hold's header in {self.what} reads `{name}`, which is not set above the "
                            "hold: the header reads the parameters, what the entry sets above it, the pools and "
                            "stage, the constants, cached and computed" + self._register_hint(name, True), x.span)

    def _register_hint(self, name, header):
        """A register read bare: the header reads it as ENGINE.NAME, a statement not at all (*Engine*)."""
        if name not in self.registers:
            return ""
        if header:
            return f" (`{name}` is a register of engine `{self.engine}`: a header reads it as `{self.engine}.{name}`)"
        return (f" (`{name}` is a register of engine `{self.engine}`, which the request's statements do not read; "
                f"its hold's header reads it as `{self.engine}.{name}`)")


def _all(items):
    for s in items:
        yield s
        for f in ("body", "then", "else_"):
            v = getattr(s, f, None)
            if isinstance(v, tuple):
                yield from _all(v)


def sets_of(items) -> set[str]:
    return {s.name for s in _all(items) if isinstance(s, (A.Set, A.Mark))}
