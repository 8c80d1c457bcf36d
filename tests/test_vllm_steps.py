"""vLLM 0.33.0's recorded scenarios step for step (`tools/vllm_oracle.py check --steps`, docs/vllm.md,
*Step for step*): each step's tokens scheduled per request, requests preempted and finished, and
free KV blocks after it, through the interpreter and the reference kernel, on every main scenario
and every extra one."""
from __future__ import annotations

import copy
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))

import vllm_oracle  # noqa: E402

RESULTS = sorted(glob.glob(os.path.join(ROOT, "tools", "oracle", "results", "*.json")))
EXTRA = sorted(glob.glob(os.path.join(ROOT, "tools", "oracle", "extra", "results", "*.json")))
STEPS = os.path.join(ROOT, "tools", "oracle", "extra", "steps")
TOOL = os.path.join(ROOT, "tools", "vllm_oracle.py")


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def differences(paths, ref, shared):
    """{name: what check --steps finds first}: ('step', k, fields) or ('request', id, field)."""
    out = {}
    for path in paths:
        result = load(path)
        want = vllm_oracle.vllm_steps(result, path)
        assert want is not None, path
        got, have = vllm_oracle.run_steps(result, path, ref, shared=shared, at_least=len(want))
        sdiff = vllm_oracle.compare_steps(want, have)
        if sdiff is not None:
            out[result["name"]] = ("step",) + vllm_oracle.step_diff_key(sdiff)
        elif vllm_oracle.compare(result, got) is not None:
            out[result["name"]] = ("request",) + vllm_oracle.compare(result, got)
    return out


def unexplained(diffs, side):
    return {n: d for n, d in diffs.items() if vllm_oracle.known(n, side, d) is None}


SIDES = [(False, True), (True, True), (False, False), (True, False)]


@pytest.mark.parametrize("ref,shared", SIDES, ids=[vllm_oracle.side(r, s) for r, s in SIDES])
def test_every_main_scenario_agrees_step_for_step(ref, shared):
    """All 52, each agreeing at every step or differing first where docs/vllm.md says: on
    vllm_shared.sq only the stall (10) differs, on the per-session vllm_request.sq the `repeat`
    request's two scenarios too."""
    diffs = differences(RESULTS, ref, shared)
    side = vllm_oracle.side(ref, shared)
    assert not unexplained(diffs, side), unexplained(diffs, side)
    expect = {"10_preempt_only_step_stall"} | (set() if shared else {"09_prefix_caching_multiturn",
                                                                     "09b_prefix_caching_multiturn_tight"})
    assert set(diffs) == expect


# the reference kernel's reading of the 320 (~22 s): make check's (marked campaign)
@pytest.mark.parametrize("ref", [False, pytest.param(True, marks=pytest.mark.campaign)], ids=["interp", "ref"])
def test_every_extra_scenario_agrees_step_for_step(ref):
    """The 320 of tools/oracle/extra, their steps from steps/, on vllm_shared.sq."""
    assert differences(EXTRA, ref, True) == {}


def test_the_extra_steps_are_the_results_steps():
    """Each extra result has its steps file, and the steps say what the result's records say:
    each request first scheduled at its first admission, finished at its finish step, preempted at
    its preemption steps."""
    assert len(EXTRA) == 320
    assert sorted(os.listdir(STEPS)) == sorted(os.path.basename(p) for p in EXTRA)
    for path in EXTRA[::7]:
        result = load(path)
        steps = vllm_oracle.vllm_steps(result, path)
        for r in result["requests"]:
            rid = r["id"]
            assert min(k for k, s in enumerate(steps) if rid in s.scheduled) == r["first_admission_step"]
            assert [k for k, s in enumerate(steps) if rid in s.finished] == [r["finish_step"]]
            assert [k for k, s in enumerate(steps) if rid in s.preempted] == r["preempted_at_steps"]


def test_each_quantity_of_a_step_is_compared():
    path = next(p for p in RESULTS if os.path.basename(p).startswith("01_"))
    result = load(path)
    want = vllm_oracle.vllm_steps(result, path)
    _, have = vllm_oracle.run_steps(result, path)
    assert vllm_oracle.compare_steps(want, have) is None
    assert want[10] == vllm_oracle.Step({"A": 1, "B": 1}, ("C",), (), 3)  # C preempts itself
    for field, value in (("scheduled", {"A": 1, "B": 1, "C": 1}), ("preempted", ()), ("finished", ("A",)),
                         ("free", 4)):
        w = list(want)
        w[10] = w[10]._replace(**{field: value})
        assert vllm_oracle.step_diff_key(vllm_oracle.compare_steps(w, have)) == (10, (field,))
    # a step only one side has
    assert vllm_oracle.compare_steps(want[:-1], have)[:2] == (len(want) - 1, None)
    assert vllm_oracle.step_diff_key(vllm_oracle.compare_steps(want + [want[-1]], have)) == (len(want), ("step",))


def test_steps_agree_on_a_preempt_only_step_and_blocked_ones():
    """10's step 45 preempts A and schedules nothing; serQ's iteration there preempts alone too, and
    the steps after it schedule nothing on both sides until B arrives (50), where they part."""
    path = next(p for p in RESULTS if os.path.basename(p).startswith("10_"))
    result = load(path)
    want = vllm_oracle.vllm_steps(result, path)
    _, have = vllm_oracle.run_steps(result, path, at_least=len(want))
    assert want[45] == have[45] == vllm_oracle.Step({}, ("A",), (), 9)
    assert want[46:50] == have[46:50]
    assert vllm_oracle.compare_steps(want, have)[0] == 50


def test_check_steps_prints_the_first_differing_step_with_both_sides(tmp_path):
    picks = [p for p in RESULTS if os.path.basename(p).startswith(("01_", "10_"))]
    tampered = copy.deepcopy(load(picks[0]))
    tampered["name"] = "01_tampered"
    tampered["trace"][10]["free_blocks_after"] = 4
    bad = tmp_path / "01_tampered.json"
    bad.write_text(json.dumps(tampered), encoding="utf-8")
    r = subprocess.run([sys.executable, TOOL, "check", "--steps", *picks, str(bad)], capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "01_self_preemption: agree"
    assert lines[1:4] == ["10_preempt_only_step_stall: step 50:",
                          "  vLLM scheduled {}, preempted [], finished [], free blocks 9",
                          "  serQ scheduled {B: 10}, preempted [], finished [], free blocks 8"]
    assert lines[4].startswith("  expected (docs/vllm.md, *Known divergences*): the language reference rejects")
    assert lines[5:8] == ["01_tampered: step 10:",
                          "  vLLM scheduled {A: 1, B: 1}, preempted [C], finished [], free blocks 4",
                          "  serQ scheduled {A: 1, B: 1}, preempted [C], finished [], free blocks 3"]
    assert lines[-1] == "1/3 scenarios agree step for step; 1 expected (docs/vllm.md); 1 unexpected" and r.returncode == 1
    r = subprocess.run([sys.executable, TOOL, "check", "--steps", "--ref", *picks], capture_output=True, text=True)
    assert r.stdout.strip().splitlines()[-1] == "1/2 scenarios agree step for step; 1 expected (docs/vllm.md)"
    assert r.returncode == 0


def test_the_interpreters_step_recorder_is_off_unless_asked():
    from serq import api
    from serq.interp.sim import Sim
    prog = api.load(os.path.join(ROOT, "examples", "oracle", "vllm_shared.sq"), {})
    sim = Sim(prog)
    assert sim.step_log is None and sim.fast_forward
