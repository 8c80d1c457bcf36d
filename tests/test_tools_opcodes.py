"""tools/opcodes.py: the interpreter's opcodes a request by function (issue 49's budget)."""
from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MG1 = os.path.join(ROOT, "examples", "single-turn", "mg1.sq")


def _tool():
    spec = importlib.util.spec_from_file_location("opcodes_tool", os.path.join(ROOT, "tools", "opcodes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_opcodes_are_counted_by_function_and_grow_with_the_requests():
    tool = _tool()
    tool.count(MG1, 1)  # the imports, as main() pays them first
    small, large = tool.count(MG1, 20), tool.count(MG1, 80)
    # the network of queues' generated path runs an arrival for each request, so its count grows
    arrive = [k for k in large if k[0] == "arrive"]
    assert arrive and all(large[k] > small[k] > 0 for k in arrive)
    assert sum(large.values()) > sum(small.values()) > 0
    text = tool.table(large, 80, 3)
    lines = text.splitlines()
    assert lines[0].startswith("opcodes a request: ") and len(lines) == 4
    assert all("%" in x and "(" in x for x in lines[1:])


def test_opcodes_without_a_program_says_how_to_run_it(capsys):
    tool = _tool()
    assert tool.main([]) == 2 and "tools/opcodes.py PROGRAM" in capsys.readouterr().out
    assert tool.main(["--help"]) == 0
