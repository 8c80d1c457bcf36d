"""The content-addressed cache (docs/reference/content.md) on small programs computed by hand."""
from __future__ import annotations

import pytest
from test_interp import by_serial, run

from serq import api
from serq.diagnostics import SerqError
from serq.ir.model import Settings


PROGRAM = """fn main() {
  pool kv { cap %s; block 16; evict lru; cache content; }
  stage s : delay;
  workload { arrive renewal(%s); }
  server {
    hold kv (cost(kv, 64)) reuse (cost(kv, 48)) {
      set c = cached;
      observe hit = c;
      observe u = used(kv);
      load kv (cost(kv, 64 - c));
      run s (cost(s, 10));
    } cache (cost(kv, 64)) content (%s);
  }
}"""


def test_a_block_several_holders_reference_is_counted_once():
    # two sessions, one second apart, whose first 40 tokens are stream 0's: blocks 0 and 1 (tokens
    # 0-31) are the same content, block 2 (32-47) is not (its last token, 47, is past 40)
    rep, sim = run(PROGRAM % (1000, 1, "1 + serial, 0, 40"), arrivals=2)
    assert by_serial(sim, "hit") == {0: [0.0], 1: [32.0]}
    # session 1 references session 0's two blocks while session 0 holds them: 64 + 32, not 128
    assert by_serial(sim, "u") == {0: [64.0], 1: [96.0]}
    kv = sim.pools[0]
    # both gone: session 0's blocks 3, 2 freed first, then session 1's 3, 2 and the shared 1, 0
    assert kv.used == 0 and kv.cached == 6 * 16 and rep["pools"]["kv"]["max_used"] == 96
    assert [b.key for b in kv.free_q] == [(1, 3), (1, 2), (2, 3), (2, 2), (0, 1), (0, 0)]


def test_eviction_takes_the_front_of_the_free_queue_tail_blocks_first():
    # 6 blocks. Sessions at 0, 20, 40, 60 alternate streams 1 and 2, each holding 4 blocks for 10.
    # Session 1 finds stream 1's four blocks freed tail first [3, 2, 1, 0] and evicts 3 and 2;
    # session 2 hits stream 1's blocks 0 and 1 (32) and evicts stream 2's 3 and 2; session 3 hits
    # stream 2's 0 and 1. Evicting heads first would leave sessions 2 and 3 nothing.
    rep, sim = run(PROGRAM % (96, 20, "1 + serial % 2"), arrivals=4)
    assert by_serial(sim, "hit") == {0: [0.0], 1: [0.0], 2: [32.0], 3: [32.0]}
    assert rep["pools"]["kv"]["evicted"] == 2 + 2 + 2


def test_a_hit_leaves_the_free_queue_and_returns_at_its_back():
    # one stream, sessions at 0 and 20 on a roomy pool: the second hits three blocks (reuse 48) and
    # gives them back after its own block 3
    _, sim = run(PROGRAM % (1000, 20, "1"), arrivals=2)
    assert by_serial(sim, "hit") == {0: [0.0], 1: [48.0]}
    kv = sim.pools[0]
    # session 0 freed [3, 2, 1, 0]; session 1 took 0, 1, 2 out and, its own new block 3 a duplicate
    # of 3's key, freed [3', 2, 1, 0]
    keys = [b.key for b in kv.free_q]
    assert keys == [(1, 3), (1, 3), (1, 2), (1, 1), (1, 0)]
    assert len(kv.table[(1, 3)]) == 2


def test_without_the_option_the_cache_is_per_session():
    # the same program without `cache content` and `content`: the per-session cache, no sharing
    text = (PROGRAM % (1000, 1, "1 + serial, 0, 40")).replace(" cache content;", "").replace(
        " content (1 + serial, 0, 40)", "")
    _, sim = run(text, arrivals=2)
    assert by_serial(sim, "hit") == {0: [0.0], 1: [0.0]} and by_serial(sim, "u") == {0: [64.0], 1: [128.0]}


@pytest.mark.parametrize("content,msg", [
    ("1, 0, 40 + serial", "content 1 is defined twice, as the first 40 of content 0 and as the first 41"),
    ("1, 1, 16", "content 1 would begin with its own tokens"),
    # session 0 names stream 2 as its parent before any hold defined it: 2 is its own tokens from
    # then on, and session 1 cannot make it begin with stream 1's
    ("1 + serial, 2 - serial, 16", "content 2 is defined twice, as its own tokens and as the first 16 of content 1"),
])
def test_a_stream_is_defined_one_way(content, msg):
    with pytest.raises(SerqError) as e:
        run(PROGRAM % (1000, 1, content), arrivals=2)
    assert e.value.code == "R045" and msg in str(e.value)


def test_a_trace_says_what_a_prompt_shares(tmp_path):
    # two sessions whose prompts begin with the 40 tokens of system prompt 9; the second arrives
    # after the first has released: it hits the two whole blocks of the system prompt, and not
    # block 2, which holds the first session's own tokens
    (tmp_path / "t.csv").write_text("session,turn,new,out,stream,parent,common\n"
                                    "a,0,64,1,1,9,40\nb,0,70,1,2,9,40\n")
    (tmp_path / "t.sq").write_text("""fn main() {
      pool kv { cap 1000; block 16; evict lru; cache content; }
      stage s : delay;
      workload { arrive renewal(20); trace "t.csv" ordered; }
      server {
        hold kv (cost(kv, new)) reuse (cost(kv, reusable(new, 16))) {
          set c = cached;
          observe hit = c;
          load kv (cost(kv, new - c));
          run s (cost(s, out));
        } cache (cost(kv, new)) content (stream, parent, common);
      }
    }""")
    rep = api.run(api.load(str(tmp_path / "t.sq")), Settings(arrivals=2))
    assert by_serial(rep.pop("_sim"), "hit") == {0: [0.0], 1: [32.0]}


def test_the_request_lowers_its_content_onto_the_hold_it_takes():
    """`cache (…) content (key, par, at)` in an engine's request: the IR's hold carries it, the
    request's parameters substituted (the server passes the trace's columns), and the pool says
    `content`; a program without the option has neither in its IR."""
    import json
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "examples")

    def ir(path):
        return json.loads(api.load(os.path.join(root, path)).model_dump_json(exclude_none=True))

    def holds(stmts):
        for s in stmts:
            if s.get("k") == "hold":
                yield s
            for v in s.values():
                if isinstance(v, list) and v and isinstance(v[0], dict) and "k" in v[0]:
                    yield from holds(v)

    shared = ir("oracle/vllm_shared.sq")
    assert [p["name"] for p in shared["pools"] if p.get("content")] == ["kv"]
    (h,) = [h for h in holds(shared["server"]) if "content" in h]
    assert {k: v["name"] for k, v in h["content"].items()} == {"stream": "stream", "parent": "parent", "at": "common"}
    plain = json.dumps(ir("oracle/vllm_request.sq"))
    assert '"content"' not in plain


def test_a_cache_clause_of_inf_keeps_every_published_block():
    # (a fuzz case: the clause of inf failed the run)
    rep, sim = run((PROGRAM % (1000, 1, "1 + serial, 0, 40")).replace("cache (cost(kv, 64))", "cache (cost(kv, inf))"),
                   arrivals=2)
    assert by_serial(sim, "hit") == {0: [0.0], 1: [32.0]} and sim.pools[0].cached == 6 * 16


def test_an_ir_hold_without_content_on_a_content_pool_keeps_nothing(tmp_path):
    """The linker refuses it (L254); an IR written by hand is run, and its hold is memory alone."""
    import json
    prog = api.load_text(PROGRAM % (1000, 1, "1 + serial, 0, 40"), "t.sq")
    ir = json.loads(prog.model_dump_json(exclude_none=True))
    (hold,) = [s for s in ir["server"] if s.get("k") == "hold"]
    del hold["content"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(ir))
    rep = api.run(api.load_ir(str(path)), Settings(arrivals=2))
    sim = rep.pop("_sim")
    assert by_serial(sim, "hit") == {0: [0.0], 1: [0.0]} and sim.pools[0].cached == 0 and sim.pools[0].used == 0


@pytest.mark.parametrize("content,code", [("now", "L072"), ("used(kv)", "L077"), ("~exp(1)", "L081")])
def test_a_content_reads_attributes_and_numbers(content, code):
    text = (PROGRAM % (1000, 1, content))
    with pytest.raises(SerqError) as e:
        api.load_text(text, "t.sq")
    assert e.value.code == code and "a hold's content" in str(e.value)
