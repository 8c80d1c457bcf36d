"""Write examples/papers/ClaimsProved.lean and lean/Serq/Papers/: each claim of the papers' programs
(examples/papers/), its bounded statement over a finite family of workloads, proved by `decide
+kernel` (docs/lean.md, *The papers' claims*).

    python tools/gen_claims_proved.py            # rewrite examples/papers/ClaimsProved.lean and lean/Serq/Papers/
    python tools/gen_claims_proved.py --check    # exit 1 when the committed file is not current

The file includes each program as `serq claims` writes it (serq.leangen.generate: the program's
value and its claims' propositions over the whole family, up to 500 sessions), then states, for a
finite family of workloads (`FAMILIES`), that every run ends with every session ended within the
fuel and that the claim's outcome on it is the verdict `STATEMENTS` names. A statement is written
only where the reference kernel (serq/ref/, Exec.lean's Python twin) evaluates it true; otherwise
the script stops and says which workload differs. The statements on one program and family are
read off one check of its runs (`check_<Name>_<family>`, lean/Serq/Papers/Programs.lean), proved by
`decide +kernel` slice by slice (lean/Serq/Papers/ChecksNN.lean, a module of a few minutes each:
tools/kernel_cost.py); `make check` compiles them all (docs/lean.md, *Lean here*).
"""
from __future__ import annotations

import itertools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import kernel_cost  # noqa: E402
from generated_file import write_or_check  # noqa: E402
from serq import api, ref  # noqa: E402
from serq.leangen import generate  # noqa: E402
from serq.leangen import terms as T  # noqa: E402
from serq.ref import ir as R  # noqa: E402

OUT = os.path.join(ROOT, "examples", "papers", "ClaimsProved.lean")
CHECKS = os.path.join(ROOT, "lean", "Serq", "Papers")          # Programs.lean, ChecksNN.lean
PROGRAMS = os.path.join(CHECKS, "Programs.lean")


def family(ndraws: int, times: tuple, sizes=(1, 2)) -> list:
    """Every workload of `sizes` sessions, each draw 0 or 1 (the programs read a draw as a choice
    between two sizes), arrivals in serial order among `times`."""
    out = []
    for n in sizes:
        for draws in itertools.product(itertools.product((0, 1), repeat=ndraws), repeat=n):
            for arr in itertools.combinations_with_replacement(times, n):
                out.append(R.Workload(tuple(R.SessionIn(t, d, ()) for t, d in zip(arr, draws))))
    return out


def one(draws, arrivals) -> list:
    return [R.Workload(tuple(R.SessionIn(t, tuple(d), ()) for t, d in zip(arrivals, draws)))]


# The families: the name of its Lean `def`, its workloads.
FAMILIES = {
    # Li, Dai and Peng: up to two sessions, prompts 4 or 14, outputs 2 or 8, at 0, 1 or 3
    "two_sessions": family(2, (0, 1, 3)),
    # the starved iteration: s0, s1 (p 4, o 2) at 0, s2 (p 14, o 2) at 1 (tests/test_papers.py)
    "starved_witness": one([(0, 0), (0, 0), (1, 0)], [0, 0, 1]),
    # prefill-first starved: three sessions at 0, prompts 4, 14 and 44 (a draw is any natural in
    # the family), outputs 2; found by `serq verify --sessions 3 --values 4`
    "prefill_first_witness": one([(0, 0), (1, 0), (4, 0)], [0, 0, 0]),
    # Jaillet et al.: up to two sessions at 0 (arrive batch), each draw 0 or 1
    "batch_two": family(2, (0,)),
    # Bari et al.: up to two sessions, three draws each, at 0 or 1
    "tiles_two": family(3, (0, 1)),
    # two prompts of 16 at 0 (ragged=0): the second's chunk cut to a tile
    "tile_cut": one([(0, 1, 0), (0, 1, 0)], [0, 0]),
    # one prompt of 12: prefilled whole, not a whole number of tiles
    "ragged_prompt": one([(1, 0, 0)], [0]),
}

# (program, its inputs, namespace, claim, verdict, family). A verdict is the claim's outcome on
# every workload of the family: held, witnessed (some iteration), not_witnessed or failed.
P = "examples/papers/"
STATEMENTS = [
    (P + "li_dai_peng_sarathi.sq", {}, "Sarathi", "work_conserving", "held", "two_sessions"),
    (P + "li_dai_peng_sarathi.sq", {}, "Sarathi", "starved", "not_witnessed", "two_sessions"),
    (P + "li_dai_peng_sarathi.sq", {}, "Sarathi", "starved", "not_witnessed", "starved_witness"),
    (P + "li_dai_peng_orca.sq", {}, "Orca", "work_conserving", "held", "two_sessions"),
    (P + "li_dai_peng_orca.sq", {}, "Orca", "starved", "not_witnessed", "two_sessions"),
    (P + "li_dai_peng_orca.sq", {}, "Orca", "starved", "not_witnessed", "starved_witness"),
    (P + "li_dai_peng_fastertransformer.sq", {}, "FasterTransformer", "starved", "witnessed", "starved_witness"),
    (P + "li_dai_peng_fastertransformer.sq", {}, "FasterTransformer", "work_conserving", "failed",
     "starved_witness"),
    (P + "li_dai_peng_prefill_first.sq", {}, "PrefillFirst", "starved", "witnessed", "prefill_first_witness"),
    (P + "li_dai_peng_prefill_first.sq", {}, "PrefillFirst", "work_conserving", "failed",
     "prefill_first_witness"),
    (P + "jaillet_mcsf.sq", {}, "Mcsf", "memory_bound", "held", "batch_two"),
    (P + "jaillet_mcsf.sq", {}, "Mcsf", "completion_alone", "held", "batch_two"),
    (P + "jaillet_mcsf.sq", {"tight": 1}, "McsfTight", "memory_bound", "held", "batch_two"),
    (P + "jaillet_mcsf.sq", {"tight": 1}, "McsfTight", "completion_alone", "held", "batch_two"),
    (P + "jaillet_mcsf.sq", {"tight": 1}, "McsfTight", "completion_lower_bound", "held", "batch_two"),
    (P + "bari_tiling.sq", {"ragged": 0}, "TilingWhole", "tiled", "held", "tiles_two"),
    (P + "bari_tiling.sq", {"ragged": 0}, "TilingWhole", "tile_idles_budget", "witnessed", "tile_cut"),
    (P + "bari_tiling.sq", {}, "Tiling", "ragged", "witnessed", "ragged_prompt"),
]

def programs() -> dict:
    """Namespace -> (source, inputs, the reference kernel's program)."""
    out = {}
    for path, inputs, ns, *_ in STATEMENTS:
        if ns not in out:
            out[ns] = (path, inputs, ref.convert(api.load(os.path.join(ROOT, path), inputs)))
    return out


def fuel_of(progs: dict, ns: str, fam: str) -> int:
    """The most moves a run of the family takes on the Python twin: the statement's fuel, no more than
    its runs need (issue 27: a reader judges the kernel's work from it)."""
    return max(ref.moves(progs[ns][2], wl) for wl in FAMILIES[fam])


def verify(progs: dict) -> None:
    """Stop unless every statement is true on the reference kernel, with its fuel."""
    for path, inputs, ns, claim, verdict, fam in STATEMENTS:
        prog = progs[ns][2]
        fuel = fuel_of(progs, ns, fam)
        for wl in FAMILIES[fam]:
            res = ref.evaluate(prog, wl, fuel)
            got = res.claims[claim].status
            if not res.done or res.live or got != verdict:
                raise SystemExit(f"{path} {inputs}: claim {claim} on {wl}: {got} (done {res.done}, "
                                 f"live {res.live}), not {verdict}")


def _inputs(inputs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(inputs.items()))


def groups(progs: dict) -> list:
    """The statements grouped by (program, family), in first-statement order: [(ns, fam, fuel,
    [(claim index, verdict, statement)])]. One check of a group's family reads every claim of the
    group on each run: the kernel runs a workload once for all of them."""
    out: dict = {}
    for st in STATEMENTS:
        path, inputs, ns, claim, verdict, fam = st
        j = [c.name for c in progs[ns][2].claims].index(claim)
        out.setdefault((ns, fam), []).append((j, verdict, st))
    return [(ns, fam, fuel_of(progs, ns, fam), items) for (ns, fam), items in out.items()]


def check_name(ns: str, fam: str) -> str:
    return T.ident(f"check_{ns}_{fam}")


def render() -> dict:
    """{path: text}: lean/Serq/Papers/Programs.lean (the programs, families, their slices and each
    group's check), lean/Serq/Papers/ChecksNN.lean (the slices' theorems, a module of a few minutes
    each) and examples/papers/ClaimsProved.lean (each statement, from its group's slices)."""
    progs = programs()
    verify(progs)
    gs = groups(progs)
    # each family cut in slices of at most a theorem's calls, by its costliest group's runs
    cost = {}
    for ns, fam, fuel, _items in gs:
        for i, wl in enumerate(FAMILIES[fam]):
            cost[(fam, i)] = max(cost.get((fam, i), 0), kernel_cost.calls(progs[ns][2], wl))
    cuts = {fam: kernel_cost.modules([cost[(fam, i)] for i in range(len(ws))], kernel_cost.THEOREM_CALLS)
            for fam, ws in FAMILIES.items() if any(g[1] == fam for g in gs)}
    out = [PROGRAMS_HEAD]
    for ns, (path, inputs, _p) in progs.items():
        source = path + (f" with {_inputs(inputs)}" if inputs else "")
        text = generate(api.load(os.path.join(ROOT, path), inputs), source=source,
                        ns=f"SerqGen.{ns}").text
        out.append(f"-- {source}, as `serq claims` writes it\n")
        out.append(text[text.index("namespace "):] + "\n")
    out.append("namespace Serq.Papers\nopen Serq\n\n" + HELPERS)
    for name, ws in FAMILIES.items():
        out.append(f"/-- {len(ws)} workload{'s' if len(ws) > 1 else ''} (tools/gen_claims_proved.py, `FAMILIES`). -/\n"
                   f"def {name} : List Workload := {T.lines(ws, T.workload, 2)}\n\n")
        if name in cuts and len(cuts[name]) > 1:
            for k, idx in enumerate(cuts[name], 1):
                out.append(f"/-- `{name}`'s workloads {idx[0] + 1} to {idx[-1] + 1}. -/\n"
                           f"def {name}_{k:02d} : List Workload := {T.lines([ws[i] for i in idx], T.workload, 2)}\n\n")
            appended = " ++ ".join(f"{name}_{k:02d}" for k in range(1, len(cuts[name]) + 1))
            out.append(f"/-- The slices, in order, are the family. -/\n"
                       f"theorem {name}_slices : {name} = {appended} := rfl\n\n")
    for ns, fam, fuel, items in gs:
        reads = [f"statusOn SerqGen.{ns}.program wl {fuel} {j} == some {T.string(v)}" for j, v, _st in items]
        body = reads[-1]
        for r in reversed(reads[:-1]):
            body = f"({r}) && ({body})"
        claims = ", ".join(f"`{st[3]}` {v}" for _j, v, st in items)
        out.append(f"/-- On a workload, the run of `SerqGen.{ns}.program` within {fuel} moves ends with every "
                   f"session ended, and {claims}. -/\n"
                   f"def {check_name(ns, fam)} : Workload → Bool := fun wl =>\n"
                   f"  doneOn SerqGen.{ns}.program {fuel} wl && ({body})\n\n")
    out.append("end Serq.Papers\n")
    files = {PROGRAMS: "".join(out)}
    # the slices' theorems: (name, statement, calls), cut into modules
    theorems = []
    for ns, fam, fuel, _items in gs:
        ws = FAMILIES[fam]
        pieces = cuts[fam] if len(cuts[fam]) > 1 else [list(range(len(ws)))]
        for k, idx in enumerate(pieces, 1):
            lst = f"{fam}_{k:02d}" if len(pieces) > 1 else fam
            calls = sum(kernel_cost.calls(progs[ns][2], ws[i]) for i in idx)
            theorems.append((f"{check_name(ns, fam)}_{k:02d}" if len(pieces) > 1 else f"{check_name(ns, fam)}_all",
                             f"{lst}.all {check_name(ns, fam)} = true", calls, len(idx)))
    mods = kernel_cost.modules([t[2] for t in theorems])
    for g, idx in enumerate(mods, 1):
        body = "".join(f"\n/-- {theorems[i][3]} workload{'s' if theorems[i][3] > 1 else ''}, {theorems[i][2]} calls of "
                       f"the kernel's definitions. -/\ntheorem {theorems[i][0]} : {theorems[i][1]} := by\n"
                       f"  decide +kernel\n" for i in idx)
        files[os.path.join(CHECKS, f"Checks{g:02d}.lean")] = CHECKS_FILE.format(g=f"{g:02d}", m=len(mods), body=body)
    # ClaimsProved.lean: each group's family from its slices, then each statement from its group
    out = [HEADER.format(imports="".join(f"import Serq.Papers.Checks{g:02d}\n" for g in range(1, len(mods) + 1)))]
    out.append("namespace Serq.Papers\nopen Serq\n\n")
    for ns, fam, fuel, items in gs:
        c = check_name(ns, fam)
        if len(cuts[fam]) > 1:
            proof = f"{c}_01"
            for k in range(2, len(cuts[fam]) + 1):
                proof = f"all_append_eq_true {c} _ {c}_{k:02d} _\n      ({proof})"
            out.append(f"/-- `{c}` on every workload of `{fam}`, from its slices. -/\n"
                       f"theorem {c}_all : {fam}.all {c} = true := by\n"
                       f"  rw [{fam}_slices]\n  exact {proof}\n\n")
    for ns, fam, fuel, items in gs:
        c = check_name(ns, fam)
        for i, (j, verdict, st) in enumerate(items):
            path, inputs, _ns, claim, _v, _f = st
            ident = T.ident(f"{ns}_{claim}_{verdict}_{fam}")
            total = sum(ref.moves(progs[ns][2], wl) for wl in FAMILIES[fam])
            reads = [f"fun wl => statusOn SerqGen.{ns}.program wl {fuel} {jj} == some {T.string(v)}"
                     for jj, v, _s in items]
            rest = "hrest"
            for _ in range(i):
                rest = f"(all_and _ _ _ {rest}).2"
            if i < len(items) - 1:
                rest = f"(all_and _ _ _ {rest}).1"
            out.append(f"/-- `{claim}` ({path}{', ' + _inputs(inputs) if inputs else ''}): {verdict} on every "
                       f"workload of `{fam}` (each in the claim's scope), each run ending with every session "
                       f"ended. The Python twin's runs take {total} moves in all, {fuel} the most: the fuel given, "
                       f"no more than they need. -/\n"
                       f"theorem {ident} :\n"
                       f"    allDone SerqGen.{ns}.program {fam} {fuel} = true ∧\n"
                       f"      allAre SerqGen.{ns}.program {fam} {fuel} {j} {T.string(verdict)} = true :=\n"
                       f"  have h := all_and (doneOn SerqGen.{ns}.program {fuel}) _ _ {c}_all\n"
                       f"  have hrest := h.2\n"
                       f"  ⟨h.1, {rest}⟩\n\n")
    out.append("end Serq.Papers\n")
    files[OUT] = "".join(out)
    return files


PROGRAMS_HEAD = """-- Generated by tools/gen_claims_proved.py: do not edit (docs/lean.md, *The papers' claims*).
import Serq.IR
import Serq.Exec
import Serq.Claims

/-!
# The papers' programs and families

What examples/papers/ClaimsProved.lean states: each program of examples/papers/ as `serq claims`
writes it (its claims' propositions over the whole family, `SerqGen.<Name>.claim_<claim>`, up to
500 sessions, are stated there and not proved here), the finite families of workloads, a family
too large for one declaration of the kernel cut in slices (Lean's memory in WebAssembly holds a
declaration of a few hundred runs: docs/lean.md, *Lean here*), and for each program and family
the one check its statements are read off (`check_<Name>_<family>`: the run ends, and each
claim's status is the one named), so that each workload's run is evaluated once.
-/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

"""

CHECKS_FILE = """-- Generated by tools/gen_claims_proved.py: do not edit (docs/lean.md, *The papers' claims*).
import Serq.Papers.Programs

/-! The papers' checks on their families, module {g} of {m}: each by `decide +kernel`. -/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

namespace Serq.Papers
open Serq
{body}
end Serq.Papers
"""

HEADER = """-- Generated by tools/gen_claims_proved.py: do not edit (docs/lean.md, *The papers' claims*).
{imports}
/-!
# The papers' claims, bounded

Each program of examples/papers/ (lean/Serq/Papers/Programs.lean, as `serq claims` writes it)
with, for each claim, the bounded statement: on every workload of a finite family, the run ends
with every session ended within the fuel, and the claim's status (`Serq.Outcome.status`) is the
one named, exactly (`allAre`: `held` is held, never out of scope, which is a status of its own).
For an `every iteration` claim held on a family, that is `EveryOn` on each of those complete paths;
for `some iteration`, a witness. Linking `allAre` to `Serq.Every` restricted to the family (through
`outcome` and `firstAt`) is not proved here.

Each statement is read off its program's and family's check (`check_<Name>_<family>_all`), proved
by `decide +kernel` slice by slice (lean/Serq/Papers/ChecksNN.lean); `all_and` and
`all_append_eq_true` (lean/Serq/Claims.lean) take the statement from the check and the family
from its slices. Every statement was evaluated true by the reference kernel (serq/ref/) before it
was written; `make check` checks every theorem (docs/lean.md).
-/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

"""

HELPERS = """/-- A workload's run ends, within `fuel`, with every session ended. -/
def doneOn (p : Program) (fuel : Nat) (wl : Workload) : Bool :=
  match run p wl fuel with
  | some r => r.done && drained r.machine
  | none => false

/-- Every workload's run ends, within `fuel`, with every session ended. -/
def allDone (p : Program) (ws : List Workload) (fuel : Nat) : Bool :=
  ws.all (doneOn p fuel)

"""


def main(argv=None) -> int:
    return write_or_check(argv, __doc__, OUT, render, ROOT, "gen_claims_proved.py",
                          parts=os.path.join(CHECKS, "*.lean"))


if __name__ == "__main__":
    sys.exit(main())
