"""The path a session takes, left to right: its arrival, its session's statements, then the server's
statements each turn submits (holds as frames around what they hold for, runs, transfers, forks and
joins, branches and loops). Sets and observes change no resource and are left out."""
from __future__ import annotations

import os

from serq.draw.svg import Box, Column, Frame, Item, Loop, Parallel, Row, Space, Text
from serq.draw.text import short, target
from serq.ir import model as I


def stage_kind(stage: I.Stage) -> str:
    """The colour of a stage: an engine, a NIC or a link's wait, or another stage."""
    if isinstance(stage.kind, I.Step):
        return "engine"
    if ".nic" in stage.name or stage.name.endswith(".latency"):
        return "nic"
    return "stage"


class Path:
    def __init__(self, prog: I.Program):
        self.stages = {s.name: s for s in prog.stages}

    def items(self, stmts: list) -> list[Item]:
        out: list[Item] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
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
            return Box([f"grow {target(s.pool)}", short(s.e, 24)], "memory")
        if isinstance(s, I.Load):
            return Box([f"load {target(s.pool)}", short(s.e, 24)], "memory")
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
            return Loop(Frame(f"while {short(s.cond, 28)}", self.row(s.body), "control"))
        if isinstance(s, I.Loop):
            return Loop(Frame("loop (forever)", self.row(s.body), "control"))
        if isinstance(s, I.Join):
            return Box(["join", "waits for its legs"], "control")
        if isinstance(s, I.Choose):
            keys = ", ".join(short(k, 24) for k in s.keys)
            return Box([f"choose {s.name} in {short(s.n, 12)}", f"by ({short_text(keys, 34)})"], "control")
        if isinstance(s, I.End):
            return Box(["end"], "client")
        if isinstance(s, I.Turn):
            return Box(["turn", "→ the server's path"], "client")
        return Box([type(s).__name__.lower()], "control")

    def hold(self, h: I.Hold) -> Item:
        names = ", ".join(target(p.pool) for p in h.pools)
        notes = []
        for p in h.pools:
            notes.append(f"{target(p.pool)}: {short(p.units, 40)}")
            if p.reserve is not None:
                notes.append(f"{target(p.pool)} reserved: {short(p.reserve, 30)}")
        if h.reuse is not None:
            notes.append(f"reuse {short(h.reuse, 28)}")
        if h.cache is not None:
            notes.append(f"then cache {short(h.cache, 24)}")
        if h.lease is not None:
            notes.append(f"then lease {target(h.lease.pool)} for {short(h.lease.duration, 12)}")
        return Frame(f"hold {names}", self.row(h.body), "hold", notes)

    def run(self, r: I.Run) -> Item:
        where = [target(t) for t in r.stages]
        if len(r.stages) > 1:  # a flow: one transfer over every stage it names at once
            return Box(["transfer", " + ".join(where), f"size {short(r.work, 24)}"], "nic")
        st = self.stages.get(r.stages[0].name)
        kind = stage_kind(st) if st is not None else "stage"
        lines = [f"{r.mode} on {where[0]}" if r.mode else f"run {where[0]}", short(r.work, 28)]
        if st is not None and r.stages[0].name.endswith(".latency"):
            lines = [f"wait on {where[0]}", f"{short(r.work, 20)} s (link latency)"]
        if r.growing is not None:
            lines.append(f"growing {target(r.growing)}")
        return Box(lines, kind)


def short_text(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[:limit - 1].rstrip() + "…"


def guard(cond) -> str:
    """A branch's condition; `branch with (p)` is a bernoulli draw by the time it is IR."""
    if isinstance(cond, I.Draw) and cond.dist == "bernoulli":
        return f"w.p. {short(cond.args[0], 16)}"
    return f"if {short(cond, 22)}"


def arrivals(w: I.Workload) -> list[str]:
    a = w.arrive
    if isinstance(a, I.Poisson):
        lines = ["arrivals", f"poisson, {short(a.rate, 16)} /s"]
    elif isinstance(a, I.Renewal):
        lines = ["arrivals", f"renewal, gap {short(a.gap, 16)}"]
    elif isinstance(a, I.Closed):
        lines = ["arrivals", f"closed: {a.n} sessions"]
    elif isinstance(a, I.Batch):
        lines = ["arrivals", f"batch of {a.n} at time 0"]
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
    return short_text(", ".join(names), 30)


def path_band(prog: I.Program) -> Item:
    p = Path(prog)
    w = prog.workload
    start = [Box(arrivals(w), "client")]
    if w.init:
        start.append(Box(["session starts", "sets " + drawn(w.init)], "client"))
    request = Box(["request", "draws " + drawn(w.turn)] if w.turn else ["request"], "client")
    server = Row([request] + p.items(prog.server) + [Box(["response"], "client")])
    if w.session is None:
        lane = Row(start + [server.items[0]] + server.items[1:])
        return Column([Text("The path of a request (one turn a session), left to right", 13, bold=True),
                       Frame("session", lane, "group", [f"every arrival submits one request"])], gap=6)
    forever = bool(w.session) and isinstance(w.session[-1], I.Loop)  # ends only by an `end` inside
    session = Row(start + p.items(w.session) + ([] if forever else [Box(["session ends"], "client")]))
    return Column([Text("The path of a session, left to right", 13, bold=True),
                   Frame("session", session, "group", ["each turn submits a request and waits for its response"]),
                   Space(0, 4),
                   Frame("each turn's request: the server's path", server, "group")], gap=6)

