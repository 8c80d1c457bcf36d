"""The parser: every production of the reference's Syntax, every snippet of the reference, spans."""
from __future__ import annotations

import glob
import os

import pytest

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.parse import parse_file, parse_text
from serq.lang.walk import iter_stmts

from data.reference_snippets import SNIPPETS

HERE = os.path.dirname(__file__)
EXAMPLES = sorted([q for q in glob.glob(os.path.join(HERE, "..", "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q])


@pytest.mark.parametrize("section,production,text", SNIPPETS, ids=[f"{i}-{s[0][:30]}" for i, s in enumerate(SNIPPETS)])
def test_reference_snippet_parses(section, production, text):
    if production == "program":
        parse_text(text)
        return
    parse_text(text, fragment=production)
    if production == "items":  # a main body parses wrapped in fn main() { }
        prog = parse_text("fn main() {" + text + "}")
        assert isinstance(prog.items[0], A.Main)


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.relpath(p, HERE) for p in EXAMPLES])
def test_example_parses(path):
    prog = parse_file(path)
    assert any(isinstance(i, A.Main) for i in prog.items)


def test_every_node_keeps_its_span():
    text = "fn main() {\n  stage svc : fifo;\n  server {\n    set x = 1 + y;\n    run svc (cost(svc, x));\n  }\n}\n"
    prog = parse_text(text, "f.sq")
    server = prog.items[0].items[1]
    s, r = server.body
    assert (s.span.line, s.span.col) == (4, 5)
    assert (s.e.span.line, s.e.span.col, s.e.span.end_col) == (4, 13, 18)
    assert (s.e.r.span.line, s.e.r.span.col) == (4, 17)
    assert (r.span.line, r.span.col) == (5, 5)
    assert r.stages[0].span.col == 9


def test_keywords_are_names_where_no_keyword_fits():
    # `tool`, `decode`, `batch`, `link` are ordinary names as stages, verbs and attributes
    text = """fn main() {
      stage tool : delay; stage link : ps(1);
      queue D[2] : decode { serve fifo; decode (prompt) { run (cost(D, prompt)); } }
      workload { arrive batch(3); turn { set decode_len = 2; } }
      server { D[0].decode (decode_len); tool (1); }
    }"""
    parse_text(text)


def test_operator_precedence():
    e = parse_text("a || b && c == d + e * -f", fragment="expr")
    assert isinstance(e, A.Binary) and e.op == "||"
    assert e.r.op == "&&" and e.r.r.op == "==" and e.r.r.r.op == "+" and e.r.r.r.r.op == "*"
    assert isinstance(e.r.r.r.r.r, A.Unary)
    c = parse_text("x > 1 ? a : b ? c : d", fragment="expr")
    assert isinstance(c, A.Cond) and isinstance(c.b, A.Cond)


def test_comments_and_numbers():
    prog = parse_text("// a comment\nfn main() { /* block\ncomment */ let a = 1e-3; let b = .5; let c = 2.; }")
    lets = prog.items[0].items
    assert [x.e.value for x in lets] == [1e-3, 0.5, 2.0]


def test_hold_with_every_clause():
    text = ("hold kv (cost(kv, 1)) reserve (cost(kv, 2)), reqs (cost(reqs, 1)) reuse (cost(kv, reqs, 0)) "
            "at admission (a = 1, b = a + 1) { } cache (cost(kv, reqs, 1)) lease kv (inf);")
    (h,) = parse_text(text, fragment="stmts")
    assert isinstance(h, A.Hold)
    assert len(h.pools) == 2 and h.pools[0].reserve is not None and h.reuse is not None
    assert [b[0] for b in h.bindings] == ["a", "b"] and h.cache is not None and h.lease is not None


def test_schedule_statement_forms():
    body = parse_text("let t = 1; advance running only (decoding) by (remaining, admission) each at most (t); "
                      "admit waiting only (1) while (waiting.admitted < 2) each at most (t) taking reqs (1), kv (2) "
                      "reserve (3) reuse (0); exclusive prefill each at most (4); branch (batch.tokens > 0) "
                      "{ set r = 1; } else { advance running decode first; }", fragment="sstmts")
    lets = [b for b in body if isinstance(b, tuple)]
    adv, adm, exc, br = [b for b in body if not isinstance(b, tuple)]
    assert lets[0][0] == "t"
    assert adv.only is not None and adv.order[0] == "by" and len(adv.order[1]) == 2
    assert adm.taking is not None and len(adm.taking[0]) == 2 and adm.taking[1] is not None
    assert isinstance(exc, A.Exclusive) and isinstance(br, A.SBranch) and br.else_ is not None


def test_workload_and_statement_forms():
    text = """fn main() {
      workload {
        arrive renewal(~uniform(1, 2));
        trace "t.csv" ordered;
        init { Size a = 1; }
        turn { Cost w = cost(s, 1); Cost p = { s: 1, t: 2 }; }
        session { turn; branch with (0.5) { end; } else { loop { turn; } } }
        hidden a, b;
      }
      server {
        while (x) { set x = 0; }
        fork { observe o = now; }
        join;
        choose j in 3 by (queue(s[j]), j);
        drop kv;
        transfer[j] (1) from P to Q (2);
        tool on S[1], T (3);
      }
    }"""
    prog = parse_text(text)
    kinds = {type(s).__name__ for it in prog.items[0].items if isinstance(it, A.Server) for s in iter_stmts(it.body)}
    assert {"While", "Fork", "Join", "Choose", "Drop", "Transfer", "Tool"} <= kinds


@pytest.mark.parametrize("text,line,col", [
    ("fn main() { stage s : fifo }", 1, 28),
    ("fn main() {\n  server { transfer (1); }\n}", 2, 24),
    ("fn main() {\n  server { set x = ; }\n}", 2, 20),
    ("fn main() { let x = 1 $ 2; }", 1, 23),
])
def test_syntax_errors_point_at_the_token(text, line, col):
    with pytest.raises(SerqError) as info:
        parse_text(text, "bad.sq")
    e = info.value
    assert e.code == "P001" and (e.span.line, e.span.col) == (line, col), e.render({"bad.sq": text})
    assert "^" in e.render({"bad.sq": text})
