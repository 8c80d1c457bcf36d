"""Checking a program takes time linear in its length (issue 7, item 10), guarded without a clock:
the work measured is the number of lines of serQ's own code executed, which is the same on every
machine. The programs are bench/link.py's; its printout has the speed figures."""
from __future__ import annotations

import gc
import importlib.util
import os
import statistics
import sys
import threading
import time

import pytest

from serq import api

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_link", os.path.join(HERE, "..", "bench", "link.py"))
bench = sys.modules["bench_link"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
SERQ = os.path.dirname(os.path.abspath(api.__file__)) + os.sep


def lines_run(text: str) -> int:
    """Lines of serq/ executed to parse, lower and link the text (in the loader's thread too)."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(SERQ) else None

    sys.settrace(calls)
    threading.settrace(calls)
    try:
        api.load_text(text, "long.sq")
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return count


def growth(family, sizes) -> float:
    """The work added from 2n to 4n over the work added from n to 2n: 2 when it is linear in n, 4
    when quadratic, whatever the work that does not depend on n."""
    api.load_text(bench.program(family, 1))  # the grammar built, outside the count
    a, b, c = (lines_run(bench.program(family, n)) for n in sizes)
    return (c - b) / (b - a)


@pytest.mark.parametrize("family", ["server", "calls", "decls", "serving"])
def test_checking_is_linear_in_the_statements(family):
    # before the fix: 2.31 for `serving` (every release walked the server, every tool every stage)
    assert growth(family, (8, 16, 32)) < 2.2


def test_checking_is_linear_in_loop_nesting():
    # before the fix: 192 (the hidden rule went through nested loops 2^depth times)
    assert growth(bench.NESTED, (4, 8, 16)) < 2.5


def test_loading_pauses_the_collector(monkeypatch):
    """The cyclic collector is paused while a program is parsed, lowered and linked (each full
    collection walked the whole tree again), and resumed, or left paused, as it was found."""
    import serq.api as A
    seen = []
    for name in ("parse_text", "lower", "link_kernel"):
        def spy(*args, _f=getattr(A, name), _name=name, **kw):
            seen.append((_name, gc.isenabled()))
            return _f(*args, **kw)
        monkeypatch.setattr(A, name, spy)
    try:
        api.load_text(bench.program("mixed", 2))
        assert seen == [("parse_text", False), ("lower", False), ("link_kernel", False)] and gc.isenabled()
        gc.disable()
        api.load_text(bench.program("mixed", 2))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_checking_time_grows_with_the_size():
    """The same in CPU time of this process, with a generous bound (4 for linear; medians of 3)."""
    small, large = bench.program("mixed", 8), bench.program("mixed", 32)
    api.load_text(small)

    def cpu(text):
        t = time.process_time()
        api.load_text(text)
        return time.process_time() - t

    runs = [(cpu(small), cpu(large)) for _ in range(3)]
    ratio = statistics.median(b for _, b in runs) / statistics.median(a for a, _ in runs)
    assert ratio < 8, runs
