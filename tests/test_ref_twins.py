"""Every definition of lean/Serq/Exec.lean has its Python twin in serq/ref/, named in docs/lean.md's
table (architecture: the reference kernel is Exec.lean definition for definition)."""
from __future__ import annotations

import glob
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..")
BUILTINS = {"sorted", "sum", "tuple <"}  # Python's own, named in the table


def lean_defs() -> list[str]:
    with open(os.path.join(ROOT, "lean", "Serq", "Exec.lean"), encoding="utf-8") as fh:
        return re.findall(r"^(?:def|structure|inductive|abbrev)\s+([A-Za-z][A-Za-z0-9_']*)", fh.read(), re.M)


def table() -> dict[str, str]:
    with open(os.path.join(ROOT, "docs", "lean.md"), encoding="utf-8") as fh:
        text = fh.read()
    return dict(re.findall(r"^\| `([A-Za-z][A-Za-z0-9_']*)` \| `([^`]+)` \|", text, re.M))


def python_names() -> set[str]:
    names = set()
    for path in glob.glob(os.path.join(ROOT, "serq", "ref", "*.py")):
        with open(path, encoding="utf-8") as fh:
            src = fh.read()
        names |= set(re.findall(r"^(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)", src, re.M))
        names |= set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", src, re.M))
    return names


def test_exec_lean_is_parsed():
    defs = lean_defs()
    assert "step" in defs and "startIteration" in defs and "Machine" in defs and len(defs) > 50


def test_every_exec_lean_definition_has_a_python_twin():
    t, py = table(), python_names()
    missing = [d for d in lean_defs() if d not in t]
    assert not missing, f"Exec.lean definitions without a row in docs/lean.md: {missing}"
    absent = [(d, t[d]) for d in lean_defs() if t[d] not in py and t[d] not in BUILTINS]
    assert not absent, f"twins named in docs/lean.md but not defined in serq/ref/: {absent}"


def test_the_table_names_no_definition_exec_lean_lacks():
    defs = set(lean_defs())
    assert not [k for k in table() if k not in defs]
