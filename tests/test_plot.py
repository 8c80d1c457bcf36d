"""serq plot (issue 13, docs/reference/cli.md *serq plot*) and what --dump writes for it: each input
kind gives a valid PNG and SVG, the same bytes twice; the dump's series against a run worked out by
hand; usage errors; and docs/tutorial.md's commands, run as written."""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from test_cli import cli

ROOT = Path(__file__).resolve().parent.parent
VLLM = ROOT / "examples" / "multi-turn" / "vllm.sq"
SVG = "{http://www.w3.org/2000/svg}"

pytest.importorskip("matplotlib")  # the experiments extra, which make install installs

# two holders of 2 units fit a cap of 5, the third waits; one fifo server, 10 s a job:
#   t 0: p used 4, queued 1; s 1 in service, 1 waiting
#   t 10: the first ends, the third is admitted: used 4, queued 0 (s: 1 and 1, unchanged)
#   t 20: the second ends: used 2; s 1 in service, none waiting
#   t 30: the third ends: used 0, s empty; the run drains at 30
TINY = """fn main() {
  pool p { cap 5; }
  stage s : fifo;
  workload { arrive batch(3); }
  server { hold p (cost(p, 2)) { run s (cost(s, 10)); } }
}
"""


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_dump_writes_the_series_a_run_worked_out_by_hand(capsys, tmp_path):
    prog = tmp_path / "tiny.sq"
    prog.write_text(TINY)
    d = tmp_path / "d"
    rc, out, err = cli(capsys, "run", str(prog), "--json", "--dump", str(d))
    assert rc == 0, err
    rep = json.loads(out)
    assert sorted(os.listdir(d)) == ["client_response.csv", "dump.json", "gauge", "pool", "requests.csv", "stage"]
    pool = _rows(d / "pool" / "p.csv")
    assert pool[0] == ["time", "used", "queued"]
    series = [tuple(map(float, r)) for r in pool[1:]]
    assert series == [(0, 4, 1), (10, 4, 0), (20, 2, 0), (30, 0, 0)]
    assert _rows(d / "stage" / "s.csv") == [["time", "running", "waiting"], ["0.0", "1.0", "1.0"],
                                            ["20.0", "1.0", "0.0"], ["30.0", "0.0", "0.0"]]
    meta = json.loads((d / "dump.json").read_text())
    assert meta == {"program": str(prog), "seed": 1, "horizon": None, "warmup": 0.0, "end": 30.0, "inputs": {},
                    "pools": {"p": 5.0}, "engines": []}
    # the report's figures from the series: max and the time average over [warmup, end]
    p = rep["pools"]["p"]
    assert p["max_used"] == max(u for _, u, _ in series)
    area = sum(u * (t1 - t0) for (t0, u, _), (t1, _, _) in zip(series, series[1:]))
    assert p["mean_used"] == pytest.approx(area / rep["end"]) == pytest.approx(100 / 30)


def test_dump_series_agree_with_the_report_of_a_real_engine(capsys, tmp_path):
    d = tmp_path / "d"
    rc, out, err = cli(capsys, "run", str(VLLM), "--json", "--horizon", "300", "--warmup", "50", "--dump", str(d))
    assert rc == 0, err
    rep = json.loads(out)
    meta = json.loads((d / "dump.json").read_text())
    assert (meta["seed"], meta["horizon"], meta["warmup"], meta["end"]) == (1, 300.0, 50.0, rep["end"])
    assert meta["engines"] == ["vllm"] and meta["inputs"]["chunk_cap"] == "Infinity"   # vLLM's default: none
    for name, p in rep["pools"].items():
        rows = [tuple(map(float, r)) for r in _rows(d / "pool" / f"{name}.csv")[1:]]
        times = [r[0] for r in rows]
        assert times == sorted(times) and times[-1] <= rep["end"]
        # max_used is over the whole run; mean_used the time average from the warm-up to the end
        assert max(r[1] for r in rows) == p["max_used"]
        nxt = times[1:] + [rep["end"]]
        area = math.fsum(u * max(0.0, min(t1, rep["end"]) - max(t0, 50.0)) for (t0, u, _), t1 in zip(rows, nxt))
        assert area / (rep["end"] - 50.0) == pytest.approx(p["mean_used"], rel=1e-9)
    # the engine's running.count never exceeds max_num_seqs, and it is the reqs pool's holders
    eng = [tuple(map(float, r)) for r in _rows(d / "stage" / "vllm.csv")[1:]]
    assert max(r[1] for r in eng) <= 256 and min(r[2] for r in eng) >= 0
    seqs = {float(t): float(v) for t, v in _rows(d / "gauge" / "seqs.csv")[1:]}
    held = {}
    for t, r, _ in eng:
        held[t] = r
    # at each change of the gauge holders(reqs) the engine's residents are as many
    last = 0.0
    merged = sorted(set(seqs) | set(held))
    g = e = 0.0
    for t in merged:
        g = seqs.get(t, g)
        e = held.get(t, e)
        assert g == e, (t, g, e)
        last = t
    assert last <= rep["end"]


def test_a_run_without_dump_records_nothing(tmp_path):
    from serq import api
    prog = api.load_text(TINY)
    rep = api.run(prog)
    assert rep.pop("_sim").recorder is None
    rep2 = api.run(prog, record=True)
    sim = rep2.pop("_sim")
    assert sim.recorder is not None and rep2 == rep  # recording changes no figure


# ------------------------------------------------------------------ the figures


def _svg_ok(path):
    root = ET.parse(path, parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))).getroot()
    assert root.tag == f"{SVG}svg"
    return root


def _png_ok(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"matplotlib version" not in data
    return data


def _axes(root):
    return [g for g in root.iter(f"{SVG}g") if re.fullmatch(r"axes_\d+", g.get("id", ""))]


def _texts(root):
    """The text of every text group: matplotlib writes each as <!-- text --> before its glyphs."""
    return [c.text.strip() for c in root.iter() if c.tag is ET.Comment and c.text]


def _twice(capsys, src, out, *more):
    """Plot src to out twice: the same bytes."""
    rc, _, err = cli(capsys, "plot", str(src), "-o", str(out), *more)
    assert rc == 0, err
    assert err == f"{src}: plotted {out}\n"
    first = Path(out).read_bytes()
    rc, _, err = cli(capsys, "plot", str(src), "-o", str(out), *more)
    again = Path(out).read_bytes()
    assert rc == 0, err
    if again != first:
        at = next(i for i, (a, b) in enumerate(zip(first, again)) if a != b)
        pytest.fail(f"{out}: not the same bytes twice, from byte {at}: {first[at - 200:at + 60]!r} "
                    f"then {again[at - 200:at + 60]!r}")
    return first


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    base = tmp_path_factory.mktemp("dumped")
    d = base / "run"
    proc = subprocess.run([sys.executable, "-m", "serq.cli", "run", str(VLLM), "--horizon", "200", "--warmup", "40",
                           "--json", "--dump", str(d)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    (base / "r.json").write_text(proc.stdout)
    return base


def test_plot_a_report(capsys, dumped, tmp_path):
    _twice(capsys, dumped / "r.json", tmp_path / "r.png")
    _png_ok(tmp_path / "r.png")
    _twice(capsys, dumped / "r.json", tmp_path / "r.svg")
    root = _svg_ok(tmp_path / "r.svg")
    assert len(_axes(root)) == 5  # ttft, tpot, response; pools; stages
    texts = _texts(root)
    for want in ("p99 ", "pool kv", "stage vllm", "% of the pool's cap", "not a full CDF"):
        assert any(want in t for t in texts), want
    # each stage's figure as the text report counts it: the engine's completed are runs; the tool's
    # think time (a delay) is the time a job is present, not a load, so it is no bar of utilisation
    rep = json.loads((dumped / "r.json").read_text())
    assert rep["stages"]["tool"]["kind"] == "delay"
    assert any(re.fullmatch(r"[\d.]+%  \([\d,]+ runs completed\)", t) for t in texts), texts
    assert "stage tool" not in texts
    at = texts.index("stages: utilisation")  # the title, a line a text
    title = " ".join(texts[at:at + 3])
    tool = 100 * rep["stages"]["tool"]["utilisation"]
    assert title == ("stages: utilisation delay, a think time, not a server's load (not drawn): "
                                       f"tool, a job present {tool:.1f}% of the time "
                                       f"({rep['stages']['tool']['completed']:,} jobs)"), title
    # the default output: beside the input, the input's name with .png
    rc, _, err = cli(capsys, "plot", str(dumped / "r.json"))
    assert rc == 0 and (dumped / "r.png").is_file()


def test_plot_a_dump(capsys, dumped, tmp_path):
    _twice(capsys, dumped / "run", tmp_path / "d.png")
    _png_ok(tmp_path / "d.png")
    _twice(capsys, dumped / "run", tmp_path / "d.svg")
    root = _svg_ok(tmp_path / "d.svg")
    # 3 CDFs; engine vllm, pool kv, stage tool: pool reqs is the engine's running and waiting, gauge
    # seqs its running, gauge kv_used pool kv's used, each drawn once and named in its legend
    assert len(_axes(root)) == 3 + 3
    texts = _texts(root)
    for want in ("warm-up", "running (running.count) = used(reqs) = gauge seqs",
                 "waiting (waiting.count) = queued(reqs)", "pool kv: used (cap 65,536)", "used = gauge kv_used",
                 "time (s)", "KV tokens", "requests", "jobs"):
        assert any(want in t for t in texts), want
    assert not any(t.startswith(("gauge ", "pool reqs")) for t in texts)
    rc, _, err = cli(capsys, "plot", str(dumped / "run") + "/", "--format", "svg")
    assert rc == 0 and (dumped / "run.svg").is_file(), err


def _requests_copy(dumped, d: Path, blank: int = 0) -> tuple[Path, list[list[str]]]:
    """The dumped run's requests.csv and dump.json in d; the first `blank` rows' prompt and output
    cells emptied, as a turn not run on an engine has them."""
    d.mkdir()
    rows = _rows(dumped / "run" / "requests.csv")
    head = rows[0]
    for r in rows[1:1 + blank]:
        r[head.index("prompt_tokens")] = r[head.index("output_tokens")] = ""
    with open(d / "requests.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    shutil.copy(dumped / "run" / "dump.json", d / "dump.json")
    return d / "requests.csv", rows


def test_plot_requests_ttft_against_prompt_tokens(capsys, dumped, tmp_path):
    """`serq plot DIR/requests.csv`: a point per answered request, its time to first token against
    its prompt's tokens, each axis in words with its unit; the same bytes twice; beside the table by
    default, where the next --dump DIR replaces it with the rest."""
    src, rows = _requests_copy(dumped, tmp_path / "d")
    head, body = rows[0], rows[1:]
    assert len(body) > 100 and all(r[head.index("prompt_tokens")] for r in body)
    _twice(capsys, src, tmp_path / "q.svg")
    texts = _texts(_svg_ok(tmp_path / "q.svg"))
    for want in ("time to first token against prompt tokens computed", f"{len(body):,} requests drawn",
                 "prompt tokens computed (tokens)", "time to first token (s)", "vllm.sq: each answered request, seed 1"):
        assert any(want in t for t in texts), want
    from serq.exp import plot
    plt = plot._pyplot()
    fig = plot._requests_figure(plt, str(src), None, None)
    try:
        (ax,) = fig.axes
        pts = ax.collections[0].get_offsets()
        assert len(pts) == len(body)
        assert [tuple(p) for p in pts] == [(float(r[head.index("prompt_tokens")]), float(r[head.index("ttft")]))
                                           for r in body]
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("prompt tokens computed (tokens)", "time to first token (s)")
        assert ax.get_title() == f"time to first token against prompt tokens computed\n{len(body):,} requests drawn"
    finally:
        plt.close(fig)
    rc, _, err = cli(capsys, "plot", str(src))
    assert rc == 0 and err == f"{src}: plotted {tmp_path / 'd' / 'requests.png'}\n", err
    _png_ok(tmp_path / "d" / "requests.png")
    from serq.interp.dump import foreign
    assert foreign(str(tmp_path / "d")) is None  # still a dump: --dump d may replace it


def test_plot_requests_leaves_out_rows_without_a_prompt_and_says_so(capsys, dumped, tmp_path):
    src, rows = _requests_copy(dumped, tmp_path / "d", blank=7)
    n = len(rows) - 1
    from serq.exp import plot
    plt = plot._pyplot()
    fig = plot._requests_figure(plt, str(src), None, None)
    try:
        (ax,) = fig.axes
        assert len(ax.collections[0].get_offsets()) == n - 7
        assert ax.get_title().replace("\n", " ") == (f"time to first token against prompt tokens computed {n - 7:,} "
                                                    f"requests drawn of {n:,}; left out: 7 without prompt tokens "
                                                    "computed (not run on an engine)")
    finally:
        plt.close(fig)
    # --x and --y choose the columns, a panel per --y, each drawing the rows that have both numbers
    fig = plot._requests_figure(plt, str(src), "output_tokens", ["response", "tpot"])
    try:
        first, second = fig.axes
        head = rows[0]
        have = [r for r in rows[1:] if r[head.index("output_tokens")]]
        assert len(first.collections[0].get_offsets()) == len(have)
        assert len(second.collections[0].get_offsets()) == sum(1 for r in have if r[head.index("tpot")])
        assert [ax.get_ylabel() for ax in fig.axes] == ["response time (s)", "time per output token (s)"]
        assert first.get_xlabel() == "output length (tokens)"
    finally:
        plt.close(fig)


def test_plot_requests_of_a_program_without_engines(capsys, tmp_path):
    """No turn runs on an engine: no prompt to draw against, a usage error that says so and what
    else to draw; --x start --y response draws every request."""
    prog = tmp_path / "tiny.sq"
    prog.write_text(TINY)
    rc, _, err = cli(capsys, "run", str(prog), "--json", "--dump", str(tmp_path / "d"))
    assert rc == 0, err
    src = tmp_path / "d" / "requests.csv"
    rc, out, err = cli(capsys, "plot", str(src))
    assert rc == 2 and out == ""
    assert f"serq: error: {src}: nothing to draw: time to first token: 0 requests drawn of 3; left out: 3 without " \
        "prompt tokens computed (not run on an engine), 3 without time to first token (no first token); draw other " \
        "columns, such as --x start --y response" in err, err
    _twice(capsys, src, tmp_path / "r.svg", "--x", "start", "--y", "response")
    assert any(t.startswith("3 requests drawn") for t in _texts(_svg_ok(tmp_path / "r.svg")))


def make_sweep(d: Path, seeds=(1, 2, 3)) -> Path:
    """A sweep directory as docs/notes' contract has serq sweep write it: grid rate x chunk_cap,
    made-up numbers whose mean across seeds is known."""
    d.mkdir(parents=True)
    grid = {"rate": [0.5, 1.0, 1.5, 2.0], "chunk_cap": [256, 2048]}
    stats = ["client.ttft.p99", "client.tpot.p99", "client.response.mean", "pools.kv.mean_used"]
    runs, summary, point = [], [], 0
    for rate in grid["rate"]:
        for cap in grid["chunk_cap"]:
            vals = {}
            for seed in seeds:
                row = {"point": point, "rate": rate, "chunk_cap": cap, "seed": seed, "status": "ok", "error": "",
                       "end": 300.0}
                for k, st in enumerate(stats):
                    row[st] = (k + 1) * 0.01 * rate ** 3 * (1 + cap / 4096) * (1 + 0.05 * (seed - 2))
                    vals.setdefault(st, []).append(row[st])
                runs.append(row)
            for st, vs in [("end", [300.0] * len(seeds))] + list(vals.items()):
                m = sum(vs) / len(vs)
                ci = 4.302652729911275 * (sum((v - m) ** 2 for v in vs) / (len(vs) - 1)) ** 0.5 / len(vs) ** 0.5
                summary.append({"point": point, "rate": rate, "chunk_cap": cap, "stat": st, "n": len(vs),
                                "mean": m, "ci95": ci, "lo": m - ci, "hi": m + ci})
            point += 1
    cols = list(runs[0])
    with open(d / "runs.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, cols)
        w.writeheader()
        w.writerows(runs)
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    with open(d / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    (d / "sweep.json").write_text(json.dumps({
        "program": "examples/multi-turn/vllm.sq", "grid": grid, "seeds": list(seeds),
        "settings": {"horizon": 300, "warmup": 60, "arrivals": None}, "inputs": {}, "runs": len(runs),
        "failed": 0, "columns": cols, "serq": "0.1.0"}))
    return d


def test_plot_a_sweep(capsys, tmp_path):
    sw = make_sweep(tmp_path / "sweep-vllm")
    _twice(capsys, sw, tmp_path / "s.png")
    _png_ok(tmp_path / "s.png")
    _twice(capsys, sw, tmp_path / "s.svg")
    root = _svg_ok(tmp_path / "s.svg")
    axes = _axes(root)
    assert len(axes) == 3  # the default statistics: ttft p99, tpot p99, response mean
    texts = _texts(root)
    for want in ("chunk_cap = 256", "chunk_cap = 2048", "time to first token, p99", "seconds",
                 "vllm.sq: sweep over rate", "95% interval"):
        assert any(want in t for t in texts), want
    # each axes: two lines (one per chunk cap), each with its band
    for ax in axes:
        lines = [g for g in ax.iter(f"{SVG}g") if g.get("id", "").startswith("line2d_")
                 and any(p.get("style", "").find("stroke-width: 1.5") >= 0 for p in g.iter(f"{SVG}path"))]
        bands = [g for g in ax.iter(f"{SVG}g") if g.get("id", "").startswith("FillBetweenPolyCollection")
                 or g.get("id", "").startswith("PolyCollection")]
        assert len(lines) == 2 and len(bands) == 2, (len(lines), len(bands))
    # another statistic, the other input on x: one panel, one line per rate
    _twice(capsys, sw, tmp_path / "t.svg", "--x", "chunk_cap", "--y", "pools.kv.mean_used")
    root = _svg_ok(tmp_path / "t.svg")
    assert len(_axes(root)) == 1
    texts = _texts(root)
    assert sum(t.startswith("rate = ") for t in texts) == 4
    assert "pool kv: mean used (time average)" in texts and "KV tokens" in texts
    rc, _, err = cli(capsys, "plot", str(sw))
    assert rc == 0 and (tmp_path / "sweep-vllm.png").is_file(), err


def test_a_sweep_without_tokens_plots_its_response(capsys, tmp_path):
    """M/M/1 has no token, so no ttft nor tpot: the default panels are the response's mean and p99,
    not empty ones; one line a panel needs no legend."""
    out = tmp_path / "sw"
    rc, _, err = cli(capsys, "sweep", str(ROOT / "examples" / "single-turn" / "mg1.sq"), "--grid", "lambda=0.5,0.8",
                     "--seeds", "2", "--arrivals", "2000", "--jobs", "1", "--quiet", "--out", str(out))
    assert rc == 0, err
    _twice(capsys, out, tmp_path / "m.svg")
    root = _svg_ok(tmp_path / "m.svg")
    assert len(_axes(root)) == 2
    texts = _texts(root)
    assert "response time, mean" in texts and "response time, p99" in texts
    assert not any("no run has this statistic" in t or "first token" in t for t in texts)
    assert texts.count("response time, mean") == 1  # its panel's title, and no legend entry


# ------------------------------------------------------------------ series once, units, words

UNITS = {"seconds", "samples", "requests", "KV tokens", "jobs", "sessions", "holds", "cache entries",
         "fraction of the time busy", "fraction of the time a job is present", "0 or 1", "0 or 1 (its mean: a fraction)", "fraction of samples ≤ x", "runs",
         "requests per second", "tokens per second", "tokens", "fraction of tokens"}
COLUMN = re.compile(r"\b(client|pools|stages|sessions|gauges|observe)\.[\w\[\]]+\.\w+")


def _figure(kind, *args):
    from serq.exp import plot
    plt = plot._pyplot()
    fig = plot._dump_figure(plt, *args) if kind == "dump" else plot._sweep_figure(plt, *args)
    return plt, fig


def _check_axes(fig, what):
    """Every panel's y-axis says a unit, and its title reads as words, no summary column."""
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        title, unit = ax.get_title(), ax.get_ylabel()
        assert unit in UNITS or unit.endswith("; queued: holds"), f"{what}: {title!r} has the y-axis {unit!r}"
        assert title and not COLUMN.search(title), f"{what}: the title {title!r} names a column"


def test_a_dump_draws_each_series_once_each_axis_with_its_unit(dumped):
    from serq.exp import plot
    d = dumped / "run"
    meta = json.loads((d / "dump.json").read_text())
    units = plot.Units(meta["program"], meta["inputs"])
    assert units.pools == {"kv": "KV tokens", "reqs": "requests"}
    assert units.gauges == {"kv_used": ("KV tokens", "used(kv)"), "seqs": ("requests", "holders(reqs)")}
    panels, repeats = plot._time_panels(str(d), meta, units)
    series = [plot._steps(t, v) for p in panels for _, t, v, _, _ in p["lines"]]
    assert len(series) == len(set(series)) == 4  # running, waiting, kv used, tool in service
    assert [p["title"] for p in panels] == ["engine vllm: requests running and waiting",
                                            "pool kv: used (cap 65,536)", "stages: jobs in service"]
    assert [p["ylabel"] for p in panels] == ["requests", "KV tokens", "jobs"]
    assert sorted(repeats) == ["gauge kv_used = used(kv)", "gauge seqs = vllm: running.count",
                               "queued(reqs) = vllm: waiting.count", "used(reqs) = vllm: running.count"]
    plt, fig = _figure("dump", str(d))
    try:
        _check_axes(fig, "dump")
    finally:
        plt.close(fig)


def test_a_gauge_that_repeats_nothing_is_drawn_with_its_expression_and_unit(capsys, tmp_path):
    prog = tmp_path / "g.sq"
    prog.write_text(TINY.replace("server {", "gauge two = used(p) == 2;\n  gauge twice = used(p) + used(p);\n"
                                                 "  server {"))
    rc, _, err = cli(capsys, "run", str(prog), "--dump", str(tmp_path / "d"), "--json")
    assert rc == 0, err
    from serq.exp import plot
    meta = json.loads((tmp_path / "d" / "dump.json").read_text())
    panels, _ = plot._time_panels(str(tmp_path / "d"), meta, plot.Units(meta["program"], meta["inputs"]))
    gauges = {p["title"]: p["ylabel"] for p in panels if p["title"].startswith("gauge")}
    assert gauges == {"gauge two = used(p) == 2": "0 or 1 (its mean: a fraction)",
                      "gauge twice = used(p) + used(p)": "units of pool p"}


def test_names_and_units_of_every_statistic_of_a_report(dumped):
    """Every number a report has, as a sweep's summary names it, in words and with a unit."""
    from serq.exp import plot
    rep = json.loads((dumped / "r.json").read_text())
    meta = json.loads((dumped / "run" / "dump.json").read_text())
    units = plot.Units(meta["program"], meta["inputs"])
    stats = []

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and not path.startswith("claims."):
            stats.append(path)
    # (vllm_bench repeats the client's figures under vLLM's names: no column of a sweep)
    walk({k: v for k, v in rep.items() if k not in ("seed", "horizon", "warmup", "inputs", "program", "vllm_bench")},
         "")
    assert "client.ttft.p99" in stats and "pools.kv.mean_used" in stats and "gauges.seqs.mean" in stats
    for stat in stats:
        title, unit = plot._describe(stat, units)
        assert not COLUMN.search(title) and "." not in title.replace("p50", ""), (stat, title)
        assert unit in UNITS or unit in ("units of pool kv",) or unit.startswith("0 or 1"), (stat, unit)
    assert plot._describe("client.ttft.p99", units) == ("time to first token, p99", "seconds")
    assert plot._describe("pools.kv.mean_used", units) == ("pool kv: mean used (time average)", "KV tokens")
    assert plot._describe("stages.vllm.utilisation", units) == ("stage vllm: utilisation", "fraction of the time busy")
    assert plot._describe("stages.vllm.completed", units) == ("stage vllm: runs completed", "runs")
    assert plot._describe("stages.tool.utilisation", units) == ("stage tool: a job present (a delay: not a server's load)",
                                                                "fraction of the time a job is present")
    assert plot._describe("stages.tool.completed", units) == ("stage tool: jobs completed", "jobs")
    assert plot._describe("observe.hit.mean", units) == ("observed hit, mean", "0 or 1 (its mean: a fraction)")
    assert plot._describe("observe.prefill_tokens.p99", units) == ("observed prefill_tokens, p99", "tokens")


def test_a_sweep_reads_an_input_named_like_a_statistic_by_its_position(tmp_path):
    """summary.csv names an input `mean` (mg1.sq's) and the statistic's mean alike: the input is the
    column sweep.json's grid places, after `point`; the statistic's mean the one after `n`."""
    d = tmp_path / "sw"
    d.mkdir()
    rows = [["point", "mean", "stat", "n", "mean", "ci95", "lo", "hi"]]
    for p, m in enumerate([0.5, 0.8]):
        for stat, v in [("client.response.mean", 10.0 * (p + 1)), ("client.response.p99", 50.0 * (p + 1)),
                        ("client.ttft.p99", "")]:  # no token: an empty mean
            rows.append([p, m, stat, 2, v, 1.0 if v != "" else "", v and v - 1, v and v + 1])
    with open(d / "summary.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    (d / "sweep.json").write_text(json.dumps({"program": "examples/single-turn/mg1.sq", "grid": {"mean": [0.5, 0.8]},
                                              "seeds": [1, 2], "settings": {}, "inputs": {}}))
    plt, fig = _figure("sweep", str(d), None, None, None)
    try:
        got = {ax.get_title(): [tuple(ln.get_xdata()), tuple(ln.get_ydata())] for ax in fig.axes for ln in ax.lines}
        _check_axes(fig, "sweep over mean")
    finally:
        plt.close(fig)
    assert got == {"response time, mean": [(0.5, 0.8), (10.0, 20.0)],
                   "response time, p99": [(0.5, 0.8), (50.0, 100.0)]}
    # a summary whose columns are not where the grid says is refused, not misread
    rows[0][1:3] = ["stat", "mean"]
    with open(d / "summary.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    from serq.exp import plot
    with pytest.raises(plot.UsageError, match="its columns are not point, mean, stat, n, mean"):
        _figure("sweep", str(d), None, None, None)


def test_the_sweep_figure_names_its_panels_in_words(tmp_path):
    sw = make_sweep(tmp_path / "sw")
    plt, fig = _figure("sweep", str(sw), None, ["client.ttft.p99", "pools.kv.mean_used", "client.response.mean"],
                       None)
    try:
        _check_axes(fig, "sweep")
        assert [ax.get_title() for ax in fig.axes[:3]] == ["time to first token, p99",
                                                           "pool kv: mean used (time average)", "response time, mean"]
        assert [ax.get_ylabel() for ax in fig.axes[:3]] == ["seconds", "KV tokens", "seconds"]
    finally:
        plt.close(fig)


def test_plot_usage_errors(capsys, dumped, tmp_path):
    sw = make_sweep(tmp_path / "sw")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    cases = [
        ([], "the following arguments are required: INPUT"),
        ([str(tmp_path / "nothere")], f"{tmp_path / 'nothere'}: no such file or directory"),
        ([str(tmp_path / "empty")], "neither a sweep directory (sweep.json) nor a dump directory (dump.json)"),
        ([str(tmp_path / "bad.json")], "not a report (JSON)"),
        ([str(sw), "--x", "blocks"], "--x blocks: not a grid input of this sweep (rate, chunk_cap)"),
        ([str(sw), "--by", "blocks"], "--by blocks: not a grid input of this sweep (rate, chunk_cap)"),
        ([str(sw), "--y", "client.ttft.p95"], "--y client.ttft.p95: not a statistic of this sweep's summary.csv"),
        ([str(dumped / "r.json"), "--x", "rate"], "--x applies to a sweep directory"),
        ([str(dumped / "run" / "requests.csv"), "--by", "turn"], "--by applies to a sweep directory; "),
        ([str(dumped / "run" / "requests.csv"), "--x", "prompt"],
         "--x prompt: not a column of requests.csv (session, turn, start, first_token, end, ttft, "),
        ([str(dumped / "run" / "requests.csv"), "--y", "ttft", "--y", "e2e"], "--y e2e: not a column of requests.csv"),
        ([str(dumped / "run" / "client_ttft.csv")],
         "client_ttft.csv: no column prompt_tokens: not the requests.csv of serq run --dump (its columns: value)"),
        ([str(sw), "-o", str(tmp_path / "s.pdf")], "the figure's name ends in .png or .svg"),
        ([str(sw), "-o", str(tmp_path / "s.png"), "--format", "svg"], "--format says svg"),
        ([str(sw), "--format", "jpg"], "invalid choice: 'jpg'"),
    ]
    for args, says in cases:
        rc, out, err = cli(capsys, "plot", *args)
        assert rc == 2 and says in err and "Traceback" not in err, (args, err)
        assert err.rstrip().splitlines()[-1].startswith("serq: error: "), err


def test_plot_without_matplotlib_is_a_usage_error(capsys, tmp_path, monkeypatch):
    sw = make_sweep(tmp_path / "sw")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    rc, out, err = cli(capsys, "plot", str(sw))
    assert rc == 2 and "pip install 'serq[experiments]'" in err


def test_serq_starts_without_matplotlib():
    code = "import sys, serq.cli; serq.cli._parser(); print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ the tutorial


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```shell\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.campaign
def test_the_tutorial_runs_as_written(tmp_path):
    """docs/tutorial.md's shell blocks, in order, in a fresh directory holding the program and a
    .venv/bin/serq that is this serq: each succeeds and the plots it shows appear (~35 s of CPU,
    most of it the sweep on every core)."""
    text = (ROOT / "docs" / "tutorial.md").read_text()
    blocks = _shell_blocks(text)
    assert len(blocks) >= 5 and any("serq sweep" in b for b in blocks) and any("serq plot" in b for b in blocks)
    (tmp_path / "examples" / "multi-turn").mkdir(parents=True)
    shutil.copy(VLLM, tmp_path / "examples" / "multi-turn" / "vllm.sq")
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "serq").write_text(f"#!/bin/sh\nexec {sys.executable} -m serq.cli \"$@\"\n")
    (bin_ / "serq").chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for block in blocks:
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=tmp_path, capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, (block, proc.stderr)
    for png in ("run-rate2.png", "run-rate2/requests.png", "sweep-chunk.png"):
        _png_ok(tmp_path / png)
    # the images the page shows are those commands' plots, committed
    for img in re.findall(r"\]\((img/[^)]+\.png)\)", text):
        _png_ok(ROOT / "docs" / img)
    # the page's printed figures are this run's: the sweep's summary has them
    rows = list(csv.DictReader(open(tmp_path / "sweep-chunk" / "summary.csv")))
    tpot = {(r["rate"], r["chunk_cap"]): float(r["mean"]) for r in rows if r["stat"] == "client.tpot.p99"}
    assert f"{tpot[('2', '256')] * 1000:.1f} ms with 256 against {tpot[('2', '2048')] * 1000:.1f} ms" in text


# ------------------------------------------------------------------ corrupted inputs (issue 50)

def _plot(capsys, *args):
    """serq plot ARGS: its status and stderr, and the warnings that escaped it (none may)."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _, err = cli(capsys, "plot", *map(str, args))
    assert "Warning" not in err and not caught, (err, [str(w.message) for w in caught])
    return rc, err


def _report(dumped, tmp_path, edit, name="r.json"):
    rep = json.loads((dumped / "r.json").read_text())
    edit(rep)
    path = tmp_path / name
    path.write_text(json.dumps(rep))   # inf and NaN as Python writes them: Infinity, NaN
    return path


def _set(path, value):
    def edit(doc):
        *head, last = path
        for k in head:
            doc = doc[k]
        doc[last] = value
    return edit


@pytest.mark.parametrize("path,value,says", [
    (("client", "ttft", "mean"), "0.5", "client.ttft.mean is '0.5': not a number"),
    (("stages", "vllm", "utilisation"), "high", "stages.vllm.utilisation is 'high': not a number"),
    (("client", "ttft", "p50"), 1e308, "client.ttft.p50 is 1e+308: beyond what a figure's axis can draw"),
    (("client", "tpot", "min"), -1e308, "client.tpot.min is -1e+308: beyond what a figure's axis can draw"),
    (("client", "ttft", "p99"), math.inf, "client.ttft.p99 is inf: not a finite number"),
    (("client", "response", "max"), math.nan, "client.response.max is nan: not a finite number"),
    (("client", "ttft", "count"), 2.5, "client.ttft.count is 2.5: not a whole number"),
    (("pools", "kv"), [1, 2], "pools.kv is a list: not an object"),
    (("pools", "kv", "cap"), {"a": 1}, "pools.kv.cap is an object: not a number"),
    (("stages", "vllm", "kind"), 3, "stages.vllm.kind is 3: not a string"),
    (("seed",), "one", "seed is 'one': not a number"),
    (("end",), True, "end is true: not a number"),
])
def test_a_report_with_a_bad_field_is_refused_naming_the_file_and_field(capsys, dumped, tmp_path, path, value,
                                                                         says):
    src = _report(dumped, tmp_path, _set(path, value))
    rc, err = _plot(capsys, src, "-o", tmp_path / "r.png")
    assert rc == 2 and f"serq: error: {src}: {says}" in err, err
    assert not (tmp_path / "r.png").exists()


def test_huge_but_finite_values_still_plot(capsys, dumped, tmp_path):
    def edit(rep):
        rep["client"]["ttft"].update({"min": -1e200, "p50": 1e150, "max": 1e200})
        rep["client"]["tpot"].update({"min": 1e-300, "max": 1e-200})   # 100 decades: a log axis at most
        rep["pools"]["kv"].update({"cap": 1e-300, "mean_used": 1e300})  # a share of 1e602 %: the bar at the end
        rep["stages"]["vllm"]["utilisation"] = 1e300
    src = _report(dumped, tmp_path, edit)
    for out in (tmp_path / "r.png", tmp_path / "r.svg"):
        rc, err = _plot(capsys, src, "-o", out)
        assert rc == 0, err
    _png_ok(tmp_path / "r.png")
    _svg_ok(tmp_path / "r.svg")


def _copy_dump(dumped, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(dumped / "run", d)
    return d


def _edit_csv(path, row, column, value):
    rows = _rows(path)
    rows[row][rows[0].index(column)] = value
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)


@pytest.mark.parametrize("value,says", [
    ("1e308", "requests.csv:3: ttft is '1e308': beyond what a figure's axis can draw (at most 1e+200 in magnitude)"),
    ("-1e308", "requests.csv:3: ttft is '-1e308': beyond what a figure's axis can draw"),
    ("inf", "requests.csv:3: ttft is 'inf', not a finite number"),
    ("fast", "requests.csv:3: ttft is 'fast', not a number"),
])
def test_a_requests_table_with_a_bad_value_is_refused_naming_the_line(capsys, dumped, tmp_path, value, says):
    d = _copy_dump(dumped, tmp_path)
    _edit_csv(d / "requests.csv", 2, "ttft", value)
    rc, err = _plot(capsys, d / "requests.csv", "-o", tmp_path / "q.png")
    assert rc == 2 and says in err and str(d / "requests.csv") in err, err
    assert not (tmp_path / "q.png").exists()
    _edit_csv(d / "requests.csv", 2, "ttft", "1e150")   # huge, finite, drawable: drawn
    rc, err = _plot(capsys, d / "requests.csv", "-o", tmp_path / "q.png")
    assert rc == 0, err
    _png_ok(tmp_path / "q.png")


def test_a_requests_table_with_a_short_row_or_a_column_twice(capsys, dumped, tmp_path):
    d = _copy_dump(dumped, tmp_path)
    rows = _rows(d / "requests.csv")
    with open(d / "requests.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0], rows[1][:4]] + rows[2:])
    rc, err = _plot(capsys, d / "requests.csv", "-o", tmp_path / "q.png")
    assert rc == 2 and f"{d / 'requests.csv'}:2: 4 field(s) where the header has {len(rows[0])}" in err, err
    with open(d / "requests.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0][:-1] + ["ttft"]] + rows[1:])
    rc, err = _plot(capsys, d / "requests.csv", "-o", tmp_path / "q.png")
    assert rc == 2 and f"{d / 'requests.csv'}:1: the header names `ttft` twice" in err, err


@pytest.mark.parametrize("field,value,says", [
    ("warmup", "40", "dump.json: warmup is '40': not a number"),
    ("end", "200", "dump.json: end is '200': not a number"),
    ("end", None, "dump.json: end is null: not a number"),
    ("end", -1, "dump.json: end is -1: below 0"),
    ("inputs", [1], "dump.json: inputs is a list: not an object"),
    ("engines", "vllm", "dump.json: engines is 'vllm': not a list of engines' names"),
    ("pools", {"kv": "big"}, "dump.json: pools.kv is 'big': not a number"),
])
def test_a_dump_with_a_bad_field_is_refused_naming_it(capsys, dumped, tmp_path, field, value, says):
    d = _copy_dump(dumped, tmp_path)
    meta = json.loads((d / "dump.json").read_text())
    meta[field] = value
    (d / "dump.json").write_text(json.dumps(meta))
    rc, err = _plot(capsys, d, "-o", tmp_path / "d.png")
    assert rc == 2 and f"serq: error: {d}/{says}" in err, err
    if isinstance(value, str) and field != "engines":   # the table's title reads the dump.json beside it
        rc, err = _plot(capsys, d / "requests.csv", "-o", tmp_path / "q.png")
        assert rc == 2 and f"serq: error: {d}/{says}" in err, err


@pytest.mark.parametrize("file,row,column,value,says", [
    ("pool/kv.csv", 2, "used", "1e308", "pool/kv.csv:3: used is '1e308': beyond what a figure's axis can draw"),
    ("pool/kv.csv", 2, "used", "-3", "pool/kv.csv:3: used is '-3', below 0"),
    ("stage/vllm.csv", 3, "time", "0", "stage/vllm.csv:4: time 0 comes before the row above's"),
    ("stage/vllm.csv", 1, "time", "1e9", "stage/vllm.csv:2: time 1e9 is past the run's end"),
    ("client_ttft.csv", 1, "value", "nan", "client_ttft.csv:2: value is 'nan', not a finite number"),
])
def test_a_dumps_series_with_a_bad_value_is_refused_naming_the_line(capsys, dumped, tmp_path, file, row, column,
                                                                    value, says):
    d = _copy_dump(dumped, tmp_path)
    _edit_csv(d / file, row, column, value)
    rc, err = _plot(capsys, d, "-o", tmp_path / "d.png")
    assert rc == 2 and f"serq: error: {d}/{says}" in err, err


def test_a_gauge_that_is_not_a_number_for_a_while_is_a_gap(capsys, dumped, tmp_path):
    """A gauge's value may be inf or NaN (a ratio over an empty pool): drawn as a gap, binned or not."""
    d = _copy_dump(dumped, tmp_path)
    for name in ("kv_used", "seqs"):
        rows = _rows(d / "gauge" / f"{name}.csv")
        for r in rows[2:len(rows) // 2]:
            r[1] = "inf" if len(r[0]) % 2 else "nan"
        with open(d / "gauge" / f"{name}.csv", "w", newline="") as fh:
            csv.writer(fh).writerows(rows)
    rc, err = _plot(capsys, d, "-o", tmp_path / "d.png")
    assert rc == 0, err
    _png_ok(tmp_path / "d.png")


def test_a_sweep_with_a_short_row_or_a_bad_sweep_json_is_refused(capsys, tmp_path):
    sw = make_sweep(tmp_path / "sw")
    lines = (sw / "summary.csv").read_text().splitlines()
    (sw / "summary.csv").write_text("\n".join(lines[:5] + ["0,1"] + lines[6:]) + "\n")
    rc, err = _plot(capsys, sw, "-o", tmp_path / "s.png")
    assert rc == 2 and f"serq: error: {sw}/summary.csv:6: 2 field(s) where the header has {len(lines[0].split(','))}" \
        in err, err
    sw = make_sweep(tmp_path / "sw2")
    meta = json.loads((sw / "sweep.json").read_text())
    for field, value, says in [("inputs", [1, 2], "inputs is a list: not an object"),
                               ("seeds", 3, "seeds is 3: not a list of seeds"),
                               ("settings", {"horizon": "long"}, "settings.horizon is 'long': not a number"),
                               ("grid", {"rate": [1, "fast"], "chunk_cap": [256]},
                                "grid.rate[1] is 'fast': not a number"),
                               ("grid", {"rate": [1, 1e300], "chunk_cap": [256]},
                                "grid.rate[1] is 1e+300: beyond what a figure's axis can draw")]:
        (sw / "sweep.json").write_text(json.dumps({**meta, field: value}))
        rc, err = _plot(capsys, sw, "-o", tmp_path / "s.png")
        assert rc == 2 and f"serq: error: {sw}/sweep.json: {says}" in err, (field, err)
    assert not (tmp_path / "s.png").exists()


def test_a_sweep_whose_every_run_failed_says_so(capsys, tmp_path):
    prog = tmp_path / "failing.sq"
    prog.write_text('use "std/args";\nfn main() {\n  let x = args.number("x", 1);\n  stage s : fifo;\n'
                    "  workload { arrive batch(2); turn { Size d = ~uniform(-2, -1); } session { turn; } }\n"
                    "  server { run s (cost(s, d * x)); }\n}\n")
    rc, _, err = cli(capsys, "sweep", str(prog), "--grid", "x=1,2", "--seeds", "1", "--jobs", "1",
                     "--out", str(tmp_path / "f"), "--quiet")
    assert rc == 1, err
    why = "every run of the sweep failed (2 of 2), so summary.csv has no statistic; runs.csv's error column says why"
    rc, err = _plot(capsys, tmp_path / "f")
    assert rc == 2 and f"{tmp_path / 'f'}: nothing to plot: {why}" in err, err
    rc, err = _plot(capsys, tmp_path / "f", "--y", "client.ttft.p99")
    assert rc == 2 and f"--y client.ttft.p99: not a statistic of {tmp_path / 'f'}: {why}" in err, err
    assert "(such as )" not in err


def test_an_output_that_cannot_be_written_is_exit_1_and_the_old_figure_stays(capsys, dumped, tmp_path, monkeypatch):
    """The figure is written whole or not at all (serq/_write.py): an I/O error is exit 1
    (docs/reference/cli.md), the figure that was there stays, no temporary file is left."""
    rc, err = _plot(capsys, dumped / "r.json", "-o", tmp_path / "no" / "dir" / "r.png")
    assert rc == 1 and "serq: error: cannot write" in err, err
    out = tmp_path / "r.png"
    out.write_bytes(b"the old figure")

    def fail(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", fail)
    rc, err = _plot(capsys, dumped / "r.json", "-o", out)
    monkeypatch.undo()
    assert rc == 1 and "cannot write" in err and "No space left on device" in err, err
    assert out.read_bytes() == b"the old figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.png"]
    # a bad input leaves it too
    bad = _report(dumped, tmp_path, _set(("end",), "soon"), "bad.json")
    rc, err = _plot(capsys, bad, "-o", out)
    assert rc == 2 and out.read_bytes() == b"the old figure"
