"""The fuzz harness's budget (tests/fuzzrun.py, tools/fuzz.py): a case is charged the CPU time
its worker uses, not the wall time it waits for a core; a suspected hang is run again, alone, with
a longer budget, and is a hang only if it is over that too. A stand-in worker (FAKE: the worker's
protocol, whose cases spin or sleep for as long as they say, and say serQ's slow-run note where they
carry one) keeps these tests to a few seconds. A case that serQ says is too slow to finish is a
slow program, not a hang."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

import fuzzrun

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

FAKE = r'''
import faulthandler, json, signal, sys, time
dump = open(sys.argv[2], "w")
faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
out = sys.stdout
print("ready", file=out, flush=True)
for line in sys.stdin:
    case = json.loads(line)
    t0 = time.monotonic()
    c0 = time.process_time()
    if case.get("note"):  # serQ's slow-run note, as the real worker passes it on: then on and on
        with open(sys.argv[3], "a") as fh:
            fh.write(case["note"] + "\n")
    while time.process_time() - c0 < case.get("spin", 0):  # CPU time
        pass
    time.sleep(case.get("sleep", 0))                           # wall time, no CPU
    print(json.dumps({"ok": True, "exits": [0], "seconds": time.monotonic() - t0}), file=out, flush=True)
'''

WORKER = fuzzrun.Worker  # the real one, which the campaign's test replaces by the stand-in


def test_a_process_cpu_time_is_read():
    """The budget is CPU time read from /proc (these machines are Linux): a reader that fails would
    leave the harness on wall time, the false hangs this fixes, so it must read here."""
    t = fuzzrun.cpu_seconds(os.getpid())
    assert t is not None and t > 0


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE, encoding="utf-8")
    workers = []

    def make(timeout, wall_factor=fuzzrun.WALL_FACTOR, slow_after=None):
        w = WORKER(timeout, wall_factor, argv=[sys.executable, str(script)], slow_after=slow_after)
        workers.append(w)
        return w
    yield make
    for w in workers:
        w.close()


def case(**kw):
    return {"target": "run", "seed": "fake", "program": "", "files": {}, "argv": [], **kw}


def test_the_budget_is_cpu_time_not_the_wall_time_spent_waiting(fake):
    w = fake(0.5)
    v = w.run(case(sleep=1.2))  # over the budget in wall time, with no CPU used: a case waiting for a core
    assert v["ok"], v
    assert v["cpu"] < 0.5 and v["seconds"] >= 1.2


def test_a_case_blocked_past_the_wall_cap_is_a_hang_that_says_so(fake):
    w = fake(0.2, wall_factor=4)
    t0 = time.monotonic()
    v = w.run(case(sleep=60))
    assert time.monotonic() - t0 < 0.8 + 5 + 1  # the cap, and at most 5 s for the stacks
    assert not v["ok"] and v["cause"] == "hang"
    assert v["detail"].startswith("over the budget of 0.2 s (wall time: ")
    assert "blocked, or starved of a core" in v["detail"]


def test_a_slow_case_over_its_budget_is_cleared_by_its_retry_alone(fake):
    w = fake(0.4)
    v = w.run(case(spin=0.8))
    assert not v["ok"] and v["cause"] == "hang"  # the first run alone calls it one
    assert v["detail"].startswith("over the budget of 0.4 s (CPU time: ")
    v = fuzzrun.run_retrying(w, case(spin=0.8), factor=4)
    assert v["ok"], v
    assert v["retried"].startswith("over its budget of 0.4 s side by side with other cases")
    assert "run again alone with 1.6 s, it ended in " in v["retried"] and v["retried"].endswith("not a hang")
    # the worker was replaced after the first run: the next case runs as ever
    assert w.run(case())["ok"]


def test_a_case_over_its_retry_too_is_a_hang_that_says_it_was_retried(fake):
    w = fake(0.2)
    v = fuzzrun.run_retrying(w, case(spin=60), factor=2)
    assert not v["ok"] and v["cause"] == "hang"
    assert v["retried"].endswith("run again alone with 0.4 s, over that too: a hang")
    assert v["detail"].startswith(v["retried"] + "\nover the budget of 0.4 s (CPU time: ")


def test_a_case_that_ends_is_not_retried(fake):
    w = fake(5)
    v = fuzzrun.run_retrying(w, case(spin=0.05))
    assert v["ok"] and "retried" not in v


def test_the_retry_runs_alone():
    """`alone` waits for the cases running to end, and holds back new ones until it is done."""
    gate = fuzzrun.Gate()
    log = []
    first_in = threading.Event()
    release_first = threading.Event()

    def running(name, hold=None):
        with gate.shared():
            log.append(f"{name} starts")
            if hold is not None:
                first_in.set()
                hold.wait(5)
            log.append(f"{name} ends")

    def retry():
        with gate.alone():
            log.append("retry starts")
            time.sleep(0.1)
            log.append("retry ends")
    a = threading.Thread(target=running, args=("a", release_first))
    a.start()
    first_in.wait(5)
    r = threading.Thread(target=retry)
    r.start()
    time.sleep(0.1)           # the retry now waits for a
    b = threading.Thread(target=running, args=("b",))
    b.start()
    time.sleep(0.1)           # and b waits for the retry
    assert log == ["a starts"]
    release_first.set()
    for t in (a, r, b):
        t.join(5)
    assert log == ["a starts", "a ends", "retry starts", "retry ends", "b starts", "b ends"]


def test_the_campaign_prints_a_retry_that_cleared_a_case(fake, monkeypatch, tmp_path, capsys):
    import fuzz
    slow = case(spin=0.6)
    monkeypatch.setattr(fuzz.fuzzgen, "random_case", lambda seed, gen, target: dict(slow, seed=seed))
    monkeypatch.setattr(fuzz.fuzzrun, "Worker", lambda timeout, **kw: fake(timeout, **kw))
    out = tmp_path / "out"
    assert fuzz.main(["--cases", "1", "--jobs", "1", "--timeout", "0.3", "--retry-factor", "5",
                      "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "case 1:0 (run, 1:0): over its budget of 0.3 s side by side with other cases" in text
    assert "run again alone with 1.5 s, it ended in " in text
    assert "suspected hangs retried alone with 5 times the budget: 1; cleared by the retry (slow, not hung): 1" in text
    assert "passed: 1; slow programs: 0; failures: 0" in text


# serQ's note, as serq/cli.py's _Watch words it: a run that moves (events each CPU second) but cannot finish
NOTE = ("serq: note: the run is progressing too slowly to finish: after 10 s of CPU, the clock is at 1.4793e-295 "
        "of the horizon 25; at this pace the rest takes about 2.38e+292 h of CPU (584,599 events a CPU second, "
        "the clock at 1.4793e-295 and advancing 2.92e-295 a CPU second). The run goes on (Ctrl-C stops it).")
STUCK = NOTE.replace("584,599 events", "0 events")  # no event at all: stuck within one instant


def test_a_case_serq_says_is_too_slow_to_finish_is_a_slow_program_not_a_hang(fake):
    w = fake(3)
    t0 = time.monotonic()
    v = fuzzrun.run_retrying(w, case(note=NOTE, spin=60))
    assert time.monotonic() - t0 < 2.5  # stopped at the note, not at the budget
    assert v["ok"] and v["slow"] == NOTE and "retried" not in v, v
    assert w.run(case())["ok"]  # the worker was replaced


def test_a_note_of_a_run_that_schedules_no_event_is_still_a_hang(fake):
    w = fake(0.4)
    v = w.run(case(note=STUCK, spin=60))
    assert not v["ok"] and v["cause"] == "hang"
    assert "stuck within one instant" in v["detail"] and STUCK in v["detail"]


def test_the_campaign_counts_a_slow_program_and_passes(fake, monkeypatch, tmp_path, capsys):
    import fuzz
    slow = case(note=NOTE, spin=60, program="fn main() { }")
    monkeypatch.setattr(fuzz.fuzzgen, "random_case", lambda seed, gen, target: dict(slow, seed=seed))
    monkeypatch.setattr(fuzz.fuzzrun, "Worker", lambda timeout, **kw: fake(timeout, **kw))
    out = tmp_path / "out"
    assert fuzz.main(["--cases", "1", "--jobs", "1", "--timeout", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "case 1:0 (run, 1:0): a slow program, not a failure: " + NOTE in text
    assert "passed: 0; slow programs: 1; failures: 0" in text
    assert "slow programs (serq run's own note: too slow to finish; not failures): 1" in text
    listed = (out / "slow.txt").read_text()
    assert listed.startswith("case 1:0 (run, 1:0") and NOTE in listed and "fn main() { }" in listed
