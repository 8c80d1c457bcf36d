"""Memory that does not grow with the run (issue 12, item 3): a statistic past SWITCH samples, and a
time average past SWITCH change points, go to disk and give the same figures as in memory; a
long M/M/1 run's peak memory grows by a few bytes a customer."""
from __future__ import annotations

import gc
import json
import math
import os
import random
import subprocess
import sys

import pytest

from serq.interp import stats as S

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@pytest.fixture
def small(monkeypatch):
    """A switch and a chunk small enough to spill in a test; the sample's stride as in use."""
    monkeypatch.setattr(S, "SWITCH", 4000)
    monkeypatch.setattr(S, "CHUNK", 700)


def _summary(values):
    return repr(S.summary(values))


def _draws(rng, kind, n):
    if kind == "exp":
        return [rng.expovariate(0.3) for _ in range(n)]
    if kind == "ties":  # few distinct values: the order statistics fall inside long runs of equals
        return [float(rng.randint(0, 3)) for _ in range(n)]
    if kind == "zeros":  # 0.0 and -0.0 are equal but print apart: which one a figure is matters
        return [rng.choice([0.0, -0.0, 2.5, 1e-300]) for _ in range(n)]
    if kind == "wide":
        return [rng.choice((1, -1)) * rng.lognormvariate(0, 6) for _ in range(n)]
    if kind == "inf":
        return [rng.expovariate(1.0) for _ in range(n - 3)] + [math.inf] * 3
    if kind == "sorted":  # the worst order for the chunk samples' brackets
        return sorted(rng.random() for _ in range(n))
    if kind == "huge":  # sums beyond the float range: math.fsum raises, in memory and on each chunk
        return [rng.choice((1, 1, -1)) * rng.uniform(1e307, 1.7e308) for _ in range(n)]
    if kind == "infs":  # inf with -inf: math.fsum raises ValueError
        return [rng.expovariate(1.0) for _ in range(n - 2)] + [math.inf, -math.inf]
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["exp", "ties", "zeros", "wide", "inf", "sorted", "huge", "infs"])
@pytest.mark.parametrize("n", [4001, 9999, 23457])
def test_spilled_summary_is_the_exact_one(small, kind, n):
    rng = random.Random(hash((kind, n)) & 0xFFFF)
    vals = _draws(rng, kind, n)
    warm_at = rng.randrange(0, n // 3)
    ser = S.Series(warmup=float(warm_at))
    for i, v in enumerate(vals):
        ser.add(float(i), v)
    after = ser.after()
    assert isinstance(after, S.Spilled) and ser.col.file is not None
    assert len(ser.vb) <= S.CHUNK  # what stays in memory is one chunk
    assert _summary(after) == _summary(vals[warm_at:])
    assert list(ser.v) == vals
    total = S.sum_of(ser.v)
    assert (total == S.sum_of(vals) or math.isnan(total) and kind == "infs") and len(ser.v) == n
    assert max(ser.v) == max(vals)


def test_order_statistics_at_every_rank(small):
    """The bracketing of _select holds at every rank, not only at p50, p90 and p99."""
    rng = random.Random(7)
    vals = [float(rng.randint(0, 50)) + rng.choice((0.0, 0.5)) for _ in range(6000)]
    ser = S.Series(0.0)
    for i, v in enumerate(vals):
        ser.add(float(i), v)
    sp = ser.after()
    sample, n_chunks = [], 0
    for ch in sp.chunks():
        n_chunks += 1
        sample += sorted(ch)[::S.STEP]
    ranks = list(range(0, len(vals), 37)) + [len(vals) - 1]
    got = S._select(sp.chunks, sample, n_chunks, ranks)
    want = sorted(vals)
    assert got == {r: want[r] for r in ranks}


def test_dump_rows_spilled_as_in_memory(small):
    rng = random.Random(3)
    spilled, held = S.Series(100.0, rows=True), S.Series(100.0, rows=True)
    held.cap = 10 ** 9  # never flushes
    for i in range(9000):
        v = rng.random()
        spilled.add(i * 0.1, v, i // 3, i % 3)
        held.add(i * 0.1, v, i // 3, i % 3)
    assert spilled.col.file is not None and held.col.file is None
    rows = list(spilled.dump_rows())
    assert rows == list(held.dump_rows())
    assert rows[0][:3] == (100.0, 333, 1) and len(rows) == 9000 - 1000
    assert all(type(r[1]) is int and type(r[2]) is int for r in rows[:5])


@pytest.mark.parametrize("seed", range(6))
def test_time_average_spilled_as_in_memory(small, monkeypatch, seed):
    rng = random.Random(seed)
    pts, t = [], 0.0
    for _ in range(rng.choice([12000, 16000])):
        t += rng.choice([0.0, 1e-9, rng.expovariate(1.0)])
        pts.append((t, rng.choice([0.0, -0.0, 1.0, 2.0, rng.random()])))
    start = rng.choice([0.0, t / 3])

    def build():
        avg = S.TimeAverage(start)
        for p in pts:
            avg.set(*p)
        return avg
    spilled = build()
    monkeypatch.setattr(S, "SWITCH", 10 ** 9)
    held = build()
    assert spilled.disk is not None and held.disk is None
    for end in (t, t + 2.0):
        assert repr(spilled.result(end)) == repr(held.result(end))
    assert list(spilled.points) == list(held.points)



@pytest.mark.parametrize("seed", range(40))
def test_least_and_greatest_with_numpy_are_min_and_max(seed):
    """_lo_hi's numpy answer is min()'s and max()'s to the sign of a zero: a NaN first (min() and
    max() stop there) or later, zeros of one sign or of both (the first met kept), none."""
    np = pytest.importorskip("numpy")
    from array import array
    rng = random.Random(seed)
    pool = rng.choice([[0.0, 1.5, 2.5], [-0.0, 3.0], [0.0, -0.0, 1.0], [-0.0, -1.0, 0.0], [-2.0, 0.0, -0.0],
                       [math.nan, 1.0, 0.0], [1.0, 2.0], [-1.0, -0.0]])
    other = [rng.uniform(-3, 3)] if seed % 2 else []  # (none: a zero the least or greatest)
    a = array("d", (rng.choice(pool + other) for _ in range(rng.choice([255, 256, 300, 4096]))))
    if rng.random() < 0.3:
        a[0] = rng.choice([math.nan, 0.0, -0.0])
    want = (min(a), max(a))
    for got in (S._lo_hi(a, np), S._lo_hi(a, None)):
        assert repr(got) == repr(want) and [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in want]


@pytest.mark.parametrize("seed", range(8))
def test_spilled_extremes_of_the_span_are_one_pass_of_each_chunk(monkeypatch, seed):
    """_result_spilled reads the whole span's least and greatest off its windows' and the changes
    at an edge within it: as one min() and max() over each chunk's part of the span would, with
    changes exactly at the windows' edges, NaN (first in a window or not), zeros of both signs and
    spans so short that edges coincide."""
    monkeypatch.setattr(S, "SWITCH", 64)  # chunks of a few changes: windows across many
    monkeypatch.setattr(S, "CHUNK", 16)
    rng = random.Random(seed)
    start = rng.choice([0.0, 3.0])
    span = rng.choice([50.0, 1.0, 1e-320 if start == 0.0 else 1e-9])
    end = start + span
    edges = [start + span * i / S.BATCHES for i in range(S.BATCHES + 1)]
    times = sorted(rng.choice(edges) if rng.random() < 0.2 else rng.uniform(start, end + span / 4)
                   for _ in range(rng.choice([3000, 9000])))
    avg = S.TimeAverage(start)
    for t in times:
        if t in edges:  # a change at an edge, the span's least or greatest where it is within it
            avg.set(t, rng.choice([-9.0, 9.0, math.nan, -0.0]))
        else:
            avg.set(t, rng.choice([0.0, -0.0, 1.0, 2.0, math.nan, rng.random(), -rng.random()]))
    assert avg.disk is not None
    acc, v0 = [None, None], None
    for ts, vs, _ in avg._columns():
        p = S.bisect_right(ts, edges[0])
        if p:
            v0 = vs[p - 1]
        part = vs[p:S.bisect_left(ts, edges[-1])]
        if part:
            lo, hi = min(part), max(part)
            if acc[0] is None or lo < acc[0]:
                acc[0] = lo
            if acc[1] is None or hi > acc[1]:
                acc[1] = hi
    lo = v0 if acc[0] is None or not acc[0] < v0 else acc[0]
    hi = v0 if acc[1] is None or not acc[1] > v0 else acc[1]
    got = avg.result(end)
    assert repr((got["min"], got["max"])) == repr((lo, hi))


@pytest.mark.parametrize("seed", range(6))
def test_time_average_split_all_is_split_one_by_one(small, seed):
    """split_all (a fast-forward's iterations' ends on the engine's busy time) gives what split()
    one at a time gives: ends rising, repeated (an iteration a subnormal long) or at the last
    change, the signal at 1.0 or not, spilled to disk."""
    rng = random.Random(seed)
    one, run = S.TimeAverage(0.0), S.TimeAverage(0.0)
    t = 0.0
    for _ in range(1500):
        t += rng.expovariate(1.0)
        v = rng.choice([1.0, 1.0, 1.0, 0.0, 0.5])
        one.set(t, v)
        run.set(t, v)
        ends = []
        for _ in range(rng.choice([1, 3, 20])):
            t += rng.choice([0.0, 5e-324, rng.expovariate(3.0), rng.expovariate(3.0)])
            ends.append(t)
        for e in ends:
            one.split(e)
        run.split_all(ends)
    assert run.disk is not None
    assert [(a, repr(b)) for a, b in run.points] == [(a, repr(b)) for a, b in one.points]
    assert repr(run.result(t + 1.0)) == repr(one.result(t + 1.0))


def test_time_average_split_all_of_a_long_run():
    """A run of more ends than split_all's slice of ones holds (4,096): the same points."""
    one, run = S.TimeAverage(0.0), S.TimeAverage(0.0)
    one.set(0.5, 1.0)
    run.set(0.5, 1.0)
    ends = [1.0 + 0.003 * i for i in range(5000)]
    for e in ends:
        one.split(e)
    run.split_all(ends)
    assert [(a, repr(b)) for a, b in run.points] == [(a, repr(b)) for a, b in one.points]
    assert repr(run.result(20.0)) == repr(one.result(20.0))


@pytest.mark.parametrize("seed", range(16))
def test_a_busy_time_keeps_the_mean_of_the_whole_one(monkeypatch, seed):
    """A BusyAverage (an engine's or a stage's busy time: 0 and 1, or a fifo(c)'s fractions) given
    the changes a TimeAverage is given, one at a time, split, or a fast-forward's ends at once, has
    its mean to the last bit, whatever it has folded: idle spells or none (the mean clamped by
    rounding), a warm-up the changes cross (spilled before it ends, or not), changes at one instant,
    iterations a few ulps long (kept near the last), and ends at the last change (as a run's end:
    none after it), an ulp after it, or later. Its mean alone is kept."""
    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr(S, "SWITCH", 64)
        monkeypatch.setattr(S, "CHUNK", 16)
    start = rng.choice([0.0, 0.0, 7.0, 40.0])
    whole, busy = S.TimeAverage(start), S.BusyAverage(start)
    idle = seed % 4 != 0  # never idle after the first start: every value held is 1
    level = rng.choice([0.0, 0.25, 0.5, 0.75]) if seed % 4 == 3 else 0.0  # a fifo(c)'s share of its servers
    t = rng.choice([0.0, 0.3])
    for a in (whole, busy):
        a.set(t, 1.0)
    for _ in range(rng.choice([5, 200, 800])):
        r = rng.random()
        if r < 0.5:  # a fast-forward's iterations: their ends, each a gap after the one before
            step = rng.choice([0.004, 0.0007, 5e-324, 1e-15, 0.0])
            ends = []
            for _ in range(rng.choice([1, 2, 3, 27, 60])):
                t += rng.choice([step, step, rng.expovariate(200.0)])
                ends.append(t)
            whole.split_all(list(ends))
            diffs = [e - b for e, b in zip(ends, [busy.last] + ends[:-1])]
            busy.split_diffs(list(ends), diffs)
        elif r < 0.8:  # an iteration's end: idle, and at once busy again (or not)
            t += rng.choice([0.004, rng.expovariate(100.0), 5e-324])
            again = not idle or rng.random() < 0.7
            low = level if level and rng.random() < 0.5 else 0.0
            for a in (whole, busy):
                a.set(t, low)
                if again:
                    a.set(t, 1.0)
        else:
            t += rng.choice([0.01, 1e-300])
            for a in (whole, busy):
                a.split(t)
        if idle and rng.random() < 0.05:
            t += rng.expovariate(1.0)
            for a in (whole, busy):
                a.set(t, 0.0)
            t += rng.expovariate(1.0)
            for a in (whole, busy):
                a.set(t, 1.0)
    t += rng.choice([0.0, 0.004])
    for a in (whole, busy):
        a.set(t, 0.0)
    assert busy.v == whole.v and busy.last == whole.last and busy.acc == whole.acc
    for end in (t, math.nextafter(t, math.inf), t + 1.0, t * 3.7, max(t, start), 1e300, 1.7e308, math.inf):
        # (the run's end: no change after it; a span whose twentieth times 20 overflows, an infinite one)
        assert repr(busy.mean_to(end)) == repr(whole.result(end)["mean"]), end
    if t > start:  # folded: its changes are not kept
        assert busy.t is None and busy.tail is not None and len(busy.tail) <= 4
        with pytest.raises(TypeError):
            busy.result(t)


@pytest.mark.parametrize("at_once", [True, False])
def test_a_busy_time_reads_the_values_it_folded_and_not_those_at_its_end(at_once):
    """The two cases where a busy time's mean reads the least and greatest value held: busy in
    between (folded, not kept) but idle before the start and until the last change, which makes it
    busy at the run's end (the mean not clamped to 0); and busy all along but for the last change, to
    idle at the run's end, where the mean's last edge falls an ulp before the end (that change not
    held: the mean, a few ulps off 1 by rounding, clamped to it)."""
    whole, busy = S.TimeAverage(0.0), S.BusyAverage(0.0)
    t = 1.0
    for a in (whole, busy):
        a.set(t, 1.0)
    for _ in range(50):
        ends = [t + 0.0031 * i for i in range(1, 30)]
        whole.split_all(list(ends))
        if at_once:  # a fast-forward's iterations
            busy.split_diffs(list(ends), [e - b for e, b in zip(ends, [busy.last] + ends[:-1])])
        else:  # one iteration at a time
            for e in ends:
                busy.split(e)
        t = ends[-1]
    for a in (whole, busy):
        a.set(t, 0.0)
        a.set(t + 5.0, 1.0)
    assert repr(busy.mean_to(t + 5.0)) == repr(whole.result(t + 5.0)["mean"])
    assert 0.0 < busy.mean_to(t + 5.0) < 1.0
    # an end whose last edge, start + span * 20 / 20, is below it, and a run busy until then
    start = 0.7
    end = next(e for e in (0.7 + 0.0013 * i for i in range(1000, 10000))
               if start + (e - start) * S.BATCHES / S.BATCHES < e)
    whole, busy = S.TimeAverage(start), S.BusyAverage(start)
    for a in (whole, busy):
        a.set(0.5, 1.0)
    t, clamped = 0.5, False
    while t < end:
        ends = [e for e in (t + 0.00071 * i for i in range(1, 30)) if e < end] + [end]
        whole.split_all(list(ends))
        busy.split_diffs(list(ends), [e - b for e, b in zip(ends, [busy.last] + ends[:-1])])
        t = ends[-1]
    for a in (whole, busy):
        a.set(end, 0.0)
    want = whole.result(end)["mean"]
    assert repr(busy.mean_to(end)) == repr(want) and want == 1.0
    span = end - start
    assert (whole.integral(start + span * S.BATCHES / S.BATCHES) - whole.integral(start)) / span != 1.0


@pytest.mark.parametrize("seed", range(8))
def test_time_average_whole_span_extremes_are_the_windows(seed):
    """TimeAverage.result takes the whole span's least and greatest from its 20 windows' (their
    change points join up into the span's): the same as scanning the span's own, with sparse
    signals (windows with no change), changes on a window's edge and a start after the first."""
    from bisect import bisect_left, bisect_right
    rng = random.Random(seed)
    avg = S.TimeAverage(rng.choice([0.0, 5.0]))
    t = 0.0
    for _ in range(rng.choice([3, 15, 400])):
        t += rng.choice([0.5, 1.0, rng.expovariate(0.3)])
        avg.set(t, rng.choice([0.0, 1.0, 7.0, rng.random()]))
    end = rng.choice([t, t + 10.0, 20.0 + t * rng.random()])
    got = avg.result(end)
    span = end - avg.start
    edges = [avg.start + span * i / S.BATCHES for i in range(S.BATCHES + 1)]
    held = avg.vals[max(0, bisect_right(avg.t, edges[0]) - 1):bisect_left(avg.t, edges[-1])]
    mean = (avg.integral(edges[-1]) - avg.integral(edges[0])) / span
    assert (got["min"], got["max"]) == ((min(held), max(held)) if held else (None, None))
    assert got["mean"] == (S._within(mean, min(held), max(held)) if held else mean)

CHILD = r"""
import resource, sys, tracemalloc
from serq import api
from serq.interp import stats
stats.SWITCH = int(sys.argv[2])   # spill from this many samples: the regime a long run is in
stats.CHUNK = 4096                # both runs fill many chunks: what the report's passes hold is alike
prog = api.load("examples/single-turn/mg1.sq")
st = prog.settings.model_copy(update={"arrivals": int(sys.argv[1]), "horizon": None})
tracemalloc.start()
rep = api.run(prog, st)
assert rep["sessions"]["completed"] == int(sys.argv[1])
print(tracemalloc.get_traced_memory()[1], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _peaks(n, switch):
    """The run's peak of Python allocations (bytes; deterministic, unlike the resident set's
    high-water mark, which moves by a megabyte or two from run to run) and its peak RSS (KiB)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(switch)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    traced, rss = out.stdout.split()[-2:]
    return int(traced), int(rss)


def test_peak_memory_per_customer_is_small():
    """M/M/1 past the switch: the peak holds chunk buffers, and the values the report's second pass
    keeps between each percentile's brackets (report.md *Memory*: about 2 STEP / CHUNK of the
    samples for each of p50, p90, p99, 32 B each as floats in a list: at most 6 B a customer with
    this CHUNK of 4096, 0.4 B with the default 65,536). Below the switch (the samples and the
    stage's change points in memory, and the report's sort of the samples) the traced peak grows
    ~41 B a customer; past it, by 2.4 B (measured, with serq's bytecode compiled: compiling it from
    source at start-up made a peak of its own that hid the run's below 60,000 customers)."""
    lo, hi = 10_000, 60_000
    (t0, r0), (t1, r1) = _peaks(lo, 1 << 14), _peaks(hi, 1 << 14)
    slope = (t1 - t0) / (hi - lo)
    bound = 3 * 2 * S.STEP / 4096 * 32
    assert slope < bound, f"{slope:.1f} bytes a customer traced (peak RSS {r0} -> {r1} KiB)"


PROG_DUMP = """fn main() {
  stage svc : fifo;
  gauge q = queue(svc);
  workload {
    arrive poisson(0.9);
    turn { Cost w = cost(svc, ~exp(1)); }
  }
  server {
    observe depth = queue(svc);
    run svc (w);
  }
}
"""


def _dump(capsys, tmp_path, name):
    from serq.cli import main
    rc = main(["run", str(tmp_path / "p.sq"), "--arrivals", "6000", "--warmup", "50", "--json",
               "--dump", str(tmp_path / name)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = tmp_path / name
    return out, {p.relative_to(d).as_posix(): p.read_text() for p in sorted(d.rglob("*.csv"))}


def test_dump_and_report_spilled_as_in_memory(capsys, tmp_path, monkeypatch):
    """--dump writes every sample after the warm-up and every gauge change point, whether they were
    held in memory or spilled to disk, and the report is the same."""
    (tmp_path / "p.sq").write_text(PROG_DUMP)
    held = _dump(capsys, tmp_path, "held")
    monkeypatch.setattr(S, "SWITCH", 1500)
    monkeypatch.setattr(S, "CHUNK", 400)
    spilled = _dump(capsys, tmp_path, "spilled")
    assert spilled == held
    report, files = held
    assert json.loads(report)["observe"]["depth"]["count"] == files["observe_depth.csv"].count("\n") - 1 > 1500
    assert files["gauge/q.csv"].count("\n") > 1500


def test_columns_share_one_spill_file_closed_with_them(small):
    """Every column spills into one file (hundreds of members must not take hundreds of open files),
    and it is closed, so deleted, once no column holds it."""
    series = [S.Series(0.0, rows=True) for _ in range(50)]
    for i in range(S.SWITCH + 10):
        for ser in series:
            ser.add(float(i), i * 0.5, i, 0)
    spills = {id(c.file) for ser in series for c in (ser.col, *ser.rcols)}
    assert len(spills) == 1
    f = series[0].col.file.f
    assert [list(ser.v)[-3:] for ser in series[:2]] == [[(S.SWITCH + 7) * 0.5, (S.SWITCH + 8) * 0.5,
                                                        (S.SWITCH + 9) * 0.5]] * 2
    del series, ser
    gc.collect()
    assert f.closed


def test_a_temporary_directory_that_takes_nothing_is_an_error_not_a_bug(small, monkeypatch, capsys):
    """A run that must spill and cannot make its file (a full or read-only temporary directory)
    ends with `serq: error:` naming the directory and the reason, exit 1: no traceback, no
    'internal error', nothing on stderr from the half-made spill."""
    from serq.cli import main

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(S.tempfile, "TemporaryFile", full)
    # the run makes its own file: not the one an earlier test's columns, alive still (a cycle the
    # collector has not reached, or frozen by a run's gc.freeze), spill into (the shared _spill)
    monkeypatch.setattr(S, "_spill_ref", None)
    rc = main(["run", os.path.join(ROOT, "examples", "single-turn", "mg1.sq"), "--arrivals", "6000", "--quiet"])
    gc.collect()
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("serq: error: the run could not keep its samples in a temporary file in ")
    assert err.rstrip().endswith("No space left on device")
    assert "Traceback" not in err and "internal error" not in err and "Exception ignored" not in err


CLOSED_CHILD = r"""
import sys, tracemalloc
from serq import api
from serq.ir.model import Settings
n = int(sys.argv[1])
prog = api.load("examples/multi-turn/closed.sq", {"sessions": n})
tracemalloc.start()
rep = api.run(prog, Settings(horizon=5, seed=1))
assert rep["sessions"]["live_at_end"] == n
print(tracemalloc.get_traced_memory()[1])
"""


def test_a_live_session_weighs_under_a_kilobyte():
    """closed.sq keeps every session alive, thinking or queued (bench/memory.py runs a million):
    a session keeps no generator frame (sessions.py, Flat), a closed workload's arrivals at 0
    are one event at a time, and the delay stage they think on keeps no replaced end per arrival
    (PS._schedule). The traced peak grows ~727 B a session (measured; 845 B with those ends); a
    million, with the interpreter's ~52 MB, fit in 1 GB below ~940 B."""
    def peak(n):
        out = subprocess.run([sys.executable, "-c", CLOSED_CHILD, str(n)], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, check=True)
        return int(out.stdout.split()[-1])
    lo, hi = 20_000, 60_000
    slope = (peak(hi) - peak(lo)) / (hi - lo)
    assert slope < 940, f"{slope:.0f} bytes a live session"


@pytest.mark.parametrize("spill", [False, True])
def test_time_average_over_a_span_of_a_few_subnormals(small, monkeypatch, spill):
    """A run that ends a few subnormals after it starts (an execute of 5e-324, fuzz seed 24) has a
    span whose twentieth is 0: the mean and extremes are the span's, the interval is null (no
    division by a window of no width). Spilled or held, the same."""
    monkeypatch.setattr(S, "SWITCH", 4 if spill else 10 ** 9)  # a span this short has few changes
    monkeypatch.setattr(S, "CHUNK", 2)
    avg = S.TimeAverage(0.0)
    for i in range(1, 7):
        avg.set(i * 5e-324, float(i % 2))
    assert (avg.disk is not None) == spill
    got = avg.result(7 * 5e-324)
    assert got["ci95"] is None and got["min"] == 0.0 and got["max"] == 1.0
    assert 0.0 <= got["mean"] <= 1.0
    wide = avg.result(1.0)  # a span that cuts into windows still has its interval
    assert wide["ci95"] is not None


def test_a_run_of_subnormal_iterations_reports(tmp_path):
    """The program fuzz seed 24 found: an engine's execute of 5e-324, one session; the run ends at
    3.5e-323 and reports (it ended in an internal error, ZeroDivisionError)."""
    import json
    import subprocess
    import sys
    src = tmp_path / "tiny.sq"
    src.write_text("""fn main() {
  device gpu { }
  engine llm on gpu {
    tokens cap 16;
    request (p, o) { decode (o - 1); }
    schedule { advance running; }
    execute (5e-324);
  }
  workload { arrive poisson(0.25); turn { Size p = 4; Size o = 8; } }
  server { llm (p, o); }
}
""")
    p = subprocess.run([sys.executable, "-m", "serq.cli", "run", str(src), "--arrivals", "1", "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["end"] > 0 and rep["stages"]["llm"]["utilisation"] == 1.0


def test_sums_and_means_beyond_the_float_range():
    """Where math.fsum raises (partial sums beyond the float range, inf with -inf), the report's
    sums and means are still numbers (fuzz seed 25: a stage's jobs of ~uniform(1, 1e308) seconds
    ended in an internal error): a mean is the exact one rounded once, within the range; a sum
    within the range is fsum's; beyond it, +-inf; inf with -inf, NaN. Where fsum does not raise,
    its result, unchanged."""
    from fractions import Fraction
    big = [1.7e308, 1.6e308, -0.5e308, 1.0e308]
    assert S.mean_of(big, 4) == float(sum(map(Fraction, big)) / 4)
    assert S.sum_of(big) == math.inf and S.sum_of([-x for x in big]) == -math.inf
    back = [1e308, 1e308, -1e308, 3.0]  # fsum overflows on the way, the sum is within the range
    assert S.sum_of(back) == float(sum(map(Fraction, back))) and S.mean_of(back, 4) == S.sum_of(back) / 4
    assert math.isnan(S.sum_of([1.0, math.inf, -math.inf])) and math.isnan(S.mean_of([math.inf, -math.inf], 2))
    assert S.mean_of([1e308, 1e308, math.inf], 3) == math.inf  # an infinity decides, overflow before it or not
    assert S.square(1e200) == math.inf and S.square(3.0) == 9.0
    rng = random.Random(5)
    for _ in range(200):
        xs = [rng.expovariate(1.0) * rng.choice((1, -1, 1e300)) for _ in range(rng.randint(1, 30))]
        assert S.sum_of(xs) == math.fsum(xs) and S.mean_of(xs, len(xs)) == math.fsum(xs) / len(xs)
    got = S.summary(big * 10)
    # batch means 1e308 apart: their squares are beyond the range, the interval is not
    means = [float((Fraction(big[k % 2 * 2]) + Fraction(big[k % 2 * 2 + 1])) / 2) for k in range(20)]
    m = float(sum(map(Fraction, means)) / 20)
    var = sum((Fraction(x) - Fraction(m)) ** 2 for x in means) / 19
    want = S.T19 * 1e300 * math.sqrt(float(var / 20 / Fraction(10) ** 600))  # scaled: var is ~1e615
    assert got["mean"] == float(sum(map(Fraction, big * 10)) / 40)
    assert math.isclose(got["ci95"], want, rel_tol=1e-12)
    assert S.squares([3.0, 4.0]) == (1.0, 25.0) and S.squares([1e300, 1e300])[0] == 1e300


def test_a_stage_of_jobs_near_the_float_range_reports(tmp_path):
    """The program fuzz seed 25 found: a processor-sharing stage's jobs of ~uniform(1, 1e308)
    seconds; the run ends near 1.8e308 s and reports (the response's mean is a number, the
    stage's utilisation 1), where it ended in an internal error (OverflowError in fsum)."""
    import json
    import subprocess
    import sys
    src = tmp_path / "huge.sq"
    src.write_text("""fn main() {
  stage cpu : ps(1);
  workload {
    arrive batch(5);
    turn { Size n = ~uniform(1, 1e308); }
  }
  server { run cpu (cost(cpu, n)); observe w = n; observe w = n; }
  claim beyond: at end (total(w) == inf);
}
""")
    p = subprocess.run([sys.executable, "-m", "serq.cli", "run", str(src), "--warmup", "1.0", "--seed", "39", "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    resp = rep["client"]["response"]
    assert resp["count"] == 5 and resp["min"] <= resp["mean"] <= resp["max"] < math.inf
    assert rep["stages"]["cpu"]["utilisation"] == 1.0
    assert rep["claims"]["beyond"]["status"] == "held"  # the sum of w is beyond the float range
