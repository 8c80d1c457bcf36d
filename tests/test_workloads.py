"""The vLLM workload examples: tokens, memory and the client's view hold up on every run."""
from __future__ import annotations

import json
import math
import os

import pytest

from serq import api
from serq.interp.dump import Requests
from serq.interp.sim import Sim
from serq.ir.model import Settings

EX = os.path.join(os.path.dirname(__file__), "..", "examples")

# (program, settings, the output tokens a turn's requests commit, from the session's attributes)
WORKLOADS = {
    "multi-turn/vllm.sq": (dict(horizon=120), lambda a: a["o"]),
    "single-turn/vllm_single_turn.sq": (dict(horizon=60), lambda a: a["o"]),
    # memory tight enough that requests are preempted and resume: their tokens still add up
    "single-turn/vllm_single_turn.sq?blocks=300&rate=6": (dict(horizon=40), lambda a: a["o"]),
    "multi-turn/vllm_chat.sq": (dict(horizon=150), lambda a: a["o"]),
    # a system prompt every conversation shares, on a content-addressed cache; and with memory tight
    # enough that shared blocks are evicted and computed again
    "multi-turn/vllm_chat_shared.sq": (dict(horizon=60), lambda a: a["o"]),
    "multi-turn/vllm_chat_shared.sq?blocks=200&rate=2": (dict(horizon=60), lambda a: a["o"]),
    # the subagents share the orchestrator's blocks (a content-addressed cache)
    "subagent/vllm_subagents.sq": (dict(horizon=100), lambda a: 2 * a["o"] + 3 * a["o_sub"]),
    "replay/vllm_replay.sq": (dict(arrivals=60), lambda a: a["out"]),
    # llm-d's disaggregation: the prefiller samples the first token, the decoder the rest
    "pd-disaggregation/llmd_nixl_pull.sq": (dict(arrivals=60), lambda a: a["o"]),
}


class Checked(Sim):
    """The simulator, checking the invariants after every event and at every answer."""

    every = 1  # check the pools after every settle (a long run checks one in `every`)

    def settle(self):
        super().settle()
        self.events_checked = getattr(self, "events_checked", 0) + 1
        if self.events_checked % self.every == 0:
            self.check_pools()

    def check_pools(self):
        units = self.cohort_units()
        for m in self.pools:
            assert m.used <= m.cap + 1e-6, f"{m.label} holds {m.used} > cap {m.cap}"
            assert m.used + m.cached <= m.cap + 1e-6, f"{m.label}: used + cached above the cap"
            if m.content:
                self.check_content(m)
                continue
            alloc = sum(units.get(id(a), a.units) for a in m.allocs)
            cached = sum(e.units for e in m.entries if e.alive)  # gone ones wait in the list (pools._gone)
            assert math.isclose(alloc, m.used, abs_tol=1e-6), f"{m.label}: allocations {alloc} != used {m.used}"
            assert math.isclose(cached, m.cached, abs_tol=1e-6), f"{m.label}: entries {cached} != cached {m.cached}"
            if m.block:
                assert all(units.get(id(a), a.units) % m.block == 0 for a in m.allocs), \
                    f"{m.label}: an allocation not in blocks"
                assert all(e.units % m.block == 0 for e in m.entries if e.alive), f"{m.label}: an entry not in blocks"

    def check_content(self, m):
        """A content pool (docs/reference/content.md): a block shared by several holders counted once,
        its count of holders exact, the free queue its cached blocks that no holder references."""
        holders: dict = {}
        plain = 0.0
        for a in m.allocs:
            if a.blks is None:
                plain += a.units
                continue
            assert a.units == len(a.blks) * m.block, f"{m.label}: an allocation not its blocks"
            for b in a.blks:
                holders[id(b)] = (b, holders.get(id(b), (b, 0))[1] + 1)
        assert all(b.ref == n for b, n in holders.values()), f"{m.label}: a block's holders miscounted"
        assert math.isclose(m.used, len(holders) * m.block + plain, abs_tol=1e-6), \
            f"{m.label}: used {m.used} != {len(holders)} referenced blocks + {plain}"
        assert math.isclose(m.cached, len(m.free_q) * m.block, abs_tol=1e-6), f"{m.label}: cached != the free queue"
        assert all(b.ref == 0 and b.key is not None and b in m.table[b.key] for b in m.free_q), \
            f"{m.label}: a block in the free queue is referenced or not keyed"
        assert not any(id(b) in holders for b in m.free_q)
        self.shared_seen = getattr(self, "shared_seen", 0) + sum(1 for b, n in holders.values() if n > 1)

    def _answered(self, rec, sess=None):
        super()._answered(rec, sess)
        want = self.expected(sess.a)
        assert rec.ntok == want, f"session {sess.serial} turn {sess.turn_idx - 1}: committed {rec.ntok} of {want}"
        assert rec.first is not None and rec.first - rec.start <= self.now - rec.start + 1e-12  # ttft <= response
        self.answered = getattr(self, "answered", 0) + 1


def load(path):
    path, _, query = path.partition("?")
    inputs = {k: float(v) for k, v in (kv.split("=") for kv in query.split("&"))} if query else {}
    return api.load(os.path.join(EX, path), inputs)


def run(path, settings, expected):
    prog = load(path)
    sim = Checked(prog, Settings(**settings))
    sim.expected = expected
    return sim, sim.run()


@pytest.mark.parametrize("path", sorted(WORKLOADS))
def test_workload_invariants(path):
    settings, expected = WORKLOADS[path]
    sim, rep = run(path, settings, expected)
    assert sim.answered > 10 and sim.events_checked > 100
    if "blocks=300" in path:
        assert rep["pools"]["kv"]["preempted"] > 20
    if "shared" in path or "subagent" in path:
        assert sim.shared_seen > 0  # blocks several holders referenced at once, counted once
        assert rep["observe"]["hit"]["mean"] > 0.7
    if "blocks=200" in path:
        assert rep["pools"]["kv"]["evicted"] > 100
    resp = rep["client"]["response"]
    ttft = rep["client"]["ttft"]
    assert resp["count"] > 0 and ttft["count"] > 0
    assert ttft["max"] <= resp["max"] + 1e-12


@pytest.mark.parametrize("path", sorted(WORKLOADS))
def test_same_seed_same_report(path):
    settings, _ = WORKLOADS[path]
    prog = load(path)
    a = api.run(prog, Settings(**settings))
    b = api.run(prog, Settings(**settings))
    a.pop("_sim"), b.pop("_sim")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("path", ["multi-turn/vllm.sq", "single-turn/vllm_single_turn.sq?blocks=300&rate=6",
                                  "subagent/vllm_subagents.sq"])
def test_steady_decoding_fast_forward_changes_nothing(path):
    """engine.py runs steady decoding iterations as one event, growing holds block by block (and
    evicting cached prefixes) at the instants the iterations would; run one by one, the report is
    the same."""
    reports = [(json.dumps(rep, sort_keys=True), its, obs) for rep, its, obs in _fast_and_slow(path)]
    assert reports[0] == reports[1]


# about the median of the turns' longest gap between two tokens: the goodput of `--slo itl<=X`
# depends on every turn's, which the fast-forward keeps (engine.py, _itl_run)
ITL_SLO = {"multi-turn/vllm.sq": 0.0044, "single-turn/vllm_single_turn.sq?blocks=300&rate=6": 0.05,
           "subagent/vllm_subagents.sq": 0.0382, "multi-turn/vllm_chat.sq": 0.005, "replay/vllm_replay.sq": 0.0051}


def _fast_and_slow(path):
    """The run with the fast-forward and without: (report, the engine's iterations, observations,
    the client's ITL samples in order and requests.csv's rows). The report has the goodput of
    objectives on every per-request metric, the one on itl tight."""
    settings, _ = WORKLOADS[path]
    out = []
    for ff in (True, False):
        sim = Sim(load(path), Settings(**settings))
        sim.fast_forward = ff
        sim.set_slo({"ttft": 10.0, "tpot": 1.0, "itl": ITL_SLO[path], "response": 100.0})
        sim.requests = Requests()
        rep = sim.run()
        tp = rep["throughput"]
        assert 0.2 * tp["requests_per_s"] < tp["goodput_per_s"] < 0.8 * tp["requests_per_s"]
        seen = {k: list(v.v) for k, v in sim.obs.items()}
        seen.update(itl=list(sim.c_itl.v), requests=list(sim.requests.rows()))
        out.append((rep, sim.engines[0].iterations, seen))
    return out


@pytest.mark.parametrize("path", ["multi-turn/vllm_chat.sq", "replay/vllm_replay.sq"])
def test_fast_forward_through_growth_and_eviction_changes_nothing_but_rounding(path):
    """Where the fast-forward grows holds and evicts cached prefixes on the way, run one by one the
    report is the same but for an engine's utilisation in its last bits: each iteration run on its
    own adds one more piece to the busy time's integral, summed in another order."""
    (a, ia, oa), (b, ib, ob) = _fast_and_slow(path)
    assert (ia, oa) == (ib, ob)
    for name, st in a["stages"].items():
        u, v = st.pop("utilisation"), b["stages"][name].pop("utilisation")
        assert u == pytest.approx(v, rel=1e-12, abs=1e-15)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_disaggregation_gives_every_lease_back():
    """The prefiller's KV is leased until the decoder's read releases it: drained, nothing is held."""
    sim, rep = run("pd-disaggregation/llmd_nixl_pull.sq", dict(arrivals=60), lambda a: a["o"])
    assert rep["sessions"]["completed"] == 60 and rep["sessions"]["live_at_end"] == 0
    assert all(m.used == 0 for m in sim.pools)
    assert sum(rep["stages"][f"D.nic[{j}]"]["completed"] for j in (0, 1)) == 60
