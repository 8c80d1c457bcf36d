"""The interpreter against the reference kernel (serq/ref/) on generated fragment programs and
workloads (tests/fragment_programs.py): every request's observations (first and last token,
preemptions, the hit at first admission, with their times) and every claim's outcome must agree.

SERQ_FUZZ_CASES=N runs N cases instead of the suite's 300 (`make fuzz`); SERQ_FUZZ_SEED=S draws
them from seed S instead of the suite's fixed sequence."""
from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, seed, settings

from serq import api, ref
from serq.ir.model import Settings
from fragment_programs import Case, cases, write

CASES = int(os.environ.get("SERQ_FUZZ_CASES", "300"))
SEED = os.environ.get("SERQ_FUZZ_SEED")
HORIZON = 3000


def interpreter(prog, c: Case):
    s = Settings(horizon=float(HORIZON), arrivals=c.n if c.arrive == "renewal" else None)
    try:
        rep = api.run(prog, s)
    except api.SerqError as e:
        return ("error", e.code)
    sim = rep.pop("_sim")
    obs = sorted((name, v, t, serial, turn) for name, ser in sim.obs.items()
                 for (t, serial, turn), v in zip(ser.rows, ser.v))
    claims = {k: (v["status"], v["at"], v["session"]) for k, v in rep["claims"].items()}
    return obs, claims


def kernel(prog, c: Case, folder):
    p = ref.convert(prog)
    trace = ref.read_trace(os.path.join(folder, "trace.csv"))
    try:
        res = ref.evaluate(p, ref.workload(p, c.n, trace=trace), horizon=HORIZON)
    except ref.exec.KernelError as e:
        return ("error", e.code)
    if c.arrive == "renewal" and res.live:
        return ("error", "R032")  # --arrivals N: the interpreter says the sessions did not drain
    obs = sorted((name, float(v), float(t), sid, turn) for name, v, t, sid, turn in res.observations)
    claims = {k: (o.status, None if o.at is None else float(o.at), o.session) for k, o in res.claims.items()}
    return obs, claims


def differ(c: Case):
    """None when the two agree on the case, else what differs first."""
    with tempfile.TemporaryDirectory(prefix="serq-diff-") as folder:
        prog = api.load(write(c, folder))
        a, b = interpreter(prog, c), kernel(prog, c, folder)
    if a == b:
        return None
    if a[0] == "error" or b[0] == "error":
        return {"interpreter": a if a[0] == "error" else "ran", "kernel": b if b[0] == "error" else "ran"}
    (oa, ca), (ob, cb) = a, b
    for x, y in zip(oa, ob):
        if x != y:
            return {"interpreter": x, "kernel": y}
    if len(oa) != len(ob):
        return {"observations": (len(oa), len(ob))}
    return {k: (ca[k], cb[k]) for k in ca if ca[k] != cb[k]}


@settings(max_examples=CASES, deadline=None, derandomize=SEED is None, database=None,
          suppress_health_check=list(HealthCheck))
@seed(int(SEED or 0))
@given(cases())
def test_the_interpreter_and_the_kernel_agree(c):
    d = differ(c)
    assert d is None, f"{d}\n{c}"


# Disagreements the generator found, kept as regressions (each was the interpreter's; docs/lean.md)
FOUND = [
    # the claim `early` witnessed at 5, then session 2 fails its `given`: out of scope, and the
    # interpreter's report kept the witness's time as the claim's `at`
    Case(bs=0, blocks=6, seqs=2, budget=2, each="none", cap=1, granule=0, order="", schedule="vllm", lifo=False,
         prefix=False, chunked=False, reserve=False, cost="1", arrive="renewal", gap=2,
         sessions=(((1, 4, 0),), ((2, 1, 0),), ((1, 1, 0),))),
    # `admit waiting while (batch.tokens < 8)`: the interpreter's guard read 0 until the batch was formed
    Case(bs=4, blocks=12, seqs=3, budget=16, each="threshold", cap=8, granule=0, order="", schedule="half",
         lifo=True, prefix=True, chunked=True, reserve=True, cost="1", arrive="batch", gap=2,
         sessions=(((30, 15, 0), (20, 10, 3)), ((25, 12, 0),), ((40, 8, 0), (10, 5, 2), (10, 5, 1)),
                   ((12, 20, 0),))),
    # exclusive prefill: a decode preempted earlier in the iteration was still given its turn, grew
    # its freed allocation (a leak) and preempted the request that had preempted it
    Case(bs=2, blocks=2, seqs=2, budget=2, each="none", cap=1, granule=0, order="", schedule="exclusive",
         lifo=True, prefix=False, chunked=False, reserve=False, cost="1", arrive="batch", gap=1,
         sessions=(((1, 1, 0),), ((1, 3, 0),), ((1, 3, 0),))),
]


def test_found_disagreements_stay_fixed():
    for c in FOUND:
        assert differ(c) is None, c
    with tempfile.TemporaryDirectory(prefix="serq-diff-") as folder:
        _, claims = interpreter(api.load(write(FOUND[0], folder)), FOUND[0])
    assert claims["early"] == ("out_of_scope", None, 2)
