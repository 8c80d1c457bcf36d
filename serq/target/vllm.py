"""`serq target FILE`: a step engine's settings as a vLLM configuration, refusing what vLLM cannot
express (the reference: *vLLM v1 as a serQ program*; a constant chunk cap is not vLLM's)."""
from __future__ import annotations

import math

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.lang.lower.constants import whole
from serq.link.exprs import const_value



def _span(prog, at):
    if at is None:
        return Span(prog.files[0] if prog.files else "<ir>", 1, 1)
    return Span(prog.files[at.file], at.line, at.col, at.end_line, at.end_col)


def _refuse(prog, at, msg):
    return SerqError("V001", f"vLLM cannot express this: {msg}", _span(prog, at))


def _is_count_sum(e) -> bool:
    """running.count + waiting.count, vLLM's len(running) + len(waiting)."""
    return e.k == "bin" and e.op == "+" and {e.l.k, e.r.k} == {"step"} and \
        {e.l.name, e.r.name} == {"Nres", "Queued"}


def threshold(prog, stage: I.Stage):
    """(long_prefill_token_threshold, adaptive) of the chunk: `n > 1 ? c : inf` or
    `n > 1 ? max(c, floor(budget / n)) : inf` with n = running.count + waiting.count."""
    ch = stage.kind.chunk
    v = const_value(ch)
    if v is not None:
        if v == 0 or v == math.inf:   # no cap: vLLM's threshold 0, its default
            return 0, False
        raise _refuse(prog, stage.at, f"a constant chunk cap ({v:g}) applies even to a request alone, where vLLM "
                      "lifts long_prefill_token_threshold (scheduler.py:606-616)")
    if ch.k == "if" and ch.c.k == "bin" and ch.c.op == ">" and _is_count_sum(ch.c.l) and \
            const_value(ch.c.r) == 1 and const_value(ch.b) == 0:
        a = ch.a
        c = const_value(a)
        if c == math.inf or c == 0:   # `n > 1 ? inf : inf`, the IR's 0 for no cap: vLLM's default, 0
            return 0, False
        if c is not None and whole(c, 1):
            return int(c), False
        if a.k == "fn" and a.name == "max" and len(a.args) == 2:
            c = const_value(a.args[0])
            share = a.args[1]
            budget = const_value(stage.kind.budget)
            if c is not None and whole(c, 1) and share.k == "fn" and share.name == "floor" and share.args[0].k == "bin" and \
                    share.args[0].op == "/" and const_value(share.args[0].l) == budget and \
                    _is_count_sum(share.args[0].r):
                return int(c), True
    raise _refuse(prog, stage.at, "a chunk cap other than `n > 1 ? c : inf` or `n > 1 ? max(c, floor(B / n)) : "
                  "inf` with n = running.count + waiting.count")


def target(prog: I.Program) -> dict:
    steps = [s for s in prog.stages if s.kind.k == "step"]
    if len(steps) != 1:
        raise SerqError("V002", f"serq target reads one step engine; this program has {len(steps)}",
                        _span(prog, None))
    st = steps[0]
    k = st.kind
    if st.count is not None:
        raise _refuse(prog, st.at, "an engine family: a vLLM configuration is one engine")
    if k.serve.k == "exclusive_prefill":
        raise _refuse(prog, st.at, "exclusive prefill: vLLM mixes prefills and decodes in a step")
    if k.serve.keys:
        raise _refuse(prog, st.at, "a serve order other than admission: vLLM serves `running` in order")
    if k.iteration is not None:
        raise _refuse(prog, st.at, "a schedule other than `advance running; admit waiting while "
                      "(running.preempted == 0);`")
    if k.granule is not None:
        raise _refuse(prog, st.at, "a granule")
    budget = const_value(k.budget)
    if budget is None or not whole(budget, 1):
        raise _refuse(prog, st.at, "a tokens cap that is not a constant whole number (max_num_batched_tokens)")
    admitted = [p for p in prog.pools if p.admit_via == st.name]
    memory = [p for p in prog.pools if p.memory == st.name]
    if len(admitted) != 1 or len(memory) != 1:
        raise _refuse(prog, st.at, "vLLM admits one queue of requests (max_num_seqs) into one KV cache")
    reqs, kv = admitted[0], memory[0]
    seqs = const_value(reqs.cap)
    if seqs is not None and not (whole(seqs, 1) or seqs == math.inf):
        raise _refuse(prog, reqs.at, "a request cap that is not a whole number (max_num_seqs)")
    if reqs.queue.k != "fifo":
        raise _refuse(prog, reqs.at, "a waiting queue other than fifo (vLLM's fcfs policy)")
    if kv.preempt.k != "by" or len(kv.preempt.keys) != 1 or kv.preempt.requeue != "head" or \
            not _is_lifo(kv.preempt.keys[0]):
        raise _refuse(prog, kv.at, "a preemption other than lifo with requeue head (running[-1], prepend)")
    if kv.evict.k != "lru":
        raise _refuse(prog, kv.at, "an eviction order other than lru (the free block queue)")
    bs = const_value(kv.block) if kv.block is not None else None
    cap = const_value(kv.cap)
    if bs is None or cap is None or math.isinf(cap):
        raise _refuse(prog, kv.at, "a KV pool without a block and a finite cap")
    thr, adaptive = threshold(prog, st)
    prefix = _prefix_caching(prog, kv.name)
    return {
        "max_num_seqs": int(seqs) if seqs is not None and not math.isinf(seqs) else None,
        "max_num_batched_tokens": int(budget),
        "long_prefill_token_threshold": thr,
        "long_prefill_token_threshold_adaptive": adaptive,
        "block_size": int(bs),
        "num_gpu_blocks": int(cap // bs) + 1,  # block 0 is vLLM's null block
        "enable_prefix_caching": prefix,
        "enable_chunked_prefill": True,
        "policy": "fcfs",
    }


def _is_lifo(e) -> bool:
    return e.k == "un" and e.op == "-" and e.e.k == "ctx" and e.e.name == "admission"


def _zero(e) -> bool:
    """An expression that is 0 whatever it reads: 0, or a product with a factor 0 (`caching * (...)` with
    the input caching=0)."""
    if const_value(e) == 0:
        return True
    if e.k == "cost":
        return _zero(e.e)
    return e.k == "bin" and e.op == "*" and (_zero(e.l) or _zero(e.r))


def _prefix_caching(prog, kv: str) -> bool:
    """On when a hold on the KV pool caches and reuses a prefix that is not a constant 0."""
    from serq.link.rules import walk
    blocks = [prog.server] + ([prog.workload.session] if prog.workload.session else [])
    for b in blocks:
        for s in walk(b):
            if s.k == "hold" and any(p.pool.name == kv for p in s.pools) and s.cache is not None \
                    and not _zero(s.cache):   # cache (0) keeps nothing: caching off
                if s.reuse is None or const_value(s.reuse) != 0:
                    return True
    return False



