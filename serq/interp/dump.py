"""`--dump DIR` (report.md): the samples behind the report as CSV files, written whole or not at all.

The destination is checked, and a staging directory made next to it, before the run; the files go
into the staging directory, each written whole (serq/_write.py), which is renamed into place when they
are all written (serq/staged.py). A previous dump (or an empty directory) at DIR is replaced; any other
directory is refused, so that a mistyped `--dump ~` cannot delete what it holds, and so is one into
which other files were put while the run went on (cli.md, *--dump*)."""
from __future__ import annotations

import csv
import fnmatch
import io
import itertools
import json
import math
import os
from array import array

from serq._write import replace
from serq.interp import stats
from serq.interp.stats import Column, Spilled
from serq.staged import StagedDir

# the names a dump writes, in DIR and in its subdirectories: what makes a directory a previous dump
TOP = ("observe_*.csv", "client_*.csv", "requests.csv", "dump.json",
       "requests.png", "requests.svg")  # and the figures `serq plot DIR/requests.csv` writes beside it
GAUGES, POOLS, STAGES = "gauge", "pool", "stage"
SUBDIRS = (GAUGES, POOLS, STAGES)


class Recorder:
    """The change points of what a pool's or stage's time average does not keep: each stage's
    running and waiting requests, each pool's queue. Read where the gauges are, at the end of every
    instant (sim._gauges), and only under --dump; a point is kept when a value changes."""

    def __init__(self, sim):
        self.stages = [(st, _reader(sim, st)) for st in sim.stages]
        self.pools = list(sim.pools)
        # per stage (running, waiting), per pool (queued,): times and values, from 0
        self.series = [(array("d", [0.0]), [array("d", [0.0]) for _ in range(k)])
                       for k in [2] * len(self.stages) + [1] * len(self.pools)]

    def __call__(self, now: float):
        i = 0
        for _, read in self.stages:
            self._note(i, now, read())
            i += 1
        for m in self.pools:
            self._note(i, now, (float(len(m.queue)),))
            i += 1

    def _note(self, i, now, vals):
        ts, cols = self.series[i]
        if all(c[-1] == v for c, v in zip(cols, vals)):
            return
        if ts[-1] == now:  # read twice at one instant (the last read at the end): the later holds
            for c, v in zip(cols, vals):
                c[-1] = v
        else:
            ts.append(now)
            for c, v in zip(cols, vals):
                c.append(v)

    def stage_rows(self, k, end):
        ts, (run, wait) = self.series[k]
        return ((t, r, w) for t, r, w in zip(ts, run, wait) if t <= end)

    def pool_rows(self, k, end):
        """time, used, queued: the pool's used change points (its time average's, the report's
        mean_used) merged with its queue's, each value held until its next change."""
        ts, (q,) = self.series[len(self.stages) + k]
        used = self.pools[k].used_avg.points
        out = []
        u = qv = 0.0
        a = iter(used)
        b = iter(zip(ts, q))
        na, nb = next(a, None), next(b, None)
        while na is not None or nb is not None:
            t = min(x[0] for x in (na, nb) if x is not None)
            if t > end:
                break
            if na is not None and na[0] == t:
                u = na[1]
                na = next(a, None)
            if nb is not None and nb[0] == t:
                qv = nb[1]
                nb = next(b, None)
            out.append((t, u, qv))
        return out


class Requests:
    """requests.csv's rows: one per answered turn the report counts (after the warm-up), in the
    order they were answered, kept as columns that spill past SWITCH as a statistic's samples do.
    A flag per row says which of its optional cells it has."""
    HEADER = ["session", "turn", "start", "first_token", "end", "ttft", "tpot", "itl_max", "response",
              "prompt_tokens", "output_tokens", "preemptions", "cached_tokens"]
    FIRST, TPOT, ENGINE, GAP = 1, 2, 4, 8

    def __init__(self):
        self.cols = [Column(c) for c in "qqdddddddqq"]  # session, turn, the seven times, preemptions, flags
        self.toks = [Column("d") for _ in range(3)]     # prompt, output, cached tokens
        self.cap = stats.SWITCH

    def add(self, sess, rec, now, tpot):
        flags = (self.FIRST if rec.first is not None else 0) | (self.TPOT if tpot is not None else 0) \
            | (self.ENGINE if rec.prompt is not None else 0) | (self.GAP if rec.gap > 0 else 0)
        first = rec.first if rec.first is not None else 0.0
        # the turn is answered: its session has moved to the next turn (Sim.turn_end); its longest
        # gap between output tokens is kept while requests are recorded (api._run: Sim.itl_max)
        row = (sess.serial, sess.turn_idx - 1, rec.start, first, now, first - rec.start,
               tpot if tpot is not None else 0.0, rec.gap, now - rec.start, rec.preempted, flags)
        for c, x in zip(self.cols, row):
            c.buf.append(x)
        # prompt_tokens as OpenAI's usage has them, the whole prompt; cached_tokens of them from the cache
        for c, x in zip(self.toks, ((rec.prompt or 0.0) + rec.cached, float(rec.ntok), rec.cached)):
            c.buf.append(x)
        if len(self.cols[0].buf) >= self.cap:
            for c in self.cols + self.toks:
                c.flush()
            self.cap = stats.CHUNK

    def rows(self):
        cols = zip(*(Spilled(c, 0) for c in self.cols + self.toks))
        for sid, turn, start, first, end, ttft, tpot, gap, resp, pre, flags, prompt, out, cached in cols:
            has_first, eng = flags & self.FIRST, flags & self.ENGINE
            yield (sid, turn, start, first if has_first else "", end, ttft if has_first else "",
                   tpot if flags & self.TPOT else "", gap if flags & self.GAP else "", resp,
                   prompt if eng else "", out if eng else "", pre, cached)


def _reader(sim, st):
    """(running, waiting) of a stage now: an engine's running.count and waiting.count (the
    language's), a fifo's jobs in service and in its queue, a ps stage's jobs (all in service)."""
    from serq.interp.engine import Engine
    from serq.interp.stages import Fifo
    if isinstance(st, Engine):
        return lambda: (sim._running(st)[0], float(sum(len(p.queue) for p in st.admitted)))
    if isinstance(st, Fifo):
        return lambda: (float(st.serving), float(st.n - st.serving))
    return lambda: (float(st.n), 0.0)


def _finite(v):
    return v if not isinstance(v, float) or math.isfinite(v) else None


def write(sim, rep: dict, directory: str):
    """Each observation's samples, the client's, every gauge's change points, the pools' and
    stages' (when recorded), and dump.json: the run's settings, which a plot reads."""
    os.makedirs(os.path.join(directory, GAUGES), exist_ok=True)
    for name, ser in sim.obs.items():
        _csv(os.path.join(directory, f"observe_{name}.csv"), ["time", "session", "turn", "value"], ser.dump_rows())
    for name, ser in sim.client.items():
        if ser.v:
            _csv(os.path.join(directory, f"client_{name}.csv"), ["value"], ([v] for v in ser.after()))
    if sim.requests is not None:
        _csv(os.path.join(directory, "requests.csv"), Requests.HEADER, sim.requests.rows())
    end = rep["end"]
    for name, _, avg in sim.gauges:
        _csv(os.path.join(directory, GAUGES, f"{name}.csv"), ["time", "value"],
             (p for p in avg.points if p[0] <= end))
    rec = sim.recorder
    if rec is not None:
        if rec.pools:
            os.makedirs(os.path.join(directory, POOLS), exist_ok=True)
        for k, m in enumerate(rec.pools):
            _csv(os.path.join(directory, POOLS, f"{m.label}.csv"), ["time", "used", "queued"], rec.pool_rows(k, end))
        if rec.stages:
            os.makedirs(os.path.join(directory, STAGES), exist_ok=True)
        for k, (st, _) in enumerate(rec.stages):
            _csv(os.path.join(directory, STAGES, f"{st.label}.csv"), ["time", "running", "waiting"],
                 rec.stage_rows(k, end))
    prog = sim.prog
    meta = {"program": prog.files[0] if prog.files else None, "seed": sim.seed,
            "horizon": _finite(sim.horizon), "warmup": sim.warmup, "end": _finite(end),
            # an infinite input as serq inputs --json writes it, which float() reads back (plot's Units)
            "inputs": {k: v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
                       for k, v in prog.settings.inputs.items()},
            "pools": {m.label: _finite(m.cap) for m in sim.pools},
            "engines": [e.label for e in getattr(sim, "engines", [])]}
    replace(os.path.join(directory, "dump.json"), json.dumps(meta, indent=1, allow_nan=False) + "\n")


def _csv(path, header, rows):
    """A CSV file written whole (serq/_write.py), its rows formatted a batch at a time: a table of
    millions of rows is never held as one text."""
    replace(path, _csv_text(header, rows))


def _csv_text(header, rows, batch: int = 4096):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    it = iter(rows)
    while True:
        part = list(itertools.islice(it, batch))
        if not part:
            break
        w.writerows(part)
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def foreign(directory: str) -> str | None:
    """An entry of directory that a dump does not write, or None (an empty directory included)."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False) and entry.name in SUBDIRS:
            for e in os.scandir(entry.path):
                if not (e.is_file(follow_symlinks=False) and e.name.endswith(".csv")):
                    return f"{entry.name}/{e.name}"
        elif not (entry.is_file(follow_symlinks=False) and any(fnmatch.fnmatch(entry.name, p) for p in TOP)):
            return entry.name
    return None


class Staged(StagedDir):
    """A dump's destination, checked and staged before the run (serq/staged.py): `write` puts the
    files in place, `discard` leaves the destination as it was. A bad destination is a usage error."""

    def __init__(self, path: str):
        super().__init__(path, "--dump", "a dump", foreign)

    def write(self, sim, rep: dict):
        """The files into the staging directory, then renamed into place; on failure nothing is left
        but what was at the destination before. An OSError says why; OutputError, that other files
        were put at the destination meanwhile (left as they are, the dump kept beside them)."""
        try:
            write(sim, rep, self.stage)
            self.commit()
        finally:
            self.discard()
