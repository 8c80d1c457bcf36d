"""The interpreter's expressions generated as Python source (serq/interp/compile.py, _Source) against
the closures they replace: on random trees of every operator and function, over values that include
0, -0, the infinities and NaN, both give the same float (NaN for NaN) or the same diagnostic."""
from __future__ import annotations

import math
from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from serq.interp.compile import Compiler, Ctx, RunError
from serq.ir import model as I

VALUES = [0.0, -0.0, 1.0, 2.5, -3.0, 7.0, math.inf, -math.inf, math.nan, 1e308, 0.1]
BIN = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||"]
FNS = {"min": (1, 3), "max": (1, 3), "sum": (1, 3), "floor": (1, 1), "ceil": (1, 1), "round": (1, 1),
       "abs": (1, 1), "sqrt": (1, 1), "log": (1, 1), "pow": (2, 2), "reusable": (2, 2)}


def leaves():
    return st.one_of(
        st.sampled_from([v for v in VALUES if v == v]).map(lambda v: I.Num(v=v)),
        st.just(I.Inf()),
        st.sampled_from(["a", "b", "c", "unset"]).map(lambda n: I.Attr(name=n)),
        st.sampled_from(["now", "present", "gone"]).map(lambda n: I.Ctx(name=n)))


def extend(kids):
    fns = st.sampled_from(sorted(FNS)).flatmap(
        lambda f: st.lists(kids, min_size=FNS[f][0], max_size=FNS[f][1]).map(lambda a: I.Fn(name=f, args=a)))
    return st.one_of(
        st.builds(lambda op, l, r: I.Bin(op=op, l=l, r=r), st.sampled_from(BIN), kids, kids),
        st.builds(lambda op, e: I.Un(op=op, e=e), st.sampled_from(["-", "!"]), kids),
        st.builds(lambda c, a, b: I.If(c=c, a=a, b=b), kids, kids, kids),
        fns)


EXPRS = st.recursive(leaves(), extend, max_leaves=24)


def outcome(f, c):
    try:
        v = f(c)
    except RunError as e:
        return ("error", e.code, str(e))
    return ("nan",) if v != v else ("value", v, math.copysign(1.0, v) if v == 0 else None)


@settings(max_examples=400, deadline=None)
@given(EXPRS, st.sampled_from(VALUES), st.sampled_from(VALUES), st.sampled_from(VALUES), st.booleans())
def test_generated_source_computes_what_the_closures_do(e, a, b, cv, deep):
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=4.0)
    comp = Compiler(sim)
    if deep:  # nested past the source's depth: closures, the same results
        for _ in range(45):
            e = I.Bin(op="+", l=e, r=I.Num(v=0.0))
    c = Ctx(a={"a": a, "b": b, "c": cv}, x={"present": 2.0})
    fast, slow = comp.expr(e), comp._closure(e)
    assert outcome(fast, c) == outcome(slow, c)


def test_an_expression_is_one_generated_function():
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=0.0)
    e = I.Bin(op="*", l=I.Attr(name="a"), r=I.Bin(op="+", l=I.Num(v=2.0), r=I.Attr(name="b")))
    f = Compiler(sim).expr(e)
    assert f.__code__.co_filename == "<serq expression>"
    assert f(Ctx(a={"a": 3.0, "b": 1.0})) == 9.0
