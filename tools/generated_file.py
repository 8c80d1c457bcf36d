"""The command line of a tool that writes generated Lean files: `--check` says whether the
committed files are the ones the tool writes (exit 1 when not), else the tool writes them."""
from __future__ import annotations

import argparse
import glob
import os
import sys


def write_or_check(argv, doc: str, out: str, render, root: str, script: str, parts: str | None = None) -> int:
    """`render()` gives the text of `out`, or {path: text} of every file the tool writes; `parts`, a
    glob of files the tool wrote before that it writes no longer (removed; under --check, stale)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a committed file is not current")
    args = ap.parse_args(argv)
    files = render()
    if isinstance(files, str):
        files = {out: files}
    stale = [p for p in sorted(glob.glob(parts)) if p not in files] if parts else []
    rel = os.path.relpath(out, root) + (f" and {len(files) - 1} more" if len(files) > 1 else "")
    if args.check:
        bad = []
        for path, text in files.items():
            try:
                with open(path, encoding="utf-8") as fh:
                    if fh.read() != text:
                        bad.append(path)
            except FileNotFoundError:
                bad.append(path)
        bad += stale
        if bad:
            print(f"{', '.join(os.path.relpath(p, root) for p in bad)} not current: run python tools/{script}",
                  file=sys.stderr)
            return 1
        print(f"{rel} current")
        return 0
    for path in stale:
        os.remove(path)
    for path, text in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
    print(f"wrote {rel}")
    return 0
