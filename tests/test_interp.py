"""The interpreter on small programs whose every time is computed by hand (*Semantics*)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from serq import api
from serq.diagnostics import SerqError
from serq.ir.model import Settings

HERE = os.path.dirname(__file__)


def run(text, **settings):
    prog = api.load_text(text, "t.sq")
    rep = api.run(prog, Settings(**settings))
    return rep, rep.pop("_sim")


def by_serial(sim, name):
    """observe NAME's values, by session serial, in the order recorded."""
    out = {}
    ser = sim.obs.get(name)
    if ser is None:
        return out
    for (t, s, k), v in zip(ser.rows, ser.v):
        out.setdefault(s, []).append(v)
    return out


# ------------------------------------------------------------------ admission


HOL = """fn main() {
  pool p { cap 10; %s }
  stage s : delay;
  workload { arrive renewal(1); turn { Size u = serial == 0 ? 10 : (serial == 1 ? 6 : 5); } }
  server {
    set t0 = now;
    hold p (cost(p, u)) { observe admit = now; run s (cost(s, 10)); }
  }
}"""


def test_fifo_head_of_line_blocking():
    # s0 (10) at 1 fills the pool until 11; s1 (6) at 2 and s2 (5) at 3 wait; at 11 s1 is admitted,
    # and s2, which does not fit beside it, waits for it to end at 21
    rep, sim = run(HOL % "", arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [11.0], 2: [21.0]}
    assert rep["pools"]["p"]["admitted"] == 3


def test_queue_by_keys_reorders_the_waiting():
    # the same, but the least u first: s2 (5) at 11, s1 (6) after it, at 21
    rep, sim = run(HOL % "queue by (u);", arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [21.0], 2: [11.0]}


def test_head_of_line_blocks_a_smaller_hold_behind_it():
    text = """fn main() {
      pool p { cap 10; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size u = serial == 0 ? 8 : (serial == 1 ? 5 : 1); } }
      server { hold p (cost(p, u)) { observe admit = now; run s (cost(s, 10)); } }
    }"""
    # s2 (1) would fit beside s0 (8) but waits behind s1 (5), the head
    _, sim = run(text, arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [11.0], 2: [11.0]}


RESERVE = """fn main() {
  pool p { cap 10; %s }
  stage s : delay;
  workload { arrive renewal(1); }
  server {
    branch (serial == 0) {
      hold p (cost(p, 2)) reserve (cost(p, 8)) { observe admit = now; run s (cost(s, 10)); }
    } else {
      hold p (cost(p, 3)) { observe admit = now; run s (cost(s, 1)); }
    }
  }
}"""


@pytest.mark.parametrize("held,admit1", [(False, 2.0), (True, 11.0)])
def test_reserve_and_reserve_held(held, admit1):
    # s0 takes 2 and reserves 8; s1 (3) fits beside the 2 allocated, unless the pool holds the
    # reservation: 2 + 6 unallocated + 3 > 10, so it waits for s0 to end at 11
    _, sim = run(RESERVE % ("reserve held;" if held else ""), arrivals=2)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [admit1]}


def test_a_hold_that_can_never_fit_is_rejected():
    text = """fn main() {
      pool p { cap 10; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size u = serial == 1 ? 11 : 1; } }
      server { hold p (cost(p, u)) { run s (cost(s, 1)); } }
    }"""
    rep, _ = run(text, arrivals=3)
    assert rep["sessions"] == {"arrived": 3, "completed": 2, "rejected": 1, "stuck": 0, "live_at_end": 0}
    assert rep["pools"]["p"]["rejected"] == 1
    assert rep["client"]["response"]["count"] == 2  # a refused turn is not answered


# ------------------------------------------------------------------ the prefix cache


CACHE = """fn main() {
  pool kv { cap 100; block 4; }
  stage s : delay;
  workload { arrive batch(1); turn { Size n = 10 + 10 * turn_no; } session { turn; turn; turn; } }
  server {
    hold kv (cost(kv, n)) reuse (cost(kv, %s)) { observe hit = cached; run s (cost(s, 1)); } cache (cost(kv, n));
  }
}"""


def test_prefix_cache_reuse_in_whole_blocks():
    # turn 0: n = 10, 12 allocated, min(10, 12) = 10 cached as 8 (whole blocks); turn 1 (n = 20)
    # consumes the 8 and caches 20; turn 2 (n = 30) consumes 20
    _, sim = run(CACHE % "n")
    assert by_serial(sim, "hit") == {0: [0.0, 8.0, 20.0]}
    kv = sim.pools[0]
    assert kv.cached == 28.0 and kv.used == 0.0   # turn 2 cached min(30, 32) = 30 -> 28


def test_what_reuse_leaves_of_the_entry_is_dead():
    # reuse (4): turn 1 consumes 4 of the 8; the other 4 stay cached, dead; turn 2 consumes 4 of 20
    _, sim = run(CACHE % "4")
    assert by_serial(sim, "hit") == {0: [0.0, 4.0, 4.0]}
    kv = sim.pools[0]
    dead = [e for e in kv.entries if e.alive and e.owner is None]
    assert sum(e.units for e in dead) == 4.0 + 16.0
    assert kv.cachedin(type("S", (), {"cid": 0})()) == 28.0  # session 0's (a session's id is its serial)


def test_entries_gone_from_the_cache_wait_in_the_list_and_are_swept():
    """pools._gone: an entry consumed whole or dropped leaves the cache at once (cached, cachedin,
    eviction) but the list only as an eviction's scan passes it or when the gone are half of it;
    the report is the one removing each at once gives."""
    from serq.interp import pools as P
    text = """fn main() {
      pool kv { cap 400; block 4; }
      stage s : delay;
      workload { arrive renewal(0.5); turn { Size n = 8 + 4 * turn_no; } session { turn; turn; turn; } }
      server {
        hold kv (cost(kv, n)) reuse (cost(kv, n)) { observe hit = cached; run s (cost(s, 3)); }
          cache (cost(kv, n));
        branch (serial % 3 == 0 && turn_no == 2) { drop kv; }
      }
    }"""
    seen = []
    orig = P.Pool._gone

    def gone(self, e):
        orig(self, e)
        n = sum(not x.alive for x in self.entries)
        seen.append((n == self.n_gone, len(self.entries) <= 2 * (len(self.entries) - n) + 33))
    P.Pool._gone = gone
    try:
        rep, sim = run(text, arrivals=300)
    finally:
        P.Pool._gone = orig
    assert len(seen) > 300 and all(a and b for a, b in seen)
    kv = sim.pools[0]
    assert math.isclose(sum(e.units for e in kv.entries if e.alive), kv.cached)
    assert rep["pools"]["kv"]["evicted"] > 0

    def at_once(self, e):  # as before: removed from the list at once
        e.alive = False
        self.entries.remove(e)
    P.Pool._gone = at_once
    try:
        before, _ = run(text, arrivals=300)
    finally:
        P.Pool._gone = orig
    assert before == rep

def test_lru_eviction_takes_the_oldest_entry_block_by_block():
    text = """fn main() {
      pool kv { cap 20; block 2; evict lru; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size n = serial == 3 ? 16 : 8; } }
      server { hold kv (cost(kv, n)) { run s (cost(s, 0.5)); } cache (cost(kv, n)); }
    }"""
    # s0 and s1 cache 8 each (at 1.5, 2.5); s2's 8 at 3 needs 4 more room: the oldest, s0's entry,
    # loses 4 from its tail; s2 caches 8 at 3.5 (4 + 8 + 8 = 20). s3's 16 at 4 evicts s0's last 4,
    # s1's 8 and 4 of s2's; s3 caches 16 at 4.5
    rep, sim = run(text, arrivals=4)
    kv = sim.pools[0]
    left = sorted((e.owner.serial, e.units) for e in kv.entries if e.alive and e.owner is not None)
    assert left == [(2, 4.0), (3, 16.0)]
    assert kv.used + kv.cached == kv.cap and rep["pools"]["kv"]["evicted"] == 4


# ------------------------------------------------------------------ growth and preemption


def test_growth_preempts_the_holder_admitted_last():
    text = """fn main() {
      pool kv { cap 10; preempt lifo; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size u = serial == 0 ? 2 : 6; } }
      server {
        hold kv (cost(kv, u)) {
          observe admit = now; observe c = computed;
          run s (cost(s, 5));
          branch (serial == 0) { grow kv (cost(kv, 6)); run s (cost(s, 5)); }
        }
      }
    }"""
    # s0 (2) at 1, s1 (6) at 2; at 6 s0 grows by 6: 8 + 6 > 10, so s1, admitted last, is preempted,
    # requeued at the head, and admitted again when s0 ends at 11, its computed 0 (nothing advanced)
    rep, sim = run(text, arrivals=2)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [2.0, 11.0]}
    assert by_serial(sim, "c") == {0: [0.0], 1: [0.0, 0.0]}
    assert rep["pools"]["kv"]["preempted"] == 1


def test_growth_under_preempt_none_waits():
    text = """fn main() {
      pool kv { cap 10; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size u = serial == 0 ? 2 : 6; } }
      server {
        hold kv (cost(kv, u)) {
          run s (cost(s, 5));
          branch (serial == 0) { grow kv (cost(kv, 6)); observe grown = now; }
        }
      }
    }"""
    # s0's growth at 6 waits for s1 to end at 7
    rep, sim = run(text, arrivals=2)
    assert by_serial(sim, "grown") == {0: [7.0]}
    assert rep["pools"]["kv"]["preempted"] == 0


def test_a_preempted_hold_caches_its_position_and_runs_again_with_computed():
    text = """fn main() {
      pool kv { cap 10; preempt lifo; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size w1 = serial == 0 ? 4 : 1; } }
      server {
        hold kv (cost(kv, 1)) reserve (cost(kv, 4)) {
          observe admit = now; observe c = computed; observe hit = cached;
          run s (cost(s, w1)) growing kv;
          run s (cost(s, 4)) growing kv;
        } cache (cost(kv, 8));
      }
    }"""
    # s0: admitted at 1, grows to 4, runs to 5. s1: admitted at 2, runs 1 to 3 (position 1), grows to
    # 5 for its second run. At 5 s0 grows to 8: 4 + 5 + 4 > 10, so s1, admitted last, is preempted at
    # position 1, which it caches; it waits at the head (4 reserved: 8 + 4 > 10) until s0 ends at 9,
    # then runs again with computed 1 and consumes its cached 1
    rep, sim = run(text, arrivals=2)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [2.0, 9.0]}
    assert by_serial(sim, "c") == {0: [0.0], 1: [0.0, 1.0]}
    assert by_serial(sim, "hit") == {0: [0.0], 1: [0.0, 1.0]}
    assert rep["pools"]["kv"]["preempted"] == 1 and rep["sessions"]["stuck"] == 0


# ------------------------------------------------------------------ leases, legs, refusal


def test_lease_keeps_the_allocation_until_its_time():
    text = """fn main() {
      pool p { cap 1; }
      stage s : delay;
      workload { arrive renewal(1); }
      server { hold p (cost(p, 1)) { observe admit = now; run s (cost(s, 1)); } lease p (3); run s (cost(s, 10)); }
    }"""
    # s0 holds 1..2 and leases until 5 (its session lives on); s1 (at 2) is admitted at 5
    _, sim = run(text, arrivals=2)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [5.0]}


def test_release_gives_the_allocation_back_early():
    text = """fn main() {
      pool p { cap 1; }
      stage s : delay;
      workload { arrive renewal(1); }
      server { hold p (cost(p, 1)) { observe admit = now; run s (cost(s, 1)); release p; run s (cost(s, 5)); } }
    }"""
    _, sim = run(text, arrivals=2)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [2.0]}


def test_fork_and_join():
    text = """fn main() {
      stage s : delay;
      workload { arrive batch(1); }
      server {
        fork { run s (cost(s, 3)); observe leg = now; }
        fork { run s (cost(s, 5)); observe leg = now; }
        run s (cost(s, 1));
        observe before = now;
        join;
        observe after = now;
      }
    }"""
    rep, sim = run(text)
    assert by_serial(sim, "leg") == {0: [3.0, 5.0]}
    assert by_serial(sim, "before") == {0: [1.0]} and by_serial(sim, "after") == {0: [5.0]}
    assert rep["client"]["response"]["mean"] == 5.0


def test_server_end_refuses_the_request():
    text = """fn main() {
      stage s : delay;
      workload { arrive renewal(1); turn { Size big = serial == 1 ? 1 : 0; } }
      server { branch (big) { end; } run s (cost(s, 2)); }
    }"""
    # s1's request is refused: its session ends there, counted rejected, its turn not answered
    rep, _ = run(text, arrivals=3)
    assert (rep["sessions"]["completed"], rep["sessions"]["rejected"]) == (2, 1)
    assert rep["client"]["response"]["count"] == 2


def test_choose_takes_the_least_keys_then_the_smallest_index():
    text = """fn main() {
      stage q[3] : fifo;
      workload { arrive batch(4); }
      server { choose j in 3 by (queue(q[j])); observe pick = j; run q[j] (cost(q, 1)); }
    }"""
    _, sim = run(text)
    assert [v[0] for _, v in sorted(by_serial(sim, "pick").items())] == [0.0, 1.0, 2.0, 0.0]


# ------------------------------------------------------------------ streams


def test_a_session_turn_draws_the_same_marks_under_every_deployment():
    wl = """workload { arrive poisson(0.5); turn { Size n = ~exp(10); observe mark = n; } session { turn; turn; turn; } }"""
    fast = "fn main() { stage s : fifo; " + wl + " server { run s (cost(s, n / 100)); } }"
    slow = "fn main() { stage s : ps(0.2); pool p { cap 2; } " + wl + \
        " server { hold p (cost(p, 1)) { run s (cost(s, ~exp(1))); } } }"
    _, a = run(fast, arrivals=300)
    _, b = run(slow, arrivals=300)

    def marks(sim):
        ser = sim.obs["mark"]
        return {(s, k): v for (t, s, k), v in zip(ser.rows, ser.v)}
    ma, mb = marks(a), marks(b)
    assert len(ma) == 900 and ma == mb
    # and the arrival times differ in no way either: the arrival stream is the run's own
    _, c = run(fast, arrivals=300, seed=2)
    assert marks(c) != ma


def test_same_seed_same_report():
    text = "fn main() { stage s : ps(1); workload { arrive poisson(0.9); turn { Cost w = cost(s, ~h2(1, 3)); } } server { run s (w); } }"
    r1, _ = run(text, horizon=2000)
    r2, _ = run(text, horizon=2000)
    assert json.dumps(r1, sort_keys=True) == json.dumps(r2, sort_keys=True)


# ------------------------------------------------------------------ workloads and the run


def test_trace_replay(tmp_path):
    (tmp_path / "t.csv").write_text("session,turn,new,out,think\na,0,10,5,0\na,1,20,3,2\nb,0,7,1,0\n")
    (tmp_path / "t.sq").write_text("""fn main() {
      stage s : delay;
      workload { arrive renewal(100); trace "t.csv" ordered; session { turn; while (more) { turn; } } }
      server { observe got = new; run s (cost(s, out)); }
    }""")
    prog = api.load(str(tmp_path / "t.sq"))
    rep = api.run(prog, Settings(arrivals=2))
    sim = rep.pop("_sim")
    # session 0 replays a (turns of 10 then 20 tokens, the second after a think of 2), session 1 b
    assert by_serial(sim, "got") == {0: [10.0, 20.0], 1: [7.0]}
    assert sorted(sim.client["response"].v) == [1.0, 3.0, 5.0]


@pytest.mark.parametrize("csv,where", [
    ("session,turn,new\na,0,1\n", "1:1"),
    ("session,turn,new,out\na,0,x,1\n", "2:5"),
    ("session,turn,new,out\na,1,1,1\n", "2:3"),
    ("session,turn,new,out\na,0,1,1\nb,0,1,1\na,1,1,1\n", "4:1"),
])
def test_a_malformed_trace_names_file_line_column(tmp_path, csv, where):
    (tmp_path / "t.csv").write_text(csv)
    (tmp_path / "t.sq").write_text('fn main() { stage s : delay; workload { arrive renewal(1); trace "t.csv"; } '
                                   'server { run s (cost(s, 1)); } }')
    with pytest.raises(SerqError) as e:   # read as the program links (serq check sees it), not first at the run
        api.load(str(tmp_path / "t.sq"))
    assert f"t.csv:{where}:" in str(e.value.span) + ":" and e.value.code == "T001"


def test_arrivals_runs_exactly_n_and_drains():
    text = "fn main() { stage s : fifo; workload { arrive poisson(1); } server { run s (cost(s, 0.5)); } }"
    rep, _ = run(text, arrivals=50)
    assert rep["sessions"]["arrived"] == 50 and rep["sessions"]["completed"] == 50
    assert rep["sessions"]["live_at_end"] == 0 and rep["end"] > 0
    with pytest.raises(SerqError) as e:
        run(text, arrivals=50, horizon=1)
    assert e.value.code == "R032"
    with pytest.raises(SerqError) as e:
        run(text, arrivals=50, warmup=1e9)
    assert e.value.code == "R033"


# an engine that serves only decodes, where every request prefills: it never schedules a token
STALLS = """fn main() {
  device gpu { kv cap 100; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 8;
    schedule { advance running only (decoding); admit waiting only (decoding) while (running.preempted == 0); }
    execute (1);
  }
  pool kv on gpu { block 4; }
  pool reqs on llm { }
  workload { arrive %s; }
  server { hold reqs (cost(reqs, 1)), kv (cost(kv, 8)) { run llm prefill (cost(llm, 8)) growing kv; } }
}"""


def test_arrivals_without_a_horizon_that_cannot_drain_is_r032_not_a_traceback():
    # found by tools/fuzz.py: the message formatted the missing horizon (TypeError in fmt). The engine
    # serves only decodes and every request prefills, so the five sessions wait with nothing left to happen.
    prog = api.load_text(STALLS % "poisson(1)", "t.sq")
    with pytest.raises(SerqError) as e:
        api.run(prog, Settings(arrivals=5))
    assert e.value.code == "R032"
    assert str(e.value).endswith("did not drain (5 still live when nothing was left to happen)")


@pytest.mark.parametrize("body,code", [
    ("branch (serial + 0.5) { }", "R006"),
    ("run s (cost(s, serial - 5));", "R007"),
    ("run q[serial + 7] (cost(q, 1));", "R004"),
    ("set x = y;", "R001"),
    ("loop { run s (cost(s, serial * 0)); }", "R020"),
])
def test_run_time_errors_name_the_statement(body, code, tmp_path):
    f = tmp_path / "e.sq"
    f.write_text("fn main() {\n  stage s : delay; stage q[2] : fifo;\n  workload { arrive batch(1); }\n"
                 f"  server {{ set y0 = 1; {body} }}\n}}\n")
    try:
        prog = api.load(str(f))
    except SerqError as e:  # some are refused at link time already
        assert e.code.startswith("L")
        return
    with pytest.raises(SerqError) as e:
        api.run(prog, Settings())
    assert e.value.code == code
    assert e.value.span.file == str(f) and e.value.span.line == 4


def test_run_from_the_command_line(tmp_path):
    ex = os.path.join(HERE, "..", "examples", "single-turn", "ps.sq")
    r = subprocess.run([sys.executable, "-m", "serq.cli", "run", ex, "--horizon", "2000", "--json", "--dump",
                        str(tmp_path / "d"), "--set", "lambda=0.5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    for key in ("seed", "horizon", "warmup", "end", "sessions", "client", "observe", "gauges", "pools", "stages",
                "claims", "notes"):
        assert key in rep
    assert set(rep["client"]["response"]) == {"count", "mean", "std", "ci95", "p50", "p90", "p99", "min", "max"}
    assert set(rep["gauges"]["jobs"]) >= {"mean", "ci95", "min", "max"}
    assert (tmp_path / "d" / "gauge" / "jobs.csv").read_text().startswith("time,value\n")
    r = subprocess.run([sys.executable, "-m", "serq.cli", "run", ex], capture_output=True, text=True)
    assert r.returncode == 2 and "--horizon" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------ gauges, claims, notes


def test_gauge_time_average_by_hand():
    # the HOL run: p holds 10 on [1, 11), 6 on [11, 21), 5 on [21, 31); end 31, warm-up 0
    rep, _ = run((HOL % "").replace("stage s : delay;", "stage s : delay;\n  gauge pu = used(p);"), arrivals=3)
    g = rep["gauges"]["pu"]
    assert rep["end"] == 31.0
    assert g["mean"] == pytest.approx((10 * 10 + 6 * 10 + 5 * 10) / 31)
    assert (g["min"], g["max"]) == (0.0, 10.0)
    assert rep["pools"]["p"]["mean_used"] == pytest.approx(g["mean"]) and rep["pools"]["p"]["max_used"] == 10


def test_claims_at_end_and_given():
    text = """fn main() {
      stage s : delay;
      workload { arrive renewal(1); init { Size n = serial; } }
      server { run s (cost(s, 1)); observe w = n; }
      claim small: at end (largest(w) <= 4);
      claim total_ok: at end (total(w) == 10 && count(response) == 5 && prefix_total(w) == 20);
      claim scoped given (n < 3): at end (1);
    }"""
    rep, _ = run(text, arrivals=5)
    assert rep["claims"]["small"]["status"] == "held"
    assert rep["claims"]["total_ok"]["status"] == "held"
    assert rep["claims"]["scoped"] == {"status": "out_of_scope", "at": None, "session": 3}
    rep, _ = run(text.replace("<= 4", "<= 3"), arrivals=5)
    assert rep["claims"]["small"]["status"] == "failed" and rep["claims"]["small"]["at"] == rep["end"]
    rep, _ = run(text, horizon=3.5)  # sessions live at the end: not evaluated
    assert rep["claims"]["small"]["status"] == "not_evaluated"


def test_a_boolean_observation_never_true_is_noted():
    text = """fn main() { stage s : delay; workload { arrive renewal(1); }
      server { run s (cost(s, 1)); observe hit = serial > 1000; observe low = serial < 1; } }"""
    rep, _ = run(text, arrivals=45)
    assert any("observe hit" in n for n in rep["notes"])
    assert not any("observe low" in n for n in rep["notes"])


def test_growth_still_waiting_at_the_end_is_counted_and_a_stall_named():
    text = """fn main() {
      pool kv { cap 4; }
      stage s : delay;
      workload { arrive batch(2); }
      server { hold kv (cost(kv, 2)) { run s (cost(s, 1)); grow kv (cost(kv, 2)); run s (cost(s, 1)); } }
    }"""
    # both hold 2 of 4 and both wait to grow: every holder waits, so none will (growing_stalled)
    rep, _ = run(text, horizon=10)
    assert rep["growing_at_end"] == 2
    assert any("growing_stalled" in n and "kv" in n for n in rep["notes"])
    assert rep["sessions"]["live_at_end"] == 2


def test_a_head_asking_more_than_the_cap_at_the_end_is_named():
    text = """fn main() {
      pool kv { cap 10; }
      stage s : delay;
      workload { arrive renewal(1); }
      server { hold kv (cost(kv, 5 + used(kv) * 2)) { run s (cost(s, 100)); } }
    }"""
    # s0 takes 5; s1 then asks 5 + 10 = 15 > 10, judged at every try, and still does at the end
    rep, _ = run(text, horizon=50)
    assert rep["pools"]["kv"]["over_cap"] == 1
    assert any(n.startswith("over:") for n in rep["notes"])


def test_a_head_asking_more_than_the_cap_of_its_holds_second_pool_is_named():
    text = """fn main() {
      pool slots { cap 4; }
      pool kv { cap 10; }
      stage s : delay;
      workload { arrive renewal(1); }
      server { hold slots (cost(slots, 1)), kv (cost(kv, 5 + used(kv) * 2)) { run s (cost(s, 100)); } }
    }"""
    # the hold waits in the queue of slots, its first pool; its head asks kv for 15 > 10 (reference
    # report.md, `over_cap`: the queue's head asks for more than the cap): kv's, not slots'
    rep, _ = run(text, horizon=50)
    assert rep["pools"]["kv"]["over_cap"] == 1 and rep["pools"]["slots"]["over_cap"] == 0
    assert any(n.startswith("over: pool kv") for n in rep["notes"])


def test_evict_by_keys_and_drop():
    text = """fn main() {
      pool kv { cap 12; evict by (-size); }
      stage s : delay;
      workload { arrive renewal(1); turn { Size size = serial == 0 ? 2 : (serial == 1 ? 6 : 4); } }
      server {
        hold kv (cost(kv, size)) { run s (cost(s, 0.5)); } cache (cost(kv, size));
        branch (serial == 3) { drop kv; }
      }
    }"""
    # s0, s1, s2 cache 2, 6, 4: the pool is full; s3 (4) needs 4: evict by (-size) takes s1's 6, the
    # least key; s3 caches its 4, then drops it
    rep, sim = run(text.replace("arrive renewal(1); turn", "arrive renewal(1); turn"), arrivals=4)
    kv = sim.pools[0]
    owners = sorted((e.owner.serial, e.units) for e in kv.entries if e.alive and e.owner is not None)
    assert owners == [(0, 2.0), (2, 4.0)]
    assert rep["pools"]["kv"]["evicted"] == 1


def test_preempt_by_keys_with_requeue_tail():
    text = """fn main() {
      pool kv { cap 10; preempt by (big) requeue tail; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size big = serial == 1 ? 0 : 1; Size u = serial == 0 ? 4 : 3; } }
      server {
        hold kv (cost(kv, u)) {
          observe admit = now;
          run s (cost(s, 4));
          branch (serial == 0) { grow kv (cost(kv, 3)); run s (cost(s, 4)); }
        }
      }
    }"""
    # s0 (4) at 1, s1 (3) at 2, s2 (3) at 3: 10 used. At 5 s0 grows by 3: the victim is the least
    # key, s1 (big 0), though s2 was admitted last; s1, requeued at the tail, waits for room until s2
    # ends at 7 (7 used + 3)
    rep, sim = run(text, arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [2.0, 7.0], 2: [3.0]}
    assert rep["pools"]["kv"]["preempted"] == 1


def test_spill_writes_an_evicted_prefix_to_a_tier():
    text = """fn main() {
      pool kv { cap 8; spill host via link (1) when (1); }
      pool host { cap 100; }
      stage link : fifo;
      stage s : delay;
      workload { arrive renewal(10); }
      server { hold kv (cost(kv, 8)) { run s (cost(s, 1)); } cache (cost(kv, 8)); }
    }"""
    # s0 caches 8 at 11; s1's admission at 20 evicts it; the spill runs 1 on the link, then the
    # prefix is s0's in host at 21
    rep, sim = run(text, arrivals=2)
    host = [p for p in sim.pools if p.name == "host"][0]
    assert [(e.owner.serial, e.units) for e in host.entries if e.alive] == [(0, 8.0)]
    assert rep["stages"]["link"]["completed"] == 1


def test_what_a_leg_leases_passes_to_the_session():
    text = """fn main() {
      pool p { cap 1; }
      stage s : delay;
      workload { arrive renewal(1); }
      server {
        fork { hold p (cost(p, 1)) { run s (cost(s, 1)); } lease p (inf); }
        join;
        run s (cost(s, 2));
        release p;
        observe freed = now;
        run s (cost(s, 10));
      }
    }"""
    # s0's leg holds p from 1 to 2 and leases it; the session takes the lease over at the join and
    # releases it at 4, when s1's leg (waiting since 2) is admitted; s1 holds 4..5, runs 5..7, frees at 7
    rep, sim = run(text, arrivals=2)
    assert by_serial(sim, "freed") == {0: [4.0], 1: [7.0]}


def test_load_advances_the_position_that_is_cached():
    text = """fn main() {
      pool kv { cap 100; }
      stage s : delay;
      workload { arrive batch(1); session { turn; turn; } }
      server {
        hold kv (cost(kv, 50)) { observe hit = cached; load kv (cost(kv, 20)); run s (cost(s, 1)); } cache (cost(kv, 40));
      }
    }"""
    # turn 0 loads 20 of its 50: it computed 20, so min(40, 20) = 20 stays cached for turn 1
    _, sim = run(text)
    assert by_serial(sim, "hit") == {0: [0.0, 20.0]}


def test_a_hold_over_two_pools_waits_for_both():
    text = """fn main() {
      pool p { cap 2; } pool q { cap 2; }
      stage s : delay;
      workload { arrive renewal(1); turn { Size a = serial == 1 ? 2 : 1; } }
      server { hold p (cost(p, 1)), q (cost(q, a)) { observe admit = now; run s (cost(s, 5)); } }
    }"""
    # s0 takes p 1, q 1 at 1; s1 needs q 2: p has room, q does not, so it waits until 6; s2 (p 1, q 1)
    # queues behind it in p's queue (a hold on several pools waits in its first pool's)
    _, sim = run(text, arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [6.0], 2: [11.0]}


def test_queue_keys_read_waited():
    text = """fn main() {
      pool p { cap 1; queue by (-waited); }
      stage s : delay;
      workload { arrive renewal(1); }
      server { hold p (cost(p, 1)) { observe admit = now; run s (cost(s, 10)); } }
    }"""
    # the longest waiting first: at 11, s1 (waited 9) before s2 (waited 8); it is fifo here, by keys
    _, sim = run(text, arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [11.0], 2: [21.0]}
    _, sim = run(text.replace("-waited", "waited"), arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [21.0], 2: [11.0]}


def test_a_session_preempted_again_without_advancing_is_stuck():
    text = """fn main() {
      pool kv { cap 10; preempt by (victim); }
      stage s : delay;
      workload { arrive renewal(1); turn { Size victim = serial == 1 ? 0 : 1; Size u = serial == 1 ? 6 : 2; } }
      server {
        hold kv (cost(kv, u)) {
          observe admit = now;
          branch (serial == 0) { run s (cost(s, 5)); grow kv (cost(kv, 6)); run s (cost(s, 10)); }
          branch (serial == 1) { run s (cost(s, 5)); }
          branch (serial == 2) { run s (cost(s, 15)); grow kv (cost(kv, 3)); }
        }
      }
    }"""
    # s1 is the victim by its key: at 6 (s0 grows) at position 0, readmitted at 16 when s0 ends; at 18
    # (s2 grows) preempted again at position 0: stuck. It is admitted again at 18 when s2 ends.
    rep, sim = run(text, arrivals=3)
    assert by_serial(sim, "admit") == {0: [1.0], 1: [2.0, 16.0, 18.0], 2: [3.0]}
    assert rep["sessions"]["stuck"] == 1 and rep["pools"]["kv"]["preempted"] == 2


ENGINE_CLAIMS = """fn main() {
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 8;
    schedule { advance running; admit waiting while (running.preempted == 0); }
    execute (1);
  }
  pool kv on gpu { block 4; }
  pool reqs on llm { }
  workload { arrive renewal(1); turn { Size n = 6; } }
  server { hold reqs (cost(reqs, 1)), kv (cost(kv, n + 2)) { run llm prefill (cost(llm, n)) growing kv;
                                                            run llm decode (cost(llm, 2)) growing kv; } }
  claim budget_kept: every iteration of llm (tokens <= 8);
  claim conserving: every iteration of llm (demand <= 8 || tokens == 8);
  claim full: some iteration of llm (tokens == 8);
  claim never: some iteration of llm (tokens > 8);
  claim too_strict: every iteration of llm (tokens < 7);
}"""


def test_claims_over_iterations():
    # each request prefills 6 then decodes 2; one arrives per step from 1: the step at 1 is 6 tokens,
    # at 2 one decode and a prefill (7), from 3 on two decodes and a prefill (8)
    rep, _ = run(ENGINE_CLAIMS, arrivals=6)
    cl = rep["claims"]
    assert cl["budget_kept"]["status"] == "held" and cl["conserving"]["status"] == "held"
    assert cl["full"]["status"] == "witnessed" and cl["full"]["at"] == 3.0
    assert cl["never"]["status"] == "not_witnessed"
    assert cl["too_strict"]["status"] == "failed" and cl["too_strict"]["at"] == 2.0


EXCLUSIVE = """fn main() {
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 16;
    schedule { exclusive prefill; admit waiting while (running.preempted == 0); }
    execute (1);
  }
  pool kv on gpu { block 4; }
  pool reqs on llm { }
  workload { arrive renewal(1); }
  server {
    hold reqs (cost(reqs, 1)), kv (cost(kv, 12)) {
      run llm prefill (cost(llm, 10)) growing kv; observe pdone = now;
      run llm decode (cost(llm, 2)) growing kv; observe done = now;
    }
  }
}"""


def test_exclusive_prefill_runs_one_prefill_alone_or_decodes_only():
    # s0 prefills alone at 1 (10 of 16), decodes at 2; s1 arrives at 2 and its prefill displaces the
    # decode: s1 prefills at 2, s0's decode waits; at 3 both decode (s2 arrives at 3: its prefill
    # displaces them again), ...
    rep, sim = run(EXCLUSIVE, arrivals=3)
    assert by_serial(sim, "pdone") == {0: [2.0], 1: [3.0], 2: [4.0]}
    assert by_serial(sim, "done") == {0: [6.0], 1: [6.0], 2: [6.0]}


def test_an_engine_that_stalls_is_named():
    # only decodes are ever served, and the one request prefills: nothing is scheduled, ever
    rep, sim = run(STALLS % "batch(1)", horizon=10)
    assert any(n.startswith("idle: engine llm") for n in rep["notes"])
    assert sim.engines[0].iterations == 0 and rep["stages"]["llm"]["utilisation"] == 0.0


NO_TOKEN = """fn main() {
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap %s;
    granule 4;
    state tries = 0;
    request (p) { prefill (p) growing kv; observe done = now; }
    schedule { set tries = tries + 1; advance running; admit waiting while (running.preempted == 0) taking reqs (1), kv (1); }
    execute (1);
  }
  pool kv on gpu { block 1; }
  pool reqs on llm { queue fifo; }
  workload { arrive batch(1); turn { Size n = 10; } }
  server { llm (n); }
}"""


def test_a_try_that_schedules_no_token_is_no_iteration():
    # granule 4 under a budget of 3: the admitted prefill is passed over, so the try schedules no
    # token and preempts nothing; it is no iteration (*Engines*): no time passes, the engine is not
    # busy, its set is undone, and the request is named as the work it leaves unscheduled
    rep, sim = run(NO_TOKEN % 3)
    assert rep["end"] == 0.0
    assert sim.engines[0].iterations == 0
    assert rep["stages"]["llm"]["completed"] == 0
    assert sim.engines[0].registers["tries"] == 0
    assert rep["pools"]["reqs"]["admitted"] == 1  # the admission stands
    assert rep["sessions"]["live_at_end"] == 1
    assert "idle: engine llm ends the run with work it does not schedule: 1 running " \
           "(session 0 prefill with 10 tokens left)" in rep["notes"]


def test_the_same_engine_with_room_for_a_granule_runs_its_iterations():
    # a budget of 4 schedules 4, 4, then the remainder 2 (short of its remainder a multiple of g):
    # three iterations of execute (1), the last ending at 3
    rep, sim = run(NO_TOKEN % 4)
    assert sim.engines[0].iterations == 3
    assert by_serial(sim, "done") == {0: [3.0]}
    assert sim.engines[0].registers["tries"] == 3
    assert not any(n.startswith("idle:") for n in rep["notes"])


def test_engine_family_on_a_device_family_runs_member_for_member():
    text = """fn main() {
      device gpu[2] { kv cap 64; }
      engine e[2] on gpu { reqs cap 2; tokens cap 8; schedule { advance running; admit waiting while (running.preempted == 0); } execute (1); }
      pool kv on gpu { block 4; preempt lifo; }
      pool reqs on e { }
      workload { arrive renewal(1); turn { Size i = serial % 2; } }
      server { hold reqs[i] (cost(reqs, 1)), kv[i] (cost(kv, 8)) { run e[i] prefill (cost(e, 8)) growing kv[i]; observe done = now; } }
    }"""
    # requests alternate between the two members; each prefills 8 in the step it arrives in
    rep, sim = run(text, arrivals=4)
    assert by_serial(sim, "done") == {0: [2.0], 1: [3.0], 2: [4.0], 3: [5.0]}
    assert rep["stages"]["e[0]"]["completed"] == 2 and rep["stages"]["e[1]"]["completed"] == 2
    assert rep["pools"]["kv[1]"]["admitted"] == 2


def test_an_engines_memory_preempts_lifo_by_default():
    text = EXCLUSIVE.replace("exclusive prefill; admit waiting while (running.preempted == 0);",
                             "advance running; admit waiting while (running.preempted == 0);")
    text = text.replace("device gpu { kv cap 1000; }", "device gpu { kv cap 24; }")
    text = text.replace("kv (cost(kv, 12))", "kv (cost(kv, 8))").replace("cost(llm, 2)", "cost(llm, 8)")
    # two requests fill the 24 (12 each after their prefills); the first's decode needs a block more:
    # the one admitted last is preempted
    prog = api.load_text(text, "t.sq")
    kv = [p for p in prog.pools if p.name == "kv"][0]
    assert kv.preempt.k == "by" and kv.preempt.keys[0].k == "un"   # preempt by (-admission)
    rep = api.run(prog, Settings(arrivals=3))
    assert rep["pools"]["kv"]["preempted"] > 0


def test_a_static_reserve_above_the_cap_is_rejected_though_the_units_read_the_state():
    # each of the units and the reserve that reads only attributes and numbers is judged as the hold
    # joins (*Pools*): the units read budget_left, the reserve does not, and it can never fit
    text = """fn main() {
      device gpu { kv cap 64; }
      engine llm on gpu {
        reqs cap 4;
        tokens cap 16;
        request (p) { prefill (p) growing kv; observe done = now; }
        schedule { advance running; admit waiting while (running.preempted == 0)
                     taking reqs (1), kv (min(p, budget_left(llm))) reserve (p); }
        execute (1);
      }
      pool kv on gpu { block 4; }
      pool reqs on llm { queue fifo; }
      workload { arrive renewal(1); turn { Size n = serial == 0 ? 65 : 32; } }
      server { llm (n); }
    }"""
    rep, sim = run(text, arrivals=3)
    assert rep["sessions"]["rejected"] == 1 and rep["pools"]["kv"]["rejected"] == 1
    # the other two each prefill 32 tokens at 16 an iteration, alone: 1 + 2 and 2 + 2
    assert by_serial(sim, "done") == {1: [4.0], 2: [6.0]}


def test_an_only_reads_the_residents_as_they_stand():
    # *The iteration as a program*: a key and an only read running.* as the running requests stand at
    # that read, counting one the iteration admitted. At an empty engine the reference's prefill-first
    # predicate reads count 1, decoding 0 for the prompt just admitted, so it is served: a prefill
    # iteration ending at 1, then one decode ending at 2; read as the iteration started (count 0), it
    # would be excluded forever
    rep, sim = run("""fn main() {
      device gpu { }
      engine llm on gpu {
        reqs cap 4;
        tokens cap 16;
        request (p, o) { prefill (p); decode (o - 1); observe done = now; }
        schedule {
          advance running only (running.decoding < running.count ? !decoding : decoding);
          admit waiting only (running.decoding < running.count ? !decoding : decoding)
            while (running.preempted == 0) taking reqs (1);
        }
        execute (1);
      }
      pool reqs on llm { queue fifo; }
      workload { arrive batch(1); turn { Size p = 4; Size o = 2; } }
      server { llm (p, o); }
    }""")
    assert by_serial(sim, "done") == {0: [2.0]} and sim.engines[0].iterations == 2
