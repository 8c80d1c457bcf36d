"""Long runs of flows, transfers and legs (*Stages*, *Queues*, *Legs*): thousands of sessions, each run
under a CPU budget (a run over it fails with its program named, it does not hang the suite), checked
against invariants and, for the two-stage flow, against M/G/1-PS."""
from __future__ import annotations

import contextlib
import math
import signal

import pytest

from serq import api
from serq.diagnostics import SerqError
from serq.interp import queueing
from serq.interp import sim as sim_module
from serq.interp.sim import Sim
from serq.interp.stages import PS, FlowNet
from serq.ir.model import Settings
from test_closed_forms import near
from test_workloads import Checked, load

BUDGET = 60.0  # CPU seconds a run may take; each takes a few at most


@contextlib.contextmanager
def budget(what, seconds=BUDGET):
    def over(signum, frame):
        pytest.fail(f"over its budget of {seconds} s of CPU (a hang?):\n{what}")
    old = signal.signal(signal.SIGVTALRM, over)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


def run_sim(prog, what, **settings):
    # in this thread (api.run simulates in another, which a signal cannot stop)
    sim = Sim(prog, Settings(**settings))
    with budget(what):
        return sim.run()


def run_text(text, **settings):
    return run_sim(api.load_text(text, "t.sq", {}), text, **settings)


def accounted(rep, n=None):
    s = rep["sessions"]
    assert s["arrived"] == s["completed"] + s["rejected"] + s["live_at_end"], s
    if n is not None:  # drained
        assert s["arrived"] == s["completed"] == n and s["live_at_end"] == 0, s


# the reproducer: a flow with a remainder of 2.5e-10 at rate 20000 rescheduled its end at
# the same instant forever, near t = 200 for this seed
TWO = """fn main() {
  stage a : ps(20000);
  stage b : ps(20000);
  share %s;
  workload { arrive poisson(%s); turn { Size n = 100 + floor(~uniform(0, 2000)); } }
  server { run a, b (cost(a, b, n)); }
}"""
ONE = """fn main() {
  stage a : ps(20000);
  workload { arrive poisson(%s); turn { Size n = 100 + floor(~uniform(0, 2000)); } }
  server { run a (cost(a, n)); }
}"""


@pytest.mark.parametrize("policy", ["maxmin", "bottleneck"])
def test_two_equal_ps_stages_held_together_are_one_ps_stage(policy):
    # one class of flow over two ps(φ) stages: every flow is at both, so each runs at φ/n under
    # either policy, and the pair is one M/G/1-PS stage of capacity φ: E[T] = E[S] / (1 - ρ)
    lam, n = 10, 30000
    rep = run_text(TWO % (policy, lam), arrivals=n, warmup=50)
    accounted(rep, n)
    assert rep["end"] > 200  # through the instant where the reproducer hung
    es = (100 + 999.5) / 20000  # floor(U(0, 2000)) is uniform on 0..1999
    rho = lam * es
    near(rep["client"]["response"], es / (1 - rho), f"two-stage flow, {policy}")
    for st in ("a", "b"):
        assert rep["stages"][st]["completed"] == rep["client"]["response"]["count"]  # after the warm-up
    assert rep["stages"]["a"]["utilisation"] == pytest.approx(rep["stages"]["b"]["utilisation"], rel=1e-12)
    # and session by session the same as the one stage (the same draws, another stage's code)
    one = run_text(ONE % lam, arrivals=n, warmup=50)
    for k in ("count", "mean", "p50", "p99", "max"):
        assert rep["client"]["response"][k] == pytest.approx(one["client"]["response"][k], rel=1e-9), k


MIXED = """fn main() {
  stage a : ps(3);
  stage b : ps(2);
  share %s;
  workload { arrive poisson(1.2); turn { Size k = floor(~uniform(0, 3)); Size w = ~exp(1); } }
  server {
    branch (k == 0) { run a, b (cost(a, b, w)); observe wab = w; }
    else { branch (k == 1) { run a (cost(a, w)); observe wa = w; } else { run b (cost(b, w)); observe wb = w; } }
  }
}"""


@pytest.mark.parametrize("policy", ["maxmin", "bottleneck"])
def test_flows_of_three_classes_carry_their_work_exactly(policy, monkeypatch):
    # drained, a stage has carried all the work of the flows through it: its utilisation (Σ rate / φ,
    # averaged over the run) times φ times the run's length is that work; a flow ended early or
    # late by a rounding would break the equality
    n = 20000
    fired = []
    fire = FlowNet._fire

    def counted(self, version):  # every completion event still current ends a flow at least
        live, before = version == self.version, len(self.flows)
        fire(self, version)
        if live:
            fired.append(before - len(self.flows))
    monkeypatch.setattr(FlowNet, "_fire", counted)
    rep = run_text(MIXED % policy, arrivals=n)
    accounted(rep, n)
    assert sum(fired) == n and min(fired) >= 1
    obs = rep["observe"]

    def total(name):
        return obs[name]["mean"] * obs[name]["count"]
    end = rep["end"]
    for st, cap, names in (("a", 3, ("wab", "wa")), ("b", 2, ("wab", "wb"))):
        carried = rep["stages"][st]["utilisation"] * cap * end
        assert carried == pytest.approx(sum(total(x) for x in names), rel=1e-9), st
        assert rep["stages"][st]["completed"] == sum(obs[x]["count"] for x in names)


# the examples with transfers (flows over two NICs, leases) and legs, drained after thousands of
# sessions: every session ended, every hold and lease given back, every turn's tokens committed
LONG = {
    # through t = 208, where the read's flow over P.nic and D.nic hung (the reproducer)
    "pd-disaggregation/llmd_nixl_pull.sq": (2000, lambda a: a["o"]),
    "subagent/vllm_subagents.sq": (1000, lambda a: 2 * a["o"] + 3 * a["o_sub"]),
}


@pytest.mark.parametrize("path", sorted(LONG))
def test_examples_with_flows_and_legs_drain_after_thousands_of_sessions(path):
    n, expected = LONG[path]
    sim = Checked(load(path), Settings(arrivals=n))
    sim.expected = expected
    sim.every = 97  # the pools' invariants on a sample of the settles (all of them costs 5x the run)
    with budget(path):
        rep = sim.run()
    accounted(rep, n)
    sim.check_pools()
    assert sim.answered >= n
    assert not sim.live and not sim.heap
    for m in sim.pools:
        assert m.used == 0 and not m.allocs and not m.queue and not m.growers, m.label
    if "llmd" in path:
        assert rep["end"] > 208
        assert sum(rep["stages"][f"D.nic[{j}]"]["completed"] for j in (0, 1)) == n
        assert not sim.flownet.flows and all(st.n == 0 for st in sim.flownet.members)
        assert all(math.isfinite(st.flow_rate) and st.flow_rate == 0 for st in sim.flownet.members)


# the hang of the issue, put back: a completion event that completes nothing and comes again (a ps
# stage's event carries nothing: the last it set is the one that fires)
AGAIN = {PS: lambda self: self.sim.at(self.sim.now, self.fire),
         FlowNet: lambda self, version: self.sim.at(self.sim.now, self._fire, version)}


@pytest.mark.parametrize("cls,text,names", [(PS, ONE % 1, "stage `a`"), (FlowNet, TWO % ("maxmin", 1), "`a`, `b`")])
def test_the_watchdog_names_the_stages_whose_events_stand_still(monkeypatch, cls, text, names):
    monkeypatch.setattr(cls, "_fire", AGAIN[cls])
    monkeypatch.setattr(sim_module, "plan", lambda sim: None)  # the general path: the stage's own _fire
    with pytest.raises(SerqError) as info:
        run_text(text, horizon=10)
    err = info.value
    assert err.code == "R022" and names in str(err) and "100,101 events" in str(err), err.render()
    assert err.span.line == 2  # stage a's declaration


def test_on_the_queueing_path_the_watchdog_names_the_ps_stage(monkeypatch):
    # the path holds a ps stage's next end outside the event heap (queueing._ps_source): the watchdog
    # still names the stage when its end is the event that trips it. Here it trips on the second
    # event of an instant (the first, which moves the clock, is not counted): the arrival at k + 1,
    # then the end of job k (work 1) at that instant
    monkeypatch.setattr(sim_module, "STALL", 0)
    monkeypatch.setattr(sim_module, "STALL_PER", 0)
    text = ("fn main() {\n  stage a : ps(1);\n  workload { arrive renewal(~det(1)); }\n"
            "  server { run a (cost(a, 1)); }\n}")
    sim = Sim(api.load_text(text, "t.sq", {}), Settings(arrivals=5))
    assert queueing.plan(sim) is not None
    with pytest.raises(SerqError) as info:
        sim.run()
    err = info.value
    assert err.code == "R022" and "stage `a`" in str(err) and "stood at 2 for 1 events" in str(err), err.render()
    assert err.span.line == 2
