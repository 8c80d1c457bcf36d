"""`serq sweep FILE --find NAME=LO:HI --slo METRIC<=X` (issue 29, capacity planning;
docs/reference/cli.md, *serq sweep*, *The largest value that meets the objectives*): the largest
value of one input between LO and HI at which every objective holds, found by bisection. Each point
is replicated over the sweep's seeds and run by its machinery (serq/exp/sweep.py: Runner), one step
at a time; with --grid, one search per grid point, their steps run together. The points tried are
written as a sweep's tables.

Bisection assumes the objectives hold below the limit and fail above it: the answer is the largest
value tried that held, and the least that failed is within the tolerance above it (plus the
sampling error of the means, which the table's intervals show). An input that is a whole number (a
count, a block size: LO and HI whole, and the program refusing a fraction of it) is searched through whole numbers only, to a tolerance of 1 unless --tol says more."""
from __future__ import annotations

import difflib
import math
import operator
import re

from serq.diagnostics import SerqError
from serq.exp import sweep as S
from serq.lang.lower.constants import whole
from serq.lang.lower.inputs import UsageError

OPS = {"<=": operator.le, ">=": operator.ge}
DEFAULT_TOL = "1%"  # of HI - LO: seven halvings, nine points

# summary.csv's statistics that every program's runs have (docs/reference/report.md); the others are
# PART.NAME.KEY for a part the program names (an observe, a gauge, a pool, a stage, a claim), whose
# KEY is checked before any run and NAME against the first step's runs
_STAT = ("count", "mean", "std", "ci95", "p50", "p90", "p99", "min", "max")
FIXED = ("end", *(f"sessions.{k}" for k in ("arrived", "completed", "rejected", "stuck", "live_at_end")),
         *(f"client.{c}.{k}" for c in ("ttft", "tpot", "itl", "response") for k in _STAT),
         *(f"throughput.{k}" for k in ("requests_per_s", "input_tokens_per_s", "computed_input_tokens_per_s",
                                       "prefix_cache_hit_rate", "output_tokens_per_s",
                                       "total_tokens_per_s")), "growing_at_end")
PARTS = {"observe": _STAT, "gauges": ("mean", "ci95", "min", "max"),
         "pools": ("cap", "mean_used", "max_used", "admitted", "rejected", "evicted", "preempted", "over_cap"),
         "stages": ("utilisation", "completed"), "claims": ("at", "session")}
_SUCH_AS = ("client.response.mean", "client.response.p99", "client.ttft.p99", "client.tpot.p99")


def possible(metric: str) -> bool:
    """Whether some program's summary.csv can have this statistic (a percentile of a client's or an
    observation's statistic, `client.ttft.p95`, any: the runs are asked for it, stat_percentile)."""
    if metric in FIXED or stat_percentile(metric) is not None:
        return True
    part, _, rest = metric.partition(".")
    name, _, key = rest.rpartition(".")
    return part in PARTS and bool(name) and key in PARTS[part]


def stat_percentile(metric: str) -> float | None:
    """The percentile a statistic names, `client.ttft.p95` -> 95.0 (a summary's: client or observe)."""
    part, _, rest = metric.partition(".")
    name, _, key = rest.rpartition(".")
    m = re.fullmatch(r"p(\d+(?:\.\d+)?)", key)
    if part in ("client", "observe") and name and m and float(m.group(1)) <= 100:
        return float(m.group(1))
    return None


def _unknown(metric: str, known) -> UsageError:
    part = metric.partition(".")[0] + "."
    # a per-request metric as serq run --slo names it (ttft): the client's statistics of it
    client = [m for m in known if m.startswith(f"client.{metric}.") and m.rsplit(".", 1)[1] in ("p99", "mean")]
    near = (client or difflib.get_close_matches(metric, known, n=4, cutoff=0.6)
            or [m for m in known if m.startswith(part)][:4] or [m for m in _SUCH_AS if m in known] or list(known)[:4])
    return UsageError(f"--slo {metric}: not a statistic of the runs' summary.csv (such as {', '.join(near)})")


class Find:
    """The searches' plan (from the command line, checked before any run), their steps and result."""

    def __init__(self, name, lo, hi, tol, slos, tol_given=False):
        self.name, self.lo, self.hi, self.tol, self.slos = name, lo, hi, tol, slos
        self.tol_given = tol_given  # --tol said, not the default
        self.whole = False          # searched through whole numbers only (_decide_whole)
        self.why = ""               # and why, in words
        self.metrics = list(dict.fromkeys(m for m, _, _ in slos))  # each once, in the order given
        self.searches: list[_Search] = []
        self.grid_names: list[str] = []
        self.said: set[str] = set()  # the statistics said to have no value at some point

    @classmethod
    def from_args(cls, args, grid, fixed) -> Find:
        from serq.cli import _number, parse_slo
        if args.find is None:
            raise UsageError("--slo, --tol and --json go with --find NAME=LO:HI")
        spec = args.find
        name, eq, span = spec.partition("=")
        name = name.strip()
        lo_text, colon, hi_text = span.partition(":")
        if not eq or not name or not colon:
            raise UsageError(f"--find is NAME=LO:HI, not {spec!r}")
        lo, hi = (_number(t.strip(), f"--find {name}") for t in (lo_text, hi_text))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise UsageError(f"--find {name}: LO and HI are finite numbers, not {span!r}")
        if lo >= hi:
            raise UsageError(f"--find {name}={span}: LO is not below HI")
        if name in S._TAKEN:
            raise UsageError(f"--find {name}: the tables have a column `{name}` already; search an input of "
                             "another name")
        if any(name == n for n, _ in grid):
            raise UsageError(f"input {name} is both searched (--find) and swept (--grid)")
        if name in fixed:
            raise UsageError(f"input {name} is both searched (--find) and fixed (--set, --instance or after --)")
        if not args.slo:
            raise UsageError("--find needs an objective: --slo METRIC<=X (or METRIC>=X), such as "
                             "--slo 'client.response.mean<=2'")
        slos = []
        for text in args.slo:
            metric, op, bound = parse_slo(text, tuple(OPS), "METRIC<=X or METRIC>=X")
            if not possible(metric):
                raise _unknown(metric, FIXED)
            slos.append((metric, op, bound))
        tol_text = DEFAULT_TOL if args.tol is None else args.tol.strip()
        share = tol_text.endswith("%")
        try:
            t = float(tol_text[:-1] if share else tol_text)
        except ValueError:
            t = math.nan
        if not 0 < t < math.inf or (share and t >= 100):
            raise UsageError(f"--tol is a positive width, or a percentage of HI-LO below 100 (1%), not {tol_text!r}")
        return cls(name, lo, hi, t * (hi - lo) / 100 if share else t, slos, args.tol is not None)

    # ------------------------------------------------------------------ the steps

    def run(self, api, file, fixed, base, grid_points, seeds, settings, runner_for, quiet):
        """Every search to its end, one step a round: each search's next values (LO and HI first,
        then one midpoint) with every seed, linked and run together. Returns summary.csv's t quantile."""
        self.seeds = seeds
        self.grid_names = list(grid_points[0])
        self.searches = [_Search(self, i, at) for i, at in enumerate(grid_points)]
        links: dict = {}

        def link(search, value):  # a program error at LO or HI: its diagnostic, before any run
            key = (search.index, value)
            if key not in links:
                links[key] = S._link(api, file, {**fixed, **search.at, self.name: value}, base)
            return links[key]

        for s in self.searches:
            for v in (self.lo, self.hi):
                link(s, v)
        self._decide_whole(api, file, {**fixed, **self.searches[0].at}, base)
        t_ppf = S._t_quantile()
        bar = S._Bar(len(seeds) * sum(s.left() for s in self.searches), quiet)
        runner = runner_for(bar)
        first = True
        try:
            while True:
                wanted = [(s, v) for s in self.searches for v in s.next_values()]
                if not wanted:
                    break
                irs = [link(s, v) for s, v in wanted]
                tasks = [(p, seed) for p in range(len(wanted)) for seed in seeds]
                results = runner.run(irs, tasks, settings)
                if first:
                    self._check_metrics(results)
                    first = False
                for p, (s, v) in enumerate(wanted):
                    s.record(v, [results[(p, seed)] for seed in seeds], t_ppf)
                bar.resize(bar.done + len(seeds) * sum(s.left() for s in self.searches))
        finally:
            runner.close()
            bar.close()
        return t_ppf

    def _decide_whole(self, api, file, inputs, base):
        """Whether to search whole numbers only: when LO and HI are whole and the program refuses a
        fraction of the input between them (a count, a block size: its diagnostic at LO + 0.5). A
        whole default says nothing (a rate of 2 is searched through fractions). The tolerance is then
        1, or --tol's when that is wider."""
        if not (whole(self.lo, -2 ** 53, 2 ** 53) and whole(self.hi, -2 ** 53, 2 ** 53)):
            return
        probe = self.lo + 0.5
        try:
            api.load(file, {**inputs, self.name: probe}, base)
        except SerqError:
            self.why = f"the program refuses {self.name}={_g(probe)}"
        else:
            return
        self.whole = True
        if not (self.tol_given and self.tol >= 1):
            self.tol = 1.0

    def _check_metrics(self, results):
        """Each objective's statistic against the columns the first step's runs have (a statistic
        of a part the program does not have: a usage error, as before any run for the others)."""
        rows = [{"error": None, **r["values"]} for r in results.values() if r["status"] == "ok"]
        if not rows:  # every run failed: the failures say why, and no point holds
            return
        columns = ["error", *dict.fromkeys(c for r in rows for c in r if c != "error")]
        known = S.statistics(rows, columns)
        for m in self.metrics:
            if m not in known:
                raise _unknown(m, known)

    def judge(self, stats: dict, failed: int) -> bool:
        if failed:
            return False
        return all(stats[m][1] is not None and OPS[op](stats[m][1], bound) for m, op, bound in self.slos)

    # ------------------------------------------------------------------ the result

    def tables(self):
        """The points tried as a sweep's (points, names, tasks, results): by grid point, then value."""
        points, tasks, results = [], [], {}
        for s in self.searches:
            for v in sorted(s.points):
                p = len(points)
                s.points[v].index = p
                points.append({self.name: v, **s.at})
                for seed, res in zip(self.seeds, s.points[v].runs):
                    tasks.append((p, seed))
                    results[(p, seed)] = res
        return points, [self.name, *self.grid_names], tasks, results

    def as_json(self):
        out = [s.as_json() for s in self.searches]
        return out if self.grid_names else out[0]

    def show(self, as_json: bool, seeds, tail: dict):
        if as_json:
            import json
            obj = {"find": self.as_json(), "seeds": seeds, **tail}
            S._print(json.dumps(S._json(obj), indent=1, allow_nan=False))
            return
        goals = ", ".join(f"{m} {op} {_g(b)}" for m, op, b in self.slos)
        k = len(seeds)
        whole_text = f"; {self.name} in whole numbers only ({self.why})" if self.whole else ""
        lines = [f"objectives: {goals} (each the mean over {k} seed{'s' if k != 1 else ''}); "
                 f"tolerance {_g(self.tol)}{whole_text}"]
        for s in self.searches:
            lines += ["", *s.text()]
        S._print("\n".join(lines))


class _Point:
    __slots__ = ("runs", "stats", "failed", "held", "index")

    def __init__(self, runs, stats, failed, held):
        self.runs, self.stats, self.failed, self.held, self.index = runs, stats, failed, held, None


class _Search:
    """One bisection: held at `a`, failed at `b`, until b - a is within the tolerance."""

    def __init__(self, find: Find, index: int, at: dict):
        self.find, self.index, self.at = find, index, at
        self.points: dict[float, _Point] = {}
        self.a = self.b = None
        self.outcome = None  # "found", "fails_at_lo", "holds_at_hi"

    def next_values(self) -> list[float]:
        f = self.find
        if not self.points:
            return [f.lo, f.hi]
        if self.outcome is not None:
            return []
        m = float(math.floor((self.a + self.b) / 2)) if f.whole else _midpoint(self.a, self.b, f.tol)
        if not self.a < m < self.b:  # the floats between them are used up
            self.outcome = "found"
            return []
        return [m]

    def left(self) -> int:
        """The points still to run, as far as they can be told now (a midpoint rounded may add one)."""
        f = self.find
        if not self.points:
            return 2 + _halvings(f.hi - f.lo, f.tol)
        return 0 if self.outcome is not None else _halvings(self.b - self.a, f.tol)

    def record(self, value, runs, t_ppf):
        f = self.find
        ok = [r["values"] for r in runs if r["status"] == "ok"]
        stats = {}
        for m in f.metrics:
            stats[m] = S.interval([float(v[m]) for v in ok if v.get(m) is not None], t_ppf)
            if stats[m][0] == 0 and ok and m not in f.said:
                f.said.add(m)
                S._say(f"serq sweep: {m} has no value at {self.where(value)} (no run had a sample of it): "
                       "an objective on it does not hold where it has none")
        failed = len(runs) - len(ok)
        self.points[value] = _Point(runs, stats, failed, f.judge(stats, failed))
        if value == f.hi and f.lo in self.points:  # the first step, LO and HI: where the limit is
            if not self.points[f.lo].held:
                self.outcome = "fails_at_lo"
            elif self.points[f.hi].held:
                self.outcome = "holds_at_hi"
            else:
                self.a, self.b = f.lo, f.hi
        elif value not in (f.lo, f.hi):
            if self.points[value].held:
                self.a = value
            else:
                self.b = value
        if self.outcome is None and self.a is not None and self.b - self.a <= f.tol:
            self.outcome = "found"

    def where(self, value) -> str:
        return ", ".join(f"{n}={_g(v)}" for n, v in {self.find.name: value, **self.at}.items())

    @property
    def value(self):
        if self.outcome == "fails_at_lo":
            return None
        return self.find.hi if self.outcome == "holds_at_hi" else self.a

    @property
    def fails_at(self):
        """The least value tried at which the objectives failed: the limit is below it."""
        if self.outcome == "holds_at_hi":
            return None
        return self.find.lo if self.outcome == "fails_at_lo" else self.b

    def as_json(self) -> dict:
        f = self.find
        out = {"name": f.name, "value": _v(self.value), "lo": _v(f.lo), "hi": _v(f.hi), "tol": _v(f.tol),
               "whole": f.whole, "outcome": self.outcome, "fails_at": _v(self.fails_at),
               "slo": [{"metric": m, "op": op, "bound": b} for m, op, b in f.slos]}
        if f.grid_names:
            out = {"at": {n: _v(v) for n, v in self.at.items()}, **out}
        out["points"] = [{"value": _v(v), "point": pt.index, "held": pt.held, "failed": pt.failed,
                          "metrics": {m: {"n": pt.stats[m][0], "mean": pt.stats[m][1], "ci95": pt.stats[m][2]}
                                      for m in f.metrics}}
                         for v, pt in sorted(self.points.items())]
        return out

    def text(self) -> list[str]:
        f = self.find
        at = f" at {', '.join(f'{n}={_g(v)}' for n, v in self.at.items())}" if self.at else ""
        span = f"[{_g(f.lo)}, {_g(f.hi)}]"
        if self.outcome == "fails_at_lo":
            head = (f"{f.name}{at}: none: the objectives fail already at {f.name}={_g(f.lo)}, the low end of "
                    f"{span}")
            if self.points[f.hi].held:
                head += f" (yet hold at {_g(f.hi)}: they do not worsen as {f.name} grows)"
        elif self.outcome == "holds_at_hi":
            head = (f"{f.name}{at}: {_g(f.hi)}: the objectives hold at the high end of {span}; "
                    "the limit may be above it")
        else:
            head = (f"{f.name}{at}: {_g(self.a)}: the largest value tried in {span} at which every objective "
                    f"holds; they fail at {_g(self.b)}")
        header = [f.name]
        for m in f.metrics:
            header += [m, "±95%"]
        header.append("held")
        rows = [header]
        bounds = {m: [x for m2, _, x in f.slos if m2 == m] for m in f.metrics}
        for v, pt in sorted(self.points.items()):
            row = [_g(v)]
            for m in f.metrics:
                _, mean, ci = pt.stats[m]
                row += [_mean_text(mean, bounds[m]), _num(ci)]
            row.append(("yes" if pt.held else "no")
                       + (f" ({pt.failed} run{'s' if pt.failed != 1 else ''} failed)" if pt.failed else ""))
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        table = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return [head, *table]


def _midpoint(a: float, b: float, tol: float) -> float:
    """The middle of [a, b], rounded to a tenth of the tolerance's leading digit (a value a person
    would write: 0.7969, not 0.796875000001), which moves it by at most 5% of the tolerance."""
    m = (a + b) / 2
    r = round(m, 1 - math.floor(math.log10(tol)))
    return r if a < r < b else m


def _halvings(width: float, tol: float) -> int:
    return max(0, math.ceil(math.log2(width / tol))) if width > tol else 0


def _v(v):
    return None if v is None else S._plain(v)


def _g(v) -> str:
    """A value as the command line takes it back: the shortest text that reads as the same float."""
    return S._cell(S._plain(v)) if isinstance(v, float) else str(v)


def _num(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def _mean_text(mean, bounds) -> str:
    """A mean as the table shows it: four digits, or eight where four round it onto an objective's
    bound (0.50004 against <= 0.5 would read 0.5 beside `no`)."""
    text = _num(mean)
    if mean is not None and any(float(text) == x != mean for x in bounds):
        text = f"{mean:.8g}"
    return text
