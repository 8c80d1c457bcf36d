"""`arrive trace;`: a trace's sessions replayed open-loop at its `arrival` times (docs/language.md,
*Replaying a trace*; catalogue: *Trace files*), `serq run --trace`, and the trace's diagnostics."""
import csv
import os

import pytest

from serq import api
from serq.cli import main
from serq.interp import trace as T

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PROGRAM = """fn main() {
  stage gpu : ps(1);
  workload {
    arrive trace;
    trace "t.csv";
    hidden out;
    init { set context = 0; }
    session { turn; while (more) { set context = context + new + out; turn; } }
  }
  server { run gpu (cost(gpu, 0.01 * out)); }
}
"""


def _files(tmp_path, rows, program=PROGRAM):
    (tmp_path / "t.csv").write_text(rows)
    p = tmp_path / "p.sq"
    p.write_text(program)
    return str(p)


def _requests(tmp_path, prog, *extra):
    d = tmp_path / "dump"
    assert main(["run", prog, "--quiet", "--dump", str(d), *extra]) == 0
    with open(d / "requests.csv") as fh:
        return sorted(csv.DictReader(fh), key=lambda r: (float(r["start"]), int(r["session"])))


def test_sessions_arrive_at_the_trace_times_first_at_zero(tmp_path, capsys):
    # absolute times (seconds since an epoch): read from the first session's
    prog = _files(tmp_path, "session,turn,arrival,new,out,think\n"
                  "a,0,1700000000.25,10,10,0\na,1,,5,20,2\nb,0,1700000001,10,30,0\nc,0,1700000004.75,10,10,0\n")
    rows = _requests(tmp_path, prog)
    starts = [(int(r["session"]), int(r["turn"]), float(r["start"])) for r in rows]
    # a at 0 (a ps stage alone: 0.1 s), b at 0.75 (0.3 s alone), c at 4.5; a's second turn 2 s after
    # its first answer at 0.1: 2.1
    assert starts == [(0, 0, 0.0), (1, 0, 0.75), (0, 1, pytest.approx(2.1)), (2, 0, 4.5)]
    by = {(int(r["session"]), int(r["turn"])): float(r["response"]) for r in rows}
    assert by[(0, 0)] == pytest.approx(0.1) and by[(1, 0)] == pytest.approx(0.3)
    assert by[(0, 1)] == pytest.approx(0.2) and by[(2, 0)] == pytest.approx(0.1)


def test_ties_arrive_in_file_order_and_arrivals_n_takes_the_first(tmp_path):
    prog = _files(tmp_path, "session,turn,arrival,new,out\nx,0,0,1,10\ny,0,0,1,20\nz,0,1,1,30\n")
    rows = _requests(tmp_path, prog)
    # serial is the file's order: session 0 is x (10 tokens), 1 is y (20)
    assert [(int(r["session"]), float(r["start"])) for r in rows] == [(0, 0.0), (1, 0.0), (2, 1.0)]
    rows = _requests(tmp_path, prog, "--arrivals", "2")
    assert sorted(int(r["session"]) for r in rows) == [0, 1]


def test_a_trace_run_needs_no_horizon_and_a_horizon_cuts_it(tmp_path, capsys):
    prog = _files(tmp_path, "session,turn,arrival,new,out\nx,0,0,1,10\ny,0,100,1,10\n")
    assert main(["run", prog, "--quiet", "--json"]) == 0
    import json
    rep = json.loads(capsys.readouterr().out)
    assert rep["sessions"]["arrived"] == 2 and rep["sessions"]["completed"] == 2
    assert main(["run", prog, "--quiet", "--json", "--horizon", "50"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["sessions"]["arrived"] == 1


@pytest.mark.parametrize("rows, where, says", [
    ("session,turn,new,out\na,0,1,1\n", "t.csv:1:1", "no `arrival` column"),
    ("session,turn,arrival,new,out\na,0,5,1,1\nb,0,4,1,1\n", "t.csv:3:5", "before the session above's 5"),
    ("session,turn,arrival,new,out\na,0,,1,1\n", "t.csv:2:5", "`arrival` is '', not a number"),
    ("session,turn,arrival,new,out\na,0,-1,1,1\n", "t.csv:2:5", "`arrival` is '-1'"),
    ("session,turn,arrival,new,out\na,0,0,-3,1\n", "t.csv:2:7", "`new` is '-3'"),
    ("session,turn,arrival,new,out\na,0,0,3,1.5\n", "t.csv:2:9", "`out` is '1.5'"),
    ("session,turn,arrival,new,out\n", "t.csv:1:1", "no rows"),
    ("", "t.csv:1:1", "empty"),
])
def test_a_bad_trace_is_a_diagnostic_at_check_and_run(tmp_path, capsys, rows, where, says):
    prog = _files(tmp_path, rows)
    for cmd in (["check", prog], ["run", prog, "--quiet"]):
        assert main(cmd) == 1
        err = capsys.readouterr().err
        assert where in err and "T001" in err and says in err, err
        assert "Traceback" not in err


def test_arrive_trace_without_a_trace_is_l238(tmp_path, capsys):
    prog = _files(tmp_path, "", PROGRAM.replace('    trace "t.csv";\n', ""))
    assert main(["check", prog]) == 1
    assert "L238" in capsys.readouterr().err


def test_another_law_ignores_the_arrival_column(tmp_path, capsys):
    # an unordered arrival column is no error where the program's own law gives the times
    prog = _files(tmp_path, "session,turn,arrival,new,out\na,0,5,1,1\nb,0,4,1,1\n",
                  PROGRAM.replace("arrive trace;", "arrive batch(2);"))
    rows = _requests(tmp_path, prog)
    assert [float(r["start"]) for r in rows] == [0.0, 0.0]


def test_run_trace_replaces_the_programs_trace(tmp_path, capsys):
    prog = _files(tmp_path, "session,turn,arrival,new,out\na,0,0,1,1\n")
    other = tmp_path / "other.csv"
    other.write_text("session,turn,arrival,new,out\nq,0,10,1,10\nr,0,12,1,10\ns,0,13,1,10\n")
    rows = _requests(tmp_path, prog, "--trace", str(other))
    assert [float(r["start"]) for r in rows] == [0.0, 2.0, 3.0]
    capsys.readouterr()
    assert main(["run", prog, "--quiet", "--json", "--trace", str(other)]) == 0
    import json
    rep = json.loads(capsys.readouterr().out)
    assert rep["program"]["files"][-1].endswith("other.csv")  # the data it replayed, in its hash
    bad = tmp_path / "bad.csv"
    bad.write_text("session,turn,new,out\nq,0,1,1\n")
    assert main(["run", prog, "--quiet", "--trace", str(bad)]) == 1
    assert "no `arrival` column" in capsys.readouterr().err
    assert main(["run", prog, "--quiet", "--trace", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    notrace = tmp_path / "q.sq"
    notrace.write_text(PROGRAM.replace('    trace "t.csv";\n', "").replace("arrive trace;", "arrive batch(1);")
                       .replace("while (more) { set context = context + new + out; turn; }", "")
                       .replace("hidden out;", "").replace("0.01 * out", "1"))
    assert main(["run", str(notrace), "--quiet", "--trace", str(other)]) == 2
    assert "names none" in capsys.readouterr().err


def test_a_long_trace_loads(tmp_path):
    """Sessions' contiguity was checked against every session before, quadratic (issue 50: 40k
    sessions took 130 s); 100k one-turn sessions now load in about a second."""
    p = tmp_path / "b.csv"
    p.write_text("session,turn,arrival,new,out\n" + "".join(f"s{i},0,{i * 0.01:.2f},100,10\n" for i in range(100_000)))
    T._LAST[:] = [None, None]
    sessions = T.load_trace(str(p), True)
    assert len(sessions) == 100_000 and sessions[-1][0]["arrival"] == pytest.approx(999.99)
    assert T.load_trace(str(p), True) is sessions  # the linker's read, kept for the run


def test_open_trace_example_replays_its_file_with_arrivals_as_starts(tmp_path):
    prog = os.path.join(ROOT, "examples", "replay", "open_trace.sq")
    rows = _requests(tmp_path, prog)
    sessions = T.load_trace(os.path.join(ROOT, "examples", "replay", "open_trace.csv"), True)
    first = {(i, 0): s[0]["arrival"] for i, s in enumerate(sessions)}
    got = {(int(r["session"]), int(r["turn"])): float(r["start"]) for r in rows if r["turn"] == "0"}
    assert got == pytest.approx(first)
    assert api  # the programmatic API loads it too
    assert api.load(prog, {}).workload.arrive.k == "trace"


def test_percentiles_and_units_on_run(tmp_path, capsys):
    import json
    prog = os.path.join(ROOT, "examples", "replay", "open_trace.sq")
    assert main(["run", prog, "--quiet", "--json", "--percentiles", "50,95,99.9"]) == 0
    rep = json.loads(capsys.readouterr().out)
    t = rep["client"]["ttft"]
    assert list(t) == ["count", "mean", "std", "ci95", "p50", "p95", "p99.9", "min", "max"]
    assert t["min"] <= t["p50"] <= t["p95"] <= t["p99.9"] <= t["max"]
    # an objective on a percentile not asked for adds it
    assert main(["run", prog, "--quiet", "--json", "--slo", "ttft.p95<=1s"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert list(rep["client"]["ttft"])[4:8] == ["p50", "p90", "p95", "p99"]
    assert rep["objectives"][0]["value"] == rep["client"]["ttft"]["p95"]
    assert main(["run", prog, "--quiet"]) == 0
    s_text = capsys.readouterr().out
    assert main(["run", prog, "--quiet", "--units", "ms", "--slo", "ttft.p99<=500ms"]) == 0
    ms_text = capsys.readouterr().out
    assert "client (ms)" in ms_text and "client (ms)" not in s_text
    row_s = next(line for line in s_text.splitlines() if line.startswith("ttft "))
    row_ms = next(line for line in ms_text.splitlines() if line.startswith("ttft "))
    assert float(row_ms.split()[2]) == pytest.approx(1000 * float(row_s.split()[2]), rel=1e-3)
    assert "<= 500ms held" in ms_text
    for bad in ("50,x", "101", "-1", ","):
        assert main(["run", prog, "--quiet", "--percentiles", bad]) == 2
        assert "--percentiles" in capsys.readouterr().err


def test_mooncake_sample_hits_what_its_hash_ids_imply(tmp_path):
    """The Mooncake sample imported and replayed with every request alone (arrivals 1000 times
    apart, KV to spare): each request's cached tokens are the longest prefix of hash ids it shares
    with an earlier request, in tokens (512 a hash id; no further than either prompt), in whole KV
    blocks of 16, and at most all but the prompt's last token (vLLM's hit): a count made here from the
    raw file, not from the importer's columns."""
    import json
    src = os.path.join(ROOT, "examples", "data", "mooncake.jsonl")
    rows = [json.loads(line) for line in open(src) if line.strip()]
    rows.sort(key=lambda r: r["timestamp"])
    want = []
    for i, r in enumerate(rows):
        best = 0
        for e in rows[:i]:
            k = 0
            while k < min(len(e["hash_ids"]), len(r["hash_ids"])) and e["hash_ids"][k] == r["hash_ids"][k]:
                k += 1
            best = max(best, min(k * 512, e["input_length"], r["input_length"]))
        n = r["input_length"]
        want.append(min(best // 16 * 16, (n - 1) // 16 * 16))
    out = tmp_path / "m.csv"
    assert main(["import", "mooncake", src, "-o", str(out), "--scale", "0.001"]) == 0
    prog = os.path.join(ROOT, "examples", "replay", "open_trace.sq")
    got = _requests(tmp_path, prog, "--trace", str(out))
    cached = [float(r["cached_tokens"]) for r in sorted(got, key=lambda r: int(r["session"]))]
    assert cached == want and sum(want) > 0


def test_new_tokens_are_whole(tmp_path, capsys):
    prog = _files(tmp_path, "session,turn,arrival,new,out\na,0,0,2.5,1\n")
    assert main(["check", prog]) == 1
    err = capsys.readouterr().err
    assert "t.csv:2:7" in err and "`new` is '2.5': a whole number >= 0 is needed" in err


def test_a_byte_order_mark_is_read_past_and_a_column_twice_is_an_error(tmp_path, capsys):
    (tmp_path / "t.csv").write_bytes(b"\xef\xbb\xbfsession,turn,arrival,new,out\na,0,0,1,1\n")
    prog = tmp_path / "p.sq"
    prog.write_text(PROGRAM)
    assert main(["check", str(prog)]) == 0
    capsys.readouterr()
    prog = _files(tmp_path, "session,turn,arrival,new,out,new\na,0,0,1,1,2\n")
    assert main(["check", prog]) == 1
    assert "t.csv:1:30: error[T001]: the header names `new` twice" in capsys.readouterr().err


@pytest.mark.parametrize("fmt, sample, sessions", [
    ("azure", "azure_code_2023.csv", 30), ("azure", "azure_conv_2024.csv", 30), ("burstgpt", "burstgpt.csv", 29),
    ("mooncake", "mooncake.jsonl", 24), ("sharegpt", "sharegpt.json", 6)])
def test_each_public_format_replays_in_one_command(tmp_path, monkeypatch, capsys, fmt, sample, sessions):
    """`serq run examples/replay/open_trace.sq --trace FORMAT:INPUT` (issue 48): converted as serq import
    converts it (once: kept in serQ's cache) and replayed at its arrival times."""
    import json
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prog = os.path.join(ROOT, "examples", "replay", "open_trace.sq")
    src = os.path.join(ROOT, "examples", "data", sample)
    assert main(["run", prog, "--quiet", "--json", "--trace", f"{fmt}:{src}"]) == 0
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    assert rep["sessions"]["arrived"] == sessions == rep["sessions"]["completed"]
    assert "converted once" in cap.err
    out = tmp_path / "t.csv"
    assert main(["import", fmt, src, "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", prog, "--quiet", "--json", "--trace", str(out)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["client"] == rep["client"]   # the same trace as serq import writes it
    assert main(["run", prog, "--quiet", "--json", "--trace", f"{fmt}:{src}"]) == 0
    assert "converted once" not in capsys.readouterr().err   # the cache's copy
