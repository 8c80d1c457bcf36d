"""Write examples/papers/ClaimsProved.lean: each claim of the papers' programs (examples/papers/), its
bounded statement over a finite family of workloads, proved by `decide +kernel` (docs/lean.md, *The
papers' claims*).

    python tools/gen_claims_proved.py            # rewrite examples/papers/ClaimsProved.lean
    python tools/gen_claims_proved.py --check    # exit 1 when the committed file is not current

The file includes each program as `serq claims` writes it (serq.leangen.generate: the program's
value and its claims' propositions over the whole family, up to 500 sessions), then states, for a
finite family of workloads (`FAMILIES`), that every run ends with every session ended within the
fuel and that the claim's outcome on it is the verdict `STATEMENTS` names. A statement is written
only where the reference kernel (serq/ref/, Exec.lean's Python twin) evaluates it true; otherwise
the script stops and says which workload differs. The file was not compiled here (no Lean
toolchain): `make check` compiles it where `lake` is installed.
"""
from __future__ import annotations

import itertools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from generated_file import write_or_check  # noqa: E402
from serq import api, ref  # noqa: E402
from serq.leangen import generate  # noqa: E402
from serq.leangen import terms as T  # noqa: E402
from serq.ref import ir as R  # noqa: E402

OUT = os.path.join(ROOT, "examples", "papers", "ClaimsProved.lean")


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


def render() -> str:
    progs = programs()
    verify(progs)
    out = [HEADER]
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
    for path, inputs, ns, claim, verdict, fam in STATEMENTS:
        j = [c.name for c in progs[ns][2].claims].index(claim)
        ident = T.ident(f"{ns}_{claim}_{verdict}_{fam}")
        fuel = fuel_of(progs, ns, fam)
        total = sum(ref.moves(progs[ns][2], wl) for wl in FAMILIES[fam])
        out.append(f"/-- `{claim}` ({path}{', ' + _inputs(inputs) if inputs else ''}): {verdict} on every "
                   f"workload of `{fam}` (each in the claim's scope), each run ending with every session "
                   f"ended. The Python twin's runs take {total} moves in all, {fuel} the most: the fuel given, "
                   f"no more than they need. -/\n"
                   f"theorem {ident} :\n"
                   f"    allDone SerqGen.{ns}.program {fam} {fuel} = true ∧\n"
                   f"      allAre SerqGen.{ns}.program {fam} {fuel} {j} {T.string(verdict)} = true := by\n"
                   f"  decide +kernel\n\n")
    out.append("end Serq.Papers\n")
    return "".join(out)


HEADER = """-- Generated by tools/gen_claims_proved.py: do not edit (docs/lean.md, *The papers' claims*).
import Serq.IR
import Serq.Exec
import Serq.Claims

/-!
# The papers' claims, bounded

Each program of examples/papers/ as `serq claims` writes it (its claims' propositions over the
whole family, `SerqGen.<Name>.claim_<claim>`, up to 500 sessions, are stated there and not proved
here), then, for each claim, the bounded statement: on every workload of a finite family, the run
ends with every session ended within the fuel, and the claim's status (`Serq.Outcome.status`) is
the one named, exactly (`allAre`: `held` is held, never out of scope, which is a status of its own).
For an `every iteration` claim held on a family, that is `EveryOn` on each of those complete paths;
for `some iteration`, a witness. Linking `allAre` to `Serq.Every` restricted to the family (through
`outcome` and `firstAt`) is not proved here.

Every statement was evaluated true by the reference kernel (serq/ref/) before it was written.
This file was NOT compiled: no Lean toolchain can be installed where it was written.
-/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

"""

HELPERS = """/-- Every workload's run ends, within `fuel`, with every session ended. -/
def allDone (p : Program) (ws : List Workload) (fuel : Nat) : Bool :=
  ws.all fun wl => match run p wl fuel with
    | some r => r.done && drained r.machine
    | none => false
"""


def main(argv=None) -> int:
    return write_or_check(argv, __doc__, OUT, render, ROOT, "gen_claims_proved.py")


if __name__ == "__main__":
    sys.exit(main())
