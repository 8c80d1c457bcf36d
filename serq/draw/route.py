"""Routing: a `choose` that picks the member of a queue family a request goes to, and the gateway
whose `route` it was written in. The IR keeps no gateway (its route is expanded where the server
calls it), so its name comes from the source: the queue with the `gateway` role whose route holds
the choose's location. Without the source, a routing choose is drawn on its own."""
from __future__ import annotations

import dataclasses

from serq.draw.text import Source, nodes, number, src
from serq.ir import model as I
from serq.link.exprs import const_value
from serq.link.rules import walk


@dataclasses.dataclass
class Route:
    gateway: str | None                 # the gateway's name, when the source says it
    chooses: list[I.Choose]
    families: dict[str, str]            # a choose's variable -> the family it picks a member of

    @property
    def title(self) -> str:
        return f"gateway {self.gateway}" if self.gateway else "route: " + ", ".join(
            f"choose {c.name}" for c in self.chooses)


def statements(prog: I.Program) -> list:
    w = prog.workload
    return list(walk(prog.server + w.init + w.turn + (w.session or [])))


def targets(s) -> list[I.Target]:
    """The pools and stages a statement names."""
    if isinstance(s, I.Hold):
        return [p.pool for p in s.pools]
    if isinstance(s, I.Run):
        return list(s.stages)
    pool = getattr(s, "pool", None)
    return [pool] if isinstance(pool, I.Target) else []


def indexed_by(stmts: list, var: str) -> str | None:
    """The family the statements after a choose name with its variable as the index: R for
    R.reqs[r], R.kv[r] and R[r] (a queue's members' parts share the queue's name)."""
    for s in stmts:
        for t in targets(s):
            if isinstance(t.index, I.Attr) and t.index.name == var:
                return t.name.split(".", 1)[0]
    return None


def gateways(source: Source | None) -> list[tuple[str, I.Loc]]:
    """Each gateway's name and where its route is written."""
    from serq.lang import ast as A
    out = []
    for i in range(len(source.files) if source is not None else 0):
        for q in nodes(source.tree(i), A.Queue):
            if any(r == "gateway" for r, _ in q.roles):
                for e in q.entries:
                    if e.verb == "route":
                        sp = e.span
                        out.append((q.name, I.Loc(file=i, line=sp.line, col=sp.col, end_line=sp.end_line,
                                                  end_col=sp.end_col)))
    return out


def _within(at: I.Loc | None, span: I.Loc) -> bool:
    return (at is not None and at.file == span.file and (at.line, at.col) >= (span.line, span.col)
            and (at.line, at.col) <= (span.end_line, span.end_col))


def routes(prog: I.Program, source: Source | None) -> list[Route]:
    """The program's routes in path order: each gateway's chooses together, each other choose
    that picks a family's member on its own."""
    stmts = statements(prog)
    gws = gateways(source)
    out: list[Route] = []
    by_gateway: dict[str, Route] = {}
    for i, s in enumerate(stmts):
        if not isinstance(s, I.Choose):
            continue
        fam = indexed_by(stmts[i + 1:], s.name)
        gw = next((name for name, span in gws if _within(s.at, span)), None)
        if gw is None and fam is None:
            continue
        if gw is not None and gw in by_gateway:
            r = by_gateway[gw]
        else:
            r = Route(gw, [], {})
            out.append(r)
            if gw is not None:
                by_gateway[gw] = r
        r.chooses.append(s)
        if fam is not None:
            r.families[s.name] = fam
    return out


def route_of(routes_: list[Route], choose: I.Choose) -> Route | None:
    return next((r for r in routes_ if any(c is choose for c in r.chooses)), None)


# ------------------------------------------------------------------ what a choose's keys say


def policies(key) -> tuple[str | None, list[tuple[str, object, bool]]] | None:
    """A key the constants select among (`policy == 0 ? A : policy == 1 ? B : C`): the name they
    compare (policy) when every condition is `X == k`, and each arm as (its condition, or k alone
    under such a name, None for the last arm's other values; its expression; whether the inputs
    given select it). Else None."""
    arms = []
    e = key
    while isinstance(e, I.If) and const_value(e.c) is not None:
        arms.append((e.c, e.a))
        e = e.b
    if not arms:
        return None
    arms.append((None, e))
    chosen = next(i for i, (c, _) in enumerate(arms) if c is None or const_value(c) != 0)
    conds = [c for c, _ in arms[:-1]]
    simple = all(isinstance(c, I.Bin) and c.op == "==" and isinstance(c.r, I.Num) for c in conds)
    names = {src(c.l) for c in conds} if simple else set()
    x = names.pop() if len(names) == 1 else None
    out = []
    for i, (c, a) in enumerate(arms):
        if c is not None:
            label = number(c.r.v) if x else src(c)
        elif x:
            v, taken = const_value(conds[0].l), [c.r.v for c in conds]
            label = number(v) if i == chosen and v not in taken else None  # any value the others do not take
        else:
            label = "otherwise"
        out.append((label, a, i == chosen))
    return x, out


def name_of(key, var: str, prog: I.Program) -> str | None:
    """A routing key's usual name when it has a usual shape; the member with the least key wins."""
    def obs(e, fn):
        return isinstance(e, I.Obs) and e.fn == fn and _by(e.of, var)
    if isinstance(key, I.Un) and key.op == "-" and obs(key.e, "cachedin"):
        return "prefix affinity"
    if obs(key, "used"):
        pool = next((p for p in prog.pools if p.name == key.of.name), None)
        return "least KV used" if pool is not None and pool.memory is not None else "least used"
    if obs(key, "queued"):
        return "shortest queue"
    if obs(key, "holders"):
        return "fewest running"
    if isinstance(key, I.Bin) and key.op == "+" and {getattr(key.l, "fn", None), getattr(key.r, "fn", None)} == \
            {"holders", "queued"} and obs(key.l, key.l.fn) and obs(key.r, key.r.fn):
        return "least outstanding"
    if isinstance(key, I.If) and isinstance(key.c, I.Bin) and key.c.op == "==" and \
            const_value(key.a) == 0 and const_value(key.b) == 1:
        c = key.c
        other = c.r if isinstance(c.l, I.Attr) and c.l.name == var else c.l if isinstance(c.r, I.Attr) \
            and c.r.name == var else None
        if other is None:
            return None
        if _mod(other):
            return "round robin"
        if isinstance(other, I.Attr) and _drawn(prog, other.name):
            return "random"
    return None


def _by(t: I.Target, var: str) -> bool:
    return isinstance(t.index, I.Attr) and t.index.name == var


def _mod(e) -> bool:
    return isinstance(e, I.Bin) and e.op == "%"


def _drawn(prog: I.Program, name: str) -> bool:
    """Whether the attribute is set to a uniform draw (a member picked at random)."""
    for s in statements(prog):
        if isinstance(s, I.Set) and s.name == name:
            return any(isinstance(x, I.Draw) and x.dist == "uniform" for x in _all(s.e))
    return False


def _all(e):
    yield e
    for k in type(e).model_fields:
        v = getattr(e, k)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, I.Target):
                x = x.index
            if isinstance(x, I.Node) and hasattr(x, "k"):
                yield from _all(x)


def choose_lines(c: I.Choose, family: str | None, prog: I.Program) -> list[str]:
    """A choose in words: the member it picks, by which key (the policy the inputs select first,
    with its key, then the others the program can take, one a line), then its ties."""
    who = f"the {family}[{c.name}]" if family else "the one"
    lines = [f"choose {c.name} in {src(c.n)}: {who} with the least key"]
    keys = list(c.keys)
    sel = policies(keys[0]) if keys else None
    if sel is not None:
        x, arms = sel
        for label, e, chosen in sorted(arms, key=lambda arm: not arm[2]):
            head = (f"{x} = {label}" if label is not None else f"any other {x}") if x else label
            name = name_of(e, c.name, prog)
            if chosen:
                lines.append(f"{head} (chosen): {name or 'key ' + src(e)}")
                if name:
                    lines.append(f"  key {src(e)}")
            else:
                lines.append(f"{head}: {name or src(e)}")
        keys = keys[1:]
    elif keys:
        lines.append("key " + _key(keys[0], c.name, prog))
        keys = keys[1:]
    if keys:
        lines.append("ties: " + ", then ".join(_key(k, c.name, prog) for k in keys))
    return lines


def _key(k, var: str, prog: I.Program) -> str:
    n = name_of(k, var, prog)
    return f"{n} ({src(k)})" if n else src(k)
