"""Write lean/Serq/Oracle.lean and lean/Serq/Oracle/PartNN.lean: one theorem per recorded vLLM scenario
the Lean fragment expresses,
stating that the run of examples/oracle/vllm_shared.sq (Exec.lean's `run`; vLLM's request on the
cache keyed by content, docs/reference/content.md) on the scenario's workload gives vLLM's first and
last token step and preemption count for every request, proved by `decide +kernel` (the
reference's *How the correspondence is checked*; docs/leangen.md).

    python tools/gen_oracle_lean.py            # rewrite lean/Serq/Oracle.lean and its parts
    python tools/gen_oracle_lean.py --check    # exit 1 when a committed file is not current

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

import kernel_cost  # noqa: E402
import vllm_oracle  # noqa: E402
from serq.ref.num import q  # noqa: E402

OUT = os.path.join(ROOT, "lean", "Serq", "Oracle.lean")
PARTS = os.path.join(ROOT, "lean", "Serq", "Oracle")       # Oracle/PartNN.lean: the theorems
MAIN = os.path.join(ROOT, "tools", "oracle", "results")
EXTRA = os.path.join(ROOT, "tools", "oracle", "extra", "results")
EXTRA_PER = 4          # extra scenarios per family (new_random, prefix, prefix_tight, shared, shared_many,
                       # shared_tight, tight, tight_cached)
# the kernel's calls the theorems may cost in all (tools/kernel_cost.py): about 9 minutes of CPU in
# CI (docs/lean.md, *Lean here*); the scenarios past it are left to the Python twin
BUDGET = 1_200_000
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
    calls: int = 0              # what the theorem costs Lean's kernel (tools/kernel_cost.py)


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
    calls = kernel_cost.calls(p, wl, q(horizon)) if differs is None else 0
    # each request's hit at its first admission: vLLM's, and the kernel's (its TurnRec's `cached`)
    kernel_hits = {(sid, turn): cached for sid, turn, _f, _l, _p, cached in res.requests}
    hits = tuple(outcome[rid].get("num_cached_tokens_first_admission") for rid, *_ in expected)
    if hits != tuple(kernel_hits.get((si, ti)) for _rid, si, ti, *_ in expected):
        hits = ()
    return Scenario(name, os.path.relpath(path, ROOT), p, wl, horizon, expected, differs, moves, hits, calls)


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


def family_of(s: Scenario) -> str | None:
    """A scenario's family: None for a named main scenario (01_self_preemption ...), `random` for
    the main random ones (08_random_NN), else the extra family (`shared_tight`)."""
    base = os.path.basename(s.path)[:-5]
    if base.startswith("08_random"):
        return "random"
    if os.path.dirname(os.path.join(ROOT, s.path)) == MAIN:
        return None
    return re.sub(r"_\d+$", "", base)


def select(scs: list[Scenario]) -> list[Scenario]:
    """The scenarios stated in Lean: each named main scenario, then the families' in turn (the first
    of each family, then the second of each, ...), each whose theorem fits one declaration
    (kernel_cost.THEOREM_CALLS) while the theorems' calls in all stay within BUDGET."""
    agree = [s for s in scs if s.differs is None]
    named = [s for s in agree if family_of(s) is None and s.calls <= kernel_cost.THEOREM_CALLS]
    fams: dict = {}
    for s in agree:
        if family_of(s) is not None:
            fams.setdefault(family_of(s), []).append(s)
    order = [fams[f][i] for i in range(max(map(len, fams.values()), default=0)) for f in sorted(fams)
             if i < len(fams[f])]
    chosen, total = list(named), sum(s.calls for s in named)
    for s in order:
        if s.calls <= kernel_cost.THEOREM_CALLS and total + s.calls <= BUDGET:
            chosen.append(s)
            total += s.calls
    keep = {id(s) for s in chosen}
    return [s for s in scs if id(s) in keep]


def generate(paths: list[str] | None = None) -> tuple[dict, list[Scenario]]:
    """({path: text} of every file it writes, the scenarios)."""
    from serq.leangen import oracle
    scs = [scenario(p) for p in (paths if paths is not None else scenario_paths())]
    stated = select(scs)
    parts = kernel_cost.modules([s.calls for s in stated])
    total = sum(s.calls for s in stated)
    budget = (f"the theorems cost the kernel {total} calls of the Python twin's definitions in all (about "
              f"{kernel_cost.minutes(total)} minutes of CPU in WebAssembly; at most {BUDGET} are given, and "
              f"{kernel_cost.THEOREM_CALLS} a theorem: tools/kernel_cost.py)")
    files = oracle.render_oracle(scs, stated, parts, budget)
    return {os.path.join(ROOT, "lean", "Serq", k): v for k, v in files.items()}, scs


def written() -> list[str]:
    """The files a previous run wrote: Oracle.lean and every part."""
    return [OUT] + sorted(glob.glob(os.path.join(PARTS, "Part*.lean")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gen_oracle_lean.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when lean/Serq/Oracle.lean or a part is not current")
    args = ap.parse_args(argv)
    files, scs = generate()
    kept = len(select(scs))
    main_n = sum(1 for s in scs if os.path.dirname(os.path.join(ROOT, s.path)) == MAIN)
    # the scenarios tried, not only the 52 the README's oracle check runs: what the number counts
    tried = (f"{len(scs)} scenarios tried: the {main_n} of tools/oracle/results/ and {len(scs) - main_n} of "
             f"tools/oracle/extra/, the first {EXTRA_PER} of each family")
    what = f"lean/Serq/Oracle.lean and {len(files) - 1} parts"
    if args.check:
        stale = [p for p in written() if p not in files]
        differ = []
        for path, text in files.items():
            try:
                with open(path, encoding="utf-8") as fh:
                    if fh.read() != text:
                        differ.append(path)
            except FileNotFoundError:
                differ.append(path)
        bad = [os.path.relpath(p, ROOT) for p in differ + stale]
        print(f"{what} {'are current' if not bad else 'are NOT current: run tools/gen_oracle_lean.py'}"
              f" ({kept} theorems of {tried}){'; ' + ', '.join(bad) if bad else ''}")
        return 0 if not bad else 1
    for path in written():
        if path not in files:
            os.remove(path)
    os.makedirs(PARTS, exist_ok=True)
    for path, text in files.items():
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
    print(f"wrote {what}: {kept} theorems of {tried}")
    for s in scs:
        if s.differs is not None:
            print(f"  left out {s.name}: {s.differs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
