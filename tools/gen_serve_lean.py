"""Write lean/Serq/Serve.lean and lean/Serq/Serve/: the reference's two theorems on the serving order (*Engines*:
"without a per-request chunk cap, serving in admission order is serving decode-first
(SerqLang.Serve.serve_eq_decode_first; a cap breaks it, chunk_cap_breaks_shape)"), as far as
`decide` decides them (docs/lean.md, *The serving order*).

    python tools/gen_serve_lean.py            # rewrite lean/Serq/Serve.lean and lean/Serq/Serve/
    python tools/gen_serve_lean.py --check    # exit 1 when a committed file is not current

The program is tests/data/serve/serve_order.sq, read four ways: served in admission order or
decode first, with no chunk cap or with a cap of 1 token on the admission. `serve_eq_decode_first`
is stated over a finite family of workloads (`family`) and proved by `decide +kernel` slice by slice
(Serve/SlicesNN.lean, a theorem within one declaration's memory each: tools/kernel_cost.py), the
family's theorem made of them: on each workload, the two orders give every request the same first
and last token times; the statement over the whole
family (every workload of up to 500 sessions, any draws and arrival times) is a `def` of the
proposition, open. `chunk_cap_breaks_shape` is one workload on which, with the cap, both runs end
and the two orders give a request different times (its decodes wait behind a prefill admitted
before it). Each
statement is evaluated by the reference kernel (serq/ref/, Exec.lean's Python twin) before it is
written, and each theorem's fuel is the moves its runs take there, no more. `make check` checks
every theorem (docs/lean.md, *Lean here*; `lake build SerqServe` where lake is).
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

OUT = os.path.join(ROOT, "lean", "Serq", "Serve.lean")
SLICES = os.path.join(ROOT, "lean", "Serq", "Serve")           # Serve/SliceNN.lean: the family's slices
PROGRAMS = os.path.join(SLICES, "Programs.lean")
SOURCE = "tests/data/serve/serve_order.sq"

# the four readings: namespace -> inputs
READINGS = {
    "Admission": {"order": 0},
    "DecodeFirst": {"order": 1},
    "CappedAdmission": {"order": 0, "acap": 1},
    "CappedDecodeFirst": {"order": 1, "acap": 1},
}


def family() -> list:
    """Prompts of 1 or 9 tokens (draw 0 or 8), outputs of 1 or 3 (0 or 2), on a tokens cap of 3 (a
    prefill of 9 does not fit one iteration, so requests prefill and decode side by side): 1 or 2
    sessions arriving at 0 or 1 in serial order, and 3 prompts of 9 arriving at once. The rest of
    three sessions at 0 or 1 (`wider`: 1.9M calls of the kernel's definitions, some 15 minutes of
    CPU in WebAssembly) is left to the Python twin, which tests/test_serve.py runs on it: `make
    check` checks this family in CI (docs/lean.md, *Lean here*)."""
    out = []
    for n in (1, 2, 3):
        for draws in itertools.product(itertools.product((0, 8), (0, 2)), repeat=n):
            for arr in itertools.combinations_with_replacement((0, 1), n):
                if n < 3 or (arr == (0, 0, 0) and all(d[0] == 8 for d in draws)):
                    out.append(R.Workload(tuple(R.SessionIn(t, d, ()) for t, d in zip(arr, draws))))
    return out


def wider() -> list:
    """Three sessions arriving at 0 or 1 in serial order, as `family` otherwise: the Python twin
    checks the statement on these too (tests/test_serve.py)."""
    out = []
    for draws in itertools.product(itertools.product((0, 8), (0, 2)), repeat=3):
        for arr in itertools.combinations_with_replacement((0, 1), 3):
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


def render() -> dict:
    """{path: text}: Serve/Programs.lean (the programs, the family and its slices), Serve/SlicesNN.lean
    (its slices' theorems, a module of a few minutes each) and Serve.lean (the family's theorem from
    its slices, the break)."""
    progs = {ns: ref.convert(load(ns)) for ns in READINGS}
    ws = family()
    fuel, total, fuel_break = check(progs, ws)
    costs = [kernel_cost.calls(progs["Admission"], wl) + kernel_cost.calls(progs["DecodeFirst"], wl) for wl in ws]
    cut = kernel_cost.modules(costs, kernel_cost.THEOREM_CALLS)       # a theorem a slice
    groups = kernel_cost.modules([sum(costs[i] for i in idx) for idx in cut])   # a module of slices
    out = [PROGRAMS_HEAD.format(n=len(cut), m=len(groups))]
    for ns, inputs in READINGS.items():
        source = SOURCE + " with " + " ".join(f"{k}={v}" for k, v in sorted(inputs.items()))
        text = generate(load(ns), source=source, ns=f"SerqGen.Serve{ns}").text
        out.append(f"-- {source}, as `serq claims` writes it\n")
        out.append(text[text.index("namespace "):] + "\n")
    out.append(BODY_HEAD.format(fuel=fuel))
    out.append(f"/-- {len(ws)} workloads (tools/gen_serve_lean.py, `family`). -/\n"
               f"def family : List Workload := {T.lines(ws, T.workload, 2)}\n\n")
    for k, idx in enumerate(cut, 1):
        out.append(f"/-- The family's workloads {idx[0] + 1} to {idx[-1] + 1} ({sum(costs[i] for i in idx)} calls "
                   f"of the kernel's definitions). -/\n"
                   f"def family_{k:02d} : List Workload := {T.lines([ws[i] for i in idx], T.workload, 2)}\n\n")
    appended = " ++ ".join(f"family_{k:02d}" for k in range(1, len(cut) + 1))
    out.append(f"/-- The slices, in order, are the family. -/\n"
               f"theorem family_slices : family = {appended} := rfl\n\n")
    out.append(f"/-- The workload that breaks it (tools/gen_serve_lean.py, `BREAK`). -/\n"
               f"def breaking : Workload := {T.workload(BREAK, 2)}\n\n")
    out.append("end SerqLang.Serve\n")
    files = {PROGRAMS: "".join(out)}
    for g, slice_ids in enumerate(groups, 1):
        body = "".join(SLICE.format(k=f"{k + 1:02d}", n=len(cut), count=len(cut[k]), first=cut[k][0] + 1,
                                    last=cut[k][-1] + 1, calls=sum(costs[i] for i in cut[k]))
                       for k in slice_ids)
        files[os.path.join(SLICES, f"Slices{g:02d}.lean")] = SLICES_FILE.format(g=f"{g:02d}", m=len(groups), body=body)
    # (l1 ++ l2) ++ l3 ...: each append's proof from the left one's and its slice's
    proof = "serve_eq_decode_first_slice_01"
    for k in range(2, len(cut) + 1):
        proof = f"all_append_eq_true sameOn _ serve_eq_decode_first_slice_{k:02d} _\n      ({proof})"
    files[OUT] = MAIN.format(
        imports="".join(f"import Serq.Serve.Slices{g:02d}\n" for g in range(1, len(groups) + 1)),
        n=len(ws), fuel=fuel, total=total, fuel_break=fuel_break, slices=len(cut), proof=proof)
    return files


PROGRAMS_HEAD = """-- Generated by tools/gen_serve_lean.py: do not edit (docs/lean.md, *The serving order*).
import Serq.IR
import Serq.Exec
import Serq.Claims

/-!
# The serving order: the programs and the family

What lean/Serq/Serve.lean's theorems read: tests/data/serve/serve_order.sq written four ways, its
running requests served in admission order (`advance running by (0 * …)`: every key ties) or
decode first (`by (decoding ? 0 : 1)`), with no chunk cap or with a cap of one token on the
admission; the finite family of workloads, and its {n} slices, each a theorem of
`Serq.Serve.SlicesNN` ({m} modules): the kernel keeps what it reduces for a whole declaration, and
the family in one does not fit Lean's memory in WebAssembly (docs/lean.md, *Lean here*).
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

/-- Both runs end within `fuel` with every session ended, and answer some request at different
times. -/
def differentTimes (a b : Program) (wl : Workload) (fuel : Nat) : Bool :=
  match run a wl fuel, run b wl fuel with
  | some ra, some rb => ra.done && drained ra.machine && rb.done && drained rb.machine &&
      tokenTimes (some ra) != tokenTimes (some rb)
  | _, _ => false

/-- Serving in admission order and decode first answer a workload's requests at the same times,
within the family's fuel (the most moves a run of it takes). -/
def sameOn (wl : Workload) : Bool :=
  sameTimes SerqGen.ServeAdmission.program SerqGen.ServeDecodeFirst.program wl {fuel}

"""

SLICES_FILE = """-- Generated by tools/gen_serve_lean.py: do not edit (docs/lean.md, *The serving order*).
import Serq.Serve.Programs

/-! The serving order's family, slices' theorems, module {g} of {m}. -/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

namespace SerqLang.Serve
open Serq
{body}
end SerqLang.Serve
"""

SLICE = """
/-- Slice {k} of {n}: the family's workloads {first} to {last} ({count}; {calls} calls of the kernel's
definitions). -/
theorem serve_eq_decode_first_slice_{k} : family_{k}.all sameOn = true := by
  decide +kernel
"""

MAIN = """-- Generated by tools/gen_serve_lean.py: do not edit (docs/lean.md, *The serving order*).
{imports}
/-!
# The serving order

The reference's *Engines*: "without a per-request chunk cap, serving in admission order is serving
decode-first (SerqLang.Serve.serve_eq_decode_first; a cap breaks it, chunk_cap_breaks_shape)". The
program (tests/data/serve/serve_order.sq) is written four ways in lean/Serq/Serve/Programs.lean:
its running requests served in admission order (`advance running by (0 * …)`: every key ties) or
decode first (`by (decoding ? 0 : 1)`), with no chunk cap or with a cap of one token on the
admission.

* `serve_eq_decode_first_family`: on every workload of a finite family, both orders give every
  request the same first and last token times: the family's {slices} slices each by `decide +kernel`
  (`Serq.Serve.SlicesNN`), and the family from its slices (`family_slices`, `all_append_eq_true`).
* `ServeEqDecodeFirst`: the same over the program's whole family (up to 500 sessions, any draws,
  any rational arrival times), a proposition stated and not proved: it is open.
* `chunk_cap_breaks_shape`: with the cap on the admission, one workload on which both runs end and
  the two orders give a request different times: a prompt of 9 admitted with one token goes on
  prefilling in front of a request admitted after it that decodes, and in admission order it takes
  the whole budget.

Every statement was evaluated true by the reference kernel (serq/ref/) before it was written; each
theorem's fuel is the moves its runs take there. `make check` checks every theorem (docs/lean.md).
-/

set_option maxRecDepth 100000
set_option maxHeartbeats 0

namespace SerqLang.Serve
open Serq

/-- Without a per-request chunk cap, serving in admission order is serving decode-first: on
every workload of `family` ({n} workloads) both orders answer every request at the same times. The
Python twin's runs take {total} moves in all, {fuel} the most: the fuel given. -/
theorem serve_eq_decode_first_family :
    family.all (fun wl => sameTimes SerqGen.ServeAdmission.program SerqGen.ServeDecodeFirst.program wl
      {fuel}) = true := by
  rw [family_slices]
  exact {proof}

/-- The statement over the program's whole family: every workload of up to 500 sessions, any
draws and rational arrival times, on which both runs end: open (docs/lean.md). -/
def ServeEqDecodeFirst : Prop :=
  ∀ wl, InFamily SerqGen.ServeAdmission.program [] 500 wl →
    ∀ fa ra fd rd, run SerqGen.ServeAdmission.program wl fa = some ra → ra.done = true →
      run SerqGen.ServeDecodeFirst.program wl fd = some rd → rd.done = true →
        tokenTimes (some ra) = tokenTimes (some rd)

/-- A per-request chunk cap breaks it: with a cap of one token on the admission, both runs of
`breaking` end with every session ended and answer its requests at different times. The Python
twin's runs take {fuel_break} moves the most: the fuel given. -/
theorem chunk_cap_breaks_shape :
    differentTimes SerqGen.ServeCappedAdmission.program SerqGen.ServeCappedDecodeFirst.program breaking
      {fuel_break} = true := by
  decide +kernel

end SerqLang.Serve
"""


def main(argv=None) -> int:
    return write_or_check(argv, __doc__, OUT, render, ROOT, "gen_serve_lean.py",
                          parts=os.path.join(SLICES, "*.lean"))


if __name__ == "__main__":
    sys.exit(main())
