"""Fuzz cases (tests/fuzzgen.py) for the checker, the runner, the IR reader and the verifier, each in a worker
under a time budget (tests/fuzzrun.py): a case ends in a report, a diagnostic or a usage error,
and one over its budget fails with its program printed instead of hanging the suite.

The profile is fuzzgen.SUITE: the classes of value whose failures are fixed here. `make fuzz`
runs every class (fuzzgen.FULL) for as long as asked."""
from __future__ import annotations

import json
import os
import re
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import fuzzgen
import fuzzrun

BUDGET = 30.0  # seconds a case may take on a loaded machine; an ordinary case takes under one

# derandomized: the suite runs the same cases every time; no shrinking, whose every step of a
# hang would cost a whole budget (tools/fuzz.py shrinks what a campaign finds)
FUZZ = settings(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def worker():
    w = fuzzrun.Worker(BUDGET)
    yield w
    w.close()


def judge(worker, case):
    v = worker.run(case)
    assert v["ok"], fuzzrun.show(case, v)


@settings(FUZZ, max_examples=120)
@given(case=fuzzgen.strategy(fuzzgen.SUITE, "check"))
def test_checking_mutated_programs_ends_in_ok_or_a_diagnostic(worker, case):
    judge(worker, case)


@settings(FUZZ, max_examples=60)
@given(case=fuzzgen.strategy(fuzzgen.SUITE, "run"))
def test_running_programs_with_other_numbers_and_settings_ends_in_a_report_or_a_diagnostic(worker, case):
    judge(worker, case)


@settings(FUZZ, max_examples=50)
@given(case=fuzzgen.strategy(fuzzgen.SUITE, "ir"))
def test_mutated_ir_files_are_checked_and_run_to_a_report_or_a_diagnostic(worker, case):
    judge(worker, case)


@settings(FUZZ, max_examples=20)
@given(case=fuzzgen.strategy(fuzzgen.SUITE, "verify"))
def test_verifying_mutated_programs_ends_in_verdicts_or_a_diagnostic(worker, case):
    """`serq verify` at a small bound on mutated programs with claims: verdicts in strict JSON or a
    diagnostic, never a traceback, and every deciding workload replayed by the interpreter as the
    kernel ran it (exit 3 otherwise). `tools/fuzz.py --target verify` for a campaign."""
    judge(worker, case)


# ------------------------------------------------------------------------------------- the oracle
SLOW = {"target": "run", "seed": "examples/single-turn/mg1.sq", "files": {},
        "program": fuzzgen.BY_NAME["examples/single-turn/mg1.sq"].text,
        "argv": ["--arrivals", "1000000", "--quiet"]}  # ends, after a minute or more


def test_a_case_over_its_budget_is_a_failure_named_hang_and_returns_within_the_budget():
    # serQ's watch looks after 0.3 s of CPU: this run would finish at its pace, so it says nothing
    w = fuzzrun.Worker(timeout=1.0, slow_after=0.3)
    try:
        t0 = time.monotonic()
        v = w.run(SLOW)
        assert time.monotonic() - t0 < 10  # the budget, and at most 5 s waiting for the stacks
        # where it was comes from its stacks: a serQ frame of the working thread (the simulation's,
        # not `serq run`'s watch waiting between its looks)
        assert not v["ok"] and v["cause"].startswith("hang@serq/interp/"), v["cause"]
        assert "over the budget of 1 s" in v["detail"] and "Thread 0x" in v["detail"]
        assert "no slow-run note from serQ" in v["detail"]
        # each frame's line is a line of its file (stacks read as they changed gave 2122677472)
        for path, line in re.findall(r'File "([^"]+)", line (\d+) in ', v["detail"]):
            if not os.path.isfile(path):  # code compiled from text (a program's queueing path)
                continue
            with open(path, encoding="utf-8") as fh:
                assert 0 < int(line) <= len(fh.readlines()), (path, line)
        # the worker is replaced: the next case runs
        w.timeout = BUDGET
        ok = w.run({"target": "check", "seed": "-", "program": "fn main() { stage s : fifo; }",
                    "files": {}, "argv": []})
        assert ok["ok"] and ok["exits"] == [1], ok  # L232: no workload
    finally:
        w.close()


# gaps of about 1e-300 s (fuzzgen's tiny values): the clock cannot reach a horizon of 25 in any time
ENDLESS = {"target": "run", "seed": "-", "files": {}, "argv": ["--horizon", "25"], "program": """
fn main() {
  stage svc : fifo;
  workload {
    arrive renewal(~erlang(2, 1e-300));
    turn { Cost work = cost(svc, ~exp(1)); }
  }
  server { run svc (work); }
}"""}


def test_a_program_serq_says_is_too_slow_to_finish_is_a_slow_program_not_a_hang():
    """serQ's own slow-run note, said from the worker while the run goes on, stops the case: a slow
    program (its values make it endless), not a failure. The watch looks after 0.3 s of CPU here."""
    w = fuzzrun.Worker(timeout=20.0, slow_after=0.3)
    try:
        t0 = time.monotonic()
        v = fuzzrun.run_retrying(w, ENDLESS)
        assert time.monotonic() - t0 < 10, "stopped at the note, not at the budget"
        assert v["ok"] and v["slow"].startswith("serq: note: the run is progressing too slowly to finish"), v
        assert "the rest takes about" in v["slow"] and "retried" not in v
        assert fuzzrun.slow_program(v["slow"])
        assert not fuzzrun.slow_program(v["slow"].replace(re.search(r"\(([\d,]+) events", v["slow"]).group(1),
                                                          "0", 1))  # no event at all: stuck, a hang
    finally:
        w.close()


def test_a_traceback_is_a_failure_named_by_its_type_and_innermost_serq_function(monkeypatch):
    from serq import cli

    def boom(argv):
        return 1 // 0
    monkeypatch.setattr(cli, "main", boom)
    with pytest.raises(fuzzrun.Failure) as e:
        fuzzrun.serq(["check", "x.sq"])
    assert e.value.cause == "ZeroDivisionError"  # no frame of serQ's own raised it
    assert "Traceback" in e.value.detail and e.value.argv == ["check", "x.sq"]
    serq_dir = fuzzrun.SERQ
    frames = [(serq_dir + "cli.py", "main"), (serq_dir + "interp/sim.py", "_fire"),
              (serq_dir + "interp/sim.py", "<listcomp>"), ("/usr/lib/python3/json/__init__.py", "loads")]
    assert fuzzrun._frame_cause("ValueError", frames) == "ValueError@serq/interp/sim.py:_fire"


def test_exit_statuses_are_held_to_their_promised_output(monkeypatch, capsys):
    from serq import cli

    def fake(code, err="", out=""):
        def main(argv):
            import sys
            print(err, file=sys.stderr)
            print(out)
            return code
        return main
    for code, err, out, cause in [
            (1, "f.sq:1:2: error[L070]: unknown name", "", None),
            (1, "something went wrong", "", "exit-1-without-diagnostic"),
            (2, "serq: error: --seed is a nonnegative integer", "", None),
            (2, "oops", "", "exit-2-without-usage-error"),
            (3, "", "", "exit-3"),
            (0, "", '{"end": 1.5}', None),
            (0, "", '{"end": Infinity}', "not-strict-json"),
            (0, "", '{"u": NaN}', "not-strict-json")]:
        monkeypatch.setattr(cli, "main", fake(code, err, out))
        if cause is None:
            assert fuzzrun.serq(["run", "x.sq", "--json"], want_json=True)[0] == code
        else:
            with pytest.raises(fuzzrun.Failure) as e:
                fuzzrun.serq(["run", "x.sq", "--json"], want_json=True)
            assert e.value.cause == cause


def test_ir_mutations_change_the_leaf_they_name():
    ir = {"version": 1, "files": ["a.sq"],
          "a": {"rate": 2, "name": "s", "xs": [{"v": 1, "at": [0, 1, 1]}, {"v": 3}]}}
    # "num" counts the values (rate, xs[0].v, xs[1].v: not `version`, `files` or a position `at`);
    # the structural operations every leaf
    assert fuzzrun.apply_ir(json.loads(json.dumps(ir)), [[4, "num", 0.5]])["a"]["xs"][0]["v"] == 0.5
    assert fuzzrun.apply_ir(json.loads(json.dumps(ir)), [[3, "num", 0.5]])["a"]["rate"] == 0.5
    assert "rate" not in fuzzrun.apply_ir(json.loads(json.dumps(ir)), [[2, "del", 0]])["a"]
    dup = fuzzrun.apply_ir(json.loads(json.dumps(ir)), [[8, "dup", 0]])["a"]["xs"]
    assert dup == [{"v": 1, "at": [0, 1, 1]}, {"v": 3}, {"v": 3}]
    assert fuzzrun.apply_ir(json.loads(json.dumps(ir)), [[2, "retype", None]])["a"]["rate"] is None
    assert fuzzrun.apply_ir(json.loads(json.dumps(ir)), [[1, "str", 0]])["a"]["name"] == "a.sq"


def test_program_mutations_reach_every_number_and_declare_the_zero_they_use():
    text = 'fn main() { let a = 12; let b = args.number("x1", 0.5); }'
    assert [text[a:b] for a, b in fuzzgen.numbers(text)] == ["12", "0.5"]

    class First:  # replace the first number by (fz_ / fz_), once
        def __init__(self):
            self.n = 0

        def choice(self, seq):
            return "number" if "number" in seq else "(fz_ / fz_)"

        def integer(self, lo, hi):
            self.n += 1
            return 1 if self.n == 1 else lo
    out, changes = fuzzgen.mutate_program(First(), fuzzgen.FULL, text)
    assert changes == ["12 -> (fz_ / fz_)"]
    assert out.startswith("fn main() {\n  let fz_ = 0;") and "let a = (fz_ / fz_);" in out


# ------------------------------------------------------------- every expression of the IR, probed
def test_every_expression_of_an_ir_file_read_as_a_probe_is_refused_or_runs(tmp_path):
    """Each expression of the fuzz programs' IR replaced, in turn, by a seeded sample of the probes
    (fuzzrun._probes: observables, engine values, registers, context variables, a draw, an
    aggregate) and read as an IR file, then run briefly: a diagnostic or a report, never an internal
    error. Probing every place with every probe this way found reads the linker's moments refuse
    ending in internal errors (an observable in a ps capacity, budget_left in a tokens cap, a draw
    in a hold's index); this sample keeps every place in the suite."""
    import glob
    import os
    import random
    import signal

    from serq.diagnostics import SerqError
    from serq.interp.sim import Sim
    from serq.ir import model as I
    from serq.lang.lower.inputs import UsageError
    from serq import api

    class Slow(Exception):
        pass

    def alarm(*_):
        raise Slow()
    old = signal.signal(signal.SIGALRM, alarm)
    rng = random.Random(7)
    failures, cases = [], 0
    try:
        for f in sorted(glob.glob(os.path.join(fuzzrun.ROOT, "tests", "data", "fuzz", "*.sq"))):
            base = json.loads(api.load(f).model_dump_json(exclude_none=True))
            probes = fuzzrun._probes(base)
            for path in fuzzrun._expr_paths(base):
                for pr in rng.sample(probes, 2) + probes[len(fuzzrun._CTX):len(fuzzrun._CTX) + 2]:
                    d = json.loads(json.dumps(base))
                    fuzzrun._at(d, path[:-1])[path[-1]] = json.loads(json.dumps(pr))
                    cases += 1
                    try:
                        signal.setitimer(signal.ITIMER_REAL, 5.0)
                        ir = tmp_path / "case.json"
                        ir.write_text(json.dumps(d))
                        Sim(api.load_ir(str(ir)), I.Settings(horizon=5.0, seed=1)).run()
                    except (SerqError, UsageError, Slow):
                        pass
                    except Exception as e:  # noqa: BLE001 - what the test looks for
                        failures.append(f"{os.path.basename(f)} {path} <- {json.dumps(pr)}: {type(e).__name__}: {e}")
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert cases > 800 and not failures, "\n".join(failures[:10])
