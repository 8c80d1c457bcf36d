"""Each claim's outcome on the path the kernel ran (*Claims*), the finite reading of
lean/Serq/Claims.lean: an `every iteration` claim holds, or fails at its first failing iteration; a
`some iteration` claim is witnessed at its first satisfying one, or not witnessed; a claim at end
holds or fails, and is not evaluated when sessions are still live; a session that fails `given`
puts the claim out of scope."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from serq.ref import exec as X
from serq.ref import ir as R


@dataclass(frozen=True)
class Outcome:
    status: str                  # held | failed | witnessed | not_witnessed | out_of_scope | not_evaluated
    at: Optional[int] = None     # the time of the iteration (or the end) it names
    iteration: Optional[int] = None  # that iteration's index, from 0
    session: Optional[int] = None    # the session that put it out of scope


def out_of_scope(p: R.Program, m: X.Machine, c: R.Claim) -> Optional[int]:
    """The first session whose attributes after init fail `given`, or None."""
    if c.given is None:
        return None
    for sid, attrs in m.given:
        if X.eval_expr(p, m, X.Env(attrs, sid), c.given) == 0:
            return sid
    return None


def outcome(p: R.Program, run: X.Run, j: int) -> Outcome:
    m = run.machine
    c = p.claims[j]
    sid = out_of_scope(p, m, c)
    if sid is not None:
        return Outcome("out_of_scope", session=sid)
    if c.form == "end":
        # a closed population never ends: its last workload session's end only cuts the path
        if not run.done or any(s.alive for s in m.sess) or p.arrive == "closed":
            return Outcome("not_evaluated")
        ok = X.eval_expr(p, m, X.Env(), c.e) != 0
        return Outcome("held" if ok else "failed", at=m.now)
    want = c.form == "some"  # the value that decides the claim at an iteration
    for k, (t, at) in enumerate(m.path):
        if X.claim_value(p, at, j) == want:
            return Outcome("witnessed" if want else "failed", at=t, iteration=k)
    return Outcome("not_witnessed" if want else "held")


def outcomes(p: R.Program, run: X.Run) -> dict:
    """Each claim's outcome, or None where reading it failed (a division by 0, F016): that claim
    alone (Lean: `none` for it)."""
    out = {}
    for j, c in enumerate(p.claims):
        try:
            out[c.name] = outcome(p, run, j)
        except X.KernelError:
            out[c.name] = None
    return out
