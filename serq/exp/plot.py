"""`serq plot INPUT` (docs/reference/cli.md, *serq plot*): a report JSON, a `--dump` directory, a
dump's `requests.csv` (one point per answered request) or a sweep directory drawn as one PNG or SVG
figure through matplotlib, imported here, lazily, so that `serq` starts without it. The same input
gives the same bytes (no date, no version, a fixed salt)."""
from __future__ import annotations

import csv
import json
import math
import os
import re
import textwrap

from serq.lang.lower.inputs import UsageError

FORMATS = ("png", "svg")
CLIENT = (("ttft", "time to first token"), ("tpot", "time per output token"), ("response", "response time"))
SWEEP_Y = ("client.ttft.p99", "client.tpot.p99", "client.response.mean")
MAX_SERIES = 800   # change points drawn as they are; more are binned (a line and a band per bin)
BINS = 400
FAMILY = 4          # members of a family drawn in its panel
MAX_PANELS = 8      # time-series panels of a dump; the rest are named in the figure's footnote
# requests.csv's columns (serq/interp/dump.py, Requests): each in words and its unit, and why a row
# may leave it empty
REQUESTS = {"session": ("session", "its serial number", None), "turn": ("turn", "its index in the session", None),
            "start": ("arrival", "s", None), "first_token": ("first token's time", "s", "no first token"),
            "end": ("answer's time", "s", None), "ttft": ("time to first token", "s", "no first token"),
            "tpot": ("time per output token", "s", "no token after the first"),
            "itl_max": ("longest inter-token gap", "s", "no gap between its output tokens"),
            "response": ("response time", "s", None),
            "prompt_tokens": ("prompt tokens computed", "tokens", "not run on an engine"),
            "output_tokens": ("output length", "tokens", "not run on an engine"),
            "preemptions": ("preemptions", "count", None), "cached_tokens": ("cached prompt tokens", "tokens", None)}
REQUESTS_XY = ("prompt_tokens", "ttft")
MAX_POINTS = 20000  # points drawn as vectors; more are drawn as an image within the SVG (a PNG is one anyway)
KINDS = {"report": "a report", "dump": "a dump directory", "requests": "a requests table (CSV)",
         "sweep": "a sweep directory"}
# the greatest magnitude a value drawn on an axis may have: matplotlib's layout adds margins and
# ticks to the data's range and fails (an overflow, a tick range it cannot count) near the largest
# double; a larger value in an input is refused, naming the file and the field
LIMIT = 1e200
DECADES = 100  # a log axis spans at most this many decades (its ticks are counted); wider, a linear one


def arguments(sp) -> None:
    sp.add_argument("file", metavar="INPUT",
                    help="a report (serq run --json > r.json), a --dump directory, a dump's requests.csv "
                    "(each request: ttft against its prompt tokens) or a sweep directory")
    sp.add_argument("-o", "--output", metavar="OUT",
                    help="the figure, .png or .svg (default: beside INPUT, INPUT's name with the format's suffix)")
    sp.add_argument("--format", choices=FORMATS, help="png (default) or svg, when OUT does not say")
    sp.add_argument("--x", metavar="NAME", help="a sweep's input along the x axis (default: the first grid input); "
                    f"requests.csv's column (default: {REQUESTS_XY[0]})")
    sp.add_argument("--y", action="append", metavar="STAT",
                    help=f"a sweep's statistic, repeatable (default: {', '.join(SWEEP_Y)}); requests.csv's column, "
                    f"a panel each (default: {REQUESTS_XY[1]})")
    sp.add_argument("--by", metavar="NAME", help="a sweep's input drawn as one line per value "
                    "(default: the other grid inputs)")


def command(args) -> int:
    src = args.file.rstrip(os.sep) or args.file
    kind = _kind(src)
    takes = {"sweep": ("x", "y", "by"), "requests": ("x", "y")}.get(kind, ())
    for opt in ("x", "y", "by"):
        if getattr(args, opt) and opt not in takes:
            also = " or a dump's requests.csv" if opt != "by" else ""
            raise UsageError(f"--{opt} applies to a sweep directory{also}; {src} is {KINDS[kind]}")
    out, fmt = _output(src, args.output, args.format)
    plt = _pyplot()
    import warnings

    import numpy as np
    before = set(plt.get_fignums())
    # every input is checked where it is read; what numpy and matplotlib would still say about
    # the values drawn (a NaN left out, a degenerate range widened) is not the user's business
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            if kind == "report":
                fig = _report_figure(plt, _read_report(src), src)
            elif kind == "dump":
                fig = _dump_figure(plt, src)
            elif kind == "requests":
                fig = _requests_figure(plt, src, args.x, args.y)
            else:
                fig = _sweep_figure(plt, src, args.x, args.y, args.by)
            data = _render(fig, fmt)
        finally:  # this command's figures, whether drawn or not (a check failed half-way)
            for num in set(plt.get_fignums()) - before:
                plt.close(num)
    from serq._write import write_bytes, write_text
    # whole or not at all: a failed write leaves the figure that was there (OutputError: exit 1)
    if fmt == "png":
        write_bytes(out, data)
    else:
        write_text(out, data)
    _say(f"{args.file}: plotted {out}")
    return 0


def _say(text):
    import sys
    if sys.stderr is not None:
        print(text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ input, output


def _kind(src: str) -> str:
    if not os.path.exists(src):
        raise UsageError(f"{src}: no such file or directory")
    if os.path.isdir(src):
        if os.path.isfile(os.path.join(src, "sweep.json")):
            return "sweep"
        if os.path.isfile(os.path.join(src, "dump.json")):
            return "dump"
        try:
            names = os.listdir(src)
        except OSError as exc:
            raise UsageError(f"{src}: cannot read it: {exc.strerror or exc}") from None
        if any(n.startswith("client_") and n.endswith(".csv") for n in names):
            raise UsageError(f"{src}: a dump without dump.json (written before serq plot existed); "
                             "run serq run --dump again")
        raise UsageError(f"{src}: neither a sweep directory (sweep.json) nor a dump directory (dump.json)")
    if src.lower().endswith(".csv"):
        return "requests"
    return "report"


def _output(src: str, output: str | None, fmt: str | None) -> tuple[str, str]:
    if output:
        suffix = os.path.splitext(output)[1].lower().lstrip(".")
        if suffix not in FORMATS:
            raise UsageError(f"-o {output}: the figure's name ends in .png or .svg")
        if fmt and fmt != suffix:
            raise UsageError(f"-o {output} is {suffix.upper()}, --format says {fmt}")
        return output, suffix
    fmt = fmt or "png"
    base = src if os.path.isdir(src) else os.path.splitext(src)[0]
    return f"{base}.{fmt}", fmt


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("serq plot needs matplotlib: pip install 'serq[experiments]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    plt.rcdefaults()
    plt.rcParams.update({
        "font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "legend.fontsize": 8.5,
        "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3,
        "grid.linewidth": 0.6, "axes.spines.top": False, "axes.spines.right": False,
        "figure.dpi": 100, "savefig.dpi": 130, "svg.hashsalt": "serq-plot", "svg.fonttype": "path",
        "path.simplify": True, "figure.constrained_layout.use": True,
    })
    return plt


def _settle(fig):
    """Lay the figure out once and fix the panels where the layout put them, rounded: a text's
    measured extent can differ in its last bits from one drawing in a process to the next, and a
    layout made again at each save then moves every line by as much, which turns the simplifier's
    choice of points (and so the file's bytes) on a series' sharp steps."""
    fig.canvas.draw()
    for ax in fig.axes:
        b = ax.get_position()
        ax.set_position([round(v, 4) for v in (b.x0, b.y0, b.width, b.height)])
    fig.set_layout_engine("none")


def _render(fig, fmt: str):
    """The figure's file: the PNG's bytes or the SVG's text, made in memory (the file is written
    whole, after). No date and no matplotlib version: the same input gives the same bytes."""
    import io
    _settle(fig)
    if fmt == "png":
        png = io.BytesIO()
        fig.savefig(png, format="png", metadata={"Software": None})
        return png.getvalue()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    # a clip path's or marker's id hashes its bounds' floats to the last bit, which a layout may
    # round differently from one drawing to the next: numbered in order of appearance instead
    ids: dict = {}
    return re.sub(r"\b([pm])([0-9a-f]{10})\b", lambda m: ids.setdefault(m.group(0), f"{m.group(1)}{len(ids)}"),
                  buf.getvalue())


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not {what} ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: not {what} (it nests too deeply to read)") from None


def _show(v) -> str:
    """A value as a message quotes it."""
    if isinstance(v, str):
        return repr(v if len(v) <= 40 else v[:37] + "...")
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, int) and v.bit_length() > 128:
        return f"an integer of {v.bit_length()} bits"
    return repr(v)


class _Fields:
    """The checks of one input file's fields: each refusal names the file, the field and why."""

    def __init__(self, path: str):
        self.path = path

    def bad(self, field: str, v, why: str) -> UsageError:
        return UsageError(f"{self.path}: {field} is {_show(v)}: {why}")

    def obj(self, v, field: str, none: bool = True) -> dict:
        if v is None and none:
            return {}
        if not isinstance(v, dict):
            raise self.bad(field, v, "not an object")
        return v

    def text(self, v, field: str, none: bool = True):
        if v is None and none:
            return None
        if not isinstance(v, str):
            raise self.bad(field, v, "not a string")
        return v

    def num(self, v, field: str, *, none: bool = True, low: float | None = None, whole: bool = False,
            axis: bool = False, infinite: bool = False):
        """A number, or None (JSON's null, where `none`). Not finite only where `infinite` says so
        (an input's value, written "Infinity" as serq ir writes it); a report writes any other as
        null. `axis`: drawn on an axis, so at most LIMIT in magnitude."""
        if v is None:
            if none:
                return None
            raise self.bad(field, v, "not a number")
        if infinite and v in ("Infinity", "-Infinity", "NaN"):
            return float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.bad(field, v, "not a number")
        try:
            f = float(v)
        except OverflowError:
            raise self.bad(field, v, "beyond a double's range") from None
        if not math.isfinite(f):
            if infinite:
                return f
            raise self.bad(field, v, "not a finite number (serq writes null for one that is not)")
        if low is not None and f < low:
            raise self.bad(field, v, f"below {low:g}")
        if whole and f != math.floor(f):
            raise self.bad(field, v, "not a whole number")
        if axis and abs(f) > LIMIT:
            raise self.bad(field, v, f"beyond what a figure's axis can draw (at most {LIMIT:g} in magnitude)")
        return int(f) if whole else f


def _read_report(src: str) -> dict:
    """The report's fields the figure draws, each checked: a number where one is drawn or printed."""
    rep = _read_json(src, "a report (JSON)")
    if not isinstance(rep, dict) or not isinstance(rep.get("client"), dict) or "end" not in rep:
        raise UsageError(f"{src}: not a report of serq run --json")
    f = _Fields(src)
    out = {"seed": f.num(rep.get("seed"), "seed", whole=True), "warmup": f.num(rep.get("warmup"), "warmup"),
           "end": f.num(rep["end"], "end"), "horizon": f.num(rep.get("horizon"), "horizon"), "client": {},
           "pools": {}, "stages": {}}
    for k, _ in CLIENT:
        st = f.obj(rep["client"].get(k), f"client.{k}")
        if not st:
            continue
        c = out["client"][k] = {"count": f.num(st.get("count"), f"client.{k}.count", low=0, whole=True)}
        for q in ("min", "p50", "p90", "p99", "max"):  # the points drawn
            c[q] = f.num(st.get(q), f"client.{k}.{q}", axis=True)
        for q in ("mean", "ci95"):
            c[q] = f.num(st.get(q), f"client.{k}.{q}")
    for name, p in f.obj(rep.get("pools"), "pools").items():
        p = f.obj(p, f"pools.{name}", none=False)
        out["pools"][name] = {k: f.num(p.get(k), f"pools.{name}.{k}")
                              for k in ("cap", "mean_used", "max_used", "rejected", "evicted", "preempted")}
    for name, st in f.obj(rep.get("stages"), "stages").items():
        st = f.obj(st, f"stages.{name}", none=False)
        out["stages"][name] = {"kind": f.text(st.get("kind"), f"stages.{name}.kind"),
                               "utilisation": f.num(st.get("utilisation"), f"stages.{name}.utilisation"),
                               "completed": f.num(st.get("completed"), f"stages.{name}.completed", low=0,
                                                  whole=True)}
    return out


def _read_dump_meta(path: str, need_end: bool = True) -> dict:
    """A dump's dump.json, each field the figures read checked (serq/interp/dump.py writes it)."""
    meta = _read_json(path, "a dump's dump.json")
    if not isinstance(meta, dict) or (need_end and ("end" not in meta or "warmup" not in meta)):
        raise UsageError(f"{path}: not a dump's dump.json")
    f = _Fields(path)
    out = {"program": f.text(meta.get("program"), "program"), "seed": f.num(meta.get("seed"), "seed", whole=True),
           "horizon": f.num(meta.get("horizon"), "horizon"),
           "warmup": f.num(meta.get("warmup"), "warmup", low=0, axis=True) or 0.0,
           "end": f.num(meta.get("end"), "end", none=not need_end, low=0, axis=True),
           "inputs": {k: f.num(v, f"inputs.{k}", infinite=True)
                      for k, v in f.obj(meta.get("inputs"), "inputs").items()},
           "pools": {k: f.num(v, f"pools.{k}") for k, v in f.obj(meta.get("pools"), "pools").items()}}
    engines = meta.get("engines")
    if engines is not None and not (isinstance(engines, list) and all(isinstance(e, str) for e in engines)):
        raise f.bad("engines", engines, "not a list of engines' names")
    out["engines"] = list(engines or [])
    return out


def _read_csv(path: str, by_name: bool = True) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """A CSV file's header and its rows, each with its line; blank lines skipped. A file read by
    its columns' names (`by_name`; summary.csv is read by position) names each once: which of two
    a figure would read is a guess."""
    rows = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            for row in reader:
                rows.append((reader.line_num, row))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a CSV file ({exc})") from None
    except csv.Error as exc:  # a field past the csv module's limit, a NUL
        raise UsageError(f"{path}:{reader.line_num}: not a CSV row ({exc})") from None
    if not rows:
        raise UsageError(f"{path}: empty, not even a header")
    head = rows[0][1]
    for i, h in enumerate(head if by_name else []):
        if head.index(h) < i:
            raise UsageError(f"{path}:1: the header names `{h}` twice")
    return head, [(n, r) for n, r in rows[1:] if any(x.strip() for x in r)]


def _cell(path: str, line: int, name: str, text: str, *, low: float | None = None, finite: bool = True) -> float:
    """A CSV cell as a number drawn on an axis (at most LIMIT in magnitude); `finite` False lets
    inf and nan through (a gauge's value may be either), drawn as a gap."""
    t = text.strip()
    try:
        v = float(t)
    except ValueError:
        raise UsageError(f"{path}:{line}: {name} is {_show(t)}, not a number") from None
    if not math.isfinite(v):
        if finite:
            raise UsageError(f"{path}:{line}: {name} is {_show(t)}, not a finite number")
        return v
    if low is not None and v < low:
        raise UsageError(f"{path}:{line}: {name} is {_show(t)}, below {low:g}")
    if abs(v) > LIMIT:
        raise UsageError(f"{path}:{line}: {name} is {_show(t)}: beyond what a figure's axis can draw "
                         f"(at most {LIMIT:g} in magnitude)")
    return v


def _columns(path: str, want: list[str], end: float | None = None, finite: bool = True) -> list[list[float]]:
    """The named columns of a dump's CSV file as numbers, each checked: `time` (where a series has
    one) from 0, never going back, at most the run's `end`; the others numbers >= 0 (a gauge's,
    `finite` False, any number, inf and nan drawn as gaps)."""
    head, rows = _read_csv(path)
    miss = [w for w in want if w not in head]
    if miss:
        raise UsageError(f"{path}: no column {miss[0]}: expected the columns {', '.join(want)} "
                         f"(its columns: {', '.join(head[:12])}{', ...' if len(head) > 12 else ''})")
    idx = [head.index(w) for w in want]
    out: list[list[float]] = [[] for _ in want]
    last = 0.0
    for n, r in rows:
        if len(r) != len(head):
            raise UsageError(f"{path}:{n}: {len(r)} field(s) where the header has {len(head)}")
        for k, (w, i) in enumerate(zip(want, idx)):
            if w == "time":
                v = _cell(path, n, w, r[i], low=0.0)
                if v < last:
                    raise UsageError(f"{path}:{n}: time {r[i].strip()} comes before the row above's {last!r}")
                if end is not None and v > end:
                    raise UsageError(f"{path}:{n}: time {r[i].strip()} is past the run's end ({end!r}, dump.json)")
                last = v
            else:
                v = _cell(path, n, w, r[i], low=None if not finite else 0.0, finite=finite)
            out[k].append(v)
    return out


# ------------------------------------------------------------------ shared pieces


def _num(v: float) -> str:
    """A figure for a label: 4 significant digits, thousands separated."""
    if isinstance(v, str):   # "Infinity": an infinite input, as dump.json writes it
        v = float(v) if v in ("Infinity", "-Infinity") else v
        if isinstance(v, str):
            return v
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return str(v)
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e7):
        return f"{v:.3g}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _secs(v: float) -> str:
    """A time with a unit an engineer reads at a glance."""
    if v is None or not math.isfinite(v):
        return str(v)
    if abs(v) < 1:
        return f"{v * 1000:.3g} ms"
    return f"{v:.4g} s"


def _log_worthy(vals, ratio: float = 100) -> bool:
    """A log axis when the values are positive and span more than two decades (the greatest more
    than `ratio` times the least), and at most DECADES, whose ticks matplotlib can lay out."""
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return bool(vals) and min(vals) > 0 and ratio < max(vals) / min(vals) <= 10.0 ** DECADES


def _plain_log(axis):
    """A log axis with plain numbers (0.01, 0.1, 1, 10) rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _footnote(fig, text: str):
    """A note under the axes, which the layout keeps clear of them (two lines at most)."""
    import textwrap
    width = int(fig.get_figwidth() * 15)  # characters of 8 pt a line
    lines = textwrap.wrap(text, width)
    h = (0.16 * len(lines) + 0.08) / fig.get_figheight()
    fig.get_layout_engine().set(rect=(0, h, 1, 1 - h))
    fig.text(0.006, 0.006, "\n".join(lines), fontsize=8, color="0.35", ha="left", va="bottom")


# ------------------------------------------------------------------ names and units


CLIENT_WORDS = {"ttft": "time to first token", "tpot": "time per output token", "itl": "inter-token latency",
                "response": "response time"}
STAT_WORDS = {"mean": "mean", "std": "standard deviation", "ci95": "95% interval (half-width)", "p50": "p50", "p90": "p90", "p99": "p99",
              "min": "least", "max": "greatest", "count": "samples"}
POOL_WORDS = {"mean_used": ("mean used (time average)", None), "max_used": ("greatest used", None),
              "cap": ("cap", None), "admitted": ("holds admitted", "holds"), "rejected": ("holds rejected", "holds"),
              "evicted": ("entries evicted", "cache entries"), "preempted": ("holds preempted", "holds"),
              "over_cap": ("head over the cap at the end", "0 or 1")}
GAUGE_WORDS = {"mean": "time average", "ci95": "time average's 95% interval (half-width)", "min": "least",
               "max": "greatest"}
BOOLEAN = ("==", "!=", "<", "<=", ">", ">=", "&&", "||")


class Units:
    """What the program says about its series' units: each pool's (a device's memory counts KV
    tokens, an engine's queue requests), each gauge's and observation's from its expression, and
    the gauge's expression as the program writes it. Read from the program the dump or sweep names,
    with its inputs; when that cannot be loaded (moved, changed), from the names alone."""

    def __init__(self, program: str | None = None, inputs: dict | None = None):
        self.pools: dict[str, str] = {}
        self.gauges: dict[str, tuple[str | None, str]] = {}
        self.observes: dict[str, str | None] = {}
        self.stages: dict[str, str] = {}  # a stage's kind, as the report names it: "engine", "delay", ...
        prog = None
        if program:
            try:
                from serq import api
                prog = api.load(program, {k: float(v) for k, v in (inputs or {}).items() if v is not None})
            except Exception:  # noqa: BLE001 -- only labels depend on it: any failure falls back to names
                prog = None
        if prog is None:
            return
        from serq.draw.text import Source, reading, src
        from serq.ir import model as I
        from serq.link.rules import walk
        for p in prog.pools:
            self.pools[p.name] = "KV tokens" if p.memory is not None else "requests" if p.admit_via else \
                f"units of pool {p.name}"
        for st in prog.stages:
            self.stages[st.name] = "engine" if isinstance(st.kind, I.Step) else "delay" if I.is_delay(st.kind) \
                else st.kind.k
        with reading(Source(prog)):
            for g in prog.gauges:
                self.gauges[g.name] = (self._unit(g.e, I), src(g.e))
        w = prog.workload
        for st in walk(prog.server + w.init + w.turn + (w.session or [])):
            if isinstance(st, I.Observe):
                # an attribute's unit is the program's secret: a name that says tokens is taken at its word
                unit = self._unit(st.e, I) or ("tokens" if "tokens" in st.name else None)
                self.observes.setdefault(st.name, unit)

    def pool(self, name: str) -> str:
        base = _member(name)[0]
        if base in self.pools:
            return self.pools[base]
        last = base.rsplit(".", 1)[-1]
        return "KV tokens" if "kv" in last.lower() else "requests" if last in ("reqs", "slots") else "units"

    def _unit(self, e, I) -> str | None:
        """The unit an expression's value has, where its form says it; None where it does not."""
        if isinstance(e, I.Obs):
            if e.fn in ("used", "free", "cachedin"):
                return self.pool(e.of.name)
            return {"holders": "requests", "queued": "requests", "queue": "jobs", "busy": "jobs"}.get(e.fn)
        if isinstance(e, I.Bin) and e.op in BOOLEAN or isinstance(e, I.Un) and e.op == "!":
            return "0 or 1"
        if isinstance(e, I.Ctx) and e.name == "now":
            return "seconds"
        if isinstance(e, I.Bin) and e.op == "-" and isinstance(e.l, I.Ctx) and e.l.name == "now":
            return "seconds"  # now - a time the session set: a duration
        if isinstance(e, I.Cost):
            return self._unit(e.e, I)
        parts = [e.l, e.r] if isinstance(e, I.Bin) and e.op in "+-" else \
            e.args if isinstance(e, I.Fn) and e.name in ("min", "max", "sum") else \
            [e.a, e.b] if isinstance(e, I.If) else [e.e] if isinstance(e, I.Un) else None
        if parts is None:
            return None
        units = {self._unit(x, I) for x in parts if not isinstance(x, (I.Num, I.Inf))}
        return units.pop() if len(units) == 1 else None


def _axis_unit(unit: str | None) -> str:
    if unit == "0 or 1":
        return "0 or 1 (its mean: a fraction)"
    return unit or "the value (no unit known)"


def _describe(stat: str, units: Units) -> tuple[str, str]:
    """A summary column in words, and the unit of its values: client.ttft.p99 -> ("time to first
    token, p99", "seconds")."""
    parts = stat.split(".")
    head, last = parts[0], parts[-1]
    mid = ".".join(parts[1:-1])
    if head == "client" and len(parts) == 3:
        what = CLIENT_WORDS.get(mid, mid)
        if last == "count":
            return f"{what}: samples", "samples"
        return f"{what}, {STAT_WORDS.get(last, last)}", "seconds"
    if head == "pools" and len(parts) >= 3:
        words, unit = POOL_WORDS.get(last, (last.replace("_", " "), None))
        return f"pool {mid}: {words}", unit or units.pool(mid)
    if head == "stages" and len(parts) >= 3:
        kind = units.stages.get(_member(mid)[0])
        if last == "utilisation":
            if kind == "delay":  # as the text report counts it: the time a job is present, not a load
                return (f"stage {mid}: a job present (a delay: not a server's load)",
                        "fraction of the time a job is present")
            return f"stage {mid}: utilisation", "fraction of the time busy"
        if last == "completed" and kind == "engine":  # a turn's prefill and its decode are one each
            return f"stage {mid}: runs completed", "runs"
        return f"stage {mid}: {'jobs completed' if last == 'completed' else last.replace('_', ' ')}", "jobs"
    if head == "sessions" and len(parts) == 2:
        return "sessions " + last.replace("_", " ").replace("at end", "at the end"), "sessions"
    if head == "gauges" and len(parts) >= 3:
        unit, _ = units.gauges.get(mid, (None, ""))
        return f"gauge {mid}, {GAUGE_WORDS.get(last, last)}", _axis_unit(unit)
    if head == "observe" and len(parts) >= 3:
        if last == "count":
            return f"observed {mid}: samples", "samples"
        return f"observed {mid}, {STAT_WORDS.get(last, last)}", _axis_unit(units.observes.get(mid))
    if head == "throughput" and len(parts) == 2 and last.endswith("_per_s"):
        what = last[:-len("_per_s")].replace("_", " ")
        return f"throughput: {what} per second", ("tokens" if what.endswith("tokens") else what) + " per second"
    if stat == "throughput.prefix_cache_hit_rate":
        return "prefix cache hit rate (of the prompt tokens)", "fraction of tokens"
    if stat == "end":
        return "the run's end", "seconds"
    if stat == "growing_at_end":
        return "runs still growing at the end", "runs"
    return stat.replace(".", " ").replace("_", " "), "the value (no unit known)"


# ------------------------------------------------------------------ a report


def _report_figure(plt, rep: dict, src: str):
    client = [(k, title, rep["client"].get(k)) for k, title in CLIENT]
    client = [(k, t, s) for k, t, s in client if s and s.get("count")]
    pools = rep["pools"]
    stages = rep["stages"]
    ncol = max(3, len(client))
    rows = 1 + bool(pools or stages)
    fig = plt.figure(figsize=(4.2 * ncol, 3.4 * rows + 0.6))
    gs = fig.add_gridspec(rows, ncol * 2)
    for i, (k, title, st) in enumerate(client):
        ax = fig.add_subplot(gs[0, 2 * i:2 * i + 2])
        qs = [("min", 0.0), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)]
        pts = [(st[q], y, q) for q, y in qs if st.get(q) is not None]
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], ls=":", color="0.6", lw=1)
        ax.plot(xs, [p[1] for p in pts], "o", color="C0", ms=6, zorder=3)
        for x, y, q in pts:
            right = q != "p99"  # p99 and max sit one above the other: p99's label on the left
            ax.annotate(f"{q} {_secs(x)}", (x, y), xytext=(6 if right else -6, -3), textcoords="offset points",
                        ha="left" if right else "right", va="top" if q != "min" else "bottom", fontsize=8.5)
        if _log_worthy(xs):
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
        ax.set_ylim(-0.05, 1.08)
        ax.set_yticks([0, 0.5, 0.9, 0.99])
        ax.set_yticklabels(["0", "0.5", "0.9", "0.99"])
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of samples ≤ x")
        mean = st.get("mean")
        ci = st.get("ci95")
        ax.set_title(f"{title} ({k})\nn = {st['count']:,}, mean {_secs(mean)}"
                     + (f" ± {_secs(ci)}" if ci is not None else ""))
        ax.margins(x=0.25)
    if pools or stages:
        half = ncol
        if pools:
            ax = fig.add_subplot(gs[1, :half] if stages else gs[1, :])
            _pool_bars(ax, pools)
        if stages:
            ax = fig.add_subplot(gs[1, half:] if pools else gs[1, :])
            _stage_bars(ax, stages)
    prog = os.path.basename(src)
    hz = rep["horizon"]
    fig.suptitle(f"{prog}: seed {rep['seed']}, warm-up {_num(rep['warmup'] or 0)} s, end {_num(rep['end'] or 0)} s"
                 + (f" (horizon {_num(hz)} s)" if hz is not None else ""), fontsize=11.5)
    _footnote(fig, "Points are the report's quantiles (min, p50, p90, p99, max) of the samples after the warm-up, "
              "joined by dotted lines: not a full CDF (serq run --dump DIR; serq plot DIR draws that).")
    return fig


def _pool_bars(ax, pools: dict):
    names = list(pools)
    capped = [n for n in names if pools[n].get("cap")]
    uncapped = [n for n in names if not pools[n].get("cap")]
    y = list(range(len(capped)))
    mean = [_share(pools[n]["mean_used"], pools[n]["cap"]) for n in capped]
    top = [_share(pools[n]["max_used"], pools[n]["cap"]) for n in capped]
    ax.barh([v + 0.18 for v in y], top, height=0.36, color="C1", alpha=0.55, label="max used")
    ax.barh([v - 0.18 for v in y], mean, height=0.36, color="C0", label="mean used (time average)")
    for v, n, m, t in zip(y, capped, mean, top):
        p = pools[n]
        ax.text(min(max(m, 0), 134) + 1, v - 0.18, f"{_num(p['mean_used'] or 0)} of {_num(p['cap'])}", va="center",
                fontsize=8)
        extra = [f"{k} {_num(p[k])}" for k in ("rejected", "evicted", "preempted") if p.get(k)]
        ax.text(min(max(t, 0), 134) + 1, v + 0.18,
                f"{_num(p['max_used'] or 0)}" + (f"  ({', '.join(extra)})" if extra else ""),
                va="center", fontsize=8)
    _percent_axes(ax, y, [f"pool {n}" for n in capped], "% of the pool's cap")
    title = "pools: units used"
    if uncapped:
        title += "\nno cap: " + ", ".join(f"{n} (mean {_num(pools[n]['mean_used'] or 0)}, "
                                          f"max {_num(pools[n]['max_used'] or 0)})" for n in uncapped)
    ax.set_title(title)
    if capped:
        ax.legend(loc="lower right", frameon=False)


def _share(v, cap) -> float:
    """v as a percentage of cap, for a bar on an axis from 0 to 135%: a share beyond what the axis
    shows (a report's pool used a billion times its cap) is drawn at the axis' end, its label the
    number."""
    pct = 100 * (v or 0) / cap
    return min(max(pct, -1.0), 1000.0) if math.isfinite(pct) else 1000.0 if pct > 0 else 0.0


def _percent_axes(ax, y, labels, xlabel):
    """A horizontal bar chart's axes in percent, room on the right for the bars' labels."""
    ax.set_yticks(y)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 135)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", visible=False)


def _pct(u) -> str:
    """A fraction as a percentage with one decimal, as the text report prints it."""
    v = 100 * (u or 0)
    return f"{v:.1f}%" if abs(v) < 1e7 else f"{v:.3g}%"


def _stage_bars(ax, stages: dict):
    """The stages' utilisation, each counted as the text report says (`kind`, serq/interp/report.py
    COUNTS): a delay's figure is the time a job is present (a think or tool time), not a server's
    load, so a delay is left out of the bars and named under the title with what it counts."""
    names = [n for n in stages if stages[n].get("kind") != "delay"]
    delays = [n for n in stages if stages[n].get("kind") == "delay"]
    util = [_share(stages[n]["utilisation"], 1) for n in names]
    y = list(range(len(names)))
    ax.barh(y, util, height=0.5, color="C2")
    for v, n, u in zip(y, names, util):
        what = "runs" if stages[n].get("kind") == "engine" else "jobs"  # an engine's: a prefill, a decode
        ax.text(min(max(u, 0), 134) + 1, v,
                f"{_pct(stages[n]['utilisation'])}  ({_num(stages[n]['completed'] or 0)} {what} completed)",
                va="center", fontsize=8)
    _percent_axes(ax, y, [f"stage {n}" for n in names], "% of the time busy, after the warm-up")
    title = "stages: utilisation"
    if delays:
        said = "; ".join(f"{n}, a job present {_pct(stages[n]['utilisation'])} of the time "
                         f"({_num(stages[n]['completed'] or 0)} jobs)" for n in delays)
        title += "\n" + "\n".join(textwrap.wrap(f"{'delays' if len(delays) > 1 else 'delay'}, a think time, "
                                                 f"not a server's load (not drawn): {said}", 72))
    ax.set_ylim(max(len(names), 2) - 0.5, -0.5)  # one bar keeps a bar's height
    if not names:
        ax.text(0.5, 0.5, "no stage but delays", transform=ax.transAxes, ha="center", va="center",
                fontsize=8.5, color="0.4")
    ax.set_title(title)


# ------------------------------------------------------------------ a dump


def _dump_figure(plt, src: str):
    meta = _read_dump_meta(os.path.join(src, "dump.json"))
    end = meta["end"]
    warm = meta["warmup"]
    client = []
    for k, title in CLIENT:
        path = os.path.join(src, f"client_{k}.csv")
        if os.path.isfile(path):
            (vals,) = _columns(path, ["value"])
            if vals:
                client.append((k, title, vals))
    panels, repeats = _time_panels(src, meta, Units(meta.get("program"), meta.get("inputs")))
    shown, hidden = panels[:MAX_PANELS], panels[MAX_PANELS:]
    ncol = 3
    trows = (len(shown) + 1) // 2
    fig = plt.figure(figsize=(13, 3.3 + 2.7 * trows + 0.5))
    gs = fig.add_gridspec(1 + trows, 6, height_ratios=[1.2] + [1] * trows)
    for i, (k, title, vals) in enumerate(client[:ncol]):
        ax = fig.add_subplot(gs[0, 2 * i:2 * i + 2])
        _cdf(ax, k, title, vals, "after the warm-up" if warm > 0 else "all")
    for j, panel in enumerate(shown):
        ax = fig.add_subplot(gs[1 + j // 2, 3 * (j % 2):3 * (j % 2) + 3])
        _time_panel(ax, panel, end, warm)
    prog = os.path.basename(meta["program"] or src)
    inputs = meta["inputs"]
    head = f"{prog}: seed {meta['seed']}, warm-up {_num(warm)} s, end {_num(end)} s"
    if inputs:
        head += "\n" + ", ".join(f"{k} = {_num(v)}" for k, v in inputs.items())
    fig.suptitle(head, fontsize=11.5)
    note = (f"CDFs: the samples taken after the warm-up (t ≥ {_num(warm)} s), as the report's statistics. "
            "Time series: every change, the warm-up shaded" if warm > 0 else
            "CDFs: every sample (no warm-up). Time series: every change")
    note += f"; past {MAX_SERIES:,} changes, a line per 1/{BINS} of the run (its time average) and a band (its range)."
    if repeats:
        note += " A series is drawn once, named with the others that repeat it (=)."
    if hidden:
        note += " Not shown: " + ", ".join(p["title"] for p in hidden) + "."
    _footnote(fig, note)
    return fig


def _cdf(ax, k, title, vals, which: str):
    import numpy as np
    xs = np.sort(np.asarray(vals, dtype=float))
    n = len(xs)
    ys = np.arange(1, n + 1) / n
    finite = xs[np.isfinite(xs)]
    ax.step(xs, ys, where="post", color="C0", lw=1.4)
    for q, ls in ((0.5, "--"), (0.99, ":")):
        v = float(np.quantile(xs, q))  # linear between closest ranks, as the report's
        ax.axvline(v, color="C3", ls=ls, lw=1)
        ax.annotate(f"p{int(q * 100)} {_secs(v)}", (v, q), xytext=(4, -10 if q > 0.9 else -14),
                    textcoords="offset points", fontsize=8.5, color="C3",
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85})
    if len(finite) and _log_worthy(list(finite)):
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
    else:
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("seconds")
    ax.set_ylabel("fraction of samples ≤ x")
    ax.set_title(f"{title} ({k}): CDF\n{n:,} samples ({which}), mean {_secs(float(np.mean(xs)))}")


def _steps(t, v) -> tuple:
    """A piecewise-constant series as the function it is: the value at the end of each instant, only
    where it changes, 0 before the first change (two files of one signal written at different
    moments are then the same)."""
    last: dict = {}
    for a, b in zip(t, v):
        last[a] = b
    out, prev = [], 0.0
    for a in sorted(last):
        if last[a] != prev:
            out.append((a, last[a]))
            prev = last[a]
    return tuple(out)


class _Once:
    """The series drawn so far: one that repeats one of them (a gauge of a pool's used, a pool of
    request slots and its engine's running count) is not drawn again, but named in its legend,
    each as the program reads it (used(reqs), a gauge's name)."""

    def __init__(self):
        self.seen: dict[tuple, tuple] = {}   # the function -> (the drawn line's name, the others')
        self.repeats: list[str] = []

    def line(self, lines: list, name: str, label: str, t, v, color, ls) -> None:
        key = _steps(t, v)
        if key in self.seen:
            self.seen[key][1].append(name)
            self.repeats.append(f"{name} = {self.seen[key][0]}")
            return
        also: list[str] = []
        self.seen[key] = (name, also)
        lines.append([label, t, v, color, ls, also])


def _time_panels(src: str, meta: dict, units: Units | None = None) -> tuple[list[dict], list[str]]:
    """What the dump holds over time, in the order an engineer reads it: the engines' running and
    waiting requests, the pools' use, the other stages' jobs, then the program's gauges. A series
    drawn already is not drawn again (the repeats, named); a panel left empty goes. A family's
    members share a panel. Each panel's y-axis is its series' unit."""
    units = units or Units()
    once = _Once()
    panels = []
    caps = meta["pools"]
    engines = meta["engines"]
    end = meta["end"]
    sdir = os.path.join(src, "stage")
    others = []
    for base, names in _families(_names(sdir, engines)):
        if names[0] not in engines:
            others += names
            continue
        lines: list = []
        for i, name in enumerate(names[:FAMILY]):
            t, run, wait = _columns(os.path.join(sdir, name + ".csv"), ["time", "running", "waiting"], end)
            tag = name[len(base):] + " " if len(names) > 1 else ""
            once.line(lines, f"{name}: running.count", f"{tag}running" + ("" if tag else " (running.count)"),
                      t, run, f"C{2 + 2 * i}", "-")
            once.line(lines, f"{name}: waiting.count", f"{tag}waiting" + ("" if tag else " (waiting.count)"),
                      t, wait, f"C{2 + 2 * i}" if tag else "C3", "--" if tag else "-")
        panels.append({"title": f"engine {_span(base, names)}: requests running and waiting", "ylabel": "requests",
                       "lines": lines})
    pdir = os.path.join(src, "pool")
    for base, names in _families(_names(pdir, list(caps))):
        lines = []
        for i, name in enumerate(names[:FAMILY]):
            t, used, queued = _columns(os.path.join(pdir, name + ".csv"), ["time", "used", "queued"], end)
            tag = name[len(base):] + " " if len(names) > 1 else ""
            once.line(lines, f"used({_surface(name)})", f"{tag}used", t, used, f"C{i}", "-")
            if any(queued):
                once.line(lines, f"queued({_surface(name)})", f"{tag}queued" if tag else "queued (holds waiting)",
                          t, queued, f"C{i}" if tag else "C1", "--" if tag else "-")
        cap = {caps.get(n) for n in names}
        cap = cap.pop() if len(cap) == 1 else None
        each = " each" if len(names) > 1 else ""
        unit = units.pool(names[0])
        used_only = all(ln[0].endswith("used") for ln in lines)
        panels.append({"title": f"pool {_span(base, names)}: " + ("used" if used_only else "used and queued")
                       + (f" (cap {_num(cap)}{each})" if cap else ""),
                       "lines": lines, "ylabel": unit if used_only else f"{unit}; queued: holds", "cap": cap})
    if others:
        lines = []
        for i, name in enumerate(others[:FAMILY]):
            t, run, wait = _columns(os.path.join(sdir, name + ".csv"), ["time", "running", "waiting"], end)
            once.line(lines, f"{name} in service", f"{name} in service", t, run, f"C{(i + 4) % 10}", "-")
            if any(wait):
                once.line(lines, f"{name} queued", f"{name} queued", t, wait, f"C{(i + 4) % 10}", "--")
        more = f" ({FAMILY} of {len(others)})" if len(others) > FAMILY else ""
        queued = " and queued" if any(ln[0].endswith("queued") for ln in lines) else ""
        panels.append({"title": f"stages: jobs in service{queued}{more}", "ylabel": "jobs", "lines": lines})
    gdir = os.path.join(src, "gauge")
    for name in _names(gdir, list(units.gauges)):
        t, v = _columns(os.path.join(gdir, name + ".csv"), ["time", "value"], end, finite=False)
        unit, text = units.gauges.get(name, (None, ""))
        lines = []
        once.line(lines, f"gauge {name}", name, t, v, "C5", "-")
        panels.append({"title": f"gauge {name}" + (f" = {text}" if text else ""), "ylabel": _axis_unit(unit),
                       "lines": lines})
    for p in panels:  # a repeated series' names beside the line that shows it
        if len(p["lines"]) <= 2:
            for ln in p["lines"]:
                if ln[5]:
                    ln[0] = f"{ln[0]} = {' = '.join(ln[5])}"
        else:  # a family's: once for every member, under the title ([i] each member's index)
            said: dict = {}
            for ln in p["lines"]:
                label = re.sub(r"^\[\d+\] ", "", ln[0])
                for a in ln[5]:
                    said.setdefault(label, [])
                    a = re.sub(r"\[\d+\]", "[i]", a)
                    if a not in said[label]:
                        said[label].append(a)
            if said:
                p["title"] += "\n" + "; ".join(f"{k} = {' = '.join(v)}" for k, v in said.items())
        p["lines"] = [tuple(ln[:5]) for ln in p["lines"]]
        p["title"] = "\n".join(textwrap.fill(line, 72) for line in p["title"].split("\n"))
    return [p for p in panels if p["lines"]], once.repeats


def _surface(name: str) -> str:
    """A member as the program names it: the dump's R.reqs[0] is R[0].reqs."""
    base, i = _member(name)
    if i < 0 or "." not in base:
        return name
    head, rest = base.split(".", 1)
    return f"{head}[{i}].{rest}"


def _names(d: str, order: list) -> list[str]:
    """The series in d, in `order` (the program's), the rest by name, members by index."""
    if not os.path.isdir(d):
        return []
    try:
        have = {n[:-4] for n in os.listdir(d) if n.endswith(".csv")}
    except OSError as exc:
        raise UsageError(f"{d}: cannot read it: {exc.strerror or exc}") from None
    first = [n for n in order if n in have]
    return first + sorted(have - set(first), key=_member)


def _member(label: str):
    m = re.fullmatch(r"(.*)\[(\d+)\]", label)
    return (m.group(1), int(m.group(2))) if m else (label, -1)


def _families(names: list[str]) -> list[tuple[str, list[str]]]:
    out: dict = {}
    for n in names:
        out.setdefault(_member(n)[0], []).append(n)
    return [(b, sorted(ms, key=_member)) for b, ms in out.items()]


def _span(base: str, names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    more = f", {FAMILY} of {len(names)} shown" if len(names) > FAMILY else ""
    return f"{base}[{_member(names[0])[1]}..{_member(names[-1])[1]}{more}]"


def _time_panel(ax, panel: dict, end: float, warm: float):
    top = 0.0
    for label, t, v, color, ls in panel["lines"]:
        top = max(top, _draw_series(ax, t, v, end, label, color, ls))
    cap = panel.get("cap")
    if cap and top > 0 and cap <= 1.5 * top:  # a cap far above what was used would flatten the line
        ax.axhline(cap, color="0.3", ls="--", lw=1, label="cap")
    if warm > 0:
        ax.axvspan(0, warm, color="0.5", alpha=0.15, lw=0)
        ax.text(warm, 1.0, " warm-up", transform=ax.get_xaxis_transform(), fontsize=8, color="0.3",
                ha="right" if warm > 0.8 * end else "left", va="top")
    ax.set_xlim(0, end)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(panel["ylabel"])
    # the legend between the title and the axes, where it hides no line
    n = len(ax.get_legend_handles_labels()[0])
    ncol = min(n, 4)
    rows = -(-n // ncol) if n else 0
    ax.set_title(panel["title"], pad=4 + 14 * rows)
    if n:
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=ncol, frameon=False,
                  handlelength=1.8, columnspacing=1.2, borderaxespad=0.2)


def _draw_series(ax, t, v, end, label, color, ls) -> float:
    """A piecewise-constant series up to end: its steps, or, past MAX_SERIES changes, per bin its
    time average (a line) and the least and greatest value it held (a band). A value that is not a
    number (a gauge's inf or nan) is a gap. The greatest value (0 without one)."""
    import numpy as np
    ts = np.asarray(t, dtype=float)
    vs = np.asarray(v, dtype=float)
    vs = np.where(np.isfinite(vs), vs, np.nan)
    if not len(ts):
        return 0.0
    if len(ts) <= MAX_SERIES or not end > 0:
        ax.step(np.append(ts, end), np.append(vs, vs[-1]), where="post", color=color, ls=ls, lw=1.1, label=label)
        return float(np.nanmax(vs)) if np.isfinite(vs).any() else 0.0
    # on the run's time scaled to [0, 1]: a huge value times a long time would overflow
    tn = ts / end
    edges = np.linspace(0.0, 1.0, BINS + 1)
    held = ~np.isnan(vs)                     # the time a value is held, gaps left out of the average
    val = np.where(held, vs, 0.0)
    dt = np.diff(np.append(tn, 1.0))
    cum_v = np.concatenate([[0.0], np.cumsum(val * dt)])
    cum_w = np.concatenate([[0.0], np.cumsum(held * dt)])

    def integral(cum, f, x):
        i = np.searchsorted(tn, x, side="right") - 1
        j = np.maximum(i, 0)
        return np.where(i < 0, 0.0, cum[j] + f[j] * (x - tn[j]))   # nothing before the first change
    mean = np.diff(integral(cum_v, val, edges)) / np.diff(integral(cum_w, held.astype(float), edges))
    first = np.maximum(np.searchsorted(tn, edges[:-1], side="right") - 1, 0)   # the value held at a bin's start
    last = np.maximum(np.searchsorted(tn, edges[1:], side="left"), first + 1)
    lo = np.array([np.nanmin(vs[a:b]) if held[a:b].any() else np.nan for a, b in zip(first, last)])
    hi = np.array([np.nanmax(vs[a:b]) if held[a:b].any() else np.nan for a, b in zip(first, last)])
    ax.stairs(hi, edges * end, baseline=lo, fill=True, color=color, alpha=0.18, lw=0)
    ax.stairs(mean, edges * end, color=color, ls=ls, lw=1.1, label=label)
    return float(np.nanmax(hi)) if np.isfinite(hi).any() else 0.0


# ------------------------------------------------------------------ a dump's requests.csv


def _requests_figure(plt, src: str, x: str | None, ys: list | None):
    """One point per answered request (a row of requests.csv): --y against --x, by default the time
    to first token against the prompt's tokens, a panel per --y. A row with no number in a column
    drawn (a turn not run on an engine has no prompt; one without a first token no ttft) is left
    out, and each panel's title says how many were drawn and why the others were not."""
    import numpy as np
    head, rows = _read_csv(src)
    chosen = [("--x", x or REQUESTS_XY[0], x is not None)] + [("--y", y, True) for y in dict.fromkeys(ys or [])]
    if not ys:
        chosen.append(("--y", REQUESTS_XY[1], False))
    cols = ", ".join(head[:12]) + (", ..." if len(head) > 12 else "")
    for opt, name, given in chosen:
        if name not in head:
            if given:
                raise UsageError(f"{opt} {name}: not a column of {os.path.basename(src)} ({cols})")
            raise UsageError(f"{src}: no column {name}: not the requests.csv of serq run --dump "
                             f"(its columns: {cols})")
    if not rows:
        raise UsageError(f"{src}: no request in it (none was answered after the warm-up): nothing to draw")
    x, ys = chosen[0][1], [name for _, name, _ in chosen[1:]]
    col = {c: i for i, c in enumerate(head)}
    for n, r in rows:
        if len(r) != len(head):
            raise UsageError(f"{src}:{n}: {len(r)} field(s) where the header has {len(head)}")

    def cells(name):
        """A column as numbers, an empty cell NaN (a row without it: left out)."""
        i = col[name]
        return np.asarray([math.nan if r[i].strip() == "" else _cell(src, n, name, r[i]) for n, r in rows],
                          dtype=float)

    xs = cells(x)
    yvs = {y: cells(y) for y in ys}   # every cell read before a figure is made
    meta = _dump_meta(os.path.dirname(os.path.abspath(src)))
    ncol = min(3, len(ys))
    nrow = -(-len(ys) // ncol)
    fig = plt.figure(figsize=(max(7.0, 4.8 * ncol + 0.4), 4.0 * nrow + 1.0))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    drawn_any, said = False, []
    for k, y in enumerate(ys):
        ax = axes[k // ncol][k % ncol]
        yv = yvs[y]
        have = ~np.isnan(xs) & ~np.isnan(yv)
        px, py = xs[have], yv[have]
        n = len(px)
        ax.scatter(px, py, s=7 if n <= 2000 else 4, color="C0", alpha=0.6 if n <= 2000 else 0.3, linewidths=0,
                   rasterized=n > MAX_POINTS)
        for axis, vals in ((ax.xaxis, px), (ax.yaxis, py)):
            if _log_worthy(list(vals)):
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
                _plain_log(axis)
        ax.set_xlabel(_request_label(x))
        ax.set_ylabel(_request_label(y))
        title = f"{_request_words(y)} against {_request_words(x)}"
        left = len(rows) - n
        drawn = f"{n:,} request{'s' if n != 1 else ''} drawn"
        lines = [drawn]
        if left:
            why = []
            for name in dict.fromkeys((x, y)):
                miss = int(np.count_nonzero(np.isnan(xs if name == x else yv)))
                if miss:
                    reason = REQUESTS.get(name, (None, None, None))[2]
                    why.append(f"{miss:,} without {_request_words(name)}" + (f" ({reason})" if reason else ""))
            drawn += f" of {len(rows):,}; left out: " + ", ".join(why)
            lines = [drawn.split("; ")[0] + ";", *textwrap.wrap("left out: " + ", ".join(why), 62)]
        ax.set_title("\n".join([title, *lines]))
        if not n:
            ax.text(0.5, 0.5, "no row has both numbers", transform=ax.transAxes, ha="center", color="0.4")
        drawn_any = drawn_any or n > 0
        said.append(title.split(" against ")[0] + ": " + drawn)
    if not drawn_any:
        plt.close(fig)
        raise UsageError(f"{src}: nothing to draw: " + "; ".join(said)
                         + "; draw other columns, such as --x start --y response")
    for k in range(len(ys), nrow * ncol):
        axes[k // ncol][k % ncol].set_visible(False)
    head_line = f"{os.path.basename(src)}: each answered request"
    if meta:
        prog = os.path.basename(meta.get("program") or os.path.dirname(os.path.abspath(src)))
        head_line = (f"{prog}: each answered request, seed {meta['seed']}, "
                     f"warm-up {_num(meta['warmup'] or 0)} s, end {_num(meta['end'] or 0)} s")
    fig.suptitle(head_line, fontsize=11)
    _footnote(fig, "A point is a row of requests.csv: a turn answered after the warm-up (serq run --dump).")
    return fig


def _request_words(name: str) -> str:
    return REQUESTS.get(name, (name.replace("_", " "), None, None))[0]


def _request_label(name: str) -> str:
    """An axis: the column in words and its unit, `time to first token (s)`, `prompt tokens computed (tokens)`."""
    words, unit, _ = REQUESTS.get(name, (name.replace("_", " "), "the value (no unit known)", None))
    return f"{words} ({unit})"


def _dump_meta(directory: str) -> dict | None:
    """The dump.json beside a requests.csv, when there is one; None otherwise (a table moved out of
    its dump is drawn all the same). One that is not a dump's is refused, naming what is wrong."""
    path = os.path.join(directory, "dump.json")
    if not os.path.isfile(path):
        return None
    return _read_dump_meta(path, need_end=False)


# ------------------------------------------------------------------ a sweep


def _read_sweep(src: str) -> dict:
    """A sweep directory's sweep.json, each field the figure reads checked (serq/exp/sweep.py
    writes it)."""
    path = os.path.join(src, "sweep.json")
    meta = _read_json(path, "a sweep's sweep.json")
    grid = meta.get("grid") if isinstance(meta, dict) else None
    if not isinstance(grid, dict) or not grid:
        raise UsageError(f"{src}/sweep.json: not a sweep's sweep.json (no grid)")
    f = _Fields(path)
    out = {"grid": {}, "program": f.text(meta.get("program"), "program")}
    for name, vals in grid.items():
        if not isinstance(vals, list) or not vals:
            raise f.bad(f"grid.{name}", vals, "not a list of the values swept")
        # a value is a number, inf written "Infinity" (strict JSON has none)
        out["grid"][name] = [f.num(v, f"grid.{name}[{i}]", none=False, axis=True, infinite=True)
                             for i, v in enumerate(vals)]
    seeds = meta.get("seeds")
    if seeds is not None and not isinstance(seeds, list):
        raise f.bad("seeds", seeds, "not a list of seeds")
    out["seeds"] = [f.num(v, f"seeds[{i}]", none=False, whole=True) for i, v in enumerate(seeds or [])]
    settings = f.obj(meta.get("settings"), "settings")
    out["settings"] = {k: f.num(settings.get(k), f"settings.{k}") for k in ("horizon", "warmup")}
    for k in ("runs", "failed"):
        out[k] = f.num(meta.get(k), k, low=0, whole=True)
    out["inputs"] = {k: f.num(v, f"inputs.{k}", infinite=True) for k, v in f.obj(meta.get("inputs"), "inputs").items()}
    return out


def _read_summary(src: str, names: list[str]) -> list[dict]:
    """summary.csv's rows, by position as sweep.json's grid places the inputs (`point`, the
    inputs, `stat`, `n`, `mean`, `ci95`, `lo`, `hi`), each checked: {"at": {input: value}, "stat",
    "mean", "lo", "hi"}, a number not finite (a statistic with no value) None."""
    path = os.path.join(src, "summary.csv")
    head, rows = _read_csv(path, by_name=False)
    # by position: an input may share a statistic's column name (mg1.sq's `mean`), which a lookup
    # by name would read in the statistic's stead
    layout = ["point"] + names + ["stat", "n", "mean", "ci95", "lo", "hi"]
    if head[:len(layout)] != layout:
        raise UsageError(f"{src}/summary.csv: its columns are not {', '.join(layout)} "
                         "(as sweep.json's grid has the inputs)")
    k = len(names) + 1
    out = []
    for n, r in rows:
        if len(r) != len(head):
            raise UsageError(f"{path}:{n}: {len(r)} field(s) where the header has {len(head)}")

        def num(i, empty):
            t = r[i].strip()
            if t == "" and empty:
                return None
            return _cell(path, n, head[i], t, finite=False)
        at = {name: num(1 + i, False) for i, name in enumerate(names)}
        mean, lo, hi = (num(k + j, True) for j in (2, 4, 5))
        out.append({"at": at, "stat": r[k], "mean": _finite(mean), "lo": _finite(lo), "hi": _finite(hi)})
    return out


def _finite(v):
    return v if v is not None and math.isfinite(v) else None


def _no_stat(src: str, meta: dict) -> str:
    """Why a sweep's summary has no statistic: its runs failed, or it is empty."""
    if meta["failed"] and meta["failed"] == meta["runs"]:
        return (f"every run of the sweep failed ({meta['failed']} of {meta['runs']}), so summary.csv has no "
                "statistic; runs.csv's error column says why each failed")
    return "summary.csv has no statistic"


def _sweep_figure(plt, src: str, x: str | None, ys: list | None, by: str | None):
    meta = _read_sweep(src)
    grid = meta["grid"]
    names = list(grid)
    x = x or names[0]
    if x not in grid:
        raise UsageError(f"--x {x}: not a grid input of this sweep ({', '.join(names)})")
    if by is not None and by not in grid:
        raise UsageError(f"--by {by}: not a grid input of this sweep ({', '.join(names)})")
    if by == x:
        raise UsageError(f"--by {by} is the x axis already")
    # one line per value of the other grid inputs (--by's first): never averaged over one of them
    rest = ([by] if by else []) + [n for n in names if n not in (x, by)]
    rows = _read_summary(src, names)
    stats = list(dict.fromkeys(r["stat"] for r in rows))
    if ys:
        for y in ys:
            if not stats:
                raise UsageError(f"--y {y}: not a statistic of {src}: {_no_stat(src, meta)}")
            if y not in stats:
                near = [s for s in stats if y.split(".")[-1] in s and y.split(".")[0] in s][:6] or \
                    [s for s in stats if s.startswith("client.")][:6] or stats[:6]
                raise UsageError(f"--y {y}: not a statistic of this sweep's summary.csv (such as {', '.join(near)})")
    else:  # the defaults a run has (an M/M/1 has no token, so no ttft nor tpot: no empty panels)
        measured = list(dict.fromkeys(r["stat"] for r in rows if r["mean"] is not None))
        ys = [y for y in SWEEP_Y if y in measured]
        if ys == ["client.response.mean"] and "client.response.p99" in measured:
            ys.append("client.response.p99")  # a run without tokens: its response's mean and tail
        ys = ys or measured[:1] or stats[:1]
    if not ys:
        raise UsageError(f"{src}: nothing to plot: {_no_stat(src, meta)}")
    data = {}
    for r in rows:
        stat = r["stat"]
        if stat not in ys or r["mean"] is None:
            continue
        key = tuple(r["at"][n] for n in rest)
        data.setdefault(stat, {}).setdefault(key, []).append((r["at"][x], r["mean"], r["lo"], r["hi"]))
    units = Units(meta["program"], meta["inputs"])
    ncol = min(3, len(ys))
    nrow = -(-len(ys) // ncol)
    fig = plt.figure(figsize=(max(9.6, 4.6 * ncol + 0.4), 3.7 * nrow + 1.0))  # room for the title
    axes = fig.subplots(nrow, ncol, squeeze=False)
    xs_all = [v for v in grid[x] if math.isfinite(v)]   # inf is no place on an axis
    handles = {}
    clipped = []
    for i, y in enumerate(ys):
        ax = axes[i // ncol][i % ncol]
        title, unit = _describe(y, units)
        series = data.get(y, {})
        ordered = sorted(series.items(), key=lambda kv: tuple(_sortable(k) for k in kv[0]))
        means = [p[1] for _, pts in ordered for p in pts]
        # latencies against load span decades near saturation: a log axis when the means are
        # positive and span more than 20 times; a band's lower end below it (a t interval over
        # few seeds can reach below zero) is cut at the axis, and said so
        log = _log_worthy(means, 20)
        floor = min(means) / 3 if log else 0.0 if means and min(means) >= 0 else None
        for j, (key, pts) in enumerate(ordered):
            pts.sort(key=lambda pt: pt[0])  # by x alone: two rows of one point (a file edited) compare no further
            px = [p[0] for p in pts]
            color = f"C{j % 10}"
            label = ", ".join(f"{n} = {v:g}" if isinstance(v, float) else f"{n} = {v}" for n, v in zip(rest, key)) \
                or title
            (h,) = ax.plot(px, [p[1] for p in pts], "o-", color=color, ms=4, lw=1.5, label=label)
            band = [(p[0], p[2], p[3]) for p in pts if p[2] is not None and p[3] is not None]
            if band:
                lo = [b[1] for b in band]
                if floor is not None and any(v < floor for v in lo):
                    lo = [max(v, floor) for v in lo]
                    clipped.append(y)
                ax.fill_between([b[0] for b in band], lo, [b[2] for b in band], color=color, alpha=0.18, lw=0)
            handles.setdefault(label, h)
        if log:
            ax.set_yscale("log")
            ax.set_ylim(bottom=floor)
            _plain_log(ax.yaxis)
        numeric = all(isinstance(v, float) for v in xs_all)
        if numeric and _log_worthy(xs_all) and len(xs_all) > 2:
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
        if numeric and len(xs_all) <= 8:  # a few grid values: the ticks are the points swept
            ax.set_xticks(xs_all, [f"{v:g}" for v in xs_all])
            ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel(f"{x} (input)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        if not series:
            ax.text(0.5, 0.5, "no run has this statistic", transform=ax.transAxes, ha="center", color="0.4")
    for k in range(len(ys), nrow * ncol):
        axes[k // ncol][k % ncol].set_visible(False)
    if handles and rest:  # one line a panel needs no legend: the panel's title names it
        fig.legend(list(handles.values()), list(handles), loc="outside right center",
                   ncol=1, frameon=False, title=", ".join(rest) or None)
    seeds = meta["seeds"]
    prog = os.path.basename(meta["program"] or src)
    settings = meta["settings"]
    bits = [f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} a point"]
    if settings.get("horizon") is not None:
        bits.append(f"horizon {_num(settings['horizon'])} s")
    if settings.get("warmup"):
        bits.append(f"warm-up {_num(settings['warmup'])} s")
    if meta["failed"]:
        bits.append(f"{meta['failed']} of {meta['runs']} runs failed")
    fixed_in = meta["inputs"]
    if fixed_in:
        bits.append(", ".join(f"{k} = {v:g}" if isinstance(v, (int, float)) else f"{k} = {v}"
                              for k, v in fixed_in.items()))
    fig.suptitle(f"{prog}: sweep over {x} ({'; '.join(bits)})\n"
                 "lines: mean across seeds; bands: its 95% interval across seeds (Student t)", fontsize=11)
    if clipped:
        clipped = [f"“{_describe(y, units)[0]}”" for y in clipped]
        _footnote(fig, f"The bands of {' and '.join(dict.fromkeys(clipped))} are cut at zero, or on a log axis at a "
                  "third of the least mean: an interval over few seeds can reach below zero, which the statistic cannot.")
    return fig


def _sortable(v):
    return (0, v, "") if isinstance(v, float) else (1, 0.0, str(v))
