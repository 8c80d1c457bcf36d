"""python -m serq.leangen --check | --update: the golden Lean files (serq/leangen/golden.py)."""
from __future__ import annotations

import argparse
import sys

from serq.leangen import golden


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m serq.leangen", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="exit 1 when a golden file is not current")
    g.add_argument("--update", action="store_true", help="rewrite the golden files")
    g.add_argument("--list", action="store_true", help="say which example programs are in the fragment")
    args = ap.parse_args(argv)
    if args.list:
        for rel, text in golden.programs():
            print(f"{rel}: {'in the fragment' if text is not None else 'outside the fragment'}")
        return 0
    problems = golden.check(update=args.update)
    for p in problems:
        print(("updated " if args.update else "") + p)
    if args.check and problems:
        print("the golden Lean files are not current: python -m serq.leangen --update", file=sys.stderr)
        return 1
    if not problems:
        print("the golden Lean files are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
