"""`serq sweep --find NAME=LO:HI --slo METRIC<=X` (issue 29, capacity planning; cli.md, *serq sweep*):
the largest arrival rate at which an M/M/1 queue's mean response meets an objective is the closed
form's, within the tolerance and the sampling error; the result as text and JSON; the ends of the
range; the points tried as a sweep's tables; usage errors before any run."""
from __future__ import annotations

import json
import math
import os
import resource

import pytest

from serq import api
from serq.exp import find, sweep
from serq.interp.report import finite
from serq.ir.model import Settings
from helpers import cli_main as main, serq

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
MG1 = os.path.join(ROOT, "examples", "single-turn", "mg1.sq")
CLOSED = os.path.join(ROOT, "examples", "multi-turn", "closed.sq")
FILES = ("runs.csv", "runs.jsonl", "summary.csv", "sweep.json")
# short runs for the shape of things: 300 arrivals, 2 seeds, in this process
SMALL = ["--arrivals", "300", "--seeds", "2", "--jobs", "1", "--quiet"]


def test_the_largest_rate_is_the_mm1_closed_form(tmp_path):
    """M/M/1 with service rate mu = 2 (mean 0.5): E[response] = 1/(mu - lambda), so the largest
    lambda with a mean response of at most R = 1.5 is mu - 1/R = 4/3. The answer (the largest value
    tried that held) and the least that failed bracket it up to each point's sampling error, its
    95% interval across seeds carried to lambda by the slope of the closed form (d lambda / dR =
    (mu - lambda)^2); and the answer is within the tolerance plus that error of it."""
    mu, target = 2.0, 1.5
    exact = mu - 1 / target
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = serq("sweep", MG1, "--find", "lambda=0.2:1.9", "--set", "mean=0.5", "--slo", f"client.response.mean<={target}",
             "--tol", "0.005", "--arrivals", "30000", "--warmup", "200", "--seeds", "8", "--jobs", "2", "--quiet",
             "--json", "--out", str(tmp_path / "mm1"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["find"]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    pts = {p["value"]: p for p in res["points"]}
    value, above = res["value"], res["fails_at"]
    assert res["outcome"] == "found" and pts[value]["held"] and not pts[above]["held"]
    assert 0 < above - value <= res["tol"] == 0.005

    def error(v):  # the point's 95% interval of the mean response, as a width in lambda
        return pts[v]["metrics"]["client.response.mean"]["ci95"] * (mu - v) ** 2

    assert value - error(value) <= exact <= above + error(above)
    assert abs(value - exact) <= res["tol"] + max(error(value), error(above))
    print(f"M/M/1 (mu {mu:g}, R {target:g}): largest lambda {value} (fails at {above}), closed form {exact:.5f}, "
          f"error {value - exact:+.5f}; sampling error {error(value):.4f}; {len(pts)} points, {cpu:.1f} s CPU")


def test_the_json_object_and_the_tables(tmp_path, capsys):
    out = tmp_path / "f"
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.95", "--slo", "client.response.mean<=4",
                           "--slo", "client.response.p99 >= 0.5", "--tol", "5%", "--json", "--out", str(out), *SMALL)
    assert code == 0, err
    obj = json.loads(text)
    assert list(obj) == ["find", "seeds", "runs", "failed", "out"]
    f = obj["find"]
    assert list(f) == ["name", "value", "lo", "hi", "tol", "whole", "outcome", "fails_at", "slo", "points"]
    assert (f["name"], f["lo"], f["hi"], f["outcome"], f["whole"]) == ("lambda", 0.1, 0.95, "found", False)
    assert f["tol"] == pytest.approx(0.05 * 0.85)
    assert f["slo"] == [{"metric": "client.response.mean", "op": "<=", "bound": 4.0},
                        {"metric": "client.response.p99", "op": ">=", "bound": 0.5}]
    values = [p["value"] for p in f["points"]]
    assert values == sorted(values) and values[0] == 0.1 and values[-1] == 0.95
    # 0.85 wide, tolerance 5% of it: five halvings after the two ends
    assert len(values) == 2 + math.ceil(math.log2(20)) and obj["runs"] == 2 * len(values) and obj["failed"] == 0
    for i, p in enumerate(f["points"]):
        assert list(p) == ["value", "point", "held", "failed", "metrics"] and p["point"] == i and p["failed"] == 0
        assert list(p["metrics"]) == ["client.response.mean", "client.response.p99"]
        m = p["metrics"]["client.response.mean"]
        assert m["n"] == 2 and p["held"] == (m["mean"] <= 4 and p["metrics"]["client.response.p99"]["mean"] >= 0.5)
    held = [p["value"] for p in f["points"] if p["held"]]
    failed = [p["value"] for p in f["points"] if not p["held"]]
    assert f["value"] == max(held) and f["fails_at"] == min(failed) and f["fails_at"] - f["value"] <= f["tol"]
    # each midpoint written as a person would: a tenth of the tolerance's leading digit
    assert all(len(repr(v).split(".")[-1]) <= 4 for v in values)
    assert f"serq sweep: {obj['runs']} runs, 0 failed: {out}" in err
    # the points are a sweep's tables, the searched input their grid, the result in sweep.json
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["grid"] == {"lambda": values} and meta["find"] == f and meta["runs"] == obj["runs"]
    rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["point"], r["lambda"], r["seed"]) for r in rows] == \
        [(i, v, s) for i, v in enumerate(values) for s in (1, 2)]
    summ = [line.split(",") for line in (out / "summary.csv").read_text().splitlines()]
    means = {float(x[1]): float(x[4]) for x in summ[1:] if x[2] == "client.response.mean"}
    assert means == {p["value"]: p["metrics"]["client.response.mean"]["mean"] for p in f["points"]}


def test_the_same_search_with_two_processes_writes_the_same_bytes(tmp_path, capsys):
    args = ["--find", "lambda=0.1:0.95", "--slo", "client.response.mean<=4", "--tol", "10%", "--arrivals", "300",
            "--seeds", "2", "--quiet"]
    outs = []
    for jobs in ("1", "2"):
        code, text, err = main(capsys, "sweep", MG1, *args, "--jobs", jobs, "--out", str(tmp_path / jobs))
        assert code == 0, err
        outs.append(text.replace(str(tmp_path / jobs), "DIR"))
    assert outs[0] == outs[1]
    for name in FILES:
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes()


def test_the_text_names_the_value_and_shows_the_points(tmp_path, capsys):
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.95", "--slo", "client.response.mean<=4",
                           "--tol", "0.1", "--out", str(tmp_path / "f"), *SMALL)
    assert code == 0, err
    lines = text.splitlines()
    assert lines[0] == "objectives: client.response.mean <= 4 (each the mean over 2 seeds); tolerance 0.1"
    assert lines[1] == ""
    head = lines[2]
    assert head.startswith("lambda: ") and "the largest value tried in [0.1, 0.95] at which every objective holds; " \
        "they fail at " in head
    assert lines[3].split() == ["lambda", "client.response.mean", "±95%", "held"]
    table = [x.split() for x in lines[4:-1]]
    assert [x[0] for x in table] == sorted((x[0] for x in table), key=float) and table[0][0] == "0.1"
    value = head.split(": ")[1]
    fails = head.rsplit(" ", 1)[1]
    held = {x[0]: x[-1] for x in table}
    assert held[value] == "yes" and held[fails] == "no"
    assert all((float(x[1]) <= 4) == (x[-1] == "yes") for x in table)
    assert lines[-1] == f"{2 * len(table)} runs, 0 failed: {tmp_path / 'f'} ({', '.join(FILES)})"


def test_objectives_that_fail_at_lo_have_no_value(tmp_path, capsys):
    # a response is at least its service, of mean 1: never 0.5 on average
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "client.response.mean<=0.5",
                           "--out", str(tmp_path / "f"), *SMALL)
    assert code == 0, err
    assert "lambda: none: the objectives fail already at lambda=0.1, the low end of [0.1, 0.9]" in text
    assert text.count("  no") == 2  # LO and HI, nothing more
    code, text, _ = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "client.response.mean<=0.5",
                         "--json", "--out", str(tmp_path / "f"), *SMALL)
    f = json.loads(text)["find"]
    assert (f["value"], f["outcome"], f["fails_at"]) == (None, "fails_at_lo", 0.1)
    assert [p["value"] for p in f["points"]] == [0.1, 0.9]


def test_objectives_that_hold_at_hi_give_hi(tmp_path, capsys):
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "client.response.mean<=1000",
                           "--out", str(tmp_path / "f"), *SMALL)
    assert code == 0, err
    assert "lambda: 0.9: the objectives hold at the high end of [0.1, 0.9]; the limit may be above it" in text
    code, text, _ = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "client.response.mean<=1000",
                         "--json", "--out", str(tmp_path / "f"), *SMALL)
    f = json.loads(text)["find"]
    assert (f["value"], f["outcome"], f["fails_at"]) == (0.9, "holds_at_hi", None)


def test_with_a_grid_one_search_a_grid_point(tmp_path, capsys):
    # service mean 0.5 halves every response: the limit for 4 s is beyond 0.95 there
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.95", "--grid", "mean=0.5,1", "--slo",
                           "client.response.mean<=4", "--tol", "10%", "--json", "--out", str(tmp_path / "f"), *SMALL)
    assert code == 0, err
    fs = json.loads(text)["find"]
    assert [(f["at"], f["outcome"]) for f in fs] == [({"mean": 0.5}, "holds_at_hi"), ({"mean": 1}, "found")]
    assert list(fs[1])[:2] == ["at", "name"]
    meta = json.loads((tmp_path / "f" / "sweep.json").read_text())
    assert list(meta["grid"]) == ["lambda", "mean"] and meta["grid"]["mean"] == [0.5, 1]
    assert [p["point"] for f in fs for p in f["points"]] == list(range(meta["runs"] // 2))


def test_a_point_whose_runs_fail_does_not_hold_and_the_exit_is_1(tmp_path, capsys):
    # at lambda 0.1 200 arrivals take ~2000 time units, past the horizon (R032): LO fails
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "client.response.mean<=100",
                           "--arrivals", "200", "--horizon", "600", "--seeds", "2", "--jobs", "1", "--quiet",
                           "--out", str(tmp_path / "f"))
    assert code == 1
    assert "lambda: none" in text and "no (2 runs failed)" in text
    assert "point 0 (lambda=0.1), seed 1 failed" in err


def test_a_statistic_without_a_sample_does_not_hold_and_is_said(tmp_path, capsys):
    # mg1.sq has no tokens: no time to first token
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "client.ttft.p99<=10",
                           "--out", str(tmp_path / "f"), *SMALL)
    assert code == 0 and "lambda: none" in text
    assert err.count("client.ttft.p99 has no value at lambda=0.1 (no run had a sample of it)") == 1


def test_a_whole_input_is_searched_through_whole_numbers(tmp_path, capsys):
    """closed.sq's `sessions` (default 5, the N of closed(N), which takes no fraction): every value
    tried is whole, the search stops when the value that held and the one that failed are 1 apart,
    and the answer is mean value analysis's for M/M/1//N (think 4 s, service 1 s): R(7) = 3.47 and
    R(8) = 4.25 against an objective of 4, so 7. A fraction (10.5) would not link."""
    args = ["--find", "sessions=1:20", "--slo", "client.response.mean<=4", "--horizon", "3000", "--warmup", "100",
            "--seeds", "2", "--jobs", "1", "--quiet"]
    code, text, err = main(capsys, "sweep", CLOSED, *args, "--json", "--out", str(tmp_path / "j"))
    assert code == 0, err
    f = json.loads(text)["find"]
    values = [p["value"] for p in f["points"]]
    assert all(isinstance(v, int) for v in values) and values[0] == 1 and values[-1] == 20
    assert (f["whole"], f["tol"], f["outcome"], f["value"], f["fails_at"]) == (True, 1, "found", 7, 8)
    assert len(values) <= 2 + math.ceil(math.log2(19))  # each step halves [held, failed] or better
    held = [p["value"] for p in f["points"] if p["held"]]
    assert f["value"] == max(held)
    code, text, err = main(capsys, "sweep", CLOSED, *args, "--out", str(tmp_path / "t"))
    assert code == 0, err
    lines = text.splitlines()
    assert lines[0] == ("objectives: client.response.mean <= 4 (each the mean over 2 seeds); tolerance 1; sessions in "
                        "whole numbers only (the program refuses sessions=1.5)")
    assert lines[2].startswith("sessions: 7: the largest value tried in [1, 20] at which every objective holds; "
                               "they fail at 8")
    assert [ln.split()[0] for ln in lines[4:-1]] == [str(v) for v in values]


@pytest.mark.parametrize("name, lo, hi, tol, given, whole, tol_after", [
    ("lambda", 0.5, 1.0, 0.01, False, False, 0.01),  # LO not whole: fractions
    ("lambda", 0.0, 2.0, 0.02, False, False, 0.02),  # 0.5 links: fractions
    ("mean", 1.0, 5.0, 0.04, False, False, 0.04),    # a whole default (1) says nothing: 1.5 links, fractions
    ("mean", 1.0, 5.0, 0.5, True, False, 0.5),
])
def test_which_inputs_are_whole(name, lo, hi, tol, given, whole, tol_after):
    f = find.Find(name, lo, hi, tol, [("client.response.mean", "<=", 1.0)], tol_given=given)
    f._decide_whole(api, MG1, {}, Settings())
    assert (f.whole, f.tol) == (whole, tol_after)


def test_a_whole_input_the_program_needs_stays_whole_under_a_fine_tol():
    """closed(n) takes no fraction: --tol 0.5 cannot be met, the search is whole, to 1."""
    f = find.Find("sessions", 1.0, 20.0, 0.5, [("client.response.mean", "<=", 4.0)], tol_given=True)
    f._decide_whole(api, CLOSED, {}, Settings())
    assert (f.whole, f.tol, f.why) == (True, 1.0, "the program refuses sessions=1.5")


FIND = ["--find", "lambda=0.1:0.9"]
SLO = ["--slo", "client.response.mean<=2"]


@pytest.mark.parametrize("args, message", [
    (["--find", "lambda", *SLO], "--find is NAME=LO:HI, not 'lambda'"),
    (["--find", "lambda=0.5", *SLO], "--find is NAME=LO:HI, not 'lambda=0.5'"),
    (["--find", "=0.1:0.5", *SLO], "--find is NAME=LO:HI"),
    (["--find", "lambda=0.1:fast", *SLO], "--find lambda: 'fast' is not a number"),
    (["--find", "lambda=0.1:inf", *SLO], "--find lambda: LO and HI are finite numbers"),
    (["--find", "lambda=0.5:0.5", *SLO], "--find lambda=0.5:0.5: LO is not below HI"),
    (["--find", "lambda=0.9:0.1", *SLO], "--find lambda=0.9:0.1: LO is not below HI"),
    (["--find", "rate=0.1:0.9", *SLO], "the program declares no input rate (its inputs: c2, lambda, mean)"),
    (["--find", "seed=0.1:0.9", *SLO], "--find seed: the tables have a column `seed` already"),
    ([*FIND, *SLO, "--grid", "lambda=0.5"], "input lambda is both searched (--find) and swept"),
    ([*FIND, *SLO, "--set", "lambda=0.5"], "input lambda is both searched (--find) and fixed"),
    (FIND, "--find needs an objective: --slo METRIC<=X"),
    (SLO, "--slo, --tol and --json go with --find NAME=LO:HI"),
    (["--json"], "--slo, --tol and --json go with --find NAME=LO:HI"),
    ([*FIND, "--slo", "client.response.mean<2"], "--slo is METRIC<=X or METRIC>=X, not 'client.response.mean<2'"),
    ([*FIND, "--slo", "client.response.mean=2"], "--slo is METRIC<=X or METRIC>=X"),
    ([*FIND, "--slo", "<=2"], "--slo is METRIC<=X or METRIC>=X, not '<=2'"),
    ([*FIND, "--slo", "client.response.mean<=soon"], "--slo client.response.mean: 'soon' is not a number"),
    ([*FIND, "--slo", "client.respones.mean<=2"],
     "--slo client.respones.mean: not a statistic of the runs' summary.csv (such as client.response.mean"),
    # (`response.mean` is the shorthand of client.response.mean, as on serq run: not an error)
    ([*FIND, "--slo", "responses.mean<=2"], "--slo responses.mean: not a statistic of the runs' summary.csv (such as "),
    ([*FIND, "--slo", "claims.c.status<=2"], "--slo claims.c.status: not a statistic"),
    ([*FIND, *SLO, "--tol", "0"], "--tol is a positive width, or a percentage of HI-LO below 100 (1%), not '0'"),
    ([*FIND, *SLO, "--tol", "-1"], "--tol is a positive width"),
    ([*FIND, *SLO, "--tol", "100%"], "--tol is a positive width"),
    ([*FIND, *SLO, "--tol", "narrow"], "--tol is a positive width"),
])
def test_usage_errors_exit_2_before_any_run(args, message, tmp_path, capsys):
    out = tmp_path / "out"
    code, text, err = main(capsys, "sweep", MG1, "--arrivals", "100", "--out", str(out), *args)
    assert code == 2 and message in err, err
    assert text == "" and os.listdir(tmp_path) == []  # nothing run or written


def test_a_statistic_of_a_part_the_program_lacks_is_refused_after_the_first_step(tmp_path, capsys):
    """`pools.NAME.KEY` can be a statistic; whether this program has a pool `kv` its first runs say."""
    code, text, err = main(capsys, "sweep", MG1, "--find", "lambda=0.1:0.9", "--slo", "pools.kv.mean_used<=2",
                           "--out", str(tmp_path / "o"), *SMALL)
    assert code == 2 and text == ""
    assert "serq: error: --slo pools.kv.mean_used: not a statistic of the runs' summary.csv (such as " in err
    assert os.listdir(tmp_path) == []


def test_every_statistic_of_a_run_is_one_an_objective_may_name():
    """The names the search knows before any run (find.FIXED, find.PARTS) are summary.csv's: every
    statistic of a run of a program with observes, gauges, pools, stages and claims passes, and
    every fixed one is there."""
    rep = api.run(api.load(os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")), Settings(horizon=20))
    rep.pop("_sim")
    values = sweep.flatten(finite(rep))
    stats = sweep.statistics([{"error": None, **values}], ["error", *values])
    assert {s.split(".")[0] for s in stats} >= {"end", "sessions", "client", "observe", "gauges", "pools", "stages",
                                                "claims"}
    assert [s for s in stats if not find.possible(s)] == []
    assert set(find.FIXED) <= set(stats)
    assert not find.possible("claims.within_budget.status") and "claims.within_budget.status" in values


@pytest.mark.parametrize("a, b, tol", [(0.1, 0.95, 0.0085), (1000, 9000, 80), (0, 1, 1e-6), (0.3, 0.3000001, 1e-9),
                                       (-5, 5, 0.1)])
def test_a_midpoint_is_inside_and_near_the_middle(a, b, tol):
    m = find._midpoint(a, b, tol)
    assert a < m < b and abs(m - (a + b) / 2) <= 0.05 * tol


def test_a_mean_rounded_onto_its_bound_shows_its_side():
    """Four digits would show 0.50004 as 0.5 beside `no` against `<= 0.5`: it shows more."""
    assert find._mean_text(0.50004, [0.5]) == "0.50004"
    assert find._mean_text(0.49996, [0.5]) == "0.49996"
    assert find._mean_text(0.5, [0.5]) == "0.5"
    assert find._mean_text(0.123456, [0.5]) == "0.1235"
    assert find._mean_text(None, [0.5]) == "-"


# ------------------------------------------------------------------ --slo, one parser for two commands

# one grammar, one parser, one message (issue 48: run and sweep took two)
FIND_FORM = "--slo is METRIC<=X or METRIC>=X, not "
RUN_FORM = FIND_FORM


@pytest.mark.parametrize("text, run_says, find_says", [
    ("ttft<0.5", RUN_FORM + "'ttft<0.5'", FIND_FORM + "'ttft<0.5'"),
    ("ttft=0.5", RUN_FORM + "'ttft=0.5'", FIND_FORM + "'ttft=0.5'"),
    ("ttft=<0.5", RUN_FORM, FIND_FORM),
    ("<=0.5", RUN_FORM + "'<=0.5'", FIND_FORM + "'<=0.5'"),
    ("ttft<=", RUN_FORM, FIND_FORM),
    ("ttft <= 1 2", RUN_FORM, FIND_FORM),
    ("", RUN_FORM + "''", FIND_FORM + "''"),
    ("ttft<=soon", "--slo ttft: 'soon' is not a number", "--slo ttft: 'soon' is not a number"),
    ("ttft<=nan", "--slo ttft: NaN is not a value", "--slo ttft: NaN is not a value"),
    ("ttft>=0.5", "--slo ttft: a request's ttft is held below a limit: ttft<=X",  # a request's: upper limits
     "--slo ttft: not a statistic of the runs' summary.csv (such as client.ttft.mean, client.ttft.p99)"),
    ("client.ttft.p101<=0.5", "--slo client.ttft.p101: not a statistic of the runs' summary.csv",
     "--slo client.ttft.p101: not a statistic of the runs' summary.csv"),
])
def test_slo_usage_errors_of_both_commands(text, run_says, find_says, tmp_path, capsys):
    """`serq run --slo` and `serq sweep --find --slo` read an objective with one parser
    (cli.parse_slo): a malformed one is the same usage error to both, worded with each command's
    form, exit 2 before any run, never a traceback."""
    code, out, err = main(capsys, "run", MG1, "--arrivals", "50", "--slo", text)
    assert code == 2 and out == "" and run_says in err, err
    assert err.rstrip().splitlines()[-1].startswith("serq: error: --slo ")
    if find_says is None:  # a statistic of summary.csv, which the sweep's --slo takes
        from serq import cli
        assert cli.parse_slo(text, tuple(find.OPS), "METRIC<=X or METRIC>=X") == ("client.ttft.p99", "<=", 0.5)
        return
    code, out, err = main(capsys, "sweep", MG1, "--arrivals", "50", "--find", "lambda=0.1:0.9", "--slo", text,
                          "--out", str(tmp_path / "o"))
    assert code == 2 and out == "" and find_says in err, err
    assert os.listdir(tmp_path) == []


def test_both_commands_read_slo_with_the_one_parser(tmp_path, capsys, monkeypatch):
    from serq import cli
    seen = []
    real = cli.parse_slo

    def spy(text, ops, form):
        seen.append((text, ops))
        return real(text, ops, form)
    monkeypatch.setattr(cli, "parse_slo", spy)
    code, _, err = main(capsys, "run", MG1, "--arrivals", "50", "--json", "--slo", "response<=5")
    assert code == 0, err
    code, _, err = main(capsys, "sweep", MG1, "--arrivals", "50", "--find", "lambda=0.1:0.9", "--slo",
                        "client.response.mean<=5", "--slo", "sessions.completed>=1", "--out", str(tmp_path / "o"),
                        "--tol", "40%", "--seeds", "2", "--jobs", "1", "--quiet")
    assert code == 0, err
    assert seen == [("response<=5", ("<=", ">=")), ("client.response.mean<=5", ("<=", ">=")),
                    ("sessions.completed>=1", ("<=", ">="))]
