"""The golden Lean files: `serq claims` on every example program in the Lean fragment, and on the
test programs of tests/data/leangen/ (claims of every form), kept under tests/golden/lean/ at the
program's own path (examples/oracle/vllm_request.sq -> tests/golden/lean/examples/oracle/vllm_request.lean).

    python -m serq.leangen --check     # exit 1 when a golden file is missing, stale or left over
    python -m serq.leangen --update    # rewrite them
"""
from __future__ import annotations

import glob
import os

from serq import api
from serq.diagnostics import SerqError
from serq.leangen import generate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join("tests", "golden", "lean")
TEST_PROGRAMS = os.path.join("tests", "data", "leangen")


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT).replace(os.sep, "/")


def programs() -> list[tuple[str, str | None]]:
    """Every example program and test program, with its Lean file, or None when it is outside the
    fragment (said by its F-code diagnostic, one line)."""
    paths = sorted([q for q in glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q])
    paths += sorted(glob.glob(os.path.join(ROOT, TEST_PROGRAMS, "*.sq")))
    out = []
    for p in paths:
        rel = _rel(p)
        try:  # the header names the program by its path from the repository's root
            out.append((rel, generate(api.load(p), rel).text))
        except SerqError as exc:
            if not rel.startswith(TEST_PROGRAMS.replace(os.sep, "/")) and exc.code.startswith("F"):
                out.append((rel, None))
            else:
                raise
    return out


def golden_path(rel: str) -> str:
    return os.path.join(ROOT, GOLDEN, os.path.splitext(rel)[0] + ".lean")


def check(update: bool = False) -> list[str]:
    """What differs from the golden files (nothing when current); with `update`, rewrite them."""
    problems, want = [], set()
    for rel, text in programs():
        if text is None:
            continue
        gp = golden_path(rel)
        want.add(os.path.abspath(gp))
        try:
            with open(gp, encoding="utf-8") as fh:
                have = fh.read()
        except FileNotFoundError:
            have = None
        if have != text:
            problems.append(f"{_rel(gp)}: {'missing' if have is None else 'not current'} for {rel}")
            if update:
                os.makedirs(os.path.dirname(gp), exist_ok=True)
                with open(gp, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(text)
    for gp in sorted(glob.glob(os.path.join(ROOT, GOLDEN, "**", "*.lean"), recursive=True)):
        if os.path.abspath(gp) not in want:
            problems.append(f"{_rel(gp)}: left over (its program is gone or outside the fragment)")
            if update:
                os.remove(gp)
    return problems
