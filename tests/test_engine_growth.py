"""A fast-forward's iterations in one run of the cost loop, their growths read off after
(Iterations._steady_once), and its growths made in line (Iterations._grow_steady), issue 49: the
same report, client samples and iterations as the growth-by-growth walk through the pool's calls
(Iterations.steady_once and grow_inline off), with evictions, preemptions, a pool with no room for
a growth, claims over iterations and --dump."""
from __future__ import annotations

import json
import os

import pytest

from serq import api
from serq.interp import pools
from serq.interp.engine import Iterations
from serq.interp.sim import Sim
from serq.ir.model import Settings

# the general path's iterations, which these tests observe (conftest.py)
pytestmark = pytest.mark.usefixtures("general_path")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SINGLE = os.path.join(ROOT, "examples", "single-turn", "vllm_single_turn.sq")
MULTI = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")

# inputs of vllm_single_turn.sq: the default (its cache full: a growth evicts), KV short enough to
# preempt and to leave a growth no room, chunked prefill, no prefix caching, one-token blocks
CASES = {
    "plain": {},
    "preempting": {"blocks": 220, "rate": 12},
    "chunked": {"chunk_cap": 64, "rate": 10},
    "no caching": {"caching": 0, "rate": 10},
    "small blocks": {"bs": 1, "blocks": 40000, "rate": 10},
}


def _run(monkeypatch, on, prog, arrivals, record=False):
    calls = {"once": 0, "walked": 0, "make_room": 0}
    once, room = Iterations._steady_once, pools.Pool.make_room

    def count_once(self, *a):
        out = once(self, *a)
        calls["once" if out is not None else "walked"] += 1
        return out

    def count_room(self, *a, **k):
        calls["make_room"] += 1
        return room(self, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(Iterations, "steady_once", on)
        m.setattr(Iterations, "grow_inline", on)
        m.setattr(Iterations, "_steady_once", count_once)
        m.setattr(pools.Pool, "make_room", count_room)
        sim = Sim(prog, Settings(seed=3, arrivals=arrivals))
        if record:
            from serq.interp.dump import Recorder, Requests
            sim.recorder = Recorder(sim)
            sim.requests = Requests()
        rep = sim.run()
    rep.pop("_sim", None)
    eng = sim.engines
    out = (json.dumps(rep, sort_keys=True), [e.iterations for e in eng], [e.served_total for e in eng],
           list(sim.c_itl.v), dict(getattr(sim, "claim_state", {})))
    return out, calls, rep


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_single_turn_alike(monkeypatch, case):
    prog = api.load(SINGLE, CASES[case])
    on, c_on, rep = _run(monkeypatch, True, prog, 400)
    off, c_off, _ = _run(monkeypatch, False, prog, 400)
    assert on == off
    assert c_off["once"] == c_off["walked"] == 0
    assert c_on["once"] > 0, "no fast-forward ran in one loop"
    kv = rep["pools"]["kv"]
    if case == "plain":  # its cache fills: growths evict, in line (fewer make_room calls)
        assert kv["evicted"] > 0
        assert c_on["make_room"] < c_off["make_room"]
    if case == "preempting":  # preemptions, and a growth with no room walked growth by growth
        assert kv["preempted"] > 0
        assert c_on["walked"] > 0


def test_claims_and_dump_alike(monkeypatch):
    # vllm.sq's claims over iterations read the pool at growths (the walk); --dump's gauges
    prog = api.load(MULTI)
    on, _, _ = _run(monkeypatch, True, prog, 120, record=True)
    off, _, _ = _run(monkeypatch, False, prog, 120, record=True)
    assert on == off


def test_cohort_growth_evictions_alike(monkeypatch):
    """A cohort (16 or more requests decoding) whose pool's cache is full: its members' growths at an
    epoch each evict a block, in line (_co_grow_all) as make_room would, one at a time: the same
    report as every growth through make_room."""
    prog = api.load(SINGLE, {"rate": 60, "blocks": 16384})
    on, c_on, rep = _run(monkeypatch, True, prog, 1500)
    off, c_off, _ = _run(monkeypatch, False, prog, 1500)
    assert on == off
    assert rep["pools"]["kv"]["evicted"] > 0 and rep["pools"]["kv"]["preempted"] == 0
    assert c_on["make_room"] < c_off["make_room"]
