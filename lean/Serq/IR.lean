import Serq.Num

/-!
# The fragment's IR

The IR of a serQ program inside the Lean fragment (docs/lean.md), type for type the Python
representation in `serq/ref/ir.py`. A constant in an expression, a register's initial value, the
renewal gap and an arrival time are rationals (`Q`, lean/Serq/Num.lean); a cap, a block, a count
and a trace row's fields are naturals; `none` is `inf` where a cap or a budget may be one. The
generator (`serq claims`) writes a program's linked IR as a value of `Program`.
-/
namespace Serq

/-- A binary operator: exact arithmetic over the rationals (`div` and `mod`, the interpreter's
fmod, by 0 fail the run: the interpreter's value is inf or NaN, no rational), comparisons and
connectives giving 1 or 0. -/
inductive BinOp where
  | add | sub | mul | div | mod | eq | ne | lt | le | gt | ge | and | or
  deriving DecidableEq, Repr

/-- A function of numbers; `floor`, `ceil`, `round` (half up) and `abs` are exact on rationals.
`reusable n b` is `floor((n - 1) / b) * b`, the whole blocks of `n` tokens but the last (a block
`b ≤ 0` fails the run). -/
inductive Fun where
  | min | max | sum | floor | ceil | round | abs | reusable
  deriving DecidableEq, Repr

/-- The engine's values (*Engines on devices*): `running.count` is `nres`, ... -/
inductive StepVar where
  | nres | ndec | kvb | kvp | preempted | admitted | ntok | npre | attn | queued
  deriving DecidableEq, Repr

/-- The observables of a pool or of the engine. -/
inductive ObsFn where
  | used | free | holders | queued | queue | busy | cachedin | budgetLeft | work
  deriving DecidableEq, Repr

/-- The aggregates a claim at end reads of an observation. -/
inductive AggFn where
  | total | count | largest | smallest | prefixTotal
  deriving DecidableEq, Repr

/-- An expression; its value is a rational. A constant (`num`) is the rational it writes (a
decimal `0.001` is `1/1000`; a negation `-e` is written `0 - e`). A context variable (`ctx`) is one
of `now`, `admission`, `decoding`, `remaining`, `waited`, `demand`, `served`, `arrived`, `present`
(the jobs at a ps stage, read by its capacity `Stage.phi`), `position` (a preemption key's
candidate's position in its hold, read by `Pool.preempt`) (Python: `CTX`). -/
inductive Expr where
  | num (v : Q)
  | attr (name : String)
  | ctx (name : String)
  | step (v : StepVar) (batch : Bool)
  | reg (name : String)
  | obs (f : ObsFn) (target : String)
  | agg (f : AggFn) (name : String)
  | not (e : Expr)
  | bin (op : BinOp) (l r : Expr)
  | ite (c a b : Expr)
  | fn (f : Fun) (args : List Expr)
  deriving Repr

inductive Mode where
  | prefill | decode
  deriving DecidableEq, Repr

/-- One pool of a hold: its pool (an index into `Program.pools`), units and reserve (amounts: a
value that is no natural fails the run);
`staticUnits` when the units read attributes and numbers only, `staticReserve` when the reserve
does: each such one is judged on its own when the hold joins (*Pools*). -/
structure HoldPool where
  pool : Nat
  units : Expr
  reserve : Option Expr
  staticUnits : Bool
  staticReserve : Bool
  deriving Repr

/-- A hold's `content (stream, parent, at)` (docs/reference/content.md): its tokens are those of
`stream`, whose first `common` (the clause's `at`, an amount) are those of `parent`; `parent` and
`common` are `none` for `content (stream)`, a stream of its own tokens. Each is read with the
session's attributes as the hold joins its queue (Python: `Content`). -/
structure Content where
  stream : Expr
  parent : Option Expr := none
  common : Option Expr := none
  deriving Repr

/-- A statement of a session. `drawA x` takes the workload's next value (any natural);
`holdS` waits in its first pool's queue, and its `cache` is `none` when it takes no part in the
prefix cache, its `content` `none` when it names none (on a content pool, what its blocks hold); `jobS stage work` is `run S (work)` on a ps or delay stage (an index into
`Program.stages`: a think or tool time), the session waiting while the stage serves `work`, a time
(a rational ≥ 0) (Python: `JobS`). -/
inductive Stmt where
  | setA (name : String) (e : Expr)
  | drawA (name : String)
  | observeA (name : String) (e : Expr)
  | branchS (c : Expr) (thn els : List Stmt)
  | whileS (c : Expr) (body : List Stmt)
  | turnS
  | holdS (pools : List HoldPool) (reuse cache : Option Expr) (body : List Stmt) (content : Option Content)
  | runS (mode : Mode) (work : Expr) (growing : Option Nat)
  | endS
  | jobS (stage : Nat) (work : Expr)
  deriving Repr

/-- A statement of the engine's iteration (*The iteration as a program*). -/
inductive IStmt where
  | serve (only : Option Expr) (keys : Option (List Expr)) (chunk : Option Expr)
  | admit (only gate chunk : Option Expr)
  | branch (c : Expr) (thn els : List IStmt)
  | set (name : String) (e : Expr)
  deriving Repr

/-- A pool: its cap (`none`: inf), block (0: none), its victim's keys `preempt by (keys)` (`none`:
`preempt none`; `preempt lifo` is `some [0 - admission]`, as the fragment writes `-e`), its queue's
keys (`[]`: fifo), whether the engine admits its queue, whether it is the engine's memory,
whether a preempted hold re-enters its queue as a newcomer (`requeue tail`; `false`: at its head,
`requeue head`), and whether a hold's unallocated reservation counts against later admissions and
growths (`reserve held`), and whether its cache is keyed by content and shared by every holder
(`cache content`: docs/reference/content.md; it has a block and a cap) (Python: `Pool`, the same
fields in the same order). -/
structure Pool where
  name : String
  cap : Option Nat
  block : Nat
  preempt : Option (List Expr)
  queueKeys : List Expr
  admitted : Bool
  memory : Bool
  requeueTail : Bool := false
  reserveHeld : Bool := false
  content : Bool := false
  deriving Repr

/-- The one step stage. `budget`, `chunk` and `granule` are amounts (naturals when read); `chunk`
reads 0 as no cap; `body` is the iteration, vLLM's two statements written out when the program has
none; `cost` is a time (a rational); `registers` are the `state` registers with their initial
values, rationals. -/
structure Engine where
  name : String
  budget : Option Expr
  chunk : Expr
  granule : Option Expr
  exclusive : Bool
  keys : List Expr
  body : List IStmt
  cost : Expr
  registers : List (String × Q)
  deriving Repr

/-- A ps stage beside the engine: every job present is served at once, each at rate
`phi(present) / present`, `phi` an expression reading the context variable `present`; `phi` is
`none` for a delay, every job at rate 1 (`ps(present)`, as the IR writes a delay) (Python:
`Stage`). -/
structure Stage where
  name : String
  phi : Option Expr
  deriving Repr

inductive Form where
  | every | someIter | atEnd
  deriving DecidableEq, Repr

structure Claim where
  name : String
  form : Form
  e : Expr
  given : Option Expr
  deriving Repr

/-- The arrival law: `batch(n)` (every session at 0), a constant `renewal(c)`, `poisson`, and
`closed(n)`, a population of `n` sessions at 0, each that ends followed at once by the workload's
next (Python: `Program.arrive`'s strings, by `LEAN_ARRIVALS`). -/
inductive Arrive where
  | batch | renewal | poisson | closed
  deriving DecidableEq, Repr

/-- A program: `gap` is a constant `renewal`'s gap, a rational above 0 (0 otherwise); `n` is
`batch`'s count or `closed`'s population (0 otherwise); `stages` are the ps and delay stages beside
the engine, which `Stmt.jobS` names by index (none by default). -/
structure Program where
  pools : List Pool
  engine : Engine
  arrive : Arrive
  gap : Q
  n : Nat
  trace : Bool
  init : List Stmt
  turn : List Stmt
  session : Option (List Stmt)
  server : List Stmt
  claims : List Claim
  stages : List Stage := []
  deriving Repr

/-- One trace row: a turn's `new`, `out`, `think` and `forced`, and what its prompt shares
(docs/reference/content.md, *Traces*): its `stream`, whose first `common` tokens are those of
stream `parent` (0 each when the trace does not say), naturals. -/
structure Row where
  new : Nat
  out : Nat
  think : Nat
  forced : Nat
  stream : Nat := 0
  parent : Nat := 0
  common : Nat := 0
  deriving DecidableEq, Repr

/-- One session of a concrete workload: when it arrives (a time, a rational), the values its
draws take (naturals), its rows. -/
structure SessionIn where
  arrival : Q
  draws : List Nat
  rows : List Row
  deriving DecidableEq, Repr

structure Workload where
  sessions : List SessionIn
  deriving DecidableEq, Repr

end Serq
