"""A network of queues runs on queueing.py's shorter path: the same report to the byte as the
general path's (Sim.queueing = False), on programs Hypothesis writes (fifo, ps and delay stages,
stage arrays picked by a drawn index, runs of no work, ties, gauges, warm-up, horizons, renewal
arrivals), and the same diagnostics."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serq import api
from serq.diagnostics import SerqError
from serq.interp.queueing import plan
from serq.interp.sim import Sim
from serq.ir.model import Settings


def both(text, **kw):
    """The report of the general path and of the queueing path (which must take the program)."""
    prog = api.load_text(text, "q.sq")
    out = []
    for q in (False, True):
        sim = Sim(prog, Settings(**kw))
        sim.queueing = q
        assert (plan(sim) is not None) == q or not q
        rep = sim.run()
        out.append(json.dumps(rep, sort_keys=True, default=str))
    return out


def takes_path(text) -> bool:
    return plan(Sim(api.load_text(text, "q.sq"), Settings(arrivals=1))) is not None


STAGES = ["fifo", "fifo(2)", "fifo(inf)", "ps(1)", "ps(2)", "delay", "ps(min(present, 3))"]
# the turn's lets: ~exp of a constant mean is written out in the path's source, other draws call
# their closures on the same stream, in the order written
TURNS = ["Size w0 = ~exp(1);", "Size w0 = 2;", "Size w0 = ~uniform(0, 2); Size w1 = ~exp(0.5);",
         "Size w1 = ~exp(2); Size w0 = w1 + ~erlang(2, 1); Size w2 = ~exp(1);", "Size w0 = ~exp(1); observe x = w0;"]
WORK = ["~exp(1)", "~det(1)", "~uniform(0, 2)", "~erlang(3, 1)", "~h2(1, 4)", "0", "1", "0.5 * w0", "w0"]


@st.composite
def programs(draw):
    n_st = draw(st.integers(1, 3))
    kinds = [draw(st.sampled_from(STAGES)) for _ in range(n_st)]
    arrays = [draw(st.sampled_from([None, 2, 3])) for _ in range(n_st)]
    decl = " ".join(f"stage s{i}{'' if a is None else f'[{a}]'} : {k};" for i, (k, a) in enumerate(zip(kinds, arrays)))
    runs = []
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, n_st - 1))
        pick = "" if arrays[i] is None else draw(st.sampled_from([f"[{arrays[i] - 1}]", f"[floor(~uniform(0, {arrays[i]}))]"]))
        runs.append(f"run s{i}{pick} (cost(s{i}, {draw(st.sampled_from(WORK))}));")
    rate = draw(st.sampled_from(["poisson(0.6)", "poisson(2)", "renewal(~det(1))", "renewal(~exp(1.5))"]))
    s0 = "s0" + ("" if arrays[0] is None else "[0]")
    gauge = draw(st.sampled_from(["", f"gauge g = queue({s0});", f"gauge g = queue({s0}); gauge h = 2 * busy({s0});"]))
    turn = draw(st.sampled_from(TURNS))
    prog = (f"fn main() {{ {decl} workload {{ arrive {rate}; turn {{ {turn} }} }} "
            f"server {{ {' '.join(runs)} }} {gauge} }}")
    run = draw(st.sampled_from([dict(arrivals=draw(st.integers(1, 150))), dict(horizon=draw(st.sampled_from([20, 55.5])))]))
    if draw(st.booleans()):
        run["warmup"] = 5
    run["seed"] = draw(st.integers(0, 3))
    return prog, run


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_the_queueing_path_gives_the_general_paths_report(case):
    text, run = case
    assert takes_path(text)
    try:
        a, b = both(text, **run)
    except SerqError as e:  # a run that fails fails the same way on both (checked below)
        return _same_error(text, run, e)
    assert a == b


def _same_error(text, run, e):
    prog = api.load_text(text, "q.sq")
    for q in (False, True):
        sim = Sim(prog, Settings(**run))
        sim.queueing = q
        with pytest.raises(SerqError) as info:
            sim.run()
        assert info.value.render() == e.render()


@pytest.mark.parametrize("text", [
    # ties everywhere: deterministic arrivals and service, two servers, zero-work runs between
    "fn main() { stage a : fifo(2); stage b : ps(1); workload { arrive renewal(~det(1)); turn { } } "
    "server { run a (cost(a, 2)); run b (cost(b, 0)); run b (cost(b, 1)); run a (cost(a, 0)); } gauge g = queue(b); }",
    # the session's own draws in the server (its stream), a drawn index over an array
    "fn main() { stage q[3] : fifo; workload { arrive poisson(2); } "
    "server { run q[floor(~uniform(0, 3))] (cost(q, ~exp(1))); } }",
    # a turn block that observes: Sim.turn_set runs it
    "fn main() { stage s : ps(1); workload { arrive poisson(0.7); turn { Size w = ~exp(2); observe drawn = w; } } "
    "server { run s (cost(s, w)); } }",
])
def test_ties_server_draws_and_branching_turns(text):
    for kw in (dict(arrivals=400, seed=3), dict(horizon=150.25, warmup=10, seed=1)):
        a, b = both(text, **kw)
        assert a == b


@pytest.mark.parametrize("text", [
    "fn main() { pool p { cap 3; } stage s : fifo; workload { arrive poisson(1); } "
    "server { hold p (cost(p, 1)) { run s (cost(s, 1)); } } }",
    "fn main() { stage s : fifo; workload { arrive closed(3); } server { run s (cost(s, 1)); } }",
    "fn main() { stage s : fifo; workload { arrive poisson(1); session { turn; turn; } } server { run s (cost(s, 1)); } }",
    "fn main() { stage s : fifo; workload { arrive poisson(1); } server { run s (cost(s, 1)); observe x = now; } }",
    "fn main() { share maxmin; stage s : ps(1); stage t : ps(2); workload { arrive poisson(1); } server { run s, t (cost(s, t, 1)); } }",
    "fn main() { stage s : fifo; workload { arrive poisson(1); } server { run s (cost(s, 1)); } "
    "claim fine: at end (count(response) >= 0); }",
])
def test_what_is_not_a_network_of_queues_takes_the_general_path(text):
    assert not takes_path(text)


@pytest.mark.parametrize("server, code", [
    ("run s (cost(s, 0.5 - ~uniform(0, 1)));", "R007"),                      # a negative amount of work
    ("run q[floor(~uniform(0, 5))] (cost(q, 1));", "R004"),   # an index out of the array
])
def test_a_run_time_error_is_the_same_diagnostic(server, code):
    text = f"fn main() {{ stage s : fifo; stage q[3] : fifo; workload {{ arrive poisson(1); }} server {{ {server} }} }}"
    assert takes_path(text)
    prog = api.load_text(text, "q.sq")
    rendered = []
    for q in (False, True):
        sim = Sim(prog, Settings(arrivals=200, seed=0))
        sim.queueing = q
        with pytest.raises(SerqError) as info:
            sim.run()
        assert info.value.code == code
        rendered.append(info.value.render())
    assert rendered[0] == rendered[1]


def test_progress_is_reported_at_the_instants_something_happens():
    # `serq run` on a terminal draws its progress from the run's clock: the same calls on both paths,
    # but for the instants where the general path handles only a replaced ps end (an event that does
    # nothing, which the queueing path does not hold: queueing._ps_source); the queueing path has
    # answered the session whose job ended in the event itself (the general path answers it when it
    # settles, after the call), so its completed count may be ahead by those
    prog = api.load_text("fn main() { stage s : ps(1); workload { arrive poisson(0.8); } "
                         "server { run s (cost(s, ~exp(1))); } gauge g = queue(s); }", "q.sq")
    seen = []
    for q in (False, True):
        sim = Sim(prog, Settings(arrivals=300, seed=2))
        sim.queueing = q
        clock: list = []
        sim.run(lambda s: clock.append((s.now, s.sessions_arrived, s.sessions_completed, s.live)))
        seen.append(clock)
    general, queueing = seen
    at = {c[0]: i for i, c in enumerate(general)}
    assert all(c[0] in at and general[at[c[0]]][1] == c[1] for c in queueing) and len(queueing) > 300
    skipped = [i for i, c in enumerate(general) if c[0] not in {q[0] for q in queueing}]
    assert skipped and all(general[i][1] == general[i - 1][1] for i in skipped)  # no arrival there
    ahead = [q[2] - general[at[q[0]]][2] for q in queueing]
    assert set(ahead) == {0, 1} and all(q[2] + q[3] == q[1] for q in queueing)


def test_gauges_past_the_switch_to_disk_are_the_same(monkeypatch):
    # the written-out TimeAverage.set flushes its change points to disk as set does
    from serq.interp import stats as S
    monkeypatch.setattr(S, "SWITCH", 300)
    monkeypatch.setattr(S, "CHUNK", 70)
    a, b = both("fn main() { stage s : ps(1); stage f : fifo(2); workload { arrive poisson(0.9); } "
                "server { run s (cost(s, ~exp(0.6))); run f (cost(f, ~exp(1))); } "
                "gauge g = queue(s); gauge h = busy(f) + queue(f); }", arrivals=2000, seed=4, warmup=20)
    assert a == b
    assert json.loads(a)["gauges"]["g"]["mean"] > 0


@pytest.mark.parametrize("kw, end", [(dict(arrivals=2), 11), (dict(arrivals=2, warmup=0.5), 11),
                                     (dict(arrivals=2, horizon=12), 11), (dict(arrivals=2, horizon=10.75), "R032"),
                                     (dict(horizon=10.9), 10.9)])
def test_a_replaced_ps_end_after_the_last_job_still_sets_the_runs_end(kw, end):
    # ps(present * present) serves faster with more present: the second job (work 1, at 2) makes the
    # first's end (at 11) come sooner, so its replaced end at 11 lies after everything real (the
    # first job ends at 10.5): the general path's clock reaches 11 with it, and with a horizon before
    # 11 that event keeps the run from draining; the queueing path, which holds no such event, must
    # end the run at the same instant, drained or not (queueing._ps_source)
    text = ("fn main() { stage s : ps(present * present); workload { arrive renewal(~det(1)); "
            "turn { Size w = serial == 0 ? 10 : 1; } } server { run s (cost(s, w)); } gauge g = queue(s); }")
    if end == "R032":  # the sessions are done by 10.5, but an event at 11 is still to come
        with pytest.raises(SerqError) as info:
            both(text, **kw)
        assert info.value.code == "R032"
        return _same_error(text, kw, info.value)
    a, b = both(text, **kw)
    assert a == b
    rep = json.loads(a)
    assert rep["end"] == end and (rep["client"]["response"]["max"] == 9.5 or "horizon" in kw)


def test_a_ps_capacity_that_fails_is_the_same_diagnostic_on_the_path():
    # the path's ps submit and end read φ(present) through the stage's own _rate: R010 at the same
    # arrival, with the same text and place, when the fourth job is present
    text = ("fn main() { stage s : ps(4 - present); workload { arrive poisson(3); } "
            "server { run s (cost(s, ~exp(1))); } }")
    assert takes_path(text)
    with pytest.raises(SerqError) as info:
        both(text, arrivals=500, seed=1)
    assert info.value.code == "R010"
    _same_error(text, dict(arrivals=500, seed=1), info.value)


LEAN = [
    # one exp let read by the first run and by a later one (kept on the customer), a constant run
    "fn main() { stage a : ps(1); stage b : fifo(2); stage c : delay; workload { arrive poisson(0.7); "
    "turn { Size w = ~exp(1); } } server { run a (cost(a, w)); run b (cost(b, 0.5)); run c (cost(c, w)); } "
    "gauge q = queue(a); gauge wb = queue(b) + busy(b); gauge d = busy(c); }",
    # a constant let between two drawn ones (the stream advances only on the draws), zero work
    "fn main() { stage a : fifo; stage b : ps(2); workload { arrive renewal(~exp(1.2)); "
    "turn { Size x = ~exp(0.5); Cost k = cost(b, 0); Cost y = cost(b, ~exp(2)); } } "
    "server { run a (cost(a, x)); run b (k); run b (cost(b, y)); } gauge g = queue(b); }",
    # no draw in the turn at all
    "fn main() { stage s : ps(min(present, 2)); workload { arrive poisson(1.5); turn { Size w = 1; } } "
    "server { run s (cost(s, w)); } }",
]


@pytest.mark.parametrize("text", LEAN)
def test_a_session_no_closure_reads_is_a_customer_with_the_same_report(text):
    from serq.interp.queueing import _lean
    assert _lean(Sim(api.load_text(text, "q.sq"), Settings(arrivals=1))) is not None
    for kw in (dict(arrivals=3000, seed=2), dict(horizon=400.5, warmup=30, seed=0)):
        a, b = both(text, **kw)
        assert a == b
        assert json.loads(a)["sessions"]["completed"] > 100


def test_a_session_a_closure_reads_is_not_lean():
    from serq.interp.queueing import _lean
    for text in ["fn main() { stage s : ps(1); workload { arrive poisson(1); turn { Size w = ~exp(1); } } "
                 "server { run s (cost(s, w + 1)); } }",          # the work is an expression of the let
                 "fn main() { stage q[2] : fifo; workload { arrive poisson(1); turn { Size w = ~exp(1); } } "
                 "server { run q[1] (cost(q, w)); } }",          # a stage picked by an index
                 "fn main() { stage s : ps(1); workload { arrive poisson(1); turn { Size w = ~uniform(0, 2); } } "
                 "server { run s (cost(s, w)); } }"]:           # a let's closure draws
        sim = Sim(api.load_text(text, "q.sq"), Settings(arrivals=1))
        assert plan(sim) is not None and _lean(sim) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_a_ps_end_that_rides_on_the_event_the_heap_holds_changes_no_report(case):
    # the general path's ps stage (PS._schedule): an end at the same time as the event already on
    # the heap does not push one of its own; that event, when it comes up, lets what lies between
    # come first (ties: deterministic arrivals and work). The report is the one of pushing every end
    from serq.interp.stages import PS
    text, run = case
    prog = api.load_text(text, "q.sq")
    out = []
    for share in (True, False):
        sim = Sim(prog, Settings(**run))
        sim.queueing = False
        try:
            PS.share_ends = share
            out.append(json.dumps(sim.run(), sort_keys=True, default=str))
        except SerqError as e:
            out.append(e.render())
        finally:
            PS.share_ends = True
    assert out[0] == out[1]


@pytest.mark.parametrize("text", [
    # an even session's delay (3) ends at the arrival of the third after it, and the next even
    # one, arriving in between, set that end anew after the arrival was scheduled: the end rides
    # on the event set first, and the arrival comes before it. The odd session arriving then (no
    # delay) joins the fifo before the even one whose delay ends: serving the end early swaps them
    "fn main() { stage idle : delay; stage f : fifo; workload { arrive renewal(~det(1)); "
    "turn { Cost w = cost(f, ~exp(0.9)); } } "
    "server { run idle (cost(idle, serial % 2 == 0 ? 3 : 0)); run f (w); } gauge g = queue(f); }",
    # a closed workload thinking on a delay stage, then holding a pool around a ps stage: ties at
    # every turn (deterministic think and work), pools settled between the events of an instant
    "fn main() { pool p { cap 2; } stage idle : delay; stage s : ps(2); workload { arrive closed(40); "
    "turn { Cost w = cost(s, 1); } session { loop { run idle (cost(idle, 3)); turn; } } } "
    "server { hold p (cost(p, 1)) { run s (w); } } gauge g = queue(s); }",
    "fn main() { pool p { cap 3; } stage idle : delay; stage s : ps(min(present, 2)); workload { arrive closed(25); "
    "turn { Cost w = cost(s, ~exp(1)); } session { loop { run idle (cost(idle, ~exp(2))); turn; } } } "
    "server { hold p (cost(p, 1)) { run s (w); run idle (cost(idle, 0.5)); } } gauge g = queue(idle); }",
])
def test_a_ps_end_that_rides_changes_no_report_with_ties_and_pools(text):
    from serq.interp.stages import PS
    prog = api.load_text(text, "q.sq")
    out = []
    for share in (True, False):
        try:
            PS.share_ends = share
            sim = Sim(prog, Settings(horizon=300, seed=1))
            sim.queueing = False  # the general path's ps stage
            out.append(json.dumps(sim.run(), sort_keys=True, default=str))
        finally:
            PS.share_ends = True
    assert out[0] == out[1] and json.loads(out[0])["sessions"]["arrived"] > 0
