"""The Lean generator (`serq claims`, serq/leangen/, docs/leangen.md): its golden files are current,
its output is the same from run to run, every constructor and field it writes is one that
lean/Serq/IR.lean declares, and lean/Serq/Oracle.lean states vLLM's recorded answers."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from serq import api
from serq.leangen import golden
from serq.leangen import terms as T
from serq.ref import ir as R

from helpers import oracle_lean_files, oracle_lean_text

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
REQUEST = os.path.join("examples", "oracle", "vllm_request.sq")
CLAIMS = os.path.join("tests", "data", "leangen", "claims.sq")
ORACLE = os.path.join(ROOT, "lean", "Serq", "Oracle.lean")


def serq(*args):
    r = subprocess.run([sys.executable, "-m", "serq.cli", *args], capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


# ---------------------------------------------------------------- the golden files


def test_golden_files_are_current():
    assert golden.check() == [], "run: python -m serq.leangen --update"


def test_the_fragment_holds_the_oracle_program_and_the_golden_list_says_which():
    progs = dict(golden.programs())
    inside = sorted(p for p, text in progs.items() if text is not None and p.startswith("examples/"))
    papers = sorted(f"examples/papers/{f}" for f in os.listdir(os.path.join(ROOT, "examples", "papers"))
                    if f.endswith(".sq"))
    # the engines that cost iterations in decimal seconds are inside since the values are rationals
    decimal = ["examples/engines/tgi.sq", "examples/single-turn/fastertransformer.sq",
               "examples/single-turn/separate_phases.sq", "examples/single-turn/vllm_single_turn.sq"]
    # the multi-turn workloads whose sessions wait at a delay stage between turns (a tool, a person)
    stages = ["examples/multi-turn/vllm.sq", "examples/multi-turn/vllm_chat.sq"]
    # the engines whose memory preempts by keys or holds its reservations (SGLang's retraction,
    # requeued at the tail; TensorRT-LLM's `reserve held`)
    memory = ["examples/engines/sglang.sq", "examples/engines/tensorrt_llm.sq"]
    # the caches keyed by content, shared across sessions (F015 lifted: docs/lean.md, *Content pools*)
    content = ["examples/oracle/vllm_shared.sq", "examples/multi-turn/vllm_chat_shared.sq"]
    assert len(papers) == 6 and inside == sorted(["examples/oracle/vllm_request.sq", *papers, *decimal, *stages,
                                                  *memory, *content])
    assert all(os.path.isfile(golden.golden_path(p)) for p in inside)


def test_a_stale_golden_file_is_reported(tmp_path, monkeypatch):
    gp = golden.golden_path(CLAIMS.replace(os.sep, "/"))
    text = read(gp)
    monkeypatch.setattr(golden, "ROOT", ROOT)
    try:
        with open(gp, "w", encoding="utf-8") as fh:
            fh.write(text.replace("Expr.num 1000", "Expr.num 999"))
        assert golden.check() == ["tests/golden/lean/tests/data/leangen/claims.lean: not current for "
                                  "tests/data/leangen/claims.sq"]
    finally:
        with open(gp, "w", encoding="utf-8") as fh:
            fh.write(text)


# ---------------------------------------------------------------- the command


def test_claims_writes_the_golden_text_to_stdout_and_says_there_is_no_claim():
    r = serq("claims", REQUEST)
    assert r.returncode == 0
    assert r.stdout == read(golden.golden_path(REQUEST.replace(os.sep, "/")))
    assert r.stderr == f"{REQUEST}: the program states no claim; the Lean file holds its IR only\n"


def test_claims_with_output_file(tmp_path):
    out = tmp_path / "c.lean"
    r = serq("claims", CLAIMS, "-o", str(out))
    # stderr says what it wrote, as draw, plot and calibrate do
    assert r.returncode == 0 and r.stdout == "" and r.stderr == f"{CLAIMS}: wrote {out} (its IR and 3 claims)\n"
    assert out.read_text(encoding="utf-8") == read(golden.golden_path(CLAIMS.replace(os.sep, "/")))


def test_claims_outside_the_fragment_is_a_diagnostic_with_a_caret():
    mg1 = os.path.join("examples", "single-turn", "mg1.sq")
    r = serq("claims", mg1)
    assert r.returncode == 1 and r.stdout == ""
    first, src, caret = r.stderr.splitlines()[:3]
    assert first == (f"{mg1}:10:3: error[F013]: the fifo stage `svc` (its jobs wait in line: a queue the fragment "
                     "does not model) is outside the Lean fragment (docs/lean.md)")
    assert caret.index("^") == src.index("stage svc")


def test_claims_usage_error_exits_2():
    assert serq("claims").returncode == 2


# ---------------------------------------------------------------- the text


def test_output_is_byte_identical_across_processes_and_hash_seeds():
    outs = set()
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-m", "serq.cli", "claims", CLAIMS], capture_output=True, cwd=ROOT,
                           env=env)
        assert r.returncode == 0
        outs.add(r.stdout)
    assert len(outs) == 1


def test_claim_statements_name_the_claims_propositions_in_order():
    text = read(golden.golden_path(CLAIMS.replace(os.sep, "/")))
    stated = re.findall(r"def (claim_\w+) : Prop :=\n  (Serq\.\w+) program \[\] 500 (\d+)", text)
    assert stated == [("claim_bounded_batch", "Serq.Every", "0"), ("claim_busy", "Serq.SomeIter", "1"),
                      ("claim_quick", "Serq.AtEnd", "2")]
    assert "import Serq.Claims" in text


def test_lean_string_literals_escape_what_lean_reads_specially():
    assert T.string('a"b\\c') == '"a\\"b\\\\c"'
    assert T.string("x\ny\tz\r") == '"x\\ny\\tz\\r"'
    assert T.string("\x01\x7f") == '"\\x01\\x7f"'
    assert T.string("µs") == '"µs"'


@pytest.mark.parametrize("name,want", [("fast", "fast"), ("end", "end_"), ("9lives", "n9lives"),
                                       ("a-b", "a_x2d_b"), ("µ", "_xb5_"), ("", "anon")])
def test_identifiers_are_valid_lean_names(name, want):
    assert T.ident(name) == want
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", want)


def test_camel_namespaces():
    assert T.camel("vllm_request") == "VllmRequest"
    assert T.camel("3-way") == "n3Way"


def test_a_claim_named_like_a_keyword_still_gets_an_identifier():
    prog = api.load_text(read(CLAIMS).replace("claim busy:", "claim end:"), "k.sq")
    from serq.leangen import generate
    assert "def claim_end : Prop :=" in generate(prog).text


# ---------------------------------------------------------------- against lean/Serq/IR.lean


def _ir_lean():
    """IR.lean's inductive types {name: {constructor: arity}} and structures {name: [fields]}."""
    text = read(os.path.join("lean", "Serq", "IR.lean"))
    text = re.sub(r"/-.*?-/", "", text, flags=re.S)
    inductives, structures = {}, {}
    for m in re.finditer(r"^inductive (\w+) where\n(.*?)(?=^\s*deriving|^\S)", text, flags=re.S | re.M):
        ctors = {}
        for line in m.group(2).splitlines():
            for alt in line.split("|")[1:]:
                alt = alt.strip()
                if not alt:
                    continue
                name = alt.split()[0]
                groups = re.findall(r"\(([^:]+):", alt)
                ctors[name] = sum(len(g.split()) for g in groups)
        inductives[m.group(1)] = ctors
    for m in re.finditer(r"^structure (\w+) where\n(.*?)(?=^\s*deriving|^\S)", text, flags=re.S | re.M):
        structures[m.group(1)] = [ln.split(":")[0].strip() for ln in m.group(2).splitlines() if ":" in ln]
    return inductives, structures


def test_ir_lean_is_read():
    inductives, structures = _ir_lean()
    assert inductives["Expr"]["bin"] == 3 and inductives["Form"] == {"every": 0, "someIter": 0, "atEnd": 0}
    assert structures["Row"] == ["new", "out", "think", "forced", "stream", "parent", "common"]
    assert structures["Content"] == ["stream", "parent", "common"] and inductives["Stmt"]["holdS"] == 5


def test_every_constructor_written_is_declared_in_ir_lean():
    inductives, _ = _ir_lean()
    texts = [read(golden.golden_path(p)) for p, t in golden.programs() if t is not None] + [oracle_lean_text()]
    used = set()
    for text in texts:
        used |= set(re.findall(r"\b(" + "|".join(inductives) + r")\.(\w+)", text))
    assert used, "nothing found"
    for ty, ctor in sorted(used):
        assert ctor in inductives[ty], f"{ty}.{ctor} is not a constructor of lean/Serq/IR.lean"


def test_every_name_table_covers_ir_lean_exactly():
    inductives, _ = _ir_lean()
    assert set(T.BIN_OPS.values()) == set(inductives["BinOp"])
    assert set(T.FUNS.values()) == set(inductives["Fun"])
    assert set(T.STEP_VARS.values()) == set(inductives["StepVar"])
    assert set(T.OBS.values()) == set(inductives["ObsFn"])
    assert set(T.AGGS.values()) == set(inductives["AggFn"])
    assert set(T.FORMS.values()) == set(inductives["Form"])
    assert set(T.ARRIVE.values()) == set(inductives["Arrive"])
    assert set(T.MODES.values()) == set(inductives["Mode"])


def test_structure_instances_write_every_field_in_order():
    _, structures = _ir_lean()
    text = read(golden.golden_path(CLAIMS.replace(os.sep, "/")))
    prog = re.search(r"def program : Program := \{\n(.*?)\n\n", text, flags=re.S).group(1)
    top = re.findall(r"^  (\w+) :=", prog, flags=re.M)
    assert top == structures["Program"]
    eng = re.findall(r"^    (\w+) :=", prog, flags=re.M)
    assert eng == structures["Engine"]
    for ty, start in (("Pool", '{ name := "kv"'), ("HoldPool", "{ pool := 0"), ("Claim", '{ name := "busy"')):
        line = next(ln for ln in prog.splitlines() if ln.strip().startswith(start))
        assert re.findall(r"(\w+) :=", line) == structures[ty], ty


def _one_of_each():
    """A value of every class serq/ref/ir.py defines for expressions, statements and iterations."""
    n = R.Num(1)
    exprs = [n, R.Attr("a"), R.Ctx("now"), R.StepVar("Ntok", True), R.Reg("r"), R.Obs("budget_left", "llm"),
             R.Agg("prefix_total", "o"), R.Not(n), R.Bin("!=", n, n), R.Ite(n, n, n), R.Fn("reusable", (n, n))]
    hp = R.HoldPool(0, n, None, True, False)
    stmts = [R.SetA("x", n), R.DrawA("x"), R.ObserveA("o", n), R.BranchS(n, (R.TurnS(),), ()),
             R.WhileS(n, (R.EndS(),)), R.TurnS(), R.HoldS((hp,), n, None, (R.RunS("decode", n, 0),), R.Content(R.Attr("s"))),
             R.RunS("prefill", n, None), R.EndS(), R.JobS(0, n)]
    istmts = [R.IServe(n, (n,), None), R.IAdmit(None, n, n), R.IBranch(n, (R.ISet("r", n),), ()), R.ISet("r", n)]
    return exprs, stmts, istmts


def test_every_class_of_the_fragment_has_a_rendering():
    exprs, stmts, istmts = _one_of_each()
    classes = {c for c in vars(R).values() if dataclasses.is_dataclass(c) and isinstance(c, type)}
    covered = {type(x) for x in exprs + stmts + istmts} | {R.HoldPool, R.Pool, R.Engine, R.Claim, R.Program,
                                                            R.Row, R.SessionIn, R.Workload, R.Stage, R.Content}
    assert classes == covered
    assert [T.expr(e).split()[0] for e in exprs] == [
        "Expr.num", "Expr.attr", "Expr.ctx", "Expr.step", "Expr.reg", "Expr.obs", "Expr.agg", "Expr.not",
        "Expr.bin", "Expr.ite", "Expr.fn"]
    assert T.expr(exprs[5]) == 'Expr.obs ObsFn.budgetLeft "llm"'
    assert T.expr(exprs[8]) == "Expr.bin BinOp.ne (Expr.num 1) (Expr.num 1)"
    assert [T.stmt(s, 0).split()[0] for s in stmts] == [
        "Stmt.setA", "Stmt.drawA", "Stmt.observeA", "Stmt.branchS", "Stmt.whileS", "Stmt.turnS", "Stmt.holdS",
        "Stmt.runS", "Stmt.endS", "Stmt.jobS"]
    assert T.stmt(stmts[-1], 0) == "Stmt.jobS 0 (Expr.num 1)"
    assert T.stmt(stmts[6], 0).splitlines()[-1] == "  (some { stream := Expr.attr \"s\", parent := none, common := none })"
    one = R.Num(1)
    assert T.content(R.Content(one, one, one)) == ("(some { stream := Expr.num 1, parent := (some (Expr.num 1)),"
                                             " common := (some (Expr.num 1)) })") and T.content(None) == "none"
    assert T.stage(R.Stage("think", None), 0) == '{ name := "think", phi := none }'
    assert T.stage(R.Stage("tools", R.Ctx("present")), 0) == '{ name := "tools", phi := (some (Expr.ctx "present")) }'
    assert T.istmt(istmts[0], 0) == "IStmt.serve (some (Expr.num 1)) (some [Expr.num 1]) none"


def test_a_negative_number_cannot_be_written():
    with pytest.raises(ValueError):
        T.nat(-1)


def test_a_rational_is_a_numeral_when_natural_else_q_mk_in_lowest_terms():
    """lean/Serq/Num.lean's `Q`: a natural through `OfNat`, any other value `(Q.mk NUM DEN)`, the sign
    on the numerator, as serq/ref/num.py gives it (a whole Fraction is its int)."""
    from fractions import Fraction
    assert T.expr(R.Num(5)) == "Expr.num 5" and T.rational(Fraction(4, 2)) == "2"
    assert T.expr(R.Num(-3)) == "Expr.num (Q.mk (-3) 1)"
    assert T.expr(R.Num(Fraction(1, 25000))) == "Expr.num (Q.mk 1 25000)"
    assert T.rational(Fraction(-5, 4)) == "(Q.mk (-5) 4)"
    assert T.session_in(R.SessionIn(Fraction(5, 2), (1,), ()), 0) == "{ arrival := (Q.mk 5 2), draws := [1], rows := [] }"
    assert T.registers((("credit", Fraction(1, 2)), ("n", 0))) == '[("credit", (Q.mk 1 2)), ("n", 0)]'
    for bad in (0.5, True, "1"):
        with pytest.raises(ValueError):
            T.rational(bad)


def test_the_rationals_golden_file_writes_its_fractions():
    text = read(golden.golden_path("tests/data/leangen/rationals.sq"))
    for term in ("Expr.num (Q.mk 1 250)", "Expr.num (Q.mk 5 4)", 'registers := [("credit", (Q.mk 1 2))]',
                 "gap := (Q.mk 5 2)", "Expr.num (Q.mk 403 4)",
                 "Expr.bin BinOp.sub (Expr.num 0) (Expr.bin BinOp.div (Expr.ctx \"now\") (Expr.num 4))"):
        assert term in text, term


def test_the_stages_golden_file_writes_its_stages_and_jobs():
    """tests/data/leangen/stages.sq: a think time at a delay and a tool call at a ps stage whose
    capacity reads `present`, each a session's `Stmt.jobS` naming its stage by index."""
    text = read(golden.golden_path("tests/data/leangen/stages.sq"))
    for term in ('{ name := "reader", phi := none }',
                 '{ name := "tools", phi := (some (Expr.ite (Expr.bin BinOp.gt (Expr.ctx "present") (Expr.num 2)) '
                 '(Expr.num 2) (Expr.ctx "present"))) }',
                 'Stmt.drawA "~1",\n        Stmt.jobS 0 (Expr.attr "~1")',
                 "Stmt.jobS 1 (Expr.bin BinOp.add (Expr.num 1) (Expr.attr \"~2\"))"):
        assert term in text, term
    for ex in ("examples/multi-turn/vllm.sq", "examples/multi-turn/vllm_chat.sq"):
        text = read(golden.golden_path(ex))
        assert "phi := none }]" in text and "Stmt.jobS 0 (Expr.attr" in text, ex


def test_the_preempt_golden_file_writes_its_victim_keys_and_requeue_tail():
    """tests/data/leangen/preempt.sq: SGLang's retraction, `preempt by (1 - decoding, position -
    prompt, -prompt) requeue tail`, as `Pool.preempt` (the keys, `-e` written `0 - e`) and
    `Pool.requeueTail`; a pool that preempts none is `preempt := none`."""
    text = read(golden.golden_path("tests/data/leangen/preempt.sq"))
    keys = ('preempt := (some [Expr.bin BinOp.sub (Expr.num 1) (Expr.ctx "decoding"), '
            'Expr.bin BinOp.sub (Expr.ctx "position") (Expr.attr "prompt"), '
            'Expr.bin BinOp.sub (Expr.num 0) (Expr.attr "prompt")])')
    assert keys in text
    assert "memory := true, requeueTail := true, reserveHeld := false, content := false }" in text
    assert 'preempt := none, queueKeys := [], admitted := true, memory := false, requeueTail := false' in text
    lifo = read(golden.golden_path("tests/data/leangen/claims.sq"))
    assert ('preempt := (some [Expr.bin BinOp.sub (Expr.num 0) (Expr.ctx "admission")])' in lifo
            and "requeueTail := false" in lifo)
    for ex, held in (("examples/engines/sglang.sq", "requeueTail := true, reserveHeld := true"),
                     ("examples/engines/tensorrt_llm.sq", "requeueTail := false, reserveHeld := true")):
        assert held in read(golden.golden_path(ex)), ex


def test_the_closed_golden_file_writes_its_population():
    """tests/data/leangen/closed.sq: `arrive closed(2)`, `Arrive.closed` with `n` the population."""
    text = read(golden.golden_path("tests/data/leangen/closed.sq"))
    assert "  arrive := Arrive.closed,\n  gap := 0,\n  n := 2," in text
    assert "Serq.AtEnd program [] 500 1" in text


# ---------------------------------------------------------------- lean/Serq/Oracle.lean


def _theorems(text):
    """{scenario name: (requests [(session, turn)], answers [(first, last, preemptions)])}."""
    out = {}
    pat = (r"/-! ## (\S+) \((\S+)\) -/.*?theorem vllm_\w+ :\n.*?\n      \[(.*?)\] =\n      some \[(.*?)\] := by\n"
           r"  decide \+kernel")
    for m in re.finditer(pat, text, flags=re.S):
        reqs = [tuple(map(int, x)) for x in re.findall(r"\((\d+), (\d+)\)", m.group(3))]
        ans = [tuple(None if v == "none" else int(v[5:]) for v in t)
               for t in re.findall(r"\((none|some \d+), (none|some \d+), (none|some \d+)\)", m.group(4))]
        out[m.group(1)] = (m.group(2), reqs, ans)
    return out


def test_oracle_theorems_state_vllms_recorded_answers():
    """Read against the recorded JSON alone: each request's first and last token step and preemption
    count, in the scenario's session and turn order."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import vllm_oracle
    ths = _theorems(oracle_lean_text())
    assert len(ths) >= 20
    for name, (path, reqs, ans) in ths.items():
        with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
            result = json.load(fh)
        by_id = {r["id"]: r for r in result["requests"]}
        sessions, _ = vllm_oracle.sessions_of(vllm_oracle.scenario_inputs(os.path.join(ROOT, path), result), by_id)
        want_reqs = [(si, ti) for si, s in enumerate(sessions) for ti, _ in enumerate(s)]
        want = [(by_id[rid]["first_token_step"], by_id[rid]["last_token_step"], by_id[rid]["num_preemptions"])
                for s in sessions for rid in s]
        assert reqs == want_reqs and ans == want, name


def test_oracle_leaves_out_exactly_the_scenarios_where_the_kernel_differs():
    text = read(ORACLE)
    left = re.findall(r"^\* `(\S+)`: (.*)$", text, flags=re.M)
    # the kernel keeps the cache keyed by content (docs/lean.md): 09b agrees, and the shared families
    # are stated; 10's stall is the reference's rule (docs/vllm.md)
    assert [n for n, _ in left] == ["10_preempt_only_step_stall"]
    assert re.search(r"^\d+ theorems of 84 scenarios tried", text, re.M)


def test_the_oracle_states_what_lean_checks_in_ci_and_names_the_rest():
    """Issue 45: every named scenario is stated, then the families' in turn, each theorem within one
    declaration's memory and all within the budget (tools/kernel_cost.py); every agreeing scenario
    not stated is named in the header, so that stated, named and left out are the 84 tried."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import gen_oracle_lean as G
    import kernel_cost
    scs = [G.scenario(p) for p in G.scenario_paths()]
    stated = G.select(scs)
    assert sum(s.calls for s in stated) <= G.BUDGET
    assert all(s.calls <= kernel_cost.THEOREM_CALLS for s in stated)
    named = [s for s in scs if G.family_of(s) is None and s.differs is None]
    assert len(named) == 11 and all(s in stated for s in named)
    fams = {G.family_of(s) for s in stated} - {None}
    assert fams == {"random", "new_random", "prefix", "prefix_tight", "shared", "shared_tight", "tight",
                    "tight_cached"}   # shared_many's runs are each over a declaration's memory
    text = oracle_lean_text()
    header = read(ORACLE)
    for s in scs:
        if s.differs is not None:
            continue
        assert (f"theorem vllm_{T.ident_part(s.name)} :" in text) == (s in stated), s.name
        assert (f"`{s.name}`" in header) == (s not in stated), s.name


def test_the_library_builds_no_scenario_and_the_oracle_is_a_target_of_its_own():
    """Issue 27: building the semantics (`lake build`, the default target `Serq`) ran all 70
    `decide +kernel` scenario checks, since Serq.lean imported Oracle.lean. The library imports the
    semantics alone; SerqOracle is its own target, and `make check` builds both where lake is."""
    lib = read(os.path.join("lean", "Serq.lean"))
    assert "import Serq.Oracle" not in lib
    assert all(f"import Serq.{m}" in lib for m in ("Num", "IR", "Exec", "Claims"))
    lake = read(os.path.join("lean", "lakefile.lean"))
    assert re.search(r"@\[default_target\]\s*lean_lib Serq where\s*roots := #\[`Serq\]", lake)
    assert re.search(r"lean_lib SerqOracle where\s*globs := #\[\.andSubmodules `Serq\.Oracle\]", lake)
    assert re.search(r"lean_lib SerqServe where\s*globs := #\[\.andSubmodules `Serq\.Serve\]", lake)
    assert re.search(r"lean_lib SerqPapers where\s*globs := #\[\.andSubmodules `Serq\.Papers\]", lake)
    assert "tools/lean_check.py" in read("Makefile")


def test_oracle_lean_is_current():
    """tools/gen_oracle_lean.py regenerates the committed file byte for byte (it runs every
    scenario through the reference kernel: the slowest test here, a few seconds)."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import gen_oracle_lean
    files, scs = gen_oracle_lean.generate()
    assert sorted(files) == oracle_lean_files(), "run: python tools/gen_oracle_lean.py"
    assert all(text == read(path) for path, text in files.items()), "run: python tools/gen_oracle_lean.py"
    assert len(scs) == 52 + 8 * gen_oracle_lean.EXTRA_PER   # eight extra families, three of them shared*


def test_text_inside_a_lean_comment_cannot_close_or_open_one():
    assert T.comment("a -/ b /- c\nd") == "a - / b / - c d"


# `new` is a whole number in every trace (T001); a think time of 2.5 s is a trace's, not a natural
@pytest.mark.parametrize("row,code,col", [("a,0,x,1,0", "T001", 5), ("a,0,2.5,1,0", "T001", 5),
                                          ("a,0,2,1,2.5", "F001", 1)])
def test_a_trace_that_is_not_naturals_is_a_diagnostic(tmp_path, row, code, col):
    import shutil
    shutil.copy(os.path.join(ROOT, REQUEST), tmp_path / "p.sq")
    (tmp_path / "trace.csv").write_text(f"session,turn,new,out,think\n{row}\n", encoding="utf-8")
    r = serq("claims", str(tmp_path / "p.sq"))
    assert r.returncode == 1 and r.stdout == ""
    line = 2 if code == "T001" else 1
    assert r.stderr.startswith(f"{tmp_path / 'trace.csv'}:{line}:{col}: error[{code}]: ")


def test_the_trace_is_written_as_its_rows():
    text = read(golden.golden_path(REQUEST.replace(os.sep, "/")))
    # examples/oracle/trace.csv, by hand: every field, the content columns last (the last two prompts
    # begin with the first's 32 tokens)
    rows = [[(40, 60, 0, 0, 1, 0, 0)], [(40, 50, 1, 0, 2, 1, 32)], [(40, 50, 1, 0, 3, 1, 32)]]
    assert "def trace : List (List Row) := [\n" + ",\n".join(
        "  [" + ", ".join("⟨" + ", ".join(map(str, r)) + "⟩" for r in s) + "]" for s in rows) + "]" in text


def test_the_cache_trace_theorem_states_vllms_hits():
    """Issue 27: the reference's `vllm_cache_trace`, from the recorded scenario of conversations
    hitting their own earlier turns' blocks and a request (`repeat`) hitting another session's: its
    statement names each request's hit at its first admission as vLLM recorded it (the kernel agrees,
    or tools/gen_oracle_lean.py would not write it)."""
    import json
    text = oracle_lean_text()
    m = re.search(r"theorem vllm_cache_trace :.*?hits \(run program_09_prefix_caching_multiturn .*?\n.*?\n"
                  r"\s+some \[([^\]]*)\] :=\n  ⟨vllm_09_prefix_caching_multiturn, by decide \+kernel⟩", text, re.S)
    assert m, "vllm_cache_trace is not stated"
    with open(os.path.join(ROOT, "tools", "oracle", "results", "09_prefix_caching_multiturn.json")) as fh:
        reqs = json.load(fh)["requests"]
    stated = [int(x.split()[1]) for x in m.group(1).split(", ")]
    assert sorted(stated) == sorted(r["num_cached_tokens_first_admission"] for r in reqs)
    assert 32 in stated   # `repeat`'s hit: blocks another session left
