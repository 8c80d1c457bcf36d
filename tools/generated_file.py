"""The command line of a tool that writes a generated Lean file: `--check` says whether the
committed file is the one the tool writes (exit 1 when not), else the tool writes it."""
from __future__ import annotations

import argparse
import os
import sys


def write_or_check(argv, doc: str, out: str, render, root: str, script: str) -> int:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed file is not current")
    args = ap.parse_args(argv)
    text = render()
    rel = os.path.relpath(out, root)
    if args.check:
        try:
            with open(out, encoding="utf-8") as fh:
                current = fh.read() == text
        except FileNotFoundError:
            current = False
        if not current:
            print(f"{rel} is not current: run python tools/{script}", file=sys.stderr)
            return 1
        print(f"{rel} is current")
        return 0
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {rel}")
    return 0
