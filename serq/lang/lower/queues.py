"""Queues and roles to named pools and stages; entries expanded at the call; `mark` to `set`
(*Queues*). Engine calls expand here too, so that one pass owns every call statement."""
from __future__ import annotations

import dataclasses

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.kernel import KPool, KStage
from serq.lang.lower.constants import require_constant, require_count
from serq.lang.lower.defs import substitute_ref
from serq.lang.lower.engines import EngineInfo, lower_engine, lower_pool_on, ref
from serq.lang.lower.requests import expand_request
from serq.lang.lower.relations import read
from serq.lang.lower.serving import kv_move
from serq.lang.walk import iter_expr, iter_stmts, map_block, map_expr

ROLES = {
    "gateway": {"route": 0},
    "prefill": {"prefill": 1},
    "decode": {"decode": 1},
    "link": {"transfer": 1},
}


class QueueInfo:
    def __init__(self, q: A.Queue, count):
        self.q = q
        self.name = q.name
        self.count = count            # None: a single queue; an int: a family (a family of one included)
        self.roles = [r for r, _ in q.roles]
        self.pools: dict[str, str] = {}   # local name -> IR name
        self.stage = None                 # the queue's stage, named after it
        self.nic = False
        self.latency = None               # a link's serve latency: the wait before a `transfer on`
        self.entries: dict[tuple[str, bool], A.Entry] = {}
        self.lease_pool: str | None = None
        self.engine: EngineInfo | None = None


def lower_queue(q: A.Queue, consts, pools: list, stages: list, queues: dict, declare) -> QueueInfo:
    count = require_count(q.count, consts, "a queue family's size") if q.count is not None else None
    info = QueueInfo(q, count)
    for role, sp in q.roles:
        if role not in ROLES:
            raise SerqError("L150", f"`{role}` is no role: the roles are gateway, prefill, decode and link", sp)
    if "gateway" in info.roles and count is not None:
        raise SerqError("L151", "each gateway is a single queue", q.span)
    _check_order(q)
    devices = {}
    for d in q.devices:
        if d.count is not None:
            raise SerqError("L152", "a queue's device is the member's: it takes no `[N]`", d.span)
        devices[d.name] = dataclasses.replace(d, count=q.count)
    qname = q.name
    if q.engine is not None:
        eng = dataclasses.replace(q.engine, name=qname, count=q.count)
        dev = devices.get(eng.device)
        if eng.request is not None:
            raise SerqError("L127", "a queue's engine has no request: its entries say what it does", eng.request.span)
        stages.append(lower_engine(qname, eng, dev, count, consts, queue=qname))
        info.engine = EngineInfo(qname, eng, dev, count)
        info.stage = "step"
    if q.serve is not None:
        if q.engine is not None:
            raise SerqError("L153", "a queue has one stage: its engine or a `serve`", q.serve.span)
        stages.append(KStage(qname, count, q.serve.kind, q.serve.span, queue=qname))
        info.stage = q.serve.kind.kind
        if q.serve.latency is not None:
            if "link" not in info.roles or any(e.verb == "transfer" for e in q.entries):
                raise SerqError("L154", "only a link without an entry takes a `latency`", q.serve.span)
            require_constant(q.serve.latency, consts, "a link's latency")
            info.latency = q.serve.latency
            stages.append(KStage(f"{qname}.latency", count, A.Kind("delay", None, q.serve.span), q.serve.span,
                                 queue=qname))
    if q.nic is not None:
        info.nic = True
        stages.append(KStage(f"{qname}.nic", count, q.nic, q.nic.span, queue=qname))
    engines = {qname: info.engine} if info.engine is not None else {}
    for p in q.pools:
        if p.name in info.pools:
            raise SerqError("L060", f"queue `{qname}` declares `{p.name}` twice", p.span)
        full = f"{qname}.{p.name}"
        info.pools[p.name] = full
        if p.owner is None:
            if p.count is not None:
                raise SerqError("L152", "a queue's own pool is the member's: it takes no `[N]`", p.span)
            cap = next((o.args[0] for o in p.opts if o.kind == "cap"), None)
            pools.append(KPool(full, count, cap, p.opts, p.span, queue=qname))
        else:
            owner = p.owner
            if owner == qname and p.owner_dev is None:
                if info.engine is None:
                    raise SerqError("L103", f"`pool {p.name} on {qname}`: queue `{qname}` has no engine", p.span)
            lower_pool_on(p, devices, engines, pools, consts, name=full, queue=qname)
    for e in q.entries:
        _check_entry(e, info)
        key = (e.verb, e.from_ is not None)
        if key in info.entries:
            raise SerqError("L155", f"queue `{qname}` has two `{e.verb}` entries of one form", e.span)
        if e.from_ is not None:
            src = queues.get(e.from_)
            if src is None:
                raise SerqError("L156", f"`from {e.from_}`: the KV comes from a queue declared above", e.span)
            if src.lease_pool is None:
                raise SerqError("L157", f"`from {e.from_}`: queue `{e.from_}` leases nothing, so no KV is left there "
                                "for this entry", e.span)
        info.entries[key] = e
    info.lease_pool = _lease_pool(info)
    return info


def _check_order(q: A.Queue):
    """Device and pools, then the stage, then the entries; a pool on the device or engine may follow it."""
    stage_seen = entry_seen = False
    for kind, sp in q.order:
        if kind in ("Engine", "Serve"):
            if entry_seen:
                raise SerqError("L158", "a queue declares its stage before its entries", sp)
            stage_seen = True
        elif kind == "Entry":
            entry_seen = True
        elif kind in ("Pool", "Device", "Nic"):
            if entry_seen:
                raise SerqError("L158", "a queue declares its device and pools before its entries, which read what "
                                "is above them", sp)
    return stage_seen


def _check_entry(e: A.Entry, info: QueueInfo):
    for role in info.roles:
        sig = ROLES[role]
        if e.verb in sig:
            n = len(e.params or ())
            if n != sig[e.verb]:
                raise SerqError("L159", f"the `{e.verb}` entry takes {sig[e.verb]} parameter(s)", e.span)
            if e.from_ is not None and e.verb != "decode":
                raise SerqError("L159", "only a decode entry names the queue its KV comes from", e.span)
            return
    verbs = ", ".join(v for r in info.roles for v in ROLES[r]) or "none: the queue plays no role"
    raise SerqError("L159", f"`{e.verb}` is no entry of queue `{info.name}`'s roles (its entries: {verbs})", e.span)


def _lease_pool(info: QueueInfo):
    leased = set()
    for e in info.q.entries:
        found = None
        for s in iter_stmts(e.body):
            if isinstance(s, A.Hold) and s.lease is not None:
                found = s.lease[0].head
        if found is not None:
            leased.add(found)
    if not leased:
        return None
    if len(leased) > 1:
        raise SerqError("L157", f"queue `{info.name}`'s entries lease different pools", info.q.span)
    local = leased.pop()
    return info.pools.get(local, local)


class Calls:
    """Expands `E(args);` and `Q[i].VERB(args) [from …] [to …];` at the call."""

    def __init__(self, engines, queues, relations, serving, consts):
        self.engines: dict[str, EngineInfo] = engines
        self.queues: dict[str, QueueInfo] = queues
        self.relations = relations
        self.serving = serving
        self.consts = consts
        self.prep = lambda stmts: stmts
        readers = {}
        for r in relations:
            if r.reader in readers:
                raise SerqError("L162", f"queue `{r.reader}` reads from one source", r.span)
            readers[r.reader] = r
        self.readers = readers

    def block(self, stmts, side, depth=0):
        def fs(s):
            if isinstance(s, A.CallStmt):
                return self._call(s, side, depth)
            if isinstance(s, A.Mark):
                raise SerqError("L163", "`mark` stands in a queue's entry or an engine's request", s.span)
            return s
        return map_block(stmts, lambda e: e, fs)

    def _call(self, s: A.CallStmt, side, depth):
        fn = s.call.fn
        if depth > 16:
            raise SerqError("L041", "entry calls nest too deep (an entry calls itself?)", s.span)
        if fn.simple and fn.head in self.engines:
            if side != "server":
                raise SerqError("L164", "an engine's request is called in the server", s.span)
            stmts = self.prep(expand_request(s, self.engines[fn.head]))
            return list(self.block(stmts, side, depth + 1))
        if len(fn.segs) == 2 and fn.segs[0].name in self.queues:
            if side != "server":
                raise SerqError("L165", "a queue's entry is called in the server, not the session", s.span)
            return list(self.block(self._entry(s), side, depth + 1))
        if fn.simple:
            raise SerqError("L045", f"`{fn.head}` is no def, engine or queue entry to call", fn.span)
        raise SerqError("L045", f"`{fn.dotted}` is no queue entry: a call is `QUEUE[i].VERB (…);`", fn.span)

    def _entry(self, s: A.CallStmt):
        qseg, vseg = s.call.fn.segs
        qi = self.queues[qseg.name]
        if vseg.index is not None:
            raise SerqError("L166", "an entry call indexes the queue, `Q[i].VERB (…)`", vseg.span)
        idx = _member(qi, qseg.index, qseg.span)
        has_from = s.from_ is not None and vseg.name != "transfer"  # a link's from/to are the KV move
        entry = qi.entries.get((vseg.name, has_from))
        if entry is None:
            other = qi.entries.get((vseg.name, not has_from))
            if other is not None and other.from_ is not None:
                raise SerqError("L167", f"`{qi.name}.{vseg.name}` reads its KV `from {other.from_}`: the call names it, "
                                f"`from {other.from_}[i]`", s.span)
            if other is not None:
                raise SerqError("L167", f"`{qi.name}.{vseg.name}` takes no `from`", s.span)
            raise SerqError("L159", f"queue `{qi.name}` has no `{vseg.name}` entry", vseg.span)
        args = s.call.args
        if len(args) != len(entry.params or ()):
            raise SerqError("L042", f"`{qi.name}.{vseg.name}` takes {len(entry.params or ())} argument(s), given "
                            f"{len(args)}", s.call.span)
        for a in args:
            if any(isinstance(x, A.Draw) for x in iter_expr(a)):
                raise SerqError("L123", "an entry's arguments are substituted, so none may draw", a.span)
        src = src_idx = None
        if entry.from_ is not None:
            if s.from_ is None:
                raise SerqError("L167", f"`{qi.name}.{vseg.name}` reads its KV from `{entry.from_}`: the call names it",
                                s.span)
            if s.from_.head != entry.from_ or len(s.from_.segs) != 1:
                raise SerqError("L167", f"`{qi.name}.{vseg.name}` reads its KV from `{entry.from_}`; a call from "
                                "another queue is refused", s.from_.span)
            src = self.queues[entry.from_]
            src_idx = _member(src, s.from_.segs[0].index, s.from_.span)
        return self._expand(entry, qi, idx, dict(zip(entry.params or (), args)), src, src_idx, s)

    def _expand(self, entry, qi: QueueInfo, idx, params, src, src_idx, call: A.CallStmt):
        gateway = entry.verb == "route"
        sets = {st.name for st in iter_stmts(entry.body) if isinstance(st, (A.Set, A.Mark))} if not gateway else set()
        q = qi.name

        def member(name, sp, index=None):
            return ref(name, sp, index if index is not None else idx)

        def rename(x):
            if isinstance(x, A.Call) and x.fn.simple and x.fn.head == "cost":
                # a cost names resources: the members' names, renamed already, without their index
                res = tuple(ref(".".join(g.name for g in a.segs), a.span) if isinstance(a, A.Ref) else a
                            for a in x.args[:-1])
                return A.Call(x.fn, res + (x.args[-1],), x.span)
            if not isinstance(x, A.Ref):
                return x
            h = x.segs[0]
            if h.name in params:
                return substitute_ref(x, params)
            if h.name == "self" and x.simple:
                return idx if idx is not None else A.Num(0.0, x.span)
            if h.name in qi.pools and len(x.segs) == 1:
                if h.index is not None:
                    raise SerqError("L166", f"`{h.name}` is the member's own pool; it takes no index here", x.span)
                return member(qi.pools[h.name], x.span)
            if h.name == q and len(x.segs) == 1:
                return member(q, x.span, h.index)
            if h.name == "nic" and qi.nic and len(x.segs) == 1 and "nic" not in self.queues:
                return member(f"{q}.nic", x.span, h.index)
            if src is not None and h.name == src.name and len(x.segs) == 1:
                return ref(src.lease_pool, x.span, src_idx)
            if x.simple and h.name in sets:
                return ref(f"{q}.{h.name}", x.span)
            return x

        def fs(st):
            if isinstance(st, A.Set) and st.name in sets:
                return dataclasses.replace(st, name=f"{q}.{st.name}")
            if isinstance(st, A.Mark):
                return A.Set(f"{q}.{st.name}", ref("now", st.span), st.span)
            if isinstance(st, A.Run) and not st.stages:
                if qi.stage is None:
                    raise SerqError("L168", f"`run (…)` runs on the queue's own stage; queue `{q}` has none", st.span)
                return A.Run((member(q, st.span),), None, st.work, None, st.span)
            if isinstance(st, A.Transfer) and st.on is None and st.index is None:
                return read(self.readers.get(qi.name), st, qi, idx, src, src_idx)
            return st

        body = map_block(self.prep(entry.body), lambda e: map_expr(e, rename), fs)
        out = list(body)
        if call.to is not None:  # a link's transfer entry: the KV it read arrives and the source is given back
            pool, n = call.to
            if call.from_ is None:
                raise SerqError("L169", "`to POOL (n)` moves KV from the call's `from` source", call.span)
            out += kv_move(A.Transfer(None, None, A.Num(0.0, call.span), call.from_, pool, n, call.span))
        return out

def _member(qi: QueueInfo, index, span):
    if qi.count is None:
        if index is not None:
            raise SerqError("L166", f"queue `{qi.name}` is a single queue: call it without an index", span)
        return None
    if index is None:  # a family of one is still a family: D[j].decode (…)
        raise SerqError("L166", f"queue `{qi.name}` is a family: its entries are called `{qi.name}[j].VERB (…)`", span)
    return index


def queue_attr_names(queues) -> set[str]:
    """What each queue's entries set or mark: `Q.x`."""
    from serq.lang.lower.scopes import sets_of
    return {f"{q.name}.{n}" for q in queues.values() for e in q.q.entries if e.verb != "route"
            for n in sets_of(e.body)}


def check_entries(qi: QueueInfo, hidden: set[str], known: set[str], foreign: set[str] = frozenset()):
    """An entry sees its own (*Queues*); the gateway's route reads the request as a server does."""
    from serq.lang.lower.scopes import ScopeCheck, sets_of
    own = set(qi.pools) | {qi.name, "nic", "self"} | {d.name for d in qi.q.devices}
    for e in qi.q.entries:
        if e.verb == "route":
            continue
        pools = set(qi.pools) | ({e.from_} if e.from_ else set())
        binds = [n for h in iter_stmts(e.body) if isinstance(h, A.Hold) for n, _, _ in h.bindings]
        ck = ScopeCheck(f"queue `{qi.name}`'s `{e.verb}` entry", e.params or (), own | ({e.from_} if e.from_ else set()),
                        hidden, known, bindings=binds, pools=pools,
                        foreign={n for n in foreign if not n.startswith(qi.name + ".")})
        ck.check(e.body, sets_of(e.body))
