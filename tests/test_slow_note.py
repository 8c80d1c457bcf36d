"""A run that progresses too slowly to finish says so on stderr (serq/cli.py, _Watch): once it has
used SLOW_AFTER seconds of CPU, if the pace of the last SLOW_AFTER seconds leaves more than
SLOW_LIMIT seconds of CPU to go, with the likely cause where it is cheap to see. A normal run says
nothing. The thresholds are parameters, here a fraction of a second."""
from __future__ import annotations

import os
import threading
import time

import pytest

from serq import api, cli
from serq.ir.model import Settings

ROOT = os.path.join(os.path.dirname(__file__), "..")
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")


class _Stop(Exception):
    pass


def test_a_run_whose_prefills_advance_by_nothing_says_so_within_seconds():
    """Issue 29: `--set chunk_cap=1e-300 --arrivals 20` ran on silently for minutes: each
    iteration schedules 1e-300 tokens of a prompt, and 14 sessions never end."""
    prog = api.load(VLLM, {"chunk_cap": 1e-300})
    notes: list = []
    t0 = time.monotonic()

    def bar(sim):  # called at each instant: stops the run once the note is said (or after 60 s)
        if notes or time.monotonic() - t0 > 60:
            raise _Stop

    watch = cli._Watch(bar, {"chunk_cap": 1e-300}, after=0.5, every=0.1, say=notes.append)
    with pytest.raises(_Stop):
        api.run(prog, Settings(arrivals=20), watch)
    watch.thread.join(5)
    assert time.monotonic() - t0 < 20  # the note comes within a few seconds of the threshold
    assert len(notes) == 1, notes
    note = notes[0]
    assert note.startswith("serq: note: the run is progressing too slowly to finish: after ")
    assert "6 of its 20 sessions have ended, 0 in the last " in note and "at this pace it may never finish" in note
    assert "events a CPU second, the clock at " in note
    assert "Likely cause: engine `vllm` ran " in note
    assert "an iteration that schedules a vanishing number of tokens" in note
    assert "inputs set near 0: chunk_cap=1e-300" in note
    assert note.endswith("The run goes on (Ctrl-C stops it).")


def test_a_run_that_moves_too_slowly_against_its_horizon_says_so_without_a_cause():
    """The generic note: the clock against the horizon, its events and clock per CPU second; no
    engine here, so no cause is named."""
    prog = api.load_text("fn main() { stage s : fifo; workload { arrive poisson(1); } "
                         "server { run s (cost(s, ~exp(0.5))); } }", "slow.sq")
    notes: list = []
    t0 = time.monotonic()

    def bar(sim):
        if notes or time.monotonic() - t0 > 60:
            raise _Stop
    # a horizon of a million is under a minute of CPU: a limit of 0.1 s calls it too slow
    watch = cli._Watch(bar, {}, after=0.3, every=0.1, limit=0.1, say=notes.append)
    with pytest.raises(_Stop):
        api.run(prog, Settings(horizon=1e6), watch)
    watch.thread.join(5)
    assert len(notes) == 1
    assert "the clock is at " in notes[0] and " of the horizon 1e+06; at this pace the rest takes about " in notes[0]
    assert "Likely cause" not in notes[0]


def test_a_normal_run_says_nothing(capsys, monkeypatch):
    """vllm.sq at its defaults, with the thresholds at a fraction of a second: no note, and the
    watch's thread is gone when the command returns."""
    monkeypatch.setattr(cli, "SLOW_AFTER", 0.3)
    monkeypatch.setattr(cli, "SLOW_EVERY", 0.05)
    before = threading.active_count()
    assert cli.main(["run", VLLM, "--horizon", "3000", "--warmup", "20"]) == 0  # about a second of CPU
    out, err = capsys.readouterr()
    assert "note" not in err and "too slowly" not in err, err
    assert out.startswith("serq run ")
    assert not any(t.name == "serq-watch" for t in threading.enumerate())
    assert threading.active_count() <= before


def test_the_watch_costs_the_loop_nothing_without_a_bar():
    """Off a terminal (or with --quiet) Sim.run gets no per-instant call from the watch."""
    prog = api.load_text("fn main() { stage s : fifo; workload { arrive poisson(0.5); } "
                         "server { run s (cost(s, ~exp(1))); } }", "q.sq")
    watch = cli._Watch(None, {})
    seen = []
    real = watch.start

    def start(sim):
        r = real(sim)
        seen.append(r)
        return r
    watch.start = start
    try:
        api.run(prog, Settings(arrivals=200), watch)
    finally:
        watch.close()
    assert seen == [None] and watch.noted is None


def test_a_signal_before_the_watch_thread_starts(monkeypatch):
    """SIGTERM is raised in the main thread, which waits on the run's thread (api._deep): the watch
    can be closed while the run thread has made the watch thread but not yet started it. close()
    then ends cleanly, joining nothing (a CI run's SIGTERM test once ended with 'cannot join thread
    before it is started'); here start() is stopped at the same point."""
    watch = cli._Watch(None, {})

    def interrupted(self):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", interrupted)
        with pytest.raises(KeyboardInterrupt):
            watch.start(object())
    assert watch.thread is not None and not watch.thread.is_alive()
    watch.close()
    assert watch.thread is None
