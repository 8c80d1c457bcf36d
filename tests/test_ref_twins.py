"""Every definition of lean/Serq/Exec.lean and lean/Serq/Num.lean has its Python twin in serq/ref/,
named in docs/lean.md's tables (architecture: the reference kernel is Exec.lean definition for
definition, its numbers Num.lean's)."""
from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
# Python's own, named in the tables: builtins and operators, and the `fractions` and `math` modules'
BUILTINS = {"sorted", "sum", "any", "tuple <", "min", "max", "+", "-", "*", "<", "<=", "int", "Fraction", "math.gcd"}
LEAN_FILES = ("Exec.lean", "Num.lean")  # the files whose every definition has a twin
NAME = r"[A-Za-z][A-Za-z0-9_'.?!]*"      # a Lean name, dotted (`Q.norm`) and `?`-ended (`Q.toNat?`) ones too


def lean_defs(file: str = "Exec.lean") -> list[str]:
    with open(os.path.join(ROOT, "lean", "Serq", file), encoding="utf-8") as fh:
        return re.findall(rf"^(?:def|structure|inductive|abbrev)\s+({NAME})", fh.read(), re.M)


def all_lean_defs() -> list[str]:
    return [d for f in LEAN_FILES for d in lean_defs(f)]


def table() -> dict[str, str]:
    with open(os.path.join(ROOT, "docs", "lean.md"), encoding="utf-8") as fh:
        text = fh.read()
    return dict(re.findall(rf"^\| `({NAME})` \| `([^`]+)` \|", text, re.M))


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
    assert "amount" in defs and "budgetOf" in defs and "divRound" not in defs


def test_num_lean_is_parsed():
    defs = lean_defs("Num.lean")
    assert {"Q", "Q.gcd", "Q.norm", "Q.div", "Q.fmod", "Q.floor", "Q.toNat?"} <= set(defs)


@pytest.mark.parametrize("file", LEAN_FILES)
def test_every_lean_definition_has_a_python_twin(file):
    t, py = table(), python_names()
    missing = [d for d in lean_defs(file) if d not in t]
    assert not missing, f"{file} definitions without a row in docs/lean.md: {missing}"
    absent = [(d, t[d]) for d in lean_defs(file) if t[d] not in py and t[d] not in BUILTINS]
    assert not absent, f"twins named in docs/lean.md but not defined in serq/ref/: {absent}"


def test_the_tables_name_no_definition_the_lean_files_lack():
    defs = set(all_lean_defs())
    assert not [k for k in table() if k not in defs]


def lean_constructors(name: str) -> list[str]:
    """The constructors of an inductive of lean/Serq/IR.lean, in order."""
    with open(os.path.join(ROOT, "lean", "Serq", "IR.lean"), encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(rf"^inductive {name} where\n(.*?)(?:\n  deriving|\n\n)", text, re.M | re.S)
    assert m, name
    return re.findall(r"\|\s*([a-zA-Z]+)", m.group(1))


def test_every_ir_enumeration_maps_to_its_lean_constructors():
    from serq.ref import ir as R
    pairs = {"BinOp": R.LEAN_BIN_OPS, "Fun": R.LEAN_FUNS, "StepVar": R.LEAN_STEP_VARS, "ObsFn": R.LEAN_OBS,
             "AggFn": R.LEAN_AGGS, "Mode": R.LEAN_MODES, "Form": R.LEAN_FORMS, "Arrive": R.LEAN_ARRIVALS}
    for name, mapping in pairs.items():
        assert sorted(lean_constructors(name)) == sorted(mapping.values()), name
    assert set(R.LEAN_BIN_OPS) == set(R.BIN_OPS) and set(R.LEAN_OBS) == set(R.OBS) and set(R.LEAN_AGGS) == set(R.AGGS)


def test_every_ir_lean_constructor_has_its_python_class():
    from serq.ref import ir as R
    classes = {"Expr": ["Num", "Attr", "Ctx", "StepVar", "Reg", "Obs", "Agg", "Not", "Bin", "Ite", "Fn"],
               "Stmt": ["SetA", "DrawA", "ObserveA", "BranchS", "WhileS", "TurnS", "HoldS", "RunS", "EndS", "JobS"],
               "IStmt": ["IServe", "IAdmit", "IBranch", "ISet"]}
    for name, pys in classes.items():
        assert len(lean_constructors(name)) == len(pys), name
        assert all(hasattr(R, c) for c in pys)
