"""The reference's *Programs* that have no oracle, each against something independent of the
interpreter: multi-turn/replica.sq (Little's law over the run, memory, sessions), multi-turn/
routing.sq (Pollaczek-Khinchine at a quarter of the rate, join-the-shortest-queue against random,
prefix affinity against random), single-turn/fastertransformer.sq and separate_phases.sq (a
hand-computed trace on the step clock, and the direction between the two)."""
from __future__ import annotations

import math
import os
import re

import pytest

from serq import api
from serq.ir.model import Settings
from test_workloads import Checked

EX = os.path.join(os.path.dirname(__file__), "..", "examples")
MARGIN = 1.5  # a confidence interval, widened (as tests/test_closed_forms.py)


def run(rel, inputs=None, **settings):
    rep = api.run(api.load(os.path.join(EX, rel), inputs or {}), Settings(**settings))
    return rep, rep.pop("_sim")


# ---- multi-turn/replica.sq -----------------------------------------------------------------------

def test_replica_littles_law_memory_and_every_session_ended():
    sim = Checked(api.load(os.path.join(EX, "multi-turn", "replica.sq"), {}), Settings(arrivals=300, seed=3))
    sim.expected = lambda a: a["o"]          # every answer commits its output tokens
    rep = sim.run()
    s = rep["sessions"]
    assert s["arrived"] == s["completed"] == 300 and s["live_at_end"] == 0 and s["rejected"] == 0
    # Little's law on the sample path: drained, every session lies inside [0, end], so the time average
    # of the sessions open is the sum of the sessions' times over the run's length (exactly)
    t = rep["observe"]["session_time"]
    assert t["count"] == 300
    assert math.isclose(rep["gauges"]["open_sessions"]["mean"], t["mean"] * t["count"] / rep["end"], rel_tol=1e-9)
    # every session dropped its KV before it ended, and nothing holds it: the pool is empty
    kv = next(m for m in sim.pools if m.label == "kv")
    assert kv.used == 0 and kv.cached == 0 and not any(e.alive for e in kv.entries)
    assert rep["pools"]["kv"]["max_used"] <= rep["pools"]["kv"]["cap"]
    # a turn after the first finds its history cached: some admissions reuse (the prefix cache works)
    assert sim.answered == rep["pools"]["reqs"]["admitted"] > 300


# ---- multi-turn/routing.sq -----------------------------------------------------------------------

STEP = 0.003   # routing.sq's omega: an iteration's time once a = beta = 0


def mg1_replicas(rho, out, policy, seed, **settings):
    """routing.sq with one-turn sessions and replicas made M/G/1: one request slot, an iteration of
    constant time, so a request's service is its output tokens' iterations."""
    q = math.exp(-1 / out)                          # o = 1 + floor(Exp(out)) is geometric: P(o > k) = q^k
    eo, eo2 = 1 / (1 - q), (1 + q) / (1 - q) ** 2
    es, es2 = STEP * eo, STEP * STEP * eo2
    lam = rho / es                                  # a replica's rate: a quarter of the gateway's
    rep, _ = run("multi-turn/routing.sq", dict(policy=policy, more=0, seqs=1, a=0, beta=0, out=out, rate=4 * lam),
                 warmup=2, seed=seed, **settings)
    pk = es + lam * es2 / (2 * (1 - rho))           # Pollaczek-Khinchine
    return rep, pk, 1 / (1 / es - lam)              # and M/M/1 at the same mean


def test_random_routing_is_four_independent_queues_at_a_quarter_of_the_rate():
    rep, pk, mm1 = mg1_replicas(0.7, 10, 0, seed=1, horizon=80)
    r = rep["client"]["response"]
    assert r["count"] > 6000
    assert abs(r["mean"] - pk) <= MARGIN * r["ci95"], f"{r['mean']:.4f} ± {r['ci95']:.4f}, P-K {pk:.4f}"
    # a geometric service of mean 10.5 iterations is nearly exponential: M/M/1's mean is in the interval too
    assert abs(r["mean"] - mm1) <= MARGIN * r["ci95"], f"{r['mean']:.4f} ± {r['ci95']:.4f}, M/M/1 {mm1:.4f}"
    for j in range(4):                              # each replica carries a quarter of the load
        assert abs(rep["stages"][f"R[{j}]"]["utilisation"] - 0.7) < 0.06


@pytest.mark.parametrize("rho,seed", [(0.5, 1), (0.7, 1), (0.9, 1), (0.9, 2)])
def test_join_the_shortest_queue_is_no_worse_than_random(rho, seed):
    """One seed draws the same sessions under both policies (*Workload*); least outstanding requests
    (policy 2) waits no longer than random (policy 0), within the two intervals."""
    rnd, _, _ = mg1_replicas(rho, 5, 0, seed, horizon=15)
    jsq, _, _ = mg1_replicas(rho, 5, 2, seed, horizon=15)
    assert rnd["sessions"]["arrived"] == jsq["sessions"]["arrived"]
    a, b = rnd["client"]["response"], jsq["client"]["response"]
    assert b["mean"] <= a["mean"] + math.hypot(a["ci95"], b["ci95"]), (a, b)


def test_round_robin_deals_one_turn_sessions_evenly():
    """Policy 1 with one turn a session: session s goes to s mod 4, so the replicas' admissions differ
    by one at most, and the first replicas take the extra ones."""
    rep, _, _ = mg1_replicas(0.7, 5, 1, seed=1, arrivals=401)   # drained: every session admitted
    n = rep["sessions"]["arrived"]
    admitted = [rep["pools"][f"R.reqs[{j}]"]["admitted"] for j in range(4)]
    assert sum(admitted) == n
    assert admitted == [n // 4 + (1 if j < n % 4 else 0) for j in range(4)], (n, admitted)


def test_prefix_affinity_hits_the_cache_more_often_than_random():
    hits = {}
    for policy in (0, 4):
        rep, _ = run("multi-turn/routing.sq", dict(policy=policy), horizon=40, seed=1)
        hits[policy] = rep["observe"]["hit"]
    # a turn after a session's first finds its history where the session's last turn ran
    assert hits[4]["mean"] - hits[0]["mean"] > hits[4]["ci95"] + hits[0]["ci95"], hits


# ---- single-turn/fastertransformer.sq and separate_phases.sq -------------------------------------

def step_clock(rel, edit=lambda text: text):
    """The program's engine and schedule on the step clock (`execute (1)`: a time is an iteration),
    under three requests of a 100-token prompt and 5 output tokens arriving at 3, 6 and 9."""
    with open(os.path.join(EX, rel), encoding="utf-8") as fh:
        text = edit(fh.read())
    text, n = re.subn(r"execute \(.*\);", "execute (1);", text)
    assert n == 1
    text, n = re.subn(r"  workload \{.*?\n  \}\n",
                      "  workload { arrive renewal(3); hidden o; turn { Size n = 100; Size o = 5; } }\n",
                      text, flags=re.S)
    assert n == 1
    rep = api.run(api.load_text(text, rel, {}), Settings(arrivals=3))
    sim = rep.pop("_sim")
    return rep, {k: list(v.v) for k, v in sim.client.items()}


# by hand, iteration by iteration (arrivals at 3, 6, 9; a prompt is one iteration, a token one):
# FasterTransformer: r0 prefills [3,4) and decodes to 8; r1 (6) waits for r0's decodes, prefills
# [8,9), decodes to 13; r2 (9) waits for r1's, prefills [13,14), decodes to 18.
# separate phases: r0 prefills [3,4), decodes [4,6); r1 prefills [6,7) alone, r0 waiting; both decode
# [7,9), r0 done at 9; r2 prefills [9,10) alone; r1 ends at 12, r2 at 14.
HAND = {
    "single-turn/fastertransformer.sq": dict(ttft=[1, 3, 5], tpot=[1, 1, 1], response=[5, 7, 9], end=18),
    "single-turn/separate_phases.sq": dict(ttft=[1, 1, 1], tpot=[1.25, 1.25, 1], response=[6, 6, 5], end=14),
}


@pytest.mark.parametrize("rel", sorted(HAND))
def test_phases_against_a_hand_computed_trace(rel):
    rep, samples = step_clock(rel)
    want = HAND[rel]
    for k in ("ttft", "tpot", "response"):
        assert samples[k] == pytest.approx(want[k]), (k, samples[k])
    assert rep["end"] == want["end"]
    assert rep["claims"]["phases_apart"]["status"] == "held"


def test_mixed_batching_breaks_phases_apart():
    """fastertransformer.sq without its `only`: vLLM-like mixed batches. r1 and r2 prefill beside the
    decodes, so every request has its first token after one iteration and its last after five, and
    the claim fails at the first mixed iteration, r1's at 6 (the claim reads what it says)."""
    rep, samples = step_clock("single-turn/fastertransformer.sq", lambda t: t.replace(" only (in_phase())", ""))
    # and every gap between two tokens of a turn is one iteration: four gaps each (itl)
    assert samples == dict(ttft=[1, 1, 1], tpot=[1, 1, 1], response=[5, 5, 5], itl=[1] * 12)
    assert rep["claims"]["phases_apart"]["status"] == "failed" and rep["claims"]["phases_apart"]["at"] == 6


def test_decode_first_delays_first_tokens_and_prefill_first_delays_the_rest():
    """On one seed (the same requests), FasterTransformer's decode-first gives the longer time to first
    token (apart by the two intervals) and the shorter time per output token (by the means); both keep
    the phases apart."""
    ft, _ = run("single-turn/fastertransformer.sq", horizon=40, seed=2)
    sp, _ = run("single-turn/separate_phases.sq", horizon=40, seed=2)
    for rep in (ft, sp):
        assert rep["claims"]["phases_apart"]["status"] == "held"
    a, b = ft["client"], sp["client"]
    assert a["ttft"]["mean"] - a["ttft"]["ci95"] > b["ttft"]["mean"] + b["ttft"]["ci95"]
    assert a["tpot"]["mean"] < b["tpot"]["mean"]   # the intervals overlap: prefills are short iterations


# ---- the vLLM workload examples' engine ----------------------------------------------------------

ENGINE_LETS = re.compile(r"^  let (blocks|bs|max_seqs|B|chunk_cap|caching|a|omega|beta|c0) = .*$", re.M)


def vllm_engine(rel):
    """A program's lets the engine reads, and its text from `device gpu` to `pool reqs on vllm`."""
    with open(os.path.join(EX, rel), encoding="utf-8") as fh:
        text = fh.read()
    start, end = text.index("  device gpu {"), text.index("  pool reqs on vllm { queue fifo; }")
    return [m.group(0) for m in ENGINE_LETS.finditer(text)], text[start:end]


# vllm_subagents.sq's cache is keyed by content (docs/reference/content.md), so that a subagent
# hits its orchestrator's blocks: its engine is vllm.sq's with these three lines so written
CONTENT = (("request (prompt, output) {", "request (prompt, output, stream, parent, at) {"),
           ("cache (caching * (prompt + output));", "cache (caching * (prompt + output)) content (stream, parent, at);"),
           ("preempt lifo; }", "preempt lifo; cache content; }"))


@pytest.mark.parametrize("rel", ["multi-turn/vllm_chat.sq", "single-turn/vllm_single_turn.sq",
                                 "subagent/vllm_subagents.sq"])
def test_the_vllm_workloads_run_vllm_sq_s_engine(rel):
    """`use` cannot share an engine (docs/vllm.md): the copies are vllm.sq's, letter for letter (the
    subagents' with its content clauses)."""
    lets, engine = vllm_engine("multi-turn/vllm.sq")
    assert len(lets) == 10 and "engine vllm on gpu" in engine
    if rel.startswith("subagent/"):
        for a, b in CONTENT:
            assert engine.count(a) == 1
            engine = engine.replace(a, b)
    assert vllm_engine(rel) == (lets, engine)
