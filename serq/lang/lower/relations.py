"""`pull`/`push` relations (*Queues*): which queue reads the KV from which, the wait before each
copy, and the share the copies divide the two NICs by; a transfer without `on` in the reader's
entry is the kernel's runs over both NICs, the load and the release."""
from __future__ import annotations

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.kernel import KStage
from serq.lang.lower.constants import require_constant
from serq.lang.lower.engines import cost, ref
from serq.lang.lower.serving import kv_move


class RelationInfo:
    def __init__(self, rel: A.Relation, reader: str, source: str):
        self.rel = rel
        self.reader = reader
        self.source = source
        self.kind = rel.kind
        self.latency = rel.latency
        self.policy = rel.policy
        self.span = rel.span


def lower_relation(rel: A.Relation, queues: dict, consts) -> RelationInfo:
    if rel.latency is not None:
        require_constant(rel.latency, consts, "a relation's latency (a number or a constant over lets)",
                         code="L171")
    for n in (rel.left, rel.right):
        qi = queues.get(n)
        if qi is None:
            raise SerqError("L160", f"`{n}` is no queue declared above the relation", rel.span)
        if not qi.nic:
            raise SerqError("L161", f"queue `{n}` has no `nic`, which the relation's copies cross", rel.span)
    reader, source = (rel.left, rel.right) if rel.kind == "pull" else (rel.right, rel.left)
    return RelationInfo(rel, reader, source)


def relation_latency_stages(relations, queues, stages):
    """The delay stage `Q.nic.latency` of each poster (one latency per poster)."""
    made = {s.name for s in stages}
    for r in relations:
        if r.latency is None:
            continue
        poster = r.reader if r.kind == "pull" else r.source
        if f"{poster}.nic.latency" in made:
            continue
        qi = queues[poster]
        stages.append(KStage(f"{poster}.nic.latency", qi.count, A.Kind("delay", None, r.span), r.span, queue=poster))


def read(rel, st: A.Transfer, qi, idx, src, src_idx):
    """Inside an entry of the reader, a transfer without `on` is the read (*Queues*)."""
    if rel is None:
        raise SerqError("L170", f"a `transfer` without `on` is the read of a pull or push relation; queue "
                        f"`{qi.name}` reads from none", st.span)
    if src is None or rel.source != src.name:
        raise SerqError("L170", f"queue `{qi.name}` reads from `{rel.source}`: an entry from another queue is an "
                        "error", st.span)
    sp = st.span
    out = []
    if rel.latency is not None:
        waiter, widx = (qi.name, idx) if rel.kind == "pull" else (src.name, src_idx)
        lname = f"{waiter}.nic.latency"
        out.append(A.Run((ref(lname, sp, widx),), None, cost([lname], rel.latency, sp), None, sp))
    a, b = f"{src.name}.nic", f"{qi.name}.nic"
    out.append(A.Run((ref(a, sp, src_idx), ref(b, sp, idx)), None, cost([a, b], st.amount, sp), None, sp))
    return out + kv_move(st)
