"""A small box layout that writes SVG: items measure themselves, then place their shapes on a canvas.

Text is set in a monospace font, so a line's width is its characters' advances, one each (two for a
wide East Asian character, none for a combining mark): measuring needs no font files and the layout
is the same on every machine (the same bytes for the same program). No text is ever clipped: a box
wraps a long line and grows to its longest.
Each item has a width, a height and a port: the height at which the path's line enters and leaves it.
"""
from __future__ import annotations

import unicodedata
from xml.sax.saxutils import escape, quoteattr

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
ADVANCE = 0.61  # DejaVu Sans Mono's advance is 0.602 em; a little more keeps text off the edges
PAD = 7
ARROW = 26      # the gap between two items of a path, the arrow between them

# the kinds of things drawn, each its own colours: (fill, stroke, dash)
STYLE = {
    "engine": ("#dbeafe", "#1d4ed8", ""),
    "memory": ("#ffedd5", "#c2410c", ""),
    "queue": ("#fef9c3", "#a16207", ""),
    "pool": ("#fde2e4", "#be123c", ""),
    "stage": ("#dcfce7", "#15803d", ""),
    "nic": ("#ede9fe", "#6d28d9", ""),
    "device": ("#f8fafc", "#475569", "5 3"),
    "group": ("#ffffff", "#94a3b8", ""),
    "hold": ("#fffbf5", "#c2410c", "6 3"),
    "control": ("#f1f5f9", "#475569", ""),
    "client": ("#ffffff", "#334155", ""),
    "note": ("#ffffff", "#cbd5e1", ""),
    "gateway": ("#ccfbf1", "#0f766e", ""),
}
INK = "#0f172a"
MUTED = "#475569"


def fmt(v: float) -> str:
    """A coordinate, short and the same on every machine."""
    r = round(v, 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


def advances(s: str) -> int:
    """A line's width in the font's advances: its characters', a wide one two, a mark none."""
    n = 0
    for ch in s:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def text_width(s: str, size: float) -> float:
    return advances(s) * size * ADVANCE


class Canvas:
    def __init__(self):
        self.parts: list[str] = []
        self.anchors: dict[str, tuple[float, float, float, float]] = {}  # a placed box by name
        self.right = 0.0
        self.bottom = 0.0

    def grow(self, x: float, y: float):
        self.right = max(self.right, x)
        self.bottom = max(self.bottom, y)

    def rect(self, x, y, w, h, kind: str, rx: float = 5, width: float = 1.2, card: bool = False):
        """A box; `card` marks one of the cards behind a family's box, which overlap it on purpose."""
        fill, stroke, dash = STYLE[kind]
        d = f' stroke-dasharray="{dash}"' if dash else ""
        if card:
            d += ' class="card"'
        self.parts.append(f'<rect x="{fmt(x)}" y="{fmt(y)}" width="{fmt(w)}" height="{fmt(h)}" rx="{fmt(rx)}" '
                          f'fill="{fill}" stroke="{stroke}" stroke-width="{fmt(width)}"{d}/>')
        self.grow(x + w, y + h)

    def text(self, x, y, s: str, size: float = 12, bold: bool = False, color: str = INK, anchor: str = "start"):
        """`y` is the top of the line; the baseline sits at 0.8 of the size below it, plus the leading.
        Leading spaces (a wrapped line's indent) move the text right: SVG collapses them."""
        if anchor == "start" and s.startswith(" "):
            x += text_width(s[:len(s) - len(s.lstrip(" "))], size)
            s = s.lstrip(" ")
        attrs = ' font-weight="bold"' if bold else ""
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if color != INK:
            attrs += f' fill="{color}"'
        self.parts.append(f'<text x="{fmt(x)}" y="{fmt(y + size * 1.0)}" font-size="{fmt(size)}"{attrs}>'
                          f'{escape(s)}</text>')
        w = text_width(s, size)
        left = x - (w if anchor == "end" else w / 2 if anchor == "middle" else 0)
        self.grow(left + w, y + size * 1.3)

    def line(self, points: list[tuple[float, float]], arrow: bool = False, color: str = MUTED,
             dash: str = "", width: float = 1.3):
        d = " ".join(f"{fmt(x)},{fmt(y)}" for x, y in points)
        extra = ' marker-end="url(#arrow)"' if arrow else ""
        if dash:
            extra += f' stroke-dasharray="{dash}"'
        self.parts.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="{fmt(width)}"{extra}/>')
        for x, y in points:
            self.grow(x, y)

    def dot(self, x, y, r: float = 3.5, color: str = MUTED):
        self.parts.append(f'<circle cx="{fmt(x)}" cy="{fmt(y)}" r="{fmt(r)}" fill="{color}"/>')

    def render(self) -> str:
        w, h = self.right + 20, self.bottom + 20
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{fmt(w)}" height="{fmt(h)}" '
                f'viewBox="0 0 {fmt(w)} {fmt(h)}" font-family={quoteattr(FONT)}>\n'
                '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{MUTED}"/></marker></defs>\n'
                f'<rect x="0" y="0" width="{fmt(w)}" height="{fmt(h)}" fill="#ffffff"/>\n')
        return head + "\n".join(self.parts) + "\n</svg>\n"


class Item:
    """Every item below has these and a place(canvas, x, y) that draws it with its top left there."""
    w: float = 0.0
    h: float = 0.0
    port: float = 0.0


class Space(Item):
    def __init__(self, w: float = 0, h: float = 0):
        self.w, self.h, self.port = w, h, h / 2

    def place(self, c, x, y):
        c.grow(x + self.w, y + self.h)


class Text(Item):
    def __init__(self, s: str, size: float = 12, bold: bool = False, color: str = INK):
        self.s, self.size, self.bold, self.color = s, size, bold, color
        self.w, self.h = text_width(s, size), size * 1.35
        self.port = self.h / 2

    def place(self, c, x, y):
        c.text(x, y, self.s, self.size, self.bold, self.color)


WRAP = 52  # advances a box's line takes before it wraps


def wrap(s: str, width: int = WRAP) -> list[str]:
    """A long line broken at spaces into lines of at most `width` advances, the rest indented; a
    word longer than a line is broken where the line ends (nothing is dropped)."""
    out: list[str] = []
    indent = " " * (len(s) - len(s.lstrip(" ")) + 2)  # a wrapped line's rest, under its first word
    while advances(s) > width:
        n, fit = 0, 0
        for i, ch in enumerate(s):  # the characters that fit in `width`
            n += advances(ch)
            if n > width:
                break
            fit = i + 1
        cut = s.rfind(" ", 0, fit + 1)
        if cut <= 2:
            cut = max(fit, 3)
        out.append(s[:cut].rstrip())
        s = indent + s[cut:].lstrip()
    return out + [s]


class Box(Item):
    """A rounded box of lines: the first is its name (bold), the rest smaller and wrapped. `copies`
    > 1 draws a family as a stack of cards."""

    def __init__(self, lines: list[str], kind: str, copies: int = 1, min_w: float = 0):
        lines = [s for s in lines if s] or [""]
        name = wrap(lines[0], 40)  # the name's lines, bold
        self.bold = len(name)
        self.lines = name + [w for s in lines[1:] for w in wrap(s)]
        self.kind = kind
        self.copies = max(1, copies)
        self.off = 4 * min(self.copies - 1, 2)
        tw = max([text_width(s, 12) for s in self.lines[:self.bold]]
                 + [text_width(s, 10.5) for s in self.lines[self.bold:]])
        self.w = max(tw + 2 * PAD, min_w) + self.off
        self.h = 12 * 1.3 * self.bold + 10.5 * 1.3 * (len(self.lines) - self.bold) + 2 * PAD - 2 + self.off
        self.port = self.off + (self.h - self.off) / 2

    def place(self, c, x, y):
        bw, bh = self.w - self.off, self.h - self.off
        for k in range(self.off, 0, -4):  # the cards behind, furthest first
            c.rect(x + k, y + self.off - k, bw, bh, self.kind, card=True)
        top = y + self.off
        c.rect(x, top, bw, bh, self.kind)
        ty = top + PAD - 1
        for s in self.lines[:self.bold]:
            c.text(x + PAD, ty, s, 12, bold=True)
            ty += 12 * 1.3
        for s in self.lines[self.bold:]:
            c.text(x + PAD, ty, s, 10.5, color=MUTED)
            ty += 10.5 * 1.3


class Row(Item):
    """Items left to right, their ports on one line; `arrows` joins each to the next."""

    def __init__(self, items: list[Item], gap: float = ARROW, arrows: bool = True, top: bool = False):
        self.items = items or [Space(ARROW, 14)]
        self.gap, self.arrows, self.top = gap, arrows, top
        if top:  # tops aligned: a row of things that no line joins
            self.port = self.items[0].port
            self.h = max(i.h for i in self.items)
        else:
            self.port = max(i.port for i in self.items)
            self.h = max(self.port - i.port + i.h for i in self.items)
        self.w = sum(i.w for i in self.items) + gap * (len(self.items) - 1)

    def place(self, c, x, y):
        px = x
        for n, i in enumerate(self.items):
            if n and self.arrows:
                c.line([(px - self.gap, y + self.port), (px - 1.5, y + self.port)], arrow=True)
            i.place(c, px, y if self.top else y + self.port - i.port)
            px += i.w + self.gap


class Column(Item):
    """Items top to bottom, left-aligned; the port is the first item's."""

    def __init__(self, items: list[Item], gap: float = 8):
        self.items, self.gap = items, gap
        self.w = max((i.w for i in items), default=0)
        self.h = sum(i.h for i in items) + gap * max(0, len(items) - 1)
        self.port = items[0].port if items else 0

    def place(self, c, x, y):
        for i in self.items:
            i.place(c, x, y)
            y += i.h + self.gap


def stack(items: list[Item], gap: float = 8) -> Column:
    return Column(items, gap)


class Frame(Item):
    """A box around an item, with a bold title and smaller notes at its top; a family is a stack.
    A long title or note wraps, to the inner item's width when that is wider."""

    def __init__(self, title: str, inner: Item, kind: str, notes: list[str] = (), copies: int = 1,
                 badge: str = ""):
        self.inner, self.kind = inner, kind
        self.badge = badge
        self.copies = max(1, copies)
        self.off = 5 * min(self.copies - 1, 2)
        room = max(WRAP, int(inner.w / (10.5 * ADVANCE)))  # advances a note may take
        self.titles = wrap(title + ("  " + badge if badge else ""), max(40, int(inner.w / (12 * ADVANCE))))
        self.notes = [w for s in notes if s for w in wrap(s, room)]
        head_w = max([text_width(t, 12) for t in self.titles] + [text_width(s, 10.5) for s in self.notes])
        self.head = 12 * 1.35 * len(self.titles) + 10.5 * 1.3 * len(self.notes) + 4
        self.w = max(head_w, inner.w) + 2 * PAD + 4 + self.off
        self.h = self.head + inner.h + 2 * PAD + 2 + self.off
        self.port = self.off + PAD + self.head + inner.port

    def place(self, c, x, y):
        bw, bh = self.w - self.off, self.h - self.off
        for k in range(self.off, 0, -5):
            c.rect(x + k, y + self.off - k, bw, bh, self.kind, rx=8, card=True)
        top = y + self.off
        c.rect(x, top, bw, bh, self.kind, rx=8)
        ty = top + PAD - 2
        for n, t in enumerate(self.titles):
            last = n == len(self.titles) - 1
            if last and self.badge and t.endswith("  " + self.badge):  # the badge in its own colour
                t = t[:-len(self.badge) - 2]
                c.text(x + PAD + 2 + text_width(t + "  ", 12), ty, self.badge, 12, color=STYLE[self.kind][1])
            c.text(x + PAD + 2, ty, t, 12, bold=True)
            ty += 12 * 1.35
        for s in self.notes:
            c.text(x + PAD + 2, ty, s, 10.5, color=MUTED)
            ty += 10.5 * 1.3
        self.inner.place(c, x + PAD + 2, top + PAD + self.head)


class Loop(Item):
    """A frame whose end goes back to its start: a while or a loop."""

    def __init__(self, frame: Frame):
        self.frame = frame
        self.w, self.h, self.port = frame.w, frame.h + 14, frame.port

    def place(self, c, x, y):
        self.frame.place(c, x, y)
        b = y + self.frame.h
        c.line([(x + self.w - 14, b), (x + self.w - 14, b + 9), (x + 14, b + 9), (x + 14, b + 1.5)],
               arrow=True, color=STYLE["control"][1], dash="4 2")


class Parallel(Item):
    """Lanes one under another between a split and a merge: a fork's legs, a branch's arms. A lane
    that is None is an arm with nothing to draw: a straight line. `open` (legs joined further on):
    the first lane is the path going on, and the others end in a bar instead of a merge."""

    LINE = 10 * 1.3  # a lane's label sits above its line, wrapped at LABEL advances
    LABEL = 34

    def __init__(self, lanes: list[Item | None], labels: list[str], split_label: str = "", open: bool = False):
        self.labels = [wrap(s, self.LABEL) if s else [] for s in labels]
        self.split_label, self.open = split_label, open
        self.lanes = [lane if lane is not None else Space(0, 6) for lane in lanes]
        self.empty = [lane is None for lane in lanes]
        self.lead = max([text_width(s, 10) for ls in self.labels for s in ls] + [0]) + 22
        self.tail = 22
        self.gap = 8
        ys, yy = [], (10 * 1.3 + 2 if split_label else 0)
        for lane, ls in zip(self.lanes, self.labels):
            yy += max(0, self.LINE * max(1, len(ls)) + 3 - lane.port)  # room for the label above its line
            ys.append(yy)
            yy += lane.h + self.gap
        self.ys = ys
        self.h = yy - self.gap
        inner = max(l.w for l in self.lanes)
        self.w = self.lead + max(inner, 30) + self.tail
        self.w = max(self.w, text_width(split_label, 10) + 12)
        first = ys[0] + self.lanes[0].port
        last = ys[-1] + self.lanes[-1].port
        self.port = first if open else (first + last) / 2

    def place(self, c, x, y):
        ports = [y + yy + lane.port for yy, lane in zip(self.ys, self.lanes)]
        sx, mx = x + 6, x + self.w - 6
        lo, hi = min(ports + [y + self.port]), max(ports + [y + self.port])
        c.line([(x, y + self.port), (sx, y + self.port)])
        c.line([(sx, lo), (sx, hi)], width=2)
        c.dot(sx, y + self.port)
        if self.split_label:
            c.text(sx + 4, y, self.split_label, 10, bold=True, color=MUTED)
        for yy, lane, p, label, empty in zip(self.ys, self.lanes, ports, self.labels, self.empty):
            lx = x + self.lead
            for n, s in enumerate(label):
                c.text(sx + 5, p - self.LINE * (len(label) - n) - 2, s, 10, color=MUTED)
            if empty:
                c.line([(sx, p), (mx, p)])
                continue
            c.line([(sx, p), (lx - 1.5, p)], arrow=True)
            lane.place(c, lx, y + yy)
            if self.open:
                c.line([(lx + lane.w, p), (lx + lane.w + 8, p)])
                c.line([(lx + lane.w + 8, p - 5), (lx + lane.w + 8, p + 5)], width=2)
            else:
                c.line([(lx + lane.w, p), (mx, p)])
        if self.open:
            c.line([(mx, y + self.port), (x + self.w, y + self.port)])
            return
        c.line([(mx, lo), (mx, hi)], width=2)
        c.dot(mx, y + self.port)
        c.line([(mx, y + self.port), (x + self.w, y + self.port)])


class Fan(Item):
    """A node and, at its right, what it sends to, one under another in groups (each with a label
    above it), a line from the node to each."""

    def __init__(self, node: Item, groups: list[tuple[str, list[Item]]], gap: float = 44):
        self.node, self.gap = node, gap
        self.rows: list[tuple[str, Item]] = []  # ("label", Text) or ("item", target)
        for label, items in groups:
            if label:
                self.rows.append(("label", Text(label, 10, color=MUTED)))
            self.rows += [("item", i) for i in items]
        self.col_h = sum(i.h for _, i in self.rows) + 6 * max(0, len(self.rows) - 1)
        self.col_w = max((i.w for _, i in self.rows), default=0)
        self.h = max(node.h, self.col_h)
        self.w = node.w + gap + self.col_w
        self.port = (self.h - node.h) / 2 + node.port

    def place(self, c, x, y):
        ny = y + (self.h - self.node.h) / 2
        self.node.place(c, x, ny)
        sx, sy = x + self.node.w, ny + self.node.port
        mx = sx + self.gap / 2
        cx, cy = sx + self.gap, y + (self.h - self.col_h) / 2
        ports = []
        for kind, i in self.rows:
            i.place(c, cx, cy)
            if kind == "item":
                ports.append(cy + i.port)
            cy += i.h + 6
        if ports:
            c.line([(sx, sy), (mx, sy)])
            c.line([(mx, min(ports + [sy])), (mx, max(ports + [sy]))])
            for p in ports:
                c.line([(mx, p), (cx - 1.5, p)], arrow=True)


class Legend(Item):
    """What each colour and line means."""

    ENTRIES = [("engine", "engine (step stage)"), ("queue", "queue an engine admits"),
               ("memory", "device memory (KV)"), ("pool", "other pool"), ("stage", "fifo / ps / delay stage"),
               ("nic", "NIC, link, transfer"), ("hold", "hold: pools held"), ("device", "device: engine + memory"),
               ("control", "fork, join, branch, loop"), ("gateway", "gateway: routes requests")]

    def __init__(self, kinds: set[str] | None = None):
        """`kinds`: what the picture holds; an entry for another kind is left out (the gateway)."""
        self.entries = [(k, s) for k, s in self.ENTRIES if k != "gateway" or kinds is None or k in kinds]
        self.cols = 3
        self.cell = max(text_width(s, 10.5) for _, s in self.entries) + 34
        rows = -(-len(self.entries) // self.cols)
        self.w = max(self.cell * self.cols, text_width("Legend", 12)) + 2 * PAD
        self.h = 12 * 1.5 + rows * 18 + 2 * PAD
        self.port = self.h / 2

    def place(self, c, x, y):
        c.rect(x, y, self.w, self.h, "note")
        c.text(x + PAD, y + PAD - 2, "Legend", 12, bold=True)
        for n, (kind, label) in enumerate(self.entries):
            cx = x + PAD + (n % self.cols) * self.cell
            cy = y + PAD + 12 * 1.5 + (n // self.cols) * 18
            c.rect(cx, cy, 20, 12, kind, rx=3)
            c.text(cx + 26, cy, label, 10.5, color=MUTED)
