"""`serq sweep` (issue 13; cli.md, *serq sweep*): the tables are the same bytes with one process, two
and a local Ray instance; each row is what `serq run` reports for its point and seed; the summary is
the mean and Student-t interval across seeds; failures are rows, never dropped."""
from __future__ import annotations

import csv
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

import pytest

from serq import cli
from serq.exp import sweep
from helpers import serq

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
MG1 = os.path.join(ROOT, "examples", "single-turn", "mg1.sq")
FILES = ("runs.csv", "runs.jsonl", "summary.csv", "sweep.json")
LAMBDAS = (0.3, 0.5, 0.8)
SEEDS = (1, 2, 3)
# M/M/1 (mg1.sq's defaults: mean 1, c2 1): 2000 arrivals a run, the first 200 time units not measured
# (a run starts empty, which biases a heavy load's mean response low)
GRID = ["--grid", "lambda=" + ",".join(map(str, LAMBDAS)), "--seeds", str(len(SEEDS)),
        "--arrivals", "2000", "--warmup", "200"]


def tables(d) -> dict:
    return {f: (d / f).read_bytes() for f in FILES}


@pytest.fixture(scope="module")
def jobs1(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "jobs1"
    r = serq("sweep", MG1, *GRID, "--jobs", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("9 runs, 0 failed"), r.stdout
    return out


def test_two_processes_write_the_same_bytes_as_one(jobs1, tmp_path):
    r = serq("sweep", MG1, *GRID, "--jobs", "2", "--out", str(tmp_path / "jobs2"))
    assert r.returncode == 0, r.stderr
    assert tables(tmp_path / "jobs2") == tables(jobs1)
    # stderr is not a terminal here: the progress is plain lines, the last one all runs done
    assert "serq sweep: 9/9 runs" in r.stderr


def _flat(rep: dict) -> dict:
    """The test's own flattening of a `serq run --json` report (the columns exp_spec.md names)."""
    out = {}

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                if not (k == "kind" and path.startswith("stages.")):  # a stage's kind is no column
                    walk(x, f"{path}.{k}" if path else k)
        else:
            out[path] = v
    # what ran (inputs, program) is no statistic: a sweep's point and sweep.json say it
    walk({k: v for k, v in rep.items() if k not in ("seed", "horizon", "warmup", "notes", "inputs", "program")}, "")
    return out


def test_each_row_is_the_run_of_its_point_and_seed(jobs1):
    rows = [json.loads(x) for x in (jobs1 / "runs.jsonl").read_text().splitlines()]
    with open(jobs1 / "runs.csv", newline="") as fh:
        crows = list(csv.DictReader(fh))
    assert [(r["point"], r["lambda"], r["seed"]) for r in rows] == \
        [(p, lam, s) for p, lam in enumerate(LAMBDAS) for s in SEEDS]
    meta = json.loads((jobs1 / "sweep.json").read_text())
    assert meta["grid"] == {"lambda": list(LAMBDAS)} and meta["seeds"] == list(SEEDS)
    assert meta["runs"] == 9 and meta["failed"] == 0 and meta["columns"] == list(rows[0])
    assert meta["settings"] == {"horizon": None, "warmup": 200, "arrivals": 2000}
    for row, crow in zip(rows, crows):
        r = serq("run", MG1, "--json", "--quiet", "--seed", str(row["seed"]), "--arrivals", "2000",
                 "--warmup", "200", "--set", f"lambda={row['lambda']}")
        assert r.returncode == 0, r.stderr
        want = _flat(json.loads(r.stdout))
        assert row["status"] == "ok" and row["error"] is None
        got = {k: v for k, v in row.items() if k not in ("point", "lambda", "seed", "status", "error")}
        assert got == want
        # the CSV holds the same numbers, written to read back exactly; a null is an empty cell
        for k, v in want.items():
            assert crow[k] == ("" if v is None else str(v)) and (v is None or float(crow[k]) == v)


def test_the_summary_is_the_mean_and_t_interval_across_seeds(jobs1):
    from scipy.stats import t
    with open(jobs1 / "runs.csv", newline="") as fh:
        runs = list(csv.DictReader(fh))
    with open(jobs1 / "summary.csv", newline="") as fh:
        summ = list(csv.reader(fh))
    assert summ[0] == ["point", "lambda", "stat", "n", "mean", "ci95", "lo", "hi"]
    stats = list(runs[0])[5:]
    assert len(summ) == 1 + len(LAMBDAS) * len(stats)
    checked = 0
    for point, lam, stat, n, mean, ci95, lo, hi in summ[1:]:
        xs = [float(r[stat]) for r in runs if r["point"] == point and r[stat] != ""]
        assert lam == runs[int(point) * 3]["lambda"] and int(n) == len(xs)
        if not xs:
            assert mean == ci95 == lo == hi == ""
            continue
        m = statistics.fmean(xs)
        half = t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
        assert float(mean) == pytest.approx(m, rel=1e-12, abs=1e-12)
        assert float(ci95) == pytest.approx(half, rel=1e-9, abs=1e-12)
        assert float(lo) == pytest.approx(m - half, rel=1e-9, abs=1e-9)
        assert float(hi) == pytest.approx(m + half, rel=1e-9, abs=1e-9)
        checked += 1
    assert checked > 20  # ttft and tpot have no sample in mg1.sq: their rows are empty


def test_the_t_quantile_is_scipy_stats_own():
    """The intervals' t quantile, read without importing scipy.stats, is its t.ppf to the bit."""
    from scipy.stats import t

    from serq.exp.sweep import _t_quantile
    ppf = _t_quantile()
    for df in (*range(1, 200), 1000, 10 ** 6):
        assert ppf(df) == float(t.ppf(0.975, df))


def test_the_interval_covers_the_mm1_response_time(jobs1):
    """E[response] = 1/(mu - lambda). A 95% interval misses one time in twenty, so one miss out of
    three points is allowed (two, at 5% each, would be a 0.7% event); each mean is also within 15%
    (3 seeds of 2000 arrivals at load 0.8 leave the mean ~6% wide at one standard deviation)."""
    with open(jobs1 / "summary.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["stat"] == "client.response.mean"]
    assert len(rows) == len(LAMBDAS)
    covered = 0
    for lam, r in zip(LAMBDAS, rows):
        exact = 1 / (1 - lam)
        covered += float(r["lo"]) <= exact <= float(r["hi"])
        assert abs(float(r["mean"]) - exact) < 0.15 * exact
    assert covered >= 2


def test_a_ray_cluster_writes_the_same_bytes(jobs1, tmp_path):
    """A local Ray instance started by the command (`--cluster local`): the same tables."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = serq("sweep", MG1, *GRID, "--cluster", "local", "--jobs", "2", "--out", str(tmp_path / "ray"))
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    assert tables(tmp_path / "ray") == tables(jobs1)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"serq sweep --cluster local: {wall:.1f} s wall, {cpu:.1f} s CPU (the command and the children it waited for)")


def test_a_run_time_failure_is_a_row_and_exit_1(tmp_path):
    # lambda 0.1: 200 arrivals take ~2000 time units, past the horizon (R032); lambda 0.5 drains
    out = tmp_path / "fail"
    r = serq("sweep", MG1, "--grid", "lambda=0.1,0.5", "--seeds", "2", "--arrivals", "200", "--horizon", "600",
             "--out", str(out), "--quiet")
    assert r.returncode == 1
    assert r.stdout.startswith("4 runs, 2 failed")
    rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert [(x["lambda"], x["seed"], x["status"]) for x in rows] == \
        [(0.1, 1, "failed"), (0.1, 2, "failed"), (0.5, 1, "ok"), (0.5, 2, "ok")]
    assert "error[R032]" in rows[0]["error"] and rows[0]["error"].startswith(f"{MG1}:")
    assert rows[0]["end"] is None and isinstance(rows[2]["end"], float)
    assert "point 0 (lambda=0.1), seed 1 failed" in r.stderr
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["runs"] == 4 and meta["failed"] == 2
    with open(out / "summary.csv", newline="") as fh:
        end = [x for x in csv.DictReader(fh) if x["stat"] == "end"]
    assert [(x["point"], x["n"], x["mean"] == "") for x in end] == [("0", "0", True), ("1", "2", False)]


@pytest.mark.parametrize("args, message", [
    (["--grid", "rate=1,2"], "the program declares no input rate (its inputs: c2, lambda, mean)"),
    (["--grid", "lambda=0.5,fast"], "--grid lambda: 'fast' is not a number"),
    (["--grid", "lambda="], "--grid lambda: an empty value"),
    (["--grid", "lambda=0.5,,0.6"], "--grid lambda: an empty value"),
    (["--grid", "lambda=0.5,0.5"], "--grid lambda: the value 0.5 is listed twice"),
    (["--grid", "lambda=0.5", "--grid", "lambda=0.6"], "--grid lambda is given twice"),
    (["--grid", "lambda=0.5", "--set", "lambda=0.6"], "input lambda is both swept"),
    (["--grid", "lambda"], "--grid is NAME=V1,V2,..."),
    (["--seeds", "0"], "--seeds is a positive integer"),
    (["--jobs", "1.5"], "--jobs is a positive integer"),
    (["--horizon", "-1"], "--horizon is a positive time"),
])
def test_usage_errors_exit_2(args, message, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["sweep", MG1, "--arrivals", "100", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not out.exists() and os.listdir(tmp_path) == []  # nothing written, no staging left


def test_an_unbounded_run_is_refused_before_any_run(tmp_path, capsys):
    code = cli.main(["sweep", MG1, "--grid", "lambda=0.5", "--out", str(tmp_path / "o")])
    assert code == 2 and "an open workload runs until a finite --horizon" in capsys.readouterr().err


def test_a_bad_out_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    for out, message in ((f, "it exists and is not a directory"),
                         (other, "the directory holds files a sweep does not write (notes.txt)"),
                         (f / "sub", f"{f} is not a directory")):
        code = cli.main(["sweep", MG1, "--arrivals", "100", "--seeds", "1", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
    assert (other / "notes.txt").read_text() == "keep me" and f.read_text() == "x"


def test_a_previous_sweep_is_replaced(tmp_path, capsys):
    out = tmp_path / "again"
    for seeds in ("2", "1"):
        assert cli.main(["sweep", MG1, "--arrivals", "100", "--seeds", seeds, "--jobs", "1", "--quiet",
                         "--out", str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["runs"] == 1
    assert sorted(os.listdir(tmp_path)) == ["again"]  # no staging or old copy left beside it


def test_a_program_error_is_a_diagnostic_before_any_run(tmp_path):
    f = tmp_path / "broken.sq"
    f.write_text('use "std/args";\nfn main() {\n  let rate = args.number("rate", 1);\n  stage svc : fifo;\n'
                 "  workload { arrive poisson(rate); }\n  server {\n    run svc (cost(svc, promt));\n  }\n}\n")
    r = serq("sweep", str(f), "--grid", "rate=1,2", "--arrivals", "10", "--out", str(tmp_path / "o"))
    assert r.returncode == 1
    first, src, caret = r.stderr.splitlines()[:3]
    assert first == f"{f}:7:24: error[L070]: unknown name `promt`"
    assert caret.index("^") == src.index("promt")
    assert not (tmp_path / "o").exists() and r.stdout == ""


def test_a_point_that_does_not_link_is_a_diagnostic(tmp_path):
    # mean -1 is refused by the linker (L082) at the second point: no run starts for the first either
    r = serq("sweep", MG1, "--grid", "mean=1,-1", "--arrivals", "10", "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "error[L082]" in r.stderr.splitlines()[0]
    assert not (tmp_path / "o").exists()


def _killing(monkeypatch, log, times):
    """run_one for (point 0, seed 2) kills its own process on its first `times` tries (all: None).
    The pool's workers are forked from this process, so they run the patched function."""
    real = sweep.run_one

    def run_one(ir_json, settings, seed):
        if seed == 2 and '"lambda":0.3' in ir_json.replace(" ", ""):
            with open(log, "a") as fh:
                fh.write("try\n")
            if times is None or len(open(log).read().split()) <= times:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(ir_json, settings, seed)
    monkeypatch.setattr(sweep, "run_one", run_one)


def test_a_dead_worker_is_retried(jobs1, tmp_path, monkeypatch, capsys):
    _killing(monkeypatch, tmp_path / "log", times=2)
    out = tmp_path / "retried"
    assert cli.main(["sweep", MG1, *GRID, "--jobs", "2", "--quiet", "--out", str(out)]) == 0
    assert (tmp_path / "log").read_text().split() == ["try"] * 3  # died twice, then ran
    assert tables(out) == tables(jobs1)


def test_a_worker_that_always_dies_is_reported_failed(jobs1, tmp_path, monkeypatch, capsys):
    _killing(monkeypatch, tmp_path / "log", times=None)
    out = tmp_path / "dead"
    assert cli.main(["sweep", MG1, *GRID, "--jobs", "2", "--quiet", "--out", str(out)]) == 1
    assert (tmp_path / "log").read_text().split() == ["try"] * 3  # the first try and two retries
    assert capsys.readouterr().out.startswith("9 runs, 1 failed")
    rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    good = [json.loads(x) for x in (jobs1 / "runs.jsonl").read_text().splitlines()]
    assert rows[1]["status"] == "failed" and "worker process died 3 times" in rows[1]["error"]
    assert rows[:1] + rows[2:] == good[:1] + good[2:]  # every other run as without the deaths


def test_a_cluster_address_that_takes_no_connection_is_refused_at_once(tmp_path, capsys):
    t0 = time.monotonic()
    code = cli.main(["sweep", MG1, "--arrivals", "100", "--seeds", "1", "--cluster", "127.0.0.1:1",
                     "--out", str(tmp_path / "o")])
    assert code == 2 and "--cluster 127.0.0.1:1: nothing answers there" in capsys.readouterr().err
    assert time.monotonic() - t0 < 30 and os.listdir(tmp_path) == []


def test_a_ray_node_without_the_trace_gets_a_copy(tmp_path):
    """A Ray task gets the trace's bytes with the IR: on a node where the driver's path does not hold
    them the run reads a copy, and reports what it reports on the driver."""
    from serq import api
    from serq.ir import model as I
    replay = os.path.join(ROOT, "examples", "replay", "vllm_replay.sq")
    ir = sweep._link(api, replay, {"rate": 1.0}, I.Settings(horizon=60))
    prog = I.Program.model_validate_json(ir)
    data = open(prog.workload.trace.file, "rb").read()
    away = str(tmp_path / "elsewhere" / "trace.csv")  # the driver's path, missing on this "node"
    moved = prog.model_copy(update={"workload": prog.workload.model_copy(
        update={"trace": prog.workload.trace.model_copy(update={"file": away})})}).model_dump_json()
    settings = {"horizon": 60.0, "warmup": 0.0, "arrivals": None}
    here = sweep._ray_task(moved, settings, 1, {away: data})
    assert here["status"] == "ok" and here["values"]["sessions.arrived"] > 10
    assert here == sweep.run_one(ir, settings, 1)
    copy = sweep._COPIES[away]
    assert copy != away and open(copy, "rb").read() == data


def test_on_a_terminal_the_progress_is_a_bar_redrawn_in_place(tmp_path):
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "serq.cli", "sweep", MG1, "--grid", "lambda=0.5,0.8", "--seeds", "2",
                          "--arrivals", "200", "--jobs", "1", "--out", str(tmp_path / "o")],
                         stdout=subprocess.PIPE, stderr=slave, cwd=ROOT)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        err += chunk
    out = p.communicate()[0].decode()
    os.close(master)
    assert p.returncode == 0 and out.startswith("4 runs, 0 failed")
    text = err.decode()
    assert "\r[" in text and "] 4/4 runs  0:0" in text and "\n" not in text  # no line of its own
    assert text.endswith("\r")  # the bar is cleared: the shell's prompt starts on a clean line


@pytest.mark.parametrize("module, extra", [("scipy.stats", []), ("scipy.special", []), ("ray", ["--cluster", "local"])])
def test_a_missing_experiments_extra_is_a_usage_error(module, extra, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # `import` of it now fails as if not installed
    code = cli.main(["sweep", MG1, "--arrivals", "100", "--seeds", "1", "--out", str(tmp_path / "o"), *extra])
    assert code == 2 and "pip install 'serq[experiments]'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_percentiles_reach_every_run_of_a_sweep(tmp_path):
    """--percentiles and an objective on a percentile (issue 48): the runs' columns carry them."""
    out = tmp_path / "o"
    assert cli.main(["sweep", MG1, "--arrivals", "200", "--seeds", "2", "--jobs", "1", "--quiet",
                     "--percentiles", "50,95,99.9", "--out", str(out)]) == 0
    with open(out / "runs.csv") as fh:
        header = next(csv.reader(fh))
    assert "client.response.p95" in header and "client.response.p99.9" in header
    assert "client.response.std" in header and "client.response.p90" not in header
    out2 = tmp_path / "f"
    assert cli.main(["sweep", MG1, "--arrivals", "200", "--seeds", "2", "--jobs", "1", "--quiet", "--find",
                     "lambda=0.2:0.8", "--slo", "response.p95<=8", "--out", str(out2)]) == 0
    with open(out2 / "runs.csv") as fh:
        header = next(csv.reader(fh))
    assert "client.response.p95" in header and "client.response.p99" in header
