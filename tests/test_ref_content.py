"""The reference kernel's cache keyed by content (docs/reference/content.md, docs/lean.md *Content
pools*): each rule on a small hand-worked trace, the kernel's value and the interpreter's, and
`serq verify` deciding claims over programs whose sessions share a system prompt."""
from __future__ import annotations

import csv
import itertools
import os

import pytest

from serq import api, ref
from serq.ir.model import Settings
from serq.ref import exec as X
from serq.verify import verify

HERE = os.path.dirname(__file__)
ROOT = os.path.join(HERE, "..")

# vLLM's request on a content pool of blocks of 4 (examples/oracle/vllm_shared.sq, smaller): the hit
# is the run of published blocks of the request's stream, all but the last token's
PROGRAM = """fn main() {
  device gpu { kv cap CAP; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 64;
    request (prompt, o, key, par, at) {
      at admission { reused = min(cachedin(kv), reusable(prompt, 4)); }
      set c = cached;
      observe hit = c;
      prefill (prompt - c) growing kv;
      decode (o - 1) growing kv;
      observe done = now;
      cache (prompt + o - 1) content (key, par, at);
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0)
        taking reqs (1), kv (min(prompt, reused + budget_left(llm))) reuse (reused);
    }
    execute (1);
  }
  pool kv on gpu { block 4; evict lru; preempt lifo; cache content; }
  pool reqs on llm { queue by (submitted, serial); }
  workload {
    arrive batch(N);
    trace "trace.csv" ordered;
    hidden out;
    session { turn; while (more) { turn; } }
  }
  server { set submitted = now; llm (new, out, stream, parent, common); }
}
"""


def run_both(tmp_path, rows, cap=64):
    """The program on a trace of rows (session, new, out, think, stream, parent, common): the
    interpreter's and the kernel's observations {(name, session): value} (which must agree), and the
    kernel's final machine."""
    n = len({r[0] for r in rows})
    with open(os.path.join(tmp_path, "p.sq"), "w", encoding="utf-8") as fh:
        fh.write(PROGRAM.replace("CAP", str(cap)).replace("N)", f"{n})"))
    with open(os.path.join(tmp_path, "trace.csv"), "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["session", "turn", "new", "out", "think", "stream", "parent", "common"])
        turns: dict = {}
        for s, *rest in rows:
            w.writerow([f"s{s}", turns.setdefault(s, 0)] + rest)
            turns[s] += 1
    prog = api.load(os.path.join(tmp_path, "p.sq"))
    rep = api.run(prog, Settings(horizon=1000.0))
    sim = rep.pop("_sim")
    interp = {(name, serial, turn): v for name, ser in sim.obs.items()
              for (t, serial, turn), v in zip(ser.rows, ser.v)}
    p = ref.convert(prog)
    wl = ref.workload(p, n, trace=ref.read_trace(os.path.join(tmp_path, "trace.csv")))
    res = ref.evaluate(p, wl, horizon=1000)
    kernel = {(name, sid, turn): v for name, v, _t, sid, turn in res.observations}
    assert kernel == interp and res.live == 0
    return kernel, X.run(p, wl, horizon=1000).machine


def test_a_content_program_is_in_the_fragment():
    """F015 is lifted: `cache content` converts, the pool keyed by content and the request's hold
    naming its content (examples/oracle/vllm_shared.sq, which tools/vllm_oracle.py check --ref runs)."""
    p = ref.convert(api.load(os.path.join(ROOT, "examples", "oracle", "vllm_shared.sq")))
    kv = next(x for x in p.pools if x.name == "kv")
    assert kv.content and not next(x for x in p.pools if x.name == "reqs").content
    hold = next(s for s in p.server if isinstance(s, ref.ir.HoldS))
    assert hold.content == ref.ir.Content(ref.ir.Attr("stream"), ref.ir.Attr("parent"), ref.ir.Attr("common"))


def test_a_request_hits_blocks_another_was_given_in_the_same_iteration(tmp_path):
    """Publishing and the hit: at 0 the first request (stream 1, 16 tokens) is admitted and given 16
    tokens, which publishes its 4 blocks as they are scheduled; the second (stream 2, whose first 16
    tokens are stream 1's) is admitted in the same iteration and hits all 4 (reusable(20, 4) = 16),
    and gets one new block (5). The 4 are one set of blocks, counted once. Each then decodes into a
    block of its own (6, 7), never published (the position stops short of its end). At 2 both end:
    the first's blocks 1..4 stay (the second holds them), its block 6 is forgotten; the second frees
    tail first, 7 (unpublished: forgotten), 5 (published, below ℓ = 21: cached), then 4, 3, 2, 1,
    which no one holds now: the free queue is 5, 4, 3, 2, 1."""
    obs, m = run_both(tmp_path, [(0, 16, 2, 0, 1, 0, 0), (1, 20, 2, 0, 2, 1, 16)])
    assert obs[("hit", 0, 0)] == 0 and obs[("hit", 1, 0)] == 16
    kv = m.pools[0]
    assert kv.used == 0 and kv.free_q == (5, 4, 3, 2, 1) and kv.next_blk == 7
    assert kv.table == (((1, 0), 1), ((1, 1), 2), ((1, 2), 3), ((1, 3), 4), ((2, 4), 5))


def test_blocks_other_holders_reference_take_no_room(tmp_path):
    """The room an admission asks is its units less the blocks of its hit that others hold: with a
    cap of 20 units (5 blocks), the second request's 20 units fit beside the first's 16, of which it
    shares 16: both end at 1 (without the credit the second would wait for the first to end, and
    end at 2)."""
    obs, _ = run_both(tmp_path, [(0, 16, 1, 0, 1, 0, 0), (1, 20, 1, 0, 2, 1, 16)], cap=20)
    assert obs[("hit", 1, 0)] == 16 and obs[("done", 1, 0)] == obs[("done", 0, 0)] == 1


def test_eviction_takes_the_tail_of_the_least_recently_freed_first(tmp_path):
    """Release and eviction (vLLM's free queue): the first request (stream 1, 16 tokens, one out)
    ends at 1 and frees its 4 blocks tail first, all below ℓ = 16: the queue is its blocks 3, 2, 1,
    0. The second (its own stream, 20 tokens) arrives at 5 and needs 5 new blocks of the pool's 8:
    one block is evicted, the front of the queue, block 3 of stream 1. The third (stream 3, a child
    of stream 1 at 16) arrives at 10 and hits blocks 0, 1, 2 only: 12 tokens."""
    obs, _ = run_both(tmp_path, [(0, 16, 1, 0, 1, 0, 0), (1, 20, 1, 5, 2, 0, 0), (2, 20, 1, 10, 3, 1, 16)], cap=32)
    assert obs[("hit", 2, 0)] == 12


def test_a_release_keeps_only_what_its_cache_clause_covers(tmp_path):
    """A block at or past ℓ = prompt + o - 1 is forgotten as it is freed, not cached: the first
    request's prompt of 17 and one output token cache 17 tokens, 4 whole blocks; its fifth block
    (positions 16..19) is forgotten. A later request of the same stream and 24 tokens hits 16."""
    obs, m = run_both(tmp_path, [(0, 17, 1, 0, 1, 0, 0), (1, 24, 1, 5, 1, 0, 0)])
    assert obs[("hit", 1, 0)] == 16
    assert all(k != (1, 4) for k, _ in m.pools[0].table[:4])


def test_a_stream_is_defined_once(tmp_path):
    """A stream's definition, once read, never changes (R045): a later hold naming stream 1 as a
    child of stream 2 stops the run on the kernel as on the interpreter; so does a stream that would
    begin with itself."""
    for rows in ([(0, 8, 1, 0, 1, 0, 0), (1, 8, 1, 3, 1, 2, 4)],          # 1: own tokens, then 2's first 4
                 [(0, 8, 1, 0, 1, 2, 4), (1, 8, 1, 3, 2, 1, 4)]):         # 2 would begin with 1, which begins with 2
        with pytest.raises(api.SerqError) as info:
            run_both(tmp_path, rows)
        assert info.value.code == "R045"
        p = ref.convert(api.load(os.path.join(tmp_path, "p.sq")))
        wl = ref.workload(p, 2, trace=ref.read_trace(os.path.join(tmp_path, "trace.csv")))
        with pytest.raises(X.KernelError) as kinfo:
            ref.evaluate(p, wl)
        assert kinfo.value.code == "R045"


def test_keys_and_origins_follow_the_chain_of_parents():
    """A block's key is the origin of its last position and its index: stream 3 = stream 2's first 8,
    stream 2 = stream 1's first 4; block 0 of stream 3 (positions 0..3) is stream 1's, block 1 stream
    2's, block 2 its own. The fuel (the streams named and one more) is never short on a table
    without cycles."""
    streams = ((1, (0, 0)), (2, (1, 4)), (3, (2, 8)))
    assert [X.block_key(streams, 3, j, 4) for j in range(3)] == [(1, 0), (2, 1), (3, 2)]
    assert X.origin(streams, 3, 0, 0) == 3            # no fuel: the stream itself
    assert X.begins_with(streams, 1, (3, 2), 4) and not X.begins_with(streams, 4, (3, 2), 4)


SHARED = """fn main() {
  device gpu { kv cap 48; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 16;
    request (prompt, o, key) {
      at admission { reused = min(cachedin(kv), reusable(prompt, 4)); }
      set c = cached;
      observe hit = c;
      prefill (prompt - c) growing kv;
      decode (o - 1) growing kv;
      cache (prompt + o - 1) content (CONTENT);
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0)
        taking reqs (1), kv (min(prompt, reused + budget_left(llm))) reuse (reused);
    }
    execute (1);
  }
  pool kv on gpu { block 4; evict lru; preempt lifo; cache content; }
  pool reqs on llm { queue fifo; }
  workload { arrive batch(3); turn { Size u = min(~det(2), 8); Size n = 1 + min(~det(2), 3); } }
  server { llm (8 + u, n, 1 + serial); }
  claim hit_bound: at end (largest(hit) <= 8);
  claim hit_half: at end (largest(hit) <= 4);
  claim memory: every iteration of llm (used(kv) <= 20);
}
"""


@pytest.mark.parametrize("content,want", [
    ("key, 0, 8", {"hit_bound": "proved", "hit_half": "counterexample", "memory": "proved"}),
    ("key", {"hit_bound": "proved", "hit_half": "proved", "memory": "counterexample"})])
def test_verify_decides_claims_over_a_shared_system_prompt(tmp_path, content, want):
    """`serq verify` over sessions that share an 8-token system prompt (each conversation its own
    stream, `content (1 + serial, 0, 8)`, its prompt 8 + u tokens): a session's hit is never above
    the system prompt (its stream is its own past it), and is above half of it on some workload;
    two sessions fit in 20 units of KV, as they share the prompt's blocks. Without the shared
    prompt (`content (key)`) nothing is hit and two sessions need more. Each verdict is the
    enumeration's on the plain kernel (2 sessions, draws 0..2), and each counterexample replays
    through the interpreter."""
    path = os.path.join(tmp_path, "shared.sq")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(SHARED.replace("CONTENT", content))
    prog = api.load(path)
    res = verify(prog, 2, 2, timeout=60)
    got = {k: v.verdict for k, v in res.claims.items()}
    enum = {c.name: "proved" for c in res.prog.claims}
    for n in (1, 2):
        for vals in itertools.product(range(3), repeat=2 * n):
            ds = [vals[2 * k:2 * k + 2] for k in range(n)]
            o = ref.evaluate(res.prog, ref.workload(res.prog, n, draws=ds)).claims
            for name in enum:
                if o[name].status == "failed":
                    enum[name] = "counterexample"
    assert got == enum == want, (got, enum)
    for v in res.claims.values():
        if v.verdict == "counterexample":
            assert v.reason is None
            assert api.run(prog, None, None, v.workload)["claims"][v.name]["status"] == "failed"
