"""The client's samples in the fragment (*What the client sees*; F005 lifted): the reference kernel
records each turn's ttft, tpot and response as the interpreter does, a claim at end reads their
aggregates (the reference's own `claim mean_ok: at end (total(response) <= 1000000 *
count(response));`), `serq verify` decides such claims and `serq claims` states them in Lean."""
from __future__ import annotations

from serq import api, ref
from serq.verify import verify

PROG = """fn main() {
  device gpu { kv cap 64; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 16;
    request (prompt, o) {
      prefill (prompt) growing kv;
      decode (o - 1) growing kv;
      cache (prompt + o);
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0) taking reqs (1), kv (prompt) reserve (prompt);
    }
    execute (1);
  }
  pool kv on gpu { block 4; evict lru; preempt lifo; }
  pool reqs on llm { queue fifo; }
  workload { arrive ARRIVE; turn { Size p = 1 + floor(~exp(8)); Size n = 1 + floor(~exp(3)); } }
  server { llm (p, n); }
  CLAIMS
}
"""


def load(arrive="batch(1)", claims=""):
    return api.load_text(PROG.replace("ARRIVE", arrive).replace("CLAIMS", claims), "client.sq")


def test_a_turn_s_samples_by_hand():
    """One session, a prompt of 8 and 3 output tokens, iterations of 1 s: the prefill ends at 1 and
    samples the first token; the two decode tokens end at 2 and 3, when the turn is answered. ttft 1,
    tpot (3 - 1) / (3 - 1) = 1, response 3; a prompt of 8 and 1 output token has a ttft (its prefill's
    token) and no tpot."""
    for out, want in ((3, {"ttft": [1], "tpot": [1], "response": [3]}),
                      (1, {"ttft": [1], "tpot": [], "response": [1]})):
        prog = load()
        p = ref.convert(prog)
        res = ref.evaluate(p, ref.workload(p, 1, draws=[[7, out - 1]]))
        got = {k: sorted(v for n, v in res.client if n == k) for k in ("ttft", "tpot", "response")}
        assert got == want
        sim = api.run(prog, None, None, {"sessions": [{"arrival": 0, "draws": [7, out - 1]}]})["_sim"]
        assert {k: sorted(sim.client[k].v) for k in want} == want


def test_claims_over_the_client_s_samples_are_verified():
    """Sessions arriving together: the reference's mean response claim is proved over every
    path of the bound; a tight bound on the largest ttft is refuted with a workload the simulator
    replays failing; a claim that every tpot is at most 1 s (a decode token each iteration of 1 s,
    until a preemption) is decided as enumeration decides it."""
    from test_verify import expected
    prog = load("batch(3)", """claim mean_ok: at end (total(response) <= 1000000 * count(response));
  claim quick: at end (largest(response) <= 3 && largest(ttft) <= 1);
  claim steady: at end (largest(tpot) <= 1);""")
    res = verify(prog, sessions=2, values=3, timeout=60)
    want = expected(res.prog, 2, 3, 2)
    assert {k: v.verdict for k, v in res.claims.items()} == want
    assert want["mean_ok"] == "proved" and want["quick"] == "counterexample"
    v = res.claims["quick"]
    assert api.run(prog, None, None, v.workload)["claims"]["quick"]["status"] == "failed"


def test_serq_claims_states_them_in_lean():
    prog = load("batch(2)", "claim mean_ok: at end (total(response) <= 1000000 * count(response));")
    out = api.claims_lean(prog)
    assert out.claims == 1
    assert 'Expr.agg AggFn.total "response"' in out.text and 'Expr.agg AggFn.count "response"' in out.text
