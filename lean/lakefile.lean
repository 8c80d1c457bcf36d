import Lake
open Lake DSL

-- serQ's Lean side (docs/lean.md). Lean 4 core only, no Mathlib.
package serq where

/-- The fragment's semantics: its numbers, IR, executable semantics and claims (`lake build`).
No proof of a scenario: building it checks the definitions alone. -/
@[default_target]
lean_lib Serq where
  roots := #[`Serq]

/-- The vLLM oracle theorems, one `decide +kernel` per recorded scenario stated
(`lake build SerqOracle`): minutes of kernel work, kept out of the library, in parts
(`Serq.Oracle.PartNN`). -/
lean_lib SerqOracle where
  globs := #[.andSubmodules `Serq.Oracle]

/-- The reference's theorems on the serving order (`lake build SerqServe`; tools/gen_serve_lean.py),
the family's slices in `Serq.Serve.SlicesNN`. -/
lean_lib SerqServe where
  globs := #[.andSubmodules `Serq.Serve]

/-- The papers' programs, families and checks (`lake build SerqPapers`; tools/gen_claims_proved.py),
which examples/papers/ClaimsProved.lean states the papers' claims from. -/
lean_lib SerqPapers where
  globs := #[.andSubmodules `Serq.Papers]
