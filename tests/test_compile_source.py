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


def draws(kids):
    """Draws whose arguments are trees of their own: a constant mean (drawn in place), read ones."""
    return st.one_of(
        st.sampled_from([0.5, 500.0, 0.0, -1.0, math.inf]).map(lambda m: I.Draw(dist="exp", args=[I.Num(v=m)])),
        st.builds(lambda m: I.Draw(dist="exp", args=[m]), kids),
        st.builds(lambda a, b: I.Draw(dist="uniform", args=[a, b]), kids, kids),
        st.builds(lambda p: I.Draw(dist="bernoulli", args=[p]), kids))


def with_draws(kids):
    return st.one_of(extend(kids), draws(kids))


DRAWN = st.recursive(leaves(), with_draws, max_leaves=16)


@settings(max_examples=400, deadline=None)
@given(DRAWN, st.sampled_from(VALUES), st.sampled_from(VALUES), st.sampled_from(VALUES))
def test_generated_source_draws_what_the_closures_draw(e, a, b, cv):
    """An expression that draws: generated where it reads nothing that can be missing (it has no
    fallback, which would draw again), else closures; the same value or diagnostic, and its stream
    left where the closures leave it (each draw drawn once, in the same order)."""
    from serq.interp.rng import Stream
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=4.0, workload=None)
    comp = Compiler(sim)
    got = []
    for f in (comp.expr(e), comp._closure(e)):
        c = Ctx(a={"a": a, "b": b, "c": cv}, rng=Stream(12345), x={"present": 2.0})
        got.append((outcome(f, c), c.rng.s))
    assert got[0] == got[1]


def test_a_draw_of_constants_is_generated_and_one_that_reads_attributes_is_not():
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=0.0, workload=None)
    comp = Compiler(sim)
    # 50 + floor(~exp(500)): a turn's size, as the examples draw it
    e = I.Bin(op="+", l=I.Num(v=50.0), r=I.Fn(name="floor", args=[I.Draw(dist="exp", args=[I.Num(v=500.0)])]))
    f = comp.expr(e)
    assert f.__code__.co_filename == "<serq expression>"
    from serq.interp.rng import Stream
    c1, c2 = Ctx(rng=Stream(7)), Ctx(rng=Stream(7))
    assert f(c1) == comp._closure(e)(c2) and c1.rng.s == c2.rng.s
    # ~exp(500) + a, a unset: the generated one would draw, miss a, and draw again on the fallback
    e2 = I.Bin(op="+", l=I.Draw(dist="exp", args=[I.Num(v=500.0)]), r=I.Attr(name="a"))
    assert comp.expr(e2).__code__.co_filename != "<serq expression>"


def test_written_out_functions_on_every_pair_of_values():
    """min and max of two and floor, ceil and round, written out in the source (no call), on every
    value and pair of values read from attributes: the closures' results (NaN, the zeros' signs)."""
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=0.0, workload=None)
    comp = Compiler(sim)
    a, b = I.Attr(name="a"), I.Attr(name="b")
    exprs = [I.Fn(name=f, args=[a, b]) for f in ("min", "max")]
    exprs += [I.Fn(name=f, args=[a]) for f in ("floor", "ceil", "round")]
    for e in exprs:
        fast, slow = comp.expr(e), comp._closure(e)
        assert fast.__code__.co_filename == "<serq expression>"
        for x in VALUES:
            for y in VALUES:
                c = Ctx(a={"a": x, "b": y})
                assert outcome(fast, c) == outcome(slow, c), (e.name, x, y)


def test_min_and_max_of_a_name_read_it_again():
    """min and max of two whose argument is a name in the source (a constant, or a part the steady
    loop reads once into a local) read it where they compare, without a temporary: the closures'
    results on every value and constant, either way round (NaN, the zeros' signs)."""
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=0.0, workload=None)
    comp = Compiler(sim)
    a = I.Attr(name="a")
    for f in ("min", "max"):
        for k in VALUES:
            for args in ([a, I.Num(v=k)], [I.Num(v=k), a]):
                e = I.Fn(name=f, args=args)
                fast, slow = comp.expr(e), comp._closure(e)
                assert fast.__code__.co_filename == "<serq expression>"
                # the attribute's read into a temporary, the constant's name read again
                assert [n for n in fast.__code__.co_varnames if n.startswith("_t")] == ["_t0"], (f, k)
                for x in VALUES:
                    c = Ctx(a={"a": x})
                    assert outcome(fast, c) == outcome(slow, c), (f, k, x)
