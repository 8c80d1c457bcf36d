"""Write lean/Serq/Oracle.lean: one theorem per recorded vLLM scenario the Lean fragment expresses,
stating that the run of examples/oracle/vllm_shared.sq (Exec.lean's `run`; vLLM's request on the
cache keyed by content, docs/reference/content.md) on the scenario's workload gives vLLM's first and
last token step and preemption count for every request, proved by `decide +kernel` (the
reference's *How the correspondence is checked*; docs/leangen.md).

    python tools/gen_oracle_lean.py            # rewrite lean/Serq/Oracle.lean
    python tools/gen_oracle_lean.py --check    # exit 1 when the committed file is not current

Each scenario maps onto the program's inputs and trace as tools/vllm_oracle.py maps it, its trace's
content columns saying what each prompt shares with an earlier one. A theorem is written only where
the reference kernel (serq/ref/, Exec.lean's Python twin) gives the same statement true; the others
are listed in the file's header with the first value that differs. The 52 main scenarios are all
tried; of the extra ones (tools/oracle/extra/), the first EXTRA_PER of each family, those whose
sessions share a system prompt (`shared*`) included (docs/leangen.md says why not all).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import vllm_oracle  # noqa: E402

OUT = os.path.join(ROOT, "lean", "Serq", "Oracle.lean")
MAIN = os.path.join(ROOT, "tools", "oracle", "results")
EXTRA = os.path.join(ROOT, "tools", "oracle", "extra", "results")
EXTRA_PER = 4          # extra scenarios per family (new_random, prefix, prefix_tight, shared, shared_many,
                       # shared_tight, tight, tight_cached)
FIELDS = ("first_token_step", "last_token_step", "num_preemptions")
OBSERVED = {"first_token": 0, "last_token": 1, "preemptions": 2}  # the program's observation names


@dataclass
class Scenario:
    name: str
    path: str                   # relative to the repository
    prog: object                # serq.ref.ir.Program
    wl: object                  # serq.ref.ir.Workload
    horizon: int
    expected: list              # (request id, session, turn, first, last, preemptions), vLLM's
    differs: str | None         # None: the reference kernel gives the same; else the first difference
    moves: int = 0              # the moves the Python twin's run takes: the theorem's fuel
    hits: tuple = ()            # each request's hit at its first admission, vLLM's, where the kernel's agree


def scenario_paths() -> list[str]:
    main = sorted(glob.glob(os.path.join(MAIN, "*.json")))
    fam: dict = {}
    for p in sorted(glob.glob(os.path.join(EXTRA, "*.json"))):
        fam.setdefault(re.sub(r"_\d+$", "", os.path.basename(p)[:-5]), []).append(p)
    extra = [p for f in sorted(fam) for p in fam[f][:EXTRA_PER]]
    return main + extra


def scenario(path: str) -> Scenario:
    from serq import ref
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    name = result.get("name") or os.path.basename(path)[:-5]
    outcome = {r["id"]: r for r in result["requests"]}
    with vllm_oracle.scenario_program(result, path, shared=True) as (prog, sessions, rows, horizon):
        p = ref.convert(prog)
    wl = workload(p, rows, len(sessions))
    horizon = int(horizon)
    res = ref.evaluate(p, wl, horizon=horizon)
    got: dict = {}
    for oname, v, _t, sid, turn in res.observations:
        if oname in OBSERVED:
            got.setdefault((sid, turn, OBSERVED[oname]), v)
    expected, differs = [], None
    for si, s in enumerate(sessions):
        for ti, rid in enumerate(s):
            want = tuple(outcome[rid].get(f) for f in FIELDS)
            have = tuple(got.get((si, ti, k)) for k in range(3))
            expected.append((rid, si, ti) + want)
            if differs is None and want != have:
                k = next(i for i in range(3) if want[i] != have[i])
                differs = f"request {rid}: {FIELDS[k]} vLLM {want[k]}, the reference kernel {have[k]}"
    if differs is None and not res.done:
        differs = "the reference kernel's run did not end"
    moves = ref.moves(p, wl, horizon) if differs is None else 0
    # each request's hit at its first admission: vLLM's, and the kernel's (its TurnRec's `cached`)
    kernel_hits = {(sid, turn): cached for sid, turn, _f, _l, _p, cached in res.requests}
    hits = tuple(outcome[rid].get("num_cached_tokens_first_admission") for rid, *_ in expected)
    if hits != tuple(kernel_hits.get((si, ti)) for _rid, si, ti, *_ in expected):
        hits = ()
    return Scenario(name, os.path.relpath(path, ROOT), p, wl, horizon, expected, differs, moves, hits)


def workload(p, rows: list[dict], n: int):
    """The kernel's workload of a scenario: the trace's rows with their content columns (what each
    prompt shares: docs/reference/content.md), every session at 0 (`arrive batch`)."""
    from serq import ref
    from serq.ref import ir as R
    trace: list = [[] for _ in range(n)]
    for row in rows:
        trace[int(row["session"][1:])].append(R.Row(*(int(row[k]) for k in
                                                     ("new", "out", "think", "forced", "stream", "parent", "common"))))
    return ref.workload(p, n, trace=trace)


def generate(paths: list[str] | None = None) -> tuple[str, list[Scenario]]:
    from serq.leangen import oracle
    scs = [scenario(p) for p in (paths if paths is not None else scenario_paths())]
    return oracle.render_oracle(scs), scs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gen_oracle_lean.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when lean/Serq/Oracle.lean is not current")
    args = ap.parse_args(argv)
    text, scs = generate()
    kept = sum(1 for s in scs if s.differs is None)
    main_n = sum(1 for s in scs if os.path.dirname(os.path.join(ROOT, s.path)) == MAIN)
    # the scenarios tried, not only the 52 the README's oracle check runs: what the number counts
    tried = (f"{len(scs)} scenarios tried: the {main_n} of tools/oracle/results/ and {len(scs) - main_n} of "
             f"tools/oracle/extra/, the first {EXTRA_PER} of each family")
    if args.check:
        with open(OUT, encoding="utf-8") as fh:
            current = fh.read() == text
        print(f"lean/Serq/Oracle.lean {'is current' if current else 'is NOT current: run tools/gen_oracle_lean.py'}"
              f" ({kept} theorems of {tried})")
        return 0 if current else 1
    with open(OUT, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    print(f"wrote lean/Serq/Oracle.lean: {kept} theorems of {tried}")
    for s in scs:
        if s.differs is not None:
            print(f"  left out {s.name}: {s.differs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
