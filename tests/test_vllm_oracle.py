"""vLLM 0.33.0's recorded scenarios through examples/oracle/vllm_shared.sq, vllm_request.sq on a
content-addressed cache (docs/vllm.md, docs/reference/content.md)."""
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

# docs/vllm.md: where vLLM does what the reference's kernel does not, and the first field that
# differs there, on vllm_shared.sq through the interpreter: the tool's one list of them (EXPECTED)
DIVERGENT = {name: e.request for name, es in vllm_oracle.EXPECTED.items() for e in es if "interp" in e.sides}
TOOL = os.path.join(ROOT, "tools", "vllm_oracle.py")


def test_all_scenarios_are_here():
    assert len(RESULTS) == 52


@pytest.mark.parametrize("path", RESULTS, ids=[os.path.basename(p)[:-5] for p in RESULTS])
def test_scenario(path):
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    got = vllm_oracle.run_scenario(result, path)
    diff = vllm_oracle.compare(result, got)
    name = result["name"]
    if name in DIVERGENT:
        assert diff == DIVERGENT[name], f"{name}: the known divergence changed: {diff}"
    else:
        assert diff is None, f"{name}: request {diff[0]}: {diff[1]} vLLM {diff[2]}, serQ {diff[3]}"


def test_the_documented_divergence_is_the_only_one():
    assert DIVERGENT == {"10_preempt_only_step_stall": ("A", "last_token_step", 44, None)}


def check(*args):
    return subprocess.run([sys.executable, TOOL, "check", *args], capture_output=True, text=True)


def test_check_command_prints_per_scenario_and_a_total():
    picks = [p for p in RESULTS if os.path.basename(p).startswith(("01_", "04_", "10_"))]
    r = check(*picks)
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "01_self_preemption: agree"
    assert lines[1] == "04_head_of_line_blocking: agree"
    assert lines[2] == "10_preempt_only_step_stall: request A: last_token_step vLLM 44, serQ None"
    assert lines[3].startswith("  expected (docs/vllm.md, *Known divergences*): the language reference rejects")
    assert lines[-1] == "2/3 scenarios agree; 1 expected (docs/vllm.md)" and r.returncode == 0


@pytest.mark.parametrize("mode", [[], ["--ref"]], ids=["interp", "ref"])
def test_the_recorded_results_pass_with_scenario_10_expected(mode):
    """The README's command: 51 of 52 agree, 10 differs as docs/vllm.md says, and that is exit 0."""
    r = check(*mode, *RESULTS)
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "51/52 scenarios agree; 1 expected (docs/vllm.md)", r.stdout
    assert [ln for ln in lines if "expected (docs/vllm.md, *Known divergences*)" in ln] != []
    assert sum(ln.endswith(": agree") for ln in lines) == 51
    assert r.returncode == 0, r.stdout + r.stderr


def doctored(tmp_path, prefix, change):
    path = next(p for p in RESULTS if os.path.basename(p).startswith(prefix))
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    change(result)
    out = tmp_path / os.path.basename(path)
    out.write_text(json.dumps(result), encoding="utf-8")
    return str(out)


def test_an_unexpected_disagreement_fails_the_check(tmp_path):
    def later(result):
        result["requests"][0]["first_token_step"] += 1
    bad = doctored(tmp_path, "01_", later)
    picks = [p for p in RESULTS if os.path.basename(p).startswith(("04_", "10_"))]
    for mode in ([], ["--ref"]):
        r = check(*mode, bad, *picks)
        lines = r.stdout.strip().splitlines()
        assert lines[0].startswith("01_self_preemption: request A: first_token_step vLLM ")
        assert "expected" not in lines[1]
        # the total counts the unexpected one too
        assert lines[-1] == "1/3 scenarios agree; 1 expected (docs/vllm.md); 1 unexpected" and r.returncode == 1, r.stdout


def test_an_expected_disagreement_that_agrees_or_changes_fails_the_check(tmp_path):
    """The list cannot go stale: 10 recorded as serQ runs it agrees, which the check says and fails."""
    def as_serq(result):  # every request's four numbers as serQ gives them
        got = vllm_oracle.run_scenario(copy.deepcopy(result))
        for r in result["requests"]:
            r.update({f: got[r["id"]].get(f) for f in vllm_oracle.FIELDS})
    gone = doctored(tmp_path, "10_", as_serq)
    r = check(gone)
    assert r.stdout.startswith("10_preempt_only_step_stall: agree, but it is EXPECTED to differ "
                               "(request A: last_token_step vLLM 44, serQ None: the language reference"), r.stdout
    assert r.stdout.strip().splitlines()[-1] == "0/1 scenarios agree; 1 expected to differ but agree"
    assert r.returncode == 1

    def other(result):
        result["requests"][0]["last_token_step"] = 43
    d = tmp_path / "other"
    d.mkdir()
    changed = doctored(d, "10_", other)
    r = check(changed)
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "10_preempt_only_step_stall: request A: last_token_step vLLM 43, serQ None"
    assert lines[1].startswith("  NOT the expected difference (request A: last_token_step vLLM 44, serQ None")
    assert lines[-1] == "0/1 scenarios agree; 1 unexpected" and r.returncode == 1


def test_the_per_session_cache_misses_another_sessions_prompt():
    """vllm_request.sq (the per-session cache, which `--per-session` runs): `repeat` misses the blocks of another session's
    prompt that vllm_shared.sq hits, through the interpreter and the kernel alike."""
    path = next(p for p in RESULTS if os.path.basename(p).startswith("09_"))
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    assert vllm_oracle.compare(result, vllm_oracle.run_scenario(result, path)) is None
    for ref in (False, True):
        assert vllm_oracle.compare(result, vllm_oracle.run_scenario(result, path, ref=ref, shared=False)) == \
            ("repeat", "num_cached_tokens_first_admission", 32, 0)
    assert vllm_oracle.compare(result, vllm_oracle.run_scenario(result, path, ref=True)) is None


def test_contents_are_the_longest_common_prefix_with_any_earlier_request():
    reqs = [{"id": "a", "prompt_token_ids": [1, 2, 3, 4], "max_tokens": 2},
            {"id": "b", "prompt_token_ids": [1, 2, 9], "max_tokens": 1},
            {"id": "c", "prompt_token_ids": [1, 2, 3, 4, 7, 7, 5], "max_tokens": 1},
            {"id": "d", "prompt_token_ids": [8], "max_tokens": 3},
            {"id": "e", "prompt_len": 5, "max_tokens": 1}]
    # a's tokens are its prompt and its outputs (7, 7): c continues a's conversation past them
    assert vllm_oracle.contents(reqs) == {"a": (1, 0, 0), "b": (2, 1, 2), "c": (3, 1, 6), "d": (4, 0, 0),
                                          "e": (5, 0, 0)}


EXTRA = sorted(glob.glob(os.path.join(ROOT, "tools", "oracle", "extra", "results", "*.json")))


def test_scenarios_recorded_later_all_agree():
    """320 scenarios recorded the same way after the program was written (tools/oracle/extra), 100 of
    them with prefixes shared across sessions (docs/reference/content.md)."""
    assert len(EXTRA) == 320
    bad = []
    for path in EXTRA:
        with open(path, encoding="utf-8") as fh:
            result = json.load(fh)
        diff = vllm_oracle.compare(result, vllm_oracle.run_scenario(result, path))
        if diff is not None:
            bad.append((result["name"], diff))
    assert not bad, bad[:5]
