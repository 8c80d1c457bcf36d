"""`serq verify` whole (induction, per session, every state, sampled workloads, unrolling and its
guesses, the search) against exhaustive enumeration, on generated vLLM-shaped programs: growing KV
with preemption or none, the prefix cache and what admission takes of it (`budget_left`, `reuse`,
`reserve`), a schedule with a threshold, one turn or a second on the first's history. Every verdict
that is not `unknown` is the one enumeration of the bound gives (2 sessions, draws 0..2), and every
named workload replays on the plain kernel as named (docs/verify.md: a verdict is never a guess).

SERQ_FUZZ_CASES=N runs N / 6 programs instead of the suite's one (`make fuzz`: STEP_CASES / 6);
SERQ_FUZZ_SEED shifts them."""
from __future__ import annotations

import os
import random

import pytest

from serq import api, ref
from serq.verify import verify
from test_verify import expected
from test_verify_session import gen_caching_program

CASES = int(os.environ.get("SERQ_FUZZ_CASES", "6"))
SEED = int(os.environ.get("SERQ_FUZZ_SEED", "0"))
# the suite's one program: its claims proved per session (a smallest among them), by induction, and
# refuted and witnessed on sampled workloads, in about 5 s; a campaign runs programs 0, 1, ...
PROGRAMS = range(CASES // 6) if "SERQ_FUZZ_CASES" in os.environ else [12]


def iteration_claims(rng, text: str) -> list:
    """Claims over iterations at thresholds near what these tiny programs reach, so that some hold
    and some fail: the tokens, the residents, the KV used, the queue; and witnesses."""
    cap = int(text.split("kv cap ")[1].split(";")[0])
    return [
        f"claim i_tokens: every iteration of llm (tokens <= {rng.choice([1, 2, 3])});",
        f"claim i_res: every iteration of llm (residents <= {rng.choice([0, 1, 2])});",
        f"claim i_kv: every iteration of llm (used(kv) <= {rng.choice([cap // 2, cap - 2, cap])});",
        f"claim i_queue: some iteration of llm (queue(llm) == {rng.choice([1, 2, 3])});",
        f"claim i_decode: some iteration of llm (decoders >= {rng.choice([1, 2])} && used(kv) >= {rng.choice([2, 4, 6])});",
    ]


def end_claims(rng) -> list:
    """Claims at end none of which a prefix decides outright (guesses), and one that it does."""
    return [
        f"claim e_resp: at end (largest(response) <= {rng.choice([2, 4, 6, 8])});",
        f"claim e_total: at end (total(fresh) <= {rng.choice([3, 5, 8, 12])});",
        f"claim e_least: at end (smallest(fresh) >= {rng.choice([1, 2])});",
        f"claim e_mean: at end (total(response) <= {rng.choice([2, 3, 4])} * count(response) + 1);",
    ]


@pytest.mark.parametrize("k", PROGRAMS)
def test_verify_agrees_with_enumeration_on_generated_vllm_programs(k):
    rng = random.Random(5000 + k + SEED)
    text, draws = gen_caching_program(rng)
    extra = rng.sample(iteration_claims(rng, text), 3) + rng.sample(end_claims(rng), 2)
    text = text.replace("\n}\n", "\n  " + "\n  ".join(extra) + "\n}\n")
    prog = api.load_text(text, "campaign.sq")
    res = verify(prog, 2, 2, timeout=20)
    p = res.prog
    want = expected(p, 2, 2, draws)
    for name, v in res.claims.items():
        if v.verdict == "unknown":
            continue
        assert v.verdict == want[name], (name, v.verdict, v.by, want[name], text)
        if v.workload is not None:   # named: the plain kernel reads it so
            s = v.workload["sessions"]
            wl = ref.workload(p, len(s), arrivals=[x["arrival"] for x in s], draws=[x["draws"] for x in s])
            o = ref.evaluate(p, wl).claims[name]
            assert o.status == {"counterexample": "failed", "witnessed": "witnessed"}[v.verdict], (name, text)
    # how many are decided depends on the machine's speed (a claim proved by its paths at 9 s of
    # 10); the sampled workloads decide some at once on every program
    assert any(v.verdict != "unknown" for v in res.claims.values()), text
