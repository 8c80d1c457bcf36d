"""The reference kernel (serq/ref/): the fragment's diagnostics, a hand-computed run, natural
arithmetic, and vLLM's recorded scenarios through it (tools/vllm_oracle.py check --ref)."""
from __future__ import annotations

import glob
from fractions import Fraction
import json
import os
import re
import subprocess
import sys

import pytest

from serq import api, ref
from serq.ir import model as I
from serq.ref import exec as X

HERE = os.path.dirname(__file__)
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))

import vllm_oracle  # noqa: E402

FRAGMENT = sorted(glob.glob(os.path.join(HERE, "data", "fragment", "*.sq")))
EXPECT = re.compile(r"//\s*expect:\s*(F\d{3})\s+(\d+):(\d+)")
THREE = os.path.join(HERE, "data", "ref", "three_requests.sq")


def _expect(path):
    with open(path, encoding="utf-8") as fh:
        m = EXPECT.search(fh.readline())
    return m.group(1), int(m.group(2)), int(m.group(3))


@pytest.mark.parametrize("path", FRAGMENT, ids=[os.path.basename(p) for p in FRAGMENT])
def test_a_construct_outside_the_fragment_is_named(path):
    code, line, col = _expect(path)
    prog = api.load(path)  # it links: only the fragment refuses it
    with pytest.raises(ref.Outside) as info:
        ref.convert(prog)
    err = info.value
    assert (err.code, err.span.line, err.span.col) == (code, line, col), err.render()
    assert "outside the Lean fragment" in err.message and "^" in err.render()


def _codes():
    with open(os.path.join(ROOT, "serq", "ref", "fragment.py"), encoding="utf-8") as fh:
        return set(re.findall(r'"(F\d{3})"', fh.read()))


def test_every_fragment_code_has_a_program_and_a_line_in_errors_md():
    tested = {_expect(p)[0] for p in FRAGMENT} | {"F003"}  # F003: below, from the IR
    assert _codes() <= tested
    with open(os.path.join(ROOT, "docs", "reference", "errors.md"), encoding="utf-8") as fh:
        doc = fh.read()
    assert not [c for c in _codes() if f"`{c}`" not in doc]


def test_a_context_variable_outside_the_fragment_from_the_ir():
    prog = api.load(THREE)
    claim = prog.claims[0].model_copy(update={"e": I.Ctx(name="present", at=I.Loc(line=7, col=9))})
    with pytest.raises(ref.Outside) as info:
        ref.convert(prog.model_copy(update={"claims": [claim]}))
    assert (info.value.code, info.value.span.line, info.value.span.col) == ("F003", 7, 9)


def test_every_example_converts_or_is_named_outside():
    for path in sorted([q for q in glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q]):
        try:
            prog = api.load(path)
        except api.SerqError:
            continue  # a library, or a program that needs inputs
        try:
            ref.convert(prog)
        except ref.Outside as e:
            assert e.code.startswith("F") and e.span is not None


def test_three_requests_by_hand():
    """tokens cap 16, prompts of 8, 3 outputs: the first iteration prefills two requests (16
    tokens), the second decodes them and prefills the third; each decode is a token an iteration."""
    p = ref.convert(api.load(THREE))
    res = ref.evaluate(p, ref.workload(p, 3, draws=[(8, 3)] * 3))
    assert res.done and res.end == 4 and res.iterations == 4
    assert res.requests == ((0, 0, 1, 3, 0, 0), (1, 0, 1, 3, 0, 0), (2, 0, 2, 4, 0, 0))
    assert [(n, v, t) for n, v, t, _, _ in res.observations if n == "done"] == [("done", 3, 3), ("done", 3, 3),
                                                                                ("done", 4, 4)]
    assert res.claims["small"].status == "held"
    assert (res.claims["fast"].status, res.claims["fast"].at) == ("held", 4)


VALUES = (-3, -1, 0, Fraction(1, 2), 1, 2, Fraction(7, 2), 5, Fraction(-5, 4))


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||"])
def test_arithmetic_is_the_interpreters_exactly(op):
    """The kernel computes over the rationals exactly; on values a float holds exactly (halves,
    quarters) every operator is the interpreter's: IEEE division and fmod are correctly rounded, and
    so is a Fraction made a float. 7 / 2 is 7/2, never 3; 2 - 5 is -3; a division by 0, the
    interpreter's inf or NaN, is refused (F016)."""
    from serq.lang.lower.constants import arith
    for l in VALUES:
        for r in VALUES:
            if op in ("/", "%") and r == 0:
                with pytest.raises(X.KernelError) as info:
                    X.eval_bin(op, l, r)
                assert info.value.code == "F016"
                continue
            got = X.eval_bin(op, l, r)
            assert float(got) == arith(op, float(l), float(r)), (l, op, r, got)
            assert type(got) is int or got.denominator != 1   # in lowest terms: a whole value is an int
    assert X.eval_bin("/", 7, 2) == Fraction(7, 2) and X.eval_bin("-", 2, 5) == -3


def test_functions_are_the_interpreters_exactly():
    from serq.lang.lower.constants import FUNCS
    for x in VALUES + (Fraction(5, 2), Fraction(-5, 2), Fraction(1, 3)):
        for fn in ("floor", "ceil", "round", "abs"):
            assert float(X.eval_fn(fn, [x])) == FUNCS[fn][2](float(x)), (fn, x)
    assert X.eval_fn("reusable", [33, 16]) == 32 and X.eval_fn("reusable", [32, 16]) == 16
    assert X.eval_fn("reusable", [Fraction(33, 2), 4]) == 12 and X.eval_fn("reusable", [Fraction(1, 2), 4]) == 0
    assert X.eval_fn("min", [Fraction(1, 2), 0, 3]) == 0 and X.eval_fn("sum", [Fraction(1, 2), Fraction(1, 2)]) == 1
    for b in (0, -4):
        with pytest.raises(X.KernelError) as info:
            X.eval_fn("reusable", [8, b])
        assert info.value.code == "F016"


def test_an_amount_is_a_natural():
    """Units and tokens are whole: a negative amount is the program's run error (R007, as the
    interpreter's), a fraction of one is refused (F016), never rounded."""
    assert X.amount(Fraction(8, 2), "w") == 4
    with pytest.raises(X.KernelError) as info:
        X.amount(-1, "w")
    assert info.value.code == "R007"
    with pytest.raises(X.KernelError) as info:
        X.amount(Fraction(5, 2), "w")
    assert info.value.code == "F016"


@pytest.mark.parametrize("fn", ["floor", "ceil", "round"])
def test_a_rounded_quotient_is_exact(fn):
    """floor, ceil and round (halves up) of `a / b` are the interpreter's, computed from a and b."""
    from serq.lang.lower.constants import FUNCS
    p = ref.convert(api.load(THREE))
    m = X.initial(p, ref.workload(p, 1, draws=[[0, 0]]))
    for a in range(0, 30):
        for b in range(1, 9):
            e = ref.ir.Fn(fn, (ref.ir.Bin("/", ref.ir.Num(a), ref.ir.Num(b)),))
            assert X.eval_expr(p, m, X.Env(), e) == FUNCS[fn][2](a / b), (fn, a, b)
    with pytest.raises(X.KernelError):
        X.eval_expr(p, m, X.Env(), ref.ir.Fn(fn, (ref.ir.Bin("/", ref.ir.Num(1), ref.ir.Num(0)),)))


RESULTS = sorted(glob.glob(os.path.join(ROOT, "tools", "oracle", "results", "*.json")))
# the kernel has the cache keyed by content (docs/lean.md, *Content pools*): the scenarios whose
# sessions share a system prompt, a parent's context or another's prompt (09*, extra shared*) run
# through examples/oracle/vllm_shared.sq on it as on the interpreter (tests/test_vllm_oracle.py)
EXTRA = sorted(glob.glob(os.path.join(ROOT, "tools", "oracle", "extra", "results", "*.json")))
# docs/vllm.md: the interpreter's known divergence, which the kernel shares
DIVERGENT = {
    "10_preempt_only_step_stall": ("A", "last_token_step", 44, None),
}


@pytest.mark.parametrize("path", RESULTS + EXTRA[::5],
                         ids=[os.path.basename(p)[:-5] for p in RESULTS + EXTRA[::5]])
def test_the_kernel_agrees_with_vllm_where_the_interpreter_does(path):
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    diff = vllm_oracle.compare(result, vllm_oracle.run_scenario(result, path, ref=True, shared=True))
    assert diff == DIVERGENT.get(result["name"]), (result["name"], diff)


def test_every_shared_scenario_agrees_on_the_kernel():
    """Issue 27: the 100 extra scenarios whose sessions share prefixes (shared, shared_many,
    shared_tight: system prompts of 5 to 100 tokens, up to 30 conversations on one, multi-turn
    sessions, subagents, tight memory where shared blocks are evicted and come back) through
    vllm_shared.sq on the kernel, every one as vLLM (the kernel with the per-session cache, through
    vllm_request.sq, agreed on 5 of them)."""
    shared = [p for p in EXTRA if os.path.basename(p).startswith("shared")]
    assert len(shared) == 100
    bad = []
    for path in shared:
        with open(path, encoding="utf-8") as fh:
            result = json.load(fh)
        diff = vllm_oracle.compare(result, vllm_oracle.run_scenario(result, path, ref=True, shared=True))
        if diff is not None:
            bad.append((result["name"], diff))
    assert not bad, bad[:5]


def test_check_ref_prints_per_scenario_and_a_total():
    picks = [p for p in RESULTS if os.path.basename(p).startswith(("01_", "10_"))]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "vllm_oracle.py"), "check", "--ref", *picks],
                       capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "01_self_preemption: agree"
    assert lines[1].startswith("10_preempt_only_step_stall: request A: last_token_step vLLM 44, serQ None")
    # 10 is the reference's documented divergence (docs/vllm.md): expected, and the check passes
    assert lines[-1] == "1/2 scenarios agree; 1 expected (docs/vllm.md)" and r.returncode == 0


def test_a_guard_reads_the_batch_so_far(tmp_path):
    """`admit waiting while (batch.tokens < 8)` with prompts of 8 under a budget of 16: one
    admission an iteration, since the first fills half the batch (*The iteration as a program*:
    a guard reads what the iteration has scheduled so far). The interpreter read 0 before."""
    with open(THREE, encoding="utf-8") as fh:
        text = fh.read().replace("admit waiting while (running.preempted == 0)", "admit waiting while (batch.tokens < 8)")
    path = tmp_path / "half.sq"
    path.write_text(text, encoding="utf-8")
    prog = api.load(str(path))
    p = ref.convert(prog)
    res = ref.evaluate(p, ref.workload(p, 3, draws=[(8, 3)] * 3))
    firsts = [r[2] for r in res.requests]
    assert firsts == [1, 2, 3]
    rep = api.run(prog, I.Settings())
    sim = rep.pop("_sim")
    assert [v for v in sim.obs["done"].v] == [3.0, 4.0, 5.0]
    assert [t for t, _, _ in sim.obs["done"].rows] == [3.0, 4.0, 5.0]


def test_poisson_arrivals_are_the_workloads(tmp_path):
    """Under `poisson` the workload gives the arrival times (the family: any): a session alone at 0,
    then two at 5 admitted together (16 tokens of prefill), by hand."""
    with open(THREE, encoding="utf-8") as fh:
        text = fh.read().replace("arrive batch(3);", "arrive poisson(1);")
    path = tmp_path / "open.sq"
    path.write_text(text, encoding="utf-8")
    p = ref.convert(api.load(str(path)))
    res = ref.evaluate(p, ref.workload(p, 3, arrivals=[0, 5, 5], draws=[(8, 3)] * 3))
    assert res.requests == ((0, 0, 1, 3, 0, 0), (1, 0, 6, 8, 0, 0), (2, 0, 6, 8, 0, 0))
    assert res.end == 8 and res.iterations == 6


def test_the_kernels_structure_update_is_dataclasses_replace():
    """exec.replace (Lean's `{ s with f := v }`) builds what dataclasses.replace builds, for every
    record of the kernel, and refuses a name that is not a field."""
    import dataclasses

    from serq.ref import exec as X
    records = [c for c in vars(X).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
               and c.__module__ == X.__name__]
    assert len(records) >= 15
    for cls in records:
        names = [f.name for f in dataclasses.fields(cls)]
        rec = cls(**{n: (n, 1) for n in names})
        for n in names:
            new = X.replace(rec, **{n: (n, 2)})
            assert type(new) is cls and new == dataclasses.replace(rec, **{n: (n, 2)})
            assert hash(new) == hash(dataclasses.replace(rec, **{n: (n, 2)}))
            assert getattr(rec, n) == (n, 1)  # the record itself is unchanged
        assert X.replace(rec) == rec and X.replace(rec) is not rec
        with pytest.raises(TypeError, match="no field"):
            X.replace(rec, not_a_field=0)


def test_a_workload_draws_anywhere_in_its_statements(tmp_path):
    """Issue 26: `Size p = 1 + floor(~exp(6));` is in the fragment (it was F008): each occurrence of
    a draw is its own unknown, drawn before its statement in the order the expression reads it, a
    `while` guard's again after each pass, and the expression reads it (`1 + floor(d)`). The
    interpreter's replay of a workload takes the draws in the same order."""
    path = tmp_path / "d.sq"
    path.write_text(open(os.path.join(HERE, "data", "fragment", "F008_draw.sq"), encoding="utf-8").read()
                    .replace("turn { Size p = ~det(8); Size n = ~det(3); }",
                             "turn { Size p = 1 + floor(~exp(6)) + ~det(2); Size n = min(~exp(2), 3); } "
                             "session { turn; while (~det(1) == 1) { turn; } }")
                    .replace("observe start = ~exp(1);", "observe start = now;"))
    prog = api.load(str(path))
    p = ref.convert(prog)
    assert [type(s).__name__ for s in p.turn] == ["DrawA", "DrawA", "SetA", "DrawA", "SetA"]
    loop = p.session[-1]
    assert type(p.session[-2]).__name__ == "DrawA" and loop.body[-1] == p.session[-2]  # drawn again each pass
    # session 0: p = 1 + 5 + 2 and n = 3, another turn (1), p = 1 and n = 1, no more (0); session 1: one turn
    draws = [[5, 2, 7, 1, 0, 0, 1, 0], [0, 1, 2, 0]]
    res = ref.evaluate(p, ref.workload(p, 2, draws=draws))
    run = api.run(prog, None, None, {"sessions": [{"arrival": 0, "draws": d} for d in draws]})
    done = sorted(float(v) for n, v, *_ in res.observations if n == "done")
    assert res.live == 0 and len(done) == 3 == run["observe"]["done"]["count"]
    assert (done[0], done[-1]) == (run["observe"]["done"]["min"], run["observe"]["done"]["max"])
    assert run["claims"]["fast"]["status"] == res.claims["fast"].status


def test_the_twins_agree_at_their_edges(monkeypatch):
    """Issue 27: at the fuel's edge and past a list's end, Exec.lean and serq/ref/exec.py did not
    agree (fuel 0 with no work left was `none` in Lean and success in Python; `put` past the end
    left Lean's list and appended to Python's). Both now: no work left needs no fuel, a growth with
    room needs no preemption's fuel, and `put` past the end changes nothing. Driven here through
    the Python; the Lean definitions are read for the same first cases (no Lean runs here)."""
    p = ref.convert(api.load(THREE))
    m = X.initial(p, ref.workload(p, 1, draws=[[3, 2]]))
    assert X.put((1, 2), 5, 9) == (1, 2) and X.put((1, 2), 1, 9) == (1, 9)
    assert X.run_body(p, m, (), 0) is m and X.settle(p, m, 0) is m
    with pytest.raises(X.KernelError):
        X.settle(p, X.wake(m, 0), 0)
    # a planned iteration whose queue is empty: nothing to admit, no fuel needed
    m1 = X.step(p, m)[0]
    m1 = X.set_eng(m1, plan=X.Plan(16, None, None))
    assert X.admit_pool(p, m1, 1, None, None, None, 0) == (m1, False)
    # a growth with room needs no fuel; one without room and no fuel is out of it
    run = X.run(p, ref.workload(p, 1, draws=[[3, 2]]), fuel=2).machine   # the prefill in flight
    (r,) = run.eng.reqs
    assert r.growing is not None and X.room_for(p, run, r.growing, 1)
    monkeypatch.setattr(X, "GROW_FUEL", 0)
    got, ok = X.grow(p, run, r, 1)
    assert ok and X.find_alloc(got, r.growing, r.sid).units == X.find_alloc(run, r.growing, r.sid).units + 1
    with open(os.path.join(ROOT, "lean", "Serq", "Exec.lean"), encoding="utf-8") as fh:
        lean = fh.read()
    assert re.search(r"def runBody[^\n]*\n  \| _, \[\], m => some m[^\n]*\n  \| 0, _ :: _, _ => none", lean)
    assert re.search(r"def settle[^\n]*\n  \| 0 => if m\.ready\.isEmpty then some m else none", lean)
    assert re.search(r"def admitPool[^\n]*\n[^\n]*\n  \| 0 => do[^\n]*\n[^\n]*\n    if st\.queue\.isEmpty then "
                     r"pure \(m, false\) else none", lean)
    assert re.search(r"def grow [^\n]*\n  let i ← r\.growing\n  if roomFor[^\n]*then growInto[^\n]*\n  else match fuel", lean)
    assert re.search(r"def put [^\n]*\n  \| \[\], _, _ => \[\]", lean)


def test_a_theorems_fuel_is_what_its_run_needs():
    """Issue 27: each generated theorem states its run with the fuel the Python twin's run needs,
    no more (Oracle.lean gave every scenario a million moves): with `moves` the run ends, with one
    fewer it does not. Oracle.lean and ClaimsProved.lean say so in each theorem's comment."""
    p = ref.convert(api.load(THREE))
    wl = ref.workload(p, 3, draws=[[8, 3], [8, 3], [8, 3]])
    k = ref.moves(p, wl)
    assert X.run(p, wl, fuel=k).done and not X.run(p, wl, fuel=k - 1).done
    from helpers import oracle_lean_text
    oracle = oracle_lean_text()
    stated = re.findall(r"The Python twin's run takes (\d+) moves: the fuel\ngiven.*?\n.*?\n    answers \(run \S+ "
                        r"\S+ (\d+) ", oracle, flags=re.S)
    assert len(stated) >= 20 and all(a == b for a, b in stated)
