"""Counterexamples and witnesses by unrolling (serq/verify/__init__.py, `unroll`; docs/verify.md,
*Unrolled*): every path's first d iterations at the whole bound, each prefix run once."""
from __future__ import annotations

import os
import random
import re

from serq import api, ref
import serq.verify as verify_mod
from serq.verify import _Search, verify
from serq.verify import search as S
from test_verify import expected
from test_verify_invariant import V1

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")


# claims over iterations and at end that V1 of 2 sessions, draws 0..3, decides every way
ENUM_CLAIMS = """
  claim budget: every iteration of vllm (tokens <= 8);
  claim tight: every iteration of vllm (used(kv) <= 8);
  claim pair: some iteration of vllm (residents == 2);
  claim seven: every iteration of vllm (tokens <= 7);
  claim never: some iteration of vllm (queue(vllm) > 2);
  claim late: some iteration of vllm (kv_decode >= 9);
  claim quick: at end (largest(response) <= 3);
  claim slowest: at end (smallest(response) >= 3);
  claim mean: at end (total(response) <= 3 * count(response) + 1);
  claim fine: at end (total(response) <= 30 * count(response));"""


def _vllm(claims: str):
    text = open(VLLM).read().rstrip()
    return api.load_text(text[:-1] + claims + "}\n", os.path.join(ROOT, "examples", "multi-turn", "vllm_u.sq"))


def test_a_prefix_is_the_beginning_of_its_whole_path():
    """A run of depth d stops as its d-th iteration starts: its iterations, its path condition and
    its claims' readings are those of the whole path on the same inputs, up to there."""
    prog = ref.convert(api.load_text(V1.replace("CLAIMS", """
  claim small: every iteration of vllm (tokens <= 5);
  claim pair: some iteration of vllm (residents == 2);"""), "v1.sq"))
    rng = random.Random(4)
    cut = 0
    for _ in range(12):
        n = rng.randint(1, 3)
        model = {f"d{k}_{i}": rng.randint(0, 8) for k in range(n) for i in range(2)}
        model.update({f"a{k}": rng.randint(0, 3) * (k + 1) for k in range(n)})
        fam = S.Family(prog, n, 8, 8)
        whole = S.run_path(fam, S.Inputs(dict(model)), lambda: 1e9)
        assert whole.done
        for d in (1, 2, 5):
            part = S.run_path(S.Family(prog, n, 8, 8, depth=d), S.Inputs(dict(model)), lambda: 1e9)
            assert part.whole and part.done != part.cut
            cut += part.cut
            assert [str(f) for f in part.facts] == [str(f) for f in whole.facts[:len(part.facts)]]
            for name, o in part.outcomes.items():
                w = whole.outcomes[name]
                if o.status in ("failed", "witnessed"):
                    assert (o.status, o.iteration, o.at) == (w.status, w.iteration, w.at) and o.iteration < d
                elif part.cut:
                    assert w.iteration is None or w.iteration >= d
    assert cut > 12


def test_unrolling_decides_as_enumeration_does():
    """On a tiny bound, unrolling alone (every depth until no path is left) names a counterexample or
    a witness exactly for the claims enumeration refutes or witnesses, over iterations and at end
    (stable, or guessed on a prefix and checked whole), each on a workload the plain kernel reads
    so, and leaves the others open, said unrolled to the depth every path ended by."""
    prog = api.load_text(V1.replace("arrive poisson(1)", "arrive batch(2)").replace("CLAIMS", ENUM_CLAIMS), "enum.sq")
    p = ref.convert(prog)
    want = expected(p, 2, 3, 2)
    s = _Search(prog, p, None, 2, 3, 600)
    s.unroll()
    got = {cs.c.name: cs.v.verdict for cs in s.cs}
    assert {k for k, v in got.items() if v} == {k for k, v in want.items() if v in ("counterexample", "witnessed")}
    for cs in s.cs:
        v = cs.v
        if v.verdict is None:
            continue
        assert v.verdict == want[v.name] and v.by == "unrolled" and v.unrolled >= 1
        sess = v.workload["sessions"]
        wl = ref.workload(p, len(sess), arrivals=[x["arrival"] for x in sess], draws=[x["draws"] for x in sess])
        o = ref.evaluate(p, wl).claims[v.name]
        assert o.status == {"counterexample": "failed", "witnessed": "witnessed"}[v.verdict]
        assert o.iteration == v.iteration and (v.iteration is None or v.iteration < v.unrolled)
    assert s.unrolled_to >= 8   # every path ended by then: deeper reads no more
    # the claims at end a prefix decides (stable), and those it guesses, both ways on this family
    assert (want["quick"], want["slowest"], want["mean"], want["fine"]) == \
        ("counterexample", "counterexample", "counterexample", "proved")
    assert S.stable(p.claims[6].e) and not any(S.stable(c.e) for c in p.claims[7:])


def test_a_large_lone_session_is_as_near_as_small_ones(monkeypatch):
    """The issue's case: a claim a lone agent's first prompt fails at one value only (a system prompt
    of 213 and a tool result of 16 tokens: 229, prefilled at once), on vLLM's engine under multi-turn
    agents, where each session's turns and tool times make the whole paths of even values 0..1 more
    than the search runs in the timeout. Unrolled, the first iteration of every workload is one
    prefix: it is found at depth 1, at the whole bound, and the simulator replays it failing (the
    merged states, which come first, find it so too: tests/test_verify_bmc.py)."""
    monkeypatch.setattr(verify_mod, "MERGED_SHARE", 0)
    needle_found(verify(NEEDLE, timeout=20))


NEEDLE = _vllm("  claim needle: every iteration of vllm (tokens != 229);\n")


def needle_found(res):
    """The needle refuted by unrolling at the first iteration of a lone agent, replayed failing."""
    v = res.claims["needle"]
    assert (v.verdict, v.by, v.unrolled, v.iteration, v.sessions) == ("counterexample", "unrolled", 1, 0, 1)
    d = v.workload["sessions"][0]["draws"]
    assert 200 + d[0] + d[1] == 229
    assert api.run(NEEDLE, None, None, v.workload)["claims"]["needle"]["status"] == "failed"


def test_an_unknown_claim_says_how_deep_every_workload_was_read():
    """A claim over iterations true within the bound that the kernel's invariants do not imply, on a
    program whose paths the timeout does not cover: unknown, saying to which depth every workload of
    the bound was unrolled without a failing iteration."""
    prog = _vllm("  claim some_room: every iteration of vllm (tokens <= 1000);\n")
    res = verify(prog, timeout=10)
    v = res.claims["some_room"]
    assert v.verdict == "unknown"
    m = re.search(r"unrolled to (\d+): no iteration among the first \1 of any workload of the bound fails it",
                  v.reason)
    assert m and int(m.group(1)) >= 1, v.reason


def test_a_claim_out_of_time_stops_counting_while_the_others_go_on():
    """Each claim has the whole timeout, of which the kernel's paths (shared) and its own work: a
    claim that spent more of its own runs out first, and is closed there, its seconds what it had
    spent; the paths go on for the others, and count against them alone (it was said to take 74 s
    of a 60 s timeout, the kernel's later paths counted against it)."""
    prog = _vllm("  claim room: every iteration of vllm (tokens <= 1000);\n"
                 "  claim more_room: every iteration of vllm (tokens <= 1001);\n")
    p = ref.convert(prog)
    s = _Search(prog, p, None, 3, 16, 2.5)
    s.budget.own["room"] += 1.25    # as if its own work had taken 1.25 s
    res = s.run()
    room, more = res.claims["room"], res.claims["more_room"]
    assert room.verdict == more.verdict == "unknown"
    assert "ran out" in room.reason and room.seconds <= 2.7, room.seconds
    assert more.seconds >= 2.4


def test_a_claim_at_end_broken_on_a_prefix_is_found_by_unrolling():
    """`largest(ttft) <= X` only grows false: a prefix whose turn's first token came later than X is
    a counterexample whenever its path ends (search.stable). On vLLM under agents, a lone agent's
    first prompt of 228 tokens or more (its system prompt and tool result, values near 16) is
    prefilled past 0.0101 s: found at depth 2, replayed failing at the end."""
    prog = _vllm("  claim first_fast: at end (largest(ttft) <= 0.0101);\n")
    p = ref.convert(prog)
    s = _Search(prog, p, None, 1, 16, 60)
    s.induction()   # vllm.sq's caps, proved: unrolling reads the claim at end alone
    s.unroll()
    v = s.res.claims["first_fast"]
    assert (v.verdict, v.by, v.unrolled, v.iteration) == ("counterexample", "unrolled", 2, None)
    d = v.workload["sessions"][0]["draws"]
    assert d[0] + d[1] >= 28
    assert api.run(prog, None, None, v.workload)["claims"]["first_fast"]["status"] == "failed"


def test_a_claim_at_end_no_prefix_decides_is_guessed_on_a_prefix_and_checked_whole():
    """A total of a program's observation may fall (a negative value), so a prefix whose total is
    past the bound decides nothing (not `stable`); it is a guess: the whole path of the same inputs
    is run, and a counterexample named only where it fails at the end. A lone agent whose first
    prompt is 232 tokens (values of 16) and whose second turn prefills 9 or more is past 240: found
    at depth 2, where the search's paths of one agent at values 0..1 never reach 240."""
    prog = _vllm("  claim few_prefilled: at end (total(prefill_tokens) <= 240);\n")
    p = ref.convert(prog)
    s = _Search(prog, p, None, 1, 16, 60)
    s.induction()
    s.unroll()
    v = s.res.claims["few_prefilled"]
    assert (v.verdict, v.by, v.unrolled, v.iteration, v.sessions) == ("counterexample", "unrolled", 2, None, 1)
    got = api.run(prog, None, None, v.workload)
    assert got["claims"]["few_prefilled"]["status"] == "failed"
    d = v.workload["sessions"][0]["draws"]
    assert d[3] == 1 and 200 + d[0] + d[1] <= 240   # a second turn (`more`): the first alone is within it


def test_a_guess_that_keeps_missing_is_read_no_more_and_claims_no_depth(monkeypatch):
    """A bound below is broken by a prefix too short to have observed enough (`count(response) >= 1`:
    no turn has answered as the first iteration starts) and met at the end: each such guess is run
    whole and not named, and after GUESS_MISSES of them the claim is read on prefixes no more (each
    costs a whole path). Its `unknown` says nothing of a depth: no prefix decides it."""
    monkeypatch.setattr(verify_mod, "GUESS_MISSES", 2)
    prog = _vllm("  claim answered: at end (count(response) >= 1);\n")
    p = ref.convert(prog)
    s = _Search(prog, p, None, 1, 16, 60)
    s.induction()
    s.unroll()
    cs = s.cs[-1]
    assert cs.v.verdict is None and cs.misses == 2 and not s.unrollable()
    s.verdicts()
    assert cs.v.verdict == "unknown" and "unrolled to" not in cs.v.reason


def test_which_claims_at_end_a_prefix_decides():
    """Bounds above on aggregates that only grow (largest, count, the client's totals), by a
    constant their none meets, joined by `and` and `or`; not a total of a program's observation
    (it may be negative), a bound below, or a bound below 0."""
    def claim(text):
        prog = _vllm(f"  claim probe: at end ({text});\n")
        return S.stable(ref.convert(prog).claims[-1].e)
    assert claim("largest(response) <= 3 && count(ttft) < 10")
    assert claim("5 >= largest(tpot) || total(response) <= 100")
    assert not claim("total(response) >= 1")
    assert not claim("smallest(response) >= 0")
    assert not claim("largest(response) <= -1")
    assert not claim("largest(response) < 0")
    assert not claim("total(response) <= 1000000 * count(response)")
