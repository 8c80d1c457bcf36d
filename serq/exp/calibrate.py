"""`serq calibrate FILE --measured ITERATIONS.csv`: the inputs an engine's `execute` reads, fitted to
measured iteration times by bounded least squares (issue 13; docs/calibrate.md).

The input dependence: inputs are resolved to numbers when the program links, so the linked IR has
lost which number came from which input. The lowered kernel has not: its step's cost is the
`execute` expression with the device's resources and the defs written out, and it still names the
program's lets (`a`, `omega`, ...). The program is parsed, lowered and linked once (which checks
it); the cost is then evaluated here, vectorised over the measured rows, with the input lets bound
to the candidate values and the lets computed from them folded again, so a fit never re-links.
numpy and scipy are imported inside the command (`serq check` stays fast)."""
from __future__ import annotations

import math

# A measured iteration's column for each value `execute` may read (*Engines on devices*).
COLUMNS = {
    "batch.tokens": "tokens", "batch.prefilled": "prefilled", "batch.decoding": "decoding",
    "batch.kv_decode": "kv_decode", "batch.kv_prefill": "kv_prefill", "batch.attention": "attention",
    "running.count": "running", "waiting.count": "waiting",
}
KV_READ = "kv_read"   # kv_decode + kv_prefill, for a cost that reads them only as that sum
TIME = "time"
# a measured iteration's time, at most: 1e9 seconds is 31 years, 1e9 ms eleven days; a larger one is
# not a measurement, and near 1e154 its square, which least squares sums, overflows
TIME_MAX = 1e9
# a residual or a derivative beyond this is not weighed: their squares, summed over the rows and
# multiplied in JᵀJ, would near the largest double (1.8e308)
BIG = 1e100
EXPERIMENTS = "pip install 'serq[experiments]'"


def arguments(sp) -> None:
    sp.add_argument("file", help="the program (.sq)")
    sp.add_argument("--measured", required=True, metavar="ITERATIONS.csv",
                    help="one row per iteration: the batch's values and its measured `time`")
    sp.add_argument("--fit", action="append", default=[], metavar="NAME",
                    help="an input to fit (default: every input execute reads)")
    sp.add_argument("--bound", action="append", default=[], metavar="NAME=LO,HI",
                    help="the range of a fitted input (default 0,inf)")
    sp.add_argument("--holdout", default="0.2", metavar="FRACTION",
                    help="the share of rows held back to judge the fit (default 0.2)")
    sp.add_argument("--seed", metavar="S", help="the seed of the held-back rows' choice (default 1)")
    sp.add_argument("-o", "--output", metavar="INSTANCE.json",
                    help="write the instance file here (default: the CSV's name with .instance.json)")
    sp.add_argument("--engine", metavar="NAME", help="the engine whose execute is fitted (needed when "
                    "the program has several)")


# ------------------------------------------------------------------ the cost as a function

class Cost:
    """One engine's `execute` as a function of (measured columns, input values)."""

    def __init__(self, file, engine, expr, span, lets, inputs, blocks):
        self.file = file
        self.engine = engine
        self.expr = expr
        self.span = span                 # the engine's, for diagnostics
        self.lets = lets                 # [(let, ("input", arg) | ("derived", expr) | ("const", v))]
        self.inputs = inputs             # every input of the program: arg -> value it links with
        self.blocks = blocks             # pool -> block size, for blocksize(P)
        deps: dict[str, frozenset] = {}     # let -> the inputs its value depends on
        smooth: dict[str, frozenset] = {}   # of them, those it changes with continuously somewhere
        for name, (kind, x) in lets:
            if kind == "input":
                deps[name] = smooth[name] = frozenset([x])
            elif kind == "derived":
                deps[name] = frozenset().union(*(deps.get(r, frozenset()) for r in _let_refs(x)))
                smooth[name] = _smooth(x, smooth)
            else:
                deps[name] = smooth[name] = frozenset()
        used = frozenset().union(*(deps.get(r, frozenset()) for r in _let_refs(expr)))
        fit = _smooth(expr, smooth)
        self.reads = [a for a in inputs if a in used]  # declaration order
        # an input read only in a condition, a comparison or a floor selects a piece of the cost:
        # the time is a step function of it, flat almost everywhere, which least squares cannot fit
        self.fittable = [a for a in self.reads if a in fit]
        self.selectors = [a for a in self.reads if a not in fit]

    def env(self, values: dict[str, float]) -> dict[str, float]:
        """Every let's value with these inputs; a let computed from inputs is folded again."""
        from serq.lang.lower.constants import fold
        env: dict[str, float] = {}
        for name, (kind, x) in self.lets:
            if kind == "input":
                env[name] = float(values.get(x, self.inputs[x]))
            elif kind == "derived":
                env[name] = fold(x, env)
            else:
                env[name] = x
        return env

    def columns(self, kv_sum: bool) -> list[str]:
        """The measured columns the cost reads, in a fixed order; with kv_sum, kv_decode +
        kv_prefill read as one `kv_read`."""
        seen = set()

        def walk(e):
            from serq.lang import ast as A
            if kv_sum and _is_kv_sum(e):
                seen.add(KV_READ)
                return
            if isinstance(e, A.Ref) and e.dotted in COLUMNS:
                seen.add(COLUMNS[e.dotted])
            for s in _children(e):
                walk(s)
        walk(self.expr)
        order = list(COLUMNS.values()) + [KV_READ]
        return [c for c in order if c in seen]

    def predict(self, values: dict[str, float], cols: dict, n: int):
        import numpy as np
        env = self.env(values)
        with np.errstate(all="ignore"):
            v = _vec(self.expr, env, cols, self.blocks, KV_READ in cols)
        return np.broadcast_to(np.asarray(v, dtype=float), (n,))


_STEP_OPS = {"==", "!=", "<", "<=", ">", ">=", "&&", "||"}
_STEP_FNS = {"floor", "ceil", "round", "reusable"}


def _smooth(e, smooth) -> frozenset:
    """The inputs e varies with continuously somewhere: through every operand but a condition's
    test, a comparison's or logical operator's operands, `!` and the rounding functions' arguments."""
    from serq.lang import ast as A
    if isinstance(e, A.Ref):
        return smooth.get(e.head, frozenset()) if e.simple else frozenset()
    if isinstance(e, A.Cond):
        return _smooth(e.a, smooth) | _smooth(e.b, smooth)
    if isinstance(e, A.Binary):
        return frozenset() if e.op in _STEP_OPS else _smooth(e.l, smooth) | _smooth(e.r, smooth)
    if isinstance(e, A.Unary):
        return frozenset() if e.op == "!" else _smooth(e.e, smooth)
    if isinstance(e, A.Call):
        if e.fn.head in _STEP_FNS or e.fn.head == "blocksize":
            return frozenset()
        args = e.args[-1:] if e.fn.head == "cost" else e.args
        return frozenset().union(*(_smooth(a, smooth) for a in args))
    return frozenset()


def _children(e):
    from serq.lang.walk import sub_exprs
    return sub_exprs(e)


def _let_refs(e):
    from serq.lang import ast as A
    from serq.lang.walk import iter_expr
    return {x.head for x in iter_expr(e) if isinstance(x, A.Ref) and x.simple}


def _is_kv_sum(e) -> bool:
    from serq.lang import ast as A
    return isinstance(e, A.Binary) and e.op == "+" and isinstance(e.l, A.Ref) and isinstance(e.r, A.Ref) and \
        {e.l.dotted, e.r.dotted} == {"batch.kv_decode", "batch.kv_prefill"}


def _vec(e, env, cols, blocks, kv_sum):
    """The value of a lowered expression over numpy columns, with the language's arithmetic
    (serq/lang/lower/constants.py: arith, FUNCS): tests/test_calibrate.py compares the two."""
    import numpy as np

    from serq.lang import ast as A
    if isinstance(e, A.Num):
        return e.value
    if isinstance(e, A.Ref):
        if e.simple and e.head in env:
            return env[e.head]
        if e.simple and e.head == "inf":
            return math.inf
        return cols[COLUMNS[e.dotted]]
    if isinstance(e, A.Unary):
        v = _vec(e.e, env, cols, blocks, kv_sum)
        return -np.asarray(v, dtype=float) if e.op == "-" else np.where(np.asarray(v) == 0, 1.0, 0.0)
    if isinstance(e, A.Binary):
        if kv_sum and _is_kv_sum(e):
            return cols[KV_READ]
        return _arith(e.op, np.asarray(_vec(e.l, env, cols, blocks, kv_sum), dtype=float),
                      np.asarray(_vec(e.r, env, cols, blocks, kv_sum), dtype=float))
    if isinstance(e, A.Cond):
        c = np.asarray(_vec(e.c, env, cols, blocks, kv_sum))
        return np.where(c != 0, _vec(e.a, env, cols, blocks, kv_sum), _vec(e.b, env, cols, blocks, kv_sum))
    if isinstance(e, A.Call):
        name = e.fn.head
        if name == "cost":
            return _vec(e.args[-1], env, cols, blocks, kv_sum)
        if name == "blocksize":
            return blocks[e.args[0].dotted]
        args = [np.asarray(_vec(a, env, cols, blocks, kv_sum), dtype=float) for a in e.args]
        return _FN[name](*args)
    raise AssertionError(f"unchecked node {type(e).__name__}")  # _check refuses the rest


def _arith(op, l, r):
    import numpy as np
    if op == "+":
        return l + r
    if op == "-":
        return l - r
    if op == "*":
        return l * r  # 0 * inf is NaN, as mul()
    if op == "/":
        zero = r == 0
        q = l / np.where(zero, 1.0, r)
        return np.where(zero, np.where((l == 0) | np.isnan(l), math.nan, np.copysign(math.inf, l)), q)
    if op == "%":
        return np.where((r == 0) | np.isinf(l), math.nan, np.fmod(l, np.where(r == 0, 1.0, r)))
    if op in _CMP:
        return np.where(_CMP[op](l, r), 1.0, 0.0)
    if op == "&&":
        return np.where((l != 0) & (r != 0), 1.0, 0.0)
    if op == "||":
        return np.where((l != 0) | (r != 0), 1.0, 0.0)
    raise ValueError(op)


def _fold_left(f):
    def g(a, *rest):
        for b in rest:
            a = f(a, b)
        return a
    return g


def _pow(a, b):
    import numpy as np
    from serq.lang.lower.constants import _pow as pow1
    # the language's own pow, element by element: numpy's power answers 0 to a negative power and
    # overflows where math.pow raises, and where it takes a SIMD path (AVX-512 here) it is off libm's
    # pow by an ulp (2.5 ** 2.5): a fit must read the model the simulator runs
    return np.asarray(np.frompyfunc(pow1, 2, 1)(a, b), dtype=float)


def _log(x):
    import numpy as np
    from serq.lang.lower.constants import log as log1
    # likewise: numpy's SIMD log is off math.log by an ulp on about 0.1% of arguments (AVX-512)
    return np.asarray(np.frompyfunc(log1, 1, 1)(x), dtype=float)


def _reusable(n, b):
    import numpy as np
    k = np.floor((n - 1) / np.where(b > 0, b, 1.0))
    v = np.where(k == 0, 0.0, k * b)
    return np.where(np.isnan(n) | ~(b > 0), math.nan, np.where(n < 1, 0.0, v))


def _numpy_fns():
    import numpy as np
    return {
        "min": _fold_left(np.minimum), "max": _fold_left(np.maximum), "sum": _fold_left(lambda a, b: a + b),
        "floor": np.floor, "ceil": np.ceil, "round": lambda x: np.floor(x + 0.5), "abs": np.abs,
        "sqrt": lambda x: np.where(x >= 0, np.sqrt(np.where(x >= 0, x, 0.0)), math.nan),
        "log": _log, "pow": _pow, "reusable": _reusable,
    }


class _Fns(dict):
    """The functions, filled on first use: numpy is imported by the command, not with the CLI."""

    def __missing__(self, k):
        self.update(_numpy_fns())
        return self[k]


_FN = _Fns()


def _cmp():
    import operator
    return {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


_CMP = _cmp()


def _check(e, lets, blocks, engine):
    """Refuse, at its place, what a measured iteration does not give: a register, a draw."""
    from serq.diagnostics import SerqError
    from serq.lang import ast as A
    if isinstance(e, A.Draw):
        raise SerqError("M004", f"engine `{engine}`'s execute draws (~{e.dist}): serq calibrate fits a cost "
                        "that the measured batch determines", e.span)
    if isinstance(e, A.Ref):
        if not ((e.simple and (e.head in lets or e.head == "inf")) or e.dotted in COLUMNS):
            raise SerqError("M004", f"engine `{engine}`'s execute reads `{e.dotted}`, which a measured iteration "
                            f"does not give (its columns: {', '.join(COLUMNS.values())})", e.span)
        return
    if isinstance(e, A.Call):
        if e.fn.head == "blocksize":  # a pool's block, a number the linker checked
            return
        # cost(R1, …, e): the resources are names, the amount the value
        for a in (e.args[-1:] if e.fn.head == "cost" else e.args):
            _check(a, lets, blocks, engine)
        return
    for x in _children(e):
        _check(x, lets, blocks, engine)


def cost_model(file: str, supplied: dict[str, float], engine: str | None) -> Cost:
    """Parse, lower and link FILE once (every program error as `serq check` gives it), and the
    chosen engine's execute as a Cost."""
    from serq import api
    from serq.diagnostics import SerqError, Span
    from serq.ir import model as I
    from serq.lang import ast as A
    from serq.lang.kernel import KStep
    from serq.lang.lower.defs import Defs
    from serq.lang.lower.imports import resolve
    from serq.lang.lower.inputs import UsageError
    from serq.lang.lower.program import lower
    from serq.lang.parse import parse_file
    from serq.link.exprs import const_value
    from serq.link.program import link_kernel

    def build():
        ast = parse_file(file)
        k = lower(ast, supplied)
        steps = [s for s in k.stages if isinstance(s.kind, KStep)]
        prog = link_kernel(k, I.Settings())
        r = resolve(ast)
        defs = Defs(r.defs)
        lets = []
        for let in list(r.lets) + [i for i in r.main.items if isinstance(i, A.Let)]:
            if let.input is not None:
                lets.append((let.name, ("input", let.input[0])))
            else:
                e = defs.expr(let.e)
                lets.append((let.name, ("derived", e)))
        return k, steps, prog, lets

    k, steps, prog, lets = api._deep(file, build)
    if not steps:
        raise SerqError("M003", "serq calibrate fits an engine's execute; this program has no engine",
                        Span(file, 1, 1))
    names = [s.name for s in steps]
    if engine is None:
        if len(steps) > 1:
            raise UsageError(f"the program has engines {', '.join(names)}: name the one to fit with --engine")
        st = steps[0]
    else:
        if engine not in names:
            raise UsageError(f"--engine {engine}: the program has no engine {engine} (its engines: "
                             f"{', '.join(names)})")
        st = steps[names.index(engine)]
    blocks = {}
    for p in prog.pools:
        v = const_value(p.block) if p.block is not None else 1.0
        blocks[p.name] = 1.0 if v is None else v
    # a let that reads no input keeps the value it linked with
    resolved = []
    consts = dict(k.consts)
    dep = set()
    for name, (kind, x) in lets:
        if kind == "input":
            dep.add(name)
            resolved.append((name, (kind, x)))
        elif _let_refs(x) & dep:
            dep.add(name)
            resolved.append((name, (kind, x)))
        else:
            resolved.append((name, ("const", consts[name])))
    let_names = {n for n, _ in resolved}
    _check(st.kind.cost, let_names, blocks, st.name)
    inputs = {x: k.inputs[x] for _, (kind, x) in lets if kind == "input"}
    return Cost(file, st.name, st.kind.cost, st.kind.span, resolved, inputs, blocks)


# ------------------------------------------------------------------ the measured iterations

def read_measured(path: str, cost: Cost):
    """(columns, times, lines) of a measured-iterations CSV; a malformed one is an M001 naming the
    file, line and column (as a trace file's T001)."""
    import csv

    import numpy as np

    from serq.diagnostics import SerqError, Span
    from serq.interp.trace import _col_starts

    def err(line, col, msg):
        return SerqError("M001", msg, Span(path, line, col, line, col + 1))

    try:
        # a spreadsheet's byte-order mark read past, as a trace's
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise err(1, 1, "the measured iterations are not UTF-8 text") from None
    except OSError as exc:
        raise SerqError("M002", f"cannot read the measured iterations: {exc.strerror or exc}",
                        Span(path, 1, 1)) from None
    lines = text.splitlines()
    rows = []
    reader = csv.reader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a field past the csv module's size limit, a stray quote
            raise err(reader.line_num or 1, 1, f"not a CSV row: {exc}") from None
        rows.append((reader.line_num, row))  # the line it ends on: a quoted field may span lines
    if not rows:
        raise err(1, 1, "the file is empty: it needs a header")
    header = [h.strip() for h in rows[0][1]]
    for i, h in enumerate(header):  # which of two would be read is a guess: neither
        if h and header.index(h) < i:
            raise err(1, _col_starts(lines[0])[i], f"the header names `{h}` twice")
    plain, summed = cost.columns(False), cost.columns(True)
    if all(c in header for c in plain):
        need = plain
    elif KV_READ in header and all(c in header for c in summed):
        need = summed
    else:
        miss = [c for c in plain if c not in header]
        alt = f"; `{KV_READ}` may stand for kv_decode + kv_prefill" if KV_READ in summed else ""
        raise err(1, 1, f"the header has no `{miss[0]}` column: engine `{cost.engine}`'s execute reads "
                  f"{', '.join(plain)}{alt}")
    if TIME not in header:
        raise err(1, 1, f"the header has no `{TIME}` column: the measured time of each iteration")
    col = {h: i for i, h in enumerate(header)}
    want = need + [TIME]
    vals = {c: [] for c in want}
    where = []
    for ln, row in rows[1:]:
        if not row or all(not x.strip() for x in row):
            continue
        if len(row) != len(header):
            raise err(ln, 1, f"{len(row)} field(s) where the header has {len(header)}")
        starts = _col_starts(lines[ln - 1])
        for c in want:
            i = col[c]
            s = row[i].strip()
            at = starts[i] if i < len(starts) else 1
            try:
                v = float(s)
            except ValueError:
                raise err(ln, at, f"`{c}` is {s!r}, not a number") from None
            if c == TIME and not (0 < v < math.inf):
                raise err(ln, at, f"`{TIME}` is {s!r}: a measured time is a finite number above 0")
            if c == TIME and v > TIME_MAX:
                raise err(ln, at, f"`{TIME}` is {s!r}: beyond any iteration's time (at most {TIME_MAX:g} of "
                          "the program's time unit: 31 years in seconds)")
            if not (0 <= v < math.inf):
                raise err(ln, at, f"`{c}` is {s!r}: a finite number >= 0 is needed")
            vals[c].append(v)
        where.append(ln)
    if not where:
        raise err(1, 1, "the file has no rows")
    cols = {c: np.array(vals[c], dtype=float) for c in need}
    return cols, np.array(vals[TIME], dtype=float), where


# ------------------------------------------------------------------ the fit

def held_back(n: int, fraction: float, seed: int) -> list[bool]:
    """Which rows are held back: round(fraction * n) of them, chosen by the seed (Python's
    random.shuffle, deterministic for a seed)."""
    import random
    order = list(range(n))
    random.Random(seed).shuffle(order)
    k = int(math.floor(fraction * n + 0.5))
    held = [False] * n
    for i in order[:k]:
        held[i] = True
    return held


class Fit:
    """The fitted values, their standard errors, and the fit's error on two sets of rows."""

    def __init__(self, names, start, value, se, at_bound, s2, scores, n_fit, n_held, nfev, status):
        self.names = names
        self.start = start
        self.value = value
        self.se = se
        self.at_bound = at_bound
        self.s2 = s2
        self.scores = scores     # {"fitted": (n, mape, r2), "held back": (...)}
        self.n_fit = n_fit
        self.n_held = n_held
        self.nfev = nfev
        self.status = status


def scores(pred, t):
    """(n, MAPE in %, R²) of predictions against measured times; R² is None when the times are all
    one value (no variance to explain), both None with no rows."""
    import numpy as np
    n = len(t)
    if n == 0:
        return (0, None, None)
    mape = float(np.mean(np.abs(pred - t) / t) * 100)
    tss = float(np.sum((t - t.mean()) ** 2))
    r2 = None if tss == 0 else 1 - float(np.sum((pred - t) ** 2)) / tss
    return (n, mape, r2)


def fit(cost: Cost, cols, t, names, bounds, held, lines=None) -> Fit:
    """The bounded least-squares fit of `names` on the rows not held back, checked: a search that
    fails, overflows or ends on values that are not numbers is refused (_Unfit, naming the rows
    that cause it: `lines`, each row's line in the file, as read_measured returns them)."""
    import warnings

    import numpy as np
    # numpy's and scipy's warnings (an overflow in a dot product) are the checks' to report, once
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return _fit(cost, cols, t, names, bounds, held, lines)


def _fit(cost, cols, t, names, bounds, held, lines) -> Fit:
    import numpy as np
    from scipy.optimize import least_squares

    mask = ~np.asarray(held, dtype=bool)
    lines = np.asarray(lines if lines is not None else range(2, len(t) + 2))
    fcols = {c: v[mask] for c, v in cols.items()}
    ft = t[mask]
    n, p = len(ft), len(names)
    lo = np.array([bounds[x][0] for x in names])
    hi = np.array([bounds[x][1] for x in names])
    start = np.array([cost.inputs[x] for x in names], dtype=float)
    x0 = np.clip(start, lo, hi)
    # a huge residual where the cost is not a number: the search backs off, as from a wall
    wall = 1e6 * float(np.max(ft))

    def resid(x):
        r = cost.predict(dict(zip(names, x)), fcols, n) - ft
        return np.where(np.isfinite(r), r, wall)

    def at(x):
        return ", ".join(f"{nm} = {v:.6g}" for nm, v in zip(names, x))

    # every row, the held-back ones too: each is predicted with the fitted values
    r0 = cost.predict(dict(zip(names, x0)), cols, len(t)) - t
    if not np.all(np.isfinite(r0)):
        raise _Unfit(f"engine `{cost.engine}`'s execute is not a finite number at the start values ({at(x0)}) on "
                     f"{_rows(lines, ~np.isfinite(r0))}; give start values inside the model's domain with --set")
    if np.any(np.abs(r0) > BIG):
        raise _Unfit(f"engine `{cost.engine}`'s execute at the start values ({at(x0)}) {_huge(r0, t, lines)}; check "
                     "the row's values, or give start values with --set")
    try:
        res = least_squares(resid, x0, bounds=(lo, hi), x_scale="jac", method="trf", ftol=1e-12, xtol=1e-12,
                            gtol=1e-12, max_nfev=200 * (p + 1))
    except (ValueError, np.linalg.LinAlgError) as exc:  # a step, a scale or a bound's width that overflowed
        huge = [f"{nm} in [{a:g}, {b:g}]" for nm, a, b in zip(names, lo, hi) if not math.isfinite(b - a) and
                math.isfinite(a) and math.isfinite(b)]
        raise _Unfit(f"the search failed from the start values ({at(x0)}): {exc}"
                     + (f"; the bounds {', '.join(huge)} are wider than a double holds" if huge else "")) from None
    x = res.x
    if res.status <= 0:  # -1: scipy refused the problem; 0: out of evaluations, not converged
        raise _Unfit(f"the fit did not converge from the start values ({at(x0)}): {res.message}")
    if not np.all(np.isfinite(x)):
        raise _Unfit(f"the fit ended on values that are not numbers ({at(x)})")
    # at the values the search ended on, every row, the held-back ones too
    pred = cost.predict(dict(zip(names, x)), cols, len(t))
    r1 = pred - t
    if not np.all(np.isfinite(r1)):
        raise _Unfit(f"the fit ended on values ({at(x)}) where engine `{cost.engine}`'s execute is not a finite "
                     f"number on {_rows(lines, ~np.isfinite(r1))}")
    if np.any(np.abs(r1) > BIG):
        raise _Unfit(f"the fit ended on values ({at(x)}) where engine `{cost.engine}`'s execute "
                     f"{_huge(r1, t, lines)}")
    far = np.abs(r1[mask]) >= wall
    if np.any(far):  # the search stopped against the wall, or a row no value of the inputs comes near
        i = int(np.argmax(far))
        raise _Unfit(f"the fit ended on values ({at(x)}) where engine `{cost.engine}`'s execute predicts "
                     f"{pred[mask][i]:.3g} where line {int(lines[mask][i])} measured {ft[i]:.6g}"
                     + (f" (and as far off on {_rows(lines[mask], far)})" if far.sum() > 1 else "")
                     + ": a million times the longest time measured or more; the search did not bring the model "
                     "near that row: check its values")
    rss = float(np.sum(res.fun ** 2))
    s2 = rss / (n - p)
    if not (math.isfinite(s2) and np.all(np.abs(res.jac) <= BIG)):
        raise _Unfit(f"the fit's derivatives at the values it ended on ({at(x)}) are beyond what least squares can "
                     "weigh (above 1e100, or not numbers): its standard errors would not be numbers")
    se = _standard_errors(res.jac, s2)
    if np.any(np.isinf(se)):
        raise _Unfit(f"the fit's standard errors overflow at the values it ended on ({at(x)})")
    span = np.where(np.isfinite(hi - lo), hi - lo, np.maximum(np.abs(x), 1.0))
    at_bound = [bool(abs(x[i] - lo[i]) <= 1e-9 * span[i] or abs(x[i] - hi[i]) <= 1e-9 * span[i])
                for i in range(p)]
    hmask = ~mask
    sc = {"fitted": scores(pred[mask], ft), "held back": scores(pred[hmask], t[hmask])}
    return Fit(names, start, x, se, at_bound, s2, sc, n, int(hmask.sum()), res.nfev, res.status)


def _huge(r, t, lines) -> str:
    """What a residual beyond BIG is, on which rows."""
    import numpy as np
    off = np.abs(r) > BIG
    i = int(np.argmax(off))
    more = f" (beyond it on {_rows(lines, off)})" if off.sum() > 1 else ""
    return (f"predicts {r[i] + t[i]:.3g} where line {int(lines[i])} measured {t[i]:.6g}{more}: a residual beyond "
            f"{BIG:g}, which least squares cannot weigh in double precision")


def _rows(lines, which) -> str:
    """The lines of the rows `which` marks, the first five: `line 4`, `lines 4, 9 and 2 more`."""
    ls = [int(v) for v in lines[which]]
    more = f" and {len(ls) - 5} more" if len(ls) > 5 else ""
    return f"line{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls[:5]))}{more}"


class _Unfit(Exception):
    pass


def _standard_errors(J, s2):
    """sqrt(diag(s² (JᵀJ)⁻¹)), on columns scaled to unit length (the inputs differ by orders of
    magnitude); NaN for an input no row's time depends on, or that others make redundant."""
    import numpy as np
    norms = np.sqrt(np.sum(J ** 2, axis=0))
    p = J.shape[1]
    se = np.full(p, math.nan)
    live = norms > 0
    if not live.any():
        return se
    Js = J[:, live] / norms[live]
    u, sv, vt = np.linalg.svd(Js, full_matrices=False)
    if sv[-1] <= sv[0] * 1e-10:  # collinear columns: the inputs are not separately identified
        return se
    cov = (vt.T / sv ** 2) @ vt * s2
    se[live] = np.sqrt(np.diag(cov)) / norms[live]
    return se


# ------------------------------------------------------------------ the command

def _bound(text: str, fitted: list[str]):
    from serq.lang.lower.inputs import UsageError
    if "=" not in text or "," not in text.split("=", 1)[1]:
        raise UsageError(f"--bound is NAME=LO,HI, not {text!r}")
    name, rng = text.split("=", 1)
    name = name.strip()
    if name not in fitted:
        raise UsageError(f"--bound {name}: {name} is not fitted (fitted: {', '.join(fitted)})")
    lo_s, hi_s = rng.split(",", 1)
    try:
        lo, hi = float(lo_s), float(hi_s)
    except ValueError:
        raise UsageError(f"--bound {text}: LO and HI are numbers (inf for none)") from None
    if math.isnan(lo) or math.isnan(hi):
        raise UsageError(f"--bound {text}: LO and HI are numbers (inf for none), not NaN")
    if not lo < hi:
        raise UsageError(f"--bound {text}: LO must be below HI: LO {lo_s.strip()} is not below HI {hi_s.strip()}")
    return name, (lo, hi)


def _g(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.6g}"


def table(f: Fit, cost: Cost, measured: str, holdout: float, seed: int) -> str:
    z = 1.96
    out = [f"{cost.file}: engine `{cost.engine}`, {f.n_fit + f.n_held} iterations from {measured}: "
           f"{f.n_fit} fitted, {f.n_held} held back (--holdout {holdout:g}, --seed {seed})", ""]
    rows = [("input", "value", "std. error", "95% interval", "start")]
    notes = []
    for i, name in enumerate(f.names):
        v, se = float(f.value[i]), float(f.se[i])
        ci = "—" if math.isnan(se) else f"[{v - z * se:.6g}, {v + z * se:.6g}]"
        rows.append((name, _g(v), "—" if math.isnan(se) else f"{se:.3g}", ci, _g(float(f.start[i]))))
        if f.at_bound[i]:
            notes.append(f"{name} is at its bound: its standard error assumes a free input")
        if math.isnan(se):
            notes.append(f"{name}: not identified; the measured rows do not separate it from the other inputs, "
                         "or the time never depends on it")
    w = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    for r in rows:
        out.append("  ".join(c.ljust(w[j]) for j, c in enumerate(r)).rstrip())
    out.append("")
    out.append(f"{'rows':<10}  {'n':>6}  {'MAPE':>8}  {'R²':>8}")
    for key in ("fitted", "held back"):
        n, mape, r2 = f.scores[key]
        m = "—" if mape is None else f"{mape:.3g}%"
        out.append(f"{key:<10}  {n:>6}  {m:>8}  {'—' if r2 is None else f'{r2:.5f}':>8}")
    out.append("")
    out.append(f"residual standard deviation {math.sqrt(f.s2):.3g} (the program's time unit) on "
               f"{f.n_fit - len(f.names)} degrees of freedom")
    out += [f"note: {x}" for x in notes]
    return "\n".join(out)


def command(args) -> int:
    import json
    import os

    from serq.cli import _number, _out, _say, seed_value, settings_from
    from serq.lang.lower.inputs import UsageError
    try:
        import numpy  # noqa: F401
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise UsageError(f"serq calibrate needs numpy and scipy: {EXPERIMENTS}") from None
    if args.file.endswith(".json"):
        raise UsageError("serq calibrate reads a program's source: a JSON IR has its inputs resolved to numbers")
    holdout = _number(args.holdout, "--holdout")
    if not 0 <= holdout < 1:
        raise UsageError(f"--holdout is a fraction from 0 below 1, not {args.holdout}")
    seed = 1
    if args.seed is not None:
        seed = seed_value(args.seed)
    from serq.api import parse_instance
    inst = parse_instance(args.instance) if args.instance else {}
    supplied, _ = settings_from(args, inst)
    cost = cost_model(args.file, supplied, args.engine)
    if not cost.fittable:
        from serq.diagnostics import SerqError
        sel = f": {', '.join(cost.selectors)} only select{'s' if len(cost.selectors) == 1 else ''} a piece of " \
            "it (read in a condition, a comparison or a rounding)" if cost.selectors else ""
        raise SerqError("M005", f"engine `{cost.engine}`'s execute reads no input it could fit{sel}; there is "
                        "nothing to fit (declare its coefficients with args.number)", cost.span)
    names = list(dict.fromkeys(args.fit)) or list(cost.fittable)
    for x in names:
        if x not in cost.inputs:
            have = ", ".join(cost.inputs) or "none"
            raise UsageError(f"--fit {x}: the program declares no input {x} (its inputs: {have})")
        if x not in cost.reads:
            raise UsageError(f"--fit {x}: engine `{cost.engine}`'s execute does not read the input {x} "
                             f"(it reads {', '.join(cost.reads)})")
        if x in cost.selectors:
            raise UsageError(f"--fit {x}: engine `{cost.engine}`'s execute reads {x} only in a condition, a "
                             "comparison or a rounding, where the time is a step function of it, flat almost "
                             "everywhere: least squares cannot fit it (try its values with --set)")
    if not args.fit and cost.selectors:
        _say(f"{args.file}: not fitted: {', '.join(cost.selectors)}, which execute reads only in a condition, "
             "a comparison or a rounding (it selects a piece of the cost)")
    bounds = {x: (0.0, math.inf) for x in names}
    for b in args.bound:
        n, lohi = _bound(b, names)
        bounds[n] = lohi
    cols, t, lines = read_measured(args.measured, cost)
    held = held_back(len(t), holdout, seed)
    n_fit = len(t) - sum(held)
    if n_fit <= len(names):
        raise UsageError(f"fitting {len(names)} input(s) needs more than {len(names)} fitted rows; "
                         f"{args.measured} has {len(t)}, {sum(held)} held back (--holdout {holdout:g})")
    try:
        f = fit(cost, cols, t, names, bounds, held, lines)
    except _Unfit as exc:
        raise UsageError(f"{args.measured}: {exc}") from None
    _out(table(f, cost, args.measured, holdout, seed))
    out = args.output or os.path.splitext(args.measured)[0] + ".instance.json"
    inst_out = dict(inst)
    given = dict(inst.get("inputs") or {})
    for x, v in supplied.items():  # an instance's own numbers as it wrote them (4096, not 4096.0)
        if given.get(x) != v:
            given[x] = v
    given.update({x: float(v) for x, v in zip(names, f.value)})
    inst_out["inputs"] = given
    from serq._write import write_text
    write_text(out, json.dumps(inst_out, indent=1) + "\n")  # whole or not at all; OutputError: exit 1
    _say(f"{args.file}: wrote {out} (serq run {args.file} --instance {out})")
    return 0
