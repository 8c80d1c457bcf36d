"""Every rule the reference states has a program that breaks it (tests/data/errors/*.sq).

Each file's first line is `// expect: CODE LINE:COL`: `serq check` must fail with that code at
that place, exit 1, and print the source line with a caret."""
from __future__ import annotations

import glob
import os
import re

import pytest

from serq import api
from serq.diagnostics import SerqError
from serq.ir.model import Settings

HERE = os.path.dirname(__file__)
CASES = sorted(glob.glob(os.path.join(HERE, "data", "errors", "*.sq")))
EXPECT = re.compile(r"//\s*expect:\s*([LPIRT]\d{3})\s+(\d+):(\d+)")
SETTINGS = re.compile(r"//\s*run:\s*(.*)")


def _expect(path):
    with open(path, encoding="utf-8") as fh:
        m = EXPECT.search(fh.readline())
    assert m, f"{path}: the first line is `// expect: CODE LINE:COL`"
    return m.group(1), int(m.group(2)), int(m.group(3))


def _settings(path):
    """A second line `// run: arrivals=3 horizon=10`: a run-time rule, broken when the program runs."""
    with open(path, encoding="utf-8") as fh:
        fh.readline()
        m = SETTINGS.search(fh.readline())
    if not m:
        return None
    kw = {}
    for part in m.group(1).split():
        k, v = part.split("=")
        kw[k] = float(v) if k in ("horizon", "warmup") else int(v)
    return Settings(**kw)


@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(c) for c in CASES])
def test_rule_is_enforced(path):
    code, line, col = _expect(path)
    settings = _settings(path)
    with pytest.raises(SerqError) as info:
        prog = api.load(path)
        if settings is not None:
            api.run(prog, settings)
    err = info.value
    assert (err.code, err.span.line, err.span.col) == (code, line, col), err.render()
    text = err.render()
    assert f"error[{code}]" in text and "^" in text


def all_codes_in_source():
    codes = set()
    for root, _, files in os.walk(os.path.join(HERE, "..", "serq")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    codes |= set(re.findall(r'"([LPIRT]\d{3})"', fh.read()))
    return codes


def test_every_code_has_a_breaking_program():
    tested = {_expect(p)[0] for p in CASES}
    untested = sorted(all_codes_in_source() - tested - UNTESTABLE)
    assert not untested, f"codes without a program in tests/data/errors: {untested}"


def test_every_code_is_documented():
    with open(os.path.join(HERE, "..", "docs", "reference", "errors.md"), encoding="utf-8") as fh:
        doc = fh.read()
    missing = sorted(c for c in all_codes_in_source() if f"`{c}`" not in doc)
    assert not missing, f"codes missing from docs/reference/errors.md: {missing}"


# Codes that no source program can reach are listed here with the reason, and tested elsewhere.
UNTESTABLE = {
    "P005",  # a file that is not UTF-8: tests/test_cli.py writes one
    "P006",  # a file that cannot be read: tests/test_cli.py
    "I001",  # a JSON IR that is not one: tests/test_cli.py
    "L014",  # needs a supplied input: tests/test_lower.py::test_an_input_may_not_change_an_array_size
    "R002",  # a context variable with no value: every moment that reads one supplies it (an internal guard)
    "R036",  # ten million sessions take minutes: tests/test_finite.py lowers the bound
    "T002",  # an unreadable trace: the linker checks it exists (L236); as root every file is readable
}


_BARE_REGISTER = """fn main() {
  device gpu { kv cap 1000; }
  engine llm on gpu {
    reqs cap 4; tokens cap 8;
    state turns = 0;
    request (p) { BODY prefill (p) growing kv; }
    schedule { set turns = turns + 1; advance running; admit waiting while (running.preempted == 0) taking reqs (TAKE), kv (1); }
    execute (1);
  }
  pool kv on gpu { block 1; }
  pool reqs on llm { queue fifo; }
  workload { arrive poisson(1); turn { Size n = 10; } }
  server { llm (n); }
}"""


@pytest.mark.parametrize("body,take,code,hint", [
    ("", "1 + 0 * turns", "L174", "a header reads it as `llm.turns`"),
    ("set q = turns;", "1", "L173", "which the request's statements do not read"),
])
def test_a_register_read_bare_in_a_request_is_named_as_one(body, take, code, hint):
    # a header reads an engine's register as `llm.turns`; read bare, the name looked like a session's
    # attribute set nowhere, and the message said only that
    text = _BARE_REGISTER.replace("BODY", body).replace("TAKE", take)
    with pytest.raises(SerqError) as info:
        api.load_text(text, "t.sq")
    assert info.value.code == code and "`turns` is a register of engine `llm`" in str(info.value)
    assert hint in str(info.value)
    api.load_text(_BARE_REGISTER.replace("BODY", "").replace("TAKE", "1 + 0 * llm.turns"), "t.sq")
