import Serq.Exec

/-!
# Claims

What a claim means (the reference's *Claims*, docs/lean.md): a proposition over the paths of the
program's workload family. A path is a run of `Exec.run`; its iterations are the entries of
`Machine.path`, each with every claim over iterations read as the iteration starts, after its
batch is scheduled (`claimValue`: `some (some b)`, or `none` where the reading failed). Each
claim is read on its own: a claim whose reading fails at an iteration after the one that decides
it is decided all the same, and one claim's failed reading does not touch another's outcome.
`given` restricts the family to the workloads whose every session satisfies it once its init has
run; a session whose `given` cannot be read (its reading fails) fails the claim's outcome, as a
failed reading of the claim itself does (`outOfScope`, `Scoped`).

The finite reading of one path, `outcome`, is the Python kernel's `serq/ref/claims.py`, twin
for twin (Python keeps each iteration's machine and reads claim `j` on it iteration by iteration
until it is decided; Lean keeps each reading, or its failure: the same outcome); the propositions
quantify it over the family.
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

/-- The sessions' `given`, read on each session's attributes after init in the order they were
recorded: `some (some sid)` for the first that reads 0, `some none` when none does, `none` when a
reading fails before any reads 0. -/
def givenScan (p : Program) (m : Machine) (g : Expr) : List (Nat × List (String × Q)) → Option (Option Nat)
  | [] => some none
  | (sid, attrs) :: rest =>
    match eval p m { attrs := some attrs, sid := some sid } g with
    | none => none
    | some v => if v == 0 then some (some sid) else givenScan p m g rest

/-- The first session whose attributes after init fail the claim's `given` (read 0): `some (some
sid)`; `some none` when every session satisfies it (or the claim has none); `none` when reading a
session's `given` failed first, which fails the claim's outcome (Python: `out_of_scope`, which
raises). -/
def outOfScope (p : Program) (m : Machine) (c : Claim) : Option (Option Nat) :=
  match c.given with
  | none => some none
  | some g => givenScan p m g m.given

/-- The first iteration (its time and its index, counting from `k`) at which claim `j` reads
`want`, scanning the path in order: `some (some (t, k))`; `some none` when no iteration does;
`none` when a reading of claim `j` failed before any iteration read `want` (Python: the loop of
`outcome`, where `claim_value` raises). -/
def firstAt (j : Nat) (want : Bool) : List (Q × List (Option (Option Bool))) → Nat → Option (Option (Q × Nat))
  | [], _ => some none
  | (t, vals) :: rest, k =>
    match vals[j]? with
    | some none => none
    | some (some (some b)) => if b == want then some (some (t, k)) else firstAt j want rest (k + 1)
    | _ => firstAt j want rest (k + 1)

/-- Every session has ended. -/
def drained (m : Machine) : Bool := m.sess.all (!·.alive)

/-- Claim `j`'s outcome on a run; `none` when the run gives it none: a session's `given` could not
be read (`outOfScope`), or the claim's reading failed at an iteration before one decided it (an
`every` claim read false, a `some` claim true), or at the end for a claim at end. A claim at end
is not evaluated while a session is live, and never under `closed`: the population never ends,
and the end of the workload's last session only cuts the path (Python: `outcome`). -/
def outcome (p : Program) (r : Run) (j : Nat) : Option Outcome := do
  let c ← p.claims[j]?
  let m := r.machine
  let out ← outOfScope p m c
  match out with
  | some sid => pure (.outOfScope sid)
  | none =>
    match c.form with
    | .atEnd =>
      if !r.done || !drained m || p.arrive == .closed then pure .notEvaluated
      else do
        let v ← eval p m {} c.e
        pure (if v != 0 then .held else .failed m.now m.eng.iterations)
    | .every => do
      let hit ← firstAt j false m.path 0
      pure (match hit with
        | some (t, k) => .failed t k
        | none => .held)
    | .someIter => do
      let hit ← firstAt j true m.path 0
      pure (match hit with
        | some (t, k) => .witnessed t k
        | none => .notWitnessed)

/-- Each claim's outcome, in the program's order; `none` for a claim whose reading failed, the
others' all the same (Python: `outcomes`, `None` for that claim). -/
def outcomes (p : Program) (r : Run) : List (Option Outcome) :=
  (List.range p.claims.length).map (outcome p r)

/-! ## The workload family -/

/-- A session's arrival as the program's arrival law allows it: 0 under `batch`, `(k + 1)` gaps
under a constant `renewal` (a rational gap), any time under `poisson` (the order of sessions is
their serial), 0 under `closed` (the population's first `n` arrive at 0, and each later one when a
session ends, its `arrival` unread). -/
def arrivalOk (p : Program) (k : Nat) (s : SessionIn) : Prop :=
  match p.arrive with
  | .batch => s.arrival = 0
  | .renewal => s.arrival = Q.mul (Q.ofNat (k + 1)) p.gap
  | .poisson => True
  | .closed => s.arrival = 0

/-- Arrivals in serial order, compared as rationals. -/
def ordered : List SessionIn → Prop
  | [] => True
  | [_] => True
  | a :: b :: rest => Q.le a.arrival b.arrival = true ∧ ordered (b :: rest)

/-- The family of a program within `bound` sessions: any number of sessions up to the bound (under
`closed(n)` at least `n`: a workload of fewer is no path of the program's, whose population is
`n`), each drawn attribute any natural number (its `draws`), arrivals as the law allows, and under
a trace session `k` replaying trace session `k` modulo the trace's. -/
def InFamily (p : Program) (trace : List (List Row)) (bound : Nat) (wl : Workload) : Prop :=
  wl.sessions.length ≤ bound ∧ (p.arrive = Arrive.closed → p.n ≤ wl.sessions.length) ∧
  ordered wl.sessions ∧
  ∀ k s, wl.sessions[k]? = some s →
    arrivalOk p k s ∧ (p.trace = true → trace ≠ [] ∧ some s.rows = trace[k % trace.length]?)

/-- Every session of the run's workload satisfies the claim's `given`, each reading made. -/
def Given (p : Program) (c : Claim) (r : Run) : Prop := outOfScope p r.machine c = some none

/-- `P` as the claim's `given` scopes it on a run: `P` when every session satisfies `given`; true
when a session is out of scope (the run's workload is not in the claim's family); false when a
session's `given` could not be read first (the claim's outcome fails: `outcome` is `none`). -/
def Scoped (p : Program) (c : Claim) (r : Run) (P : Prop) : Prop :=
  match outOfScope p r.machine c with
  | some none => P
  | some (some _) => True
  | none => False

/-- Claim `j` reads true at every iteration of a run (a prefix of a path, by its fuel): a reading
that is false or failed is not true. -/
def EveryOn (r : Run) (j : Nat) : Prop := ∀ e, e ∈ r.machine.path → e.2[j]? = some (some (some true))

/-- Claim `j` reads true at some iteration of a run, and no reading of it before that iteration
failed (the witness `outcome` names). -/
def SomeOn (r : Run) (j : Nat) : Prop := ∃ w, firstAt j true r.machine.path 0 = some (some w)

/-- No run of the family fails: the run of every workload, by every fuel, gives a machine. A run
error and a workload the kernel refuses (a value no rational is) are both `none`; either makes a
claim over every path false, as `serq verify` proves no claim over a family with one
(docs/verify.md): `Every` and `AtEnd` ask it, so that a program whose runs fail does not hold them
for want of a path. -/
def NoFailure (p : Program) (trace : List (List Row)) (bound : Nat) : Prop :=
  ∀ wl fuel, InFamily p trace bound wl → run p wl fuel ≠ none

/-- `every iteration of S (e)`: no run of the family fails (`NoFailure`), and on every path of
every workload of the family that satisfies `given`, every iteration (`Scoped`: a path whose `given`
cannot be read fails it). A path is every run of it by any fuel, so paths that never end count. -/
def Every (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  NoFailure p trace bound ∧
  ∀ c, p.claims[j]? = some c →
  ∀ wl fuel r, InFamily p trace bound wl → run p wl fuel = some r → Scoped p c r (EveryOn r j)

/-- `some iteration of S (e)`: some path of some workload of the family has an iteration at which
it holds, no reading of it failing before (`SomeOn`; the workload must not draw: its draws are the
family's, chosen here). -/
def SomeIter (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  ∃ c wl fuel r, p.claims[j]? = some c ∧ InFamily p trace bound wl ∧ run p wl fuel = some r ∧
    Given p c r ∧ SomeOn r j

/-- `at end (e)`: no run of the family fails (`NoFailure`), and every run of the family that ends
with every session ended satisfies it (`Scoped` by `given`). Under `closed` no path ends (the
population never ends: `outcome` gives `notEvaluated`), so it says no more than `NoFailure`. -/
def AtEnd (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  NoFailure p trace bound ∧
  ∀ c, p.claims[j]? = some c →
  ∀ wl fuel r, InFamily p trace bound wl → run p wl fuel = some r → r.done = true → drained r.machine = true →
    p.arrive ≠ Arrive.closed → Scoped p c r (∃ v, eval p r.machine {} c.e = some v ∧ v ≠ 0)

/-- Claim `j` as a proposition, by its form. -/
def Holds (p : Program) (trace : List (List Row)) (bound j : Nat) : Prop :=
  match p.claims[j]? with
  | none => False
  | some c => match c.form with
    | .every => Every p trace bound j
    | .someIter => SomeIter p trace bound j
    | .atEnd => AtEnd p trace bound j

/-! ## Finite checks `decide` evaluates -/

/-- An outcome's status, the word `serq run`'s report and the Python kernel's `Outcome.status`
give it: `held`, `failed`, `witnessed`, `not_witnessed`, `out_of_scope` or `not_evaluated`. A
statement names one, never two under one name (issue 27: `checkOn` once counted out of scope as
held). -/
def Outcome.status : Outcome → String
  | .held => "held"
  | .failed _ _ => "failed"
  | .witnessed _ _ => "witnessed"
  | .notWitnessed => "not_witnessed"
  | .outOfScope _ => "out_of_scope"
  | .notEvaluated => "not_evaluated"

/-- Claim `j`'s status on one workload's run within `fuel`; `none` when the run fails or the
claim's reading fails before an iteration decides it. -/
def statusOn (p : Program) (wl : Workload) (fuel j : Nat) : Option String :=
  match run p wl fuel with
  | none => none
  | some r => (outcome p r j).map Outcome.status

/-- Claim `j`'s status is `v` on every workload of a finite list (a family enumerated within a
bound). -/
def allAre (p : Program) (ws : List Workload) (fuel j : Nat) (v : String) : Bool :=
  ws.all fun wl => statusOn p wl fuel j == some v

/-- A check over a list holds over two lists appended when it holds over each: a family too large
for one `decide +kernel` is checked slice by slice, and the slices make the family (docs/lean.md,
*Lean here*). -/
theorem all_append_eq_true {α : Type} (f : α → Bool) (l₂ : List α) (h₂ : l₂.all f = true) :
    ∀ l₁ : List α, l₁.all f = true → (l₁ ++ l₂).all f = true
  | [], _ => h₂
  | a :: as, h₁ => by
    have h : f a = true ∧ as.all f = true := (Bool.and_eq_true _ _).mp h₁
    exact (Bool.and_eq_true _ _).mpr ⟨h.1, all_append_eq_true f l₂ h₂ as h.2⟩

/-- A check of two conjoined tests over a list is each test's check: a statement per claim is read
off one check of a family's runs, each run evaluated once for every claim. -/
theorem all_and {α : Type} (f g : α → Bool) :
    ∀ l : List α, l.all (fun x => f x && g x) = true → l.all f = true ∧ l.all g = true
  | [], _ => ⟨rfl, rfl⟩
  | a :: as, h => by
    have h' : (f a && g a) = true ∧ as.all (fun x => f x && g x) = true := (Bool.and_eq_true _ _).mp h
    have ha := (Bool.and_eq_true _ _).mp h'.1
    have ih := all_and f g as h'.2
    exact ⟨(Bool.and_eq_true _ _).mpr ⟨ha.1, ih.1⟩, (Bool.and_eq_true _ _).mpr ⟨ha.2, ih.2⟩⟩

end Serq
