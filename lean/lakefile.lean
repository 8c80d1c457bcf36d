import Lake
open Lake DSL

-- serQ's Lean side (docs/lean.md). Lean 4 core only, no Mathlib.
package serq where

/-- The fragment's semantics: its numbers, IR, executable semantics and claims (`lake build`).
No proof of a scenario: building it checks the definitions alone. -/
@[default_target]
lean_lib Serq where
  roots := #[`Serq]

/-- The vLLM oracle theorems, one `decide +kernel` per recorded scenario (`lake build SerqOracle`):
minutes of kernel work, kept out of the library. -/
lean_lib SerqOracle where
  roots := #[`Serq.Oracle]

/-- The reference's theorems on the serving order (`lake build SerqServe`; tools/gen_serve_lean.py). -/
lean_lib SerqServe where
  roots := #[`Serq.Serve]
