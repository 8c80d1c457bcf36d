"""Lowering: each sugar of the reference written out exactly as its tables say. A program that
uses a sugar links to the same IR (positions aside) as the program written without it."""
from __future__ import annotations

import os

import pytest

from serq import api
from serq.diagnostics import SerqError
from serq.ir import model as I
from serq.lang.lower.inputs import UsageError

from helpers import strip_at

HERE = os.path.dirname(__file__)
ROOT = os.path.join(HERE, "..")


def prog(body: str, head: str = "", **kw):
    return api.load_text(head + "fn main() {\n" + body + "\n}\n", "t.sq", **kw)


def same(a: str, b: str, head_a: str = "", head_b: str = ""):
    assert strip_at(prog(a, head_a)) == strip_at(prog(b, head_b))


BASE = """
  stage svc : fifo;
  pool kv { cap 100; block 4; }
  workload { arrive poisson(1); turn { Size n = 1 + floor(~uniform(0, 50)); Size o = 2; } }
"""


def test_vllm_example_lowers_as_the_tables_say():
    p = api.load(os.path.join(ROOT, "examples", "multi-turn", "vllm.sq"), {"chunk_cap": 512})
    (st,) = [s for s in p.stages if s.name == "vllm"]
    k = st.kind
    assert k.k == "step"
    assert k.budget == I.Num(v=2048, at=k.budget.at)                           # tokens cap B
    # each at most (threshold): running.count + waiting.count > 1 ? chunk_cap : inf, inf written 0
    c = k.chunk
    assert c.k == "if" and c.a.v == 512 and c.b.k == "num" and c.b.v == 0
    assert c.c.l.l.name == "Nres" and c.c.l.r.name == "Queued"
    assert k.serve == I.By(keys=[]) and k.iteration is None                    # vLLM's procedure
    cost_vars = {x.name for x in _nodes(k.cost) if x.k == "step"}
    assert cost_vars == {"Kvb", "Kvp", "Ntok"} and not any(x.k == "fn" and x.name not in ("max", "min")
                                                           for x in _nodes(k.cost))  # hbm, compute written out
    pools = {x.name: x for x in p.pools}
    assert pools["kv"].memory == "vllm" and pools["kv"].admit_via is None and pools["kv"].block.v == 16
    assert pools["kv"].preempt.k == "by" and pools["kv"].preempt.requeue == "head"   # preempt lifo
    assert strip_at_expr(pools["kv"].preempt.keys[0]) == {"k": "un", "op": "-", "e": {"k": "ctx", "name": "admission"}}
    assert pools["reqs"].admit_via == "vllm" and pools["reqs"].cap.v == 256
    # the request lowers to the hold at the call
    hold = [s for s in p.server if s.k == "hold"][0]
    assert [hp.pool.name for hp in hold.pools] == ["reqs", "kv"]
    assert hold.pools[0].units.k == "cost" and hold.pools[0].units.on == ["reqs"]
    kv_units = hold.pools[1].units
    assert kv_units.on == ["kv"] and any(x.k == "obs" and x.fn == "budget_left" for x in _nodes(kv_units))
    assert any(x.k == "obs" and x.fn == "cachedin" for x in _nodes(kv_units))   # at admission substituted
    assert hold.pools[1].reserve.on == ["kv"]
    assert hold.body[0].k == "set" and hold.body[0].name == "known"               # the body sees the binding
    runs = [s for s in hold.body if s.k == "run"]
    assert [(r.mode, r.growing.name, r.stages[0].name) for r in runs] == [("prefill", "kv", "vllm"),
                                                                         ("decode", "kv", "vllm")]
    assert hold.cache.on == ["reqs", "kv"]
    assert p.workload.hidden == ["o"]


def _nodes(e):
    from serq.link.rules import expr_nodes
    return list(expr_nodes(e))


def strip_at_expr(e):
    import json
    def go(d):
        if isinstance(d, dict):
            return {k: go(v) for k, v in d.items() if k != "at"}
        return d
    return go(json.loads(e.model_dump_json(exclude_none=True)))


def test_branch_with_is_a_bernoulli_guard():
    same(BASE + "server { branch with (0.25) { run svc (cost(svc, 1)); } else { run svc (cost(svc, 2)); } }",
         BASE + "server { branch (~bernoulli(0.25)) { run svc (cost(svc, 1)); } else { run svc (cost(svc, 2)); } }")


def test_at_admission_is_substituted_and_set_at_the_body_top():
    same(BASE + """server {
      set kept = n;
      hold kv (cost(kv, min(known, 10 + free(kv)))) reserve (cost(kv, known)) at admission (known = max(kept, computed + 1)) {
        run svc (cost(svc, known));
      } cache (cost(kv, n));
    }""", BASE + """server {
      set kept = n;
      hold kv (cost(kv, min(max(kept, computed + 1), 10 + free(kv)))) reserve (cost(kv, max(kept, computed + 1))) {
        set known = max(kept, computed + 1);
        run svc (cost(svc, known));
      } cache (cost(kv, n));
    }""")


def test_defs_and_aggregates_are_written_out():
    same("pool q[3] { cap 4; }\n" + BASE + "gauge g = max j in 3 (used(q[j])) + sum j in 2 (free(q[j]));\n"
         "server { twice(n); }",
         "pool q[3] { cap 4; }\n" + BASE + "gauge g = max(used(q[0]), used(q[1]), used(q[2])) + sum(free(q[0]), free(q[1]));\n"
         "server { run svc (cost(svc, double(n))); run svc (cost(svc, double(n))); }",
         head_a="def double(x) { 2 * x }\ndef twice(x) { run svc (cost(svc, double(x))); run svc (cost(svc, double(x))); }\n",
         head_b="def double(x) { 2 * x }\n")


def test_aggregate_terms_are_bounded():
    with pytest.raises(SerqError) as e:
        prog("pool q[5000] { cap 1; }\n" + BASE + "gauge g = sum j in 5000 (used(q[j]));\nserver { }")
    assert e.value.code == "L035"


def test_inputs_resolve_to_the_program_written_with_them():
    head = 'use "std/args";\n'
    body = "let r = args.number(\"rate\", 1);\n stage s : fifo;\n workload { arrive poisson(r); turn { Cost w = cost(s, 1); } }\n server { run s (w); }"
    lit = "let r = 3;\n stage s : fifo;\n workload { arrive poisson(r); turn { Cost w = cost(s, 1); } }\n server { run s (w); }"
    a = strip_at(prog(body, head, inputs={"rate": 3}))
    b = strip_at(prog(lit))
    a.pop("settings"), b.pop("settings")
    assert a == b
    assert prog(body, head).settings.inputs == {"rate": 1.0}
    assert prog(body, head, inputs={"rate": 3}).settings.inputs == {"rate": 3.0}
    with pytest.raises(UsageError):
        prog(body, head, inputs={"rat": 3})


def test_an_input_may_not_change_an_array_size():
    body = 'let m = args.number("m", 2);\n pool q[m] { cap 1; }\n' + BASE + "server { }"
    prog(body, 'use "std/args";\n')                               # the default is fine
    prog(body, 'use "std/args";\n', inputs={"m": 2})              # so is the same value
    with pytest.raises(SerqError) as e:
        prog(body, 'use "std/args";\n', inputs={"m": 3})
    assert e.value.code == "L014"


def test_workload_tool_supplies_a_delay_stage():
    p = prog("stage svc : fifo;\n workload { arrive poisson(1); session { turn; tool (2); turn; } }\n server { run svc (cost(svc, 1)); }")
    tool = p.stages[-1]
    assert tool.name == "tool" and tool.kind.k == "ps" and tool.kind.phi.k == "ctx" and tool.kind.phi.name == "present"
    run = p.workload.session[1]
    assert run.k == "run" and run.stages[0].name == "tool" and run.work.on == ["tool"]


def test_transfer_and_tool_forms():
    same("stage link : ps(10);\n stage tool[2] : fifo;\n pool P { cap 10; } pool Q { cap 10; }\n"
         "workload { arrive poisson(1); turn { set j = 1; } }\n"
         "server { hold P (cost(P, 1)), Q (cost(Q, 1)) { transfer (5) from P to Q (1); } tool[j] 3; tool on tool[0] (4); }",
         "stage link : ps(10);\n stage tool[2] : fifo;\n pool P { cap 10; } pool Q { cap 10; }\n"
         "workload { arrive poisson(1); turn { set j = 1; } }\n"
         "server { hold P (cost(P, 1)), Q (cost(Q, 1)) { run link (cost(link, 5)); load Q (cost(Q, 1)); release P; }"
         " run tool[j] (cost(tool, 3)); run tool[0] (cost(tool, 4)); }")


ENGINE = """
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 8;
    tokens cap 64;
    state mode = 0;
    schedule { %s }
    execute (1);
  }
  pool kv on gpu { block 4; preempt lifo; }
  pool reqs on llm { queue fifo; }
  workload { arrive poisson(1); turn { Size n = 10; } }
  server { hold reqs (cost(reqs, 1)), kv (cost(kv, n)) { run llm prefill (cost(llm, n)) growing kv; } }
"""


def step(schedule: str, head: str = ""):
    p = prog(ENGINE % schedule, head)
    return [s for s in p.stages if s.name == "llm"][0].kind


def test_schedule_forms():
    k = step("advance running; admit waiting while (running.preempted == 0);")
    assert k.serve == I.By(keys=[]) and k.iteration is None and k.chunk.v == 0
    k = step("advance running decode first; admit waiting while (running.preempted == 0);")
    key = k.serve.keys[0]
    assert key.k == "if" and key.c.name == "decoding" and (key.a.v, key.b.v) == (0, 1)
    k = step("advance running only (ph()); admit waiting only (ph()) while (running.preempted == 0);",
             "def ph() { running.decoding > 0 ? decoding : !decoding }\n")
    assert [x.k for x in k.iteration] == ["serve", "admit"] and k.iteration[0].only is not None
    k = step("exclusive prefill; admit waiting while (running.preempted == 0);")
    assert k.serve.k == "exclusive_prefill" and k.iteration is None
    k = step("branch (batch.tokens == 0) { advance running; } else { admit waiting; } set mode = 1;")
    assert [x.k for x in k.iteration] == ["branch", "set"] and k.registers[0].name == "mode"
    k = step("let t = running.count > 1 ? 16 : inf; advance running each at most (t); "
             "admit waiting while (running.preempted == 0) each at most (t);")
    assert k.chunk.k == "if" and k.chunk.b.v == 0


def test_engine_family_on_device_family():
    p = prog("""
      device gpu[2] { kv cap 100; }
      engine e[2] on gpu { reqs cap 4; tokens cap 32; schedule { advance running; admit waiting while (running.preempted == 0); } execute (1); }
      pool kv on gpu { block 4; }
      pool reqs on e { }
      workload { arrive poisson(1); turn { Size n = 5; set i = 1; } }
      server { hold reqs[i] (cost(reqs, 1)), kv[i] (cost(kv, n)) { run e[i] prefill (cost(e, n)) growing kv[i]; } }
    """)
    pools = {x.name: x for x in p.pools}
    assert pools["kv"].count == 2 and pools["kv"].memory == "e"
    assert pools["reqs"].count == 2 and pools["reqs"].admit_via == "e"
    assert [s.count for s in p.stages] == [2]


def test_queues_lower_to_named_pools_and_stages():
    p = api.load(os.path.join(ROOT, "examples", "pd-disaggregation", "llmd_nixl_pull.sq"))
    assert [(s.name, s.count, s.kind.k) for s in p.stages] == [
        ("P", 2, "step"), ("P.nic", 2, "ps"), ("D", 2, "step"), ("D.nic", 2, "ps"), ("D.nic.latency", 2, "ps")]
    assert [(x.name, x.count, x.admit_via, x.memory) for x in p.pools] == [
        ("P.reqs", 2, "P", None), ("P.kv", 2, None, "P"), ("D.reqs", 2, "D", None), ("D.kv", 2, None, "D")]
    assert p.share == "maxmin"
    kinds = [s.k for s in p.server]
    assert kinds == ["choose", "choose", "hold", "hold"]
    dec = p.server[3]
    body = [(s.k, getattr(s, "name", None)) for s in dec.body]
    # the read: the latency wait, one run over both NICs, the load, the release; mark to set
    assert body == [("run", None), ("run", None), ("load", None), ("release", None), ("set", "D.read_done"),
                    ("run", None)]
    assert [t.name for t in dec.body[1].stages] == ["P.nic", "D.nic"]
    assert dec.body[3].pool.name == "P.kv"
    pre = p.server[2]
    assert pre.lease.pool.name == "P.kv" and pre.body[0].name == "P.c"   # the entry's set is the queue's


def test_mark_in_a_request_is_a_set_of_the_engine():
    p = prog("""
      device gpu { kv cap 100; }
      engine e on gpu { reqs cap 4; tokens cap 32;
        request (n) { prefill (n); mark first; decode (n); }
        schedule { advance running; admit waiting while (running.preempted == 0); } execute (1); }
      pool reqs on e { }
      workload { arrive poisson(1); turn { Size n = 5; } }
      server { e (n); observe t = e.first; }
    """)
    assert [s.k for s in p.server] == ["run", "set", "run", "observe"]
    assert p.server[1].name == "e.first" and p.server[1].e.k == "ctx"


def test_declaration_order_of_independent_items_does_not_change_links():
    a = prog("stage a : fifo; stage b : ps(1);\n" + "workload { arrive poisson(1); } server { run a (cost(a, 1)); run b (cost(b, 1)); }")
    assert [s.name for s in a.stages] == ["a", "b"]


def test_sugar_inside_a_request_is_lowered_too():
    p = prog("""
      device gpu { kv cap 100; }
      engine e on gpu { reqs cap 4; tokens cap 32;
        request (n) { branch with (0.5) { prefill (half(n)); } else { prefill (n); } decode (sum j in 2 (j + n)); }
        schedule { advance running; admit waiting while (running.preempted == 0); } execute (1); }
      pool reqs on e { }
      workload { arrive poisson(1); turn { Size n = 5; } }
      server { e (n); }
    """, "def half(x) { x / 2 }\n")
    br, dec = p.server
    assert br.k == "branch" and br.cond.k == "draw" and br.cond.dist == "bernoulli"
    assert br.then[0].work.e.k == "bin" and br.then[0].work.e.op == "/"
    assert dec.work.e.k == "fn" and dec.work.e.name == "sum"
