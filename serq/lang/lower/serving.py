"""The serving forms `transfer` and `tool` to the kernel's runs (*The serving vocabulary*)."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.kernel import KStage
from serq.lang.lower.engines import cost, ref
from serq.lang.walk import map_block


def _before(a, b) -> bool:
    return (a.line, a.col) < (b.line, b.col)


class Serving:
    def __init__(self, stages: list[KStage], link_latency: dict[str, A.Expr]):
        self.stages = stages              # every stage, with its span, in declaration order
        self.link_latency = link_latency  # link queue -> the latency stage's name
        self.implicit_tool: KStage | None = None
        self.by_name: dict[str, list[tuple[int, KStage]]] = {}  # a name's stages, each with its position
        for i, st in enumerate(stages):
            self.by_name.setdefault(st.name, []).append((i, st))

    def _named(self, names, at, what):
        # looked up by name, not by scanning every stage at every tool and transfer
        found = [s for _, s in sorted(x for n in names for x in self.by_name.get(n, ()))
                 if not s.implicit and (s.span.file != at.file or _before(s.span, at))]
        if len(found) != 1:
            which = " or ".join(f"`{n}`" for n in names)
            if not found:
                raise SerqError("L140", f"`{what}` finds its stage among the stages declared above it: none is named "
                                f"{which}; name one with `{what} on STAGE`", at)
            raise SerqError("L141", f"`{what}` finds several stages ({', '.join(s.name for s in found)}); name one "
                            f"with `{what} on STAGE`", at)
        return found[0]

    def _is_step(self, name):
        return any(not isinstance(s.kind, A.Kind) for _, s in self.by_name.get(name, ()))

    def _plain(self, refs, at, what):
        for r in refs:
            if self._is_step(r.head):
                raise SerqError("L142", f"`{what}` runs plain work: `{r.dotted}` is a step engine, where a run "
                                "needs its mode", r.span)

    def lower(self, stmts, side: str):
        def fs(s):
            if isinstance(s, A.Tool):
                return self._tool(s, side)
            if isinstance(s, A.Transfer):
                return self._transfer(s)
            return s
        return map_block(stmts, lambda e: e, fs)

    def _latency_runs(self, refs, span):
        out = []
        for r in refs:
            lat = self.link_latency.get(r.head)
            if lat is not None:  # one wait per link named, in the order named
                idx = r.segs[0].index
                name = f"{r.head}.latency"
                out.append(A.Run((ref(name, r.span, idx),), None, cost([name], lat, r.span), None, span))
        return out

    def _tool(self, s: A.Tool, side: str):
        if s.on is not None:
            self._plain(s.on, s.span, "tool")
            names = [r.dotted if not r.segs[-1].index else ".".join(x.name for x in r.segs) for r in s.on]
            return [A.Run(tuple(s.on), None, cost(names, s.amount, s.span), None, s.span)]
        try:
            st = self._named(("tool",), s.span, "tool")
        except SerqError as err:
            if err.code != "L140" or side != "workload" or s.index is not None:
                raise
            st = self._implicit_tool(s.span)
        if not isinstance(st.kind, A.Kind):
            raise SerqError("L142", "`tool` runs plain work: stage `tool` is a step engine", s.span)
        return [A.Run((ref(st.name, s.span, s.index),), None, cost([st.name], s.amount, s.span), None, s.span)]

    def _implicit_tool(self, at):
        # a tool call in the workload needs no declaration: the parser supplies `stage tool : delay;`
        later = [s for s in self.stages if s.name == "tool" and not s.implicit]
        if later:
            raise SerqError("L143", "stage `tool` is declared below the workload's `tool`: the call found no stage "
                            "above it, and the program would have two", later[0].span)
        if self.implicit_tool is None:
            self.implicit_tool = KStage("tool", None, A.Kind("delay", None, at), at, implicit=True)
            self.by_name.setdefault("tool", []).append((len(self.stages), self.implicit_tool))
            self.stages.append(self.implicit_tool)
        return self.implicit_tool

    def _transfer(self, s: A.Transfer):
        if s.on is not None:
            self._plain(s.on, s.span, "transfer")
            runs = self._latency_runs(s.on, s.span)
            names = [".".join(x.name for x in r.segs) for r in s.on]
            runs.append(A.Run(tuple(s.on), None, cost(names, s.amount, s.span), None, s.span))
        else:
            st = self._named(("link", "transfer"), s.span, "transfer")
            if not isinstance(st.kind, A.Kind):
                raise SerqError("L142", f"`transfer` runs plain work: `{st.name}` is a step engine", s.span)
            runs = [A.Run((ref(st.name, s.span, s.index),), None, cost([st.name], s.amount, s.span), None, s.span)]
        return runs + kv_move(s)


def kv_move(s: A.Transfer):
    """The KV moves: load the destination, give the source back (*A KV transfer*)."""
    dst = ".".join(x.name for x in s.dst.segs)
    return [A.Load(s.dst, cost([dst], s.n, s.span), s.span), A.Release(s.src, s.span)]
