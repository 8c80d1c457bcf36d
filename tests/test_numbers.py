"""Numbers at their edges: NaN and the infinities in diagnostics, in counts, in the report (strict
JSON) and in the interpreter; fifo(inf); batch-means intervals of constant series."""
from __future__ import annotations

import csv
import json
import math
import os

import pytest

from serq import api, cli
from serq.interp import compile as compiled
from serq.interp.report import finite
from serq.interp.stats import BATCHES, T19, summary
from serq.ir.model import Settings
from serq.lang.lower import constants as C

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
INF, NAN = math.inf, math.nan


def run(text, **settings):
    rep = api.run(api.load_text(text, "t.sq"), Settings(**settings))
    return rep, rep.pop("_sim")


def serq(capsys, *args):
    """The command line, in process (a Python exception would fail the test as a traceback would)."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def strict_loads(text):
    def refuse(c):
        raise ValueError(f"not RFC 8259 JSON: {c}")
    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------ the formatter and the count rule


@pytest.mark.parametrize("v, text", [(NAN, "NaN"), (INF, "inf"), (-INF, "-inf"), (3.0, "3"), (-2.0, "-2"),
                                     (0.5, "0.5"), (1e300, "1e+300"), (-0.0, "0")])
def test_fmt_writes_every_number(v, text):
    assert C.fmt(v) == text


@pytest.mark.parametrize("v, lo, hi, ok", [(3, 1, 3, True), (0, 0, INF, True), (2.5, 0, INF, False),
                                           (INF, 1, INF, False), (-INF, -INF, 0, False), (NAN, 0, INF, False),
                                           (-1, 0, INF, False), (4, 1, 3, False), (1e300, 1, INF, True)])
def test_a_whole_number_is_finite_and_in_range(v, lo, hi, ok):
    assert C.whole(v, lo, hi) is ok


def test_the_interpreter_calls_the_constant_folders_functions():
    """One definition each (no second copy to drift): and each is total on inf and NaN."""
    for name, (_, _, fn) in C.FUNCS.items():
        assert compiled.FUNCS[name] is fn
    f = {n: fn for n, (_, _, fn) in C.FUNCS.items()}
    assert f["floor"](INF) == INF and f["ceil"](-INF) == -INF and math.isnan(f["round"](NAN))
    assert f["floor"](2.5) == 2 and f["round"](2.5) == 3 and f["ceil"](2.1) == 3
    # reusable(n, b): the whole blocks of n - 1 tokens
    assert f["reusable"](33, 16) == 32 and f["reusable"](32, 16) == 16 and f["reusable"](0.5, 16) == 0
    assert f["reusable"](INF, 16) == INF and f["reusable"](5, INF) == 0
    assert math.isnan(f["reusable"](NAN, 16)) and math.isnan(f["reusable"](5, 0))
    assert compiled._div(NAN, 0) != compiled._div(NAN, 0)  # NaN / 0 is NaN, in the folder as in the interpreter
    assert math.isnan(C.arith("/", NAN, 0))
    # min and max are NaN wherever an argument is, whatever its place (Python's min(1, nan) is 1)
    for g in (f["min"], f["max"]):
        assert all(math.isnan(g(*a)) for a in ((1, NAN), (NAN, 1), (1, NAN, 0), (NAN,)))
    assert f["min"](3, 1, 2) == 1 and f["max"](3, 5, 2) == 5 and f["min"](INF, -INF) == -INF


def test_floor_of_inf_is_a_constant_not_nan():
    rep, _ = run("""fn main() { let big = floor(inf); stage s : delay;
      workload { arrive renewal(1); } server { run s (cost(s, big > 1e300 ? 1 : 2)); observe r = now; } }""",
                 arrivals=1)
    assert rep["observe"]["r"]["max"] == 2  # arrives at 1, runs 1


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize("args", [["--seed", "inf"], ["--seed", "1e400"], ["--seed=-inf"], ["--seed", "nan"],
                                  ["--arrivals", "inf"], ["--arrivals", "1e400"], ["--seed", "2.5"]])
def test_seed_and_arrivals_are_finite_whole_numbers(args, capsys):
    code, _, err = serq(capsys, "run", os.path.join(ROOT, "examples", "single-turn", "mg1.sq"), *args)
    assert code == 2 and "serq: error: --" in err, err


# ------------------------------------------------------------------ fifo(inf)

MGINF = """fn main() {
  stage s : fifo(%s);
  workload { arrive poisson(1); turn { Size d = ~uniform(0, 4); } }
  server { set t0 = now; run s (cost(s, d)); observe wait = now - t0 - d; }
}"""


def test_fifo_inf_serves_every_job_at_once():
    """M/G/inf: no job waits, so each response is its service; the number present is Poisson of mean
    lambda E[S] = 2, so the stage is busy (a job present) a fraction 1 - e^-2 of the time."""
    rep, _ = run(MGINF % "inf", horizon=10000, warmup=100)
    w = rep["observe"]["wait"]
    assert w["count"] > 9000 and max(abs(w["min"]), abs(w["max"])) < 1e-9
    assert rep["stages"]["s"]["utilisation"] == pytest.approx(1 - math.exp(-2), abs=0.01)
    # a fifo with more servers than jobs ever present serves the same paths: the same waits, job by job
    rep_c, sim_c = run(MGINF % "1000000", horizon=2000)
    rep_i, sim_i = run(MGINF % "inf", horizon=2000)
    assert sim_c.obs["wait"].v == sim_i.obs["wait"].v and rep_c["client"] == rep_i["client"]
    # and one server makes them wait
    assert run(MGINF % "1", horizon=2000)[0]["observe"]["wait"]["mean"] > 1


# ------------------------------------------------------------------ the report: strict JSON


def test_json_report_has_no_infinity_or_nan(tmp_path, capsys):
    f = tmp_path / "big.sq"
    f.write_text("fn main() {\n  stage s : fifo;\n  workload { arrive poisson(1); turn { Size x = 1e999; } }\n"
                 "  server { run s (cost(s, x)); observe big = x; observe neg = -x; }\n}\n")
    code, out, err = serq(capsys, "run", str(f), "--arrivals", "3", "--json", "--dump", str(tmp_path / "d"))
    assert code == 0, err
    rep = strict_loads(out)
    assert rep["end"] is None and rep["stages"]["s"]["utilisation"] is None
    assert rep["observe"]["big"]["max"] is None and rep["observe"]["big"]["count"] == 3
    for field in ("end is inf", "observe.big.max is inf", "observe.neg.min is -inf", "stages.s.utilisation is NaN"):
        assert f"non_finite: {field}" in rep["notes"]
    # --dump writes a non-finite value as Python's float() reads it back
    with open(tmp_path / "d" / "observe_neg.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(x["value"]) for x in rows] == [-INF] * 3 and rows[0]["value"] == "-inf"
    # the text report writes them as they are
    code, out, _ = serq(capsys, "run", str(f), "--arrivals", "3")
    assert code == 0 and "end inf" in out


def test_finite_names_each_field_it_nulls():
    rep = {"end": 5.0, "a": {"b": [1.0, NAN]}, "c": -INF, "notes": ["x"]}
    assert finite(rep) == {"end": 5.0, "a": {"b": [1.0, None]}, "c": None,
                           "notes": ["x", "non_finite: a.b[1] is NaN", "non_finite: c is -inf"]}
    assert rep["c"] == -INF  # the report itself is left as it was


def test_a_percentile_among_infinities_is_inf():
    s = summary([1.0, INF, INF, INF])
    assert (s["p50"], s["p90"], s["max"], s["min"]) == (INF, INF, INF, 1.0)


# ------------------------------------------------------------------ infinite sizes on an engine

VLLM = os.path.join(ROOT, "examples", "single-turn", "vllm_single_turn.sq")


@pytest.mark.parametrize("attr", ["Size n = 50", "Size o = 1"])
def test_an_infinite_size_on_an_engine_runs_as_a_huge_one(attr):
    """An infinite prompt or output is an amount (*Amounts and indices*): within the horizon the run is
    the run of a size too large to finish, here 1e12."""
    with open(VLLM, encoding="utf-8") as fh:
        text = fh.read()
    assert attr in text
    reps = []
    for big in ("1e999", "1e12"):
        t = text.replace(attr, attr.replace("= ", f"= serial == 0 ? {big} : "))
        prog = api.load_text(t, VLLM)
        rep = api.run(prog, Settings(horizon=3))
        rep.pop("_sim")
        reps.append(rep)
    assert reps[0] == reps[1] and reps[0]["sessions"]["live_at_end"] >= 1


# ------------------------------------------------------------------ batch means of a constant series

GAUGES = """fn main() {
  stage s : delay;
  workload { arrive renewal(2); }
  server { run s (cost(s, 1)); observe one_tenth = 0.1; }
  gauge tenth = 0.1;
  gauge busy_s = busy(s);
}"""


def test_a_constant_series_has_its_value_and_no_interval():
    rep, _ = run(GAUGES, horizon=12345.6, warmup=3.3)
    assert rep["gauges"]["tenth"] == {"mean": 0.1, "ci95": 0.0, "min": 0.1, "max": 0.1}
    o = rep["observe"]["one_tenth"]
    assert (o["mean"], o["ci95"]) == (0.1, 0.0)


def test_a_varying_gauge_keeps_its_interval():
    """Arrivals at 2, 4, ..., each busy for 1: over [0, 20] the 20 windows of width 1 hold 0, 0, 1, 0,
    1, 0, ... (window [2k, 2k + 1) busy for k >= 1)."""
    rep, _ = run(GAUGES, horizon=20)
    means = [1.0 if k >= 2 and k % 2 == 0 else 0.0 for k in range(BATCHES)]
    m = sum(means) / BATCHES
    ci = T19 * math.sqrt(sum((x - m) ** 2 for x in means) / (BATCHES - 1) / BATCHES)
    g = rep["gauges"]["busy_s"]
    assert g["mean"] == pytest.approx(m) and g["ci95"] == pytest.approx(ci) and ci > 0.2



def test_a_flow_whose_share_of_a_denormal_capacity_underflows_never_ends():
    # found by tools/fuzz.py: maxmin's share of ps(5e-324) among several flows is 0.0, and the
    # flow's end was computed by dividing by it; such a flow runs at rate 0 and never ends
    rep, _ = run("""fn main() { stage a : ps(5e-324); stage b : ps(20000); share maxmin;
      workload { arrive poisson(10); turn { Size n = 100; } } server { run a, b (cost(a, b, n)); } }""",
                 horizon=5)
    assert rep["sessions"]["completed"] == 0 and rep["sessions"]["live_at_end"] == rep["sessions"]["arrived"] > 1
