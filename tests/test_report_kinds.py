"""Each figure of the report says what it counts (issue 29): a stage's kind beside its utilisation
and completed count (a step engine's completed are runs, a delay stage's utilisation is the time a
job is present), and what the pool table's columns count when a pool evicted."""
from __future__ import annotations

import os

from serq import api
from serq.interp.report import COUNTS, text
from serq.ir.model import Settings

EX = os.path.join(os.path.dirname(__file__), "..", "examples")


def _rep(rel, **kw):
    rep = api.run(api.load(os.path.join(EX, rel)), Settings(**kw))
    rep.pop("_sim")
    return rep


def test_stages_say_what_they_count():
    rep = _rep("multi-turn/vllm.sq", arrivals=300)
    st = rep["stages"]
    assert st["tool"]["kind"] == "delay" and st["vllm"]["kind"] == "engine"
    out = text(rep, "vllm.sq").splitlines()
    head = next(i for i, line in enumerate(out) if line.startswith("stage "))
    assert out[head].endswith("what they count")
    rows = {line.split()[0]: line for line in out[head + 1:head + 3]}
    assert rows["vllm"].endswith(COUNTS["engine"]) and "runs completed" in rows["vllm"]
    assert rows["tool"].endswith(COUNTS["delay"])
    # the engine's completed are runs: a turn's prefill and its decode each
    assert st["vllm"]["completed"] > rep["client"]["response"]["count"]
    # vllm.sq's reqs pool evicts the request slots its holds cache: the table says what it counts
    assert rep["pools"]["reqs"]["evicted"] > 0
    i = next(i for i, line in enumerate(out) if line.startswith("(used: units held;"))
    assert "cached entries dropped" in out[i] and out[i + 1].endswith("request slots included)")


def test_kinds_of_queueing_stages():
    assert _rep("single-turn/mg1.sq", arrivals=200)["stages"]["svc"]["kind"] == "fifo"
    assert _rep("single-turn/ps.sq", arrivals=200)["stages"]["cpu"]["kind"] == "ps"
