"""examples/papers/: three scheduling papers' serving systems with the papers' propositions as
claims (docs/lean.md, *The papers' claims*). Each program is in the Lean fragment; `serq run`'s
report gives each claim the status the paper predicts; the reference kernel reproduces hand-worked
traces; and a small finite family (the one examples/papers/ClaimsProved.lean states) is enumerated."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from serq import api, ref
from serq.ref.claims import Outcome

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import gen_claims_proved  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PAPERS = os.path.join(ROOT, "examples", "papers")
SARATHI = os.path.join(PAPERS, "li_dai_peng_sarathi.sq")
ORCA = os.path.join(PAPERS, "li_dai_peng_orca.sq")
FT = os.path.join(PAPERS, "li_dai_peng_fastertransformer.sq")
PF = os.path.join(PAPERS, "li_dai_peng_prefill_first.sq")
MCSF = os.path.join(PAPERS, "jaillet_mcsf.sq")
TILING = os.path.join(PAPERS, "bari_tiling.sq")
ALL = [SARATHI, ORCA, FT, PF, MCSF, TILING]


def _kernel(path, inputs=None):
    return ref.convert(api.load(path, inputs))


def _report(path, *args):
    r = subprocess.run([sys.executable, "-m", "serq.cli", "run", path, "--json", "--quiet", *args],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return {k: v["status"] for k, v in json.loads(r.stdout)["claims"].items()}


@pytest.mark.parametrize("path", ALL, ids=os.path.basename)
def test_each_paper_program_is_in_the_fragment_and_cites_its_paper(path):
    prog = _kernel(path)
    assert prog.claims
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert "arXiv:" in text and "not capture" in text


# -- serq run: the statuses the papers predict, on a few seeds and horizons ----------------------

@pytest.mark.parametrize("seed,horizon", [(1, 300), (7, 300)])
def test_work_conserving_holds_for_sarathi_and_orca_and_fails_for_the_others(seed, horizon):
    args = ("--seed", str(seed), "--horizon", str(horizon))
    # Sarathi-Serve and Orca are work-conserving (the paper's theorem rests on it): never starved
    for path in (SARATHI, ORCA):
        assert _report(path, *args) == {"work_conserving": "held", "starved": "not_witnessed"}
    # FasterTransformer and prefill-first are not: a starved iteration on the path
    for path in (FT, PF):
        assert _report(path, *args) == {"work_conserving": "failed", "starved": "witnessed"}


def test_mcsf_memory_bound_and_completion_lower_bound():
    for seed in (1, 2):
        rep = _report(MCSF, "--seed", str(seed), "--set", "tight=1")
        assert rep == {"memory_bound": "held", "completion_alone": "held", "completion_lower_bound": "held"}
    # a request whose peak is at most M / 2 puts the serial lower bound out of scope (given)
    rep = _report(MCSF, "--seed", "1")
    assert rep["completion_lower_bound"] == "out_of_scope" and rep["memory_bound"] == "held"


def test_tiling_per_iteration():
    rep = _report(TILING, "--seed", "1", "--horizon", "200", "--set", "ragged=0")
    assert rep == {"tiled": "held", "ragged": "not_witnessed", "tile_idles_budget": "witnessed"}
    rep = _report(TILING, "--seed", "1", "--horizon", "200")
    assert rep["tiled"] == "out_of_scope" and rep["ragged"] == "witnessed"


# -- the kernel on hand-worked traces ------------------------------------------------------------

def _run(prog, draws, arrivals):
    return ref.evaluate(prog, ref.workload(prog, len(draws), arrivals=arrivals, draws=draws))


def test_fastertransformer_starves_at_its_second_iteration_by_hand():
    """Three sessions at 0, each p = 14, o = 8, budget 16. Iteration 0 (t = 0): nothing decodes, so
    prefills: s0 takes 14, s1 the 2 left; tokens 16 (demand 12 + 14 >= 16: not starved). Iteration
    1 (t = 1): s0 decodes, so only decodes: 1 token; s2 is admitted and waits excluded; demand
    1 + 12 + 14 = 27 >= 16 with 1 token: starved, and work_conserving fails there."""
    prog = _kernel(FT)
    res = _run(prog, [(1, 1)] * 3, [0, 0, 0])
    assert res.claims["starved"] == Outcome("witnessed", 1, 1)
    assert res.claims["work_conserving"] == Outcome("failed", 1, 1)
    # Sarathi-Serve on the same workload fills every iteration it can
    res = _run(_kernel(SARATHI), [(1, 1)] * 3, [0, 0, 0])
    assert res.claims["work_conserving"].status == "held" and res.claims["starved"].status == "not_witnessed"


def test_mcsf_is_serial_shortest_output_first_by_hand():
    """tight=1: peaks p + o of 25, 17, 29, 21 (each above M / 2 = 16), so one request at a time, in
    the order of o then serial: s1 (o 3), s3 (o 3), s0 (o 11), s2 (o 11). Alone, a request takes
    ceil(p / 16) + o - 1 iterations: s0 14+11 -> 11, s1 14+3 -> 3, s2 18+11 -> 12, s3 18+3 -> 4."""
    prog = _kernel(MCSF, {"tight": 1})
    res = _run(prog, [(0, 1), (0, 0), (1, 1), (1, 0)], [0, 0, 0, 0])
    done = {sid: v for name, v, _t, sid, _turn in res.observations if name == "done"}
    alone = {sid: v for name, v, _t, sid, _turn in res.observations if name == "alone"}
    assert alone == {0: 11, 1: 3, 2: 12, 3: 4}
    assert done == {1: 3, 3: 3 + 4, 0: 3 + 4 + 11, 2: 3 + 4 + 11 + 12}
    # the shortest-first serial total (prefix_total) is 3 + 7 + 18 + 30 = 58; the path's is 58 too
    assert sum(done.values()) == 58
    assert {k: o.status for k, o in res.claims.items()} == {
        "memory_bound": "held", "completion_alone": "held", "completion_lower_bound": "held"}


def test_tiling_cuts_a_chunk_to_a_tile_by_hand():
    """Two prompts of 16 (ragged=0: a = 0, c = 1), o = 2, budget 16, tile 8. Iteration 0: s0's 16.
    Iteration 1: s0's one decode, then s1 with 15 left of the budget, cut to 8: prefilled 8 (a
    whole tile), tokens 9 < 16 while demand 1 + 16 >= 16."""
    prog = _kernel(TILING, {"ragged": 0})
    res = _run(prog, [(0, 1, 0), (0, 1, 0)], [0, 0])
    assert res.claims["tiled"].status == "held" and res.claims["ragged"].status == "not_witnessed"
    assert res.claims["tile_idles_budget"] == Outcome("witnessed", 1, 1)
    # a prompt of 12 is prefilled whole in one iteration: 12 is not a whole number of tiles
    res = _run(_kernel(TILING), [(1, 0, 0)], [0])
    assert res.claims["ragged"] == Outcome("witnessed", 0, 0)
    assert res.claims["tiled"].status == "out_of_scope"


# -- ClaimsProved.lean: every claim has a bounded statement, each evaluated true -----------------

def test_every_claim_of_every_paper_program_has_a_bounded_statement():
    stated = {(os.path.join(ROOT, path), claim) for path, _i, _ns, claim, _v, _f in gen_claims_proved.STATEMENTS}
    claims = {(path, c.name) for path in ALL for c in _kernel(path).claims}
    assert claims == stated


def test_claims_proved_is_current_and_each_statement_holds_on_the_kernel():
    # render() evaluates every statement on the reference kernel first (SystemExit when one is false)
    files = gen_claims_proved.render()
    assert gen_claims_proved.OUT in files and gen_claims_proved.PROGRAMS in files
    written = sorted(glob.glob(os.path.join(gen_claims_proved.CHECKS, "*.lean")))
    assert sorted(p for p in files if p != gen_claims_proved.OUT) == written
    for path, text in files.items():
        with open(path, encoding="utf-8") as fh:
            assert fh.read() == text, f"{path}: run python tools/gen_claims_proved.py"


def test_each_statement_is_read_off_one_check_of_its_program_and_family():
    """Issue 45: a family's runs are evaluated once for every claim stated of them (Sarathi's two
    claims on `two_sessions` share one check), each check slice a theorem within one declaration's
    cost (tools/kernel_cost.py), and each statement is the one tests read, proved from its check."""
    import kernel_cost
    files = gen_claims_proved.render()
    text = files[gen_claims_proved.OUT]
    for _path, _i, ns, claim, verdict, fam in gen_claims_proved.STATEMENTS:
        m = re.search(rf"theorem {ns}_{claim}_{verdict}_{fam} :\n.*?:=\n  have h := all_and \(doneOn "
                      rf"SerqGen\.{ns}\.program \d+\) _ _ check_{ns}_{fam}_all\n", text, re.S)
        assert m, (ns, claim, fam)
    checks = "".join(t for p, t in files.items() if "Checks" in p)
    costs = [int(x) for x in re.findall(r"workloads?, (\d+) calls of the kernel's definitions", checks)]
    assert costs and max(costs) <= kernel_cost.THEOREM_CALLS
    assert checks.count("theorem check_Sarathi_two_sessions_") == checks.count("theorem check_Orca_two_sessions_") > 1
    assert "theorem check_Sarathi_two_sessions_all : two_sessions.all" in text


def test_the_family_is_what_it_says():
    """Up to two sessions, each draw 0 or 1, arrivals in serial order: 2 * 2 draws and 3 times for
    one session (12), 16 draws and 6 ordered pairs of times for two (96)."""
    fam = gen_claims_proved.FAMILIES["two_sessions"]
    assert len(fam) == 12 + 96 == len(set(fam))
    assert all(all(a.arrival <= b.arrival for a, b in zip(w.sessions, w.sessions[1:])) for w in fam)


def test_the_references_prefill_first_serves_a_prompt_alone():
    """`running.…` in an only are the residents as they stand at that read (*The iteration as a
    program*): a prompt admitted to an empty engine counts, so the reference's `running.decoding <
    running.count ? !decoding : decoding` serves it; p = 4, o = 2 ends at 2 (a prefill iteration,
    then one decode). The differential suite holds the interpreter to the same reading."""
    with open(PF, encoding="utf-8") as fh:
        assert "running.decoding < running.count ? !decoding : decoding" in fh.read()
    res = _run(_kernel(PF), [(0, 0)], [0])
    assert res.live == 0 and res.iterations == 2
    assert [v for name, v, *_ in res.observations if name == "done"] == [2]
