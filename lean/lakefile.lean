import Lake
open Lake DSL

-- serQ's Lean side: the fragment's IR, its executable semantics and claims (docs/lean.md).
-- Lean 4 core only, no Mathlib.
package serq where

@[default_target]
lean_lib Serq where
