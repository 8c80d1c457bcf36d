import Serq.IR

/-!
# The executable semantics

A machine and its step, definition for definition the Python reference kernel
`serq/ref/exec.py` (docs/lean.md has the table of twins). Every definition is total: recursion
is structural (on a list or an expression) or on an explicit `fuel`, so `decide` can evaluate a
run. Values and times are rationals (`Q`, lean/Serq/Num.lean), computed exactly: `7 / 2` is 7/2,
`2 - 5` is -3, a decimal cost is the rational it writes. Amounts (units, tokens, a reserve, the
tokens cap, a chunk, a granule) and counts (sessions, iterations, sequence numbers) are naturals,
and a value read as an amount goes through `amount`. Where no rational is the interpreter's value
(a division or fmod by 0, `reusable` of a block ≤ 0) or no natural is the amount (a fraction of a
token, a negative one) the run fails (`none`) rather than round (the reference's *Amounts and
indices*). `Option` is the result where the program may fail at run time (an attribute read before
it is set, a guard that is not 0 or 1) or the fuel may run out: `none`.

Orders follow the reference's *Ties*: events by time then the order they were scheduled,
sessions in the order they became ready, an engine's iteration starting once no other event is
pending at its instant (*Events and settling*). A ps or delay stage beside the engine (`PsSt`)
serves its jobs (a session's think or tool time, `Stmt.jobS`) all at once in virtual time, the
event of its next end set anew whenever its jobs change (*Stages*).
-/
namespace Serq

/-! ## Small helpers (Python: tuples and their builtins) -/

/-- The value of a name in a list of pairs (Python: `lookup`): a count (`Nat`) or a value (`Q`). -/
def lookup {α β : Type} [BEq α] (k : α) : List (α × β) → Option β
  | [] => none
  | (k', v) :: rest => if k' == k then some v else lookup k rest

/-- The pairs with `k` set to `v`, at the end (Python: `assign`). -/
def assign {α β : Type} [BEq α] (ps : List (α × β)) (k : α) (v : β) : List (α × β) :=
  ps.filter (fun p => !(p.1 == k)) ++ [(k, v)]

/-- The list with its `i`-th element replaced (Python: `put`). -/
def put {α : Type} : List α → Nat → α → List α
  | [], _, _ => []
  | _ :: xs, 0, v => v :: xs
  | x :: xs, i + 1, v => x :: put xs i v

/-- Insert `x` into a sorted list, after the elements `before` says go first. -/
def insertBy {α : Type} (before : α → α → Bool) (x : α) : List α → List α
  | [] => [x]
  | y :: ys => if before y x then y :: insertBy before x ys else x :: y :: ys

/-- A stable sort by `lt` (Python: `sorted`): an element goes after a later one only when that
one is strictly less. -/
def sortBy {α : Type} (lt : α → α → Bool) : List α → List α
  | [] => []
  | x :: xs => insertBy lt x (sortBy lt xs)

/-- Whether `f` holds of some element, the elements read in order until one does (Python: `any`
over a generator). Core's `List.anyM` is not used: a toolchain may ship it without a body the
kernel can unfold, and `decide +kernel` must evaluate this. -/
def anyM {m : Type → Type} [Monad m] {α : Type} (f : α → m Bool) : List α → m Bool
  | [] => pure false
  | a :: as => do if (← f a) then pure true else anyM f as

/-- Lexicographic order on keys, values compared as rationals (Python: tuple comparison). -/
def lexLt : List Q → List Q → Bool
  | [], [] => false
  | [], _ :: _ => true
  | _ :: _, [] => false
  | a :: as, b :: bs => Q.lt a b || (a == b && lexLt as bs)

def roundUp (u b : Nat) : Nat := if b == 0 then u else (u + b - 1) / b * b

def roundDown (u b : Nat) : Nat := if b == 0 then u else u / b * b

/-- The least of two caps, `none` being inf. -/
def omin : Option Nat → Option Nat → Option Nat
  | none, b => b
  | a, none => a
  | some a, some b => some (min a b)

def sumList (xs : List Nat) : Nat := xs.foldl (· + ·) 0

/-! ## The machine -/

/-- A run on the engine: request id, session, mode, tokens left, growing pool, admission, and
the iteration that served it last (0: none). -/
structure Req where
  rid : Nat
  sid : Nat
  mode : Mode
  left : Nat
  growing : Option Nat
  adm : Nat
  it : Nat := 0
  deriving Repr

/-- One hold's allocation on one pool: its session, units, position, the prefix it consumed,
whether a growing run moved the position, and the hold's reserve on the pool, which
`reserve held` keeps; on a content pool, of a hold with a content, its blocks (ids, in order:
`blks`), that content's stream, and how many of its blocks are published (`nhash`, the first ones)
(Python: `Alloc`). -/
structure Alloc where
  sid : Nat
  units : Nat
  pos : Nat
  consumed : Nat
  advanced : Bool := false
  reserve : Nat := 0
  blks : Option (List Nat) := none
  stream : Q := 0
  nhash : Nat := 0
  deriving Repr

/-- A cached prefix: its owner (`none`: dead), units, release time (a rational) and release
order. -/
structure Entry where
  owner : Option Nat
  units : Nat
  t : Q
  seq : Nat
  deriving Repr

/-- A hold waiting in a queue: its session, joining order, the time it joined, and whether it goes
at the head (a preempted hold). -/
structure QItem where
  sid : Nat
  seq : Nat
  t : Q
  head : Bool
  deriving Repr

/-- A pool's state: its used units, allocations in admission order, cached entries, queue; a content
pool's (docs/reference/content.md) published blocks, `(key, block id)` in the order they were
published (a key's oldest first; a key is a block's origin and index, `blockKey`), the cached blocks
no holder references in eviction order (vLLM's free queue), and the last block id given (Python:
`PoolSt`). -/
structure PoolSt where
  used : Nat := 0
  allocs : List Alloc := []
  entries : List Entry := []
  queue : List QItem := []
  table : List ((Q × Nat) × Nat) := []
  freeQ : List Nat := []
  nextBlk : Nat := 0
  deriving Repr

/-- What a request did: its start, first and last token times (rationals), preemptions, hit (the
units its first admission found cached), its output tokens (each prefill's sampled one and each
decode token). -/
structure TurnRec where
  start : Q
  first : Option Q := none
  pf : Option Q := none
  last : Option Q := none
  preemptions : Nat := 0
  cached : Option Nat := none
  ntok : Nat := 0
  deriving Repr

/-- A frame of a session's continuation; the top of the stack is the list's last. `scope h` is
the end of the hold `h`'s body. -/
inductive Frame where
  | blk (stmts : List Stmt)
  | loop (c : Expr) (body : List Stmt)
  | scope (h : Stmt)
  | turnGo (row : Option Row)
  | turnEnd
  | given
  deriving Repr

/-- A session: its attributes (values, rationals), its continuation, and what its workload gives
it (trace rows, draws). -/
structure Sess where
  sid : Nat
  attrs : List (String × Q)
  cont : List Frame
  rows : List Row := []
  rowI : Nat := 0
  draws : List Nat := []
  drawI : Nat := 0
  turnIdx : Nat := 0
  engAdm : Nat := 0
  hold : Option Stmt := none
  held : Bool := false
  retry : Option Nat := none
  atRun : Option Nat := none
  turnRec : Option TurnRec := none
  alive : Bool := true
  /-- the ps stage it is a job at -/
  atStage : Option Nat := none
  /-- its preempted hold re-enters its queue as a newcomer (`requeue tail`), not at its head -/
  tail : Bool := false
  /-- the stream its latest hold with a content named (a content pool's `cachedin`) -/
  stream : Option Q := none
  deriving Repr

/-- The iteration being planned. -/
structure Plan where
  budget : Option Nat
  chunk : Option Nat
  granule : Option Nat
  admitCap : Option Nat := none
  stop : Bool := false
  noAdmit : Bool := false
  batch : List (Nat × Nat) := []
  just : List Nat := []
  deriving Repr

structure Eng where
  reqs : List Req := []
  busy : Bool := false
  want : Bool := false
  servedTotal : Nat := 0
  admSeq : Nat := 0
  iterNo : Nat := 0
  iterations : Nat := 0
  regs : List (String × Q) := []
  vars : List (StepVar × Nat) := []
  bvars : List (StepVar × Nat) := []
  plan : Option Plan := none
  batch : List (Nat × Nat) := []
  deriving Repr

/-- An event's kind: a session's arrival, a think time's end, the iteration's end, a ps stage's
next end (its index) (Python: the tuple's `"arrive"`, `"wake"`, `"end"`, `"stage"`). -/
inductive EvKind where
  | arrive (k : Nat)
  | wake (sid : Nat)
  | iterEnd
  | stage (i : Nat)
  deriving Repr

/-- An event: its time (a rational), the order it was scheduled, its kind. -/
structure Event where
  t : Q
  seq : Nat
  kind : EvKind
  deriving Repr

/-- A ps stage's state (*Stages*): its virtual time `v`, the work each present job has received,
as of `last`, each job's rate since, and its jobs (finish tag, start order, session) in the order
they started; `ev` the sequence number of the event set for the next end, `started` the jobs
started so far. Times and work are rationals (Python: `PsSt`). -/
structure PsSt where
  v : Q := 0
  last : Q := 0
  rate : Q := 0
  jobs : List (Q × Nat × Nat) := []
  ev : Option Nat := none
  started : Nat := 0
  deriving Repr

/-- The machine: the time (a rational), the pending events, the ready sessions, each session,
each pool and the engine; `obs` holds (name, value, time, session, turn), `path` each iteration's
time and each claim's reading at it (`claimValue`: its value, `none` for a claim at end, or the
outer `none` when the reading failed), `given` each session's attributes after init, `ps` each ps
stage's state (one per `Program.stages`), `streams` each content stream named so far with its
definition `(parent, at)`, `at` 0 for a stream of its own tokens. -/
structure Machine where
  now : Q
  events : List Event
  seq : Nat
  ready : List Nat
  sess : List Sess
  pools : List PoolSt
  eng : Eng
  wl : Workload
  relSeq : Nat := 0
  joinSeq : Nat := 0
  ridSeq : Nat := 0
  arrived : Nat := 0
  obs : List (String × Q × Q × Nat × Nat) := []
  path : List (Q × List (Option (Option Bool))) := []
  given : List (Nat × List (String × Q)) := []
  requests : List (Nat × Nat × TurnRec) := []
  ps : List PsSt := []
  streams : List (Q × Q × Nat) := []
  client : List (String × Q) := []
  deriving Repr

/-- What an expression reads besides the machine: a session's attributes and id, the moment's
context variables. -/
structure Env where
  attrs : Option (List (String × Q)) := none
  sid : Option Nat := none
  x : List (String × Q) := []
  /-- an `each at most`: the residents as the iteration started -/
  start : Bool := false

def sessEnv (m : Machine) (sid : Nat) (x : List (String × Q) := []) : Env :=
  { attrs := (m.sess[sid]?).map (·.attrs), sid := some sid, x := x }

def setSess (m : Machine) (s : Sess) : Machine := { m with sess := put m.sess s.sid s }

def setPool (m : Machine) (i : Nat) (st : PoolSt) : Machine := { m with pools := put m.pools i st }

def setPlan (m : Machine) (f : Plan → Plan) : Machine :=
  { m with eng := { m.eng with plan := m.eng.plan.map f } }

def setVar (m : Machine) (v : StepVar) (n : Nat) : Machine :=
  { m with eng := { m.eng with vars := assign m.eng.vars v n } }

/-- Schedule an event, after every event at or before its time. -/
def schedule (m : Machine) (t : Q) (k : EvKind) : Machine :=
  { m with seq := m.seq + 1,
           events := insertBy (fun a b => Q.le a.t b.t) { t := t, seq := m.seq + 1, kind := k } m.events }

def wake (m : Machine) (sid : Nat) : Machine := { m with ready := m.ready ++ [sid] }

def want (m : Machine) : Machine := { m with eng := { m.eng with want := true } }

def findReq (m : Machine) (rid : Nat) : Option Req := m.eng.reqs.find? (·.rid == rid)

def findAlloc (m : Machine) (pool sid : Nat) : Option Alloc :=
  (m.pools[pool]?).bind fun st => st.allocs.find? (·.sid == sid)

def setAlloc (m : Machine) (pool : Nat) (a : Alloc) : Machine :=
  match m.pools[pool]? with
  | none => m
  | some st => setPool m pool { st with allocs := st.allocs.map fun b => if b.sid == a.sid then a else b }

/-- The units cached: the entries', and a content pool's free queue's blocks of `b` units. -/
def cachedUnits (st : PoolSt) (b : Nat) : Nat := sumList (st.entries.map (·.units)) + st.freeQ.length * b

def poolIndex (p : Program) (name : String) : Option Nat :=
  let rec go : List Pool → Nat → Option Nat
    | [], _ => none
    | q :: qs, i => if q.name == name then some i else go qs (i + 1)
  go p.pools 0

/-! ## Content streams and blocks (docs/reference/content.md) -/

/-- The stream whose own token is at position `pos` of stream `s`, within `fuel` links (the table
has no cycle: its length and one more always suffice) (Python: `origin`). -/
def origin (streams : List (Q × Q × Nat)) (pos : Nat) : Nat → Q → Q
  | 0, s => s
  | fuel + 1, s =>
    match lookup s streams with
    | some (k, n) => if pos < n then origin streams pos fuel k else s
    | none => s

/-- Block `j`'s key, of `b` units a block: the origin of its last position, and `j` (vLLM's chained
hash: two streams agree on the block and on every block before it exactly when these agree)
(Python: `block_key`). -/
def blockKey (streams : List (Q × Q × Nat)) (stream : Q) (j b : Nat) : Q × Nat :=
  (origin streams ((j + 1) * b - 1) (streams.length + 1) stream, j)

/-- The longest run of published blocks of `stream` from block `j`, each key's oldest (the table's
first), of at most `limit` units in all (`none`: any number); `fuel` the table's length bounds
it, its keys differing in their index (Python: `hit_run`). -/
def hitRun (streams : List (Q × Q × Nat)) (table : List ((Q × Nat) × Nat)) (stream : Q) (b : Nat)
    (limit : Option Nat) : Nat → Nat → List Nat
  | 0, _ => []
  | fuel + 1, j =>
    let within := match limit with
      | some l => decide ((j + 1) * b ≤ l)
      | none => true
    let key := blockKey streams stream j b
    if !within then []
    else match table.find? (fun e => e.1 == key) with
      | some e => e.2 :: hitRun streams table stream b limit fuel (j + 1)
      | none => []

/-- Whether a stream defined as `d` (its parent and where it leaves it) would begin with its own
tokens, `stream`: the chain of parents from `d`'s reaches it, within `fuel` links (Python:
`begins_with`). -/
def beginsWith (streams : List (Q × Q × Nat)) (stream : Q) : Nat → Q × Nat → Bool
  | 0, _ => false
  | fuel + 1, (s, n) =>
    if n == 0 then false
    else if s == stream then true
    else match lookup s streams with
      | some d => beginsWith streams stream fuel d
      | none => false

/-- Whether some allocation of the list references block `bid` (vLLM's `ref_cnt > 0`) (Python:
`blk_held`). -/
def blkHeld (allocs : List Alloc) (bid : Nat) : Bool :=
  allocs.any fun a => match a.blks with
    | some bs => bs.contains bid
    | none => false

/-- Evict from the front of the free queue, `b` units a block, until `over` units are freed: each
evicted block leaves the table. The free queue and the table left (Python: `evict_free`). -/
def evictFree (b over : Nat) (table : List ((Q × Nat) × Nat)) : List Nat → List Nat × List ((Q × Nat) × Nat)
  | [] => ([], table)
  | bid :: rest =>
    if over == 0 then (bid :: rest, table)
    else evictFree b (over - b) (table.filter (·.2 != bid)) rest

/-! ## Expressions -/

/-- Exact arithmetic over the rationals (Python: `eval_bin`): `div` is the quotient and `mod` the
interpreter's fmod; by 0 either is `none`, the interpreter's inf or NaN, never given a value (the
reference's *Amounts and indices*). Comparisons and connectives give 1 or 0. -/
def evalBin (op : BinOp) (l r : Q) : Option Q :=
  let b (x : Bool) : Option Q := some (if x then 1 else 0)
  match op with
  | .add => some (Q.add l r)
  | .sub => some (Q.sub l r)
  | .mul => some (Q.mul l r)
  | .div => Q.div l r
  | .mod => Q.fmod l r
  | .eq => b (l == r)
  | .ne => b (l != r)
  | .lt => b (Q.lt l r)
  | .le => b (Q.le l r)
  | .gt => b (Q.lt r l)
  | .ge => b (Q.le r l)
  | .and => b (l != 0 && r != 0)
  | .or => b (l != 0 || r != 0)

/-- The catalogue's functions on rationals (Python: `eval_fn`): `floor`, `ceil`, `round` (half up)
and `abs` exactly; `reusable n b` the whole blocks of `n` tokens but the last,
`floor((n - 1) / b) * b` (0 when `n < 1`), `none` for a block `b ≤ 0`, NaN to the interpreter. -/
def evalFn (f : Fun) (vs : List Q) : Option Q :=
  match f, vs with
  | .min, v :: rest => some (rest.foldl Q.min v)
  | .max, v :: rest => some (rest.foldl Q.max v)
  | .sum, _ => some (Q.sum vs)
  | .reusable, [n, b] =>
    if Q.le b 0 then none
    else if Q.le 1 n then do
      let t ← Q.div (Q.sub n 1) b
      pure (Q.mul (Q.floor t) b)
    else some 0
  | .floor, [v] => some (Q.floor v)
  | .ceil, [v] => some (Q.ceil v)
  | .round, [v] => some (Q.round v)
  | .abs, [v] => some (Q.abs v)
  | _, _ => none

/-- The natural an amount is (units, tokens, a reserve, a reuse, a cache, the tokens cap, a
chunk, a granule, a run's work): `none` for a negative one (the interpreter's run error, R007 or
R110) and for a fraction (refused: the kernel's units and tokens are whole, and it does not round
them) (Python: `amount`). -/
def amount (v : Q) : Option Nat := Q.toNat? v

/-- The tokens the iteration being planned has left, within the admission's `each at most`;
between iterations, the tokens cap (`budget`, evaluated when read). -/
def budgetLeftOf (m : Machine) (budget : Unit → Option Nat) : Option Nat :=
  match m.eng.plan with
  | some pl => omin pl.budget pl.admitCap
  | none => budget ()

def residentIds (p : Program) (m : Machine) : List Nat :=
  let fromPools := ((p.pools.zip m.pools).filter (·.1.admitted)).foldl (fun acc (_, st) => acc ++ st.allocs.map (·.sid)) []
  (m.eng.reqs.map (·.sid) ++ fromPools).eraseDups

def growingPos (m : Machine) (r : Req) : Nat :=
  match r.growing with
  | some g => ((findAlloc m g r.sid).map (·.pos)).getD 0
  | none => 0

/-- running.count, .decoding, .kv_decode, .kv_prefill and waiting.count as the residents stand. -/
def runningValues (p : Program) (m : Machine) : List (StepVar × Nat) :=
  let dec := m.eng.reqs.filter (·.mode == .decode)
  let pre := m.eng.reqs.filter (·.mode == .prefill)
  let queued := sumList (((p.pools.zip m.pools).filter (·.1.admitted)).map (·.2.queue.length))
  [(.nres, (residentIds p m).length), (.ndec, dec.length), (.kvb, sumList (dec.map (growingPos m))),
   (.kvp, sumList (pre.map (growingPos m))), (.queued, queued), (.preempted, 0), (.admitted, 0),
   (.ntok, 0), (.npre, 0), (.attn, 0)]

/-- An observable of a pool or of the engine, a count read as a value; `budget` evaluates the
tokens cap when read. -/
def evalObs (p : Program) (m : Machine) (env : Env) (f : ObsFn) (target : String)
    (budget : Unit → Option Nat) : Option Q :=
  if target == p.engine.name then
    match f with
    | .queue => some (Q.ofNat m.eng.reqs.length)
    | .busy => some (if m.eng.reqs.isEmpty then 0 else 1)
    | .work => some (Q.ofNat (sumList (m.eng.reqs.map (·.left))))
    | .budgetLeft => (budgetLeftOf m budget).map Q.ofNat
    | _ => none
  else do
    let i ← poolIndex p target
    let st ← m.pools[i]?
    let pool ← p.pools[i]?
    match f with
    | .used => some (Q.ofNat st.used)
    | .free => pool.cap.map (fun cap => Q.ofNat (cap - st.used))
    | .holders => some (Q.ofNat ((st.allocs.map (·.sid)).eraseDups.length))
    | .queued => some (Q.ofNat st.queue.length)
    | .cachedin =>
      if pool.content then
        -- the run of published blocks of the session's stream (content.md, *The hit*)
        match env.sid.bind (fun sid => (m.sess[sid]?).bind (·.stream)) with
        | none => some 0
        | some s => some (Q.ofNat ((hitRun m.streams st.table s pool.block none st.table.length 0).length * pool.block))
      else some (Q.ofNat (sumList ((st.entries.filter fun x => x.owner.isSome && x.owner == env.sid).map (·.units))))
    | _ => none

/-- The client's samples of each answered turn (*What the client sees*): an aggregate of one of
these names reads them, whatever the program observes (Python: `CLIENT_METRICS`, serq/ref/ir.py). -/
def clientMetrics : List String := ["ttft", "tpot", "response"]

/-- The client's samples a turn answered now records: its response; its ttft when its first token
is its last prefill's (no decode token); its tpot when it has an output token after the first
(Python: `answered`). -/
def answered (m : Machine) (tr : TurnRec) : List (String × Q) :=
  let first := if tr.first.isSome then tr.first else tr.pf
  let ttft := match tr.first, tr.pf with
    | none, some f => [("ttft", Q.sub f tr.start)]
    | _, _ => []
  let tpot := match first, tr.ntok with
    -- (the answer less the first token) / (ntok - 1), ntok - 1 = k + 1 >= 1
    | some f, k + 2 => let d := Q.sub m.now f; [("tpot", Q.norm d.num (d.den * (k + 1)))]
    | _, _ => []
  [("response", Q.sub m.now tr.start)] ++ ttft ++ tpot

/-- A claim at end's aggregate of an observation's values, or of the client's samples:
`largest` and `smallest` of none are 0. -/
def evalAgg (m : Machine) (f : AggFn) (name : String) : Q :=
  let vs := if clientMetrics.contains name then (m.client.filter (·.1 == name)).map (·.2)
    else (m.obs.filter (·.1 == name)).map (·.2.1)
  match f with
  | .total => Q.sum vs
  | .count => Q.ofNat vs.length
  | .largest => (match vs with
    | [] => 0
    | v :: rest => rest.foldl Q.max v)
  | .smallest => (match vs with
    | [] => 0
    | v :: rest => rest.foldl Q.min v)
  | .prefixTotal =>
    -- Σ_k (v_1 + … + v_k) over the values sorted ascending
    ((sortBy Q.lt vs).foldl (fun (acc : Q × Q) v => (Q.add acc.1 v, Q.add acc.2 (Q.add acc.1 v))) (0, 0)).2

/-- The value of an expression, a rational computed exactly; `fuel` bounds its depth. A count
(a step variable, an observable) is read as the rational it is (`Q.ofNat`). -/
def evalExpr (fuel : Nat) (p : Program) (m : Machine) (env : Env) (e : Expr) : Option Q :=
  match fuel with
  | 0 => none
  | fuel + 1 =>
    match e with
    | .num v => some v
    | .attr x => env.attrs.bind (lookup x)
    | .ctx x => if x == "now" then some m.now else lookup x env.x
    | .step v batch =>
      -- while an iteration is planned, a key, an only and a guard read the residents as they
      -- stand at that read (*The iteration as a program*); an `each at most` as it started
      if !batch && m.eng.plan.isSome && !env.start && (v == .nres || v == .ndec || v == .kvb || v == .kvp) then
        (lookup v (runningValues p m)).map Q.ofNat
      else
        let isBatch := batch && (v == .ndec || v == .kvb || v == .kvp)
        some (Q.ofNat ((lookup v (if isBatch then m.eng.bvars else m.eng.vars)).getD 0))
    | .reg x => lookup x m.eng.regs
    -- the tokens cap read as `budgetOf` reads it
    | .obs f target => evalObs p m env f target (fun _ => p.engine.budget.bind fun b => (evalExpr fuel p m {} b).bind amount)
    | .agg f x => some (evalAgg m f x)
    | .not a => do let v ← evalExpr fuel p m env a; pure (if v == 0 then 1 else 0)
    | .bin op l r => do
      let a ← evalExpr fuel p m env l
      let b ← evalExpr fuel p m env r
      evalBin op a b
    | .ite c a b => do
      let v ← evalExpr fuel p m env c
      if v != 0 then evalExpr fuel p m env a else evalExpr fuel p m env b
    | .fn f args => do
      let vs ← args.mapM (evalExpr fuel p m env)
      evalFn f vs

/-- Expressions are shallow: this much depth is every program's. -/
def exprFuel : Nat := 1000

def eval (p : Program) (m : Machine) (env : Env) (e : Expr) : Option Q := evalExpr exprFuel p m env e

/-- The engine's tokens cap, read now: an amount, so a number of tokens ≥ 0 (Python: `budget_of`);
`none` when the engine has none (Python: its callers test that first). -/
def budgetOf (p : Program) (m : Machine) : Option Nat := do
  let b ← p.engine.budget
  let v ← eval p m {} b
  amount v

/-- The tokens the iteration being planned has left, within the admission's `each at most`. -/
def budgetLeft (p : Program) (m : Machine) : Option Nat :=
  budgetLeftOf m (fun _ => budgetOf p m)

/-- A test has two answers (*Branching*): 0 or 1, else the run fails. -/
def testGuard (p : Program) (m : Machine) (env : Env) (e : Expr) : Option Bool := do
  let v ← eval p m env e
  if v == 1 then pure true else if v == 0 then pure false else none

/-! ## Pools -/

/-- What the holders reserved and have not allocated, which `reserve held` counts against the
pool's later admissions and growths: the sum of `reserve - units` (0 when below) (Python:
`held_extra`). -/
def heldExtra (p : Program) (m : Machine) (i : Nat) : Nat :=
  match p.pools[i]?, m.pools[i]? with
  | some pool, some st => if pool.reserveHeld then sumList (st.allocs.map fun a => a.reserve - a.units) else 0
  | _, _ => 0

/-- Room for `r` more units, the holders' unallocated reservations counted (`heldExtra`), less a
`credit` the asker may grow into (its own reservation: `grow`) (Python: `room_for`, whose `r` is
`r - credit`, which may be below 0). -/
def roomFor (p : Program) (m : Machine) (i r : Nat) (credit : Nat := 0) : Bool :=
  match (p.pools[i]?).bind (·.cap), m.pools[i]? with
  | some cap, some st => st.used + heldExtra p m i + r ≤ cap + credit
  | _, _ => true

/-- Evict one entry's `take` units (the entry goes when nothing is left of it). -/
def evictUnits (entries : List Entry) (e : Entry) (take : Nat) : List Entry :=
  entries.filterMap fun x =>
    if x.seq == e.seq then (if x.units - take > 0 then some { x with units := x.units - take } else none)
    else some x

/-- Evict cached entries least recently released first, per block from an entry's tail, until
allocations and cache fit (*Pools*); a content pool's cached blocks from the front of its free
queue (`evictFree`: content.md, *Eviction*). -/
def makeRoom (p : Program) (m : Machine) (i need : Nat) : Machine :=
  match (p.pools[i]?), m.pools[i]? with
  | some pool, some st =>
    let cap := pool.cap.getD (st.used + cachedUnits st pool.block + need)  -- no cap: nothing is over
    let over := st.used + cachedUnits st pool.block + need - cap
    let order := sortBy (fun a b => Q.lt a.t b.t || (a.t == b.t && a.seq < b.seq)) st.entries
    let evictOne (acc : List Entry × Nat) (e : Entry) : List Entry × Nat :=
      let (es, over) := acc
      if over == 0 then (es, 0)
      else
        let take := if pool.block != 0 && e.units > over then min e.units (roundUp over pool.block) else e.units
        (evictUnits es e take, over - take)
    if over == 0 then m
    else if pool.content then
      let (fq, table) := evictFree pool.block over st.table st.freeQ
      setPool m i { st with freeQ := fq, table := table }
    else setPool m i { st with entries := (order.foldl evictOne (st.entries, over)).1 }
  | _, _ => m

/-- At admission with a cache clause: at most `rho` of the own prefix, in blocks; the rest of
the entry stays cached, dead, with its age. -/
def consume (p : Program) (m : Machine) (i sid : Nat) (rho : Option Nat) (units : Nat) : Machine × Nat :=
  match p.pools[i]?, m.pools[i]? with
  | some pool, some st =>
    (match st.entries.find? (·.owner == some sid) with
    | none => (m, 0)
    | some e =>
      let take := roundDown (min (match rho with | none => e.units | some r => min r e.units) units) pool.block
      let rest := e.units - take
      let entries := st.entries.filterMap fun x =>
        if x.seq == e.seq then (if rest > 0 then some { x with owner := none, units := rest } else none) else some x
      (setPool m i { st with entries := entries }, take))
  | _, _ => (m, 0)

/-- A release caches its prefix in whole blocks; the session's previous prefix is dead. A content
pool's cache is no session's: nothing (its holds release by `freeBlocks`). -/
def putCache (p : Program) (m : Machine) (i sid units : Nat) : Machine :=
  match p.pools[i]?, m.pools[i]? with
  | some pool, some st =>
    let units := roundDown units pool.block
    if units == 0 || pool.content then m
    else
      let entries := (st.entries.map fun e => if e.owner == some sid then { e with owner := none } else e) ++
        [{ owner := some sid, units := units, t := m.now, seq := m.relSeq + 1 }]
      makeRoom p (setPool { m with relSeq := m.relSeq + 1 } i { st with entries := entries }) i 0
  | _, _ => m

/-- A hold's content, read as it joins (content.md, *Streams*): its stream, defined by the first
hold that names it as `(parent, at)`, `at` 0 for its own tokens (`content (C)`, or an `at` of 0); a
parent no hold has named is its own tokens from then on. The machine with the stream named, and
the stream; `none` when a reading fails, or the stream would begin with itself or is named with
another definition than its first (the interpreter's R045): a block's key, once read, never
changes (Python: `define_stream`). -/
def defineStream (p : Program) (m : Machine) (sid : Nat) (c : Content) : Option (Machine × Q) := do
  let env := sessEnv m sid
  let stream ← eval p m env c.stream
  let d : Q × Nat ← match c.parent, c.common with
    | some pe, some ce => do
      let n ← (eval p m env ce).bind amount
      if n == 0 then pure ((0 : Q), 0)
      else do
        let k ← eval p m env pe
        pure (k, n)
    | _, _ => pure ((0 : Q), 0)
  match lookup stream m.streams with
  | none =>
    if beginsWith m.streams stream (m.streams.length + 1) d then none
    else
      let streams := m.streams ++ [(stream, d)]
      let streams := if d.2 != 0 && (lookup d.1 streams).isNone then streams ++ [(d.1, ((0 : Q), 0))] else streams
      pure ({ m with streams := streams }, stream)
  | some old => if old == d then pure (m, stream) else none

/-- The whole blocks of the session's allocation on pool `i` below `upto` are published, keyed by
content (`blockKey`) and visible to every hold from now on: vLLM caches a block once the step that
fills it is scheduled (content.md, *Publishing*) (Python: `publish`). -/
def publish (p : Program) (m : Machine) (i sid upto : Nat) : Machine :=
  match p.pools[i]?, m.pools[i]?, findAlloc m i sid with
  | some pool, some st, some a =>
    match a.blks with
    | none => m
    | some blks =>
      let k := (min upto a.units) / pool.block
      if k ≤ a.nhash then m
      else
        let keyed := ((List.range (k - a.nhash)).map (· + a.nhash)).filterMap fun j =>
          (blks[j]?).map fun bid => (blockKey m.streams a.stream j pool.block, bid)
        setAlloc (setPool m i { st with table := st.table ++ keyed }) i { a with nhash := k }
  | _, _, _ => m

/-- A content hold's release on pool `i`: its blocks given back, the last first (vLLM's `free`);
one another holder references stays as it is; one no holder references counts no more in `used`,
and is cached at the back of the free queue when it is published and below `keep`, else forgotten
(content.md, *Release*) (Python: `free_blocks`). -/
def freeBlocks (p : Program) (m : Machine) (i : Nat) (a : Alloc) (keep : Nat) : Machine :=
  match p.pools[i]?, m.pools[i]? with
  | some pool, some st =>
    let b := pool.block
    let allocs := st.allocs.filter (·.sid != a.sid)
    let blks := a.blks.getD []
    let back (acc : Nat × List Nat × List ((Q × Nat) × Nat)) (x : Nat × Nat) :
        Nat × List Nat × List ((Q × Nat) × Nat) :=
      let (used, fq, table) := acc
      let (bid, j) := x
      if blkHeld allocs bid then acc
      else
        let keyed := table.any (·.2 == bid)
        if keyed && decide ((j + 1) * b ≤ keep) then (used - b, fq ++ [bid], table)
        else if keyed then (used - b, fq, table.filter (·.2 != bid))
        else (used - b, fq, table)
    let (used, fq, table) := (blks.zip (List.range blks.length)).reverse.foldl back (st.used, st.freeQ, st.table)
    setPool m i { st with allocs := allocs, used := used, freeQ := fq, table := table }
  | _, _ => m

/-- Admission on a content pool: the hit's blocks referenced (one no holder referenced leaves the
free queue and counts in `used` again), the rest of the units new blocks, room made for them from
the free queue's front (content.md, *Rules*); the allocation's position is its hit (Python:
`alloc_content`). -/
def allocContent (p : Program) (m : Machine) (i sid units reserve : Nat) (stream : Q) (hit : List Nat) : Machine :=
  match p.pools[i]?, m.pools[i]? with
  | some pool, some st =>
    let b := pool.block
    let back := hit.filter fun x => !blkHeld st.allocs x
    let m := setPool m i { st with freeQ := st.freeQ.filter (fun x => !back.contains x),
                                   used := st.used + back.length * b }
    let fresh := units - hit.length * b
    let m := makeRoom p m i fresh
    match m.pools[i]? with
    | none => m
    | some st =>
      let n := fresh / b
      let a : Alloc := { sid := sid, units := units, pos := hit.length * b, consumed := hit.length * b,
                         reserve := reserve, blks := some (hit ++ (List.range n).map (st.nextBlk + 1 + ·)),
                         stream := stream, nhash := hit.length }
      setPool m i { st with used := st.used + fresh, allocs := st.allocs ++ [a], nextBlk := st.nextBlk + n }
  | _, _ => m

/-- What a released allocation computed: its position when a growing run moved it, else the
prefix it consumed after a preemption, or its allocation. -/
def computedOf (a : Alloc) (preempted : Bool) : Nat :=
  if a.advanced then a.pos else if preempted then a.consumed else a.units

def holdParts : Stmt → List HoldPool × Option Expr × Option Expr × List Stmt × Option Content
  | .holdS pools reuse cache body content => (pools, reuse, cache, body, content)
  | _ => ([], none, none, [], none)

/-- The hold's allocations given back, each caching min(cache, computed) (*Pools*); the cache
clause is an amount. A content hold's blocks are published up to min(cache, computed), then
given back (`publish`, `freeBlocks`). -/
def release (p : Program) (m : Machine) (sid : Nat) (h : Stmt) (preempted : Bool) : Option Machine := do
  let (pools, _, cache, _, _) := holdParts h
  let m ← pools.foldlM (init := m) fun m hp =>
    match findAlloc m hp.pool sid, m.pools[hp.pool]? with
    | some a, some st =>
      match a.blks with
      | some _ => do
        let ell ← match cache with
          | none => pure 0
          | some c => (eval p m (sessEnv m sid) c).bind amount
        let m := publish p m hp.pool sid (min ell (computedOf a preempted))
        match findAlloc m hp.pool sid with
        | some a => pure (want (freeBlocks p m hp.pool a ell))
        | none => pure (want m)
      | none =>
        let m := want (setPool m hp.pool { st with used := st.used - a.units,
                                                   allocs := st.allocs.filter (·.sid != sid) })
        (match cache with
        | none => some m
        | some c => do
          let ell ← (eval p m (sessEnv m sid) c).bind amount
          pure (putCache p m hp.pool sid (min ell (computedOf a preempted))))
    | _, _ => some m
  let s ← m.sess[sid]?
  pure (setSess m { s with held := false })

/-- The queue's head: a preempted hold first, else the least keys then the joining order. -/
def headOf (p : Program) (m : Machine) (i : Nat) : Option QItem := do
  let st ← m.pools[i]?
  let pool ← p.pools[i]?
  let q0 ← st.queue.head?
  if q0.head || pool.queueKeys.isEmpty then pure q0
  else match st.queue.find? (·.head) with
    | some h => pure h
    | none => do
      let keyed ← st.queue.mapM fun it => do
        let ks ← pool.queueKeys.mapM (eval p m (sessEnv m it.sid [("waited", Q.sub m.now it.t)]))
        pure (ks ++ [Q.ofNat it.seq], it)
      let best ← (sortBy (fun a b => lexLt a.1 b.1) keyed).head?
      pure best.2

/-- Admit a waiting hold if every pool has room for max(units, reserve) (*Pools*): consume the
cached prefix, evict to fit, allocate. Units, reserve and reuse are amounts. On a content pool a
hold with a content hits the run of its stream's published blocks (`hitRun`), at most its reuse and
its units, known before its room: the blocks of it that other holders reference take none (the
room's credit), and the hit is what it consumed (`allocContent`: content.md, *The hit*). `none`
when the program fails; `some (m, false)` when the head does not fit. -/
def tryAdmit (p : Program) (m : Machine) (it : QItem) (i : Nat) : Option (Machine × Bool) := do
  let s ← m.sess[it.sid]?
  let h ← s.hold
  let (pools, reuse, cache, _, content) := holdParts h
  let env := sessEnv m it.sid
  let units ← pools.mapM fun hp => do
    let pool ← p.pools[hp.pool]?
    let u ← (eval p m env hp.units).bind amount
    let r ← match hp.reserve with | none => pure 0 | some e => (eval p m env e).bind amount
    pure (roundUp u pool.block, max (roundUp u pool.block) r, r)
  let isContent (hp : HoldPool) : Bool := ((p.pools[hp.pool]?).map (·.content)).getD false
  let keyed := content.isSome && pools.any isContent
  let rho0 ← if keyed then (match reuse with | none => pure none | some e => ((eval p m env e).bind amount).map some)
    else pure none
  let hits : List (Option (List Nat)) := (pools.zip units).map fun (hp, (u, _, _)) =>
    match p.pools[hp.pool]?, m.pools[hp.pool]? with
    | some pool, some st =>
      if keyed && pool.content then
        (match s.stream with
        | none => some []
        | some c => some (hitRun m.streams st.table c pool.block (some (match rho0 with | none => u | some r => min r u))
                            st.table.length 0))
      else none
    | _, _ => none
  let fits := ((pools.zip units).zip hits).all fun ((hp, (_, need, _)), hit) =>
    let shared := match hit, p.pools[hp.pool]?, m.pools[hp.pool]? with
      | some bs, some pool, some st => (bs.filter (blkHeld st.allocs)).length * pool.block
      | _, _, _ => 0
    (match (p.pools[hp.pool]?).bind (·.cap) with | some cap => decide (need ≤ cap) | none => true) &&
    roomFor p m hp.pool need shared
  if !fits then pure (m, false)
  else do
    let rho ← match reuse with | none => pure none | some e => ((eval p m env e).bind amount).map some
    let (m, got) := ((pools.zip units).zip hits).foldl (fun (acc : Machine × List Nat) ((hp, (u, _, _)), hit) =>
      match hit with
      | some bs => (acc.1, acc.2 ++ [bs.length * (((p.pools[hp.pool]?).map (·.block)).getD 0)])
      | none =>
        match cache with
        | none => (acc.1, acc.2 ++ [0])
        | some _ => let (m', c) := consume p acc.1 hp.pool it.sid rho u; (m', acc.2 ++ [c])) (m, [])
    let s ← m.sess[it.sid]?
    let cached := got.foldl max 0
    let tr := s.turnRec.map fun r => if r.cached.isSome then r else { r with cached := some cached }
    let m := setSess m { s with attrs := assign s.attrs "cached" (Q.ofNat cached), held := true, turnRec := tr }
    let m := (((pools.zip units).zip got).zip hits).foldl (fun m (((hp, (u, _, r)), c), hit) =>
      match hit with
      | some bs => allocContent p m hp.pool it.sid u r (s.stream.getD 0) bs
      | none =>
        let m := makeRoom p m hp.pool u
        match m.pools[hp.pool]? with
        | none => m
        | some st => setPool m hp.pool { st with used := st.used + u,
                                                 allocs := st.allocs ++ [{ sid := it.sid, units := u, pos := c,
                                                                           consumed := c, reserve := r }] }) m
    let st ← m.pools[i]?
    pure (setPool m i { st with queue := st.queue.filter (·.seq != it.seq) }, true)

/-! ## ps and delay stages -/

def setPs (m : Machine) (i : Nat) (st : PsSt) : Machine := { m with ps := put m.ps i st }

/-- Each of `n` jobs' rate, `phi(n) / n` (a delay's is 1; 0 with no job); `phi`, read with
`present` the `n` jobs, is a rate above 0, else the run fails (the interpreter's R010) (Python:
`ps_rate`). -/
def psRate (p : Program) (m : Machine) (i n : Nat) : Option Q := do
  let stage ← p.stages[i]?
  if n == 0 then pure 0
  else match stage.phi with
    | none => pure 1
    | some phi => do
      let v ← eval p m { x := [("present", Q.ofNat n)] } phi
      if Q.le v 0 then none else Q.div v (Q.ofNat n)

/-- The stage's virtual time brought to now: each present job has received `rate * elapsed`
(Python: `ps_advance`). -/
def psAdvance (m : Machine) (i : Nat) : Machine :=
  match m.ps[i]? with
  | none => m
  | some st =>
    let v := if st.jobs.isEmpty then st.v else Q.add st.v (Q.mul st.rate (Q.sub m.now st.last))
    setPs m i { st with v := v, last := m.now }

/-- The least finish tag of a stage's jobs (`none` with no job). -/
def psLeast : List (Q × Nat × Nat) → Option Q
  | [] => none
  | j :: js => some (js.foldl (fun (a : Q) (b : Q × Nat × Nat) => Q.min a b.1) j.1)

/-- The event for the stage's next end, set anew (a new sequence number: *Ties*, events at one
instant in the order they were scheduled) whenever the stage changes, the one before dropped: at
`now + (least tag - v) / rate` (Python: `ps_schedule`). -/
def psSchedule (p : Program) (m : Machine) (i : Nat) : Option Machine := do
  let st ← m.ps[i]?
  let rate ← psRate p m i st.jobs.length
  let other (e : Event) : Bool :=
    match e.kind with
    | .stage j => j != i
    | _ => true
  let m := { m with events := m.events.filter other }
  match psLeast st.jobs with
  | none => pure (setPs m i { st with rate := rate, ev := none })
  | some tag => do
    let d ← Q.div (Q.sub tag st.v) rate
    let m := schedule m (Q.add m.now (Q.max 0 d)) (.stage i)
    pure (setPs m i { st with rate := rate, ev := some m.seq })

/-- A job joins: its finish tag is the virtual time now plus its work (Python: `ps_submit`). -/
def psSubmit (p : Program) (m : Machine) (i sid : Nat) (w : Q) : Option Machine := do
  let m := psAdvance m i
  let st ← m.ps[i]?
  let m := setPs m i { st with jobs := st.jobs ++ [(Q.add st.v w, st.started + 1, sid)],
                               started := st.started + 1 }
  psSchedule p m i

/-- A job leaves before its end: its session ended, or its hold was preempted (Python:
`ps_remove`). -/
def psRemove (p : Program) (m : Machine) (i sid : Nat) : Option Machine := do
  let m := psAdvance m i
  let st ← m.ps[i]?
  psSchedule p (setPs m i { st with jobs := st.jobs.filter (·.2.2 != sid) }) i

/-- The stage's next end: the jobs whose tags the virtual time has reached end, ties in the order
they started, each session woken in that order (Python: `ps_fire`). -/
def psFire (p : Program) (m : Machine) (i : Nat) : Option Machine := do
  let m := psAdvance m i
  let st ← m.ps[i]?
  let v := match psLeast st.jobs with
    | none => st.v
    | some tag => Q.max st.v tag
  let done := sortBy (fun (a b : Q × Nat × Nat) => Q.lt a.1 b.1 || (a.1 == b.1 && a.2.1 < b.2.1))
    (st.jobs.filter fun j => Q.le j.1 v)
  let m := setPs m i { st with v := v, jobs := st.jobs.filter fun j => Q.lt v j.1 }
  let m ← psSchedule p m i
  let wakeJob (m : Machine) (j : Q × Nat × Nat) : Machine :=
    match m.sess[j.2.2]? with
    | none => m
    | some s => wake (setSess m { s with atStage := none }) j.2.2
  pure (done.foldl wakeJob m)

/-- `run S (w)` on a ps or delay stage: the session waits while the stage serves `w`, a time ≥ 0
(below 0 the run fails: the interpreter's R007); a job of no work completes at once. The result
says whether the session blocked (Python: `job_stmt`). -/
def jobStmt (p : Program) (m : Machine) (sid stage : Nat) (work : Expr) : Option (Machine × Bool) := do
  let w ← eval p m (sessEnv m sid) work
  if Q.lt w 0 then none
  else if w == 0 then pure (m, false)
  else do
    let m ← psSubmit p m stage sid w
    let s ← m.sess[sid]?
    pure (setSess m { s with atStage := some stage }, true)

/-! ## Sessions -/

/-- Session `k` arrives: its init, the claims' `given`, then its turns (*Workload*). Under
`renewal` and `poisson` it schedules the next session's arrival; under `batch` every arrival was
scheduled at the start, and under `closed` the next arrives when a session ends (`finish`). -/
def arrive (p : Program) (m : Machine) (k : Nat) : Option Machine := do
  let w ← m.wl.sessions[k]?
  let main := p.session.getD [.turnS]
  let s : Sess := { sid := k, attrs := [("serial", Q.ofNat k), ("turn_no", 0), ("cached", 0), ("computed", 0)],
                    cont := [.blk main, .given, .blk p.init], rows := w.rows, draws := w.draws }
  let m := wake { m with sess := m.sess ++ [s], arrived := m.arrived + 1 } k
  if p.arrive != .batch && p.arrive != .closed && k + 1 < m.wl.sessions.length then
    let next ← m.wl.sessions[k + 1]?
    pure (schedule m next.arrival (.arrive (k + 1)))
  else pure m

/-- `batch.tokens` and `batch.prefilled`: what the iteration has scheduled so far, which a
schedule's guard reads (*The iteration as a program*). -/
def tally (m : Machine) (r : Req) (n : Nat) : Machine :=
  let m := setVar m .ntok ((lookup StepVar.ntok m.eng.vars).getD 0 + n)
  if r.mode == .prefill then setVar m .npre ((lookup StepVar.npre m.eng.vars).getD 0 + n) else m

/-- A request's tokens leave the batch being planned. -/
def untally (m : Machine) (r : Req) (n : Nat) : Machine :=
  let m := setVar m .ntok ((lookup StepVar.ntok m.eng.vars).getD 0 - n)
  if r.mode == .prefill then setVar m .npre ((lookup StepVar.npre m.eng.vars).getD 0 - n) else m

/-- A request leaves the engine; its tokens in the iteration being planned return to the budget. -/
def dropReq (m : Machine) (rid : Nat) : Machine :=
  let r := findReq m rid
  let m := { m with eng := { m.eng with reqs := m.eng.reqs.filter (·.rid != rid) } }
  match m.eng.plan, r with
  | some pl, some r =>
    (match pl.batch.find? (·.1 == rid) with
    | none => m
    | some (_, n) => setPlan (untally m r n) fun pl => { pl with batch := pl.batch.filter (·.1 != rid),
                                                                 budget := pl.budget.map (· + n) })
  | _, _ => m

/-- The session ends: its hold released (caches kept), its waiting undone, its job at a ps stage
gone; under `closed` the workload's next session, while one is left, arrives at once in its place
(Python: `finish`). -/
def finish (p : Program) (m : Machine) (sid : Nat) : Option Machine := do
  let s ← m.sess[sid]?
  let m ← match s.hold, s.held with
    | some h, true => release p m sid h false
    | some h, false => do
      let i ← (holdParts h).1.head?.map (·.pool)
      let st ← m.pools[i]?
      pure (setPool m i { st with queue := st.queue.filter (·.sid != sid) })
    | none, _ => pure m
  let m := match s.atRun with | some rid => dropReq m rid | none => m
  let m ← match s.atStage with | some i => psRemove p m i sid | none => pure m
  let s ← m.sess[sid]?
  let m := setSess m { s with alive := false, cont := [], hold := none, held := false, atRun := none,
                              atStage := none, stream := none }
  if p.arrive == .closed && m.arrived < m.wl.sessions.length then arrive p m m.arrived else pure m

def push (s : Sess) (fs : List Frame) : Sess := { s with cont := s.cont ++ fs }

/-- A turn: with a trace, the next row (after its think time), then the turn block and the
server. The result says whether the session blocked. -/
def turn (p : Program) (m : Machine) (sid : Nat) : Option (Machine × Bool) := do
  let s ← m.sess[sid]?
  if !p.trace then pure (setSess m (push s [.turnGo none]), false)
  else do
    let row ← s.rows[s.rowI]?
    let m := setSess m (push { s with rowI := s.rowI + 1 } [.turnGo (some row)])
    if row.think > 0 then pure (schedule m (Q.add m.now (Q.ofNat row.think)) (.wake sid), true) else pure (m, false)

/-- A hold joins its first pool's queue (a preempted one at the head, unless its pool requeues at
the tail: `Sess.tail`, then as a newcomer, waited from now), after each of its units and
reserves that reads only attributes and numbers is judged: above the cap, the request can never
fit and is refused (*Pools*). Units and reserves are amounts. Its content, if it names one, is read
as it joins (`defineStream`), the session's stream from then on (`Sess.stream`). -/
def hold (p : Program) (m : Machine) (sid : Nat) (h : Stmt) : Option (Machine × Bool) := do
  let s ← m.sess[sid]?
  let s := { s with attrs := assign s.attrs "computed" (Q.ofNat (s.retry.getD 0)) }
  let m := setSess m s
  let (pools, _, _, body, content) := holdParts h
  let env := sessEnv m sid
  let never ← anyM (fun hp => do
    let pool ← p.pools[hp.pool]?
    match pool.cap with
    | none => pure false
    | some cap => do
      let uNever ← if hp.staticUnits then
          ((eval p m env hp.units).bind amount).map (fun u => decide (roundUp u pool.block > cap))
        else pure false
      -- the reserve is read only when the units do not already refuse it (Python: `or`)
      if uNever then pure true
      else match hp.staticReserve, hp.reserve with
        | true, some e => ((eval p m env e).bind amount).map (fun r => decide (r > cap))
        | _, _ => pure false) pools
  if never then do pure (← finish p m sid, true)
  else do
    let (m, s) ← match content with
      | none => pure (m, s)
      | some c => do
        let (m, stream) ← defineStream p m sid c
        pure (m, { s with stream := some stream })
    let i ← pools.head?.map (·.pool)
    let st ← m.pools[i]?
    let it : QItem := { sid := sid, seq := m.joinSeq + 1, t := m.now, head := s.retry.isSome && !s.tail }
    let q := if it.head then it :: st.queue else st.queue ++ [it]
    let m := setPool { m with joinSeq := m.joinSeq + 1 } i { st with queue := q }
    let s := push { s with hold := some h, held := false, retry := none, tail := false } [.scope h, .blk body]
    pure (want (setSess m s), true)

/-- Insert a request after those admitted no later (the engine keeps admission order). -/
def insertReq (r : Req) (reqs : List Req) : List Req :=
  let before := (reqs.reverse.dropWhile (·.adm > r.adm)).reverse
  before ++ [r] ++ reqs.drop before.length

/-- `run E prefill|decode (w) [growing P]`: a request on the engine, its work an amount; a run of
no work completes at once. One that arrives while the engine plans is served in the admission that
brought it. -/
def runStmt (p : Program) (m : Machine) (sid : Nat) (mode : Mode) (work : Expr) (growing : Option Nat) :
    Option (Machine × Bool) := do
  let s ← m.sess[sid]?
  let w ← (eval p m (sessEnv m sid) work).bind amount
  let holdsIt := match growing with | some g => (findAlloc m g sid).isSome | none => true
  if !holdsIt then none
  else if w == 0 then pure (m, false)
  else
    let rid := m.ridSeq + 1
    let r : Req := { rid := rid, sid := sid, mode := mode, left := w, growing := growing, adm := s.engAdm }
    let m := setSess { m with ridSeq := rid, eng := { m.eng with reqs := insertReq r m.eng.reqs } }
      { s with atRun := some rid }
    match m.eng.plan with
    | some _ => pure (setPlan m fun pl => { pl with just := pl.just ++ [rid] }, true)
    | none => pure (want m, true)

/-- One statement; the result says whether the session blocked. -/
def execStmt (p : Program) (m : Machine) (sid : Nat) (st : Stmt) : Option (Machine × Bool) := do
  let s ← m.sess[sid]?
  let env := sessEnv m sid
  match st with
  | .setA x e => do let v ← eval p m env e; pure (setSess m { s with attrs := assign s.attrs x v }, false)
  | .drawA x => do
    let v ← s.draws[s.drawI]?
    pure (setSess m { s with attrs := assign s.attrs x (Q.ofNat v), drawI := s.drawI + 1 }, false)
  | .observeA x e => do
    let v ← eval p m env e
    pure ({ m with obs := m.obs ++ [(x, v, m.now, sid, s.turnIdx)] }, false)
  | .branchS c thn els => do
    let g ← testGuard p m env c
    pure (setSess m (push s [.blk (if g then thn else els)]), false)
  | .whileS c body => pure (setSess m (push s [.loop c body]), false)
  | .turnS => turn p m sid
  | .holdS .. => hold p m sid st
  | .runS mode work growing => runStmt p m sid mode work growing
  | .endS => do pure (← finish p m sid, true)
  | .jobS stage work => jobStmt p m sid stage work

/-- The top frame of the continuation; the result says whether the session blocked. -/
def execFrame (p : Program) (m : Machine) (sid : Nat) : Option (Machine × Bool) := do
  let s ← m.sess[sid]?
  let top ← s.cont.getLast?
  let s := { s with cont := s.cont.dropLast }
  match top with
  | .blk [] => pure (setSess m s, false)
  | .blk (st :: rest) => execStmt p (setSess m (push s [.blk rest])) sid st
  | .loop c body => do
    let g ← testGuard p m (sessEnv m sid) c
    pure (setSess m (if g then push s [.loop c body, .blk body] else s), false)
  | .scope h => do
    let m ← release p (setSess m s) sid h false
    let s ← m.sess[sid]?
    pure (setSess m { s with hold := none, attrs := assign s.attrs "computed" 0 }, false)
  | .given => pure ({ setSess m s with given := m.given ++ [(sid, s.attrs)] }, false)
  | .turnEnd => do
    let r ← s.turnRec
    pure (setSess { m with requests := m.requests ++ [(sid, s.turnIdx, r)], client := m.client ++ answered m r }
      { s with turnIdx := s.turnIdx + 1, turnRec := none }, false)
  | .turnGo row =>
    -- a trace row's fields are naturals, read as values
    let fromRow : List (String × Q) := match row with
      | none => []
      | some r => [("new", Q.ofNat r.new), ("out", Q.ofNat r.out), ("think", Q.ofNat r.think),
                   ("forced", Q.ofNat r.forced), ("stream", Q.ofNat r.stream), ("parent", Q.ofNat r.parent),
                   ("common", Q.ofNat r.common), ("more", if s.rowI < s.rows.length then 1 else 0)]
    let attrs := fromRow.foldl (fun a kv => assign a kv.1 kv.2) s.attrs
    let s := push { s with attrs := assign attrs "turn_no" (Q.ofNat s.turnIdx), turnRec := some { start := m.now } }
      [.turnEnd, .blk (p.turn ++ p.server)]
    pure (setSess m s, false)

/-- Run a session's statements until it blocks or ends, within `fuel` frames. -/
def runSess (p : Program) (m : Machine) (sid : Nat) : Nat → Option Machine
  | 0 => none
  | fuel + 1 => do
    let s ← m.sess[sid]?
    if !s.alive then pure m
    else if s.cont.isEmpty then finish p m sid
    else do
      let (m, blocked) ← execFrame p m sid
      if blocked then pure m else runSess p m sid fuel

def sessFuel : Nat := 1000000

/-- Run every ready session, in the order it became ready. -/
def settle (p : Program) (m : Machine) : Nat → Option Machine
  | 0 => if m.ready.isEmpty then some m else none   -- nothing left to run needs no fuel (Python)
  | fuel + 1 =>
    match m.ready with
    | [] => some m
    | sid :: rest => do
      let m ← runSess p { m with ready := rest } sid sessFuel
      settle p m fuel

/-! ## The engine -/

/-- An `each at most`, an amount read with the residents as the iteration started: 0 reads as no
cap. -/
def capOf (p : Program) (m : Machine) (e : Option Expr) : Option (Option Nat) := do
  let v ← eval p m { start := true } (e.getD p.engine.chunk)
  let v ← amount v
  pure (if v == 0 then none else some v)

/-- What a key or an `only` of the serving reads of a request: `decoding`, `admission`,
`remaining`. -/
def reqEnv (m : Machine) (r : Req) : Env :=
  { x := [("decoding", if r.mode == .decode then 1 else 0),
          ("admission", Q.ofNat (((m.sess[r.sid]?).map (·.engAdm)).getD 0)), ("remaining", Q.ofNat r.left)] }

/-- One token to a decode; up to the cap to a prefill, a multiple of the granule short of its
remainder (none: passed over, and no one admitted after it). -/
def tokensFor (m : Machine) (r : Req) (cap : Option Nat) : Machine × Nat :=
  match m.eng.plan with
  | none => (m, 0)
  | some pl =>
    match r.mode with
    | .decode => (m, min 1 (match pl.budget with | none => r.left | some b => min b r.left))
    | .prefill =>
      let n := match omin cap pl.budget with | none => r.left | some c => min c r.left
      match pl.granule with
      | some g =>
        if g != 0 && n < r.left then
          let n := n / g * g
          (if n == 0 then setPlan m fun pl => { pl with noAdmit := true } else m, n)
        else (m, n)
      | none => (m, n)

/-- What a holder reserved on a `reserve held` pool and has not allocated (0 on another pool)
(Python: `own_extra`). -/
def ownExtra (p : Program) (m : Machine) (i sid : Nat) : Nat :=
  match p.pools[i]?, findAlloc m i sid with
  | some pool, some a => if pool.reserveHeld then a.reserve - a.units else 0
  | _, _ => 0

/-- `preempt by (keys)`: of the holders that are the engine's residents, in the order of their
latest admission, the one with the least keys, each read with its attributes and `admission` (its
rank in that order, from 0), `position` (its allocation's position), `decoding` (1 when its run
on the engine is a decode) and `remaining` (its run's tokens left, 0 without a run); ties to the
one admitted last (the keys end with `0 - rank`) (*Pools*; `preempt lifo` is `by (0 - admission)`).
`some none`: no victim (`preempt none`, or no candidate); `none`: a key's reading failed (Python:
`victim`). -/
def victim (p : Program) (m : Machine) (i : Nat) : Option (Option Nat) := do
  let pool ← p.pools[i]?
  match pool.preempt with
  | none => pure none
  | some keys => do
    let st ← m.pools[i]?
    let res := residentIds p m
    let adm (a : Alloc) : Nat := ((m.sess[a.sid]?).map (·.engAdm)).getD 0
    let cands := sortBy (fun a b => adm a < adm b) (st.allocs.filter fun a => res.contains a.sid)
    let keyed ← (cands.zip (List.range cands.length)).mapM fun (a, rank) => do
      let r := m.eng.reqs.find? (·.sid == a.sid)
      let x : List (String × Q) :=
        [("admission", Q.ofNat rank), ("position", Q.ofNat a.pos),
         ("decoding", if (r.map (·.mode == .decode)).getD false then 1 else 0),
         ("remaining", Q.ofNat ((r.map (·.left)).getD 0))]
      let ks ← keys.mapM (eval p m (sessEnv m a.sid x))
      pure (ks ++ [Q.sub 0 (Q.ofNat rank)], a.sid)
    match keyed with
    | [] => pure none
    | k0 :: rest =>
      -- the first with the least keys (Python: `k < bk`, strict)
      pure (some (rest.foldl (fun (b y : List Q × Nat) => if lexLt y.1 b.1 then y else b) k0).2)

/-- The victim's hold is released with its computed prefix cached, its request leaves the engine
and its job its ps stage (a job inside the hold's body), and the hold executes again, reading
`computed`: at the head of its queue, or as a newcomer when the pool says `requeue tail`
(`Sess.tail`, which `hold` reads) (*Pools*; Python: `preempt`). -/
def preempt (p : Program) (m : Machine) (sid i : Nat) : Option Machine := do
  let pool ← p.pools[i]?
  let s ← m.sess[sid]?
  let a ← findAlloc m i sid
  let h ← s.hold
  let pos := computedOf a true
  let m ← release p m sid h true
  let m := match s.atRun with | some rid => dropReq m rid | none => m
  let m ← match s.atStage with | some j => psRemove p m j sid | none => pure m
  let s ← m.sess[sid]?
  -- the continuation below the hold's scope, with the hold to execute again
  let below := (s.cont.reverse.dropWhile fun f => match f with | .scope _ => false | _ => true).drop 1 |>.reverse
  let tr := s.turnRec.map fun r => { r with preemptions := r.preemptions + 1 }
  let m := setSess m { s with cont := below ++ [.blk [h]], hold := none, held := false, retry := some pos,
                              atRun := none, turnRec := tr, atStage := none, tail := pool.requeueTail }
  pure { m with ready := m.ready.filter (· != sid) ++ [sid] }

/-- The growth once there is room: the pool's cached entries evicted to fit, the hold's
allocation enlarged by `need`, a content hold's by new blocks (Python: `grow_into`). -/
def growInto (p : Program) (m : Machine) (r : Req) (need : Nat) : Option (Machine × Bool) := do
  let i ← r.growing
  let m := makeRoom p m i need
  let a ← findAlloc m i r.sid
  let st ← m.pools[i]?
  let pool ← p.pools[i]?
  let (a, st) := match a.blks with
    | some bs =>
      let n := need / pool.block
      ({ a with blks := some (bs ++ (List.range n).map (st.nextBlk + 1 + ·)) }, { st with nextBlk := st.nextBlk + n })
    | none => (a, st)
  pure (setAlloc (setPool m i { st with used := st.used + need }) i { a with units := a.units + need }, true)

/-- Grow block by block, preempting the pool's victim (`victim`) while there is no room; under
`reserve held` the grower grows into its own reservation first (`ownExtra`, the room's credit); a
grower that preempts itself ends the iteration's serving (*Engines*). -/
def grow (p : Program) (m : Machine) (r : Req) (need : Nat) (fuel : Nat) : Option (Machine × Bool) := do
  let i ← r.growing
  if roomFor p m i need (ownExtra p m i r.sid) then growInto p m r need
  else match fuel with
    -- the fuel bounds the preemptions: with room, none is needed (Python's loop tests the room first)
    | 0 => none
    | fuel + 1 => do
      let v ← victim p m i
      match v with
      | none => pure (m, false)
      | some v => do
        let m := setVar m .preempted ((lookup StepVar.preempted m.eng.vars).getD 0 + 1)
        let m ← preempt p m v i
        if v == r.sid then pure (setPlan m fun pl => { pl with stop := true }, false)
        else grow p m r need fuel

def growFuel : Nat := 100000

/-- Serve a request its tokens, growing its hold to the position it will reach. -/
def give (p : Program) (m : Machine) (rid : Nat) (cap : Option Nat) : Option (Machine × Bool) := do
  let r ← findReq m rid
  let (m, n) := tokensFor m r cap
  if n == 0 then pure (m, false)
  else do
    let (m, ok) ← match r.growing with
      | none => pure (m, true)
      | some g => do
        let a ← findAlloc m g r.sid
        let pool ← p.pools[g]?
        let need := roundUp (a.pos + n) pool.block - a.units
        if a.pos + n > a.units && need > 0 then grow p m r need growFuel else pure (m, true)
    if !ok then pure (m, false)
    else match findReq m rid with
      | none => pure (m, false)
      | some r =>
        -- a content pool publishes the blocks the tokens fill as they are scheduled (`publish`)
        let m := match r.growing with
          | some g => (match findAlloc m g r.sid with
            | some a => publish p m g r.sid (a.pos + n)
            | none => m)
          | none => m
        let m := setPlan (tally m r n) fun pl => { pl with batch := pl.batch ++ [(rid, n)],
                                                           budget := pl.budget.map (· - n) }
        pure ({ m with eng := { m.eng with reqs := m.eng.reqs.map fun x =>
                                   if x.rid == rid then { x with it := m.eng.iterNo } else x } }, true)

/-- Give each request of a list its tokens, in order, skipping those served already or excluded
by `only`, until the serving stops. -/
def serveList (p : Program) (only : Option Expr) (cap : Option Nat) : List Req → Machine → Option Machine
  | [], m => some m
  | r0 :: rest, m => do
    let pl ← m.eng.plan
    if pl.stop then pure m
    else match findReq m r0.rid with
      | none => serveList p only cap rest m
      | some r =>
        if r.it == m.eng.iterNo then serveList p only cap rest m
        else do
          let inc ← match only with
            | none => pure true
            | some e => do let v ← eval p m (reqEnv m r) e; pure (v != 0)
          let m ← if inc then (give p m r.rid cap).map (·.1) else pure m
          serveList p only cap rest m

/-- `advance running`: the residents not yet served, in the order, skipping those `only` excludes. -/
def serve (p : Program) (m : Machine) (only : Option Expr) (keys : List Expr) (chunk : Option Expr) :
    Option Machine := do
  let pl ← m.eng.plan
  if pl.stop then pure m
  else do
    let cap ← capOf p m chunk
    let reqs := m.eng.reqs.filter (·.it != m.eng.iterNo)
    let ordered ← if keys.isEmpty then pure reqs else do
      let keyed ← reqs.mapM fun r => do
        let ks ← keys.mapM (eval p m (reqEnv m r))
        pure (ks ++ [Q.ofNat (((m.sess[r.sid]?).map (·.engAdm)).getD 0)], r)
      pure ((sortBy (fun a b => lexLt a.1 b.1) keyed).map (·.2))
    serveList p only cap ordered m

/-- Admit the head of pool `i`'s queue and run its session at once until it blocks: the requests
it brought, or `none` inside when the head does not fit. -/
def admitHead (p : Program) (m : Machine) (i : Nat) : Option (Machine × Option (List Nat)) := do
  let it ← headOf p m i
  let (m, ok) ← tryAdmit p m it i
  if !ok then pure (m, none)
  else do
    let m := setVar m .admitted ((lookup StepVar.admitted m.eng.vars).getD 0 + 1)
    let m := { m with eng := { m.eng with admSeq := m.eng.admSeq + 1 } }
    let s ← m.sess[it.sid]?
    let m := setPlan (setSess m { s with engAdm := m.eng.admSeq }) fun pl => { pl with just := [] }
    let m ← runSess p m it.sid sessFuel
    let pl ← m.eng.plan
    pure (setPlan m fun pl => { pl with just := [] }, some pl.just)

/-- Give each of a list of requests just admitted its tokens, unless `only` excludes it. -/
def giveAdded (p : Program) (only : Option Expr) (cap : Option Nat) : List Nat → Machine → Option Machine
  | [], m => some m
  | rid :: rest, m =>
    match findReq m rid with
    | none => giveAdded p only cap rest m
    | some r => do
      let inc ← match only with
        | none => pure true
        | some e => do let v ← eval p m (reqEnv m r) e; pure (v != 0)
      let m ← if inc then (give p m rid cap).map (·.1) else pure m
      giveAdded p only cap rest m

/-- Admit from pool `i` while its queue has a head, budget is left and the gate is 1; `true` when
the admissions stop for the iteration. -/
def admitPool (p : Program) (m : Machine) (i : Nat) (only gate : Option Expr) (cap : Option Nat) :
    Nat → Option (Machine × Bool)
  | 0 => do   -- an empty queue needs no fuel (Python's loop tests the queue first)
    let st ← m.pools[i]?
    if st.queue.isEmpty then pure (m, false) else none
  | fuel + 1 => do
    let st ← m.pools[i]?
    let pl ← m.eng.plan
    if st.queue.isEmpty then pure (m, false)
    else if pl.budget == some 0 || pl.noAdmit then pure (m, true)
    else do
      let open_ ← match gate with
        | none => pure true
        | some g => do let v ← eval p m {} g; pure (v != 0)
      if !open_ then pure (m, true)
      else do
        let (m, added) ← admitHead p m i
        match added with
        | none => pure (setPlan m fun pl => { pl with noAdmit := true }, true)
        | some rids => do
          let m ← giveAdded p only cap rids m
          admitPool p m i only gate cap fuel

def admitFuel : Nat := 100000

/-- `admit waiting`: the heads of the queues the engine admits, one at a time, each served at
once unless `only` excludes it, while budget is left, the head fits and the gate is 1. -/
def admit (p : Program) (m : Machine) (only gate chunk : Option Expr) : Option Machine := do
  let pl ← m.eng.plan
  if pl.noAdmit then pure m
  else do
    let cap ← capOf p m chunk
    let m := setPlan m fun pl => { pl with admitCap := cap }
    let rec go : List Nat → Machine → Option Machine
      | [], m => some m
      | i :: rest, m => do
        let pool ← p.pools[i]?
        if !pool.admitted then go rest m
        else do
          let (m, stop) ← admitPool p m i only gate cap admitFuel
          if stop then pure m else go rest m
    go (List.range p.pools.length) m

/-- The iteration's statements, in order; `fuel` bounds the statements and branches run. -/
def runBody (p : Program) : Nat → List IStmt → Machine → Option Machine
  | _, [], m => some m           -- no statement left: done, whatever fuel is left (Python: the loop)
  | 0, _ :: _, _ => none
  | fuel + 1, st :: rest, m => do
    let m ← match st with
      | .serve only keys chunk => serve p m only (keys.getD p.engine.keys) chunk
      | .admit only gate chunk => admit p m only gate chunk
      | .branch c thn els => do
        let g ← testGuard p m {} c
        runBody p fuel (if g then thn else els) m
      | .set x e => do
        let v ← eval p m {} e
        pure { m with eng := { m.eng with regs := assign m.eng.regs x v } }
    runBody p fuel rest m

def bodyFuel : Nat := 100000

/-- `exclusive prefill`: a running prefill alone, else the decodes, which a waiting prefill that
fits displaces, taking the full budget; nothing is admitted after a prefill (*Engines*). -/
def exclusive (p : Program) (m : Machine) (full : Option Nat) : Option Machine := do
  let adm (r : Req) : Nat := ((m.sess[r.sid]?).map (·.engAdm)).getD 0
  let reqs := sortBy (fun a b => adm a < adm b) m.eng.reqs
  let pl ← m.eng.plan
  let chunk := pl.chunk
  match reqs.find? (·.mode == .prefill) with
  | some r => (give p m r.rid chunk).map (·.1)
  | none => do
    let m ← serveList p none chunk reqs m
    let pl ← m.eng.plan
    if (lookup StepVar.preempted m.eng.vars).getD 0 != 0 || pl.noAdmit then pure m
    else do
      let tentative := pl.batch.map (·.1)
      let left := pl.budget
      let m := setPlan m fun pl => { pl with budget := full, admitCap := chunk }
      let rec go : List Nat → Machine → Option Machine
        | [], m => pure (setPlan m fun pl => { pl with budget := left })
        | i :: rest, m => do
          let pool ← p.pools[i]?
          let st ← m.pools[i]?
          if !pool.admitted || st.queue.isEmpty then go rest m
          else do
            let (m, added) ← admitHead p m i
            match added with
            | none => pure (setPlan m fun pl => { pl with budget := left })
            | some rids =>
              match rids.filter (fun rid => ((findReq m rid).map (·.mode == .prefill)).getD false) with
              | [] => pure (setPlan m fun pl => { pl with budget := left })
              | new :: _ => do
                let cur := (← m.eng.plan).batch
                let m := (pl.batch.filter fun (rid, _) => cur.any (·.1 == rid)).foldl (fun m (rid, n) =>
                  match findReq m rid with
                  | some r => untally m r n
                  | none => m) m
                let m := setPlan m fun pl => { pl with batch := pl.batch.filter (!tentative.contains ·.1),
                                                       budget := full }
                let m := { m with eng := { m.eng with reqs := m.eng.reqs.map fun r =>
                                              if tentative.contains r.rid then { r with it := 0 } else r } }
                (give p m new chunk).map (·.1)
      go (List.range p.pools.length) m

/-- Claim `j` over iterations read as its iteration starts, after the batch is scheduled
(*Claims*): `some (some b)` its value, `some none` for a claim at end (it has none), and `none` when
the reading fails (an attribute it reads has no value, a division by 0), which fails neither the
run nor another claim's reading (Python: `claim_value`, which keeps the iteration's machine and
reads the claim only when asked, iteration by iteration until it is decided; `outcome` reads the
same values here, stopping at the same iteration). -/
def claimValue (p : Program) (m : Machine) (j : Nat) : Option (Option Bool) := do
  let c ← p.claims[j]?
  if c.form == .atEnd then pure none
  else do
    let pl ← m.eng.plan
    let demand := sumList (m.eng.reqs.filter (·.left > 0) |>.map fun r =>
      if r.mode == .decode then 1 else match pl.chunk with | none => r.left | some k => min r.left k)
    let env : Env := { x := [("served", Q.ofNat m.eng.servedTotal), ("arrived", Q.ofNat m.arrived),
                             ("demand", Q.ofNat demand)] }
    let v ← eval p m env c.e
    pure (some (v != 0))

/-- Every claim's reading at an iteration, in the program's order (Python: `claim_values`); a
failed reading is that claim's `none`, the others' read all the same. -/
def claimValues (p : Program) (m : Machine) : List (Option (Option Bool)) :=
  (List.range p.claims.length).map (claimValue p m)

/-- Plan an iteration: the schedule's statements, then its cost and its claims; a try that
schedules no token is no iteration unless it preempted (*Engines*): what it admitted stays
admitted, and its register sets are undone. The tokens cap and the granule are amounts; the cost is
a time ≥ 0, and above 0 when tokens are scheduled, else the run fails. Each claim's reading is kept
on the path (`claimValues`), a failed one as that claim's `none`: it fails no run (Python keeps the
machine, `(now, m)`, and reads each claim from it when asked). -/
def startIteration (p : Program) (m : Machine) : Option Machine := do
  let eng := p.engine
  let m := { m with eng := { m.eng with vars := runningValues p m, bvars := [(.ndec, 0), (.kvb, 0), (.kvp, 0)],
                                        iterNo := m.eng.iterNo + 1 } }
  let saved := m.eng.regs
  let budget ← match eng.budget with | none => pure none | some _ => (budgetOf p m).map some
  let granule ← match eng.granule with | none => pure none | some e => ((eval p m {} e).bind amount).map some
  let chunk ← capOf p m none
  let m := { m with eng := { m.eng with plan := some { budget := budget, chunk := chunk,
                                                          granule := granule.bind fun g => if g == 0 then none else some g } } }
  let m ← if eng.exclusive then exclusive p m budget else runBody p bodyFuel eng.body m
  let pl ← m.eng.plan
  let ntok := sumList (pl.batch.map (·.2))
  let v := m.eng.vars
  let get (k : StepVar) : Nat := (lookup k v).getD 0
  if ntok == 0 && get .preempted == 0 then
    pure { m with eng := { m.eng with regs := saved, plan := none } }
  else do
    let modeOf (rid : Nat) : Option Mode := (findReq m rid).map (·.mode)
    let posOf (rid : Nat) : Nat := ((findReq m rid).map (growingPos m)).getD 0
    let dec := pl.batch.filter (modeOf ·.1 == some .decode)
    let pre := pl.batch.filter (modeOf ·.1 == some .prefill)
    let v := assign v .ntok ntok
    let v := assign v .npre (sumList (pre.map (·.2)))
    let v := assign v .attn (sumList (pl.batch.map fun (rid, n) => n * (posOf rid + n)))
    let v := assign v .nres (get .nres + get .admitted - get .preempted)
    let m := { m with eng := { m.eng with vars := v,
                                          bvars := [(.ndec, dec.length), (.kvb, sumList (dec.map (posOf ·.1))),
                                                    (.kvp, sumList (pre.map (posOf ·.1)))] } }
    let cost ← eval p m {} eng.cost
    if Q.lt cost 0 then none
    else if ntok > 0 && Q.le cost 0 then none
    else do
      let m := { m with path := m.path ++ [(m.now, claimValues p m)],
                        eng := { m.eng with servedTotal := m.eng.servedTotal + ntok,
                                            iterations := m.eng.iterations + 1, busy := true,
                                            batch := pl.batch, plan := none } }
      pure (schedule m (Q.add m.now cost) .iterEnd)

/-- A growing run's hold advances by the tokens the iteration gave it. -/
def advanceHold (m : Machine) (r : Req) (n : Nat) : Machine :=
  match r.growing.bind (fun g => (findAlloc m g r.sid).map (g, ·)) with
  | none => m
  | some (g, a) => setAlloc m g { a with pos := a.pos + n, advanced := true }

/-- `n` decode tokens: the request's first token when it has none (the last prefill's, else this
one), recorded as its ttft then, and its last (*What the client sees*). -/
def decodeToken (m : Machine) (r : Req) (n : Nat) : Machine :=
  match m.sess[r.sid]? with
  | none => m
  | some s =>
    if r.mode != .decode then m
    else match s.turnRec with
      | none => m
      | some tr =>
        let first := tr.first.getD (tr.pf.getD m.now)
        let m := if tr.first.isNone then { m with client := m.client ++ [("ttft", Q.sub first tr.start)] } else m
        setSess m { s with turnRec := some { tr with first := some first, last := some m.now, ntok := tr.ntok + n } }

/-- One request's tokens of the iteration that ends; the finished requests collected. -/
def applyTokens (acc : Machine × List Req) (b : Nat × Nat) : Machine × List Req :=
  let (m, done) := acc
  let (rid, n) := b
  match findReq m rid with
  | none => (m, done)
  | some r =>
    if n == 0 then (m, done)
    else
      let r := { r with left := r.left - n }
      let m := { m with eng := { m.eng with reqs := m.eng.reqs.map fun x => if x.rid == rid then r else x } }
      let m := decodeToken (advanceHold m r n) r n
      (m, if r.left == 0 then done ++ [r] else done)

/-- The iteration's tokens are applied when it ends; a finished run wakes its session, a prefill
samples a token (*What the client sees*). The program is not read (the Python twin's signature). -/
def endIteration (_p : Program) (m : Machine) : Option Machine := do
  let (m, done) := m.eng.batch.foldl (applyTokens) (m, [])
  let m := { m with eng := { m.eng with batch := [], busy := false } }
  let finishReq (m : Machine) (r : Req) : Machine :=
    let m := { m with eng := { m.eng with reqs := m.eng.reqs.filter (·.rid != r.rid) } }
    match m.sess[r.sid]? with
    | none => m
    | some s =>
      let s := if r.mode == .prefill then
          { s with turnRec := s.turnRec.map fun tr =>
              { tr with pf := if tr.first.isNone then some m.now else tr.pf, last := some m.now, ntok := tr.ntok + 1 } }
        else s
      if s.atRun == some r.rid then wake (setSess m { s with atRun := none }) r.sid else setSess m s
  pure (want (done.foldl finishReq m))

/-! ## The run -/

/-- The machine at 0: under `batch` every session's arrival scheduled, under `closed` the first
`n`'s (the population; the rest arrive as sessions end), else the first session's (Python:
`initial`). -/
def initial (p : Program) (wl : Workload) : Machine :=
  let m : Machine := { now := 0, events := [], seq := 0, ready := [], sess := [],
                       pools := p.pools.map fun _ => {}, eng := { regs := p.engine.registers }, wl := wl,
                       ps := p.stages.map fun _ => {} }
  let arriveAll (ss : List SessionIn) : Machine :=
    (ss.zip (List.range ss.length)).foldl (fun m (s, k) => schedule m s.arrival (.arrive k)) m
  match p.arrive, wl.sessions with
  | _, [] => m
  | .batch, ss => arriveAll ss
  | .closed, ss => arriveAll (ss.take p.n)
  | _, s :: _ => schedule m s.arrival (.arrive 0)

def settleFuel : Nat := 1000000

/-- One move of the machine: settle, then start the engine's iteration when nothing else is
pending at this instant, else the next event up to the horizon. Under `closed` an arrival event
brings the workload's next session, whichever it is, or none when none is left (Python: `step`).
The flag: the run is over. -/
def step (p : Program) (m : Machine) (horizon : Option Q) : Option (Machine × Bool) := do
  let m ← settle p m settleFuel
  let nextLater := match m.events with | [] => true | e :: _ => Q.lt m.now e.t
  if m.eng.want && nextLater then
    let m := { m with eng := { m.eng with want := false } }
    if m.eng.busy then pure (m, false) else do pure (← startIteration p m, false)
  else match m.events with
    | [] => pure (m, true)
    | e :: rest =>
      if (match horizon with | some h => Q.lt h e.t | none => false) then pure (m, true)
      else do
        let m := { m with events := rest, now := e.t }
        match e.kind with
        | .arrive k =>
          if p.arrive == .closed then
            -- the next session, whichever event brings it (a start): `finish` may have brought
            -- one of the first `n` already
            if m.arrived < m.wl.sessions.length then do
              let m ← arrive p m m.arrived
              pure (m, false)
            else pure (m, false)
          else do
            let m ← arrive p m k
            pure (m, false)
        | .wake sid => pure (wake m sid, false)
        | .iterEnd => pure (← endIteration p m, false)
        | .stage i => pure (← psFire p m i, false)

/-- A run: the machine at its end and whether it ended within the fuel. -/
structure Run where
  machine : Machine
  done : Bool

/-- `step` until the run is over or the fuel is spent. -/
def runFrom (p : Program) (horizon : Option Q) : Nat → Machine → Option Run
  | 0, m => some { machine := m, done := false }
  | fuel + 1, m => do
    let (m, over) ← step p m horizon
    if over then pure { machine := m, done := true } else runFrom p horizon fuel m

def run (p : Program) (wl : Workload) (fuel : Nat) (horizon : Option Q := none) : Option Run :=
  runFrom p horizon fuel (initial p wl)

end Serq
