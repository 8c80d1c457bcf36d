"""A proof over the reals against the simulator's floating point (docs/verify.md, *Floating point*).

The kernel computes exactly over the rationals; `serq run` computes in binary floating point. Where
every number a claim compares is exact in floating point too (whole counts and tokens, a clock of
whole or dyadic costs), the two read the claim alike. Where one is not (a time under a cost of
1/3 or 0.001, under poisson arrivals or a ps stage's shared rate, a quotient, the client's tpot), a
claim that holds exactly may hold on a tie (3 * total(wait) == total(need) on every workload), and
the simulator's rounding then fails it. So a claim proved there (`proved`, `no_witness`) is proved
again with a margin the rounding cannot cross: each comparison of an inexact number made to hold
by a billionth of the larger side (at least a billionth), `strengthen`. Proved so, the verdict
stands. Otherwise the margin's counterexample is a workload on a tie: the simulator runs it and,
if it fails the claim there, that is the verdict (a counterexample the interpreter shows); so do
workloads drawn from the bound, run in floating point; else the claim is `unknown`, proved exactly
and on a tie.

A billionth: the interpreter's values are sums and products of at most some thousands of rounded
operations on a path of the bound (the kernel's fuel, 5,000 steps), each off by at most 2^-53 of
its magnitude, far under 10^-9 of the larger side.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

from serq.ir import model as I
from serq.ref import ir as R
from serq.ref.num import of_decimal
from serq.verify.invariant import _nodes

TOL = 1e-9          # the margin, relative to the larger side (at least 1)
SEARCH_SHARE = 0.1  # of the timeout, the most the search in floating point may take
SEARCH_SEED = 46

CMP = ("==", "!=", "<", "<=", ">", ">=")
TIME_CTX = ("now", "waited")


def dyadic(v) -> bool:
    """Whether a rational is a float exactly: a whole number, or a denominator a power of 2."""
    v = Fraction(v)
    d = v.denominator
    return d & (d - 1) == 0 and abs(v.numerator) < 2 ** 53


@dataclass
class Facts:
    """Which numbers of a program the interpreter holds exactly: the clock, and the attributes,
    registers and observations whose every value is computed from exact numbers."""
    clock: bool = True
    attrs: set = field(default_factory=set)     # inexact attributes
    regs: set = field(default_factory=set)      # inexact registers
    obs: set = field(default_factory=set)       # inexact observations
    why: list = field(default_factory=list)     # what makes the clock inexact, said once each

    def inexact(self) -> bool:
        return not self.clock or bool(self.attrs or self.regs or self.obs)


def exact(e, f: Facts) -> bool:
    """Whether the interpreter computes the fragment expression `e` exactly (R-level)."""
    if isinstance(e, R.Num):
        return dyadic(e.v)
    if isinstance(e, R.Attr):
        return e.name not in f.attrs
    if isinstance(e, R.Ctx):
        return f.clock if e.name in TIME_CTX else True
    if isinstance(e, (R.StepVar,)):
        return True
    if isinstance(e, R.Obs):
        return f.clock if e.fn == "work" else True
    if isinstance(e, R.Reg):
        return e.name not in f.regs
    if isinstance(e, R.Agg):
        return _agg_exact(e.fn, e.name, f)
    if isinstance(e, R.Not):
        return exact(e.e, f)
    if isinstance(e, R.Bin):
        if e.op == "/":
            return exact(e.l, f) and isinstance(e.r, R.Num) and e.r.v != 0 and dyadic(Fraction(1) / Fraction(e.r.v))
        return exact(e.l, f) and exact(e.r, f)
    if isinstance(e, R.Ite):
        return exact(e.c, f) and exact(e.a, f) and exact(e.b, f)
    if isinstance(e, R.Fn):
        return all(exact(a, f) for a in e.args)
    return False


def _agg_exact(fn: str, name: str, f: Facts) -> bool:
    if fn == "count":
        return True
    if name in R.CLIENT_METRICS:   # tpot divides by the output tokens less one
        return f.clock and name != "tpot"
    return name not in f.obs


def _phi(e, n: int):
    """A ps stage's capacity with `present` n, exactly, or None where it reads anything else."""
    if isinstance(e, R.Num):
        return Fraction(e.v)
    if isinstance(e, R.Ctx) and e.name == "present":
        return Fraction(n)
    if isinstance(e, R.Bin):
        a, b = _phi(e.l, n), _phi(e.r, n)
        if a is None or b is None:
            return None
        ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
               "/": lambda: a / b if b else None, "<": lambda: Fraction(a < b), "<=": lambda: Fraction(a <= b),
               ">": lambda: Fraction(a > b), ">=": lambda: Fraction(a >= b), "==": lambda: Fraction(a == b),
               "!=": lambda: Fraction(a != b)}
        return ops[e.op]() if e.op in ops else None
    if isinstance(e, R.Ite):
        c = _phi(e.c, n)
        return None if c is None else _phi(e.a if c else e.b, n)
    if isinstance(e, R.Fn) and e.name in ("min", "max"):
        args = [_phi(a, n) for a in e.args]
        return None if None in args else (min if e.name == "min" else max)(args)
    return None


def facts(p: R.Program, sessions: Optional[int] = None) -> Facts:
    """The program's exact and inexact numbers, to a fixpoint: an attribute set, a register set or
    an observation made from an inexact number is inexact, and so is the clock where a cost, a
    stage's work or an arrival is. A ps stage serves each of its n jobs at phi(n) / n: exact where
    that is a float for every n up to `sessions` (None: every n, as a proof for every number of
    sessions asks)."""
    f = Facts()
    if p.arrive == "poisson":
        f.clock = False
        f.why.append("poisson arrivals at any real time")
    elif p.arrive == "renewal" and not dyadic(p.gap):
        f.clock = False
        f.why.append(f"a renewal gap of {p.gap}")
    for st in p.stages:
        if st.phi is None:
            continue
        rates = [_phi(st.phi, n) for n in range(1, (sessions or 0) + 1)] if sessions is not None else [None]
        if any(r is None or not r or not dyadic(r / n) for n, r in enumerate(rates, 1)):
            f.clock = False
            f.why.append(f"the ps stage {st.name} shares its rate among its jobs")
    # the statements that may compute a number no float holds, nested ones too
    stmts = [n for n in _nodes(p.init + p.turn + (p.session or ()) + p.server)
             if isinstance(n, (R.SetA, R.ObserveA, R.JobS))]
    isets = [n for n in _nodes(p.engine.body) if isinstance(n, R.ISet)]
    while True:
        before = (f.clock, len(f.attrs), len(f.regs), len(f.obs))
        if f.clock and not exact(p.engine.cost, f):
            f.clock = False
            f.why.append("the iteration's cost is no float exactly")
        for s in stmts:
            if isinstance(s, R.SetA) and not exact(s.e, f):
                f.attrs.add(s.name)
            elif isinstance(s, R.ObserveA) and not exact(s.e, f):
                f.obs.add(s.name)
            elif isinstance(s, R.JobS) and f.clock and not exact(s.work, f):
                f.clock = False
                f.why.append("a stage's work is no float exactly")
        for s in isets:
            if not exact(s.e, f):
                f.regs.add(s.name)
        for name, init in p.engine.registers:
            if not dyadic(init):
                f.regs.add(name)
        if (f.clock, len(f.attrs), len(f.regs), len(f.obs)) == before:
            return f


# ---------------------------------------------------------------- the claim, as the interpreter reads it


def exact_i(e, f: Facts) -> bool:
    """`exact` of a linked-IR expression (the interpreter's, whose claim is rewritten)."""
    k = getattr(e, "k", None)
    if k == "num":
        return dyadic(of_decimal(e.v))
    if k == "attr":
        return e.name not in f.attrs
    if k == "ctx":
        return f.clock if e.name in TIME_CTX else True
    if k == "step":
        return True
    if k == "obs":
        return f.clock if e.fn == "work" else True
    if k == "reg":
        return e.name not in f.regs
    if k == "agg":
        return _agg_exact(e.fn, e.name, f)
    if k == "un":
        return exact_i(e.e, f)
    if k == "bin":
        if e.op == "/":
            return exact_i(e.l, f) and getattr(e.r, "k", None) == "num" and e.r.v != 0 and \
                dyadic(Fraction(1) / Fraction(of_decimal(e.r.v)))
        return exact_i(e.l, f) and exact_i(e.r, f)
    if k == "if":
        return exact_i(e.c, f) and exact_i(e.a, f) and exact_i(e.b, f)
    if k == "fn":
        return all(exact_i(a, f) for a in e.args)
    if k == "cost":
        return exact_i(e.e, f)
    return False


def sensitive(e, f: Facts) -> bool:
    """Whether a claim's reading compares an inexact number (or reads one as a truth value): where
    the simulator's rounding may flip it."""
    k = getattr(e, "k", None)
    if k == "bin" and e.op in ("&&", "||"):
        return sensitive(e.l, f) or sensitive(e.r, f)
    if k == "un" and e.op == "!":
        return sensitive(e.e, f)
    if k == "if":
        return sensitive(e.c, f) or sensitive(e.a, f) or sensitive(e.b, f)
    return not exact_i(e, f)


def _num(v: float) -> I.Num:
    return I.Num(v=v)


def _margin(a, b) -> I.Expr:
    """A billionth of the larger side, at least a billionth."""
    return I.Bin(op="*", l=_num(TOL), r=I.Fn(name="max", args=[_num(1.0), I.Fn(name="abs", args=[a]),
                                                              I.Fn(name="abs", args=[b])]))


def _cmp(op: str, l, r) -> I.Expr:
    return I.Bin(op=op, l=l, r=r)


FALSE = I.Num(v=0.0)
TRUE = I.Num(v=1.0)


def strengthen(e, f: Facts):
    """A claim body that holds only where `e` holds with the margin on every inexact comparison:
    where it holds, no rounding of the interpreter's makes `e` fail."""
    return _robust(e, f, True)


def weaken(e, f: Facts):
    """A claim body that holds wherever `e` could hold once the interpreter rounds (its negation is
    `strengthen` of `!e`)."""
    return _robust(e, f, False)


def _robust(e, f: Facts, strong: bool):
    if not sensitive(e, f):     # nothing in it the simulator rounds: it reads as the kernel does
        return e
    k = getattr(e, "k", None)
    if k == "bin" and e.op in ("&&", "||"):
        return I.Bin(op=e.op, l=_robust(e.l, f, strong), r=_robust(e.r, f, strong))
    if k == "un" and e.op == "!":
        return I.Un(op="!", e=_robust(e.e, f, not strong))
    if k == "if":
        if exact_i(e.c, f):
            return I.If(c=e.c, a=_robust(e.a, f, strong), b=_robust(e.b, f, strong))
        a, b = _robust(e.a, f, strong), _robust(e.b, f, strong)
        both = I.Bin(op="&&", l=a, r=b) if strong else I.Bin(op="||", l=a, r=b)
        return I.If(c=_robust(e.c, f, True), a=a, b=I.If(c=_robust(I.Un(op="!", e=e.c), f, True), a=b, b=both))
    if k == "bin" and e.op in CMP:
        if exact_i(e.l, f) and exact_i(e.r, f):
            return e
        if not (_numeric(e.l) and _numeric(e.r)):   # an operand that is itself a comparison's truth
            return FALSE if strong else TRUE
        const = _constant(e.r) if not _constant(e.l) else None
        if const is None and _constant(e.l) is not None and e.op not in ("==", "!="):
            flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[e.op]
            return _robust(I.Bin(op=flip, l=e.r, r=e.l), f, strong)
        if const is not None and e.op not in ("==", "!="):
            # against a constant c, a margin of a billionth of max(1, |c|) is enough (the side's own
            # error is a billionth of it or less, or the side is far past c): the claim keeps its shape,
            # `largest(A) <= c`, which the proof per session reads
            shift = TOL * max(1.0, abs(const))
            up = e.op in ("<", "<=")
            c2 = const - shift if up == strong else const + shift
            return I.Bin(op="<=" if up else ">=", l=e.l, r=_num(c2))
        m = _margin(e.l, e.r)
        lo, hi = (e.l, e.r)
        if e.op in ("<", "<="):
            return _cmp("<=", I.Bin(op="+", l=lo, r=m), hi) if strong else _cmp("<=", lo, I.Bin(op="+", l=hi, r=m))
        if e.op in (">", ">="):
            return _cmp("<=", I.Bin(op="+", l=hi, r=m), lo) if strong else _cmp("<=", hi, I.Bin(op="+", l=lo, r=m))
        apart = _cmp(">", I.Fn(name="abs", args=[I.Bin(op="-", l=lo, r=hi)]), m)
        near = _cmp("<=", I.Fn(name="abs", args=[I.Bin(op="-", l=lo, r=hi)]), m)
        if e.op == "==":
            return FALSE if strong else near
        return apart if strong else TRUE
    if exact_i(e, f):
        return e
    # a number read as a truth value: nonzero
    return _robust(I.Bin(op="!=", l=e, r=_num(0.0)), f, strong)


def _constant(e) -> Optional[float]:
    """The value of a constant (a number, or its negation), else None."""
    k = getattr(e, "k", None)
    if k == "num":
        return e.v
    if k == "un" and e.op == "-" and getattr(e.e, "k", None) == "num":
        return -e.e.v
    return None


def _numeric(e) -> bool:
    k = getattr(e, "k", None)
    if k == "bin":
        return e.op not in CMP + ("&&", "||")
    if k == "un":
        return e.op == "-"
    return True


# ---------------------------------------------------------------- the search in floating point


def workloads(p: R.Program, sessions: int, values: int, gap: int, n: int, seed: int = SEARCH_SEED):
    """`n` workloads of the bound as `serq run --workload` reads them, drawn as verify's sample draws
    them (a draw 0..2, the bound, or any value; under poisson a gap of 0, a whole one or quarters)."""
    rng = random.Random(seed)
    for i in range(n):
        k = 1 + i % sessions
        flags = rng.random() < 0.25
        burst = rng.random() < 0.25
        out, t = [], 0
        for j in range(k):
            if p.arrive == "poisson" and (j or rng.random() < 0.5):
                # a gap of 0, a whole one, quarters (exact in floating point) or tenths and hundredths
                # (which are not: where the simulator's sums round)
                pick = rng.random()
                t += 0 if (pick < 0.2 or burst) and j else rng.randint(0, gap) if pick < 0.4 else \
                    Fraction(rng.randint(0, 4 * gap), 4) if pick < 0.55 else \
                    Fraction(rng.randint(0, 10 * gap), 10) if pick < 0.8 else Fraction(rng.randint(0, 100 * gap), 100)
            draws = []
            for _ in range(64):
                if flags:
                    draws.append(rng.randint(0, min(1, values)))
                else:
                    pick = rng.random()
                    draws.append(rng.randint(0, min(2, values)) if pick < 0.3 else values if pick < 0.45
                                 else rng.randint(0, values))
            at = float(t) if p.arrive == "poisson" else float((j + 1) * p.gap) if p.arrive == "renewal" else 0
            out.append({"arrival": at, "draws": draws})
        yield {"sessions": out}


def trimmed(prog: I.Program, wl: dict, claim: str, c: dict, deadline: float) -> dict:
    """The workload with each session's draws cut to those its run takes (the least that still give
    the simulator's reading `c`): a drawn list of 64 reads as what was used."""
    sessions = [dict(s, draws=list(s["draws"])) for s in wl["sessions"]]
    for s in sessions:
        lo, hi = 0, len(s["draws"])
        full = s["draws"]
        while lo < hi:
            mid = (lo + hi) // 2
            s["draws"] = full[:mid]
            got = simulate(prog, {"sessions": sessions}, claim, deadline)
            if got is not None and got["status"] == c["status"] and got["at"] == c["at"]:
                hi = mid
            else:
                lo = mid + 1
        s["draws"] = full[:hi]
    return {"sessions": sessions}


def simulate(prog: I.Program, wl: dict, claim: str, deadline: float) -> Optional[dict]:
    """The interpreter's report of the claim on a workload (status, at, iteration), or None when it
    stops (a run error, R003 for draws the workload lacks) or runs past the deadline."""
    from serq import api
    from serq.diagnostics import SerqError
    from serq.verify.search import clock

    class _Late(Exception):
        pass

    def progress(sim):
        if clock() > deadline:
            raise _Late()

    try:
        rep = api.run(prog, None, progress, wl)
    except (_Late, SerqError):
        return None
    return rep["claims"].get(claim)


# ---------------------------------------------------------------- the audit of a proof


def audit(prog: I.Program, p: R.Program, res, sessions: int, values: int, timeout: float, again) -> None:
    """Each claim `proved` or `no_witness` over the reals whose reading compares an inexact number,
    proved again with the margin (`again(prog)`: verify's search on a program, its Result), else
    decided by the simulator on a tie, else `unknown` (the module's docstring). Verdicts change in
    place."""
    from serq.verify.search import clock
    bounded, unbounded = facts(p, sessions), facts(p)
    if not unbounded.inexact():
        return
    for decl in prog.claims:
        v = res.claims[decl.name]
        if v.verdict not in ("proved", "no_witness"):
            continue
        # a proof for every number of sessions reads every number of jobs at a ps stage
        f = unbounded if v.every_sessions else bounded
        if not sensitive(decl.e, f):
            continue
        start = clock()
        body = weaken(decl.e, f) if v.form == "some" else strengthen(decl.e, f)
        margin = prog.model_copy(update={"claims": [decl.model_copy(update={"e": body})]})
        got = again(margin).claims[decl.name]
        if got.verdict == v.verdict:      # proved with the margin: no rounding crosses it
            how = v.by
            for k in ("by", "every_value", "every_sessions", "invariant", "unrolled", "per_session", "within_bound"):
                setattr(v, k, getattr(got, k))
            v.margin = True
            if how != got.by:
                v.reason = f"over the reals {how}; with a margin of a billionth {got.by}"
            v.seconds += clock() - start
            continue
        exact_by = v.by
        tried = 0
        deadline = clock() + max(1.0, SEARCH_SHARE * timeout)
        want = "witnessed" if v.form == "some" else "failed"
        candidates = ([got.workload] if got.workload is not None else []) + \
            list(workloads(p, sessions, values, values, 4 * R_SAMPLES))
        found = None
        for wl in candidates:
            if clock() > deadline:
                break
            tried += 1
            c = simulate(prog, wl, decl.name, deadline)
            if c is not None and c["status"] == want:
                found = (wl, c)
                break
        tie = got.workload
        v.margin = False
        v.by = None
        v.every_value = v.every_sessions = False
        v.invariant = v.per_session = v.unrolled = v.within_bound = None
        if found is not None:
            wl, c = found
            wl = trimmed(prog, wl, decl.name, c, deadline + max(1.0, SEARCH_SHARE * timeout))
            v.by = "floating point"
            v.verdict = "counterexample" if want == "failed" else "witnessed"
            v.workload, v.at, v.iteration = wl, c["at"], c.get("iteration")
            v.sessions = len(wl["sessions"])
            v.reason = (f"holds exactly over the reals ({exact_by}), on a tie: the simulator's floating point "
                        f"{'fails' if want == 'failed' else 'witnesses'} it on this workload")
        else:
            v.verdict = "unknown"
            v.workload = None
            v.reason = (f"holds exactly over the reals ({exact_by}), not with a margin of a billionth: "
                        + (f"on a tie (a workload of {len(tie['sessions'])} session(s) at a billionth from "
                           f"{'failing' if want == 'failed' else 'holding'})" if tie is not None else
                           f"{got.reason or got.verdict}")
                        + f"; the simulator's floating point may read it otherwise there, and "
                        f"{tried} workload(s) run in floating point did not (docs/verify.md, *Floating point*): "
                        "a bound past the tie (looser by more than a billionth) can be proved with the margin")
        v.seconds += clock() - start


R_SAMPLES = 32
