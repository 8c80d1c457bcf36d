"""The path a session takes, left to right: its arrival, its session's statements, then the server's
statements each turn submits (holds as frames around what they hold for, runs, transfers, forks and
joins, branches and loops). Sets and observes change no resource and are left out."""
from __future__ import annotations

import os

from serq.draw.route import Route, choose_lines, route_of
from serq.draw.svg import Box, Column, Frame, Item, Loop, Parallel, Row, Space, Text
from serq.draw.text import bindings_read, src, target, valued
from serq.ir import model as I


def stage_kind(stage: I.Stage) -> str:
    """The colour of a stage: an engine, a NIC or a link's wait, or another stage."""
    if isinstance(stage.kind, I.Step):
        return "engine"
    if ".nic" in stage.name or stage.name.endswith(".latency"):
        return "nic"
    return "stage"


class Path:
    def __init__(self, prog: I.Program, routes: list[Route] = ()):
        self.prog = prog
        self.stages = {s.name: s for s in prog.stages}
        self.routes = list(routes)

    def items(self, stmts: list) -> list[Item]:
        out: list[Item] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            route = route_of(self.routes, s) if isinstance(s, I.Choose) else None
            if route is not None:  # a gateway's chooses, with the sets between them, are one box
                j = i
                while j < len(stmts) and (isinstance(stmts[j], (I.Set, I.Observe)) or route_of(self.routes, stmts[j])
                                          is route):
                    j += 1
                out.append(self.gateway(route, [c for c in stmts[i:j] if isinstance(c, I.Choose)]))
                i = j
                continue
            if isinstance(s, I.Fork):  # consecutive forks are legs side by side
                j = i
                while j < len(stmts) and isinstance(stmts[j], I.Fork):
                    j += 1
                out.append(self.fork(stmts[i:j], j < len(stmts) and isinstance(stmts[j], I.Join)))
                i = j
                continue
            item = self.item(s)
            if item is not None:
                out.append(item)
            i += 1
        return out

    def row(self, stmts: list) -> Row:
        return Row(self.items(stmts))

    def gateway(self, route: Route, chooses: list[I.Choose]) -> Item:
        lines = [route.title]
        for c in chooses:
            lines += choose_lines(c, route.families.get(c.name), self.prog)
        return Box(lines, "gateway")

    def fork(self, forks: list[I.Fork], joined: bool) -> Item:
        lanes = [Row(a) if a else None for a in (self.items(f.body) for f in forks)]
        labels = [f"leg {n + 1}" for n in range(len(forks))]
        if joined:
            return Parallel(lanes, labels, split_label=f"fork ×{len(forks)}")
        # the path goes on beside its legs, which a later join waits for
        return Parallel([None] + lanes, ["the path goes on"] + labels, split_label=f"fork ×{len(forks)}",
                        open=True)

    def item(self, s) -> Item | None:
        if isinstance(s, (I.Set, I.Observe)):
            return None
        if isinstance(s, I.Hold):
            return self.hold(s)
        if isinstance(s, I.Run):
            return self.run(s)
        if isinstance(s, I.Grow):
            return Box([f"grow {target(s.pool)}", src(s.e)], "memory")
        if isinstance(s, I.Load):
            return Box([f"load {target(s.pool)}", src(s.e)], "memory")
        if isinstance(s, I.Release):
            return Box([f"release {target(s.pool)}"], "memory")
        if isinstance(s, I.Drop):
            return Box([f"drop {target(s.pool)}", "its cached prefix"], "memory")
        if isinstance(s, I.Branch):
            arms = [self.items(s.then), self.items(s.else_)]
            if not arms[0] and not arms[1]:  # both arms only set attributes
                return None
            return Parallel([Row(a) if a else None for a in arms], [guard(s.cond), "else"], split_label="branch")
        if isinstance(s, I.While):
            return Loop(Frame(f"while {src(s.cond)}", self.row(s.body), "control"))
        if isinstance(s, I.Loop):
            return Loop(Frame("loop (forever)", self.row(s.body), "control"))
        if isinstance(s, I.Join):
            return Box(["join", "waits for its legs"], "control")
        if isinstance(s, I.Choose):
            return Box(choose_lines(s, None, self.prog), "control")
        if isinstance(s, I.End):
            return Box(["end"], "client")
        if isinstance(s, I.Turn):
            return Box(["turn", "→ the server's path"], "client")
        return Box([type(s).__name__.lower()], "control")

    def hold(self, h: I.Hold) -> Item:
        names = ", ".join(target(p.pool) for p in h.pools)
        notes = []
        with bindings_read() as bound:
            for p in h.pools:
                notes.append(f"{target(p.pool)}: {src(p.units)}")
                if p.reserve is not None:
                    notes.append(f"{target(p.pool)} reserved: {src(p.reserve)}")
            if h.reuse is not None:
                notes.append(f"reuse {src(h.reuse)}")
        # the names the units read, as the program binds them
        notes += [("at admission: " if n == 0 else "  ") + b for n, b in enumerate(bound)]
        if h.cache is not None:
            notes.append(f"then cache {src(h.cache)}")
        if h.lease is not None:
            notes.append(f"then lease {target(h.lease.pool)} for {valued(h.lease.duration)}")
        return Frame(f"hold {names}", self.row(h.body), "hold", notes)

    def run(self, r: I.Run) -> Item:
        where = [target(t) for t in r.stages]
        if len(r.stages) > 1:  # a flow: one transfer over every stage it names at once
            return Box(["transfer", " + ".join(where), f"size {src(r.work)}"], "nic")
        st = self.stages.get(r.stages[0].name)
        kind = stage_kind(st) if st is not None else "stage"
        lines = [f"{r.mode} on {where[0]}" if r.mode else f"run {where[0]}", src(r.work)]
        if st is not None and r.stages[0].name.endswith(".latency"):
            lines = [f"wait on {where[0]}", f"{valued(r.work)} s (link latency)"]
        if r.growing is not None:
            lines.append(f"growing {target(r.growing)}")
        return Box(lines, kind)


def guard(cond) -> str:
    """A branch's condition; `branch with (p)` is a bernoulli draw by the time it is IR."""
    if isinstance(cond, I.Draw) and cond.dist == "bernoulli":
        return f"w.p. {src(cond.args[0])}"
    return f"if {src(cond)}"


def arrivals(w: I.Workload) -> list[str]:
    a = w.arrive
    if isinstance(a, I.Poisson):
        lines = ["arrivals", f"poisson, {valued(a.rate)} /s"]
    elif isinstance(a, I.Renewal):
        lines = ["arrivals", f"renewal, gap {valued(a.gap)}"]
    elif isinstance(a, I.Closed):
        lines = ["arrivals", f"closed: {a.n} sessions"]
    elif isinstance(a, I.Batch):
        lines = ["arrivals", f"batch of {a.n} at time 0"]
    elif isinstance(a, I.TraceArrivals):
        lines = ["arrivals", "at the trace's times"]
    else:
        lines = ["arrivals", "none"]
    if w.trace is not None:
        lines.append(f"trace {os.path.basename(w.trace.file)}")
    return lines


def drawn(stmts: list) -> str:
    names = []
    for s in stmts:
        if isinstance(s, I.Set) and s.name not in names:
            names.append(s.name)
    return ", ".join(names)


def path_band(prog: I.Program, routes: list[Route] = ()) -> Item:
    p = Path(prog, routes)
    w = prog.workload
    start = [Box(arrivals(w), "client")]
    if w.init:
        start.append(Box(["session starts", "sets " + drawn(w.init)], "client"))
    request = Box(["request", "draws " + drawn(w.turn)] if w.turn else ["request"], "client")
    server = Row([request] + p.items(prog.server) + [Box(["response"], "client")])
    if w.session is None:
        lane = Row(start + [server.items[0]] + server.items[1:])
        return Column([Text("The path of a request (one turn a session), left to right", 13, bold=True),
                       Frame("session", lane, "group", ["every arrival submits one request"])], gap=6)
    forever = bool(w.session) and isinstance(w.session[-1], I.Loop)  # ends only by an `end` inside
    session = Row(start + p.items(w.session) + ([] if forever else [Box(["session ends"], "client")]))
    return Column([Text("The path of a session, left to right", 13, bold=True),
                   Frame("session", session, "group", ["each turn submits a request and waits for its response"]),
                   Space(0, 4),
                   Frame("each turn's request: the server's path", server, "group")], gap=6)

