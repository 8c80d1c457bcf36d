"""Which linked programs are in the Lean fragment (docs/lean.md), and their conversion to the
fragment's own representation (serq/ref/ir.py, lean/Serq/IR.lean).

`convert(program)` returns the representation or raises a `SerqError` naming the first construct
outside the fragment, with an F-code (docs/reference/errors.md) and the IR node's line and column.
"""
from __future__ import annotations

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.ref import ir as R
from serq.ref.num import of_decimal


class Outside(SerqError):
    """A construct outside the Lean fragment."""


def default_body() -> tuple:
    """vLLM's two statements, what a step stage with no iteration body runs (*Engines on devices*)."""
    gate = R.Bin("==", R.StepVar("Preempted"), R.Num(0))
    return (R.IServe(None, None, None), R.IAdmit(None, gate, None))


class _Conv:
    def __init__(self, prog: I.Program):
        self.prog = prog
        self.files = prog.files
        self.pool_ix = {p.name: i for i, p in enumerate(prog.pools)}
        self.engine = None
        self.loc = None  # the innermost node with a location seen so far
        self.stage_ix: dict = {}   # the ps and delay stages, by name
        self.in_phi = False        # converting a ps stage's capacity, which reads `present`
        self.lift = None   # a workload statement's draws, read through the expression around them
        self.fresh = 0

    # -- diagnostics
    def fail(self, code: str, what: str, at: I.Loc | None = None):
        at = at or self.loc
        span = None
        if at is not None:
            f = self.files[at.file] if at.file < len(self.files) else "<ir>"
            span = Span(f, at.line, at.col, at.end_line, at.end_col)
        raise Outside(code, f"{what} is outside the Lean fragment (docs/lean.md)", span)

    def _at(self, node):
        at = getattr(node, "at", None)
        if not isinstance(at, I.Loc):  # a hold content's `at` is an expression, not a place
            return None
        self.loc = at
        return at

    # -- constants
    def const(self, e, what: str, natural: bool = True):
        """A number the linker left as an expression of numbers: a natural (a cap, a block, a
        count), or any rational (a register's initial value, a renewal gap)."""
        v = _fold(e)
        if v is None or v != v or v in (float("inf"), float("-inf")):
            self.fail("F002", f"{what} that is not a constant")
        if natural and (v != int(v) or v < 0):
            self.fail("F001", f"{what} {v:g}, not a natural number,")
        return of_decimal(v)

    # -- expressions
    def expr(self, e, draw_ok=False):
        self._at(e)
        k = e.k
        if k == "num":  # a decimal is the rational it writes (docs/lean.md, *Arithmetic*)
            return R.Num(of_decimal(e.v))
        if k == "inf":
            self.fail("F002", "`inf` outside a pool's cap or an engine's tokens cap", e.at)
        if k == "attr":
            return R.Attr(e.name)
        if k == "ctx":
            if e.name not in R.CTX or (e.name == "present" and not self.in_phi):
                self.fail("F003", f"the context variable `{e.name}`" + (" outside a ps stage's capacity"
                                                                         if e.name == "present" else ""), e.at)
            return R.Ctx(e.name)
        if k == "step":
            return R.StepVar(e.name, e.batch)
        if k == "reg":
            return R.Reg(e.name)
        if k == "obs":
            if e.fn not in R.OBS:
                self.fail("F003", f"the observable `{e.fn}`", e.at)
            if e.of.name in self.stage_ix:
                self.fail("F013", f"`{e.fn}({e.of.name})`, an observable of a ps or delay stage,", e.at)
            return R.Obs(e.fn, self.target(e.of))
        if k == "agg":  # an observation's, or the client's samples (ttft, tpot, response: R.CLIENT_METRICS)
            return R.Agg(e.fn, e.name)
        if k == "un":
            if e.op == "-":  # -e is 0 - e: the values are rationals, of either sign
                return R.Bin("-", R.Num(0), self.expr(e.e))
            return R.Not(self.expr(e.e))
        if k == "bin":
            left = self.expr(e.l)
            if e.op in ("&&", "||") and self.lift is not None and _draws(e.r):
                return self.short_circuit(e.op, left, e.r)
            return R.Bin(e.op, left, self.expr(e.r))
        if k == "if":
            c = self.expr(e.c)
            if self.lift is not None and (_draws(e.a) or _draws(e.b)):
                return self.arms(c, e.a, e.b)
            return R.Ite(c, self.expr(e.a), self.expr(e.b))
        if k == "fn":
            if e.name not in R.FUNS:
                self.fail("F007", f"the function `{e.name}`", e.at)
            return R.Fn(e.name, tuple(self.expr(a) for a in e.args))
        if k == "cost":
            return self.expr(e.e)
        if k == "draw":
            if self.lift is None:
                self.fail("F008", f"a draw `~{e.dist}` outside the workload's statements (the family draws a "
                                  "session's attributes)", e.at)
            # each occurrence its own unknown, any natural, drawn where the interpreter draws it:
            # before the statement, in the order the expression reads (Claims: the family)
            name = self.temp()
            self.lift.append(R.DrawA(name))
            return R.Attr(name)
        raise AssertionError(k)

    def temp(self) -> str:
        """An attribute of the conversion's own: `~N`, a name no program has."""
        self.fresh += 1
        return f"~{self.fresh}"

    def arm(self, e) -> tuple:
        """An operand the interpreter reads only on a condition, its draws its own: (the
        statements that draw and read it into a fresh attribute, that attribute)."""
        outer, self.lift = self.lift, []
        try:
            v = self.expr(e)
            return tuple(self.lift), v
        finally:
            self.lift = outer

    def arms(self, c, a, b):
        """`c ? a : b` with a draw in an arm: the interpreter draws only in the arm it takes, so
        the arms are a branch on `c != 0` (a test: 0 or 1), each setting a fresh attribute."""
        t = self.temp()
        sa, va = self.arm(a)
        sb, vb = self.arm(b)
        test = R.Bin("!=", c, R.Num(0))
        self.lift.append(R.BranchS(test, sa + (R.SetA(t, va),), sb + (R.SetA(t, vb),)))
        return R.Attr(t)

    def short_circuit(self, op: str, left, r):
        """`l && r` or `l || r` with a draw in r, which the interpreter reads only when l does not
        decide: a branch on `l != 0` setting a fresh attribute to the connective's 0 or 1."""
        t = self.temp()
        sr, vr = self.arm(r)
        read = sr + (R.SetA(t, R.Bin("!=", vr, R.Num(0))),)
        test = R.Bin("!=", left, R.Num(0))
        if op == "&&":
            self.lift.append(R.BranchS(test, read, (R.SetA(t, R.Num(0)),)))
        else:
            self.lift.append(R.BranchS(test, (R.SetA(t, R.Num(1)),), read))
        return R.Attr(t)

    def lifted(self, where: str, f):
        """(the draws a workload statement's expressions make, in order, what f converts)."""
        if where not in ("workload", "session"):
            return (), f()
        self.lift = []
        try:
            out = f()
            return tuple(self.lift), out
        finally:
            self.lift = None

    def opt(self, e):
        return self.expr(e) if e is not None else None

    def target(self, t: I.Target) -> str:
        if t.index is not None:
            self.fail("F004", f"an array member `{t.name}[…]`")
        return t.name

    def pool(self, t: I.Target) -> int:
        name = self.target(t)
        if name not in self.pool_ix:
            self.fail("F013", f"`{name}`, a stage where a pool is expected,")
        return self.pool_ix[name]

    # -- statements
    def block(self, stmts, where: str, depth: int = 0) -> tuple:
        out = []
        for s in stmts:
            got = self.stmt(s, where, depth)
            out.extend(got if isinstance(got, tuple) else (got,))
        return tuple(out)

    def stmt(self, s, where: str, depth: int):
        """A statement, or a tuple of them: a workload statement's draws come first (a `while`'s
        again at the end of its body, where its guard is read again)."""
        at = self._at(s)
        k = s.k
        if k == "set":
            if s.e.k == "draw" and where in ("workload", "session"):
                return R.DrawA(s.name)
            draws, e = self.lifted(where, lambda: self.expr(s.e))
            return draws + (R.SetA(s.name, e),)
        if k == "observe":
            draws, e = self.lifted(where, lambda: self.expr(s.e))
            return draws + (R.ObserveA(s.name, e),)
        if k == "branch":
            draws, c = self.lifted(where, lambda: self.expr(s.cond))
            return draws + (R.BranchS(c, self.block(s.then, where, depth), self.block(s.else_, where, depth)),)
        if k == "while":
            draws, c = self.lifted(where, lambda: self.expr(s.cond))
            return draws + (R.WhileS(c, self.block(s.body, where, depth) + draws),)
        if k == "turn":
            return R.TurnS()
        if k == "end":
            return R.EndS()
        if k == "hold":
            return self.hold(s, where, depth)
        if k == "run":
            if len(s.stages) != 1:
                self.fail("F013", "a run holding several stages at once (a flow)", at)
            name = self.target(s.stages[0])
            if name in self.stage_ix and s.mode is None and s.growing is None:
                # a think or tool time: a job on a ps or delay stage, its draws before it
                draws, work = self.lifted(where, lambda: self.expr(s.work))
                return draws + (R.JobS(self.stage_ix[name], work),)
            if s.mode is None or name != self.engine:
                self.fail("F013", "a run on a stage other than the engine or a ps or delay stage", at)
            return R.RunS(s.mode, self.expr(s.work), self.pool(s.growing) if s.growing is not None else None)
        self.fail("F009", f"the statement `{k}`", at)

    def hold(self, s, where: str, depth: int):
        at = s.at
        if where != "server":
            self.fail("F010", "a hold outside the server", at)
        if depth > 0:
            self.fail("F011", "a hold inside a hold", at)
        if s.lease is not None:
            self.fail("F009", "the clause `lease`", at)
        pools = []
        for hp in s.pools:
            i = self.pool(hp.pool)
            units, reserve = self.expr(hp.units), self.opt(hp.reserve)
            pools.append(R.HoldPool(i, units, reserve, not _reads_state(units),
                                    reserve is not None and not _reads_state(reserve)))
        first = self.prog.pools[pools[0].pool]
        if first.admit_via != self.engine:
            self.fail("F010", f"a hold waiting in `{first.name}`, a queue the engine does not admit,", at)
        for hp in pools:
            p = self.prog.pools[hp.pool]
            if p.admit_via != self.engine and p.memory != self.engine:
                self.fail("F010", f"a hold of `{p.name}`, a pool that is not the engine's,", at)
        content = None
        if s.content is not None and s.cache is not None:  # the grammar writes a content inside a cache
            ct = s.content
            content = R.Content(self.expr(ct.stream), self.opt(ct.parent), self.opt(ct.at))
        return R.HoldS(tuple(pools), self.opt(s.reuse), self.opt(s.cache), self.block(s.body, where, depth + 1),
                       content)

    # -- declarations
    def pool_decl(self, p: I.Pool) -> R.Pool:
        self._at(p)
        if p.count is not None:
            self.fail("F004", f"the pool array `{p.name}[{p.count}]`", p.at)
        if p.evict.k != "lru":
            self.fail("F012", "`evict by`", p.at)
        victim = None
        if p.preempt.k == "by":  # `preempt lifo` is `by (-admission)`, as the parser writes it
            if p.memory != self.engine:
                self.fail("F012", "`preempt by` on a pool that is not the engine's memory", p.at)
            victim = tuple(self.expr(k) for k in p.preempt.keys)
        if p.spill is not None:
            self.fail("F012", "`spill`", p.at)
        if p.admit_via is None and p.memory is None:
            self.fail("F010", f"the pool `{p.name}`, which the engine neither admits nor holds as its memory,",
                      p.at)
        cap = None if p.cap.k == "inf" or _fold(p.cap) == float("inf") else self.const(p.cap, "a cap")
        block = self.const(p.block, "a block") if p.block is not None else 0
        keys = tuple(self.expr(k) for k in p.queue.keys) if p.queue.k == "by" else ()
        return R.Pool(p.name, cap, block, victim, keys, p.admit_via == self.engine, p.memory == self.engine,
                      p.preempt.k == "by" and p.preempt.requeue == "tail", bool(p.reserve_held), bool(p.content))

    def engine_decl(self) -> R.Engine:
        steps = [s for s in self.prog.stages if s.kind.k == "step"]
        for s in self.prog.stages:
            if s.kind.k == "fifo":
                self.fail("F013", f"the fifo stage `{s.name}` (its jobs wait in line: a queue the fragment does "
                                  "not model)", s.at)
            if s.kind.k == "ps" and s.count is not None:
                self.fail("F004", f"the stage array `{s.name}[{s.count}]`", s.at)
        if len(steps) != 1:
            self.fail("F013", f"a program of {len(steps)} engines (the fragment has one)",
                      steps[1].at if steps else (self.prog.stages[0].at if self.prog.stages else None))
        st = steps[0]
        self._at(st)
        if st.count is not None:
            self.fail("F004", f"the engine array `{st.name}[{st.count}]`", st.at)
        self.engine = st.name
        k = st.kind
        budget = None if k.budget.k == "inf" else self.expr(k.budget)
        body = default_body() if k.iteration is None else tuple(self.istmt(s) for s in k.iteration)
        regs = tuple((r.name, self.const(r.init, "a register's initial value", natural=False))
                     for r in k.registers)
        return R.Engine(st.name, budget, self.expr(k.chunk), self.opt(k.granule),
                        k.serve.k == "exclusive_prefill",
                        tuple(self.expr(e) for e in k.serve.keys) if k.serve.k == "by" else (),
                        body, self.expr(k.cost), regs)

    def istmt(self, s):
        self._at(s)
        if s.k == "serve":
            return R.IServe(self.opt(s.only), tuple(self.expr(e) for e in s.order.keys) if s.order else None,
                            self.opt(s.chunk))
        if s.k == "admit":
            return R.IAdmit(self.opt(s.only), self.opt(s.gate), self.opt(s.chunk))
        if s.k == "branch":
            return R.IBranch(self.expr(s.cond), tuple(self.istmt(t) for t in s.then),
                             tuple(self.istmt(t) for t in s.else_))
        return R.ISet(s.name, self.expr(s.e))

    def stage_decls(self) -> tuple:
        """The ps and delay stages (a delay is ps(present), as the IR writes it)."""
        out = []
        for st in self.prog.stages:
            if st.kind.k != "ps":
                continue
            self._at(st)
            phi = st.kind.phi
            delay = phi.k == "ctx" and phi.name == "present"
            self.stage_ix[st.name] = len(out)
            self.in_phi = True
            try:
                out.append(R.Stage(st.name, None if delay else self.expr(phi)))
            finally:
                self.in_phi = False
        self.loc = None
        return tuple(out)

    def program(self) -> R.Program:
        prog = self.prog
        stages = self.stage_decls()
        eng = self.engine_decl()
        pools = tuple(self.pool_decl(p) for p in prog.pools)
        wl = prog.workload
        a = wl.arrive
        self._at(a)
        gap = n = 0
        if a.k == "renewal":
            gap = self.const(a.gap, "a renewal gap", natural=False)
            if gap <= 0:
                self.fail("F014", f"a renewal gap of {gap}", a.at)
        elif a.k in ("batch", "closed"):
            n = a.n
        elif a.k != "poisson":
            self.fail("F014", f"`arrive {a.k}`", a.at)
        if wl.trace is not None and not wl.trace.ordered:
            self.fail("F014", "an unordered trace (it draws its sessions)", a.at)
        init = self.block(wl.init, "workload")
        turn = self.block(wl.turn, "workload")
        session = self.block(wl.session, "session") if wl.session is not None else None
        server = self.block(prog.server, "server")
        claims = []
        for c in prog.claims:
            self._at(c)
            if c.stage is not None and (c.stage.index is not None or c.stage.name != eng.name):
                self.fail("F013", "a claim over the iterations of another stage", c.at)
            claims.append(R.Claim(c.name, c.form, self.expr(c.e), self.opt(c.given)))
        return R.Program(pools, eng, a.k, gap, n, wl.trace is not None, init, turn, session, server,
                         tuple(claims), stages=stages)


def _draws(e) -> bool:
    """Whether an IR expression draws anywhere inside."""
    if e is None:
        return False
    if getattr(e, "k", None) == "draw":
        return True
    for name in ("e", "l", "r", "c", "a", "b"):
        sub = getattr(e, name, None)
        if sub is not None and hasattr(sub, "k") and _draws(sub):
            return True
    return any(_draws(x) for x in (getattr(e, "args", None) or ()) if hasattr(x, "k"))


def _fold(e):
    """The value of an expression made of numbers only, else None."""
    if e is None:
        return None
    k = e.k
    if k == "num":
        return float(e.v)
    if k == "inf":
        return float("inf")
    if k == "cost":
        return _fold(e.e)
    if k == "un":
        v = _fold(e.e)
        return None if v is None else (-v if e.op == "-" else float(v == 0))
    if k == "bin":
        l, r = _fold(e.l), _fold(e.r)
        if l is None or r is None:
            return None
        ops = {"+": lambda: l + r, "-": lambda: l - r, "*": lambda: l * r,
               "/": lambda: l / r if r else None, "min": None}
        f = ops.get(e.op)
        return f() if f is not None else None
    if k == "fn" and e.name in ("min", "max"):
        vs = [_fold(x) for x in e.args]
        return None if None in vs else (min(vs) if e.name == "min" else max(vs))
    return None


def _reads_state(e) -> bool:
    """Whether an expression reads the deployment's state (an observable, a context variable, an
    iteration value or a register): such units are judged at every try (*Pools*)."""
    if isinstance(e, (R.Obs, R.Ctx, R.StepVar, R.Reg)):
        return True
    if isinstance(e, R.Not):
        return _reads_state(e.e)
    if isinstance(e, R.Bin):
        return _reads_state(e.l) or _reads_state(e.r)
    if isinstance(e, R.Ite):
        return _reads_state(e.c) or _reads_state(e.a) or _reads_state(e.b)
    if isinstance(e, R.Fn):
        return any(_reads_state(a) for a in e.args)
    return False


def convert(prog: I.Program) -> R.Program:
    """The program in the fragment's representation, or an `Outside` diagnostic."""
    return _Conv(prog).program()
