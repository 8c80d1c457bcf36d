"""The deployment: each engine on its device with the memory it holds and the queues it admits, each
queue (a family of stations) with its members' parts, the other stages and pools, and the links a
transfer crosses. The IR keeps no device names (a device is sugar: its capacities are pools whose
`memory` is the engine), so a device is drawn as the box around its engine and those pools."""
from __future__ import annotations

from serq.draw.path import stage_kind
from serq.draw.route import Route, name_of, policies
from serq.draw.svg import Box, Canvas, Column, Fan, Frame, Item, Row, Space, Text, text_width
from serq.draw.text import constants_in, expr, number, src, target, valued
from serq.ir import model as I
from serq.link.exprs import const_value
from serq.link.rules import walk


def keys(xs: list) -> str:
    return "(" + ", ".join(src(k) for k in xs) + ")"


def members(name: str, count: int | None) -> str:
    """A family's line: how many members and how the path names them."""
    return f"×{count}: {name}[0..{count - 1}]" if count is not None else ""


def schedule(body: list) -> list[str]:
    """An engine's own iteration, one clause a statement (*Engines on devices*)."""
    out = []
    for st in body:
        if isinstance(st, I.IServe):
            out.append("advance running" + (" by " + keys(st.order.keys) if st.order and st.order.keys else "")
                       + clauses(st))
        elif isinstance(st, I.IAdmit):
            out.append("admit waiting" + clauses(st))
        elif isinstance(st, I.IBranch):
            out.append(f"branch ({src(st.cond)}) {{{'; '.join(schedule(st.then))}}} "
                       f"else {{{'; '.join(schedule(st.else_))}}}")
        elif isinstance(st, I.ISet):
            out.append(f"set {st.name} = {src(st.e)}")
    return out


def clauses(st) -> str:
    """A serve's or an admission's `only`, `while` and `each at most`, as the program writes them."""
    out = ""
    if st.only is not None:
        out += f" only ({src(st.only)})"
    if getattr(st, "gate", None) is not None:
        out += f" while ({src(st.gate)})"
    if st.chunk is not None:
        out += f" each at most ({src(st.chunk)})"
    return out


def pool_lines(p: I.Pool, cached: set[str]) -> list[str]:
    """A pool's cap and rules; `cached` names the pools a hold caches in (eviction matters there)."""
    lines = [p.name, f"cap {valued(p.cap)}"]
    lines.append(members(p.name, p.count))
    if p.block is not None:
        b, cap = const_value(p.block), const_value(p.cap)
        blocks = f" ({number(cap // b)} blocks)" if b and cap is not None and b > 0 and cap < 1e15 else ""
        lines.append(f"block {valued(p.block)}{blocks}")
    # a request-slot queue a hold's cache clause also names keeps a unit or so: not what a reader
    # would take "prefix cache" to mean, so only the other pools say it
    if p.name in cached and p.admit_via is None:
        lines.append("prefix cache, evict lru" if isinstance(p.evict, I.EvictLru) else "prefix cache")
    elif isinstance(p.evict, I.EvictBy):
        lines.append("evict by " + keys(p.evict.keys))
    if isinstance(p.preempt, I.PreemptBy):
        ks = p.preempt.keys
        lifo = len(ks) == 1 and expr(ks[0]) == "-admission"  # `preempt lifo`, as the parser writes it
        lines.append("preempt lifo" if lifo else "preempt by " + keys(ks))
    if isinstance(p.queue, I.QueueBy):
        lines.append("queue by " + keys(p.queue.keys))
    elif p.admit_via is not None or p.memory is None:
        lines.append("queue fifo")
    if p.reserve_held:
        lines.append("reserve held")
    if p.spill is not None:
        lines.append(f"spill to {target(p.spill.pool)} via {target(p.spill.via)}")
    if p.admit_via is not None:
        lines.append(f"admitted by {p.admit_via}'s iterations")
    return lines


def engine_lines(s: I.Stage) -> list[str]:
    k = s.kind
    lines = [s.name, "engine: runs iterations", f"≤ {valued(k.budget)} tokens an iteration"]
    chunk = const_value(k.chunk)
    if chunk is None:
        text = src(k.chunk)  # the IR's 0 is no cap, which the source writes inf
        lines.append(f"a prefill's chunk ≤ {text}" + ("" if text != expr(k.chunk) or "0" not in text else
                                                       " (0: no cap)"))
    elif chunk != 0:
        lines.append(f"a prefill's chunk ≤ {valued(k.chunk)}")
    if isinstance(k.serve, I.ExclusivePrefill):
        lines.append("serves: exclusive prefill")
    elif [expr(x) for x in k.serve.keys] == ["decoding ? 0 : 1"]:  # `decode first`, as the parser writes it
        lines.append("serves decode first")
    elif k.serve.keys:
        lines.append("serves by " + keys(k.serve.keys))
    else:
        lines.append("serves in admission order")
    if k.granule is not None:
        lines.append(f"a prefill's chunk a multiple of {valued(k.granule)}")
    if k.iteration is not None:
        lines += ["schedule:"] + ["  " + x for x in schedule(k.iteration)]
    for r in k.registers:
        lines.append(f"state {r.name} = {valued(r.init)}")
    lines.append(f"iteration time {src(k.cost)}")
    read = constants_in(k.chunk if chunk is None else None, k.cost, *(k.iteration or []))
    if read:
        lines.append("where " + ", ".join(read))
    lines.append(members(s.name, s.count))
    return lines


def stage_lines(s: I.Stage) -> list[str]:
    k = s.kind
    if isinstance(k, I.Fifo):
        what = f"fifo, {valued(k.servers)} server" + ("" if expr(k.servers) == "1" else "s")
    elif I.is_delay(k):  # `stage S : delay;`, linked to ps(present): the report's `delay` too
        what = "delay, each job its own time (no wait)"
    elif isinstance(k, I.Ps):
        what = f"ps, rate {valued(k.phi)} shared"
    else:
        return engine_lines(s)
    lines = [s.name, what]
    if s.name.endswith(".latency"):
        lines.append("a link's wait before each transfer")
    elif ".nic" in s.name:
        lines.append("NIC: transfers share its rate")
    lines.append(members(s.name, s.count))
    return lines


class Anchored(Item):
    """An item whose placed rectangle the canvas remembers by name, for the links drawn later."""

    def __init__(self, name: str, inner: Box):
        self.name, self.inner = name, inner
        self.w, self.h, self.port = inner.w, inner.h, inner.port

    def place(self, c, x, y):
        self.inner.place(c, x, y)
        c.anchors[self.name] = (x, y + self.inner.off, self.inner.w - self.inner.off, self.inner.h - self.inner.off)


def statements(prog: I.Program):
    """Every statement of the path: the server's first (the deployment), then the session's."""
    w = prog.workload
    return walk(prog.server + w.init + w.turn + (w.session or []))


def order(prog: I.Program) -> list[str]:
    """Pool and stage names in the order the path first names them (then the rest as declared)."""
    seen: list[str] = []
    for s in statements(prog):
        named = [p.pool for p in s.pools] if isinstance(s, I.Hold) else \
            s.stages if isinstance(s, I.Run) else [s.pool] if isinstance(s, (I.Grow, I.Drop, I.Release, I.Load)) else []
        for t in named:
            if t.name not in seen:
                seen.append(t.name)
    for x in [p.name for p in prog.pools] + [s.name for s in prog.stages]:
        if x not in seen:
            seen.append(x)
    return seen


def flows(prog: I.Program) -> list[tuple[str, ...]]:
    """The stage names of each distinct flow (a run over several stages: a transfer)."""
    out: list[tuple[str, ...]] = []
    for s in statements(prog):
        if isinstance(s, I.Run) and len(s.stages) > 1:
            names = tuple(t.name for t in s.stages)
            if names not in out:
                out.append(names)
    return out


def modes(prog: I.Program, stage: str) -> list[str]:
    """What the path runs on an engine (a queue's role shows as the modes of its runs)."""
    out: list[str] = []
    for s in statements(prog):
        if isinstance(s, I.Run) and s.mode and any(t.name == stage for t in s.stages) and s.mode not in out:
            out.append(s.mode)
    return out


FAN = 8  # members a gateway's fan draws; more are elided in the middle


class Deployment:
    def __init__(self, prog: I.Program, routes: list[Route] = ()):
        self.prog = prog
        self.routes = list(routes)
        self.pools = {p.name: p for p in prog.pools}
        self.stages = {s.name: s for s in prog.stages}
        self.done: set[str] = set()
        self.cached = {p.pool.name for h in statements(prog) if isinstance(h, I.Hold) and h.cache is not None
                       for p in h.pools}

    def box(self, name: str) -> Item:
        self.done.add(name)
        if name in self.stages:
            s = self.stages[name]
            return Anchored(name, Box(stage_lines(s), stage_kind(s), s.count or 1))
        p = self.pools[name]
        kind = "memory" if p.memory is not None else "queue" if p.admit_via is not None else "pool"
        return Anchored(name, Box(pool_lines(p, self.cached), kind, p.count or 1))

    def engine(self, s: I.Stage) -> Item:
        """An engine on its device, its memory inside, the queues it admits in front of it."""
        queues = [p.name for p in self.prog.pools if p.admit_via == s.name and p.memory is None]
        memory = [p.name for p in self.prog.pools if p.memory == s.name]
        dev = Frame("device", Column([self.box(s.name)] + [self.box(m) for m in memory], gap=8),
                    "device", [f"the memory {s.name} computes in"] if memory else [])
        if not queues:
            return dev
        return Row([Column([self.box(q) for q in queues], gap=8), dev], gap=30)

    def cluster(self, name: str, members: list[str]) -> Item:
        root = self.stages.get(name)
        if root is not None and isinstance(root.kind, I.Step):
            front = self.engine(root)
        elif root is not None:
            front = self.box(name)
        else:
            front = None
        rest = [m for m in members if m not in self.done]
        # a NIC last in its column, so a link's line leaves its bottom through empty space
        rest.sort(key=lambda m: (m in self.stages and ".nic" in m and not m.endswith(".latency")))
        side = Column([self.box(m) for m in rest], gap=8) if rest else None
        inner = [x for x in (front, side) if x is not None]
        body = inner[0] if len(inner) == 1 else Row(inner, gap=24, arrows=False)
        count = root.count if root is not None else None
        if not members:
            return body
        notes = ["a station: each member has these"] if count else []
        if modes(self.prog, name):
            notes.append("its role in the path: " + " and ".join(modes(self.prog, name)))
        return Frame(f"queue {name}", body, "group", notes, copies=count or 1, badge=f"×{count}" if count else "")

    def count(self, family: str) -> int | None:
        """How many members a family has: its stage's count, or its parts'."""
        for x in list(self.stages.values()) + list(self.pools.values()):
            if x.name == family or x.name.startswith(family + "."):
                return x.count
        return None

    def gateway(self, route: Route) -> Item:
        """A gateway and, behind it, each member of each family it routes to."""
        lines = [route.title]
        groups = []
        for c in route.chooses:
            fam = route.families.get(c.name)
            if fam is None:
                continue
            keys = list(c.keys)
            how = ""
            sel = policies(keys[0]) if keys else None
            if sel is not None:
                x, arms = sel
                label, a, _ = next(arm for arm in arms if arm[2])
                how = (name_of(a, c.name, self.prog) or src(a)) + (f" ({x} = {label})" if x else "")
            elif keys:
                how = name_of(keys[0], c.name, self.prog) or src(keys[0])
            lines.append(f"sends each request to one {fam}[{c.name}]" + (f": {how}" if how else ""))
            n = self.count(fam)
            idx = list(range(n)) if n is not None and n <= FAN else [0, 1, 2, None, n - 1] if n else [None]
            kind = stage_kind(self.stages[fam]) if fam in self.stages else "pool"
            groups.append((f"{fam}[{c.name}], {c.name} in 0..{n - 1}" if n else f"{fam}[{c.name}]",
                           [Box([f"{fam}[{i}]" if i is not None else "…"], kind if i is not None else "note")
                            for i in idx]))
        return Fan(Box(lines, "gateway"), groups)

    def build(self) -> Item:
        names = order(self.prog)
        all_names = set(self.pools) | set(self.stages)
        roots = [n for n in names if n in self.stages and any(m.startswith(n + ".") for m in all_names)]
        clusters: list[Item] = []
        routed = [r for r in self.routes if r.families]
        for n in names:
            if n in self.done:
                continue
            root = next((r for r in roots if n == r or n.startswith(r + ".")), None)
            family = root or n.split(".", 1)[0]
            for r in [r for r in routed if family in r.families.values()]:  # the gateway before what it routes to
                clusters.append(self.gateway(r))
                routed.remove(r)
            if root is not None:
                members = [m for m in names if m.startswith(root + ".")]
                clusters.append(self.cluster(root, members))
            elif n in self.stages and isinstance(self.stages[n].kind, I.Step):
                clusters.append(self.engine(self.stages[n]))
            elif n in self.pools and (self.pools[n].admit_via in self.stages or self.pools[n].memory in self.stages):
                owner = self.pools[n].memory or self.pools[n].admit_via
                clusters.append(self.engine(self.stages[owner]))
            else:
                clusters.append(self.box(n))
        if not clusters:
            clusters = [Text("(no pools or stages)", 11, color="#475569")]
        return Links(Row(clusters, gap=34, arrows=False, top=True), flows(self.prog), self.prog.share)


class Links(Item):
    """The deployment's row, then under it one line a link: each transfer's stages joined."""

    def __init__(self, row: Row, links: list[tuple[str, ...]], share: str | None):
        self.row, self.links, self.share = row, links, share
        self.lane = 24
        label_w = max([text_width(self.label(l), 10.5) for l in links] + [0])
        self.w = max(row.w, label_w + 40)
        self.h = row.h + (self.lane * len(links) + 8 if links else 0)
        self.port = row.port

    def label(self, names: tuple[str, ...]) -> str:
        how = f", concurrent transfers share by {self.share}" if self.share else ""
        return "link: a transfer crosses " + " and ".join(names) + " at once" + how

    def place(self, c: Canvas, x, y):
        self.row.place(c, x, y)
        for n, names in enumerate(self.links):
            ly = y + self.row.h + 8 + n * self.lane
            xs = []
            for name in names:
                if name not in c.anchors:
                    continue
                ax, ay, aw, ah = c.anchors[name]
                cx = ax + aw / 2 + 6 * n
                c.line([(cx, ay + ah), (cx, ly)], color="#6d28d9", width=1.8)
                c.dot(cx, ly, 3, color="#6d28d9")
                xs.append(cx)
            if xs:
                c.line([(min(xs), ly), (max(xs), ly)], color="#6d28d9", width=1.8)
                label = self.label(names)  # under its line, moved left where it would pass the frame
                lx = min(min(xs) + 8, x + self.w - text_width(label, 10.5))
                c.text(lx, ly + 2, label, 10.5, color="#6d28d9")


def deployment(prog: I.Program, routes: list[Route] = ()) -> Item:
    d = Deployment(prog, routes)
    body = d.build()
    return Column([Text("The deployment: where each step of the path runs and what it holds", 13, bold=True),
                   Frame("deployment", Column([body, Space(0, 2)]), "group",
                         [f"claims: {len(prog.claims)}, gauges: {len(prog.gauges)}"] if prog.claims or prog.gauges
                         else [])], gap=6)
