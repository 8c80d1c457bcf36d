import Serq.Exec

/-!
# Claims

What a claim means (the reference's *Claims*, docs/lean.md): a proposition over the paths of the
program's workload family. A path is a run of `Exec.run`; its iterations are the entries of
`Machine.path`, each with every claim over iterations read as the iteration starts, after its
batch is scheduled. `given` restricts the family to the workloads whose every session satisfies
it once its init has run.

The finite reading of one path, `outcome`, is the Python kernel's `serq/ref/claims.py`, twin
for twin; the propositions quantify it over the family.
-/
namespace Serq

/-! ## One path -/

/-- What a claim is found to be on one run (`serq run`'s report says the same): a failure and a
witness name the time (a rational) and the index of the iteration, or the end. -/
inductive Outcome where
  | held
  | failed (t : Q) (iteration : Nat)
  | witnessed (t : Q) (iteration : Nat)
  | notWitnessed
  | outOfScope (session : Nat)
  | notEvaluated
  deriving DecidableEq, Repr

/-- The first session whose attributes after init fail the claim's `given`. -/
def outOfScope (p : Program) (m : Machine) (c : Claim) : Option Nat :=
  match c.given with
  | none => none
  | some g => (m.given.find? fun (sid, attrs) => eval p m { attrs := some attrs, sid := some sid } g == some 0).map (·.1)

/-- The first iteration (its time and its index from 0) at which claim `j` reads `want`. -/
def firstAt (j : Nat) (want : Bool) : List (Q × List (Option Bool)) → Nat → Option (Q × Nat)
  | [], _ => none
  | (t, vals) :: rest, k => if vals.get? j == some (some want) then some (t, k) else firstAt j want rest (k + 1)

/-- Every session has ended. -/
def drained (m : Machine) : Bool := m.sess.all (!·.alive)

/-- Claim `j`'s outcome on a run. -/
def outcome (p : Program) (r : Run) (j : Nat) : Option Outcome := do
  let c ← p.claims.get? j
  let m := r.machine
  match outOfScope p m c with
  | some sid => pure (.outOfScope sid)
  | none =>
    match c.form with
    | .atEnd =>
      if !r.done || !drained m then pure .notEvaluated
      else do
        let v ← eval p m {} c.e
        pure (if v != 0 then .held else .failed m.now m.eng.iterations)
    | .every => pure (match firstAt j false m.path 0 with
      | some (t, k) => .failed t k
      | none => .held)
    | .someIter => pure (match firstAt j true m.path 0 with
      | some (t, k) => .witnessed t k
      | none => .notWitnessed)

def outcomes (p : Program) (r : Run) : List (Option Outcome) :=
  (List.range p.claims.length).map (outcome p r)

/-! ## The workload family -/

/-- A session's arrival as the program's arrival law allows it: 0 under `batch`, `(k + 1)` gaps
under a constant `renewal` (a rational gap), any time under `poisson` (the order of sessions is
their serial). -/
def arrivalOk (p : Program) (k : Nat) (s : SessionIn) : Prop :=
  match p.arrive with
  | .batch => s.arrival = 0
  | .renewal => s.arrival = Q.mul (Q.ofNat (k + 1)) p.gap
  | .poisson => True

/-- Arrivals in serial order, compared as rationals. -/
def ordered : List SessionIn → Prop
  | [] => True
  | [_] => True
  | a :: b :: rest => Q.le a.arrival b.arrival = true ∧ ordered (b :: rest)

/-- The family of a program within `bound` sessions: any number of sessions up to the bound, each
drawn attribute any natural number (its `draws`), arrivals as the law allows, and under a trace
session `k` replaying trace session `k` modulo the trace's. -/
def InFamily (p : Program) (trace : List (List Row)) (bound : Nat) (wl : Workload) : Prop :=
  wl.sessions.length ≤ bound ∧ ordered wl.sessions ∧
  ∀ k s, wl.sessions.get? k = some s →
    arrivalOk p k s ∧ (p.trace = true → trace ≠ [] ∧ some s.rows = trace.get? (k % trace.length))

/-- Every session of the run's workload satisfies the claim's `given`. -/
def Given (p : Program) (c : Claim) (r : Run) : Prop := outOfScope p r.machine c = none

/-- Claim `j` holds at every iteration of a run (a prefix of a path, by its fuel). -/
def EveryOn (r : Run) (j : Nat) : Prop := ∀ e, e ∈ r.machine.path → e.2.get? j = some (some true)

/-- `every iteration of S (e)`: on every path of every workload of the family that satisfies
`given`, every iteration. A path is every run of it by any fuel, so paths that never end count. -/
def Every (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  ∀ c, p.claims.get? j = some c →
  ∀ wl fuel r, InFamily p trace bound wl → run p wl fuel = some r → Given p c r → EveryOn r j

/-- `some iteration of S (e)`: some path of some workload of the family has an iteration at which
it holds (the workload must not draw: its draws are the family's, chosen here). -/
def SomeIter (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  ∃ c wl fuel r, p.claims.get? j = some c ∧ InFamily p trace bound wl ∧ run p wl fuel = some r ∧
    Given p c r ∧ ∃ e, e ∈ r.machine.path ∧ e.2.get? j = some (some true)

/-- `at end (e)`: every run of the family that ends with every session ended satisfies it. -/
def AtEnd (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  ∀ c, p.claims.get? j = some c →
  ∀ wl fuel r, InFamily p trace bound wl → run p wl fuel = some r → r.done = true → drained r.machine = true →
    Given p c r → ∃ v, eval p r.machine {} c.e = some v ∧ v ≠ 0

/-- Claim `j` as a proposition, by its form. -/
def Holds (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  match p.claims.get? j with
  | none => False
  | some c => match c.form with
    | .every => Every p trace bound j
    | .someIter => SomeIter p trace bound j
    | .atEnd => AtEnd p trace bound j

/-! ## Finite checks `decide` evaluates -/

/-- Claim `j` on one workload, within `fuel`: `true` when the run's outcome is `held` or
`witnessed` (or the claim is out of this workload's scope). -/
def checkOn (p : Program) (wl : Workload) (fuel j : Nat) : Bool :=
  match run p wl fuel with
  | none => false
  | some r => match outcome p r j with
    | some .held => true
    | some (.witnessed _ _) => true
    | some (.outOfScope _) => true
    | _ => false

/-- Claim `j` on each of a finite list of workloads (a family enumerated within a bound). -/
def checkAll (p : Program) (ws : List Workload) (fuel j : Nat) : Bool := ws.all (checkOn p · fuel j)

end Serq
