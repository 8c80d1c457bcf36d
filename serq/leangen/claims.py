"""Each claim of a fragment program as a Lean proposition about the program's paths, in the terms
lean/Serq/Claims.lean defines (the reference's *Claims*: every workload of the program's family,
any number of sessions up to BOUND, the sessions that satisfy `given`)."""
from __future__ import annotations

from serq.leangen import terms as T
from serq.ref import ir as R

# the reference's *Claims*: "any number of sessions up to 500"
BOUND = 500

# the claim's form -> the proposition of lean/Serq/Claims.lean stating claim j of a program, given
# the program's trace (its sessions' rows; [] without a trace) and the bound
PROPS = {"every": "Serq.Every", "some": "Serq.SomeIter", "end": "Serq.AtEnd"}
READING = {
    "every": "it holds at the start of every iteration of every path of every workload of the program's family",
    "some": "it holds at the start of some iteration of some path of some workload of the program's family",
    "end": "it holds at the end of every path of every workload of the program's family at which every "
           "session has ended",
}


def statements(p: R.Program, trace: str) -> list[dict]:
    """One entry a claim, in the program's order: its name, a Lean identifier for it (`claim_NAME`,
    unique), what it says and the Lean proposition; `trace` names the program's trace in Lean."""
    out, seen = [], set()
    for j, c in enumerate(p.claims):
        name = T.ident(c.name, "claim_")
        while name in seen:
            name += "_"
        seen.add(name)
        given = "" if c.given is None else ", every session satisfying its `given`"
        out.append({
            "name": T.comment(c.name),
            "ident": name,
            "reading": f"{READING[c.form]} (up to {BOUND} sessions{given}).",
            "statement": f"{PROPS[c.form]} program {trace} {BOUND} {j}",
        })
    return out
