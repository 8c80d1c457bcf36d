"""running.count's sessions kept as they change (Engine.rc, issue 49), not counted again at every
iteration: at every reading, in runs that hold, lease, fork legs that pass their leases on, preempt
and drop, the kept counts are the sessions counted afresh (a run here, or a holder of a pool the
engine admits that is not a lease), each with how many of those it has."""
from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

from serq.interp.engine import Iterations

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import golden_reports as G  # noqa: E402

# the general path's iterations, which these tests observe (conftest.py)
pytestmark = pytest.mark.usefixtures("general_path")

# leases and legs (the PD examples, subagents), preemption (vllm.sq under pressure), arrays of
# engines (replica, routing), SGLang's and TGI's schedules
CASES = [c for c in G.cases() if any(k in c[0] for k in (
    "nixl", "subagents", "multi-turn/vllm.sq", "replica", "routing.sq --set policy=2", "sglang", "tgi"))]


def afresh(eng) -> dict:
    return dict(Counter(r.sess.id for r in eng.reqs) +
                Counter(a.frame.sess.id for p in eng.admitted for a in p.allocs if not a.leased))


@pytest.mark.parametrize("case,argv", CASES, ids=[c for c, _ in CASES])
def test_kept_residents_are_the_counted(case, argv, monkeypatch):
    read = Iterations._running
    seen = []

    def checked(self, eng):
        assert eng.rc == afresh(eng)
        seen.append(len(eng.rc))
        return read(self, eng)

    monkeypatch.setattr(Iterations, "_running", checked)
    text, _ = G.reports(argv)
    assert "sessions:" in text and seen and max(seen) > 1


# a seat (the engine's admitted pool) leased past its hold, by the session and by a leg whose lease
# passes to the session, released later or at its expiry: a lease is no resident (running.count)
LEASED = """fn main() {
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 3;
    tokens cap 8;
    schedule { advance running; admit waiting while (running.preempted == 0); }
    execute (0.5 + 0.25 * running.count);
  }
  pool kv on gpu { block 4; }
  pool reqs on llm { queue fifo; }
  stage s : delay;
  workload { arrive poisson(1.5); turn { Size n = 2 + floor(~exp(4)); } }
  server {
    branch (serial % 3 == 0) {
      fork { hold reqs (cost(reqs, 1)), kv (cost(kv, n + 2)) { run llm prefill (cost(llm, n)) growing kv; } lease reqs (inf); }
      join;
      run s (cost(s, 1));
      release reqs;
    }
    branch (serial % 3 == 1) {
      hold reqs (cost(reqs, 1)), kv (cost(kv, n + 2)) { run llm prefill (cost(llm, n)) growing kv;
                                                       run llm decode (cost(llm, 2)) growing kv; } lease reqs (2);
      run s (cost(s, 3));
    }
    branch (serial % 3 == 2) {
      hold reqs (cost(reqs, 1)), kv (cost(kv, n + 2)) { run llm prefill (cost(llm, n)) growing kv; }
    }
  }
}"""


def test_leased_seats_are_no_residents(monkeypatch):
    from serq import api
    from serq.interp.sim import Sim
    from serq.ir.model import Settings
    read = Iterations._running
    seen = []

    def checked(self, eng):
        assert eng.rc == afresh(eng)
        seen.append((len(eng.rc), sum(a.leased for p in eng.admitted for a in p.allocs)))
        return read(self, eng)

    monkeypatch.setattr(Iterations, "_running", checked)
    sim = Sim(api.load_text(LEASED, "leased.sq"), Settings(seed=5, arrivals=60))
    rep = sim.run()
    assert rep["sessions"]["completed"] == 60
    assert any(leased for _, leased in seen) and max(n for n, _ in seen) > 1
