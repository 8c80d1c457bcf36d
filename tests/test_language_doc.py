"""docs/language.md's examples are programs that `serq check` judges as the page says.

The page's fenced blocks, by their info string:

* ```serq          a whole program (`fn main() { … }`): it links.
* ```serq-error    a whole program with a line `// error: CODE`: it fails to link with that code.
* ```serq-fragment a piece of a program, shown for reading: not checked (kept to under a quarter of
                   the page's serq blocks).
* ```serq-lib NAME a library, and ```csv NAME a data file (a trace): written under NAME next to
                   every program checked, so that `use "NAME";` and `trace "NAME";` find them.

Each program is written to a file of its own in a temporary directory and linked with
`serq.api.load`, as `serq check` links it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from serq import api
from serq.diagnostics import SerqError

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "language.md"
FENCE = re.compile(r"^```([A-Za-z0-9_-]*)[ \t]*([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
ERROR = re.compile(r"//\s*error:\s*([A-Z]\d{3})\b")


def _blocks():
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append((m.group(1), m.group(2).strip(), m.group(3), line))
    return out


BLOCKS = _blocks()
PROGRAMS = [(body, line) for kind, _, body, line in BLOCKS if kind == "serq"]
ERRORS = [(body, line) for kind, _, body, line in BLOCKS if kind == "serq-error"]
FRAGMENTS = [line for kind, _, _, line in BLOCKS if kind == "serq-fragment"]
FILES = {name: body for kind, name, body, _ in BLOCKS if kind in ("serq-lib", "csv")}


@pytest.fixture
def where(tmp_path: Path) -> Path:
    for name, body in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return tmp_path


def _write(where: Path, body: str, line: int) -> str:
    path = where / f"language_md_line_{line}.sq"
    path.write_text(body, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("body,line", PROGRAMS, ids=[f"line{line}" for _, line in PROGRAMS])
def test_program_links(where, body, line):
    assert re.search(r"\bfn\s+main\s*\(\s*\)", body), f"docs/language.md:{line}: a serq block is a whole program"
    try:
        api.load(_write(where, body, line))
    except SerqError as err:
        pytest.fail(f"docs/language.md:{line}: serq check refuses the example:\n{err.render()}")


@pytest.mark.parametrize("body,line", ERRORS, ids=[f"line{line}" for _, line in ERRORS])
def test_error_example_fails_with_its_code(where, body, line):
    codes = ERROR.findall(body)
    assert len(codes) == 1, f"docs/language.md:{line}: a serq-error block says `// error: CODE` once"
    with pytest.raises(SerqError) as info:
        api.load(_write(where, body, line))
    assert info.value.code == codes[0], f"docs/language.md:{line}: {info.value.render()}"


def test_enough_checked_examples():
    assert len(PROGRAMS) >= 25, f"docs/language.md has {len(PROGRAMS)} checked programs, fewer than 25"
    assert ERRORS, "docs/language.md shows the rules people trip on as serq-error blocks"


def test_fragments_are_few():
    serq = len(PROGRAMS) + len(ERRORS) + len(FRAGMENTS)
    assert 4 * len(FRAGMENTS) < serq, (f"docs/language.md: {len(FRAGMENTS)} unchecked fragments of {serq} "
                                       f"serq blocks (lines {FRAGMENTS}): keep them under a quarter")


def test_every_file_is_used():
    """A library or data file the page shows is read by one of its checked programs."""
    bodies = [body for body, _ in PROGRAMS + ERRORS]
    for name in FILES:
        assert any(f'"{name}"' in b for b in bodies), f"docs/language.md: `{name}` is shown but no program uses it"
