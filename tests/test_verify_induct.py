"""The machines serq/verify/induct.py proves claims over (docs/verify.md, *Every state*) must include
every machine at which a real path starts an iteration. Checked on real paths: at each iteration's
start on random workloads, the builder, given the shape and the values read off the real machine,
builds a machine whose ranges those values satisfy and whose planned iteration is the real one
(batch, claim values, counts). And the programs outside its scope are refused."""
from __future__ import annotations

import glob
import os
import random

import pytest
import z3

from serq import api
from serq.ref import exec as X
from serq.ref.fragment import convert
from serq.verify import induct as I
from serq.verify import search as S
from serq.verify.sym import concrete

PAPERS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "examples", "papers", "*.sq")))

# renewal arrivals and a key reading the serial: the sessions present are any subset
SERIAL = """fn main() {
  device gpu { kv cap 24; }
  engine llm on gpu {
    reqs cap 2;
    tokens cap 6;
    granule 2;
    request (p, o) { prefill (p); decode (o); }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0) taking reqs (1), kv (p + o);
    }
    execute (1);
  }
  pool kv on gpu { preempt none; }
  pool reqs on llm { queue by (o, 1 - serial % 2); }
  workload { arrive renewal(2); init { Size p = ~det(3); Size o = ~det(1); } }
  server { set s = now; llm (p, o); observe done = now - s; }
  claim fits: every iteration of llm (used(kv) <= 24 && tokens % 2 == 0 || prefilled < 6);
}
"""


def _program(tmp_path, src):
    path = os.path.join(tmp_path, "p.sq")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(src)
    return path


def _plan(p, m, names):
    """What an iteration planned from m: its batch by session (named by `names`), its counts and
    its claim values."""
    m2 = X.start_iteration(p, m)
    if len(m2.path) == len(m.path):
        return None
    reqs = {r.rid: r.sid for r in m2.eng.reqs}
    batch = tuple((names[reqs[rid]], concrete(n)) for rid, n in m2.eng.batch)
    vars_ = tuple((k, concrete(v)) for k, v in m2.eng.vars)
    return batch, vars_, tuple(bool(v) if v is not None else None for v in X.claim_values(p, m2.path[-1][1]))


def _shape_and_model(p, h, m, wl):
    """The shape of a real machine at an iteration's start, and the values of the builder's unknowns."""
    i = h.pools[0].pool
    queued = {q.sid for q in m.pools[i].queue}
    at_run = {s.sid: s.at_run for s in m.sess if s.alive and s.at_run is not None}
    present = sorted(queued | set(at_run))
    if not present:
        return None, None, None
    by_serial = I._by_serial(p)
    names = {sid: (sid if by_serial else j) for j, sid in enumerate(present)}
    status, model = [], {}
    for sid in present:
        k = names[sid]
        for d, v in enumerate(wl.sessions[sid].draws):
            model[f"d{k}_{d}"] = v
        if p.arrive == "poisson":
            model[f"a{k}"] = wl.sessions[sid].arrival
        if sid in queued:
            status.append(-1)
            continue
        s = m.sess[sid]
        top = s.cont[-1]
        j = len(h.body) - len(top.stmts) - 1
        env = X.sess_env(m, sid)
        status.append(sum(1 for st in h.body[:j] if X.eval_expr(p, m, env, st.work) > 0))
        model[f"L{k}"] = next(r.left for r in m.eng.reqs if r.rid == s.at_run)
    order = tuple(names[r.sid] for r in sorted(m.eng.reqs, key=lambda r: m.sess[r.sid].eng_adm))
    model.update(T=m.now, Arr=m.arrived, Srv=m.eng.served_total)
    return I.Shape(tuple(names[s] for s in present), tuple(status), order), model, names


def _walk(p, h, wl):
    """Every iteration start of the workload's path: (machine, shape, model, names)."""
    m = X.initial(p, wl)
    for _ in range(5000):
        m = X.settle(p, m)
        if m.eng.want and not m.eng.busy and (not m.events or m.events[0][0] > m.now):
            sh, model, names = _shape_and_model(p, h, m, wl)
            if sh is not None:
                yield m, sh, model, names
        m, over = X.step(p, m)
        if over:
            return


def _check(p, wl):
    h, why = I.scope(p)
    assert h is not None, why
    seen = 0
    for m, sh, model, names in _walk(p, h, wl):
        real = _plan(p, m, names)
        dom: dict = {}
        inp = S.Inputs(dict(model))
        built = I.build(p, h, sh, inp, dom)
        # the real values are inside the builder's ranges
        subst = [(S.var(n), S.numeral_of(n, v)) for n, v in model.items()]
        for name, c in dom.items():
            assert z3.is_true(z3.simplify(z3.substitute(c, *subst))), (name, c, model)
        assert _plan(p, built, {k: k for k in names.values()}) == real, (sh, model)
        seen += 1
    return seen


def _workloads(p, rng, count):
    for _ in range(count):
        n = rng.randint(1, 3)
        t, sess = 0, []
        for k in range(n):
            if p.arrive == "poisson":
                t += rng.randint(0, 6)
            at = t if p.arrive == "poisson" else ((k + 1) * p.gap if p.arrive == "renewal" else 0)
            sess.append(X.R.SessionIn(at, tuple(rng.randint(0, 3) for _ in range(6)), ()))
        yield X.R.Workload(tuple(sess))


@pytest.mark.parametrize("path", PAPERS, ids=os.path.basename)
def test_every_reachable_start_is_built(path):
    p = convert(api.load(path))
    rng = random.Random(7)
    seen = sum(_check(p, wl) for wl in _workloads(p, rng, 12))
    assert seen > 20


def test_every_reachable_start_is_built_by_serial(tmp_path):
    p = convert(api.load(_program(tmp_path, SERIAL)))
    assert I._by_serial(p)
    rng = random.Random(3)
    assert sum(_check(p, wl) for wl in _workloads(p, rng, 20)) > 20


def test_programs_outside_its_scope_are_refused():
    """The builder's machines are every reachable one only under scope()'s conditions; elsewhere the
    proof over every state is not attempted, and says why."""
    from dataclasses import replace
    from serq.ref import ir as R
    p = convert(api.load(PAPERS[0]))
    assert I.scope(p)[0] is not None
    h = I.scope(p)[0]
    grown = replace(h, body=(replace(h.body[0], growing=0),) + h.body[1:])
    cases = {
        "sessions take several turns": replace(p, session=(R.TurnS(), R.TurnS())),
        "the engine has registers": replace(p, engine=replace(p.engine, registers=(("x", 0),))),
        "the schedule reads admission numbers": replace(p, claims=p.claims + (
            R.Claim("adm", "every", R.Ctx("admission"), None),)),
        "the hold's body is not runs that do not grow": replace(
            p, server=tuple(grown if st is h else st for st in p.server)),
        "the hold takes part in the prefix cache": replace(
            p, server=tuple(replace(h, cache=R.Num(1)) if st is h else st for st in p.server)),
        "the program does not have exactly one hold, at the top of its server": replace(
            p, server=p.server + (h,)),
    }
    for why, q in cases.items():
        assert I.scope(q) == (None, why)


def test_programs_whose_sessions_read_the_machine_are_refused():
    """A run's work or an attribute set before the hold that reads the machine (an observable) would
    take the builder's reading, not the real one: refused."""
    from dataclasses import replace
    from serq.ref import ir as R
    p = convert(api.load(PAPERS[0]))
    h = I.scope(p)[0]
    obs = R.Obs("used", p.pools[0].name)
    work = replace(h, body=(replace(h.body[0], work=R.Bin("+", h.body[0].work, obs)),) + h.body[1:])
    assert I.scope(replace(p, server=tuple(work if st is h else st for st in p.server))) == (
        None, "a run's work reads more than attributes and numbers")
    early = replace(p, server=(R.SetA("q", obs),) + p.server)
    assert I.scope(early) == (None, "a session reads the machine's state before the hold")
    clock = replace(p, server=(R.SetA("q", R.Ctx("now")),) + p.server)
    assert I.scope(clock)[0] is not None   # the clock at arrival is what the builder reads
    outside = replace(p, server=p.server + (h.body[0],))
    assert I.scope(outside) == (None, "a run stands outside the hold")


# -- random programs in its scope: verify's verdicts (every state first) against enumeration ------

def _random_program(rng: random.Random) -> str:
    budget = rng.choice((2, 3, 4, 6, 8))
    seqs = rng.randint(1, 3)
    each = rng.choice(("", "", f" each at most ({rng.randint(1, 4)})"))
    order = rng.choice(("", " decode first", " by (remaining)"))
    granule = rng.choice((0, 0, 2))
    kv = rng.choice((0, 6, 10))
    units = rng.choice(("p + o", "p"))
    taking = "taking reqs (1)" + (f", kv ({units})" if kv else "")
    admit = f"admit waiting while (running.preempted == 0){each} {taking};"
    sched = rng.choice((
        f"advance running{order}{each};\n    {admit}",
        f"advance running{order}{each};\n    admit waiting{each} {taking};",
        f"exclusive prefill{each};\n    {admit}",
        f"advance running only (in_phase()){order}{each};\n    "
        f"admit waiting only (in_phase()) while (running.preempted == 0){each} {taking};",
        f"advance running{order}{each};\n    admit waiting while (batch.tokens < {max(1, budget // 2)}){each} {taking};",
    ))
    queue = rng.choice(("fifo", "by (o, serial)", "by (p)"))
    arrive = rng.choice(("batch(2)", "renewal(1)", "poisson(1)"))
    cost = rng.choice(("1", "1 + batch.decoding"))
    claims = [f"claim work_conserving: every iteration of llm (demand < {budget} || tokens == {budget});",
              f"claim small: every iteration of llm (tokens <= {max(1, budget // 2)});",
              f"claim slots: every iteration of llm (residents <= {seqs});",
              f"claim full: some iteration of llm (residents >= {seqs});",
              "claim mixed: some iteration of llm (decoders > 0 && prefilled > 0);",
              "claim odd given (p % 2 == 1): every iteration of llm (prefilled % 2 == 1 || prefilled == 0);"]
    if kv:
        claims.append(f"claim memory: every iteration of llm (used(kv) <= {kv});")
    if granule:
        claims.append(f"claim tiled given (p % {granule} == 0): every iteration of llm (prefilled % {granule} == 0);")
    return f"""fn main() {{
  def in_phase() {{ running.decoding > 0 ? decoding : !decoding }}
  device gpu {{ {f"kv cap {kv};" if kv else ""} }}
  engine llm on gpu {{
    reqs cap {seqs};
    tokens cap {budget};
    {f"granule {granule};" if granule else ""}
    request (p, o) {{ prefill (p); decode (o); }}
    schedule {{
    {sched}
    }}
    execute ({cost});
  }}
  {"pool kv on gpu { preempt none; }" if kv else ""}
  pool reqs on llm {{ queue {queue}; }}
  workload {{ arrive {arrive}; init {{ Size a = ~det(1); Size b = ~det(1); Size p = 1 + {rng.randint(1, 3)} * a; Size o = b; }} }}
  server {{ llm (p, o); }}
  {chr(10).join("  " + c for c in claims)}
}}
"""


def test_random_programs_in_scope_agree_with_enumeration(tmp_path):
    """Whatever the proof over every state proves, enumeration of the bound's every workload agrees
    (and the verdicts it leaves to the paths too)."""
    from serq.verify import verify
    from test_verify import expected
    rng = random.Random(int(os.environ.get("SERQ_FUZZ_SEED", "11")))
    by_state = 0
    for k in range(int(os.environ.get("SERQ_FUZZ_CASES", "5"))):
        src = _random_program(rng)
        prog = api.load(_program(tmp_path, src))
        assert I.scope(convert(prog))[0] is not None
        res = verify(prog, 2, 1, timeout=120)
        got = {n: v.verdict for n, v in res.claims.items()}
        assert got == expected(res.prog, 2, 1, 2), src
        by_state += sum(v.by == "every state" for v in res.claims.values())
    assert by_state > 0
