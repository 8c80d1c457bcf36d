"""docs/sizing.md runs as written: each command block, run from a directory that holds the repository's
examples and tools and a .venv/bin/serq that is this serq, prints the output block that follows it
(stdout where it succeeds, stderr where it fails). Its sweeps take about 20 s of CPU; docs/tutorial.md's
sizing section (three --find sweeps, three grid sweeps, the figure: about 75 s) runs under
SERQ_DOCS_ALL=1, which `make check` sets."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALL = os.environ.get("SERQ_DOCS_ALL") == "1"
COMMAND = re.compile(r"^(\.venv/bin/|mkdir |echo |cat )")


def pairs(text: str) -> list[tuple[str, str | None]]:
    """Each command block and the output block right after it (None where prose comes between)."""
    blocks = [(m.start(), m.end(), m.group(1)) for m in re.finditer(r"^```[a-z]*\n(.*?)^```\n", text, re.S | re.M)]
    out = []
    for k, (_, end, body) in enumerate(blocks):
        if not COMMAND.match(body):
            continue
        nxt = blocks[k + 1] if k + 1 < len(blocks) else None
        follows = nxt is not None and text[end:nxt[0]].strip() == "" and not COMMAND.match(nxt[2])
        out.append((body, nxt[2] if follows else None))
    return out


@pytest.fixture(scope="module")
def where(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("docs")
    for name in ("examples", "tools"):
        os.symlink(ROOT / name, d / name)
    bin_ = d / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "serq").write_text(f"#!/bin/sh\nexec {sys.executable} -m serq.cli \"$@\"\n")
    (bin_ / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    return d


def _run(where: Path, command: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=where, capture_output=True, text=True,
                          env=env, timeout=900)


def _same(got: str, want: str) -> bool:
    return [x.rstrip() for x in got.strip().splitlines()] == [x.rstrip() for x in want.strip().splitlines()]


SIZING = pairs((ROOT / "docs" / "sizing.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("command,output", SIZING, ids=[c.splitlines()[-1][:70] for c, _ in SIZING])
def test_sizing_md_runs_as_written(where, command, output):
    if "sizing_study.py" in command and not ALL:
        pytest.skip("the study (8 calibrations) runs under SERQ_DOCS_ALL=1 (make check)")
    proc = _run(where, command)
    if output is None:
        assert proc.returncode == 0, (command, proc.stderr)
        return
    # a command's output is its stdout (what it says of a file it wrote goes to stderr, and is shown too)
    got = proc.stdout if proc.returncode == 0 else proc.stderr
    assert _same(got, output) or proc.returncode == 0 and _same(proc.stdout + proc.stderr, output), (command, got)


def _tutorial_sizing() -> list:
    text = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    i, j = text.index("## 5. Size Llama-3.1-8B"), text.index("## Where next")
    return pairs(text[i:j])


def test_the_sizing_docs_have_the_commands_they_show():
    assert len(SIZING) >= 12 and sum(o is not None for _, o in SIZING) >= 12
    assert len(_tutorial_sizing()) >= 5


@pytest.mark.skipif(not ALL, reason="the tutorial's sizing sweeps (about 75 s of CPU) run under SERQ_DOCS_ALL=1")
def test_the_tutorial_s_sizing_section_runs_as_written(where):
    for command, output in _tutorial_sizing():
        proc = _run(where, command)
        assert proc.returncode == 0, (command, proc.stderr)
        if output is not None:
            assert _same(proc.stdout, output) or _same(proc.stdout + proc.stderr, output), (command, proc.stdout)
