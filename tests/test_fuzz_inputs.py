"""A fuzz target for what `serq plot` and `serq calibrate` read (issue 50): a report, a dump
(dump.json, requests.csv, the client's samples and the series), a sweep folder (sweep.json,
summary.csv, runs.csv) and a measured-iterations CSV, each made by serQ itself, then corrupted by
Hypothesis: a value replaced (a string for a number, null, ±1e308, inf, NaN, a huge integer, a
list for an object), a key deleted, a cell changed, a row cut short or lengthened, a column named
twice, rows swapped, the file cut at a byte, a byte-order mark, bytes that are not UTF-8.

Each case runs `serq.cli.main` in this process and holds it to docs/reference/cli.md: the exit
status 0, 1 or 2, never 3 (a bug); no traceback and no warning of numpy's or matplotlib's on
stderr (nor one escaping to the warnings machinery); an error leaves the output as it was (no
partial figure or instance file, no temporary file beside it), a success writes a whole one.

The suite's budget is a few cases a target (under ~40 s in all); SERQ_FUZZ_CASES=N runs N a
target and SERQ_FUZZ_SEED=S draws other cases (`make fuzz` style), as the other fuzz tests."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st

from serq.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("scipy")

ROOT = Path(__file__).resolve().parent.parent
VLLM = ROOT / "examples" / "multi-turn" / "vllm.sq"
MEASURED = ROOT / "examples" / "data" / "splitwise_llama-2-70b_h100_tp4.csv"

CASES = os.environ.get("SERQ_FUZZ_CASES")
SEED = os.environ.get("SERQ_FUZZ_SEED")


def fuzz(cases: int):
    """The suite's `cases` (a case that draws a figure takes up to a second), or SERQ_FUZZ_CASES;
    derandomized unless SERQ_FUZZ_SEED says which to draw; no shrinking in the suite's run."""
    def wrap(f):
        f = settings(max_examples=int(CASES or cases), deadline=None, derandomize=SEED is None, database=None,
                     phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if CASES else []),
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])(f)
        return seed(int(SEED or 0))(f)
    return wrap


# a program whose every run fails: its sweep has no statistic (the all-failed sweep of issue 50)
FAILING = """use "std/args";
fn main() {
  let x = args.number("x", 1);
  pool p { cap 5; }
  stage s : fifo;
  workload { arrive batch(3); turn { Size d = ~uniform(-2, -1); } session { turn; } }
  server { hold p (cost(p, 2)) { run s (cost(s, d * x)); } }
}
"""


def serq(*args) -> tuple[int, str, str, list]:
    """serq ARGS in this process: its status, stdout, stderr, and the warnings that escaped it."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue(), [f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A report, a dump, a sweep, an all-failed sweep and a measured CSV, made once."""
    import matplotlib.pyplot  # noqa: F401 -- imported before any case: its import is no case's warning
    import scipy.optimize  # noqa: F401
    d = tmp_path_factory.mktemp("base")
    rc, out, err, _ = serq("run", VLLM, "--horizon", "40", "--warmup", "10", "--json", "--dump", d / "dump", "--quiet")
    assert rc == 0, err
    (d / "r.json").write_text(out)
    rc, _, err, _ = serq("sweep", VLLM, "--grid", "rate=1,2", "--grid", "chunk_cap=256,inf", "--seeds", "2",
                         "--horizon", "20", "--jobs", "1", "--out", d / "sweep", "--quiet")
    assert rc == 0, err
    (d / "failing.sq").write_text(FAILING)
    rc, _, err, _ = serq("sweep", d / "failing.sq", "--grid", "x=1,2", "--seeds", "1", "--jobs", "1",
                         "--out", d / "failed", "--quiet")
    assert rc == 1, err
    lines = MEASURED.read_text().splitlines()
    (d / "m.csv").write_text("\n".join(lines[:41]) + "\n")   # 40 iterations: a fit takes milliseconds
    return d


# ------------------------------------------------------------------ corruptions

NASTY = [None, True, False, "", "x", "1", "Infinity", "-Infinity", "NaN", [], {}, [1, "a"], {"a": None}, 0, -1,
         -0.0, 1e308, -1e308, 1e200, 1e-308, 5e-324, 2 ** 63, 10 ** 400, float("inf"), float("-inf"), float("nan")]
JSON_VALUE = st.one_of(st.sampled_from(NASTY), st.floats(), st.integers(), st.text(max_size=8))
CELLS = ["", " ", "x", "nan", "NaN", "inf", "-inf", "Infinity", "1e308", "-1e308", "1e400", "-1e400", "1e200",
         "-1", "0", "-0", "1e-320", "1_0", "0x10", '"', "\x00", "é", "1" * 400, "9" * 5000, "a,b", "1\n2"]
CELL = st.one_of(st.sampled_from(CELLS), st.floats().map(repr), st.integers().map(str), st.text(max_size=6))


def _paths(doc, at=()):
    """Every place in a JSON document: (path, value)."""
    yield at, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, at + (i,))


def corrupt_json(data, text: str) -> bytes:
    doc = json.loads(text)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        places = list(_paths(doc))
        path, _ = data.draw(st.sampled_from(places), label="at")
        op = data.draw(st.sampled_from(["set", "set", "set", "delete", "whole"]), label="json op")
        if op == "whole" or not path:
            doc = data.draw(JSON_VALUE, label="document")
            continue
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(JSON_VALUE, label="value")
    return json.dumps(doc, indent=1).encode()   # Infinity and NaN as Python writes them


def corrupt_csv(data, text: str) -> bytes:
    rows = list(csv.reader(io.StringIO(text)))
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        if not rows:
            rows = [[]]
        op = data.draw(st.sampled_from(["cell", "cell", "cell", "short", "long", "twice", "drop", "dup", "swap",
                                        "blank"]), label="csv op")
        i = data.draw(st.integers(0, len(rows) - 1), label="row")
        row = rows[i]
        if op == "cell" and row:
            row[data.draw(st.integers(0, len(row) - 1), label="col")] = data.draw(CELL, label="cell")
        elif op == "short" and row:
            del row[data.draw(st.integers(0, len(row) - 1), label="col")]
        elif op == "long":
            row.append(data.draw(CELL, label="cell"))
        elif op == "twice" and len(rows[0]) > 1:   # a column named twice
            a, b = data.draw(st.lists(st.integers(0, len(rows[0]) - 1), min_size=2, max_size=2, unique=True))
            rows[0][b] = rows[0][a]
        elif op == "drop":
            del rows[i]
        elif op == "dup":
            rows.insert(i, list(row))
        elif op == "swap" and len(rows) > 2:   # a series' time going back
            j = data.draw(st.integers(1, len(rows) - 1), label="other row")
            rows[i], rows[j] = rows[j], rows[i]
        elif op == "blank":
            rows.insert(i, [])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode("utf-8", "surrogatepass")


def corrupt(data, path: Path):
    """Corrupt one file in place: its content edited as JSON or CSV, or its bytes."""
    raw = path.read_bytes()
    how = data.draw(st.sampled_from(["content"] * 6 + ["cut", "bom", "bytes", "empty", "gone"]), label="how")
    if how == "content":
        try:
            text = raw.decode()
            new = corrupt_json(data, text) if path.suffix == ".json" else corrupt_csv(data, text)
        except (ValueError, csv.Error):   # corrupted already past reading: cut it instead
            new = raw[:len(raw) // 2]
    elif how == "cut":
        new = raw[:data.draw(st.integers(0, len(raw)), label="cut at")]
    elif how == "bom":
        new = b"\xef\xbb\xbf" + raw
    elif how == "bytes":
        k = data.draw(st.integers(0, len(raw)), label="at")
        new = raw[:k] + data.draw(st.sampled_from([b"\xff\xfe", b"\x80", b"\x00", b"\r", b"\xe9t\xe9"])) + raw[k:]
    elif how == "empty":
        new = b""
    else:
        path.unlink()
        return
    path.write_bytes(new)


def copy(base: Path, name: str, tmp: Path) -> Path:
    src = base / name
    dst = tmp / name
    if dst.exists():
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy(src, dst)
    return dst


def files(d: Path, suffixes=(".json", ".csv")) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file() and p.suffix in suffixes)


# ------------------------------------------------------------------ the verdict

FIGURE = {".png": b"\x89PNG\r\n\x1a\n", ".svg": b"<?xml"}


def judge(data, args, out: Path, kind: str):
    """Run serq ARGS, whose output is `out` (an old one there or not), and hold it to cli.md."""
    old = None
    if out.exists():
        out.unlink()
    if data.draw(st.booleans(), label="an old output there"):
        old = b"the previous output, whole\n"
        out.write_bytes(old)
    rc, stdout, err, escaped = serq(*args)
    case = f"serq {' '.join(map(str, args))}: exit {rc}\n{err}"
    assert rc in (0, 1, 2), case
    assert "Traceback" not in err and "internal error" not in err, case
    assert "Warning" not in err and "warnings.warn" not in err, case
    assert not escaped, f"{case}\nwarnings: {escaped}"
    left = [p.name for p in out.parent.iterdir() if p.name.startswith("." + out.name + ".")]
    assert not left, f"{case}\ntemporary files left: {left}"
    if rc == 0:
        got = out.read_bytes()
        if kind == "figure":
            assert got.startswith(FIGURE[out.suffix]), case
            assert out.suffix != ".png" or got.endswith(b"IEND\xaeB`\x82"), case   # whole
        else:
            inst = json.loads(got)
            assert all(isinstance(v, (int, float)) for v in inst["inputs"].values()), case
    else:
        assert err.strip(), case
        assert (out.read_bytes() if out.exists() else None) == old, f"{case}\nthe output was changed"


# ------------------------------------------------------------------ the targets

@fuzz(16)
@given(data=st.data())
def test_a_corrupted_report(base, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("report")
    rep = copy(base, "r.json", tmp)
    corrupt(data, rep)
    out = tmp / data.draw(st.sampled_from(["r.png", "r.svg"]), label="out")
    judge(data, ["plot", rep, "-o", out], out, "figure")


@fuzz(12)
@given(data=st.data())
def test_a_corrupted_dump(base, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("dump")
    d = copy(base, "dump", tmp)
    for _ in range(data.draw(st.integers(1, 2), label="files")):
        left = [p for p in files(d) if p.name != "requests.csv"]   # what a dump's figure reads
        if left:
            corrupt(data, data.draw(st.sampled_from(left), label="file"))
    out = tmp / "d.png"
    judge(data, ["plot", d, "-o", out], out, "figure")


@fuzz(16)
@given(data=st.data())
def test_a_corrupted_requests_table(base, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("requests")
    d = copy(base, "dump", tmp)
    corrupt(data, d / data.draw(st.sampled_from(["requests.csv"] * 4 + ["dump.json"]), label="file"))
    table = d / "requests.csv"
    if not table.exists():
        table.write_text("")
    columns = ["session", "turn", "start", "ttft", "tpot", "response", "prompt_tokens", "output_tokens", "nope"]
    opts = []
    if data.draw(st.booleans(), label="--x"):
        opts += ["--x", data.draw(st.sampled_from(columns))]
    for y in data.draw(st.lists(st.sampled_from(columns), max_size=2), label="--y"):
        opts += ["--y", y]
    out = tmp / data.draw(st.sampled_from(["q.png", "q.svg"]), label="out")
    judge(data, ["plot", table, "-o", out, *opts], out, "figure")


@fuzz(16)
@given(data=st.data())
def test_a_corrupted_sweep(base, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("sweep")
    d = copy(base, data.draw(st.sampled_from(["sweep", "sweep", "sweep", "failed"]), label="sweep"), tmp)
    for _ in range(data.draw(st.integers(1, 2), label="files")):
        corrupt(data, data.draw(st.sampled_from(files(d)), label="file"))
    opts = []
    if data.draw(st.booleans(), label="options"):
        names = ["rate", "chunk_cap", "x", "nope"]
        stats = ["client.ttft.p99", "client.response.mean", "pools.kv.mean_used", "end", "client.ttft.p95"]
        opts += ["--x", data.draw(st.sampled_from(names))] if data.draw(st.booleans()) else []
        opts += ["--by", data.draw(st.sampled_from(names))] if data.draw(st.booleans()) else []
        for y in data.draw(st.lists(st.sampled_from(stats), max_size=2), label="--y"):
            opts += ["--y", y]
    out = tmp / "s.png"
    judge(data, ["plot", d, "-o", out, *opts], out, "figure")


BOUNDS = ["a=1,0", "a=0,inf", "c0=nan,1", "a=-inf,inf", "a=1e308,inf", "omega=0,1e-300", "beta=-1e308,1e308"]
STARTS = ["a=1e300", "a=0", "c0=-1", "beta=1e-300", "omega=inf"]


@fuzz(30)
@given(data=st.data())
def test_a_corrupted_measured_csv(base, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("measured")
    m = copy(base, "m.csv", tmp)
    corrupt(data, m)
    if not m.exists():
        m.write_text("")
    opts = []
    for b in data.draw(st.lists(st.sampled_from(BOUNDS), max_size=1), label="--bound"):
        opts += ["--bound", b]
    starts = data.draw(st.lists(st.sampled_from(STARTS), max_size=1), label="start values")
    out = tmp / "m.instance.json"
    judge(data, ["calibrate", VLLM, "--measured", m, "-o", out, *opts, *(["--", *starts] if starts else [])], out,
          "instance")
