"""No input produces a Python traceback: random and mutated programs get a diagnostic or link."""
from __future__ import annotations

import glob
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from serq import api
from serq.diagnostics import SerqError
from serq.lang.lower.inputs import UsageError

from data.reference_snippets import SNIPPETS

HERE = os.path.dirname(__file__)
SOURCES = []
for p in sorted([q for q in glob.glob(os.path.join(HERE, "..", "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q]) + \
        sorted(glob.glob(os.path.join(HERE, "data", "errors", "*.sq"))):
    with open(p, encoding="utf-8") as fh:
        SOURCES.append(fh.read())
SOURCES += ["fn main() {" + t + "}" for _, prod, t in SNIPPETS if prod == "items"]

TOKENS = ["fn", "main", "(", ")", "{", "}", ";", "let", "x", "=", "1", "pool", "kv", "stage", "s", ":", "fifo",
          "ps", "delay", "cap", "block", "hold", "run", "cost", ",", "[", "]", ".", "workload", "server", "arrive",
          "poisson", "turn", "session", "set", "observe", "engine", "device", "on", "schedule", "advance", "running",
          "admit", "waiting", "while", "branch", "with", "loop", "fork", "join", "end", "~exp", "inf", "+", "-", "*",
          "/", "?", "&&", "||", "!", "0", "-1", "1e9", "\"f.sq\"", "queue", "transfer", "tool", "from", "to",
          "gauge", "claim", "every", "iteration", "of", "at", "admission", "max", "j", "in", "use", "def", "now",
          "cached", "computed", "grow", "release", "load", "drop", "lease", "reserve", "reuse", "choose", "by"]


def check(text: str):
    try:
        api.load_text(text, "fuzz.sq")
    except (SerqError, UsageError):
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soup(tokens):
    check(" ".join(tokens))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SOURCES), st.data())
def test_mutated_programs(src, data):
    text = src
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["delete", "insert", "swap", "dup"]))
        if not text:
            break
        i = data.draw(st.integers(0, len(text) - 1))
        j = data.draw(st.integers(i, min(len(text), i + 40)))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + " " + data.draw(st.sampled_from(TOKENS)) + " " + text[i:]
        elif op == "swap":
            k = data.draw(st.integers(0, len(text) - 1))
            text = text[:i] + text[k:k + (j - i)] + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    check(text)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    check(text)
