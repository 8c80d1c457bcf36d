"""`serq calibrate` (issue 13): measurements generated from known coefficients with the program's own
linked cost are fitted back; the instance file runs; malformed input is a diagnostic."""
from __future__ import annotations

import json
import math
import os
import random
import re
import sys

import pytest

from serq import api
from serq.cli import main
from serq.exp import calibrate as C
from serq.lang import ast as A
from serq.lang.lower.constants import FUNCS, arith, fold

np = pytest.importorskip("numpy")
pytest.importorskip("scipy")

ROOT = os.path.join(os.path.dirname(__file__), "..")
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")
TRUE = {"a": 5e-5, "omega": 0.004, "beta": 2e-7, "c0": 0.0015}   # not the program's defaults
# the IR's names of the batch values (*Engines on devices*) and the CSV's
IR_NAMES = {"Ntok": "tokens", "Npre": "prefilled", "Ndec": "decoding", "Kvb": "kv_decode", "Kvp": "kv_prefill",
            "Attn": "attention", "Nres": "running", "Queued": "waiting"}


def ir_value(e, row) -> float:
    """The linked IR's cost on one row, with the language's own arithmetic: the model the
    simulator runs, independent of calibrate's vectorised evaluator."""
    k = e.k
    if k == "num":
        return e.v
    if k == "inf":
        return math.inf
    if k == "step":
        return row[IR_NAMES[e.name]]
    if k == "un":
        v = ir_value(e.e, row)
        return -v if e.op == "-" else (1.0 if v == 0 else 0.0)
    if k == "bin":
        return arith(e.op, ir_value(e.l, row), ir_value(e.r, row))
    if k == "if":
        return ir_value(e.a if ir_value(e.c, row) != 0 else e.b, row)
    if k == "fn":
        return float(FUNCS[e.name][2](*[ir_value(a, row) for a in e.args]))
    if k == "cost":
        return ir_value(e.e, row)
    raise AssertionError(k)


def linked_cost(path, inputs):
    prog = api.load(path, inputs)
    return next(s for s in prog.stages if s.kind.k == "step").kind.cost


def vllm_rows(n, seed, noise=2e-4, true=TRUE):
    """Random batches where both arms of the max win often: the memory time omega + beta * kv and
    the compute time a * tokens cross inside the ranges drawn."""
    rng = random.Random(seed)
    cost = linked_cost(VLLM, true)
    rows = []
    for _ in range(n):
        dec = rng.randint(1, 256)
        pre = rng.choice([0, rng.randint(1, 1792)])
        r = {"tokens": dec + pre, "kv_decode": dec * rng.randint(16, 600), "kv_prefill": rng.randint(0, 4000) if pre else 0}
        r["time"] = ir_value(cost, r) + rng.gauss(0, noise)
        rows.append(r)
    return rows


def write_csv(path, rows, cols=("tokens", "kv_decode", "kv_prefill", "time")):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join(cols) + "\n")
        for r in rows:
            fh.write(",".join(repr(r[c]) for c in cols) + "\n")


def fit_file(program, csv_path, names=None, holdout=0.2, seed=1, supplied=None):
    cost = C.cost_model(program, supplied or {}, None)
    cols, t, _ = C.read_measured(csv_path, cost)
    names = names or cost.reads
    return C.fit(cost, cols, t, names, {x: (0.0, math.inf) for x in names}, C.held_back(len(t), holdout, seed))


# ------------------------------------------------------------------ the evaluator

EDGE = [0.0, -0.0, 1.0, -1.0, 2.5, -3.5, 0.5, 7.0, math.inf, -math.inf, math.nan, 1e300, -1e300]


def _num(v):
    return A.Num(v, None)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||"])
def test_the_vectorised_operators_are_the_languages(op):
    for x in EDGE:
        e = A.Binary(op, _num(x), A.Ref((A.Seg("batch", None, None), A.Seg("tokens", None, None)), None), None)
        with np.errstate(all="ignore"):
            got = C._vec(e, {}, {"tokens": np.array(EDGE)}, {}, False)
        want = [arith(op, x, y) for y in EDGE]
        assert np.allclose(got, want, equal_nan=True, rtol=0, atol=0), (op, x)


# and numbers of every size: a SIMD log or pow (numpy's on an AVX-512 CPU) is off by an ulp on a
# few, such as 2.5 ** 2.5 and the logs of the four found below (numpy 2.4.6, X86_V4)
_rnd = random.Random(7)
SPREAD = EDGE + [786188.68284783, 462547.75055610633, 681501.6732845921, 990888.4839515351] + \
    [_rnd.uniform(0, 3) for _ in range(150)] + [math.exp(_rnd.uniform(-700, 700)) for _ in range(150)] + \
    [-_rnd.uniform(0, 50) for _ in range(30)]


@pytest.mark.parametrize("fn", sorted(FUNCS))
def test_the_vectorised_functions_are_the_languages(fn):
    lo, hi, f = FUNCS[fn]
    arity = 2 if fn in ("pow", "reusable") or (hi is None) else 1
    col = A.Ref((A.Seg("batch", None, None), A.Seg("tokens", None, None)), None)
    for x in EDGE:
        args = (col,) if arity == 1 else (_num(x), col)
        e = A.Call(A.Ref((A.Seg(fn, None, None),), None), args, None)
        with np.errstate(all="ignore"):
            got = np.broadcast_to(C._vec(e, {}, {"tokens": np.array(SPREAD)}, {}, False), (len(SPREAD),))
        want = [fold(A.Call(e.fn, tuple(a if a is not col else _num(y) for a in args), None), {}) for y in SPREAD]
        assert np.allclose(got, want, equal_nan=True, rtol=0, atol=0), (fn, x, list(got), want)
        if arity == 1:
            break


def test_the_cost_is_the_linked_programs_at_other_inputs():
    """The kernel's cost, evaluated with other inputs, equals the program linked with them."""
    cost = C.cost_model(VLLM, {}, None)
    assert cost.reads == ["a", "omega", "beta", "c0"]
    assert cost.columns(False) == ["tokens", "kv_decode", "kv_prefill"]
    assert cost.columns(True) == ["tokens", "kv_read"]
    rows = vllm_rows(50, 3, noise=0)
    cols = {c: np.array([r[c] for r in rows], dtype=float) for c in ("tokens", "kv_decode", "kv_prefill")}
    for vals in (TRUE, {"a": 1e-3, "omega": 0.0, "beta": 1e-5, "c0": 2.0}):
        ir = linked_cost(VLLM, vals)
        want = [ir_value(ir, r) for r in rows]
        assert cost.predict(vals, cols, len(rows)).tolist() == want


# ------------------------------------------------------------------ the fit

def test_known_coefficients_lie_within_three_standard_errors(tmp_path):
    path = tmp_path / "it.csv"
    write_csv(path, vllm_rows(1000, 7))
    f = fit_file(VLLM, str(path))
    assert f.names == ["a", "omega", "beta", "c0"] and f.n_fit == 800 and f.n_held == 200
    for x, v, se in zip(f.names, f.value, f.se):
        assert 0 < se < abs(v) / 10, (x, v, se)      # sane: finite, and small next to the value
        assert abs(v - TRUE[x]) <= 3 * se, (x, v, se, TRUE[x])
    n, mape, r2 = f.scores["held back"]
    assert n == 200 and r2 > 0.99 and mape < 5


def test_the_standard_errors_cover_as_stated():
    """Over independent noise draws, the truth lies within ±1.96 SE about 95% of the time."""
    hits = total = 0
    for seed in range(30):
        rows = vllm_rows(300, 100 + seed)
        cost = C.cost_model(VLLM, {}, None)
        cols = {c: np.array([r[c] for r in rows], dtype=float) for c in ("tokens", "kv_decode", "kv_prefill")}
        t = np.array([r["time"] for r in rows])
        f = C.fit(cost, cols, t, cost.reads, {x: (0.0, math.inf) for x in cost.reads}, [False] * len(t))
        for x, v, se in zip(f.names, f.value, f.se):
            hits += abs(v - TRUE[x]) <= 1.96 * se
            total += 1
    assert 0.88 <= hits / total <= 0.995, hits / total


def test_one_input_is_the_closed_form_least_squares(tmp_path):
    prog = tmp_path / "lin.sq"
    prog.write_text(LINEAR)
    rng = random.Random(5)
    rows = [{"tokens": float(rng.randint(1, 500))} for _ in range(60)]
    for r in rows:
        r["time"] = 3e-4 * 2 * r["tokens"] + rng.gauss(0, 0.01) + 0.05
    write_csv(tmp_path / "m.csv", rows, ("tokens", "time"))
    f = fit_file(str(prog), str(tmp_path / "m.csv"), holdout=0)
    x = np.array([r["tokens"] for r in rows])
    t = np.array([r["time"] for r in rows])
    # time = 2 a x: a = Σ x t / (2 Σ x²), SE = s / (2 sqrt(Σ x²)), s² = RSS / (n - 1)
    a = float(x @ t / (2 * x @ x))
    s2 = float(np.sum((t - 2 * a * x) ** 2) / (len(t) - 1))
    assert f.names == ["k"]          # read through the let `two_k`, computed from the input
    assert f.value[0] == pytest.approx(a, rel=1e-9)
    assert f.se[0] == pytest.approx(math.sqrt(s2) / (2 * math.sqrt(x @ x)), rel=1e-6)


LINEAR = """use "std/args";
fn main() {
  let k = args.number("k", 0.001);
  let two_k = 2 * k;
  let rate = args.number("rate", 1);
  device gpu { compute (t) = t * two_k; kv cap 100000; }
  engine llm on gpu {
    reqs cap 8;
    tokens cap 512;
    request (prompt, output) {
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0) taking reqs (1), kv (prompt) reserve (prompt);
    }
    execute (compute(batch.tokens));
  }
  pool kv on gpu { block 16; evict lru; preempt lifo; }
  pool reqs on llm { queue fifo; }
  workload {
    arrive poisson(rate);
    turn { Size p = 1 + floor(~uniform(10, 100)); Size o = 1 + floor(~exp(20)); }
    session { turn; }
  }
  server { llm (p, o); }
}
"""


# ------------------------------------------------------------------ the command

def test_the_command_prints_the_fit_and_writes_an_instance_that_runs(tmp_path, capsys):
    csv_path = tmp_path / "it.csv"
    write_csv(csv_path, vllm_rows(400, 11))
    assert main(["calibrate", VLLM, "--measured", str(csv_path)]) == 0
    out = capsys.readouterr()
    for x in TRUE:
        assert f"\n{x} " in out.out
    assert "held back" in out.out and "MAPE" in out.out
    inst = tmp_path / "it.instance.json"
    fitted = json.loads(inst.read_text())["inputs"]
    assert sorted(fitted) == sorted(TRUE)
    # serq ir reads the instance: the linked cost holds the fitted numbers
    assert main(["ir", VLLM, "--instance", str(inst)]) == 0
    prog = json.loads(capsys.readouterr().out)
    cost = json.dumps(next(s for s in prog["stages"] if s["kind"]["k"] == "step")["kind"]["cost"])
    for x in TRUE:
        assert f'"v": {fitted[x]!r}' in cost, x
    assert main(["run", VLLM, "--instance", str(inst), "--arrivals", "20", "--quiet"]) == 0


def test_an_instance_given_keeps_its_inputs_and_settings(tmp_path, capsys):
    write_csv(tmp_path / "it.csv", vllm_rows(200, 12))
    given = tmp_path / "given.json"
    given.write_text(json.dumps({"inputs": {"rate": 0.5, "a": 1e-4}, "seed": 3, "horizon": 100}))
    out = tmp_path / "cal.json"
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv"), "--instance", str(given),
                 "--fit", "a", "-o", str(out), "--", "chunk_cap=256"]) == 0
    capsys.readouterr()
    d = json.loads(out.read_text())
    assert d["seed"] == 3 and d["horizon"] == 100
    assert d["inputs"]["rate"] == 0.5 and d["inputs"]["chunk_cap"] == 256
    assert d["inputs"]["a"] != 1e-4 and set(d["inputs"]) == {"rate", "a", "chunk_cap"}


def test_kv_read_stands_for_the_sum(tmp_path, capsys):
    rows = vllm_rows(300, 13)
    for r in rows:
        r["kv_read"] = r["kv_decode"] + r["kv_prefill"]
    write_csv(tmp_path / "sum.csv", rows, ("tokens", "kv_read", "time"))
    write_csv(tmp_path / "both.csv", rows)
    a = fit_file(VLLM, str(tmp_path / "sum.csv"))
    b = fit_file(VLLM, str(tmp_path / "both.csv"))
    assert a.value.tolist() == pytest.approx(b.value.tolist(), rel=1e-9)


def test_a_bound_holds_and_is_said(tmp_path, capsys):
    write_csv(tmp_path / "it.csv", vllm_rows(300, 14))
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv"), "--bound", "c0=0,0.001",
                 "-o", str(tmp_path / "o.json")]) == 0
    assert "c0 is at its bound" in capsys.readouterr().out
    assert json.loads((tmp_path / "o.json").read_text())["inputs"]["c0"] == pytest.approx(0.001)


def test_the_split_is_the_seeds():
    assert C.held_back(100, 0.2, 1) == C.held_back(100, 0.2, 1)
    assert C.held_back(100, 0.2, 1) != C.held_back(100, 0.2, 2)
    assert sum(C.held_back(100, 0.2, 1)) == 20 and sum(C.held_back(7, 0, 1)) == 0


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("body,line,col,what", [
    ("tokens,kv_decode,kv_prefill,time\n10,x,0,0.1\n", 2, 4, "`kv_decode` is 'x', not a number"),
    ("tokens,kv_decode,kv_prefill,time\n10,5,0,0.1\n10,-5,0,0.1\n", 3, 4, "a finite number >= 0"),
    ("tokens,kv_decode,kv_prefill,time\n10,5,nan,0.1\n", 2, 6, "a finite number >= 0"),
    ("tokens,kv_decode,kv_prefill,time\n10,5,0,0\n", 2, 8, "a measured time is a finite number above 0"),
    ("tokens,kv_decode,kv_prefill,time\n10,5,0\n", 2, 1, "3 field(s) where the header has 4"),
    ("tokens,kv_decode,time\n10,5,0.1\n", 1, 1, "no `kv_prefill` column"),
    ("tokens,kv_decode,kv_prefill\n10,5,0\n", 1, 1, "no `time` column"),
    ("", 1, 1, "empty"),
])
def test_a_malformed_csv_names_file_line_and_column(tmp_path, capsys, body, line, col, what):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    assert main(["calibrate", VLLM, "--measured", str(p)]) == 1
    err = capsys.readouterr().err
    assert f"{p}:{line}:{col}: error[M001]: " in err and what in err, err
    if body:
        assert "^" in err


def test_an_unreadable_csv(tmp_path, capsys):
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "none.csv")]) == 1
    assert "error[M002]: cannot read the measured iterations" in capsys.readouterr().err


@pytest.mark.parametrize("args,what", [
    (["--fit", "zeta"], "--fit zeta: the program declares no input zeta"),
    (["--fit", "rate"], "--fit rate: engine `vllm`'s execute does not read the input rate (it reads a, omega, beta, c0)"),
    (["--bound", "rate=0,1"], "--bound rate: rate is not fitted"),
    (["--bound", "a=1,0"], "--bound a=1,0: LO must be below HI: LO 1 is not below HI 0"),
    (["--bound", "a=2,2"], "LO 2 is not below HI 2"),
    (["--bound", "a=nan,1"], "--bound a=nan,1: LO and HI are numbers (inf for none), not NaN"),
    (["--holdout", "1"], "--holdout is a fraction from 0 below 1"),
    (["--engine", "sglang"], "the program has no engine sglang"),
])
def test_usage_errors(tmp_path, capsys, args, what):
    write_csv(tmp_path / "it.csv", vllm_rows(50, 1))
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv")] + args) == 2
    assert what in capsys.readouterr().err


def test_too_few_rows_for_the_inputs(tmp_path, capsys):
    write_csv(tmp_path / "it.csv", vllm_rows(5, 1))
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv")]) == 2
    assert "fitting 4 input(s) needs more than 4 fitted rows" in capsys.readouterr().err


def test_a_program_without_an_engine_is_a_program_error(tmp_path, capsys):
    p = tmp_path / "plain.sq"
    p.write_text('use "std/args";\nfn main() {\n  let w = args.number("w", 1);\n  stage svc : fifo;\n'
                 '  workload { arrive poisson(1); turn { Cost x = cost(svc, w); } }\n  server { run svc (x); }\n}\n')
    write_csv(tmp_path / "it.csv", vllm_rows(10, 1))
    assert main(["calibrate", str(p), "--measured", str(tmp_path / "it.csv")]) == 1
    assert f"{p}:1:1: error[M003]: serq calibrate fits an engine's execute; this program has no engine" in \
        capsys.readouterr().err


@pytest.mark.parametrize("execute,code,what", [
    ("execute (k + llm.n);", "M004", "reads `llm.n`"),
    ("execute (k + ~exp(1));", "M004", "draws (~exp)"),
    ("execute (0.001 * batch.tokens);", "M005", "reads no input"),
])
def test_what_a_measurement_cannot_fit(tmp_path, capsys, execute, code, what):
    src = LINEAR.replace("execute (compute(batch.tokens));", "state n = 0;\n    " + execute)
    p = tmp_path / "e.sq"
    p.write_text(src)
    write_csv(tmp_path / "it.csv", [{"tokens": 1.0, "time": 1.0}] * 5, ("tokens", "time"))
    assert main(["calibrate", str(p), "--measured", str(tmp_path / "it.csv")]) == 1
    err = capsys.readouterr().err
    assert f"error[{code}]" in err and what in err and "^" in err, err


# ------------------------------------------------------------------ tools/vllm_iterations.py

sys.path.insert(0, os.path.join(ROOT, "tools"))


def test_vllm_log_lines_become_rows():
    import vllm_iterations as V
    # the format string of vllm/v1/metrics/loggers.py:199-214, filled as the logger fills it
    fmt = ("%sIteration(%d): %d context requests, %d context tokens, %d generation requests, %d generation tokens, "
           "iteration elapsed time: %.2f ms%s, %s KV cache usage: %.1f%%%s")
    lines = ["INFO 12-01 03:00:00 [loggers.py:199] " + fmt % ("", 7, 2, 900, 30, 30, 41.234, "", "GPU", 12.5, ""),
             "noise", fmt % ("Engine 000: ", 8, 0, 0, 0, 0, 0.0, " (dummy)", "GPU", 0.0, "")]
    assert list(V.log_rows(lines)) == [{"iteration": 7, "tokens": 930, "prefilled": 900, "decoding": 30,
                                        "time": 41.23 / 1000}]


def test_a_scheduler_output_becomes_a_row():
    from types import SimpleNamespace as NS

    import vllm_iterations as V
    # shaped as vllm/v1/core/sched/output.py:41-191 (NewRequestData, CachedRequestData, SchedulerOutput)
    so = NS(scheduled_new_reqs=[NS(req_id="n", num_computed_tokens=64)],
            scheduled_cached_reqs=NS(req_ids=["c1", "c2"], num_computed_tokens=[300, 512], num_output_tokens=[5, 0]),
            num_scheduled_tokens={"n": 200, "c1": 1, "c2": 256})
    assert V.step_row(so, 0.02) == {"tokens": 457, "prefilled": 456, "decoding": 1, "kv_decode": 300,
                                    "kv_prefill": 576, "attention": 200 * 264 + 1 * 301 + 256 * 768,
                                    "time": 0.02}


ORACLE = os.environ.get("SERQ_VLLM_ORACLE") or os.path.join(ROOT, "..", "shared", "oracle", "vllm")
# the oracle's venv, or one its setup.sh made elsewhere (VENV=DIR) where the folder is read-only
ORACLE_PY = os.environ.get("SERQ_VLLM_PYTHON") or os.path.join(ORACLE, ".venv", "bin", "python")
# run in the oracle's venv: vLLM 0.33.0's own Scheduler, driven by the oracle's fake model runner
# (../shared/oracle/vllm/drive.py); each SchedulerOutput through step_row, against the scheduler's
# requests as schedule() left them (num_computed_tokens already advanced by the step's tokens,
# scheduler.py:1858)
ORACLE_CHECK = r'''
import json, sys
ORACLE, TOOLS = sys.argv[1], sys.argv[2]
sys.path.insert(0, ORACLE); sys.path.insert(0, TOOLS)
import drive
import vllm_iterations as V
rows = []
def one_step(self):
    s = self.scheduler
    self.alloc_log.clear()
    out = s.schedule()
    truth = {"tokens": 0, "prefilled": 0, "decoding": 0, "kv_decode": 0, "kv_prefill": 0, "attention": 0,
             "time": 0.0}
    for rid, n in out.num_scheduled_tokens.items():
        r = s.requests[rid]
        before = r.num_computed_tokens - n
        truth["tokens"] += n
        truth["attention"] += n * r.num_computed_tokens
        if r.num_output_tokens > 0:
            truth["decoding"] += 1; truth["kv_decode"] += before
        else:
            truth["prefilled"] += n; truth["kv_prefill"] += before
    rows.append((V.step_row(out, 0.0), truth, out.total_num_scheduled_tokens))
    eco = s.update_from_output(out, self.fake_model_runner(out))
    self.step += 1
    return out, eco
drive.Driver.one_step = one_step
for name in sys.argv[3:]:
    with open(f"{ORACLE}/scenarios/{name}.json") as fh:
        drive.run_scenario(json.load(fh))
print(json.dumps({"steps": len(rows), "differ": sum(r != t or r["tokens"] != n for r, t, n in rows),
                  "kv_prefill": sum(r["kv_prefill"] > 0 for r, _, _ in rows),
                  "kv_decode": sum(r["kv_decode"] > 0 for r, _, _ in rows)}))
'''


@pytest.mark.skipif(not (os.path.exists(ORACLE_PY) and os.path.exists(os.path.join(ORACLE, "drive.py"))),
                    reason="the vLLM oracle's venv (../shared/oracle/vllm/setup.sh, or SERQ_VLLM_PYTHON) "
                           "and its folder (or SERQ_VLLM_ORACLE)")
def test_step_row_reads_vllms_own_scheduler_output(tmp_path):
    import subprocess
    script = tmp_path / "check.py"
    script.write_text(ORACLE_CHECK)
    r = subprocess.run([ORACLE_PY, str(script), ORACLE, os.path.join(ROOT, "tools"),
                        "01b_self_preemption_prefix_caching", "09_prefix_caching_multiturn"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    # both scenarios' steps, prefix hits and chunk continuations (kv_prefill > 0) among them
    assert got["steps"] > 100 and got["differ"] == 0 and got["kv_prefill"] > 0 and got["kv_decode"] > 0, got


def test_an_input_that_only_selects_is_not_fitted(tmp_path, capsys):
    """`sel == 0 ? …` makes the time a step function of sel: flat almost everywhere, nothing for
    least squares to follow, so it is left out by default and refused by --fit."""
    src = LINEAR.replace('let rate = args.number("rate", 1);',
                         'let rate = args.number("rate", 1);\n  let sel = args.number("sel", 0);') \
        .replace("execute (compute(batch.tokens));", "execute (sel == 0 ? compute(batch.tokens) : 3 * compute(batch.tokens));")
    p = tmp_path / "sel.sq"
    p.write_text(src)
    rows = [{"tokens": float(t), "time": 2 * 3e-4 * t} for t in range(1, 40)]
    write_csv(tmp_path / "m.csv", rows, ("tokens", "time"))
    cost = C.cost_model(str(p), {}, None)
    assert cost.reads == ["k", "sel"] and cost.fittable == ["k"] and cost.selectors == ["sel"]
    assert main(["calibrate", str(p), "--measured", str(tmp_path / "m.csv"), "-o", str(tmp_path / "o.json")]) == 0
    err = capsys.readouterr().err
    assert "not fitted: sel" in err
    assert json.loads((tmp_path / "o.json").read_text())["inputs"] == {"k": pytest.approx(3e-4)}
    assert main(["calibrate", str(p), "--measured", str(tmp_path / "m.csv"), "--fit", "sel"]) == 2
    assert "--fit sel: engine `llm`'s execute reads sel only in a condition" in capsys.readouterr().err


def test_the_cli_imports_neither_numpy_nor_scipy():
    """serq check stays fast: an experiment's module is imported for its own command only (cli.py,
    EXPERIMENTS), and its heavy dependencies inside that command."""
    import subprocess
    code = ("import sys; from serq.cli import main; main(['check', %r]); "
            "print(sorted(m for m in ('numpy', 'scipy', 'matplotlib', 'ray', 'serq.exp.sweep', 'serq.exp.plot', "
            "'serq.exp.calibrate') if m in sys.modules))" % VLLM)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_without_scipy_it_says_what_to_install(tmp_path, capsys, monkeypatch):
    write_csv(tmp_path / "it.csv", vllm_rows(20, 1))
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)   # an import of it fails
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv")]) == 2
    assert "pip install 'serq[experiments]'" in capsys.readouterr().err


def test_from_vllms_log_to_a_fit(tmp_path, capsys):
    """Log lines in vLLM's format (loggers.py:199-214), through tools/vllm_iterations.py, fitted."""
    import subprocess
    fmt = ("INFO 12-01 03:00:00 [loggers.py:199] %sIteration(%d): %d context requests, %d context tokens, "
           "%d generation requests, %d generation tokens, iteration elapsed time: %.2f ms%s, %s KV cache usage: "
           "%.1f%%%s")
    rng = random.Random(21)
    true = {"k": 6e-5, "d": 2e-4, "c0": 0.004}
    lines = []
    for i in range(400):
        ctx, gen = rng.choice([0, rng.randint(16, 2048)]), rng.randint(1, 200)
        t = true["c0"] + true["k"] * ctx + true["d"] * gen + rng.gauss(0, 3e-4)
        lines.append(fmt % ("", i, 1 if ctx else 0, ctx, gen, gen, t * 1000, "", "GPU", 10.0, ""))
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "vllm_iterations.py"), str(log)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (tmp_path / "it.csv").write_text(r.stdout)
    src = LINEAR.replace('let rate = args.number("rate", 1);',
                         'let rate = args.number("rate", 1);\n  let d = args.number("d", 0.0001);\n'
                         '  let c0 = args.number("c0", 0.001);') \
        .replace("execute (compute(batch.tokens));", "execute (c0 + k * batch.prefilled + d * batch.decoding);")
    p = tmp_path / "log.sq"
    p.write_text(src)
    f = fit_file(str(p), str(tmp_path / "it.csv"))
    assert f.names == ["k", "d", "c0"]
    for x, v, se in zip(f.names, f.value, f.se):
        assert abs(v - true[x]) <= 3 * se, (x, v, se)


# ------------------------------------------------------------------ inputs a fit cannot take (issue 50)

def _with(rows, line, column, value, cols=("tokens", "kv_decode", "kv_prefill", "time")):
    """The CSV text of rows, with `column` of the row on `line` (2 is the first row) set to value."""
    text = [",".join(cols)]
    for i, r in enumerate(rows, start=2):
        text.append(",".join(value if (i == line and c == column) else repr(r[c]) for c in cols))
    return "\n".join(text) + "\n"


def test_a_time_beyond_any_iterations_is_refused_at_its_row(tmp_path, capsys):
    """One measured time of 1e308 passed the checks, the fit overflowed, and the instance file held
    the start values as a fit (standard error inf, R² nan), exit 0."""
    p = tmp_path / "it.csv"
    p.write_text(_with(vllm_rows(60, 3), 5, "time", "1e308"))
    out = tmp_path / "o.json"
    assert main(["calibrate", VLLM, "--measured", str(p), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{p}:5:" in err and "error[M001]: `time` is '1e308': beyond any iteration's time (at most 1e+09" in err, err
    assert not out.exists()
    p.write_text(_with(vllm_rows(60, 3), 5, "time", "5e8"))   # implausible but within the range: a fit
    assert main(["calibrate", VLLM, "--measured", str(p), "-o", str(out)]) == 0
    capsys.readouterr()
    assert all(math.isfinite(v) for v in json.loads(out.read_text())["inputs"].values())


@pytest.mark.parametrize("column,value", [("tokens", "1e160"), ("kv_decode", "1e150")])
def test_a_row_that_makes_the_fit_overflow_is_named_and_nothing_written(tmp_path, capsys, column, value):
    p = tmp_path / "it.csv"
    p.write_text(_with(vllm_rows(60, 4), 7, column, value))
    out = tmp_path / "o.json"
    assert main(["calibrate", VLLM, "--measured", str(p), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"serq: error: {p}: engine `vllm`'s execute at the start values (a = 4e-05, omega = 0.003, " in err, err
    assert "where line 7 measured" in err and "which least squares cannot weigh in double precision" in err, err
    assert not out.exists()


def test_start_values_that_overflow_are_refused(tmp_path, capsys):
    write_csv(tmp_path / "it.csv", vllm_rows(60, 5))
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv"), "-o", str(tmp_path / "o.json"),
                 "--", "a=1e300"]) == 2
    err = capsys.readouterr().err
    assert "at the start values (a = 1e+300," in err and "(beyond it on lines 2, 3, 4, 5, 6 and" in err, err
    assert not (tmp_path / "o.json").exists()


def test_bounds_wider_than_a_double_are_refused(tmp_path, capsys):
    write_csv(tmp_path / "it.csv", vllm_rows(60, 6))
    assert main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv"), "-o", str(tmp_path / "o.json"),
                 "--bound", "beta=-1e308,1e308"]) == 2
    err = capsys.readouterr().err
    assert "the search failed from the start values" in err and "beta in [-1e+308, 1e+308] are wider than a double" \
        in err, err


@pytest.mark.parametrize("status,x,what", [
    (0, [5e-5, 0.004, 2e-7, 0.0015], "the fit did not converge from the start values"),
    (-1, [5e-5, 0.004, 2e-7, 0.0015], "the fit did not converge from the start values"),
    (1, [5e-5, math.nan, 2e-7, 0.0015], "the fit ended on values that are not numbers (a = 5e-05, omega = nan"),
    (1, [5e-5, 0.004, 1e300, 0.0015], "the fit ended on values (a = 5e-05, omega = 0.004, beta = 1e+300"),
])
def test_the_fits_result_is_checked_not_taken(tmp_path, monkeypatch, status, x, what):
    """A search that failed, or ended on values that are not numbers, is not a fit: refused, not
    written (the optimizer's own answer, replaced here, decides)."""
    import scipy.optimize
    write_csv(tmp_path / "it.csv", vllm_rows(60, 7))
    cost = C.cost_model(VLLM, {}, None)
    cols, t, lines = C.read_measured(str(tmp_path / "it.csv"), cost)
    real = scipy.optimize.least_squares

    def answer(fun, x0, **kw):
        res = real(fun, x0, **kw)
        res.status, res.x, res.message = status, np.array(x), "scipy's message"
        return res
    monkeypatch.setattr(scipy.optimize, "least_squares", answer)
    names = cost.reads
    with pytest.raises(C._Unfit, match=re.escape(what)):
        C.fit(cost, cols, t, names, {x: (0.0, math.inf) for x in names}, C.held_back(len(t), 0.2, 1), lines)


def test_a_column_named_twice_is_an_error_at_its_second_place(tmp_path, capsys):
    """Which of two `time` columns the fit read was the last one, silently: neither is read."""
    rows = vllm_rows(20, 8)
    p = tmp_path / "it.csv"
    p.write_text("tokens,kv_decode,kv_prefill,time,time\n" + "".join(
        f"{r['tokens']},{r['kv_decode']},{r['kv_prefill']},{r['time']!r},1\n" for r in rows))
    assert main(["calibrate", VLLM, "--measured", str(p)]) == 1
    err = capsys.readouterr().err
    assert f"{p}:1:34: error[M001]: the header names `time` twice" in err, err
    p.write_text("tokens,step,tokens\n1,1,1\n")   # any column, the ones not read too
    assert main(["calibrate", VLLM, "--measured", str(p)]) == 1
    assert f"{p}:1:13: error[M001]: the header names `tokens` twice" in capsys.readouterr().err


def test_a_byte_order_mark_is_read_past(tmp_path, capsys):
    p = tmp_path / "it.csv"
    write_csv(p, vllm_rows(60, 9))
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())   # `tokens`, the first column, found
    assert main(["calibrate", VLLM, "--measured", str(p), "-o", str(tmp_path / "o.json")]) == 0


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_the_instance_is_written_whole_or_not_at_all(tmp_path, capsys, monkeypatch, where):
    """A failed write is an I/O error, exit 1 (docs/reference/cli.md), and leaves the instance file
    that was there, and no temporary file."""
    write_csv(tmp_path / "it.csv", vllm_rows(60, 10))
    out = tmp_path / "o.json"
    out.write_text("the old instance\n")

    def fail(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, where, fail)
    rc = main(["calibrate", VLLM, "--measured", str(tmp_path / "it.csv"), "-o", str(out)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert rc == 1 and f"serq: error: cannot write {out}: No space left on device" in err, err
    assert out.read_text() == "the old instance\n"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["it.csv", "o.json"]
