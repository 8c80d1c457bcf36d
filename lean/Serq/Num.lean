/-!
# The fragment's numbers

Every value an expression computes is a rational, computed exactly (docs/lean.md, *Arithmetic over
the rationals*), definition for definition the Python `serq/ref/num.py`: a `Q` is a numerator and a
denominator in lowest terms (`den > 0`, no common factor), so that two equal values are the same
term and `DecidableEq` is equality of values. Amounts (units, tokens) are naturals: `Q.toNat?`
gives the natural a value is, or `none`.

Lean 4 core only: no `Rat` type, no Mathlib, and no `Int` division (whose names and rounding
changed across Lean versions): `floor` and `ceil` match the numerator's constructor and divide
naturals. The greatest common divisor is Euclid's, bounded by explicit fuel, so every definition
here is total and `decide` / `decide +kernel` evaluate it.
-/
namespace Serq

/-- A rational `num / den` in lowest terms, `den > 0` (Python: an `int` when whole, else a
`fractions.Fraction`). Values are built by `Q.norm`, by a numeral (`OfNat`) or, in generated files,
by `Q.mk` with the numerator and denominator Python's `Fraction` gives, already in lowest terms. -/
structure Q where
  num : Int
  den : Nat
  deriving DecidableEq, Repr

/-- A numeral is the whole rational it writes, so `Expr.num 5` and `arrival := 3` elaborate. -/
instance (n : Nat) : OfNat Q n := ⟨⟨Int.ofNat n, 1⟩⟩

/-- The greatest common divisor of `a` and `b`, by Euclid's algorithm within `fuel` steps (Python:
`math.gcd`, inside `Fraction`). Each step makes the second argument smaller (`a % (b + 1) < b + 1`),
so `b + 1` steps always suffice: `Q.norm` gives that much. -/
def Q.gcd : Nat → Nat → Nat → Nat
  | 0, a, _ => a
  | _ + 1, a, 0 => a
  | fuel + 1, a, b + 1 => Q.gcd fuel (b + 1) (a % (b + 1))

/-- `n / d` in lowest terms, its sign on the numerator (Python: `q`, and `Fraction(n, d)`). No
caller divides by 0 (`Q.div` refuses it first); `d = 0` gives 0. -/
def Q.norm (n : Int) (d : Nat) : Q :=
  if d == 0 then ⟨0, 1⟩
  else
    let g := Q.gcd (d + 1) n.natAbs d
    match n with
    | Int.ofNat a => ⟨Int.ofNat (a / g), d / g⟩
    | Int.negSucc a => ⟨Int.neg (Int.ofNat ((a + 1) / g)), d / g⟩

/-- A natural as a value: a count (sessions, units, tokens) read by an expression (Python: the
`int` itself). -/
def Q.ofNat (n : Nat) : Q := ⟨Int.ofNat n, 1⟩

/-- `a + b` (Python: `q(l + r)`). -/
def Q.add (a b : Q) : Q := Q.norm (a.num * Int.ofNat b.den + b.num * Int.ofNat a.den) (a.den * b.den)

/-- `a - b`, below 0 when `b > a` (Python: `q(l - r)`). -/
def Q.sub (a b : Q) : Q := Q.norm (a.num * Int.ofNat b.den - b.num * Int.ofNat a.den) (a.den * b.den)

/-- `a * b` (Python: `q(l * r)`). -/
def Q.mul (a b : Q) : Q := Q.norm (a.num * b.num) (a.den * b.den)

/-- `a / b` exactly; `none` when `b` is 0, the interpreter's inf or NaN (Python: `qdiv`, its caller
refusing a divisor of 0). The divisor's sign goes to the numerator. -/
def Q.div (a b : Q) : Option Q :=
  match b.num with
  | Int.ofNat 0 => none
  | Int.ofNat (k + 1) => some (Q.norm (a.num * Int.ofNat b.den) (a.den * (k + 1)))
  | Int.negSucc k => some (Q.norm (Int.neg (a.num * Int.ofNat b.den)) (a.den * (k + 1)))

/-- `a < b`, by cross-multiplication (the denominators are positive) (Python: `<`). -/
def Q.lt (a b : Q) : Bool := decide (a.num * Int.ofNat b.den < b.num * Int.ofNat a.den)

/-- `a ≤ b`, by cross-multiplication (Python: `<=`). -/
def Q.le (a b : Q) : Bool := decide (a.num * Int.ofNat b.den ≤ b.num * Int.ofNat a.den)

/-- The lesser of two values, the first when equal (Python: `min`). -/
def Q.min (a b : Q) : Q := if Q.le a b then a else b

/-- The greater of two values, the first when equal (Python: `max`). -/
def Q.max (a b : Q) : Q := if Q.le b a then a else b

/-- The sum of a list of values (Python: `q(sum(vs))`). -/
def Q.sum (xs : List Q) : Q := xs.foldl Q.add 0

/-- The greatest integer at most `x` (Python: `qfloor`). `-(a + 1) / d` rounds down to
`-(a / d + 1)`, which is `Int.negSucc (a / d)`; only `den > 0` is needed, not lowest terms. -/
def Q.floor (x : Q) : Q :=
  match x.num with
  | Int.ofNat a => ⟨Int.ofNat (a / x.den), 1⟩
  | Int.negSucc a => ⟨Int.negSucc (a / x.den), 1⟩

/-- The least integer at least `x` (Python: `qceil`): `(a + den - 1) / den` above 0, and
`-((a + 1) / den)` below it. -/
def Q.ceil (x : Q) : Q :=
  match x.num with
  | Int.ofNat a => ⟨Int.ofNat ((a + x.den - 1) / x.den), 1⟩
  | Int.negSucc a => ⟨Int.neg (Int.ofNat ((a + 1) / x.den)), 1⟩

/-- `x` rounded half up, `floor(x + 1/2)`, the catalogue's `round` (Python: `qround`): the floor of
`(2 num + den) / (2 den)`. -/
def Q.round (x : Q) : Q := Q.floor ⟨2 * x.num + Int.ofNat x.den, 2 * x.den⟩

/-- `l % r` as the interpreter's fmod, `l - r * trunc(l / r)`, of the sign of `l`; `none` when `r`
is 0 (Python: `qmod`, its caller refusing a divisor of 0). -/
def Q.fmod (l r : Q) : Option Q := do
  let t ← Q.div l r
  let k := if Q.le 0 t then Q.floor t else Q.ceil t
  pure (Q.sub l (Q.mul r k))

/-- `|x|` (Python: `qabs`). -/
def Q.abs (x : Q) : Q := ⟨Int.ofNat x.num.natAbs, x.den⟩

/-- Whether `x` is an integer (Python: `whole`): in lowest terms, its denominator is 1. -/
def Q.isWhole (x : Q) : Bool := x.den == 1

/-- The natural `x` is, or `none` when it is negative or a fraction (Python: `nat_of`, which says
which of the two; the kernel's `amount` makes the first a run error and refuses the second). -/
def Q.toNat? (x : Q) : Option Nat :=
  match x.num with
  | Int.ofNat n => if Q.isWhole x then some n else none
  | Int.negSucc _ => none

end Serq
