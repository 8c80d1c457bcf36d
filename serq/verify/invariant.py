"""Claims over iterations proved for every number of sessions from the invariants the reference
kernel keeps (docs/verify.md, *Induction*).

A claim over iterations reads a few quantities of the machine as the iteration starts (the batch's
tokens, a pool's use and holders, the residents...). Each quantity is here an unknown, and the
claim is read by the kernel's own `eval_expr` on them (one semantics: its arithmetic, its ties,
its refusals). The kernel keeps relations between them at every iteration of every path, whatever
the number of sessions, the values and the arrival times (the lemmas below, each an induction over
the kernel's moves written out in docs/verify.md and checked at every iteration of random paths by
tests/test_verify_invariant.py). When z3 shows that every value of the unknowns the lemmas allow
gives the claim the value it must have at every iteration, the claim is proved for every workload
of any number of sessions, any values and any arrival times, with no bound on the path's length;
the lemmas z3 needed are the invariant that closed the proof, and are printed. A claim the lemmas
do not imply is not refuted: the paths decide it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import z3

from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import search as S
from serq.verify.sym import Trace, numeral

# the batch's values as a claim names them (serq/link/names.py, CLAIM_ITER_VALUES)
BATCH_NAMES = {"Ntok": "tokens", "Npre": "prefilled", "Ndec": "decoders", "Kvb": "kv_decode",
               "Kvp": "kv_prefill", "Attn": "attention"}
STEP_NAMES = {"Nres": "residents", "Ndec": "running.decoding", "Kvb": "running.kv_decode",
              "Kvp": "running.kv_prefill", "Preempted": "running.preempted", "Admitted": "waiting.admitted",
              "Queued": "waiting.count", "Ntok": "tokens", "Npre": "prefilled", "Attn": "attention"}


def leaf_name(e) -> Optional[str]:
    """The unknown a quantity of the machine is, named as the program writes it; None for a node
    that is not one. The clock is `T`, the search's real unknown for it."""
    if isinstance(e, R.StepVar):
        # the batch flag matters only to these three (exec.eval_expr)
        if e.batch and e.name in ("Ndec", "Kvb", "Kvp"):
            return BATCH_NAMES[e.name]
        return STEP_NAMES[e.name]
    if isinstance(e, R.Obs):
        return f"{e.fn}({e.of})"
    if isinstance(e, R.Ctx):
        return {"now": "T", "served": "served", "arrived": "arrived", "demand": "demand"}.get(e.name)
    return None


class Unsupported(Exception):
    """The claim reads something the invariants say nothing of (a register, an aggregate)."""


REG = "reg."   # a register's unknown: `reg.ratio`, a real (search.real)


def abstract(e, leaves: dict, regs: bool = False, aggs: bool = False):
    """The expression with each quantity of the machine it reads an attribute of that name;
    `leaves` collects name -> the quantity's own expression. `regs`: an engine register is one too
    (any real: *Registers*, below); `aggs`: an aggregate of the client's samples too (a real,
    serq/verify/bounded.py)."""
    n = leaf_name(e)
    if n is not None:
        leaves[n] = e
        return R.Attr(n)
    if regs and isinstance(e, R.Reg):
        leaves[REG + e.name] = e
        return R.Attr(REG + e.name)
    if aggs and isinstance(e, R.Agg) and e.name in R.CLIENT_METRICS:
        leaves[f"agg.{e.fn}({e.name})"] = e
        return R.Attr(f"agg.{e.fn}({e.name})")
    if isinstance(e, R.Num):
        return e
    if isinstance(e, R.Not):
        return replace(e, e=abstract(e.e, leaves, regs, aggs))
    if isinstance(e, R.Bin):
        return replace(e, l=abstract(e.l, leaves, regs, aggs), r=abstract(e.r, leaves, regs, aggs))
    if isinstance(e, R.Ite):
        return replace(e, c=abstract(e.c, leaves, regs, aggs), a=abstract(e.a, leaves, regs, aggs),
                       b=abstract(e.b, leaves, regs, aggs))
    if isinstance(e, R.Fn):
        return replace(e, args=tuple(abstract(a, leaves, regs, aggs) for a in e.args))
    what = {R.Reg: "an engine register", R.Agg: "an aggregate of observations",
            R.Attr: "a session's attribute", R.Ctx: "a context value"}.get(type(e), type(e).__name__)
    raise Unsupported(f"the claim reads {what}, of which the kernel's invariants say nothing")


# ---------------------------------------------------------------- the lemmas


@dataclass(frozen=True)
class Lemma:
    key: str
    text: str                      # as the program would write it
    fact: Callable                 # (name -> the quantity's term) -> a z3 boolean
    quantities: tuple              # the quantities' expressions, by name


def _statements(p: R.Program) -> tuple:
    """The statements a session runs (init, turn, session, server), outer ones only."""
    return p.init + p.turn + (p.session or ()) + p.server


def _runs_in_holds_on(p: R.Program, i: int) -> bool:
    """Whether every run of the program stands inside a hold that takes pool i."""
    def walk(block, inside: bool) -> bool:
        for st in block:
            if isinstance(st, R.RunS) and not inside:
                return False
            if isinstance(st, R.HoldS):
                if not walk(st.body, inside or any(hp.pool == i for hp in st.pools)):
                    return False
            elif isinstance(st, R.BranchS):
                if not (walk(st.then, inside) and walk(st.else_, inside)):
                    return False
            elif isinstance(st, R.WhileS) and not walk(st.body, inside):
                return False
        return True
    return walk(_statements(p), False)


def covered(p: R.Program) -> list:
    """The pairs (i, j) of pools, i held somewhere, such that every hold that takes pool i also takes
    pool j or stands inside a hold that does: a session holds on i only while it holds on j."""
    cover: dict = {}

    def walk(block, outer: frozenset):
        for st in block:
            if isinstance(st, R.HoldS):
                here = frozenset(hp.pool for hp in st.pools)
                for i in here:
                    cover[i] = cover.get(i, here | outer) & (here | outer)
                walk(st.body, outer | here)
            elif isinstance(st, R.BranchS):
                walk(st.then, outer)
                walk(st.else_, outer)
            elif isinstance(st, R.WhileS):
                walk(st.body, outer)
    walk(_statements(p), frozenset())
    return sorted((i, j) for i, js in cover.items() for j in js if j != i)


def _least_units(p: R.Program, i: int) -> Optional[int]:
    """The least units any hold allocates on pool i when every hold on it takes a constant amount
    (rounded up to the pool's block, as the kernel allocates); None when one reads more."""
    least = None
    for h in (n for n in _nodes(_statements(p)) if isinstance(n, R.HoldS)):
        for hp in h.pools:
            if hp.pool != i:
                continue
            if not isinstance(hp.units, R.Num) or hp.units.v != int(hp.units.v) or hp.units.v < 0:
                return None
            u = X.round_up(int(hp.units.v), p.pools[i].block)
            least = u if least is None else min(least, u)
    return least


def lemmas(p: R.Program) -> list:
    """The kernel's invariants at an iteration's reading, for this program: each holds at every
    iteration of every path, for any number of sessions (docs/verify.md, *Induction*: its table says
    which of the kernel's moves keep each, in this order)."""
    out = []
    eng = p.engine.name
    tok, pre, dec = R.StepVar("Ntok", True), R.StepVar("Npre", True), R.StepVar("Ndec", True)
    out.append(Lemma("split", "tokens == prefilled + decoders",
                     lambda v: v("tokens") == v("prefilled") + v("decoders"),
                     (("tokens", tok), ("prefilled", pre), ("decoders", dec))))
    if isinstance(p.engine.budget, R.Num):
        b = p.engine.budget.v
        out.append(Lemma("budget", f"tokens <= {b}", lambda v, b=b: v("tokens") <= numeral(b),
                         (("tokens", tok),)))
    busy = R.Obs("busy", eng)
    queue, res = R.Obs("queue", eng), R.StepVar("Nres")
    nb, nq = f"busy({eng})", f"queue({eng})"
    out.append(Lemma("busy", f"{nb} == min({nq}, 1)", lambda v: v(nb) == z3.If(v(nq) > 0, 1, 0),
                     ((nb, busy), (nq, queue))))
    out.append(Lemma("requests", f"{nq} <= residents", lambda v: v(nq) <= v("residents"),
                     ((nq, queue), ("residents", res))))
    out.append(Lemma("decoders", f"decoders <= {nq}", lambda v: v("decoders") <= v(nq),
                     (("decoders", dec), (nq, queue))))
    grown = {st.growing for st in _nodes(_statements(p)) if isinstance(st, R.RunS) and st.growing is not None}
    if len(grown) == 1 and not p.pools[min(grown)].content:
        g = p.pools[min(grown)].name
        ng = f"used({g})"
        out.append(Lemma(f"positions:{g}", f"kv_decode + kv_prefill <= {ng}",
                         lambda v, ng=ng: v("kv_decode") + v("kv_prefill") <= v(ng),
                         (("kv_decode", R.StepVar("Kvb", True)), ("kv_prefill", R.StepVar("Kvp", True)),
                          (ng, R.Obs("used", g)))))
    for i, j in covered(p):
        hi, hj = R.Obs("holders", p.pools[i].name), R.Obs("holders", p.pools[j].name)
        ni, nj = f"holders({p.pools[i].name})", f"holders({p.pools[j].name})"
        out.append(Lemma(f"nested:{p.pools[i].name}:{p.pools[j].name}", f"{ni} <= {nj}",
                         lambda v, ni=ni, nj=nj: v(ni) <= v(nj), ((ni, hi), (nj, hj))))
    for i, pool in enumerate(p.pools):
        used, free, holders = R.Obs("used", pool.name), R.Obs("free", pool.name), R.Obs("holders", pool.name)
        nu, nf, nh = f"used({pool.name})", f"free({pool.name})", f"holders({pool.name})"
        if pool.cap is not None:
            c = pool.cap
            out.append(Lemma(f"cap:{pool.name}", f"{nu} <= {c}", lambda v, c=c, nu=nu: v(nu) <= numeral(c),
                             ((nu, used),)))
            out.append(Lemma(f"free:{pool.name}", f"{nf} == {c} - {nu}",
                             lambda v, c=c, nu=nu, nf=nf: v(nf) == numeral(c) - v(nu),
                             ((nu, used), (nf, free))))
        least = _least_units(p, i)
        if not pool.content and least:
            out.append(Lemma(f"slots:{pool.name}", f"{least} * {nh} <= {nu}" if least != 1 else f"{nh} <= {nu}",
                             lambda v, least=least, nu=nu, nh=nh: numeral(least) * v(nh) <= v(nu),
                             ((nu, used), (nh, holders))))
        if pool.admitted and sum(q.admitted for q in p.pools) == 1 and _runs_in_holds_on(p, i):
            out.append(Lemma(f"residents:{pool.name}", f"residents == {nh}",
                             lambda v, nh=nh: v("residents") == v(nh), (("residents", res), (nh, holders))))
    return out


# ---------------------------------------------------------------- refusals


def subst(e, f):
    """The expression with each node x replaced by f(x) (f returns x to keep it and go inside)."""
    if isinstance(e, tuple):
        return tuple(subst(x, f) for x in e)
    if not hasattr(e, "__dataclass_fields__"):
        return e
    y = f(e)
    if y is not e:
        return y
    return type(e)(**{k: subst(getattr(e, k), f) for k in e.__dataclass_fields__})


def _nodes(x):
    """Every IR node under x, depth first."""
    if isinstance(x, tuple):
        for y in x:
            yield from _nodes(y)
    elif hasattr(x, "__dataclass_fields__"):
        yield x
        for f in x.__dataclass_fields__:
            yield from _nodes(getattr(x, f))


def _fractional(e, frac: set) -> bool:
    """Whether an expression may have a value that is not whole: a decimal, a quotient, the clock
    (real arrival times), a register, an attribute set from one; floor, ceil and round are whole."""
    if isinstance(e, R.Num):
        return e.v != int(e.v)
    if isinstance(e, R.Attr):
        return e.name in frac
    if isinstance(e, (R.Ctx, R.Reg, R.Agg)):
        return not (isinstance(e, R.Ctx) and e.name in ("decoding", "admission", "remaining", "position"))
    if isinstance(e, R.Bin):
        return e.op == "/" or _fractional(e.l, frac) or _fractional(e.r, frac)
    if isinstance(e, R.Fn):
        return e.name not in ("floor", "ceil", "round", "reusable") and any(_fractional(a, frac) for a in e.args)
    if isinstance(e, R.Ite):
        return _fractional(e.a, frac) or _fractional(e.b, frac)
    if isinstance(e, R.Not):
        return False
    return False   # step values and observables are counts


def refusal(p: R.Program) -> Optional[str]:
    """Why some workload of the program may be refused by the kernel (F016: a division by 0, an
    amount that is a fraction), or None when none can be. The lemmas are the kernel's, on the paths
    it runs: where the interpreter runs on with inf, NaN or a fraction, they say nothing, so such a
    program is left to the paths, which say `unknown` with the workload (docs/verify.md, *Replay*)."""
    body = replace(p, claims=())
    for n in _nodes(body):
        if isinstance(n, R.Bin) and n.op in ("/", "%") and not (isinstance(n.r, R.Num) and n.r.v != 0):
            return "the program divides by a value it computes: a workload the kernel refuses (F016) is outside the proof"
        if isinstance(n, R.Fn) and n.name == "reusable" and not (isinstance(n.args[1], R.Num) and n.args[1].v > 0):
            return "`reusable` of a block the program computes: a workload the kernel refuses (F016) is outside the proof"
    frac: set = set()
    sets = [n for n in _nodes(body) if isinstance(n, R.SetA)]
    while True:   # the attributes that may hold a fraction, to a fixpoint
        more = {s.name for s in sets if s.name not in frac and _fractional(s.e, frac)}
        if not more:
            break
        frac |= more
    amounts = []
    for n in _nodes(body):
        if isinstance(n, R.RunS):
            amounts.append(n.work)
        elif isinstance(n, R.HoldPool):
            amounts += [n.units, n.reserve]
        elif isinstance(n, R.HoldS):
            amounts += [n.reuse, n.cache]
        elif isinstance(n, (R.IServe, R.IAdmit)):
            amounts.append(n.chunk)
    amounts += [p.engine.budget, p.engine.chunk, p.engine.granule]
    if any(a is not None and _fractional(a, frac) for a in amounts):
        return "an amount of units or tokens may be a fraction: a workload the kernel refuses (F016) is outside the proof"
    return None


# ---------------------------------------------------------------- the proof


@dataclass
class Proof:
    invariant: list       # the lemmas z3 needed, as the program writes them


def _domain(n: str):
    # a register is any real (it may go below 0); every other quantity a natural, the clock a real >= 0
    return z3.BoolVal(True) if n.startswith(REG) else S.var(n) >= 0


def _implied(p: R.Program, e, want: bool, lems: list, left, found: Optional[list] = None,
             regs: bool = False, aggs: bool = False) -> Optional[str]:
    """None when every value of the claim's quantities the lemmas allow reads it as `want`; else why
    not (a reading the lemmas allow, a refusal, what z3 could not decide). `found` gets the quantities'
    values of a reading the lemmas allow that reads it otherwise; `regs`: registers are quantities."""
    leaves: dict = {}
    e2 = abstract(e, leaves, regs, aggs)
    # every quantity is a natural (the clock a real >= 0), those the claim does not read included
    names = dict.fromkeys(list(leaves) + [n for lm in lems for n, _ in lm.quantities])
    base = [lm.fact(S.var) for lm in lems] + [_domain(n) for n in names]
    s = z3.Solver()
    s.add(base)
    if s.check() != z3.sat:   # the lemmas are true of every reading: never the case
        return "the kernel's invariants are unsatisfiable here (a bug of serQ)"
    mdl = s.model()
    start = S.Inputs({n: S.model_value(mdl, n) for n in leaves})

    last: list = []

    def run(inp: S.Inputs):
        env = X.Env(tuple((n, inp.value(n)) for n in leaves))
        last[:] = [env]
        with Trace() as tr:
            try:
                val = bool(X.eval_expr(p, None, env, e2) != 0)
            except X.KernelError as err:
                val = err
        return tr.facts, val, None

    bad: list = []

    def see(_facts, val) -> bool:
        if isinstance(val, X.KernelError):
            bad.append(f"reading it, the kernel stops with {val}")
        elif val != want:
            bad.append("the kernel's invariants allow a reading where it " + ("fails" if want else "holds"))
            if found is not None:
                found.append(last[0])
        return bool(bad)

    try:
        _, _, undecided = S.explore_with(run, _domain, left, see, base=base, start=(start, run(start)))
    except S.Deadline:
        return "the timeout ran out"
    if bad:
        return bad[0]
    if undecided:
        return f"z3 could not decide {undecided} branch(es)"
    return None


def prove(p: R.Program, j: int, left) -> Proof | str:
    """A claim over iterations (index j) proved from the lemmas, or why not."""
    c = p.claims[j]
    if c.form == "end":
        return "a claim at end"
    want = c.form == "every"
    why = refusal(p)
    if why is not None:
        return why
    try:
        leaves: dict = {}
        abstract(c.e, leaves)
    except Unsupported as u:
        if c.form == "every" and any(isinstance(n, R.Reg) for n in _nodes(c.e)):
            return prove_registers(p, j, left, str(u))
        return str(u)
    # only the lemmas the encoded step proves inductive (serq/verify/step.py): every move of the
    # kernel keeps them, for any number of sessions
    from serq.verify import step
    chk = step.checked(p)
    if chk.failed:
        name, fact = chk.failed[0]
        if fact.startswith("what z3 could not decide"):
            return f"the encoded step does not keep the kernel's invariant as far as z3 decided ({name}: {fact})"
        return f"the encoded step does not keep the kernel's invariant ({name} breaks {fact}): a bug of serQ"
    lems = [lm for lm in lemmas(p) if chk.lemmas.get(lm.key, "not checked") is None]
    why = _implied(p, c.e, want, lems, left)
    if why is not None:
        return why
    # the invariant that closed it: each lemma dropped in turn, the derived ones (later in the list)
    # first, while the proof still closes
    need = list(lems)
    for lm in reversed(lems):
        rest = [x for x in need if x is not lm]
        if _implied(p, c.e, want, rest, left) is None:
            need = rest
    return Proof([lm.text for lm in need])


# ---------------------------------------------------------------- registers


def prove_registers(p: R.Program, j: int, left, why_not: str) -> Proof | str:
    """An `every iteration` claim over the engine's registers (and numbers) proved as an invariant of
    the registers: it holds of their initial values, and each `set` of the schedule keeps it, whatever
    the register values that satisfy it and whatever the values the set reads besides them (any
    natural the kernel's lemmas allow). Registers change only there (a try that schedules nothing puts
    back values that held it), so it holds at every moment, for any number of sessions."""
    c = p.claims[j]
    leaves: dict = {}
    try:
        abstract(c.e, leaves, regs=True)
    except Unsupported as u:
        return f"{why_not}; and as an invariant of the registers: {u}"
    if any(not n.startswith(REG) for n in leaves):
        return f"{why_not}; and not an invariant of the registers alone: it reads {', '.join(sorted(n for n in leaves if not n.startswith(REG)))}"
    init = dict(p.engine.registers)
    env = X.Env(tuple((n, init[n[len(REG):]]) for n in leaves))
    e0 = abstract(c.e, {}, regs=True)
    try:
        if X.eval_expr(p, None, env, e0) == 0:
            return f"{why_not}; and the registers' initial values do not satisfy it"
    except X.KernelError as err:
        return f"{why_not}; and reading it on the registers' initial values, the kernel stops with {err}"
    from serq.verify import step
    chk = step.checked(p)
    lems = [lm for lm in lemmas(p) if chk.lemmas.get(lm.key, "not checked") is None] if not chk.failed else []
    read = {n[len(REG):] for n in leaves}
    for st in (n for n in _nodes(p.engine.body) if isinstance(n, R.ISet)):   # inside branches too
        if st.name not in read:
            continue
        now = subst(c.e, lambda x, st=st: st.e if isinstance(x, R.Reg) and x.name == st.name else x)
        kept = R.Bin("||", R.Not(c.e), now)
        try:
            why = _implied(p, kept, True, lems, left, regs=True)
        except Unsupported as u:
            return f"{why_not}; and as an invariant of the registers: `set {st.name}` reads what z3 cannot: {u}"
        if why is not None:
            return f"{why_not}; and `set {st.name}` may not keep it as an invariant of the registers: {why}"
    return Proof([f"{REGISTERS} ({', '.join(sorted(read))}): it holds of their initial values, and every "
                  f"`set` of them in the schedule keeps it"])


REGISTERS = "the claim as an invariant of the registers"


# ---------------------------------------------------------------- the lemmas on a machine


def violated(p: R.Program, m: X.Machine) -> list:
    """The lemmas that do not hold on a machine an iteration's claims read (`Machine.path`): their
    texts with the values read. The kernel keeps every one, so this is empty on every real path."""
    env = X.claim_env(m)
    out = []
    for lm in lemmas(p):
        vals = {n: X.eval_expr(p, m, env, e) for n, e in lm.quantities}
        if not z3.is_true(z3.simplify(lm.fact(lambda n: numeral(vals[n])))):
            out.append(f"{lm.text} ({', '.join(f'{n} = {v}' for n, v in vals.items())})")
    return out
