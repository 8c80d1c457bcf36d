"""A block of sets and observes as one generated function (serq/interp/sessions.py, Ops.straight)
against its statements' ops run one by one: on random blocks whose expressions read set, unset and
context values and draw, both leave the same attributes, observations and stream, or raise the
same diagnostic at the same statement; and whole programs report the same bytes with it and
without it, through the general path and the engine path."""
from __future__ import annotations

import json
import math
import os
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from serq import api
from serq.interp.compile import Compiler, Ctx, RunError
from serq.interp.rng import Stream
from serq.interp.sessions import Ops
from serq.interp.sim import Sim
from serq.ir import model as I
from serq.ir.model import Settings
from test_compile_source import DRAWN, EXPRS, VALUES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Sess(Ctx):
    """A session as the ops read it: its own context (c), its attributes, its stream."""
    __slots__ = ()
    serial = 0
    turn_idx = 0

    @property
    def c(self):
        return self


def _sim():
    sim = SimpleNamespace(prog=SimpleNamespace(files=["t.sq"]), now=4.0, workload=None, cur_at=None)
    sim.compiler = Compiler(sim)
    sim.seen = []
    sim.observe = lambda name, v, sess: sim.seen.append((name, ("nan",) if v != v else v))
    return sim


def _stmt(kind, name, e, line):
    at = I.Loc(file=0, line=line, col=1, end_line=line, end_col=2)
    if kind == "set":
        return I.Set(name=name, e=e, at=at)
    return I.Observe(name=name, e=e, at=at)


STMTS = st.lists(st.tuples(st.sampled_from(["set", "observe"]), st.sampled_from(["a", "b", "c", "d"]),
                           st.one_of(EXPRS, DRAWN)), min_size=1, max_size=6)


def _outcome(run, block, a, b):
    sim = _sim()
    ops = Ops(sim)
    sess = _Sess(a={"a": a, "b": b}, rng=Stream(99), x={"present": 2.0})
    try:
        run(ops, block, sess)
        err = None
    except RunError as e:
        err = (e.code, str(e))
    attrs = {k: ("nan",) if v != v else (v, math.copysign(1.0, v)) for k, v in sess.a.items()}
    return err, attrs, sim.seen, sess.rng.s, sim.cur_at


def _one_by_one(ops, block, sess):
    for _, op, _ in ops.block(block):
        op(sess)


def _fused(ops, block, sess):
    f = ops.straight(block)
    assert f is not None and f.__code__.co_filename == "<serq statements>"
    f(sess)


@settings(max_examples=300, deadline=None)
@given(STMTS, st.sampled_from(VALUES), st.sampled_from(VALUES))
def test_a_generated_block_does_what_its_ops_do(stmts, a, b):
    block = [_stmt(k, n, e, i + 1) for i, (k, n, e) in enumerate(stmts)]
    assert _outcome(_fused, block, a, b) == _outcome(_one_by_one, block, a, b)


def test_a_block_with_another_statement_is_not_generated():
    ops = Ops(_sim())
    at = I.Loc(file=0, line=1, col=1, end_line=1, end_col=2)
    block = [_stmt("set", "a", I.Num(v=1.0), 1), I.End(at=at)]
    assert ops.straight(block) is None
    assert ops.straight([]) is None


def _report(path, inputs, engine_path, straight, monkeypatch, **st_):
    with monkeypatch.context() as m:
        if not straight:
            m.setattr(Ops, "straight", lambda self, stmts: None)
        sim = Sim(api.load(path, inputs), Settings(**st_))
        sim.engine_path = engine_path
        rep = sim.run()
    rep.pop("_sim", None)
    return json.dumps(rep, sort_keys=True)


@pytest.mark.parametrize("engine_path", [True, False])
@pytest.mark.parametrize("path,inputs,st_", [
    (os.path.join(ROOT, "examples", "single-turn", "vllm_single_turn.sq"), {}, dict(arrivals=400)),
    (os.path.join(ROOT, "examples", "multi-turn", "vllm.sq"), {}, dict(horizon=120)),
    (os.path.join(ROOT, "examples", "multi-turn", "vllm_chat_shared.sq"), {}, dict(horizon=60)),
])
def test_programs_report_the_same_with_generated_blocks(monkeypatch, engine_path, path, inputs, st_):
    assert _report(path, inputs, engine_path, True, monkeypatch, **st_) == \
        _report(path, inputs, engine_path, False, monkeypatch, **st_)
