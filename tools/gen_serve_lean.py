"""Write lean/Serq/Serve.lean: the reference's two theorems on the serving order (*Engines*:
"without a per-request chunk cap, serving in admission order is serving decode-first
(SerqLang.Serve.serve_eq_decode_first; a cap breaks it, chunk_cap_breaks_shape)"), as far as
`decide` decides them (docs/lean.md, *The serving order*).

    python tools/gen_serve_lean.py            # rewrite lean/Serq/Serve.lean
    python tools/gen_serve_lean.py --check    # exit 1 when the committed file is not current

The program is tests/data/serve/serve_order.sq, read four ways: served in admission order or
decode first, with no chunk cap or with a cap of 1 token on the admission. `serve_eq_decode_first`
is stated over a finite family of workloads (`FAMILY`) and proved by `decide +kernel`: on each, the
two orders give every request the same first and last token times; the statement over the whole
family (every workload of up to 500 sessions, any draws and arrival times) is a `def` of the
proposition, open. `chunk_cap_breaks_shape` is one workload on which, with the cap, the two orders
give a request different times (its decodes wait behind a prefill admitted before it). Each
statement is evaluated by the reference kernel (serq/ref/, Exec.lean's Python twin) before it is
written, and each theorem's fuel is the moves its runs take there, no more. Not compiled here (no
Lean toolchain): `make check` builds it where `lake` is installed (`lake build SerqServe`).
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

OUT = os.path.join(ROOT, "lean", "Serq", "Serve.lean")
SOURCE = "tests/data/serve/serve_order.sq"

# the four readings: namespace -> inputs
READINGS = {
    "Admission": {"order": 0},
    "DecodeFirst": {"order": 1},
    "CappedAdmission": {"order": 0, "acap": 1},
    "CappedDecodeFirst": {"order": 1, "acap": 1},
}


def family() -> list:
    """1 to 3 sessions, prompts of 1 or 9 tokens (draw 0 or 8), outputs of 1 or 3 (0 or 2),
    arriving at 0 or 1 in serial order, on a tokens cap of 3: a prefill of 9 does not fit one
    iteration, so requests prefill and decode side by side."""
    out = []
    for n in (1, 2, 3):
        for draws in itertools.product(itertools.product((0, 8), (0, 2)), repeat=n):
            for arr in itertools.combinations_with_replacement((0, 1), n):
                out.append(R.Workload(tuple(R.SessionIn(t, d, ()) for t, d in zip(arr, draws))))
    return out


# the workload that breaks it: a prompt of 9 admitted with 1 token, then a prompt of 1 at once,
# which decodes while the first still prefills; in admission order the first takes the budget
BREAK = R.Workload((R.SessionIn(0, (8, 0), ()), R.SessionIn(0, (0, 0), ())))


def load(ns: str):
    inputs = {k: float(v) for k, v in READINGS[ns].items()}
    return api.load(os.path.join(ROOT, SOURCE), inputs)


def token_times(p, wl) -> tuple:
    """Each request's (session, turn, first token time, last token time): Lean's `tokenTimes`."""
    res = ref.evaluate(p, wl)
    if not res.done or res.live:
        raise SystemExit(f"{SOURCE}: the run of {wl} does not end")
    return tuple((s, t, first, last) for s, t, first, last, *_ in res.requests)


def check(progs: dict, ws: list) -> tuple:
    """Stop unless each statement holds on the reference kernel; (the family's fuel, its moves in
    all, the break's fuel)."""
    a, d = progs["Admission"], progs["DecodeFirst"]
    for wl in ws:
        if token_times(a, wl) != token_times(d, wl):
            raise SystemExit(f"serve_eq_decode_first does not hold on {wl}")
    ca, cd = progs["CappedAdmission"], progs["CappedDecodeFirst"]
    if token_times(ca, BREAK) == token_times(cd, BREAK):
        raise SystemExit("chunk_cap_breaks_shape: the two orders agree on the workload")
    moves = [ref.moves(p, wl) for wl in ws for p in (a, d)]
    return max(moves), sum(moves), max(ref.moves(ca, BREAK), ref.moves(cd, BREAK))


def render() -> str:
    progs = {ns: ref.convert(load(ns)) for ns in READINGS}
    ws = family()
    fuel, total, fuel_break = check(progs, ws)
    out = [HEADER]
    for ns, inputs in READINGS.items():
        source = SOURCE + " with " + " ".join(f"{k}={v}" for k, v in sorted(inputs.items()))
        text = generate(load(ns), source=source, ns=f"SerqGen.Serve{ns}").text
        out.append(f"-- {source}, as `serq claims` writes it\n")
        out.append(text[text.index("namespace "):] + "\n")
    out.append(BODY_HEAD)
    out.append(f"/-- {len(ws)} workloads (tools/gen_serve_lean.py, `family`). -/\n"
               f"def family : List Workload := {T.lines(ws, T.workload, 2)}\n\n")
    out.append(f"/-- The workload that breaks it (tools/gen_serve_lean.py, `BREAK`). -/\n"
               f"def breaking : Workload := {T.workload(BREAK, 2)}\n\n")
    out.append(THEOREMS.format(n=len(ws), fuel=fuel, total=total, fuel_break=fuel_break))
    out.append("end SerqLang.Serve\n")
    return "".join(out)


HEADER = """-- Generated by tools/gen_serve_lean.py: do not edit (docs/lean.md, *The serving order*).
import Serq.IR
import Serq.Exec
import Serq.Claims

/-!
# The serving order

The reference's *Engines*: "without a per-request chunk cap, serving in admission order is serving
decode-first (SerqLang.Serve.serve_eq_decode_first; a cap breaks it, chunk_cap_breaks_shape)". The
program (tests/data/serve/serve_order.sq) is written four ways below: its running requests served
in admission order (`advance running by (0 * …)`: every key ties) or decode first (`by (decoding ?
0 : 1)`), with no chunk cap or with a cap of one token on the admission.

* `serve_eq_decode_first_family`: on every workload of a finite family, both orders give every
  request the same first and last token times (`decide +kernel`).
* `ServeEqDecodeFirst`: the same over the program's whole family (up to 500 sessions, any draws,
  any rational arrival times), a proposition stated and not proved: it is open.
* `chunk_cap_breaks_shape`: with the cap on the admission, one workload on which the two orders give
  a request different times: a prompt of 9 admitted with one token goes on prefilling in front of
  a request admitted after it that decodes, and in admission order it takes the whole budget.

Every statement was evaluated true by the reference kernel (serq/ref/) before it was written; each
theorem's fuel is the moves its runs take there. This file was NOT compiled: no Lean toolchain can
be installed where it was written.
-/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

"""

BODY_HEAD = """namespace SerqLang.Serve
open Serq

/-- Each request's (session, turn, first token time, last token time), in the order the requests
were answered; `none` when the run fails (Python: tools/gen_serve_lean.py, `token_times`). -/
def tokenTimes (r : Option Run) : Option (List (Nat × Nat × Option Q × Option Q)) :=
  r.map fun r => r.machine.requests.map fun (sid, turn, tr) => (sid, turn, tr.first, tr.last)

/-- Both runs end within `fuel` with every session ended, and answer every request at the same
times. -/
def sameTimes (a b : Program) (wl : Workload) (fuel : Nat) : Bool :=
  match run a wl fuel, run b wl fuel with
  | some ra, some rb => ra.done && drained ra.machine && rb.done && drained rb.machine &&
      tokenTimes (some ra) == tokenTimes (some rb)
  | _, _ => false

"""

THEOREMS = """/-- Without a per-request chunk cap, serving in admission order is serving decode-first: on
every workload of `family` ({n} workloads) both orders answer every request at the same times. The
Python twin's runs take {total} moves in all, {fuel} the most: the fuel given. -/
theorem serve_eq_decode_first_family :
    family.all (fun wl => sameTimes SerqGen.ServeAdmission.program SerqGen.ServeDecodeFirst.program wl
      {fuel}) = true := by
  decide +kernel

/-- The statement over the program's whole family: every workload of up to 500 sessions, any
draws and rational arrival times, on which both runs end: open (docs/lean.md). -/
def ServeEqDecodeFirst : Prop :=
  ∀ wl, InFamily SerqGen.ServeAdmission.program [] 500 wl →
    ∀ fa ra fd rd, run SerqGen.ServeAdmission.program wl fa = some ra → ra.done = true →
      run SerqGen.ServeDecodeFirst.program wl fd = some rd → rd.done = true →
        tokenTimes (some ra) = tokenTimes (some rd)

/-- A per-request chunk cap breaks it: with a cap of one token on the admission, the two orders
answer the requests of `breaking` at different times. The Python twin's runs take {fuel_break} moves
the most: the fuel given. -/
theorem chunk_cap_breaks_shape :
    tokenTimes (run SerqGen.ServeCappedAdmission.program breaking {fuel_break}) ≠
      tokenTimes (run SerqGen.ServeCappedDecodeFirst.program breaking {fuel_break}) := by
  decide +kernel

"""


def main(argv=None) -> int:
    return write_or_check(argv, __doc__, OUT, render, ROOT, "gen_serve_lean.py")


if __name__ == "__main__":
    sys.exit(main())
