"""`serq verify` on each of the papers' programs (examples/papers/) at the default bound, against the
verdicts recorded in examples/papers/verdicts.json (docs/lean.md, *The papers' claims*).

    python tools/verify_papers.py             # print each program's verdicts and times
    python tools/verify_papers.py --check     # exit 1 when a verdict (or how it was proved) changed
    python tools/verify_papers.py --update    # record the verdicts

A counterexample or witness is only named by verify when the interpreter's replay of its workload
reports the same failure (serq/verify/__init__.py, `replays`); one that carries a reason fails the
check too. Times are CPU seconds (the machines are shared); each program must decide within the
default timeout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from serq import api  # noqa: E402
from serq.verify import verify  # noqa: E402

OUT = os.path.join(ROOT, "examples", "papers", "verdicts.json")

# each program with the inputs it is verified under (the default ones, and the variant a claim's
# `given` is written for)
RUNS = [
    ("li_dai_peng_sarathi.sq", {}),
    ("li_dai_peng_orca.sq", {}),
    ("li_dai_peng_fastertransformer.sq", {}),
    ("li_dai_peng_prefill_first.sq", {}),
    ("jaillet_mcsf.sq", {}),
    ("jaillet_mcsf.sq", {"tight": 1}),
    ("bari_tiling.sq", {}),
    ("bari_tiling.sq", {"ragged": 0}),
]


def key(name: str, inputs: dict) -> str:
    return name + "".join(f" {k}={v}" for k, v in sorted(inputs.items()))


def verdicts(name: str, inputs: dict) -> tuple:
    """({claim: verdict}, {claim: how it was proved}, CPU seconds, the reasons given). How a claim is
    proved (every state, or every path when the proof over every state ran out of its share of the
    time) is printed, not recorded: it may depend on the machine's speed, the verdict may not."""
    prog = api.load(os.path.join(ROOT, "examples", "papers", name), {k: float(v) for k, v in inputs.items()})
    t = time.process_time()
    res = verify(prog)
    cpu = time.process_time() - t
    out = {v.name: v.verdict for v in res.claims.values()}
    by = {v.name: v.by for v in res.claims.values()}
    reasons = {v.name: v.reason for v in res.claims.values() if v.reason}
    return out, by, cpu, reasons


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true")
    g.add_argument("--update", action="store_true")
    args = ap.parse_args(argv)
    got, bad = {}, []
    for name, inputs in RUNS:
        k = key(name, inputs)
        got[k], by, cpu, reasons = verdicts(name, inputs)
        line = ", ".join(f"{c} {v}" + (f" ({by[c]})" if by[c] else "") for c, v in got[k].items())
        print(f"{k}: {line}  [{cpu:.1f} s CPU]")
        for c, why in reasons.items():
            print(f"  {c}: {why}")
            bad.append(f"{k}: {c}: {why}")
    if args.update:
        with open(OUT, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {os.path.relpath(OUT, ROOT)}")
        return 0
    if args.check:
        with open(OUT, encoding="utf-8") as fh:
            want = json.load(fh)
        for k in sorted(set(want) | set(got)):
            if want.get(k) != got.get(k):
                bad.append(f"{k}: recorded {want.get(k)}, now {got.get(k)}")
        for b in bad:
            print("CHANGED: " + b, file=sys.stderr)
        print("the papers' verdicts are " + ("as recorded" if not bad else "not as recorded"))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
