"""Lean terms for the fragment's representation (serq/ref/ir.py), constructor for constructor
lean/Serq/IR.lean: every value of serq/ref/ir.py has exactly one rendering here.

Expressions are written on one line; lists of statements, pools and workload sessions one element
a line, each continuation line indented deeper than the line its term starts on (Lean reads an
application's arguments by column).
"""
from __future__ import annotations

import re
from fractions import Fraction

from serq.ref import ir as R

# Python spellings (serq/ref/ir.py) -> the constructors of lean/Serq/IR.lean
BIN_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "==": "eq", "!=": "ne",
           "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "&&": "and", "||": "or"}
FUNS = {f: f for f in R.FUNS}
STEP_VARS = {v: v[0].lower() + v[1:] for v in R.STEP_VARS}
OBS = {"budget_left": "budgetLeft", **{o: o for o in R.OBS if o != "budget_left"}}
AGGS = {"prefix_total": "prefixTotal", **{a: a for a in R.AGGS if a != "prefix_total"}}
FORMS = {"every": "every", "some": "someIter", "end": "atEnd"}
ARRIVE = {"batch": "batch", "renewal": "renewal", "poisson": "poisson", "closed": "closed"}
MODES = {"prefill": "prefill", "decode": "decode"}

# Lean 4's keywords and the commands' leading words: never a generated identifier on their own
KEYWORDS = frozenset("""
abbrev at attribute axiom begin by calc catch class deriving do else end example export extends
finally for forall fun have if import in include inductive infix infixl infixr instance let local
macro macro_rules match mut mutual namespace noncomputable nomatch nofun notation open opaque
partial postfix prefix private protected rec return scoped section set_option show structure
suffices syntax then theorem this try unless universe unsafe variable where with Prop Sort Type
""".split())

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def string(s: str) -> str:
    """A Lean string literal: `\\`, `"` and control characters escaped, the rest as is (UTF-8)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def comment(s: str) -> str:
    """Text for inside a Lean comment: one line, and no `/-` or `-/` (block comments nest)."""
    return " ".join(s.split()).replace("/-", "/ -").replace("-/", "- /")


def ident_part(s: str) -> str:
    """`s` with every character outside [A-Za-z0-9_] written `_xHH_`: a piece of an identifier."""
    return "".join(ch if (ch.isascii() and (ch.isalnum() or ch == "_")) else f"_x{ord(ch):02x}_" for ch in s)


def ident(s: str, prefix: str = "") -> str:
    """A valid Lean identifier for `prefix + s`: characters outside [A-Za-z0-9_] become `_xHH_`, a
    leading digit gets `n`, and a keyword gets a trailing `_`."""
    body = ident_part(prefix + s) or "anon"
    if body[0].isdigit():
        body = "n" + body
    if body in KEYWORDS:
        body += "_"
    assert _IDENT.match(body), body
    return body


def camel(s: str) -> str:
    """`vllm_request` -> `VllmRequest`, a namespace component."""
    parts = re.split(r"[^A-Za-z0-9]+", s)
    return ident("".join(p[:1].upper() + p[1:] for p in parts if p) or "Program")


def nat(v: int) -> str:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"not a natural: {v!r}")
    return str(v)


def rational(v) -> str:
    """A value of lean/Serq/Num.lean's `Q`, as one atom: a natural as its numeral (`5`, read
    through `OfNat Q`), any other rational as `(Q.mk NUM DEN)` in lowest terms, the sign on the
    numerator (`(Q.mk (-3) 1)`, `(Q.mk 1 25000)`), as serq/ref/num.py gives it."""
    if isinstance(v, bool) or not isinstance(v, (int, Fraction)):
        raise ValueError(f"not a rational: {v!r}")
    v = Fraction(v)
    n, d = v.numerator, v.denominator  # Fraction keeps lowest terms, the denominator > 0
    if d == 1 and n >= 0:
        return str(n)
    return f"(Q.mk {f'({n})' if n < 0 else n} {d})"


def boolean(b: bool) -> str:
    return "true" if b else "false"


def flat_list(xs, render) -> str:
    return "[" + ", ".join(render(x) for x in xs) + "]"


def lines(xs, render, indent: int) -> str:
    """A list one element a line at `indent` (render(x, indent) may span lines, deeper)."""
    if not xs:
        return "[]"
    pad = " " * indent
    return "[\n" + ",\n".join(pad + render(x, indent) for x in xs) + "]"


# ---------------------------------------------------------------- expressions


def expr(e) -> str:
    if isinstance(e, R.Num):
        return f"Expr.num {rational(e.v)}"
    if isinstance(e, R.Attr):
        return f"Expr.attr {string(e.name)}"
    if isinstance(e, R.Ctx):
        return f"Expr.ctx {string(e.name)}"
    if isinstance(e, R.StepVar):
        return f"Expr.step StepVar.{STEP_VARS[e.name]} {boolean(e.batch)}"
    if isinstance(e, R.Reg):
        return f"Expr.reg {string(e.name)}"
    if isinstance(e, R.Obs):
        return f"Expr.obs ObsFn.{OBS[e.fn]} {string(e.of)}"
    if isinstance(e, R.Agg):
        return f"Expr.agg AggFn.{AGGS[e.fn]} {string(e.name)}"
    if isinstance(e, R.Not):
        return f"Expr.not ({expr(e.e)})"
    if isinstance(e, R.Bin):
        return f"Expr.bin BinOp.{BIN_OPS[e.op]} ({expr(e.l)}) ({expr(e.r)})"
    if isinstance(e, R.Ite):
        return f"Expr.ite ({expr(e.c)}) ({expr(e.a)}) ({expr(e.b)})"
    if isinstance(e, R.Fn):
        return f"Expr.fn Fun.{FUNS[e.name]} {flat_list(e.args, expr)}"
    raise TypeError(f"not an expression of the fragment: {e!r}")


def opt_expr(e) -> str:
    return "none" if e is None else f"(some ({expr(e)}))"


# ---------------------------------------------------------------- statements


def branch(ctor: str, s, render, deeper: int) -> str:
    """A branch of statements or of iteration statements: its guard, then each arm's list."""
    pad = " " * deeper
    return (f"{ctor} ({expr(s.c)})\n{pad}{lines(s.then, render, deeper + 2)}"
            f"\n{pad}{lines(s.else_, render, deeper + 2)}")


def stmt(s, indent: int) -> str:
    deeper = indent + 2
    if isinstance(s, R.SetA):
        return f"Stmt.setA {string(s.name)} ({expr(s.e)})"
    if isinstance(s, R.DrawA):
        return f"Stmt.drawA {string(s.name)}"
    if isinstance(s, R.ObserveA):
        return f"Stmt.observeA {string(s.name)} ({expr(s.e)})"
    if isinstance(s, R.BranchS):
        return branch("Stmt.branchS", s, stmt, deeper)
    if isinstance(s, R.WhileS):
        return f"Stmt.whileS ({expr(s.c)})\n{' ' * deeper}{lines(s.body, stmt, deeper + 2)}"
    if isinstance(s, R.TurnS):
        return "Stmt.turnS"
    if isinstance(s, R.HoldS):
        pad = " " * deeper
        return (f"Stmt.holdS\n{pad}{lines(s.pools, hold_pool, deeper + 2)}\n{pad}{opt_expr(s.reuse)}"
                f"\n{pad}{opt_expr(s.cache)}\n{pad}{lines(s.body, stmt, deeper + 2)}\n{pad}{content(s.content)}")
    if isinstance(s, R.RunS):
        g = "none" if s.growing is None else f"(some {nat(s.growing)})"
        return f"Stmt.runS Mode.{MODES[s.mode]} ({expr(s.work)}) {g}"
    if isinstance(s, R.EndS):
        return "Stmt.endS"
    if isinstance(s, R.JobS):
        return f"Stmt.jobS {nat(s.stage)} ({expr(s.work)})"
    raise TypeError(f"not a statement of the fragment: {s!r}")


def content(c) -> str:
    """A hold's `content (…)` (`Option Content`): its stream, and its parent and `at` (`common`)."""
    if c is None:
        return "none"
    return (f"(some {{ stream := {expr(c.stream)}, parent := {opt_expr(c.parent)},"
            f" common := {opt_expr(c.common)} }})")


def hold_pool(h: R.HoldPool, indent: int) -> str:
    return (f"{{ pool := {nat(h.pool)}, units := {expr(h.units)}, reserve := {opt_expr(h.reserve)}, "
            f"staticUnits := {boolean(h.static_units)}, staticReserve := {boolean(h.static_reserve)} }}")


def istmt(s, indent: int) -> str:
    deeper = indent + 2
    if isinstance(s, R.IServe):
        keys = "none" if s.keys is None else f"(some {flat_list(s.keys, expr)})"
        return f"IStmt.serve {opt_expr(s.only)} {keys} {opt_expr(s.chunk)}"
    if isinstance(s, R.IAdmit):
        return f"IStmt.admit {opt_expr(s.only)} {opt_expr(s.gate)} {opt_expr(s.chunk)}"
    if isinstance(s, R.IBranch):
        return branch("IStmt.branch", s, istmt, deeper)
    if isinstance(s, R.ISet):
        return f"IStmt.set {string(s.name)} ({expr(s.e)})"
    raise TypeError(f"not an iteration statement of the fragment: {s!r}")


# ---------------------------------------------------------------- declarations


def pool(p: R.Pool, indent: int) -> str:
    """A pool: `preempt` its victim's keys (`none`: preempt none; `preempt lifo` is
    `some [0 - admission]`), `requeueTail` whether a victim re-enters its queue as a newcomer,
    `reserveHeld` whether a hold's unallocated reservation counts against later ones, `content`
    whether its cache is keyed by content (`cache content`)."""
    cap = "none" if p.cap is None else f"some {nat(p.cap)}"
    preempt = "none" if p.preempt is None else f"(some {flat_list(p.preempt, expr)})"
    return (f"{{ name := {string(p.name)}, cap := {cap}, block := {nat(p.block)}, preempt := {preempt},"
            f" queueKeys := {flat_list(p.queue_keys, expr)}, admitted := {boolean(p.admitted)},"
            f" memory := {boolean(p.memory)}, requeueTail := {boolean(p.requeue_tail)},"
            f" reserveHeld := {boolean(p.reserve_held)}, content := {boolean(p.content)} }}")


def stage(st: R.Stage, indent: int) -> str:
    """A ps stage: its capacity phi (reading `present`), or `none` for a delay (every job at rate 1)."""
    return f"{{ name := {string(st.name)}, phi := {opt_expr(st.phi)} }}"


def claim(c: R.Claim, indent: int) -> str:
    return (f"{{ name := {string(c.name)}, form := Form.{FORMS[c.form]}, e := {expr(c.e)},"
            f" given := {opt_expr(c.given)} }}")


def registers(regs) -> str:
    return "[" + ", ".join(f"({string(n)}, {rational(v)})" for n, v in regs) + "]"


def row(r: R.Row) -> str:
    """A trace row, every field (an anonymous constructor takes no default)."""
    return (f"⟨{nat(r.new)}, {nat(r.out)}, {nat(r.think)}, {nat(r.forced)}, {nat(r.stream)}, {nat(r.parent)},"
            f" {nat(r.common)}⟩")


def trace(sessions, indent: int) -> str:
    """A trace's sessions, each its rows (`List (List Row)`), one session a line."""
    return lines(sessions, lambda rows, _i: "[" + ", ".join(row(r) for r in rows) + "]", indent)


def session_in(s: R.SessionIn, indent: int) -> str:
    return (f"{{ arrival := {rational(s.arrival)}, draws := [{', '.join(nat(d) for d in s.draws)}],"
            f" rows := [{', '.join(row(r) for r in s.rows)}] }}")


def workload(w: R.Workload, indent: int) -> str:
    return f"{{ sessions := {lines(w.sessions, session_in, indent + 2)} }}"
