"""The engine path (serq/interp/enginepath.py, issue 49): a single engine's single-turn sessions run
without the general path's instruction lists, generators and planned steady iterations, and every
report is the same to the byte as the general path's (Sim.engine_path off)."""
from __future__ import annotations

import gc
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serq import api
from serq.interp import enginepath
from serq.interp.sim import Sim
from serq.ir.model import Settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SINGLE = os.path.join(ROOT, "examples", "single-turn", "vllm_single_turn.sq")
BLIS = os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "blis_shared.sq"))


def _run(path, inputs, on, slo=None, **st_):
    """The report as JSON, the simulator, and whether the engine path ran it (to its end, or until
    it was made again on the general path: engine_path is then off)."""
    sim = Sim(api.load(path, inputs), Settings(**st_))
    sim.engine_path = on
    if slo:
        sim.set_slo(slo)
    rep = sim.run()
    rep.pop("_sim", None)
    ev = getattr(vars(sim).get("_events"), "__self__", None)
    return json.dumps(rep, sort_keys=True), sim, isinstance(ev, enginepath.EnginePath) or (on and not sim.engine_path)


def _same(path, inputs=None, slo=None, **st_):
    """The report through the engine path and through the general one: the same bytes. Returns
    whether the engine path was taken (and whether its run was made again on the general path)."""
    a, sim, taken = _run(path, inputs or {}, True, slo, **st_)
    b, _, _ = _run(path, inputs or {}, False, slo, **st_)
    assert a == b
    return taken, not sim.engine_path


CASES = [
    (SINGLE, {}, dict(arrivals=3000)),
    (SINGLE, {}, dict(horizon=60)),                               # a horizon cuts runs in flight
    (SINGLE, {}, dict(arrivals=2000, warmup=50, seed=7)),
    (SINGLE, {"rate": 20}, dict(arrivals=2000)),                  # a queue, a cohort of dozens
    (SINGLE, {"chunk_cap": 64}, dict(arrivals=1000)),             # chunked prefills, the threshold
    (SINGLE, {"B": 24, "rate": 10}, dict(arrivals=800)),          # a budget short of the batch
    (SINGLE, {"max_seqs": 2, "rate": 8}, dict(arrivals=800)),     # the slots full: the queue waits
    (SINGLE, {"caching": 0, "bs": 32}, dict(arrivals=1500, seed=3)),
    (BLIS, {}, dict(arrivals=3000)),
    (BLIS, {"prompt": 4000, "rate": 20}, dict(arrivals=600)),     # prefills chunked by the budget
    (BLIS, {"output": 1}, dict(arrivals=1000)),                   # no decode: the hold ends at its prefill
    (BLIS, {}, dict(horizon=40, warmup=5)),
    (os.path.join(ROOT, "examples", "sizing", "vllm.sq"), {}, dict(horizon=30)),   # the sizing study's
]


@pytest.mark.parametrize("path,inputs,st_", CASES, ids=[f"{os.path.basename(p)}-{i}-{s}" for p, i, s in CASES])
def test_the_engine_path_reports_what_the_general_path_reports(path, inputs, st_):
    taken, again = _same(path, inputs, **st_)
    assert taken and not again


def _variant(tmp_path, old, new):
    src = open(SINGLE).read()
    assert old in src
    path = tmp_path / "variant.sq"
    path.write_text(src.replace(old, new))
    return str(path)


TAKING = "kv (min(known, reused + budget_left(vllm))) reserve (known)"


def test_a_hold_whose_reserve_never_fits_is_refused_as_it_joins_through_both_paths(tmp_path):
    # EnginePath.frame: a reserve that reads attributes alone is judged as the hold joins (*Pools*)
    path = _variant(tmp_path, TAKING, "kv (min(known, reused + budget_left(vllm))) reserve (known * 40)")
    taken, again = _same(path, {"blocks": 600}, arrivals=300, seed=4)
    assert taken and not again
    rep = json.loads(_run(path, {"blocks": 600}, True, arrivals=300, seed=4)[0])
    assert rep["sessions"]["rejected"] > 0 and rep["sessions"]["completed"] > 0


def test_a_head_asking_for_more_than_the_kv_cap_waits_through_both_paths(tmp_path):
    # EnginePath.try_admit: a reserve above the KV pool's cap marks the pool's head (report: `over`)
    # (a reserve that reads the pool is judged at admission, not as the hold joins)
    path = _variant(tmp_path, TAKING, "kv (min(known, reused + budget_left(vllm))) reserve (known * 40 + 0 * cachedin(kv))")
    taken, again = _same(path, {"blocks": 600}, horizon=40, seed=4)
    assert taken and not again
    for on in (True, False):
        rep, sim, _ = _run(path, {"blocks": 600}, on, horizon=40, seed=4)
        slots, kv = sim.pools[1], sim.pools[0]
        assert kv.over is slots.queue[0] and "idle: engine vllm" in rep
        rep = json.loads(rep)
        assert rep["pools"]["kv"]["over_cap"] == 1 and any(n.startswith("over: pool kv") for n in rep["notes"])


@pytest.mark.parametrize("old,new", [
    (TAKING, "kv (min(known, reused + budget_left(vllm))) reserve (known - 300 + 0 * cachedin(kv))"),  # a reserve
    (TAKING, "kv (min(known, reused + budget_left(vllm)) - 300) reserve (known)"),  # negative units
    ("taking reqs (1),", "taking reqs (known > 400 ? -2 : 1 + 0 * cachedin(kv)),"),  # the slot pool's
    ("cache (caching * (prompt + output));", "cache (prompt - 300);"),  # at the hold's end (release)
], ids=["kv-reserve", "kv-units", "slot-units", "cache"])
def test_an_amount_refused_at_admission_or_release_is_the_same_diagnostic_through_both_paths(tmp_path, old, new):
    from serq.diagnostics import SerqError
    path = _variant(tmp_path, old, new)
    got = []
    for on in (True, False):
        sim = Sim(api.load(path, {}), Settings(arrivals=200))
        sim.engine_path = on
        with pytest.raises(SerqError) as e:
            sim.run()
        got.append((e.value.code, str(e.value.span), e.value.message))
    assert got[0] == got[1] and got[0][0] == "R007"


@pytest.mark.parametrize("arrive", ["renewal(~exp(1 / Lambda) + 0.05)", "renewal(0.3)"])
def test_renewal_arrivals_take_the_engine_path(tmp_path, arrive):
    src = open(SINGLE).read().replace("arrive poisson(Lambda);", f"arrive {arrive};")
    path = tmp_path / "renewal.sq"
    path.write_text(src)
    taken, again = _same(str(path), {}, arrivals=800, seed=5)
    assert taken and not again


def _preempted(path, inputs, **st_):
    sim = Sim(api.load(path, inputs), Settings(**st_))
    sim.run()
    return sum(m.preempted for m in sim.pools)


@pytest.mark.parametrize("path,preempt,inputs,st_", [
    # 64 blocks of 16 tokens: the KV pool fills, growths preempt the newest (lifo), at every load
    (SINGLE, None, {"blocks": 64, "rate": 10}, dict(arrivals=300)),
    (SINGLE, None, {"blocks": 200, "rate": 6}, dict(arrivals=1000, seed=4)),
    # a cohort of dozens at the preemption: written out, the members served one at a time
    (BLIS, None, {"blocks": 2000, "rate": 120, "output": 700}, dict(arrivals=800)),
    (BLIS, None, {"blocks": 300, "rate": 50}, dict(horizon=20, warmup=2)),
    # victims by keys on positions and tokens left (the cohort's written out to be read), one served
    # before the grower leaving the batch, and a preempted hold joining the queue's tail
    (SINGLE, "preempt by (position) requeue tail;", {"blocks": 150, "rate": 8}, dict(arrivals=600)),
    (BLIS, "preempt by (-remaining);", {"blocks": 1500, "rate": 120, "output": 700}, dict(arrivals=600)),
])
def test_a_run_that_preempts_stays_on_the_engine_path(tmp_path, path, preempt, inputs, st_):
    if preempt is not None:
        src = open(path).read().replace("preempt lifo;", preempt)
        path = tmp_path / "preempt.sq"
        path.write_text(src)
        path = str(path)
    taken, again = _same(path, inputs, **st_)
    assert taken and not again
    assert _preempted(path, inputs, **st_) > 0


@pytest.mark.parametrize("path,inputs,slo", [
    (SINGLE, {}, {"ttft": 0.3, "response": 2.0}),
    (SINGLE, {"rate": 20}, {"ttft": 0.3, "tpot": 0.02, "itl": 0.0065}),  # each turn's longest gap
    (SINGLE, {"blocks": 200, "rate": 6}, {"itl": 0.01}),                   # with preemptions
    (BLIS, {}, {"itl": 0.0145, "response": 1.5}),                        # dozens running: no cohort
])
def test_goodput_takes_the_engine_path(path, inputs, slo):
    # `serq run --slo`: the goodput, and with an itl objective each turn's longest gap between tokens;
    # each objective here met by some turns and not by others
    taken, again = _same(path, inputs, slo, arrivals=1500, seed=3)
    assert taken and not again
    t = json.loads(_run(path, inputs, True, slo, arrivals=1500, seed=3)[0])["throughput"]
    assert 0 < t["goodput_per_s"] < t["requests_per_s"]


def test_a_run_the_engine_path_cannot_finish_is_made_again_on_the_general_path(monkeypatch):
    # what it does not take (here: made to refuse a preempted session's requeue) stops the run, which
    # is made again from its start on the general path, with the same report
    def refuse(self):
        raise enginepath.Unsupported
    monkeypatch.setattr(enginepath.EnginePath, "requeue", refuse)
    taken, again = _same(SINGLE, {"blocks": 64, "rate": 10}, arrivals=300)
    assert taken and again


def test_programs_outside_the_shape_take_the_general_path():
    for rel, st_ in [("multi-turn/vllm.sq", dict(horizon=20)), ("engines/sglang.sq", dict(horizon=10)),
                     ("single-turn/mg1.sq", dict(arrivals=100))]:
        _, _, taken = _run(os.path.join(ROOT, "examples", rel), {}, True, **st_)
        assert not taken, rel
    # and a simulator with a method replaced (the tests' checks), with --dump's recorder, or one whose
    # fast-forward is off: the general path, which they observe
    sim = Sim(api.load(SINGLE, {}), Settings(arrivals=10))
    sim.fast_forward = False
    assert enginepath.plan(sim) is None
    sim = Sim(api.load(SINGLE, {}), Settings(arrivals=10))
    sim._steady = lambda *a: None
    assert enginepath.plan(sim) is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(1, 10_000), rate=st.sampled_from([1, 4, 12, 40]), bs=st.sampled_from([1, 8, 16]),
       B=st.sampled_from([16, 256, 2048]), chunk=st.sampled_from([0, 32]), blocks=st.sampled_from([512, 4096]),
       seqs=st.sampled_from([3, 256]), caching=st.sampled_from([0, 1]))
def test_drawn_settings_report_the_same_through_both_paths(seed, rate, bs, B, chunk, blocks, seqs, caching):
    inputs = {"rate": rate, "bs": bs, "B": B, "chunk_cap": chunk if chunk else float("inf"), "blocks": blocks,
              "max_seqs": seqs, "caching": caching}
    _same(SINGLE, inputs, arrivals=150, seed=seed)


@pytest.mark.parametrize("gauge,blocks,ways", [
    ("used(kv)", 700, {True}),          # the growths at once, the oldest cache entries giving blocks
    ("free(kv)", 700, {True}),          # at once, the gauge's values the cap less the pool's
    ("used(kv) / 2", 700, {False}),     # a gauge read at each instant: one growth at a time
    ("used(kv)", 700.5, {True, False}),  # where one must evict, it finds the pool over by half a block
    ("used(kv)", 700.3, {False}),       # a cap of no whole number of tokens
])
def test_a_stretchs_growths_made_at_once_or_one_by_one_report_alike(tmp_path, monkeypatch, gauge, blocks, ways):
    src = open(SINGLE).read().replace("gauge kv_used = used(kv);", f"gauge kv_used = {gauge};")
    path = tmp_path / "gauged.sq"
    path.write_text(src)
    made = []
    at_once = enginepath.EnginePath.grow_all
    monkeypatch.setattr(enginepath.EnginePath, "grow_all", lambda self, *g: made.append(at_once(self, *g)) or made[-1])
    taken, again = _same(str(path), {"blocks": blocks, "rate": 6}, arrivals=600, seed=2)
    assert taken and not again
    assert set(made) == ways


def test_a_time_average_given_rising_points_at_once_holds_what_one_at_a_time_holds():
    from serq.interp.stats import TimeAverage
    a, b = TimeAverage(0.5), TimeAverage(0.5)
    for ta in (a, b):
        ta.set(0.25, 3.0)
    times, vals = [0.3, 0.7, 1.1, 2.9, 3.0000001], [4.0, 1.0, 7.5, 7.25, 0.0]
    for t, v in zip(times, vals):
        a.set(t, v)
    b.rise(times, vals)
    assert (list(a.t), list(a.vals), list(a.cum), a.acc, a.last, a.v) == \
        (list(b.t), list(b.vals), list(b.cum), b.acc, b.last, b.v)
    assert a.result(4.0) == b.result(4.0)
    b.rise([], [])  # no points: nothing changes
    assert (list(a.t), list(a.vals), list(a.cum), a.acc, a.last, a.v) == \
        (list(b.t), list(b.vals), list(b.cum), b.acc, b.last, b.v)


def test_a_time_average_that_follows_another_from_the_same_point_holds_what_rising_holds():
    # grow_all: a gauge of the KV pool's used given the pool's own integrals, where both held the
    # same last change, value and integral
    from serq.interp.stats import TimeAverage
    pool, gauge, alone = TimeAverage(0.0), TimeAverage(0.0), TimeAverage(0.0)
    for ta in (pool, gauge, alone):
        ta.set(0.1, 2.0)
        ta.set(0.35, 5.0)
    times, vals = [0.4, 0.45, 1.7], [6.0, 7.0, 9.0]
    pool.rise(times, vals)
    gauge.follow(pool, len(times))
    alone.rise(times, vals)
    assert (list(gauge.t), list(gauge.vals), list(gauge.cum), gauge.acc, gauge.last, gauge.v) == \
        (list(alone.t), list(alone.vals), list(alone.cum), alone.acc, alone.last, alone.v)


@pytest.mark.parametrize("path,inputs,st_", [
    (SINGLE, {}, dict(arrivals=1500)),
    (SINGLE, {"blocks": 200, "rate": 6}, dict(arrivals=800)),     # preemptions: requests.csv counts them
    (BLIS, {}, dict(horizon=30, warmup=3)),
])
def test_a_dump_takes_the_engine_path(monkeypatch, path, inputs, st_):
    # `serq run --dump`: the queues read at every instant's end (dump.Recorder) and requests.csv's
    # rows (each turn's longest gap among them), the same through both paths
    got = {}
    for on in (True, False):
        monkeypatch.setattr(Sim, "engine_path", on)
        rep = api.run(api.load(path, inputs), Settings(**st_), record=True)
        sim = rep.pop("_sim")
        taken = isinstance(getattr(vars(sim).get("_events"), "__self__", None), enginepath.EnginePath)
        assert taken == on
        got[on] = (json.dumps(rep, sort_keys=True), [(list(ts), [list(c) for c in cols]) for ts, cols in
                   sim.recorder.series], list(sim.requests.rows()))
    assert got[True] == got[False]
    assert len(got[True][2]) > 100 and any(len(ts) > 10 for ts, _ in got[True][1])


def test_a_dump_made_again_on_the_general_path_records_that_run_alone(monkeypatch):
    # a run the engine path stops is made again from its start: --dump's recorder and requests.csv
    # are made again with it (the first run's rows and the stages it read are not the new run's)
    def refuse(self):
        raise enginepath.Unsupported
    monkeypatch.setattr(enginepath.EnginePath, "requeue", refuse)
    got = {}
    for on in (True, False):
        monkeypatch.setattr(Sim, "engine_path", on)
        rep = api.run(api.load(SINGLE, {"blocks": 64, "rate": 10}), Settings(arrivals=300), record=True)
        sim = rep.pop("_sim")
        assert not sim.engine_path  # made again (on), or the general path's from the start (off)
        got[on] = (json.dumps(rep, sort_keys=True), [(list(ts), [list(c) for c in cols]) for ts, cols in
                   sim.recorder.series], list(sim.requests.rows()))
    assert got[True] == got[False] and len(got[True][2]) > 200


@pytest.mark.parametrize("path", [SINGLE, BLIS])
def test_a_finished_sessions_objects_are_freed_without_the_cyclic_collector(path):
    """A session that ends on the engine path lets go of what made it, its hold and its allocations
    cycles (its own stream, its frame, each allocation's frame): they are freed as their last
    reference goes, and the cyclic collector, which cost ~6% of a run's CPU collecting ~9 objects a
    request, finds nothing that grows with the requests."""
    def cycles(n):
        gc.collect()
        gc.disable()
        try:
            _run(path, {}, True, arrivals=n)
            return gc.collect()
        finally:
            gc.enable()
    # (what the run's end leaves to the collector, the simulator and what its caches hold, grows
    # until they are full: 2,000 requests more left ~18,000 objects more before)
    few, many = cycles(1000), cycles(3000)
    assert many - few < 1000, (few, many)
