"""Bounded model checking by merged states (serq/verify/bmc.py; docs/verify.md, *Unrolled into one
formula*): every workload of the bound at once, iteration by iteration, the machines of one shape
merged into one symbolic state."""
from __future__ import annotations

import os
import random
from fractions import Fraction

import pytest
import z3

from serq import api, ref
from serq.ref import exec as X
from serq.verify import _Search, bmc, machine_at, search as S, sym, verify
from serq.verify.sym import SymNum
from test_verify import expected
from test_verify_invariant import V1
from test_verify_unroll import ENUM_CLAIMS, NEEDLE, needle_found

def _plain(x):
    """A machine as nested values, each number its value: what a concrete run computes."""
    if isinstance(x, SymNum):
        return x.c
    if isinstance(x, (int, str, bool, Fraction, type(None), float)):
        return x
    if type(x) is tuple:
        return tuple(_plain(y) for y in x)
    if isinstance(x, S.Draws):
        return ("draws", x.sid)
    fs = bmc._fields(type(x))
    if fs is None:
        return ("node", id(x))
    skip = {"path", "wl", "draws"}   # the iteration's machine, read apart; the workload's own draws
    return (type(x).__name__,) + tuple(_plain(getattr(x, f)) for f in fs if f not in skip)


def _states(f: S.Family, depth: int) -> list:
    """The merged states of each depth 0..depth."""
    out = [[bmc.initial(f)]]
    for _ in range(depth):
        nxt = []
        for s in out[-1]:
            if not s.over:
                got, undecided = bmc.successors(f, s, lambda: 1e9, [])
                assert undecided == 0
                nxt += got
        out.append(bmc.frontier(nxt))
    return out


@pytest.mark.parametrize("arrive,n,values", [("poisson(1)", 2, 3), ("batch(2)", 3, 1), ("poisson(1)", 1, 8)])
def test_a_state_stands_for_the_workloads_that_satisfy_it(arrive, n, values):
    """The merged states are one semantics with the kernel: for random workloads of the bound, at
    each depth exactly one state's condition holds, and that state's machine under the workload's
    values is the machine the plain kernel reaches as that iteration starts (or as its run ends),
    number for number (the history no claim reads left out of both: `bmc.project`)."""
    prog = ref.convert(api.load_text(V1.replace("CLAIMS", "").replace("arrive poisson(1)", f"arrive {arrive}"),
                                     "v1.sq"))
    rng = random.Random(n * 100 + values)
    with sym.own_context():
        f = S.Family(prog, n, values, values)
        depths = _states(f, 12)
        merged = sum(len(d) for d in depths)
        for _ in range(15):
            model = {f"d{k}_{i}": rng.randint(0, values) for k in range(n) for i in range(2)}
            t = Fraction(0)
            for k in range(n):
                t += Fraction(rng.randint(0, 4 * values), 4)
                model[f"a{k}"] = t if prog.arrive == "poisson" else 0
            wl = ref.workload(prog, n, arrivals=[model[f"a{k}"] for k in range(n)],
                              draws=[[model[f"d{k}_{i}"] for i in range(2)] for k in range(n)])
            m, over = X.initial(prog, wl), False
            for d, states in enumerate(depths[1:], start=1):
                while not over and len(m.path) < d:
                    m, over = X.step(prog, m)
                hits = [s for s in states if _holds(s, model)]
                assert len(hits) == 1, (d, len(hits))
                s = hits[0]
                got = bmc.rebind(s, S.Inputs(dict(model)))
                if s.over:   # the run ended before a d-th iteration
                    assert over and len(m.path) == d - 1 and _plain(got) == _plain(bmc.project(prog, m))
                    break
                assert len(m.path) == d
                t_, at = got.path[0]
                assert sym.concrete(t_) == m.path[d - 1][0] and _plain(at) == _plain(bmc.project(prog, m.path[d - 1][1]))
                assert _plain(got) == _plain(bmc.project(prog, m))
        assert merged < 400


def _holds(s, model: dict) -> bool:
    solver = z3.Solver()
    for name in s.names:
        solver.add(S.var(name) == S.numeral_of(name, model.get(name, 0)))
    solver.add(s.cond)
    return solver.check() == z3.sat


def test_merged_states_decide_as_enumeration_does(monkeypatch):
    """On a tiny bound the merged unrolling alone reads every path of the bound: each claim's
    verdict is enumeration's, proofs included, and the search's without it (the levels' paths),
    and each deciding workload decides so on the plain kernel."""
    prog = api.load_text(V1.replace("arrive poisson(1)", "arrive batch(2)").replace("CLAIMS", ENUM_CLAIMS), "enum.sq")
    p = ref.convert(prog)
    want = expected(p, 2, 3, 2)
    with sym.own_context():
        s = _Search(prog, p, None, 2, 3, 600)
        s.merged(1.0)
        assert s.finished == {1: False, 2: False}   # every path read, within the bound
        res = s.verdicts()
    assert {k: v.verdict for k, v in res.claims.items()} == want
    assert set(want.values()) == {"proved", "counterexample", "witnessed", "no_witness"}
    import serq.verify as VF
    monkeypatch.setattr(VF, "MERGED_SHARE", 0)
    search = verify(prog, 2, 3, timeout=60)
    assert {k: v.verdict for k, v in search.claims.items()} == want
    assert all(v.by != "every path" or v.unrolled is None for v in search.claims.values())
    for v in res.claims.values():
        if v.workload is None:
            assert v.by == "every path" and not v.every_value
            continue
        assert v.by == "unrolled" and v.unrolled >= 1
        sess = v.workload["sessions"]
        wl = ref.workload(p, len(sess), arrivals=[x["arrival"] for x in sess], draws=[x["draws"] for x in sess])
        o = ref.evaluate(p, wl).claims[v.name]
        assert o.status == {"counterexample": "failed", "witnessed": "witnessed"}[v.verdict]
        if v.iteration is not None:   # found at the first depth that reaches it
            assert v.unrolled == v.iteration + 1


def test_merged_states_decide_poisson_arrivals_as_enumeration_does():
    """Real arrival times: the states split where an arrival falls between iterations' ends, and the
    verdicts are enumeration's (arrivals in quarters, every order on this whole-numbered clock)."""
    prog = api.load_text(V1.replace("CLAIMS", ENUM_CLAIMS), "enum.sq")
    p = ref.convert(prog)
    want = expected(p, 2, 1, 2)
    with sym.own_context():
        s = _Search(prog, p, None, 2, 1, 600)
        s.merged(1.0)
        assert len(s.finished) == 2
        res = s.verdicts()
    assert {k: v.verdict for k, v in res.claims.items()} == want


def test_a_lone_long_session_is_as_near_as_three_short_ones(monkeypatch):
    """The issue's case, with no sampled workload to find it first: a claim that only a lone agent's
    first prompt of 229 tokens breaks (a system prompt of 213, a tool result of 16), on vLLM's engine
    under multi-turn agents. One formula over every workload of the bound: found at its first
    iteration, replayed failing by the simulator, reading a handful of states."""
    import serq.verify as VF
    monkeypatch.setattr(VF, "SAMPLES", 0)
    monkeypatch.setattr(VF, "EXTREMES", 0)
    monkeypatch.setattr(VF._Search, "unroll", lambda *a, **k: pytest.fail("the merged states decide it"))
    res = verify(NEEDLE, timeout=30)
    needle_found(res)
    assert res.paths < 50


EV = """fn main() {
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap inf;
    request (prompt, o) { prefill (1); }
    schedule { advance running; admit waiting taking reqs (1), kv (prompt); }
    execute (1);
  }
  pool reqs on llm { queue fifo; }
  pool kv on gpu { }
  workload { arrive batch(1); turn { Size p = ~det(1); } }
  server { observe seen = p; llm (2, 1); }
  claim small: every iteration of llm (used(kv) <= 3);
  claim endsmall: at end (largest(seen) <= 3);
}
"""


@pytest.mark.parametrize("merged", [True, False])
def test_a_proof_for_every_value_needs_the_claims_readings_to_cover_it(monkeypatch, merged):
    """Every path is the one path whatever p is (p is only observed), so the paths cover every
    natural; `largest(seen) <= 3` holds within the bound and breaks at p = 4: proved per session with
    each draw 0..3 (for every number of sessions), not for every value (it was said for every value
    before: the readings' own facts were not asked to cover); `used(kv) <= 3` (2 a session) holds for
    every value."""
    import serq.verify as VF
    if not merged:
        monkeypatch.setattr(VF, "MERGED_SHARE", 0)
    res = verify(api.load_text(EV, "ev.sq"), 1, 3, timeout=60)
    small, end = res.claims["small"], res.claims["endsmall"]
    assert (small.verdict, small.by, small.every_value) == ("proved", "every path", True)
    assert (end.verdict, end.by, end.every_value, end.every_sessions) == ("proved", "per session", False, True)
    assert res.bound["every_value"] == ["small"]
    beyond = api.run(api.load_text(EV, "ev.sq"), None, None, {"sessions": [{"arrival": 0, "draws": [4]}]})
    assert beyond["claims"]["endsmall"]["status"] == "failed"


CASES = int(os.environ.get("SERQ_FUZZ_CASES", "0"))
SEED = int(os.environ.get("SERQ_FUZZ_SEED", "0"))
MERGED = range(CASES // 3) if CASES else [3, 7]


@pytest.mark.parametrize("arrive", ["batch", "poisson"])
@pytest.mark.parametrize("k", MERGED)
def test_merged_states_agree_with_enumeration_on_generated_vllm_programs(k, arrive):
    """Generated vLLM-shaped programs (growing KV, preemption or none, the prefix cache and what
    admission takes of it, a threshold, one turn or two: tests/test_verify_session.py) with random
    claims and claims at their caps, decided by the merged states alone: every verdict that is not
    `unknown` is enumeration's (2 sessions, draws 0..2; under poisson draws 0..1, arrivals in
    quarters), a proof is one only where every path of the bound was read, and every named workload
    replays on the plain kernel. SERQ_FUZZ_CASES=N runs N / 3 programs under each law."""
    import re
    from test_verify_campaign import end_claims, iteration_claims, random_claims
    from test_verify_session import gen_caching_program
    rng = random.Random(12000 + k + SEED + (10000 if arrive == "poisson" else 0))
    text, draws = gen_caching_program(rng)
    values = 2
    if arrive == "poisson":
        text, values = re.sub(r"arrive batch\(\d+\);", "arrive poisson(1);", text), 1
    claims = rng.sample(iteration_claims(rng, text), 2) + rng.sample(end_claims(rng), 2) + random_claims(rng)[:2] \
        + random_claims(rng)[3:5]
    text = re.sub(r"\n  claim [^\n]*", "", text).replace("\n}\n", "\n  " + "\n  ".join(claims) + "\n}\n")
    prog = api.load_text(text, "merged.sq")
    p = ref.convert(prog)
    want = expected(p, 2, values, draws)
    with sym.own_context():
        s = _Search(prog, p, None, 2, values, 40)
        s.merged(1.0)
        res = s.verdicts()
    read_all = len(s.finished) == 2 and not s.trouble
    for name, v in res.claims.items():
        if v.verdict == "unknown":
            assert not read_all or v.reason and ("reading the claim" in v.reason or "branch" in v.reason), (name, v)
            continue
        # under poisson enumeration takes arrivals in quarters: a named workload may arrive off them
        # (0.0625 after the first, a response a sixteenth longer): the plain kernel decides it below
        if arrive == "batch" or v.workload is None:
            assert v.verdict == want[name], (name, v.verdict, v.by, want[name], text)
        if v.by == "every path":
            assert read_all and v.unrolled is not None
        if v.workload is not None:
            sess = v.workload["sessions"]
            wl = ref.workload(p, len(sess), arrivals=[x["arrival"] for x in sess], draws=[x["draws"] for x in sess])
            o = ref.evaluate(p, wl).claims[name]
            assert o.status == {"counterexample": "failed", "witnessed": "witnessed"}[v.verdict], (name, text)


def test_a_claim_at_end_broken_on_the_way_is_found_before_its_path_ends():
    """A `stable` claim at end (search.stable: a bound above on `count`) read on the merged states
    as they go, not only where their paths ended: three sessions one at a time, the second response
    breaks `count(response) <= 1` while the third session still runs. Found at that depth, named on
    its whole path, which ends later and fails it."""
    prog = api.load_text(V1.replace("arrive poisson(1)", "arrive renewal(1)").replace(
        "CLAIMS", "  claim one: at end (count(response) <= 1);"), "one.sq")
    p = ref.convert(prog)
    with sym.own_context():
        s = _Search(prog, p, None, 3, 2, 60)
        s.finding = "unrolled"
        s._merge_deepen(3, lambda: 50)
    v = s.res.claims["one"]
    assert (v.verdict, v.by) == ("counterexample", "unrolled")
    sess = v.workload["sessions"]
    wl = ref.workload(p, 3, arrivals=[x["arrival"] for x in sess], draws=[x["draws"] for x in sess])
    assert ref.evaluate(p, wl).claims["one"].status == "failed"
    # as the iteration it was found at starts, two responses are in and a session is still live
    m = machine_at(p, wl, v.unrolled - 1)
    assert sum(1 for n, _ in m.client if n == "response") == 2 and any(x.alive for x in m.sess)
