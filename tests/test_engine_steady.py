"""The fast-forward of steady decoding (serq/interp/engine.py, _steady) reads the execute expression
as generated source, with what does not change between the iterations read once and min and max
written out: for execute expressions of every shape it gives the report that reading the
expression as compiled gives, and the one that running the iterations one at a time gives."""
from __future__ import annotations

import json
import os

import pytest

from serq import api
from serq.interp.sim import Sim
from serq.ir.model import Settings

# the general path's iterations, which these tests observe (conftest.py)
pytestmark = pytest.mark.usefixtures("general_path")

EX = os.path.join(os.path.dirname(__file__), "..", "examples", "multi-turn", "vllm.sq")
ORIG = "execute (c0 + max(hbm(batch.kv_decode + batch.kv_prefill), compute(batch.tokens)));"
EXECUTES = [
    ORIG,
    # a branch on a changing value; min on one side; the attention sum
    "execute (c0 + (batch.kv_decode > 2000 ? max(hbm(batch.kv_decode), compute(batch.tokens)) "
    ": min(hbm(batch.attention / 64), 0.02)));",
    # && (its right side read only when the left holds), values that do not change
    "execute (c0 + max(hbm(batch.kv_decode), compute(batch.tokens)) "
    "+ (running.count > 1 && batch.decoding > 1 ? 0.0001 : 0));",
    # max and min whose sides change, nested in arithmetic
    "execute (max(c0, 0.004 - batch.kv_decode * 0.0000001) + min(omega, beta * batch.attention));",
]


def _report(text, mode):
    sim = Sim(api.load_text(text, "steady.sq"), Settings(arrivals=150))
    sim.set_slo({"itl": 0.0045})  # about the median of the turns' longest gap: the goodput reads every turn's
    if mode == "one at a time":
        sim.fast_forward = False
    elif mode == "as compiled":
        for spec in sim.engine_specs.values():
            spec["steady_cost"] = (None, spec["steady_cost"][1])
    rep = sim.run()
    rep.pop("_sim", None)
    # the client's ITL samples in order: a fast-forwarded run's gaps are its iterations' ends apart
    return json.dumps(rep, sort_keys=True), sim.engines[0].iterations, sim.engines[0].served_total, list(sim.c_itl.v)


@pytest.mark.parametrize("execute", EXECUTES)
def test_steady_source_gives_the_same_report(execute):
    src = open(EX).read()
    assert ORIG in src
    text = src.replace(ORIG, execute)
    fast = _report(text, "as source")
    assert fast[1] > 10000  # steady runs were fast-forwarded
    assert fast == _report(text, "as compiled")
    assert fast == _report(text, "one at a time")


def test_steady_source_reads_the_changing_values_as_locals():
    """The generated loop adds to the one value vLLM's execute reads (batch.kv_decode) and gives
    back the others as they came; the same costs and ends as the expression as compiled."""
    sim = Sim(api.load(EX), Settings(arrivals=5))
    run, stored = sim.engine_specs["vllm"]["steady_cost"]
    assert run is not None and run.named == ("_bk",)
    eng = sim.engines[0]
    sim.cur_engine = eng
    eng.batch = {"Ndec": 2.0, "Kvb": 100.0, "Kvp": 0.0}
    eng.vars.update(Ntok=2.0, Kvb=100.0, Attn=300.0)
    for nxt, stops in ((1.0, False), (0.01, True)):
        a = run(sim.machine, eng, 100.0, 100.0, 300.0, 2.0, 0.0, nxt, 50)
        b = stored(sim.machine, eng, 100.0, 100.0, 300.0, 2.0, 0.0, nxt, 50)
        assert a[:3] == b[:3] and a[5] == b[5] == stops
        adds = a[0] + stops  # stopped before an iteration whose values it had added
        assert a[3:5] == (100.0, 300.0) and b[3:5] == (100.0 + 2 * adds, 300.0 + 2 * adds)


def test_a_value_the_steady_source_cannot_read_is_the_diagnostic_of_one_iteration_at_a_time():
    """execute reads an unset value only once batch.kv_decode passes 6000, inside a steady run: the
    source misses it, the run is read again as compiled, and the diagnostic is the one running
    the iterations one at a time gives, at the same instant."""
    from serq.interp.compile import RunError
    from serq.interp.engine import _Miss
    from serq.ir import model as I
    prog = api.load(EX)
    i, st = next((i, s) for i, s in enumerate(prog.stages) if s.kind.k == "step")
    cost = I.If(c=I.Bin(op=">", l=I.StepVar(name="Kvb", batch=True), r=I.Num(v=6000.0)),
                a=I.Ctx(name="waited"), b=st.kind.cost)
    stages = list(prog.stages)
    stages[i] = st.model_copy(update={"kind": st.kind.model_copy(update={"cost": cost})})
    prog = prog.model_copy(update={"stages": stages})
    out = []
    for ff in (True, False):
        sim = Sim(prog, Settings(arrivals=300))
        sim.fast_forward = ff
        with pytest.raises(RunError) as err:
            sim.run()
        out.append((str(err.value), sim.now))
        if ff:
            run, _ = sim.engine_specs["vllm"]["steady_cost"]
            sim.cur_engine = eng = sim.engines[0]
            with pytest.raises(_Miss):
                run(sim.machine, eng, 6000.0, 0.0, 0.0, 1.0, 0.0, 1e9, 10)
    assert out[0] == out[1] and "`waited` has no value here" in out[0][0]


def test_holders_follow_a_lease_a_leg_passes_to_its_session():
    """holders() is kept until a pool's holders change; a leg that ends leasing passes its lease to
    its session, which then holds both allocations: one holder, not two."""
    text = """fn main() {
      pool p { cap 4; }
      stage s : delay;
      workload { arrive batch(1); }
      server {
        hold p (cost(p, 1)) {
          fork { hold p (cost(p, 1)) { run s (cost(s, 1)); } lease p (10); }
          run s (cost(s, 3));
          observe h = holders(p);
          join;
        }
      }
      gauge g = holders(p);
    }"""
    sim = Sim(api.load_text(text, "lease.sq"), Settings(horizon=20))
    rep = sim.run()
    # 0..1 the session and its leg (2), 1..3 the session with the leg's lease (1), then the lease
    # alone until 11
    assert list(sim.obs["h"].v) == [1.0]
    assert rep["gauges"]["g"]["max"] == 2.0


@pytest.mark.parametrize("x, n, k", [(100.0, 3.0, 1000), (0.5, 2.0, 7), (2.0 ** 53 - 4, 1.0, 10), (1e300, 1.0, 3),
                                     (float("inf"), 2.0, 4), (7.0, 0.1, 9), (12.0, 5.0, 0)])
def test_adv_adds_as_one_addition_at_a_time(x, n, k):
    from serq.interp.engine import _adv
    y = x
    for _ in range(k):
        y += n
    assert _adv(x, n, k) == y or (y != y and _adv(x, n, k) != _adv(x, n, k))


def test_a_fast_forward_from_a_turns_first_token_to_a_runs_last_changes_nothing():
    """A steady run may begin with the iteration that commits a turn's first token: its end is
    recorded (the token's time, a change point of the engine's busy time) and applied when the run
    ends. It may end with the iteration that ends a run: its start is a change point of the busy
    time. The ttft samples, the first of them past the warm-up (which their times decide) and the
    report are those of one iteration at a time."""
    out = []
    for ff in (True, False):
        sim = Sim(api.load(EX), Settings(arrivals=200, warmup=300.0))
        sim.fast_forward = ff
        began, tails = [], []
        steady = sim._steady

        def counted(eng, spec, end, steady=steady, began=began, tails=tails):
            had = eng.batch_reqs and any(r.sess.turn_rec is not None and r.sess.turn_rec.first is None
                                         for r in eng.batch_reqs)
            end1 = steady(eng, spec, end)
            began.append(bool(had and end1 != end))
            tails.append(eng.tail_start is not None)
            return end1
        sim._steady = counted
        rep = sim.run()
        rep.pop("_sim", None)
        ttft = sim.client["ttft"]
        out.append((json.dumps(rep, sort_keys=True), list(ttft.v), ttft.warm, sum(began), sum(tails)))
    # fast-forwards that began at a first token, that ended with a run's last iteration
    assert out[0][3] > 100 and out[0][4] > 100 and out[1][3:] == (0, 0)
    assert out[0][2] > 0 and out[0][:3] == out[1][:3]


def test_gauges_a_growth_cannot_change_are_not_read_at_its_instants():
    """_grow_steady reads at each growth's instant only the gauges that may change there (sim.py,
    _growth_reads): with gauges of every observable a gauge reads, the fast-forward's report is the one running
    the iterations one at a time gives, and only those reading used, free, work or budget_left,
    or a member by an index, are read again."""
    src = open(EX).read()
    extra = """
  gauge g_free = free(kv);
  gauge g_mix = holders(reqs) + used(kv) / 1000;
  gauge g_hold = holders(kv);
  gauge g_queued = queued(reqs) + queued(kv);
  gauge g_queue = queue(vllm);
  gauge g_busy = busy(vllm) * 2 - 1;
  gauge g_block = max(blocksize(kv), 1) > 8 ? 1 : 0;
}"""
    text = src.rstrip().rstrip("}") + extra
    fast = _report(text, "as source")
    assert fast[1] > 10000
    assert fast == _report(text, "one at a time")
    sim = Sim(api.load_text(text, "steady.sq"), Settings(arrivals=5))
    names = [n for (n, f, avg) in sim.gauges if (f, avg) in sim.growth_gauges]
    assert names == ["kv_used", "g_free", "g_mix"]


def _claims(text, ff, arrivals=150):
    sim = Sim(api.load_text(text, "steady.sq"), Settings(arrivals=arrivals))
    sim.fast_forward = ff
    runs = []
    steady_run = sim._steady_run

    def counted(*a, **k):
        out = steady_run(*a, **k)
        runs.append(out[0])
        return out
    sim._steady_run = counted
    rep = sim.run()
    rep.pop("_sim", None)
    # where growths are the fast-forward's, an engine's utilisation may differ in its last bits
    # (tests/test_workloads.py, test_fast_forward_through_growth_and_eviction_changes_nothing_but_rounding)
    util = {n: round(st.pop("utilisation"), 12) for n, st in rep["stages"].items()}
    return json.dumps(rep, sort_keys=True), dict(sim.claim_state), sum(1 for r in runs if r), util


@pytest.mark.parametrize("plain", [False, True])
def test_claims_over_iterations_keep_the_fast_forward(plain):
    """A claim over iterations is read as each iteration starts (*Claims*). One that reads only what
    a steady run leaves unchanged (the batch's tokens, the residents, the queues, the holders) reads
    at each of its iterations what it read at its first, and one that reads a pool's used or free is
    read again at each iteration that grows a hold: the fast-forward stays, and every claim's status
    and time (a failure, a witness inside a steady run) are those of one iteration at a time. A
    claim that reads the clock runs the iterations one at a time. On a plain pool (no cache), the
    growths are the fast-forward's own (_steady_run's crossings)."""
    src = open(EX).read()
    if plain:
        src = src.replace("pool kv on gpu { block bs; evict lru; preempt lifo; }",
                          "pool kv on gpu { block bs; preempt lifo; }")
        src = src.replace("cache (prompt + output);", "cache (0);")
    claims = """
  claim budget: every iteration of vllm (tokens <= B && prefilled <= tokens);
  claim slots: every iteration of vllm (residents <= 3 || decoders < 2);
  claim mem: every iteration of vllm (used(kv) <= 9000);
  claim mem_free: every iteration of vllm (free(kv) >= 65536 - 12000 || queue(vllm) > 3);
  claim big: some iteration of vllm (used(kv) >= 10000 && decoders >= 1);
  claim big_holders: some iteration of vllm (holders(reqs) >= 4 && used(kv) > 6000);
""" + "".join(f"  claim below{t}: every iteration of vllm (used(kv) < {t} || queue(vllm) > 4);\n"
              f"  claim above{t}: some iteration of vllm (free(kv) <= 65536 - {t});\n" for t in range(1000, 16000, 500)) + "}"
    text = src.rstrip().rstrip("}") + claims
    fast = _claims(text, True)
    slow = _claims(text, False)
    assert fast[2] > 1000 and slow[2] == 0
    assert fast[:2] == slow[:2] and fast[3] == slow[3]
    st = fast[1]
    assert st["budget"]["status"] == "held"
    assert st["mem"]["status"] == "failed" and st["big"]["status"] == "witnessed"
    # thresholds crossed by steady runs' growths, failed and witnessed at those iterations
    assert sum(st[f"above{t}"]["status"] == "witnessed" for t in range(1000, 16000, 500)) > 10
    # a claim on the clock: the iterations one at a time, the same statuses
    timed = text.rstrip().rstrip("}") + "  claim early: every iteration of vllm (now >= 0);\n}"
    fast = _claims(timed, True)
    assert fast[2] == 0 and fast[:2] == _claims(timed, False)[:2]


SINGLE = os.path.join(os.path.dirname(__file__), "..", "examples", "single-turn", "vllm_single_turn.sq")
FOLD_CASES = {  # vllm_single_turn.sq's arguments, and the arrivals of 300 that fall in a fast-forward at least
    "plain": ({}, 100),
    "preempting": ({"blocks": 220, "rate": 12}, 0),  # congested: few steady runs (a fold or two)
    "budget binds": ({"B": 24, "max_seqs": 64, "rate": 8}, 0),
    "chunked": ({"chunk_cap": 64, "rate": 10}, 100),
    "no caching": ({"caching": 0, "rate": 10}, 100),
    "small blocks": ({"bs": 1, "blocks": 40000, "rate": 10}, 100),
    "busy": ({"rate": 30}, 10),
}


def _folded(prog, mode, seed, monkeypatch, arrivals=300, **settings):
    """The JSON report, the ITL samples in order and the arrivals that fell inside a fast-forward."""
    from serq.interp.engine import Iterations
    unfolds = [0]
    real = Iterations._unfold

    def count(self):
        unfolds[0] += 1
        real(self)
    with monkeypatch.context() as m:
        m.setattr(Iterations, "_unfold", count)
        m.setattr(Iterations, "fold", mode == "fold")
        sim = Sim(prog, Settings(seed=seed, arrivals=arrivals, **settings))
        if mode == "one at a time":
            sim.fast_forward = False
        rep = sim.run()
    rep.pop("_sim", None)
    return json.dumps(rep, sort_keys=True), list(sim.c_itl.v), unfolds[0]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", list(FOLD_CASES), ids=list(FOLD_CASES))
def test_a_fast_forward_through_an_arrival_changes_nothing(case, seed, monkeypatch):
    """An arrival inside a fast-forward's last iteration (engine.py, _fold_bound): the run's growths
    made before it (the gauges read used(kv) at each instant), the rest at the run's end; the same
    report and ITL samples as the run stopped before that iteration, and as one at a time."""
    args, least = FOLD_CASES[case]
    prog = api.load(SINGLE, args)
    got = _folded(prog, "fold", seed, monkeypatch)
    assert got[2] >= least, "too few arrivals fell inside a fast-forward"
    for mode in ("no fold", "one at a time"):
        other = _folded(prog, mode, seed, monkeypatch)
        assert other[2] == 0
        assert got[:2] == other[:2], mode


def test_a_fast_forward_through_an_arrival_within_a_horizon(monkeypatch):
    """A horizon inside the iteration an arrival falls in: that iteration is not folded (the run
    would end past the horizon with its tokens unapplied)."""
    from serq.interp.engine import Iterations
    prog = api.load(SINGLE, {"rate": 10})
    cut = [0]
    real = Iterations._fold_bound

    def bound(self, nxt):
        b = real(self, nxt)
        cut[0] += b == self.horizon
        return b
    monkeypatch.setattr(Iterations, "_fold_bound", bound)
    # 28.3886...: inside an iteration an arrival falls in (found by a search: without the horizon's
    # bound, that run's report differs)
    for hz in (7.3, 11.05, 23.9, 28.388607945757407):
        got = _folded(prog, "fold", 1, monkeypatch, arrivals=None, horizon=hz)
        assert got[:2] == _folded(prog, "one at a time", 1, monkeypatch, arrivals=None, horizon=hz)[:2]
    assert cut[0] > 0


def test_an_arrival_that_reads_the_engine_stops_the_fast_forward_before_it(monkeypatch):
    """An arrival whose session reads the engine's work sees each run's tokens as they stand: no
    fast-forward runs through it (_fold_static), and the report is one at a time's."""
    from serq.interp.engine import Iterations
    src = open(SINGLE).read()
    anchor = "Size o = 1 + floor(~exp(200));             // output tokens\n"
    assert anchor in src
    # (budget_left is no session's to read: work is what a session can read of a run's tokens)
    prog = api.load_text(src.replace(anchor, anchor + "      observe w = work(vllm);\n"), "reads.sq")
    got = _folded(prog, "fold", 1, monkeypatch)
    assert got[2] == 0
    assert got[:2] == _folded(prog, "one at a time", 1, monkeypatch)[:2]
    # the rule the guard keeps: folded anyway, the arrivals read the runs' tokens as they started
    monkeypatch.setattr(Iterations, "_fold_static_ok", True)
    forced = _folded(prog, "fold", 1, monkeypatch)
    assert forced[2] > 20
    assert forced[0] != got[0]


@pytest.mark.campaign
def test_folded_arrivals_alike_on_drawn_settings(monkeypatch):
    """A differential campaign: vllm_single_turn.sq at drawn settings (KV short enough to preempt or
    plenty, blocks of 1 to 32, seats, budgets and chunk caps that bind or not, prefix caching on or
    off, arrival rates, step costs, some runs cut by a horizon): the report and ITL samples with
    arrivals folded into fast-forwards are one at a time's."""
    import random
    rnd = random.Random(4906)
    folded = 0
    for case in range(16):
        bs = rnd.choice([1, 4, 16, 32])
        args = {"bs": bs, "blocks": rnd.choice([30, 120, 600, 5000]) * 16 // bs,
                "max_seqs": rnd.choice([4, 16, 256]), "B": rnd.choice([64, 512, 2048]),
                "chunk_cap": rnd.choice([float("inf"), 48, 256]), "caching": rnd.choice([0, 1]),
                "rate": rnd.choice([1, 4, 12, 30]), "omega": rnd.choice([0.003, 0.0005]),
                "a": rnd.choice([0.00004, 0.00001])}
        prog = api.load(SINGLE, args)
        settings = {"arrivals": 150} if case % 3 else {"arrivals": None, "horizon": rnd.uniform(5.0, 40.0)}
        got = _folded(prog, "fold", case, monkeypatch, **settings)
        folded += got[2]
        assert got[:2] == _folded(prog, "one at a time", case, monkeypatch, **settings)[:2], args
    assert folded > 300, folded
