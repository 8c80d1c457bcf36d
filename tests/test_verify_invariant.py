"""Claims proved for every number of sessions by the kernel's invariants (serq/verify/invariant.py,
docs/verify.md, *Induction*): the lemmas hold at every iteration of random paths of generated
programs (tests/fragment_programs.py) and of the examples; a claim they imply is proved, and held on
every such path; one they do not is left to the paths, which refute it where it is false.

SERQ_FUZZ_CASES=N runs N generated cases instead of the suite's 20 (`make fuzz`: 300)."""
from __future__ import annotations

import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, seed, settings

from serq import api, ref
from serq.cli import main
from serq.ref import exec as X
from serq.ref.fragment import convert
from serq.ref.num import of_decimal
from serq.verify import invariant as V
from serq.verify import verify
from fragment_programs import Case, cases, write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = int(os.environ.get("SERQ_FUZZ_CASES", "20"))
SEED = os.environ.get("SERQ_FUZZ_SEED")


def invariant_claims(c: Case) -> str:
    """Claims the lemmas imply, over the case's caps."""
    cap = c.blocks * (c.bs if c.bs else 1)
    return f"""  claim inv_budget: every iteration of llm (tokens <= {c.budget} && prefilled <= tokens);
  claim inv_slots: every iteration of llm (holders(reqs) <= {c.seqs} && residents <= {c.seqs} && holders(kv) <= {c.seqs});
  claim inv_memory: every iteration of llm (used(kv) <= {cap} && free(kv) + used(kv) == {cap});
  claim inv_none: some iteration of llm (tokens > {c.budget} || used(kv) > {cap});
  claim inv_read: every iteration of llm (decoders <= residents && kv_decode + kv_prefill <= {cap});
"""


def run_case(c: Case, folder: str):
    p = ref.convert(api.load(write(c, folder, invariant_claims(c))))
    trace = ref.read_trace(os.path.join(folder, "trace.csv"))
    arrivals = [of_decimal(t) for t in c.times] if c.arrive == "poisson" else None
    wl = ref.workload(p, c.n, trace=trace, arrivals=arrivals)
    try:
        run = X.run(p, wl, horizon=of_decimal(c.horizon))
    except X.KernelError:
        run = None
    return p, run


@settings(max_examples=CASES, deadline=None, derandomize=SEED is None, database=None,
          suppress_health_check=list(HealthCheck))
@seed(int(SEED or 0))
@given(cases())
def test_the_lemmas_hold_at_every_iteration_and_imply_the_invariant_claims(c):
    with tempfile.TemporaryDirectory(prefix="serq-inv-") as folder:
        p, run = run_case(c, folder)
    names = [cl.name for cl in p.claims]
    for name in ("inv_budget", "inv_slots", "inv_memory", "inv_none", "inv_read"):
        if name == "inv_read" and c.keyed:   # on a content pool holders share blocks: no position lemma
            continue
        got = V.prove(p, names.index(name), lambda: 60.0)
        assert isinstance(got, V.Proof), (name, got, c)
    if run is None:
        return
    for k, (_, m) in enumerate(run.machine.path):
        assert V.violated(p, m) == [], (k, V.violated(p, m), c)
    out = ref.claims.outcomes(p, run)
    for name in ("inv_budget", "inv_slots", "inv_memory", "inv_read"):
        # on a content pool two requests' positions count their shared blocks twice: kv_decode +
        # kv_prefill may exceed the use (found so: the lemma is not stated there)
        if name != "inv_read" or not c.keyed:
            assert out[name].status == "held", (name, out[name], c)
    assert out["inv_none"].status == "not_witnessed"


def _examples():
    for folder in ("oracle", "multi-turn", "engines", "single-turn", "papers", "subagent"):
        d = os.path.join(ROOT, "examples", folder)
        for f in sorted(os.listdir(d)):
            if f.endswith(".sq"):
                yield os.path.join(d, f)


def test_the_lemmas_hold_on_the_examples():
    """Every example in the fragment, on a few sessions of its family: every lemma at every
    iteration (the draws at a value, the arrivals a second apart)."""
    ran = 0
    for f in _examples():
        try:
            p = ref.convert(api.load(f))
        except api.SerqError:
            continue
        trace = None
        if p.trace:
            from serq.leangen import trace_rows
            trace = trace_rows(api.load(f))
        for n, d in ((1, 3), (3, 7), (4, 40)):
            arrivals = [k * 1 for k in range(n)] if p.arrive == "poisson" else None
            wl = ref.workload(p, n, trace=trace, arrivals=arrivals, draws=[[d + k] * 12 for k in range(n)])
            try:
                run = X.run(p, wl, fuel=200_000, horizon=100_000)
            except X.KernelError:
                continue
            for _, m in run.machine.path:
                assert V.violated(p, m) == [], (f, n, V.violated(p, m))
            ran += len(run.machine.path)
    assert ran > 1000


V1 = """fn main() {
  device gpu { kv cap 24; }
  engine vllm on gpu {
    reqs cap 2;
    tokens cap 8;
    request (prompt, o) {
      set kept = prompt;
      at admission {
        known = max(kept, computed + 1);
        reused = min(cachedin(kv), reusable(known, blocksize(kv)));
      }
      set kept = known;
      set c = cached;
      prefill (known - c) growing kv;
      decode (o - 1 - (known - prompt)) growing kv;
      cache (prompt + o);
    }
    schedule {
      let threshold = running.count + waiting.count > 1 ? 4 : inf;
      advance running each at most (threshold);
      admit waiting while (running.preempted == 0) each at most (threshold)
        taking reqs (1), kv (min(known, reused + budget_left(vllm))) reserve (known);
    }
    state k = 0;
    execute (1);
  }
  pool kv on gpu { block 4; evict lru; preempt lifo; }
  pool reqs on vllm { queue fifo; }
  workload {
    arrive poisson(1);
    turn { Size p = 1 + floor(~exp(6)); Size o = 1 + floor(~exp(6)); }
  }
  server { vllm (p, o); }
CLAIMS
}
"""


def program(claims: str):
    return api.load_text(V1.replace("CLAIMS", claims), "v1.sq")


def test_budget_slots_and_memory_are_proved_by_induction_for_every_number_of_sessions():
    prog = program("""  claim budget: every iteration of vllm (tokens <= 8);
  claim slots: every iteration of vllm (holders(reqs) <= 2);
  claim memory: every iteration of vllm (used(kv) <= 24);
  claim never_over: some iteration of vllm (busy(vllm) > 1 || queue(vllm) > 2);""")
    res = verify(prog, sessions=2, values=4, timeout=30)
    for name, inv in (("budget", ["tokens <= 8"]), ("slots", ["used(reqs) <= 2", "holders(reqs) <= used(reqs)"]),
                      ("memory", ["used(kv) <= 24"]), ("never_over", ["busy(vllm) == min(queue(vllm), 1)", "queue(vllm) <= residents",
                                    "used(reqs) <= 2", "holders(reqs) <= used(reqs)", "residents == holders(reqs)"])):
        v = res.claims[name]
        assert (v.verdict, v.by, v.every_sessions, v.every_value) == \
            ("no_witness" if name == "never_over" else "proved", "induction", True, True), (name, v)
        assert v.invariant == inv, (name, v.invariant)
    assert res.paths == 0     # no path was needed
    assert sorted(res.bound["every_sessions"]) == ["budget", "memory", "never_over", "slots"]


def test_a_claim_the_invariants_do_not_imply_is_left_to_the_paths():
    prog = program("""  claim tight: every iteration of vllm (used(kv) <= 8);
  claim budget: every iteration of vllm (tokens <= 8);""")
    res = verify(prog, sessions=1, values=4, timeout=30)
    v = res.claims["tight"]
    assert v.verdict == "counterexample" and v.by in ("sample", "unrolled", "search") and not v.every_sessions
    assert res.claims["budget"].by == "induction"
    # one claim proved by induction and one by the paths: each as alone
    alone = verify(program("  claim tight: every iteration of vllm (used(kv) <= 8);"), sessions=1, values=4,
                   timeout=30)
    assert alone.claims["tight"].verdict == "counterexample"


def test_what_the_invariants_say_nothing_of_is_not_proved_by_them():
    p = ref.convert(program("""  claim reg: every iteration of vllm (vllm.k == 0);
  claim queue: every iteration of vllm (queued(reqs) <= 2);
  claim cut: every iteration of vllm (tokens <= 7);
  claim zero: every iteration of vllm (tokens / (tokens - 9) <= 0);""") )
    # a register no set changes keeps its initial value: an invariant of the registers (*Registers*)
    got = V.prove(p, 0, lambda: 10)
    assert isinstance(got, V.Proof) and got.invariant[0].startswith(V.REGISTERS)
    assert "allow a reading where it fails" in V.prove(p, 1, lambda: 10)
    assert "allow a reading where it fails" in V.prove(p, 2, lambda: 10)
    # tokens never reach 9, but the quotient is the kernel's own: a division it refuses is named
    p2 = ref.convert(program("  claim zero: every iteration of vllm (tokens / (tokens - 8) <= 0);"))
    assert "F016" in V.prove(p2, 0, lambda: 10)
    assert isinstance(V.prove(p, 3, lambda: 10), V.Proof)


def test_a_lemma_that_does_not_hold_is_caught_on_a_machine():
    """violated() reads the machine: a pool used beyond its cap breaks `cap`, a tokens count beyond
    the cap `budget` (each lemma's concrete reading is what the proof relies on)."""
    import dataclasses
    p = ref.convert(program("  claim budget: every iteration of vllm (tokens <= 8);"))
    wl = ref.workload(p, 2, arrivals=[0, 0], draws=[[5, 3], [9, 2]])
    run = X.run(p, wl)
    m = run.machine.path[0][1]
    assert V.violated(p, m) == []
    kv = m.pools[0]
    bad = dataclasses.replace(m, pools=(dataclasses.replace(kv, used=28),) + m.pools[1:])
    assert any(t.startswith("used(kv) <= 24") for t in V.violated(p, bad))
    bad = X.set_var(m, "Ntok", 9)
    assert any(t.startswith("tokens <= 8") for t in V.violated(p, bad))


def test_the_cli_prints_the_invariant(tmp_path, capsys):
    f = tmp_path / "v1.sq"
    f.write_text(V1.replace("CLAIMS", "  claim slots: every iteration of vllm (holders(reqs) <= 2);"))
    assert main(["verify", str(f), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    c = got["claims"]["slots"]
    assert c["by"] == "induction" and c["invariant"] == ["used(reqs) <= 2", "holders(reqs) <= used(reqs)"]
    assert got["bound"]["every_sessions"] == ["slots"] and got["bound"]["every_value"] == ["slots"]
    assert main(["verify", str(f)]) == 0
    text = capsys.readouterr().out
    assert "proved by induction, for every number of sessions" in text
    assert "invariant: used(reqs) <= 2 && holders(reqs) <= used(reqs)" in text


def test_the_vllm_example(tmp_path):
    """examples/multi-turn/vllm.sq: vLLM's engine under multi-turn agents (growing KV, lifo
    preemption, the prefix cache, a chunk threshold, `budget_left` units): its caps proved by
    induction; a false claim beside them (a lone agent's first prompt, its system prompt of 200
    tokens or more, is prefilled in one step) refuted with a workload the simulator replays failing."""
    text = open(os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")).read().rstrip()
    assert text.endswith("}")
    prog = api.load_text(text[:-1] + "  claim small_steps: every iteration of vllm (tokens <= 200);\n}\n",
                         os.path.join(ROOT, "examples", "multi-turn", "vllm_small_steps.sq"))
    res = verify(prog, timeout=60)
    for name in ("within_budget", "within_slots", "within_memory"):
        v = res.claims[name]
        assert (v.verdict, v.by, v.every_sessions) == ("proved", "induction", True), (name, v)
    v = res.claims["small_steps"]
    assert (v.verdict, v.iteration, v.by) == ("counterexample", 0, "sample")
    rep = api.run(prog, None, None, v.workload)["claims"]["small_steps"]
    assert rep["status"] == "failed"


def test_the_verdicts_agree_with_enumeration():
    """Every claim of a growing, preempting, caching engine, verify's verdict (by induction, by
    sampled workloads, by the search) against every workload of 1 and 2 sessions with draws 0..3."""
    from test_verify import expected
    prog = api.load_text(V1.replace("arrive poisson(1)", "arrive batch(2)").replace("CLAIMS", """
  claim budget: every iteration of vllm (tokens <= 8);
  claim slots: every iteration of vllm (residents <= 2 && decoders <= residents);
  claim memory: every iteration of vllm (used(kv) <= 24 && kv_decode + kv_prefill <= used(kv));
  claim never: some iteration of vllm (queue(vllm) > 2);
  claim tight: every iteration of vllm (used(kv) <= 8);
  claim pair: some iteration of vllm (residents == 2);
  claim seven: every iteration of vllm (tokens <= 7);
  claim kv_slots: every iteration of vllm (holders(kv) <= 2);
  claim kv_one: every iteration of vllm (holders(kv) <= 1);"""), "enum.sq")
    res = verify(prog, sessions=2, values=3, timeout=60)
    want = expected(res.prog, 2, 3, 2)
    assert {k: v.verdict for k, v in res.claims.items()} == want
    assert want == {"budget": "proved", "slots": "proved", "memory": "proved", "never": "no_witness",
                    "tight": "counterexample", "pair": "witnessed", "seven": "counterexample",
                    "kv_slots": "proved", "kv_one": "counterexample"}
    assert {k for k, v in res.claims.items() if v.by == "induction"} == {"budget", "slots", "memory", "never", "kv_slots"}


def test_positions_within_the_use_is_no_lemma_on_a_content_pool():
    """Found by the campaign above: four sessions of two identical prompts on a cache keyed by
    content share blocks, whose tokens each request's position counts: kv_decode + kv_prefill
    exceeds the pool's use, so the lemma is stated only where each request's blocks are its own."""
    c = Case(bs=1, blocks=24, seqs=2, budget=2, each="none", cap=1, granule=0, order="", schedule="vllm",
             lifo=False, prefix=True, chunked=False, reserve=False, cost="0.001 + 0.00004 * batch.tokens",
             arrive="batch", gap=1, sessions=(((20, 3, 0),), ((1, 1, 0),), ((5, 1, 0),), ((1, 1, 0),)),
             iter_claims=False, content="same", sys=0, shares=((-1, 0), (0, 0), (0, 0), (0, 0)))
    with tempfile.TemporaryDirectory(prefix="serq-inv-") as folder:
        p, run = run_case(c, folder)
    assert ref.claims.outcomes(p, run)["inv_read"].status == "failed"
    assert not any(lm.key.startswith("positions:") for lm in V.lemmas(p))
    assert not isinstance(V.prove(p, [cl.name for cl in p.claims].index("inv_read"), lambda: 10), V.Proof)
    assert all(V.violated(p, m) == [] for _, m in run.machine.path)


def _symbolic_check(prog, n: int, values: int) -> int:
    """Every path of n sessions with draws 0..values (arrivals as the program's law has them, gaps
    0..values), run concolically: on each, every lemma at every iteration for every input of the
    path (z3: the path's condition and a lemma's negation have no model). The paths run."""
    import z3
    from serq.verify import search as S
    from serq.verify.sym import Trace, term
    p = ref.convert(prog)
    trace = None
    if p.trace:
        from serq.leangen import trace_rows
        trace = trace_rows(prog)
    fam = S.Family(p, n, values, values, trace)
    lems = V.lemmas(p)

    def run(inp):
        with Trace() as tr:
            m = X.run(p, S.workload(fam, inp), fuel=S.FUEL).machine
            got = []
            for _, at in m.path:
                env = X.claim_env(at)
                for lm in lems:
                    vals = {k: X.eval_expr(p, at, env, e) for k, e in lm.quantities}
                    got.append(lm.fact(lambda k: term(vals[k])))
        return tr.facts, (got, list(inp.used)), None

    bad = []

    def visit(facts, res) -> bool:
        got, names = res
        s = z3.Solver()   # one query a path: some lemma false at some iteration, on an input of the path
        s.add(facts + [S.domain(fam, k) for k in names] + [z3.Not(z3.And(got))])
        if s.check() != z3.unsat:
            bad.append(s.model())
        return bool(bad)

    count, _, undecided = S.explore_with(run, lambda k: S.domain(fam, k), lambda: 600.0, visit)
    assert not bad, bad
    assert undecided == 0
    return count


def test_the_lemmas_hold_on_every_path_of_a_bound():
    """Symbolically, within a bound: every path of a growing, preempting, caching engine (under
    poisson: any real arrival times) satisfies every lemma at every iteration, for every input that
    takes the path; and of vLLM's engine over a cache keyed by content. The random campaign above
    reaches further; this leaves no input of the bound out. (A lemma made false, tokens <= 4, is
    caught at one session with values 0..8.)"""
    prog = program("""  claim budget: every iteration of vllm (tokens <= 8);""")
    for n, values in ((1, 8), (2, 2), (3, 1)):
        assert _symbolic_check(prog, n, values) > 30
    # a cache keyed by content, shared across sessions (the recorded scenario's trace)
    assert _symbolic_check(api.load(os.path.join(ROOT, "examples", "oracle", "vllm_shared.sq")), 3, 1) >= 1


def test_the_symbolic_check_catches_a_false_lemma(monkeypatch):
    from serq.verify.sym import numeral
    real = V.lemmas

    def wrong(p):
        return [V.Lemma("budget", "tokens <= 4", lambda v: v("tokens") <= numeral(4),
                        (("tokens", V.R.StepVar("Ntok", True)),)) if lm.key == "budget" else lm
                for lm in real(p)]

    monkeypatch.setattr(V, "lemmas", wrong)
    with pytest.raises(AssertionError):
        _symbolic_check(program("  claim budget: every iteration of vllm (tokens <= 8);"), 1, 8)


def _sglang_with(claims: str, tmp_path) -> str:
    with open(os.path.join(ROOT, "examples", "engines", "sglang.sq"), encoding="utf-8") as fh:
        text = fh.read()
    i = text.rstrip().rfind("}")
    path = os.path.join(tmp_path, "sglang_claims.sq")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text[:i] + claims + "}\n")
    return path


def test_a_claim_over_a_register_is_proved_as_an_invariant_of_the_registers(tmp_path):
    """SGLang's admission register `new_token_ratio` (issue 46: every bound on it was unknown after
    60 s): a claim that reads only registers holds at every iteration when their initial values satisfy
    it and each `set` of the schedule keeps it, whatever else the set reads. `ratio >= min_ratio` is
    not kept: a preemption sets the ratio to 20 / max_new, below it, and a run with few KV slots
    shows it; the proved ones hold on those runs."""
    path = _sglang_with("""
  claim lo: every iteration of sglang (sglang.ratio >= 0.005);
  claim hi: every iteration of sglang (sglang.ratio <= 1 && sglang.ratio > 0);
  claim floor_ratio: every iteration of sglang (sglang.ratio >= min_ratio);
""", tmp_path)
    res = verify(api.load(path), 2, 2, timeout=20)
    for name in ("lo", "hi"):
        v = res.claims[name]
        assert (v.verdict, v.by) == ("proved", "induction") and v.every_sessions, (name, v.reason)
        assert v.invariant[0].startswith(V.REGISTERS)
    v = res.claims["floor_ratio"]
    # within the bound no preemption happens (200000 slots): the paths may prove it, induction does not
    assert v.by != "induction"
    assert "`set ratio` may not keep it" in V.prove(convert(api.load(path)), 2, lambda: 20.0)
    # few slots: requests preempt one another, and the ratio drops to 20 / 2048
    prog = api.load(path, {"slots": 6000, "rate": 20})
    failed = 0
    for seed in (1, 2):
        rep = api.run(prog, api.I.Settings(horizon=30, seed=seed))
        assert rep["claims"]["lo"]["status"] == "held" and rep["claims"]["hi"]["status"] == "held"
        failed += rep["claims"]["floor_ratio"]["status"] == "failed"
    assert failed


def test_a_set_that_breaks_a_register_claim_in_a_branch_is_found():
    """Each set is read whatever its branch's condition: one that can break the claim leaves it to
    the paths, and with that branch never taken the claim still is not proved so (sound, not
    complete)."""
    base = """fn main() {
  device gpu { kv cap 64; }
  engine llm on gpu {
    reqs cap 4;
    tokens cap 8;
    state r = 1;
    request (p, o) { prefill (p) growing kv; decode (o) growing kv; }
    schedule {
      advance running;
      admit waiting taking reqs (1), kv (1);
      SET
    }
    execute (1);
  }
  pool kv on gpu { preempt lifo; }
  pool reqs on llm { queue fifo; }
  workload { arrive batch(2); turn { Size p = 1 + ~det(3); Size o = 1 + ~det(3); } }
  server { llm (p, o); }
  claim pos: every iteration of llm (llm.r >= 1);
}
"""
    def verdict(st):
        prog = api.load_text(base.replace("SET", st), "r.sq")
        return verify(prog, 2, 2, timeout=10).claims["pos"]
    v = verdict("set r = r + batch.tokens;")
    assert (v.verdict, v.by) == ("proved", "induction")
    v = verdict("branch (batch.tokens > 1000) { set r = 0; }")
    assert v.verdict != "proved" or v.by != "induction"
    v = verdict("set r = max(1, r - batch.prefilled);")
    assert (v.verdict, v.by) == ("proved", "induction")
    v = verdict("set r = r - batch.prefilled;")
    assert v.verdict == "counterexample"
