"""The kernel's moves as formulas (serq/verify/step.py, docs/verify.md, *The step as a formula*):
the encoding is the kernel's (each of the kernel's moves, on the machines of random paths of
generated programs and of the examples, is related by one of the encoded moves, and the
abstraction's sums are what the claims read), and the lemmas of serq/verify/invariant.py are
inductive over it for every number of sessions; a wrong encoding or a kernel that breaks a guard is
caught.

SERQ_FUZZ_CASES=N runs N generated cases instead of the suite's 12 (`make fuzz`)."""
from __future__ import annotations

import contextlib
import os
import tempfile

import pytest
import z3
from hypothesis import HealthCheck, given, seed, settings

from serq import api, ref
from serq.ref import exec as X
from serq.ref.num import of_decimal
from serq.verify import invariant as V
from serq.verify import step as S
from fragment_programs import cases, write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = int(os.environ.get("SERQ_FUZZ_CASES", "12"))
SEED = os.environ.get("SERQ_FUZZ_SEED")

# the kernel's functions a move is: the abstraction is taken as each is entered and left; a
# preemption and a session's end are one move each (their release and leave together)
MOVED = ("try_admit", "grow_into", "release", "preempt", "finish", "drop_req", "give", "run_stmt",
         "start_iteration", "end_iteration", "run_body", "exclusive")
ATOMIC = ("preempt", "finish")
# the encoded moves a function's boundary is likeliest to close (any is accepted: tried first)
LIKELY = {"try_admit": ("admit",), "grow_into": ("grow0", "grow1", "grow2"), "release": ("release",),
          "preempt": ("preempt",), "finish": ("preempt",), "drop_req": ("drop",), "give": ("give",),
          "run_stmt": ("run",), "start_iteration": ("read",), "end_iteration": ("end",),
          "run_body": ("start", "replan"), "exclusive": ("start",)}


@contextlib.contextmanager
def recording(p, sh, snaps: list, monkeypatch):
    depth = [0]

    def wrap(name, f):
        def g(*args, **kw):
            m = args[0] if name == "drop_req" else args[1]
            inner = depth[0] > 0
            if not inner:
                snaps.append((f"{name}>", S.abstract(p, sh, m)))
            if name in ATOMIC:
                depth[0] += 1
            try:
                out = f(*args, **kw)
            finally:
                if name in ATOMIC:
                    depth[0] -= 1
            if not inner:
                snaps.append((f"<{name}", S.abstract(p, sh, out[0] if isinstance(out, tuple) else out)))
            return out
        return g

    with monkeypatch.context() as mp:
        for name in MOVED:
            mp.setattr(X, name, wrap(name, getattr(X, name)))
        yield


def run_recorded(p, wl, monkeypatch, horizon=None, fuel=400_000):
    sh = S.shape(p)
    snaps: list = []
    with recording(p, sh, snaps, monkeypatch):
        try:
            run = X.run(p, wl, fuel=fuel, horizon=horizon)
        except X.KernelError:
            run = None
    return sh, snaps, run


def assert_explained(p, sh, snaps, what):
    for k in range(1, len(snaps)):
        (w1, a), (w2, b) = snaps[k - 1], snaps[k]
        if a == b:
            continue
        got = S.explain(p, sh, a, b, LIKELY.get(w2.strip("<>"), ()))
        assert got is not None, (what, k, w1, w2, a, b)


def assert_readings(p, sh, run, what):
    """The abstraction's sums are what a claim reads at each iteration (the lemmas' quantities)."""
    for _, m in run.machine.path:
        slots, G = S.abstract(p, sh, m)
        ids = sorted(slots)
        st = S._concrete(sh, slots, G, ids[0] if ids else None, ids[1] if len(ids) > 1 else None)
        v = S.reading(sh, p, st)
        env = X.claim_env(m)
        for lm in V.lemmas(p):
            for name, e in lm.quantities:
                want = X.eval_expr(p, m, env, e)
                got = z3.simplify(v(name))
                assert got.as_long() == want, (what, name, got, want)


@settings(max_examples=CASES, deadline=None, derandomize=SEED is None, database=None,
          suppress_health_check=list(HealthCheck))
@seed(int(SEED or 0))
@given(cases())
def test_every_move_of_the_kernel_is_an_encoded_move(c):
    mp = pytest.MonkeyPatch()
    try:
        with tempfile.TemporaryDirectory(prefix="serq-step-") as folder:
            p = ref.convert(api.load(write(c, folder)))
            trace = ref.read_trace(os.path.join(folder, "trace.csv"))
            arrivals = [of_decimal(t) for t in c.times] if c.arrive == "poisson" else None
            wl = ref.workload(p, c.n, trace=trace, arrivals=arrivals)
            sh, snaps, run = run_recorded(p, wl, mp, horizon=of_decimal(c.horizon))
    finally:
        mp.undo()
    assert snaps
    assert_explained(p, sh, snaps, c)
    if run is not None:
        assert_readings(p, sh, run, c)
    checked = S.check(p)
    assert checked.failed == [], (checked.failed, c)
    assert all(v is None for v in checked.lemmas.values()), (checked.lemmas, c)


def _examples():
    for folder in ("oracle", "multi-turn", "engines", "single-turn", "papers", "subagent"):
        d = os.path.join(ROOT, "examples", folder)
        for f in sorted(os.listdir(d)):
            if f.endswith(".sq"):
                try:
                    yield f, ref.convert(api.load(os.path.join(d, f)))
                except api.SerqError:
                    continue


@pytest.mark.campaign
def test_the_examples_moves_are_encoded_moves_and_their_lemmas_inductive(monkeypatch):
    ran = 0
    for f, p in _examples():
        checked = S.check(p)
        assert checked.failed == [], (f, checked.failed)
        assert all(v is None for v in checked.lemmas.values()), (f, checked.lemmas)
        trace = None
        if p.trace:
            from serq.leangen import trace_rows
            trace = trace_rows(api.load(os.path.join(ROOT, "examples", "oracle", f)))
        for n, d in ((3, 7),):
            arrivals = list(range(n)) if p.arrive == "poisson" else None
            wl = ref.workload(p, n, trace=trace, arrivals=arrivals, draws=[[d + 3 * k] * 12 for k in range(n)])
            sh, snaps, run = run_recorded(p, wl, monkeypatch, horizon=100_000, fuel=20_000)
            assert_explained(p, sh, snaps, (f, n))
            if run is not None:
                assert_readings(p, sh, run, (f, n))
            ran += 1
    assert ran >= 15


def _vllm():
    return ref.convert(api.load(os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")))


def test_an_encoding_without_the_room_check_does_not_keep_the_cap(monkeypatch):
    """The cap is kept because an admission finds room first: drop that from the encoded move and
    the induction fails on it, and the cap lemma goes unproved."""
    p = _vllm()
    real = S.mv_admit

    def careless(sh, S_, T_):
        f = real(sh, S_, T_)
        return [x for x in f if "<=" not in str(x) or "used" not in str(x) or "pos" in str(x)] + \
            [T_.G[f"used{i}"] >= S_.G[f"used{i}"] for i in range(len(sh.pools))]
    monkeypatch.setitem(S.MOVES, "admit", careless)
    checked = S.check(p)
    assert any(name == "the move `admit`" for name, _ in checked.failed), checked.failed


def test_a_lemma_the_step_does_not_keep_is_not_implied(monkeypatch):
    p = _vllm()
    real = V.lemmas

    def more(p_):
        return real(p_) + [V.Lemma("tight", "tokens <= 2047", lambda v: v("tokens") <= 2047,
                                   (("tokens", ref.ir.StepVar("Ntok", True)),))]
    monkeypatch.setattr(V, "lemmas", more)
    checked = S.check(p)
    assert checked.failed == []
    assert checked.lemmas["tight"] is not None
    assert all(v is None for k, v in checked.lemmas.items() if k != "tight")


def test_a_kernel_that_admits_without_room_makes_a_move_no_formula_allows(monkeypatch):
    """The encoding is tested against the kernel: a kernel whose admission skips the room check
    takes a move (past the cap of 65,536 tokens) that no encoded move relates."""
    p = _vllm()
    wl = ref.workload(p, 3, arrivals=[0, 0, 0], draws=[[30_000] * 12] * 3)
    sh, snaps, _ = run_recorded(p, wl, monkeypatch, horizon=100_000, fuel=300)
    assert_explained(p, sh, snaps, "the kernel as it is")
    monkeypatch.setattr(X, "room_for", lambda *a: True)
    sh, snaps, _ = run_recorded(p, wl, monkeypatch, horizon=100_000, fuel=300)
    assert max(g["used0"] for _, (_, g) in snaps) > 65_536
    with pytest.raises(AssertionError):
        assert_explained(p, sh, snaps, "no room check")


def test_a_hold_inside_another_or_taking_both_keeps_its_holders_within_the_others():
    """vLLM's hold takes a request slot and KV together: holders(kv) <= holders(reqs) is a lemma, so
    the KV holders are within the slots (proved by induction); a program with a hold on KV alone
    has no such lemma."""
    p = _vllm()
    assert V.covered(p) == [(0, 1), (1, 0)] and [x.name for x in p.pools] == ["kv", "reqs"]  # taken together
    assert "holders(kv) <= holders(reqs)" in [lm.text for lm in V.lemmas(p)]
    assert S.check(p).lemmas["nested:kv:reqs"] is None
    src = open(os.path.join(ROOT, "examples", "multi-turn", "vllm.sq"), encoding="utf-8").read()
    src = src.replace("claim within_memory:", "claim kv_holders: every iteration of vllm (holders(kv) <= max_seqs);\n"
                      "  claim within_memory:")
    with tempfile.TemporaryDirectory(prefix="serq-step-") as folder:
        path = os.path.join(folder, "v.sq")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(src)
        q = ref.convert(api.load(path))
    got = V.prove(q, [c.name for c in q.claims].index("kv_holders"), lambda: 60.0)
    assert isinstance(got, V.Proof) and "holders(kv) <= holders(reqs)" in got.invariant, got


def test_covered_pools_by_nesting():
    from serq.ref import ir as IR
    hp = lambda i: IR.HoldPool(i, IR.Num(1), None, True, True)  # noqa: E731
    run = IR.RunS("prefill", IR.Num(1), None)
    inner = IR.HoldS((hp(0),), None, None, (run,))
    outer = IR.HoldS((hp(1),), None, None, (inner,))
    p = _vllm()
    import dataclasses
    q = dataclasses.replace(p, init=(), turn=(), session=None, server=(outer,))
    assert V.covered(q) == [(0, 1)]
    alone = IR.HoldS((hp(0),), None, None, (run,))
    q = dataclasses.replace(q, server=(outer, alone))
    assert V.covered(q) == []


def test_an_obligation_z3_cannot_decide_proves_nothing(monkeypatch):
    """z3 giving up on a move's obligation is no proof: the lemmas are not used, and verify says
    why (never a traceback)."""
    def gives_up(hyps, goal):
        raise S.Undecided("timeout")
    monkeypatch.setattr(S, "_refute", gives_up)
    p = _vllm()
    checked = S.check(p)
    assert checked.failed and all("could not decide" in why for _, why in checked.failed)
    S._CHECKED.clear()
    got = V.prove(p, 0, lambda: 60.0)
    assert isinstance(got, str) and "does not keep" in got
    S._CHECKED.clear()
