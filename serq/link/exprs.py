"""Expressions to IR: names resolved, each read checked against the moment it is written at."""
from __future__ import annotations

import math
import os

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.lang import ast as A
from serq.lang.lower.constants import fmt, whole
from serq.link.names import (CLAIM_ITER_VALUES, CONTEXT_VARS, END_AGGS, ENGINE_VALUES, OBSERVABLES, POOL_OBS,
                             SUPPLIED, Moment)

MAX_EXPR_DEPTH = 200
FN_ARITY = {"min": (1, None), "max": (1, None), "sum": (1, None), "floor": (1, 1), "ceil": (1, 1), "round": (1, 1), "abs": (1, 1),
            "sqrt": (1, 1), "log": (1, 1), "pow": (2, 2), "reusable": (2, 2)}


class Tables:
    """What names mean, filled by the program linker before any expression is linked."""

    def __init__(self):
        self.files: list[str] = []
        self.consts: dict[str, float] = {}
        self.pools: dict = {}        # name -> KPool
        self.stages: dict = {}       # name -> KStage
        self.steps: set[str] = set()
        self.registers: dict[str, set[str]] = {}
        self.attrs: set[str] = set()
        self.hidden: set[str] = set()
        self.cost_attrs: dict[str, tuple[str, ...]] = {}
        self.observed: set[str] = set()
        self.admitted_by: dict[str, str] = {}  # pool -> the step stage that admits it


def number(v: float, at=None):
    """A known number as an IR node; an infinite one is the `inf` node (negated for -inf), as the IR
    writes infinity (ir/model.py), so `serq ir` stays strict JSON and loads back."""
    if math.isinf(v):
        return I.Inf(at=at) if v > 0 else I.Un(op="-", e=I.Inf(at=at), at=at)
    return I.Num(v=v, at=at)


def const_value(e) -> float | None:
    """The value of an IR expression made of numbers only, else None."""
    k = e.k
    if k == "num":
        return e.v
    if k == "inf":
        return math.inf
    if k == "un":
        v = const_value(e.e)
        if v is None:
            return None
        return -v if e.op == "-" else (1.0 if v == 0 else 0.0)
    if k == "bin":
        from serq.lang.lower.constants import arith
        a, b = const_value(e.l), const_value(e.r)
        return None if a is None or b is None else arith(e.op, a, b)
    if k == "if":
        c = const_value(e.c)
        if c is None:
            return None
        return const_value(e.a if c != 0 else e.b)
    if k == "fn":
        from serq.lang.lower.constants import FUNCS
        vals = [const_value(a) for a in e.args]
        if any(v is None for v in vals):
            return None
        return float(FUNCS[e.name][2](*vals))
    if k == "cost":
        return const_value(e.e)
    return None


class ExprLinker:
    def __init__(self, t: Tables):
        self.t = t
        self.locs: dict[Span, I.Loc] = {}

    def loc(self, sp: Span | None) -> I.Loc | None:
        if sp is None:
            return None
        # one Loc per place, shared (a Loc is frozen): a request's body is linked again at every call
        at = self.locs.get(sp)
        if at is None:
            if sp.file not in self.t.files:
                self.t.files.append(sp.file)
            at = self.locs[sp] = I.Loc(file=self.t.files.index(sp.file), line=sp.line, col=sp.col,
                                       end_line=sp.end_line, end_col=sp.end_col)
        return at

    depth = 0

    def link(self, e, m: Moment):
        self.depth += 1
        try:
            if self.depth > MAX_EXPR_DEPTH:
                raise SerqError("P007", f"an expression nests more than {MAX_EXPR_DEPTH} operators deep: "
                                "name parts of it with set or def", e.span)
            return self._link(e, m)
        finally:
            self.depth -= 1

    def _link(self, e, m: Moment):
        at = self.loc(e.span)
        if isinstance(e, A.Num):
            return number(e.value, at)
        if isinstance(e, A.Str):
            raise SerqError("L071", "a string is not a value here", e.span)
        if isinstance(e, A.Ref):
            return self.ref(e, m, at)
        if isinstance(e, A.Call):
            return self.call(e, m, at)
        if isinstance(e, A.Draw):
            return self.draw(e, m, at)
        if isinstance(e, A.Unary):
            return I.Un(op=e.op, e=self.link(e.e, m), at=at)
        if isinstance(e, A.Binary):
            return I.Bin(op=e.op, l=self.link(e.l, m), r=self.link(e.r, m), at=at)
        if isinstance(e, A.Cond):
            return I.If(c=self.link(e.c, m), a=self.link(e.a, m), b=self.link(e.b, m), at=at)
        raise SerqError("L070", "this expression has no meaning here", e.span)  # pragma: no cover

    # -- names
    def ref(self, e: A.Ref, m: Moment, at):
        t = self.t
        if e.simple:
            n = e.head
            if n in t.consts:
                return number(t.consts[n], at)
            if n == "inf":
                return I.Inf(at=at)
            if m.claim_iter and n in CLAIM_ITER_VALUES:
                name, batch = CLAIM_ITER_VALUES[n]
                return I.StepVar(name=name, batch=batch, at=at)
            if n in CONTEXT_VARS:
                if n not in m.ctx:
                    raise SerqError("L072", f"`{n}` is not available in {m.name}", e.span)
                return I.Ctx(name=n, at=at)
            if n in SUPPLIED:
                raise SerqError("L073", f"`{n}` is a name the language supplies, not a value; an engine reads "
                                f"`{n}.…` where its clause allows it", e.span)
            if n in t.attrs:
                return self.attr(n, e, m, at)
            if n in t.pools or n in t.stages:
                kind = "pool" if n in t.pools else "stage"
                raise SerqError("L075", f"`{n}` is a {kind}, not a number: read it with an observable, "
                                f"{'used' if kind == 'pool' else 'queue'}({n})", e.span)
            raise SerqError("L070", f"unknown name `{n}`", e.span)
        dotted = ".".join(s.name for s in e.segs)
        if any(s.index is not None for s in e.segs):
            if dotted in t.pools or dotted in t.stages:
                raise SerqError("L075", f"`{dotted}` is a pool or stage, not a number: read it with an observable",
                                e.span)
            raise SerqError("L070", f"unknown name `{dotted}`", e.span)
        if dotted in ENGINE_VALUES:
            if dotted not in m.engine_values:
                raise SerqError("L076", f"`{dotted}` is not read in {m.name}", e.span)
            name, batch = ENGINE_VALUES[dotted]
            return I.StepVar(name=name, batch=batch, at=at)
        if e.head in ("running", "waiting", "batch"):
            raise SerqError("L076", f"`{dotted}` is no engine value (running.count, running.decoding, "
                            "running.kv_decode, running.kv_prefill, running.preempted, waiting.count, "
                            "waiting.admitted, batch.tokens, batch.prefilled, batch.decoding, batch.kv_decode, "
                            "batch.kv_prefill, batch.attention)", e.span)
        if len(e.segs) == 2 and e.head in t.registers and e.segs[1].name in t.registers[e.head]:
            if not m.registers:
                raise SerqError("L083", f"the register `{dotted}` is not read in {m.name}", e.span)
            if m.engine is not None and m.engine != e.head:
                raise SerqError("L083", f"a register is read only by its engine: `{dotted}` is `{e.head}`'s",
                                e.span)
            return I.Reg(stage=e.head, name=e.segs[1].name, at=at)
        if dotted in t.attrs:
            return self.attr(dotted, e, m, at)
        raise SerqError("L070", f"unknown name `{dotted}`", e.span)

    def attr(self, n, e, m: Moment, at):
        if not m.attrs:
            raise SerqError("L074", f"{m.name} reads no session attribute: `{n}` is one", e.span)
        if n in self.t.hidden and not m.hidden:
            raise SerqError("L080", f"`{n}` is hidden: {m.name} may not read it (the scheduler does not know it)",
                            e.span)
        return I.Attr(name=n, at=at)

    def target(self, r, m: Moment | None, want: str, what: str) -> I.Target:
        """A pool or stage named by a reference, `kv`, `kv[k]`, `D[j].kv` (the kernel's array reference)."""
        if not isinstance(r, A.Ref):
            raise SerqError("L084", f"{what} names a {want} here", r.span)
        name = ".".join(s.name for s in r.segs)
        idxs = [s.index for s in r.segs if s.index is not None]
        t = self.t
        table = t.pools if want == "pool" else t.stages if want == "stage" else {**t.pools, **t.stages}
        if name not in table:
            other = "stage" if name in t.stages else "pool" if name in t.pools else None
            if other:
                raise SerqError("L084", f"`{name}` is a {other}; {what} names a {want}", r.span)
            raise SerqError("L084", f"`{name}` is no {want if want != 'any' else 'pool or stage'} declared in the "
                            "program", r.span)
        if len(idxs) > 1:
            raise SerqError("L085", f"`{r.dotted}` has more than one index", r.span)
        count = table[name].count
        index = None
        if idxs:
            if count is None:
                raise SerqError("L085", f"`{name}` is not an array: it takes no index", r.span)
            index = self.link(idxs[0], m) if m is not None else None
            v = const_value(index) if index is not None else None
            if m is not None and m.const_index and v is None:
                raise SerqError("L085", f"in {m.name}, a pool or stage has a number for its index", idxs[0].span)
            if v is not None:
                check_index(v, count, idxs[0].span, name)
        elif count is not None:
            if count == 1 and len(r.segs) > 1:  # a queue family of one also takes `D.kv` (*Queues*)
                index = I.Num(v=0.0)
            else:
                head, _, rest = name.partition(".")
                member = f"{head}[i].{rest}" if rest else f"{name}[i]"
                raise SerqError("L085", f"`{name}` is an array of {count}: name a member, `{member}`", r.span)
        return I.Target(name=name, index=index)

    def call(self, e: A.Call, m: Moment, at):
        fn = e.fn
        if not fn.simple:
            if fn.dotted == "args.number":
                raise SerqError("L011", "`args.number` is the whole initializer of a `let` inside main", e.span)
            raise SerqError("L045", f"`{fn.dotted}` is no function", fn.span)
        n = fn.head
        if n in OBSERVABLES:
            if len(e.args) != 1:
                raise SerqError("L042", f"`{n}` takes one pool or stage", e.span)
            if n not in m.obs:
                raise SerqError("L077", f"`{n}(…)` is not read in {m.name}", e.span)
            want = "pool" if n in POOL_OBS else "stage"
            tgt = self.target(e.args[0], m, want, f"`{n}`")
            if n == "budget_left" and tgt.name not in self.t.steps:
                raise SerqError("L084", f"`budget_left` reads a step engine; `{tgt.name}` is not one", e.span)
            return I.Obs(fn=n, of=tgt, at=at)
        if n == "blocksize":
            if len(e.args) != 1:
                raise SerqError("L042", "`blocksize` takes one pool", e.span)
            tgt = self.target(e.args[0], None, "pool", "`blocksize`")
            block = self.t.pools[tgt.name].block_value
            return I.Num(v=block if block is not None else 1.0, at=at)
        if n == "cost":
            if len(e.args) < 2:
                raise SerqError("L042", "`cost(R1, …, Rk, e)` names at least one resource and the amount", e.span)
            names = []
            for r in e.args[:-1]:
                if not isinstance(r, A.Ref) or any(s.index is not None for s in r.segs):
                    raise SerqError("L086", "a cost names resources, pools or stages, without an index",
                                    r.span)
                nm = r.dotted
                if nm not in self.t.pools and nm not in self.t.stages:
                    raise SerqError("L086", f"`{nm}` is no pool or stage: a cost names resources", r.span)
                names.append(nm)
            return I.Cost(on=names, e=self.link(e.args[-1], m), at=at)
        if n in END_AGGS:
            if not m.end_aggs:
                raise SerqError("L077", f"`{n}(…)` is read only in a claim at end", e.span)
            if len(e.args) != 1 or not isinstance(e.args[0], A.Ref) or not e.args[0].simple:
                raise SerqError("L042", f"`{n}` takes the name of an observation", e.span)
            o = e.args[0].head
            if o not in self.t.observed and o not in ("ttft", "tpot", "response"):
                raise SerqError("L078", f"`{o}` is observed nowhere in the program", e.args[0].span)
            return I.Agg(fn=n, name=o, at=at)
        if n in FN_ARITY:
            lo, hi = FN_ARITY[n]
            if len(e.args) < lo or (hi is not None and len(e.args) > hi):
                want = f"{lo}" if lo == hi else f"at least {lo}"
                raise SerqError("L042", f"`{n}` takes {want} argument(s), given {len(e.args)}", e.span)
            return I.Fn(name=n, args=[self.link(a, m) for a in e.args], at=at)
        raise SerqError("L045", f"`{n}` is no function, def or observable", fn.span)

    def draw(self, e: A.Draw, m: Moment, at):
        if e.dist not in I.DISTRIBUTIONS:
            raise SerqError("L079", f"`~{e.dist}` is no distribution ({', '.join(I.DISTRIBUTIONS)})", e.span)
        if not m.draws:
            raise SerqError("L081", f"{m.name} may not draw: sample into an attribute first", e.span)
        if e.dist == "empirical":
            if len(e.args) != 1 or not isinstance(e.args[0], A.Str):
                raise SerqError("L042", "`~empirical` takes one parameter, the name of a file of values in quotes "
                                "(`~empirical(\"lengths.csv\")`, beside the program)", e.span)
            path = os.path.normpath(os.path.join(os.path.dirname(e.span.file), e.args[0].value))
            values, weights = read_empirical(path)
            return I.Draw(dist="empirical", args=[], values=values, weights=weights, at=at)
        k = I.DISTRIBUTIONS[e.dist]
        if len(e.args) != k:
            raise SerqError("L042", f"`~{e.dist}` takes {k} parameter(s), given {len(e.args)}", e.span)
        args = [self.link(a, m) for a in e.args]
        vals = [const_value(a) for a in args]
        bad = draw_param_error(e.dist, vals)
        if bad is not None:
            raise SerqError("L082", f"`~{e.dist}`: {bad}", e.span)
        return I.Draw(dist=e.dist, args=args, at=at)


def read_empirical(path: str) -> tuple[list[float], list[float]]:
    """An empirical draw's file (docs/reference/catalogue.md, *Draws*): one value a line (each as likely), or
    `value,weight` a line (a histogram); a first line that is not a number is a header; blank lines and
    lines from `#` are skipped. An error names the file, line and column (T003; T002 when unreadable)."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise SerqError("T003", "the file of values is not UTF-8 text", Span(path, 1, 1)) from None
    except OSError as exc:
        raise SerqError("T002", f"cannot read the file of values: {exc.strerror or exc}", Span(path, 1, 1)) from None
    values: list[float] = []
    weights: list[float] = []
    width = None
    for ln, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0]
        if not body.strip():
            continue
        fields = body.split(",")
        starts, c = [], 1
        for x in fields:
            starts.append(c + len(x) - len(x.lstrip()))
            c += len(x) + 1
        try:
            nums = [float(x) for x in fields]
        except ValueError:
            if not values and width is None:   # a header
                width = len(fields)
                continue
            bad = next(i for i, x in enumerate(fields) if not _is_number(x))
            raise SerqError("T003", f"{fields[bad].strip()!r} is not a number", Span(path, ln, starts[bad])) from None
        if len(nums) not in (1, 2) or (width is not None and len(nums) != width):
            raise SerqError("T003", f"{len(nums)} field(s): a line is a value, or a value and its weight",
                            Span(path, ln, 1))
        width = len(nums)
        for i, v in enumerate(nums):
            if not math.isfinite(v) or (i == 1 and v < 0):
                what = "a weight is a finite number >= 0" if i else "a value is a finite number"
                raise SerqError("T003", f"{fields[i].strip()!r}: {what}", Span(path, ln, starts[i]))
        values.append(nums[0])
        weights.append(nums[1] if len(nums) == 2 else 1.0)
    if not values:
        raise SerqError("T003", "the file has no value", Span(path, 1, 1))
    if not sum(weights) > 0:
        raise SerqError("T003", "every weight is 0: no value can be drawn", Span(path, 1, 1))
    return values, weights


def _is_number(x: str) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


def draw_param_error(dist: str, vals: list) -> str | None:
    """A constant parameter outside its range (catalogue: *Draws*); None when fine or not constant.
    The interpreter calls this with computed values too."""
    def known(i):
        return i < len(vals) and vals[i] is not None
    for i, v in enumerate(vals):
        if v is not None and math.isnan(v):
            return "a parameter is NaN"
    if dist == "exp" and known(0) and not (0 < vals[0] < math.inf):
        return f"the mean must be above 0 and finite, not {fmt(vals[0])}"
    if dist == "det" and known(0) and math.isinf(vals[0]):
        return "the value must be finite"
    if dist == "uniform" and known(0) and known(1) and not (vals[0] <= vals[1] and not math.isinf(vals[1] - vals[0])):
        return f"uniform(a, b) needs a <= b, finite; not ({fmt(vals[0])}, {fmt(vals[1])})"
    if dist == "erlang":
        if known(0) and not whole(vals[0], 1):
            return f"the number of phases is a whole number >= 1, not {fmt(vals[0])}"
        if known(1) and not (0 < vals[1] < math.inf):
            return f"the mean must be above 0 and finite, not {fmt(vals[1])}"
    if dist == "h2":
        if known(0) and not (0 < vals[0] < math.inf):
            return f"the mean must be above 0 and finite, not {fmt(vals[0])}"
        if known(1) and not (1 <= vals[1] < math.inf):
            return f"the squared coefficient of variation is >= 1, not {fmt(vals[1])}"
    if dist == "lognormal":
        if known(0) and math.isinf(vals[0]):
            return f"mu, the mean of the logarithm, must be finite, not {fmt(vals[0])}"
        if known(1) and not (0 <= vals[1] < math.inf):
            return f"sigma, the standard deviation of the logarithm, must be >= 0 and finite, not {fmt(vals[1])}"
    if dist == "lognormal_mean":
        if known(0) and not (0 < vals[0] < math.inf):
            return f"the mean must be above 0 and finite, not {fmt(vals[0])}"
        if known(1) and not (0 <= vals[1] < math.inf):
            return f"the standard deviation must be >= 0 and finite, not {fmt(vals[1])}"
    if dist == "bernoulli" and known(0) and not (0 <= vals[0] <= 1):
        return f"the probability is in [0, 1], not {fmt(vals[0])}"
    return None


def check_index(v: float, count: int, span, name: str):
    if not whole(v, 0, count - 1):
        raise SerqError("L087", f"`{name}[{fmt(v)}]`: an index is a whole number from 0 below {count}", span)


def shape(x):
    """An IR value as a hashable shape, source positions aside (`kv[i]` here is `kv[i]` there)."""
    if isinstance(x, I.Node):
        return (type(x).__name__,) + tuple((k, shape(v)) for k, v in x if k != "at")
    if isinstance(x, list):
        return tuple(shape(v) for v in x)
    return x


def same_target(a: I.Target, b: I.Target) -> bool:
    return shape(a) == shape(b)
