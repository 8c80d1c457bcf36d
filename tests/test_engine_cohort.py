"""The cohort (serq/interp/engine.py, Iterations._co_*): the running requests that decode plainly,
advanced as one with their values kept lazily (issue 49), gives the report, the client's samples
and the iterations that serving every request one at a time gives (Iterations.cohort off), through
preemption, budgets that bind, chunked prefill, content caching, --slo itl, claims and --dump."""
from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from serq import api
from serq.interp import engine
from serq.interp.engine import Iterations
from serq.interp.sim import Sim
from serq.ir.model import Settings

# the general path's iterations, which these tests observe (conftest.py)
pytestmark = pytest.mark.usefixtures("general_path")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SINGLE = os.path.join(ROOT, "examples", "single-turn", "vllm_single_turn.sq")
MULTI = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")


@contextlib.contextmanager
def _cohort(on, monkeypatch, floor=2):
    engaged = [0]
    real = Iterations._co_engage

    def count(self, eng, budget):
        ok = real(self, eng, budget)
        engaged[0] += ok
        return ok
    with monkeypatch.context() as m:
        m.setattr(Iterations, "cohort", on)
        m.setattr(Iterations, "_co_engage", count)
        m.setattr(engine, "CO_MIN", floor)  # formed from two running: its joins and write-outs read often
        yield engaged


def _run(monkeypatch, on, prog, arrivals, ff=True, slo=None, floor=2):
    with _cohort(on, monkeypatch, floor) as engaged:
        sim = Sim(prog, Settings(seed=3, arrivals=arrivals))
        sim.fast_forward = ff
        if slo:
            sim.set_slo(slo)
        rep = sim.run()
    rep.pop("_sim", None)
    eng = sim.engines
    out = (json.dumps(rep, sort_keys=True), [e.iterations for e in eng], [e.served_total for e in eng],
           list(sim.c_itl.v), dict(getattr(sim, "claim_state", {})))
    return out, engaged[0]


def _alike(monkeypatch, prog, arrivals, ff=True, slo=None, engages=True, floor=2):
    on, n = _run(monkeypatch, True, prog, arrivals, ff, slo, floor)
    off, n_off = _run(monkeypatch, False, prog, arrivals, ff, slo, floor)
    assert n_off == 0
    assert on == off
    if engages:
        assert n > 0, "the cohort never served an iteration"
    return n


# inputs of examples/single-turn/vllm_single_turn.sq: KV short enough to preempt, a tokens cap
# below the running count, chunked prefill, prefix caching off and on
SINGLE_CASES = {
    "plain": {},
    "preempting": {"blocks": 220, "rate": 12},
    "budget binds": {"B": 24, "max_seqs": 64, "rate": 8},
    "fractional budget": {"B": 40.5, "rate": 8},
    "chunked": {"chunk_cap": 64, "rate": 10},
    "no caching": {"caching": 0, "rate": 10},
    "small blocks": {"bs": 1, "blocks": 40000, "rate": 10},
}


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "one at a time"])
@pytest.mark.parametrize("case", list(SINGLE_CASES), ids=list(SINGLE_CASES))
def test_single_turn_alike(monkeypatch, case, ff):
    prog = api.load(SINGLE, SINGLE_CASES[case])
    # a budget not a whole number is served one at a time (its subtractions round)
    _alike(monkeypatch, prog, 400, ff, engages=case != "fractional budget")


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "one at a time"])
def test_multi_turn_content_cache_alike(monkeypatch, ff):
    # its holds publish blocks to the content cache: none joins the cohort
    _alike(monkeypatch, api.load(MULTI), 120, ff, engages=False)


def test_slo_alike(monkeypatch):
    prog = api.load(SINGLE, {"rate": 10})
    _alike(monkeypatch, prog, 300, slo={"ttft": 0.05, "tpot": 0.01})
    # --slo itl reads every turn's longest gap: one at a time
    _alike(monkeypatch, prog, 300, slo={"itl": 0.02}, engages=False)


DECODE = """fn main() {{
  device gpu {{ kv cap {kv}; }}
  engine llm on gpu {{
    reqs cap {seats};
    tokens cap {cap};
    request (p, o) {{
      prefill (p) growing kv;
      decode (o - 1) growing kv;
    }}
    schedule {{
      {serve}
      admit waiting while (running.preempted == 0) taking reqs (1), kv (p + 1);
    }}
    execute (0.003 + 0.0000001 * (batch.kv_decode + batch.kv_prefill) + 0.00004 * batch.tokens
             + 0.000001 * running.count + 0.0000001 * batch.attention);
  }}
  pool kv on gpu {{ block {bs}; evict lru; preempt lifo; }}
  pool reqs on llm {{ queue fifo; }}
  workload {{
    arrive {arrive};
    hidden o;
    turn {{ Size p = {prompt}; Size o = {out}; }}
  }}
  server {{ llm (p, o); }}
{claims}}}
"""

DECODES = {
    "batch": dict(kv=16 * 40 * 300, seats=32, cap=2048, bs=16, arrive="batch(40)", prompt=16, out=300,
                  serve="advance running;", claims=""),
    "tight kv": dict(kv=16 * 120, seats=64, cap=2048, bs=16, arrive="poisson(30)", prompt="8 + floor(~exp(40))",
                     out="1 + floor(~exp(60))", serve="advance running;", claims=""),
    "budget": dict(kv=16 * 4000, seats=64, cap=20, bs=8, arrive="poisson(40)", prompt=12, out="1 + floor(~exp(80))",
                   serve="advance running;", claims=""),
    "odd blocks": dict(kv=7 * 5000, seats=48, cap=512, bs=7, arrive="poisson(30)", prompt="3 + floor(~exp(30))",
                       out="2 + floor(~exp(50))", serve="advance running;", claims=""),
    "keyed": dict(kv=16 * 4000, seats=48, cap=512, bs=16, arrive="poisson(30)", prompt=20,
                  out="1 + floor(~exp(50))", serve="advance running by (remaining);", claims=""),
    "guarded": dict(kv=16 * 4000, seats=48, cap=512, bs=16, arrive="poisson(30)", prompt=20,
                    out="1 + floor(~exp(50))",
                    serve="branch (running.count > 3) { advance running; } else { advance running; }", claims=""),
    "only": dict(kv=16 * 4000, seats=48, cap=512, bs=16, arrive="poisson(30)", prompt=20,
                 out="1 + floor(~exp(50))",
                 serve="branch (running.count > 3) { advance running; } else { advance running only (remaining > 0); }",
                 claims=""),
    "claims": dict(kv=16 * 4000, seats=48, cap=512, bs=16, arrive="poisson(30)", prompt=20, out="1 + floor(~exp(50))",
                   serve="advance running;",
                   claims="  claim small: every iteration of llm (tokens <= 600);\n"
                          "  claim some: some iteration of llm (decoders >= 5);\n"),
}


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "one at a time"])
@pytest.mark.parametrize("case", list(DECODES), ids=list(DECODES))
def test_generated_alike(monkeypatch, case, ff):
    prog = api.load_text(DECODE.format(**DECODES[case]), f"{case}.sq")
    arrivals = None if case == "batch" else 200
    _alike(monkeypatch, prog, arrivals, ff, engages=case not in ("keyed", "only", "claims"))


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "one at a time"])
def test_default_floor_alike(monkeypatch, ff):
    """As the engine forms it (CO_MIN running at least): 40 decoding at once."""
    prog = api.load_text(DECODE.format(**DECODES["batch"]), "batch.sq")
    n = _alike(monkeypatch, prog, None, ff, floor=engine.CO_MIN)
    if not ff:
        assert n >= 250  # nearly every iteration served the cohort


def _cli(monkeypatch, on, argv, tmp):
    from serq.cli import main
    with _cohort(on, monkeypatch):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["run", *argv, "--json", "--dump", tmp])
    assert rc in (0, None)
    js = json.loads(buf.getvalue())
    files = {}
    for where, _, names in os.walk(tmp):
        for name in names:
            with open(os.path.join(where, name), "rb") as fh:
                files[os.path.relpath(os.path.join(where, name), tmp)] = fh.read()
    assert files
    return js, files


def test_dump_alike(monkeypatch, tmp_path):
    argv = [SINGLE, "--arrivals", "200", "--quiet", "--set", "rate=10", "--set", "blocks=300"]
    a = _cli(monkeypatch, True, argv, str(tmp_path / "on"))
    b = _cli(monkeypatch, False, argv, str(tmp_path / "off"))
    for js in (a[0], b[0]):
        js["program"].pop("sha256", None)
    assert a == b


# growth-heavy: blocks of 1 (a growth a member an iteration) and 16, pools near full (the growths
# that find no room go one at a time), gauges reading used(kv) and the holders at every instant
GAUGES = "  gauge kv_used = used(kv);\n  gauge seqs = holders(reqs);\n  gauge kv_free = free(kv);\n"
GROWTH = {
    "blocks of 1": dict(kv=6000, seats=64, cap=2048, bs=1, arrive="poisson(30)", prompt="8 + floor(~exp(40))",
                        out="1 + floor(~exp(60))", serve="advance running;", claims=GAUGES),
    "blocks of 1 near full": dict(kv=600, seats=64, cap=2048, bs=1, arrive="poisson(30)",
                                  prompt="8 + floor(~exp(40))", out="1 + floor(~exp(60))",
                                  serve="advance running;", claims=GAUGES),
    "blocks of 16 near full": dict(kv=16 * 60, seats=64, cap=2048, bs=16, arrive="poisson(30)",
                                   prompt="8 + floor(~exp(40))", out="1 + floor(~exp(60))",
                                   serve="advance running;", claims=GAUGES),
    "blocks of 16 batch": dict(kv=16 * 40 * 300, seats=64, cap=4096, bs=16, arrive="batch(60)",
                               prompt="3 + floor(~exp(20))", out=300, serve="advance running;",
                               claims=GAUGES),
    "blocks of 5 odd prompts": dict(kv=5 * 3000, seats=64, cap=2048, bs=5, arrive="poisson(40)",
                                    prompt="1 + floor(~exp(13))", out="2 + floor(~exp(70))",
                                    serve="advance running;", claims=GAUGES),
    "claims read used": dict(kv=16 * 200, seats=64, cap=2048, bs=16, arrive="poisson(30)",
                             prompt="8 + floor(~exp(40))", out="1 + floor(~exp(60))", serve="advance running;",
                             claims=GAUGES
                             + "  claim mem: every iteration of llm (used(kv) <= 3200);\n"),
}


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "one at a time"])
@pytest.mark.parametrize("case", list(GROWTH), ids=list(GROWTH))
def test_growth_alike(monkeypatch, case, ff):
    """The due growths of an iteration at once (_co_grow_all) or one at a time where a pool is
    short, the cohort kept through fast-forwards (_co_ahead): the same report, gauges and samples."""
    prog = api.load_text(DECODE.format(**GROWTH[case]), f"{case}.sq")
    paths = {"grouped": 0, "one at a time": 0}
    real = Iterations._co_grow_all

    def count(self, eng, ep, due, gq):
        ok = real(self, eng, ep, due, gq)
        if ok and gq and any(d for _, d in gq.values()):
            paths["grouped"] += 1
        elif not ok:
            paths["one at a time"] += 1
        return ok
    monkeypatch.setattr(Iterations, "_co_grow_all", count)
    ahead = Iterations._co_ahead

    def kept(self, eng, extra):  # a fast-forward that keeps the cohort, its groups moved past the run
        ok = ahead(self, eng, extra)
        paths["kept"] = paths.get("kept", 0) + ok
        return ok
    monkeypatch.setattr(Iterations, "_co_ahead", kept)
    arrivals = None if "batch" in case else 300
    # a batch whose decodes start together is one fast-forward to its end: no cohort forms
    engages = case != "claims read used" and not (ff and "batch" in case)
    _alike(monkeypatch, prog, arrivals, ff, engages=engages)
    if engages:
        assert paths["grouped"] > 0
        if ff:
            assert paths.get("kept", 0) > 0
    if "near full" in case:
        assert paths["one at a time"] > 0


def test_dump_growth_alike(monkeypatch, tmp_path):
    """--dump reads the gauges (used(kv)) and the queues at every instant."""
    path = tmp_path / "g.sq"
    path.write_text(DECODE.format(**GROWTH["blocks of 16 near full"]))
    argv = [str(path), "--arrivals", "200", "--quiet"]
    a = _cli(monkeypatch, True, argv, str(tmp_path / "on"))
    b = _cli(monkeypatch, False, argv, str(tmp_path / "off"))
    for js in (a[0], b[0]):
        js["program"].pop("sha256", None)
    assert a == b


@pytest.mark.parametrize("bs", [1, 16])
@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "one at a time"])
def test_growth_evicting_alike(monkeypatch, ff, bs):
    """A pool whose cache gives the room: the group's growths each evict in turn (_co_grow_all; the
    common eviction in line, any other through make_room): counted by the pools' evictions."""
    evicted = [0]
    real = Iterations._co_grow_all

    def grow_all(self, eng, ep, due, gq):
        before = sum(m.evicted for m in self.pools)
        try:
            return real(self, eng, ep, due, gq)
        finally:
            evicted[0] += sum(m.evicted for m in self.pools) - before
    monkeypatch.setattr(Iterations, "_co_grow_all", grow_all)
    _alike(monkeypatch, api.load(SINGLE, {"bs": bs, "blocks": 40000 // bs, "rate": 10 if bs == 1 else 40}), 400, ff)
    assert evicted[0] > 0


@pytest.mark.parametrize("case", ["plain", "preempting", "budget binds", "chunked", "small blocks"])
def test_walk_from_calendars_alike(monkeypatch, case):
    """_steady reads the cohort from its calendars (Iterations._co_walk) as the walk over its members
    written out reads them: the same report, iterations and samples, and every fast-forward the same."""
    prog = api.load(SINGLE, dict(SINGLE_CASES[case], rate=max(SINGLE_CASES[case].get("rate", 12), 12)))
    calls = []
    real = Iterations._co_walk

    def walked(self, eng):
        out = real(self, eng)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(Iterations, "_co_walk", walked)
    runs = []
    real_steady = Iterations._steady
    for on in (True, False):
        monkeypatch.setattr(Iterations, "co_walk", on)
        ffs = []

        def steady(self, eng, spec, end, ffs=ffs):
            out = real_steady(self, eng, spec, end)
            ffs.append((eng.repeat, [t for t, _ in eng.grows]))
            return out
        monkeypatch.setattr(Iterations, "_steady", steady)
        runs.append((_run(monkeypatch, True, prog, 400)[0], ffs))
    assert runs[0] == runs[1]
    assert any(calls), "the walk never read the calendars"
    assert sum(r > 1 for r, _ in runs[0][1]) > 10


@pytest.mark.parametrize("case", ["batch", "tight kv", "odd blocks", "budget"])
def test_group_units_kept_by_epochs(monkeypatch, case):
    """A cohort group's members' units are kept by the group's epochs, not written at each growth
    (Engine cohort, _co_units): at every instant the pool's used is the sum of its holders' units as
    they stand (Iterations.cohort_units), and whole blocks; the report is the one without cohort."""
    prog = api.load_text(DECODE.format(**DECODES[case]), f"{case}.sq")
    arrivals = None if case == "batch" else 200
    seen = [0]

    class Checked(Sim):
        def settle(self):
            super().settle()
            units = self.cohort_units()
            seen[0] += bool(units)
            for m in self.pools:
                held = sum(units.get(id(a), a.units) for a in m.allocs)
                assert held == m.used, (m.label, held, m.used)
                assert all(units.get(id(a), a.units) % m.block == 0 for a in m.allocs if m.block)

    with _cohort(True, monkeypatch, 2):
        sim = Checked(prog, Settings(seed=3, arrivals=arrivals))
        rep = sim.run()
    assert seen[0] > 10, "no group member's units were kept by epochs"
    rep.pop("_sim", None)
    off, _ = _run(monkeypatch, False, prog, arrivals)
    assert json.dumps(rep, sort_keys=True) == off[0]


@pytest.mark.campaign
def test_every_example_alike_with_the_cohort_formed_from_two(monkeypatch):
    """Every example at its recorded settings (tools/golden_reports.py), the cohort formed from two
    running: the same JSON report with the cohort on (its walk from its calendars), off, and on with
    the walk over its members written out."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import golden_reports as G
    monkeypatch.setattr(engine, "CO_MIN", 2)
    differ = []
    for case, argv in G.cases():
        outs = []
        for on, walk in ((True, True), (False, True), (True, False)):
            monkeypatch.setattr(Iterations, "cohort", on)
            monkeypatch.setattr(Iterations, "co_walk", walk)
            buf = io.StringIO()
            from serq.cli import main
            cwd = os.getcwd()
            os.chdir(ROOT)
            try:
                with contextlib.redirect_stdout(buf):
                    rc = main(["run"] + argv + ["--json"])
            finally:
                os.chdir(cwd)
            assert rc in (0, None), case
            js = json.loads(buf.getvalue())
            js["program"].pop("sha256", None)
            outs.append(js)
        if not outs[0] == outs[1] == outs[2]:
            differ.append(case)
    assert not differ
