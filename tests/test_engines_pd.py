"""The engine programs (examples/engines/), vLLM's push disaggregation
(examples/pd-disaggregation/vllm_nixl_push.sq) and the testbeds (examples/vendors/): hand-computed
iterations, memory within caps, the tokens every answer commits, SGLang's retraction, push against
pull, one workload on two cards."""
from __future__ import annotations

import json
import math
import os
import re

import pytest

from serq import api
from serq.ir.model import Settings
from test_workloads import Checked, load

EX = os.path.join(os.path.dirname(__file__), "..", "examples")

# every program's cost: execute = c0 + max(omega + beta * kv, a * tokens)
A, OMEGA, BETA, C0 = 0.00004, 0.003, 0.0000001, 0.001


def step(tokens, kv):
    return C0 + max(OMEGA + BETA * kv, A * tokens)


def program_with(path, old, new):
    """The example with one piece of its text replaced (a workload of two known requests, a
    relation), loaded from beside the example so its `use` and trace paths resolve."""
    src = open(os.path.join(EX, path)).read()
    changed = re.sub(old, new, src, count=1, flags=re.S)
    assert changed != src
    tmp = os.path.join(EX, os.path.dirname(path), "_test_tmp.sq")
    with open(tmp, "w") as f:
        f.write(changed)
    try:
        return api.load(tmp, {})
    finally:
        os.remove(tmp)


def two_requests(path, n, o):
    prog = program_with(path, r"workload \{.*?\n  \}\n",
                        "workload {\n    arrive batch(2);\n    hidden o;\n"
                        f"    turn {{ Size n = {n}; Size o = {o}; }}\n  }}\n")
    rep = api.run(prog, Settings(horizon=10, warmup=0))
    return rep.pop("_sim"), rep


def test_tensorrt_llm_never_splits_a_prompt():
    """Two prompts of 6000 in max_num_tokens 8192: the second does not fit whole beside the first
    and waits for the next iteration, where it goes with the first's decode token."""
    sim, rep = two_requests("engines/tensorrt_llm.sq", 6000, 3)
    t1 = step(6000, 0)                       # the first prompt alone
    t2 = t1 + step(6001, 6000)               # its decode token and the second prompt
    t3 = t2 + step(2, 6001 + 6000)           # both decode; the first ends (2 decode tokens)
    t4 = t3 + step(1, 6001)                  # the second's last
    c = rep["client"]
    assert math.isclose(c["ttft"]["min"], t1) and math.isclose(c["ttft"]["max"], t2)
    assert math.isclose(c["response"]["min"], t3) and math.isclose(c["response"]["max"], t4)
    assert sim.engines[0].iterations == 4
    assert rep["pools"]["kv"]["preempted"] == 0


def test_tgi_chunks_the_last_request_to_the_prefill_budget():
    """Two prompts of 3000 in max_batch_prefill_tokens 4096: the second takes the 1096 left; each
    allocates its prompt and 1023 more at admission (max_new_tokens 1024, less one)."""
    sim, rep = two_requests("engines/tgi.sq", 3000, 2)
    t1 = step(4096, 0)
    t2 = t1 + step(1 + 1904, 3000 + 1096)    # the first's decode token, the second's rest
    t3 = t2 + step(1, 3000)
    c = rep["client"]
    assert math.isclose(c["ttft"]["min"], t1) and math.isclose(c["ttft"]["max"], t2)
    assert math.isclose(c["response"]["min"], t2) and math.isclose(c["response"]["max"], t3)
    assert rep["pools"]["kv"]["max_used"] == 2 * (3000 + 1024 - 1)
    assert sim.engines[0].iterations == 3


def test_sglang_runs_a_prefill_batch_alone():
    """Two prompts of 6000 in chunked_prefill_size 8192: the first batch prefills the first and
    2192 of the second; the next runs the second's rest alone, the first's decode waiting."""
    sim, rep = two_requests("engines/sglang.sq", 6000, 3)
    t1 = step(8192, 0)
    t2 = t1 + step(3808, 2192)               # a prefill batch: no decode token
    t3 = t2 + step(2, 6000 + 6000)
    t4 = t3 + step(2, 6001 + 6001)           # both end together
    c = rep["client"]
    assert math.isclose(c["ttft"]["min"], t1) and math.isclose(c["ttft"]["max"], t2)
    assert math.isclose(c["response"]["min"], t4) and math.isclose(c["response"]["max"], t4)
    assert sim.engines[0].iterations == 4


def checked(path, settings, expected):
    sim = Checked(load(path), Settings(**settings))
    sim.expected = expected
    return sim, sim.run()


@pytest.mark.parametrize("slots, retracts", [(6000, True), (200000, False)])
def test_sglang_retracts_under_tight_memory_only(slots, retracts):
    """Admission counts 0.7 of a request's max_new_tokens: with little memory the decodes outgrow
    it and SGLang retracts; with ample memory it never does. Every answer commits its tokens."""
    sim, rep = checked(f"engines/sglang.sq?slots={slots}", dict(horizon=40, warmup=0), lambda a: a["o"])
    assert sim.answered > 20
    assert (rep["pools"]["kv"]["preempted"] > 0) == retracts
    assert rep["pools"]["kv"]["max_used"] <= slots


def test_tgi_and_tensorrt_llm_never_preempt():
    """Both reserve a request's whole length before admitting it: under tight memory requests wait,
    none is preempted, and no more run at once than the memory holds at the least reservation."""
    sim, rep = checked("engines/tgi.sq?slots=7000", dict(horizon=40, warmup=0), lambda a: a["o"])
    assert sim.answered > 20 and rep["pools"]["kv"]["preempted"] == 0
    assert rep["gauges"]["seqs"]["max"] <= 7000 // (100 + 1024 - 1)
    assert rep["pools"]["kv"]["max_used"] <= 7000
    sim, rep = checked("engines/tensorrt_llm.sq?blocks=300", dict(horizon=40, warmup=0), lambda a: a["o"])
    assert sim.answered > 20 and rep["pools"]["kv"]["preempted"] == 0
    assert rep["gauges"]["seqs"]["max"] <= 300 * 32 // (100 + 2048)
    assert rep["pools"]["kv"]["max_used"] <= 300 * 32


PUSH = "pd-disaggregation/vllm_nixl_push.sq"


def test_push_one_request_by_hand():
    """Trace session 0's first turn alone: its agent's 1000-token system prompt and 1089 new tokens,
    2089, prefilled in two iterations of the 2048-token budget; the decoder holds its blocks from
    the start (the push proxy's dispatch); the write waits x0 and crosses both NICs at 95 000
    tokens a second."""
    rep = api.run(api.load(os.path.join(EX, PUSH)), Settings(arrivals=1))
    sim = rep.pop("_sim")
    prefill = 2 * (0.001 + 0.008) + 2089 * 0.00008
    assert math.isclose(sim.obs["transfer_wait"].v[0], prefill + 0.002 + 2089 / 95000)
    assert math.isclose(sim.client["ttft"].v[0], prefill)
    kv_d = next(avg for name, _, avg in sim.gauges if name == "kv_used_D")
    assert kv_d.points[0] == (0.0, 2096.0)       # 2089 tokens in blocks of 16, at time 0
    assert rep["sessions"]["completed"] == 1


def test_push_every_request_prefills_then_decodes():
    sim, rep = checked(PUSH, dict(arrivals=12), lambda a: a["out"])
    turns = sim.answered
    assert rep["sessions"]["completed"] == 12 and rep["sessions"]["live_at_end"] == 0
    # a decoder preempted is admitted again, and one preempted after its copy copies again
    again = rep["pools"]["D.kv[0]"]["preempted"]
    assert rep["pools"]["P.reqs[0]"]["admitted"] == turns
    assert rep["pools"]["D.reqs[0]"]["admitted"] == turns + again
    assert turns <= rep["stages"]["P.nic.latency[0]"]["completed"] == rep["stages"]["D.nic[0]"]["completed"] <= turns + again
    assert all(m.used == 0 for m in sim.pools)     # every lease given back by its copy


def test_push_and_pull_of_the_same_constants_run_the_same_numbers():
    """*Queues*: the wait is a delay, so a push and a pull of the same constants run the same
    numbers; only the latency stage changes hands (P.nic.latency, D.nic.latency)."""
    push = api.run(api.load(os.path.join(EX, PUSH)), Settings(horizon=40, warmup=0))
    pull = api.run(program_with(PUSH, r"P push D latency x0 share maxmin;",
                                "D pull P latency x0 share maxmin;"), Settings(horizon=40, warmup=0))
    push.pop("_sim"), pull.pop("_sim")
    push["stages"]["D.nic.latency[0]"] = push["stages"].pop("P.nic.latency[0]")
    assert push["stages"]["D.nic.latency[0]"]["completed"] > 20
    assert json.dumps(push, sort_keys=True) == json.dumps(pull, sort_keys=True)


VENDORS = "vendors/gpu_testbeds.sq"


@pytest.mark.parametrize("card, a, omega, beta", [(0, 0.00004, 0.003, 1e-7), (1, 0.00008, 0.008, 2.7e-7)])
def test_testbeds_first_prefill_by_hand(card, a, omega, beta):
    """Trace session 0's first turn alone: 2089 tokens (its agent's 1000-token system prompt and
    1089 new), no chunk cap (one request), so two iterations of the 2048-token budget, the second
    reading the first's 2048 tokens of KV; costed by the card's constants."""
    rep = api.run(load(f"{VENDORS}?card={card}"), Settings(arrivals=1))
    sim = rep.pop("_sim")
    first = C0 + max(omega, a * 2048)
    second = C0 + max(omega + beta * 2048, a * 41)
    assert math.isclose(sim.client["ttft"].v[0], first + second)
    assert rep["sessions"]["completed"] == 1


def test_the_a6000_is_slower_than_the_a100_on_one_workload():
    """The same sessions (one seed) on both cards: every token costs the A6000 more, so its mean
    ttft and tpot are higher; memory stays within each card's cap and every answer has its tokens."""
    reps = [checked(f"{VENDORS}?card={c}", dict(arrivals=20), lambda a: a["out"])[1] for c in (0, 1)]
    a100, a6000 = (r["client"] for r in reps)
    assert a6000["ttft"]["mean"] > a100["ttft"]["mean"] and a6000["tpot"]["mean"] > a100["tpot"]["mean"]
    assert [r["pools"]["kv"]["max_used"] <= r["pools"]["kv"]["cap"] for r in reps] == [True, True]
