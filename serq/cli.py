"""The command line: argument parsing only; everything else is the API (architecture)."""
from __future__ import annotations

import signal
import sys

# Ctrl-C while the command starts (its imports are most of a short command's start-up) is held until
# they end, then acted on (_held_interrupt): raised inside an import it would leave a traceback, or
# come out as another error (pydantic_core's import of datetime turns it into a panic). Only where it
# would raise (Python's own handler, in the main thread); ignored or handled elsewise, it is left be
_held: list = []


def _hold(signum, frame):
    _held.append(signum)


_holding = signal.getsignal(signal.SIGINT) is signal.default_int_handler
if _holding:
    try:
        signal.signal(signal.SIGINT, _hold)
    except ValueError:  # not the main thread
        _holding = False

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402

# The IR's models are serQ's own: pydantic plugins installed beside it are not loaded (finding them
# scans every installed package's entry points at the first validation, ~10 ms a command) unless
# the user's environment says which (PYDANTIC_DISABLE_PLUGINS, docs/reference/cli.md).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
_PLUGINS_OFF = ("__all__", "1", "true")  # the values with which pydantic loads none


def _plugin_loader_stand_in():
    """With plugins off, pydantic's plugin loader is imported at the first validation only to say
    there are none, yet importing it imports importlib.metadata (with email and socket: ~25 ms of a
    check). Its place in sys.modules is taken by a module that says the same, while the variable
    says off; anything else asked of it comes from the real loader, imported then."""
    name = "pydantic.plugin._loader"
    if name in sys.modules or os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in _PLUGINS_OFF:
        return
    stand_in = type(sys)(name)

    def real():
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        return importlib.import_module(name)

    def get_plugins():
        if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in _PLUGINS_OFF:
            return ()
        return real().get_plugins()

    def other(attr):
        if attr.startswith("__"):  # the import system asking whether this is a package
            raise AttributeError(attr)
        return getattr(real(), attr)

    stand_in.get_plugins = get_plugins
    stand_in.__getattr__ = other
    sys.modules[name] = stand_in


_plugin_loader_stand_in()

# Importing builds long-lived objects only (modules, classes, the IR's models): the cyclic collector,
# run ~80 times meanwhile, finds nothing to free (~20 ms of a check's CPU time), and frozen after,
# they are not walked again by a full collection or the one at exit (~20 ms more).
_collecting = gc.isenabled()
gc.disable()
try:
    from serq import api
    from serq._write import OutputError, WholeWriter, write_text
    from serq.diagnostics import SerqError
    from serq.ir import model as I
    from serq.lang.lower.constants import fmt, whole
    from serq.lang.lower.inputs import UsageError
    from serq.staged import forget_signals, signalled
finally:
    gc.freeze()
    if _collecting:
        gc.enable()


def _held_interrupt():
    """The start-up's Ctrl-C, held while the imports ran: as the command, said and the process ended
    (130, as _guarded ends it once it runs); imported by a program, its KeyboardInterrupt, now."""
    if not _holding:
        return
    if signal.getsignal(signal.SIGINT) is _hold:  # (not where an import put in a handler of its own)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not _held:
        return
    if __name__ == "__main__" or os.path.basename(sys.argv[0] or "") == "serq":
        try:
            sys.stderr.write("serq: interrupted\n")
            sys.stderr.flush()
        finally:
            os._exit(130)
    raise KeyboardInterrupt


_held_interrupt()


def version() -> str:
    """serQ's version: the installed package's, else pyproject.toml's beside this source (a checkout
    run without installing), else "unknown"."""
    from importlib.metadata import PackageNotFoundError, version as installed
    try:
        return installed("serq")
    except PackageNotFoundError:
        pass
    import tomllib
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml"),
                  "rb") as fh:
            return str(tomllib.load(fh)["project"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"


class _VersionAsked(Exception):
    """`serq --version`: answered by main, whatever else is on the line."""


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        raise _VersionAsked


class _Once(argparse._StoreAction):
    """An option that takes one value, given once: argparse keeps the last of several silently
    (`--find a=0:1 --find b=1:2` searched b only, issue 50, item 10); here the second is a usage error.
    Every option of every command that stores one value is one (_Parser registers it as `store`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = parser.__dict__.setdefault("_given", {})
        if self.dest in given:
            first = given[self.dest]
            parser.error(f"{option_string} is given twice ({first[0]} {first[1]}, then {option_string} {values}): "
                         "it takes one value")
        given[self.dest] = (option_string, values)
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.register("action", "store", _Once)
        self.register("action", None, _Once)

    def error(self, message):  # a usage error: the usage, then main's message and exit 2
        _say(self.format_usage().rstrip())
        raise UsageError(message)


def _number(text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a number") from None
    if math.isnan(v):
        raise UsageError(f"{what}: NaN is not a value")
    return v


def seed_value(text, what: str = "--seed") -> int:
    """A seed as written: an integer literal exactly (any size), else a number that is a whole
    number below 2^53, where a float is exact (1e30 is 1000000000000000019884624838656, not the
    seed the user wrote, and two seeds written alike would be one). `what`: where it was written
    (the flag, or an instance file's field), for the messages."""
    t = str(text).strip()
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    if limit and len(t) > limit and t.lstrip("+-").isdigit():
        # of any size (cli.md): Python's limit on converting between digits and an integer (4300
        # digits) raised for this process as far as the seed needs, so that it is read and printed
        sys.set_int_max_str_digits(len(t))
    try:
        v = int(t, 10)
    except ValueError:
        sv = _number(t, what)
        if not whole(sv):
            raise UsageError(f"{what} is a nonnegative integer") from None
        if sv >= 2 ** 53:
            raise UsageError(f"{what} {t} is beyond 2^53 as a number: write it as an integer (digits)") from None
        v = int(sv)
    if v < 0:
        raise UsageError(f"{what} is a nonnegative integer")
    return v


def _binding(text: str) -> tuple[str, float]:
    if "=" not in text:
        raise UsageError(f"an input is NAME=VALUE, not {text!r}")
    name, val = text.split("=", 1)
    name = name.strip()
    if not name:
        raise UsageError(f"an input is NAME=VALUE, not {text!r}")
    return name, _number(val.strip(), f"input {name}")


# the experiments' commands (serq/exp, docs/tutorial.md): name -> (help, whether it takes inputs). A
# module adds its command's options and runs it; it is imported when its command runs only, so
# that the others (`serq check`, docs/overview.md *Speed*) do not pay for importing it
EXPERIMENTS = {
    "sweep": ("run the program over a grid of inputs times K seeds, or search one input for the largest "
              "value that meets objectives (--find); tables of the runs", True),
    "plot": ("a report, a --dump directory or a sweep as a PNG or SVG figure", False),
    "calibrate": ("fit the inputs an engine's execute reads to measured iteration times", True),
    "import": ("convert a public trace (Azure, BurstGPT, Mooncake, ShareGPT) into a serQ trace with arrival "
               "times", False),
}
# a command whose module is not its name (`import` is Python's keyword)
MODULES = {"import": "trace_import"}


def _command(argv: list[str]) -> str | None:
    """The command named on the line: the first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def _parser(cmd: str | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog="serq", description="serQ: a serving deployment as a program")
    p.add_argument("--version", action=_Version, help="print serQ's version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    program = "the program (.sq), or the IR `serq ir` wrote (.json)"

    def sizing(sp):  # a model on GPUs fills the roofline's inputs (serq/catalogue, docs/sizing.md)
        sp.add_argument("--model", metavar="NAME|config.json", help="size a model: a catalogue name (e.g. "
                        "llama-3.1-8b) or a Hugging Face config.json; fills the inputs of examples/sizing/lib/roofline.sq")
        sp.add_argument("--gpu", metavar="NAME|FILE.json", help="on this GPU: a catalogue name (e.g. h100) or a file "
                        "of its figures")
        sp.add_argument("--tp", metavar="N", help="over N GPUs, tensor parallel (default 1)")

    def inputs(sp):
        sp.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="supply an input")
        sp.add_argument("--instance", metavar="FILE.json", help="an instance file: inputs and settings")
        sizing(sp)
        # `-- NAME=VALUE ...` is split off before argparse (main), which would otherwise bind a
        # positional list right after FILE and refuse the `--` that follows options
        sp.usage = sp.format_usage().removeprefix("usage: ").rstrip() + " [-- NAME=VALUE ...]"

    def settings(sp):  # the execution settings (cli.md, *Execution settings*), in the IR's settings
        sp.add_argument("--horizon", metavar="T", help="the simulated time the run ends at (a positive time; "
                        "an open workload needs it or --arrivals)")
        sp.add_argument("--warmup", metavar="W",
                        help="the simulated time before which nothing is measured (default 0; before --horizon)")
        sp.add_argument("--seed", metavar="S", help="the random seed, a nonnegative integer (default 1)")
        sp.add_argument("--arrivals", metavar="N",
                        help="run exactly N open-workload arrivals and drain their sessions (a positive integer)")

    r = sub.add_parser("run", help="simulate the program and print the report")
    r.add_argument("file", help=program)
    settings(r)
    r.add_argument("--json", action="store_true", help="the report as one JSON object")
    r.add_argument("--dump", metavar="DIR", help="write the samples and series behind the report, and a row per "
                   "answered request (requests.csv) (serq plot DIR)")
    r.add_argument("--slo", action="append", default=[], metavar="METRIC<=X",
                   help="an objective every answered request is held to, METRIC one of ttft, tpot, itl, response, X "
                   "in seconds (repeatable): the report adds the goodput, the requests per second that met them all")
    r.add_argument("--percentiles", metavar="P,P,...", help="the percentiles of each statistic, percents from 0 to "
                   "100 (default 50,90,99): p95, p99.9 in the report")
    r.add_argument("--units", choices=("s", "ms"), default="s", help="the text report's client times in seconds "
                   "(default, the program's unit) or milliseconds, as vLLM's client prints them; the JSON stays in seconds")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--workload", metavar="W.json", help="replace the arrivals and draws with a workload's "
                   "(one `serq verify` wrote)")
    r.add_argument("--trace", metavar="TRACE.csv", help="replay this trace in place of the one the program names "
                   "(its `trace \"file.csv\";`): a serQ trace, or FORMAT:INPUT, a public trace (azure, burstgpt, "
                   "mooncake, sharegpt) converted as serq import does")
    inputs(r)
    t = sub.add_parser("target", help="the engine's settings as a vLLM configuration (JSON)")
    t.add_argument("file", help=program)
    inputs(t)
    c = sub.add_parser("check", help="parse and link only; exit 1 with diagnostics")
    c.add_argument("file", help=program)
    inputs(c)
    n = sub.add_parser("inputs", help="the program's inputs (args.number) and their defaults")
    n.add_argument("file", help="the program (.sq)")
    n.add_argument("--json", action="store_true",
                   help='the inputs as one JSON object, {"inputs": {NAME: DEFAULT}}: an instance file')
    sizing(n)
    cl = sub.add_parser("claims", help="the program's IR and claims as Lean (the Lean fragment)")
    cl.add_argument("file", help=program)
    cl.add_argument("-o", "--output", metavar="OUT.lean", help="write the Lean file here (default: stdout)")
    inputs(cl)
    v = sub.add_parser("verify", help="each claim over every workload within a bound (z3)")
    v.add_argument("file", help=program)
    v.add_argument("--sessions", default="3", metavar="N", help="at most N sessions (default 3)")
    v.add_argument("--values", default="16", metavar="M", help="drawn values 0..M (default 16)")
    v.add_argument("--timeout", default="60", metavar="S", help="give a claim up after S seconds of CPU time (default 60, each claim its own)")
    v.add_argument("--json", action="store_true", help="the verdicts as one JSON object")
    v.add_argument("--out", metavar="DIR", help="write the workloads here (default: beside the program)")
    inputs(v)
    d = sub.add_parser("draw", help="the deployment and a session's path as an SVG picture")
    d.add_argument("file", help=program)
    d.add_argument("-o", "--output", metavar="OUT.svg",
                   help="write the SVG here, '-' for stdout (default: FILE's name with .svg, beside it)")
    inputs(d)
    ir = sub.add_parser("ir", help="print the resolved kernel IR as JSON")
    ir.add_argument("file", nargs="?", help=program + " (none with --schema)")
    settings(ir)
    ir.add_argument("--schema", action="store_true", help="print the IR's JSON Schema instead")
    inputs(ir)
    p.commands = {"run": r, "target": t, "check": c, "inputs": n, "ir": ir, "verify": v, "claims": cl, "draw": d}
    for name, (text, takes_inputs) in EXPERIMENTS.items():
        sp = sub.add_parser(name, help=text)
        if name == cmd:  # its options come from its module, imported for its own command only
            importlib.import_module(f"serq.exp.{MODULES.get(name, name)}").arguments(sp)
            if takes_inputs:
                inputs(sp)
        p.commands[name] = sp
    return p


def settings_from(args, inst: dict) -> tuple[dict, I.Settings]:
    supplied: dict[str, float] = {}
    for k, v in (inst.get("inputs") or {}).items():
        supplied[k] = float(v)
    for b in getattr(args, "rest", []):
        if b.startswith("-"):
            raise UsageError(f"{b!r} after --: options go before --, inputs NAME=VALUE after it")
    for b in list(getattr(args, "set", [])) + list(getattr(args, "rest", [])):
        n, v = _binding(b)
        supplied[n] = v

    _size(args, supplied)
    src = {}  # where each setting came from, for the messages: the flag, or the instance file's field

    def flag(key):  # a flag wins over the instance file
        v = getattr(args, key, None)
        if v is not None:
            src[key] = f"--{key}"
            return v
        v = inst.get(key)
        if v is not None:
            src[key] = f"the instance file {getattr(args, 'instance', None)}: `{key}`"
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):  # JSON: a number (or its text)
                raise UsageError(f"{src[key]} is a number, not {json.dumps(v)[:40]}")
        return v

    seed = flag("seed")
    s = {}
    if seed is not None:
        s["seed"] = seed_value(seed, src["seed"])
    hz = flag("horizon")
    if hz is not None:
        hv = _number(str(hz), src["horizon"])
        if not hv > 0:
            raise UsageError(f"{src['horizon']} is a positive time")
        s["horizon"] = hv
    wu = flag("warmup")
    if wu is not None:
        wv = _number(str(wu), src["warmup"])
        if wv < 0 or math.isinf(wv):
            raise UsageError(f"{src['warmup']} is a nonnegative, finite time")
        s["warmup"] = wv
    if "horizon" in s and s.get("warmup", 0) >= s["horizon"]:
        raise UsageError(f"{src.get('warmup', '--warmup')} {s['warmup']:g} is not before {src['horizon']} "
                         f"{s['horizon']:g}: nothing would be measured")
    ar = flag("arrivals")
    if ar is not None:
        av = _number(str(ar), src["arrivals"])
        if not whole(av, 1):
            raise UsageError(f"{src['arrivals']} is a positive integer")
        s["arrivals"] = int(av)
    return supplied, I.Settings(**s)


def _run(args, prog, settings, supplied: dict | None = None) -> int:
    from serq.interp.dump import Staged
    from serq.interp.report import finite, text
    workload = None
    if args.workload is not None:
        from serq.verify.output import read_workload
        workload = read_workload(args.workload)
    slo, stats = _slo(args.slo)
    percentiles = _percentiles(args.percentiles, stats)
    staged = progress = None
    try:
        if args.dump is not None:  # a bad destination: refused before the run; a signal from here removes it
            staged = Staged(args.dump)
        # the bar on a terminal; on stderr, whatever it is, a note if the run goes too slowly to finish
        progress = _Watch(_Progress(settings) if not args.quiet and sys.stderr.isatty() else None, supplied)
        try:
            rep = api.run(prog, settings, progress, workload, record=staged is not None, slo=slo,
                          percentiles=percentiles)
        except OSError as exc:
            # a run touches the disk only to keep its samples past 2^20 a statistic
            # (docs/reference/report.md): a full or unwritable temporary directory
            import tempfile
            raise _Failure(f"the run could not keep its samples in a temporary file in {tempfile.gettempdir()}: "
                           f"{exc.strerror or exc}") from None
        if progress is not None:
            progress.close()
            progress = None
        sim = rep.pop("_sim")
        if staged is not None:
            try:
                staged.write(sim, rep)
            except OSError as exc:
                raise _Failure(f"cannot write the dump {args.dump}: {exc.strerror or exc}") from None
    finally:
        if progress is not None:
            progress.close()
        if staged is not None:
            staged.discard()
    summary = sizing_summary(args, supplied or {})
    if summary is not None:
        rep["sizing"] = summary
    if stats:
        rep["objectives"] = objectives(rep, stats)
    # what ran, so that a report read later says it: every input as resolved, and the program's files
    # an infinite input as serq inputs --json writes it ("Infinity"): an instance file takes it back
    rep["inputs"] = {k: v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
                     for k, v in prog.settings.inputs.items()}
    rep["program"] = program_id(prog)
    if args.json:
        _out(json.dumps(finite(rep), indent=1, default=_jsonable, allow_nan=False))
    else:
        head = "" if summary is None else sizing_text(summary) + "\n"
        if workload is not None:
            from serq.verify.output import replay_head
            head += replay_head(prog, workload, args.workload) + "\n"
        ms = getattr(args, "units", "s") == "ms"
        body = text(rep, args.file, ms)
        if stats:
            body += "\n" + objectives_text(rep["objectives"], ms)
        _out(head + body)
    return 0


def objectives_text(objs: list, ms: bool = False) -> str:
    """The statistic objectives, a line: each value against its bound, held or not (a client time in
    milliseconds with `ms`, serq run --units ms)."""
    def shown(o):
        k = 1000.0 if ms and o["metric"].startswith("client.") and not o["metric"].endswith(".count") else 1.0
        unit = "ms" if k != 1.0 else ""
        v = "-" if o["value"] is None else format(o["value"] * k, ".4g") + unit
        return f"{o['metric']} {v} {o['op']} {fmt(o['bound'] * k)}{unit} {'held' if o['held'] else 'not held'}"
    parts = [shown(o) for o in objs]
    n = sum(o["held"] for o in objs)
    return f"objectives: {n} of {len(objs)} held: " + "; ".join(parts)


def sizing_text(s: dict) -> str:
    """The sizing, as the text report and `serq inputs` print it."""
    gb = 1e9
    act = (f", {s['active_parameters'] / 1e9:.2f}B active" if s["active_parameters"] != s["parameters"] else "")
    return "\n".join([
        f"sizing: {s['model']} ({s['parameters'] / 1e9:.2f}B parameters{act}) on {s['tp']} x {s['gpu']}",
        f"  weights {s['weights_per_gpu_bytes'] / gb:.1f} GB per GPU; KV {s['kv_blocks']} blocks of {s['block_size']} "
        f"tokens ({s['kv_tokens']} tokens, {s['kv_bytes_per_token']:.0f} bytes a token per GPU)",
        f"  step: a 1-request decode at {s['decode_context']} tokens {s['decode_step_s'] * 1e3:.2f} ms (its floor, "
        f"the weights over the bandwidth, {s['floor_s'] * 1e3:.2f} ms); a prefill of {s['prefill_tokens']} tokens "
        f"{s['prefill_step_s'] * 1e3:.2f} ms"] + [f"  note: {n}" for n in s.get("notes", ())])


# `--slo`, as `serq run` and `serq sweep --find` (serq/exp/find.py) both read it: a metric (no space
# and no comparison in it), `<=` or `>=`, and a number. Each command says which comparisons and
# metrics it takes, and words its own usage in the message of a text that is not one.
_SLO = re.compile(r"\s*([^<>=!\s]+)\s*(<=|>=)\s*(\S+)\s*")
SLO_METRICS = ("ttft", "tpot", "itl", "response")


# a time's unit in an objective (`ttft<=500ms`): seconds by default, as the reports are
SLO_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_SLO_UNIT = re.compile(r"(.*[\d.])(us|µs|ms|s)")
# a bare number above these, for the metric, is more likely milliseconds than seconds: said, not changed
SLO_PLAUSIBLE = {"ttft": 60.0, "tpot": 5.0, "itl": 5.0, "response": 3600.0}


def slo_metric(metric: str) -> str:
    """A statistic's shorthand as both commands take it: `ttft.p99` is the client's, `client.ttft.p99`."""
    head = metric.partition(".")[0]
    return f"client.{metric}" if head in SLO_METRICS and "." in metric else metric


def parse_slo(text: str, ops: tuple, form: str) -> tuple[str, str, float]:
    """One `--slo` objective as (metric, comparison, bound), the one grammar of `serq run` and `serq sweep`:
    METRIC, a comparison, a number with an optional unit of time (`us`, `ms`, `s`; seconds without one).
    `ops`: the comparisons the command takes; `form`: its usage, said when the text is not one (`--slo
    is FORM, not TEXT`). A bound that is not a number, or is NaN, is refused as every number on the
    command line is; a bare number implausible as seconds for a time metric is taken as seconds, and
    stderr says so."""
    m = _SLO.fullmatch(text)
    if m is None or m.group(2) not in ops:
        raise UsageError(f"--slo is {form}, not {text!r}")
    metric, value = slo_metric(m.group(1)), m.group(3)
    with_unit = _SLO_UNIT.fullmatch(value)   # a number, then its unit (`500ms`; not `inf`)
    unit = with_unit.group(2) if with_unit else None
    x = _number(with_unit.group(1) if with_unit else value, f"--slo {metric}")
    if unit:
        return metric, m.group(2), x * SLO_UNITS[unit]
    parts = metric.split(".")
    time_metric = parts[0] if parts[0] in SLO_METRICS else parts[1] if len(parts) == 3 and parts[0] == "client" else None
    if time_metric in SLO_PLAUSIBLE and SLO_PLAUSIBLE[time_metric] < x < math.inf:   # inf: no limit, said plainly
        _say(f"serq: note: --slo {m.group(1)}{m.group(2)}{value}: taken as {fmt(x)} seconds (write {value}ms for "
             "milliseconds)")
    return metric, m.group(2), x


def _percentiles(text: str | None, stats: list) -> tuple | None:
    """`serq run --percentiles 50,95,99.9`, and any a statistic objective names (`ttft.p95<=0.5`), in
    increasing order; None: the default."""
    from serq.exp.find import stat_percentile
    from serq.interp.stats import PERCENTILES
    out = []
    if text is not None:
        for part in text.split(","):
            v = _number(part.strip(), "--percentiles") if part.strip() else None
            if v is None or not 0 <= v <= 100:
                raise UsageError(f"--percentiles takes percents from 0 to 100, comma-separated (50,95,99.9), not "
                                 f"{text!r}")
            out.append(v)
        if len(out) > 12:
            raise UsageError(f"--percentiles takes at most 12, not {len(out)}")
    asked = [v for m, _, _ in stats if (v := stat_percentile(m)) is not None]
    if not out and not [v for v in asked if v not in PERCENTILES]:
        return None
    return tuple(sorted(set(out or PERCENTILES) | set(asked)))


def _slo(texts: list) -> tuple[dict, list]:
    """`serq run --slo`, in the grammar `serq sweep --find` takes too: a per-request metric,
    `METRIC<=X` (every answered request held to it: the goodput, report.md, *Throughput, ITL and
    goodput*), as {metric: the least X given for it}; and a statistic of the report, `ttft.p99<=500ms`,
    `client.response.mean<=2`, `throughput.requests_per_s>=10`, as [(metric, op, bound)], each read on
    the report and said held or not (report.md, *Objectives*)."""
    from serq.exp.find import FIXED, possible, _unknown
    out: dict = {}
    stats: list = []
    for text in texts:
        metric, op, x = parse_slo(text, ("<=", ">="), "METRIC<=X or METRIC>=X")   # sweep --find's words too
        if metric in SLO_METRICS:
            if op != "<=":
                raise UsageError(f"--slo {metric}: a request's {metric} is held below a limit: {metric}<=X")
            if x < 0:
                raise UsageError(f"--slo {metric}: a limit is a time >= 0, not {fmt(x)}")
            out[metric] = min(x, out.get(metric, x))
        elif possible(metric):
            stats.append((metric, op, x))
        else:
            raise _unknown(metric, FIXED)
    return out, stats


def _with_trace(prog, path: str):
    """`serq run --trace FILE`: the program's trace replaced, read as the linker reads one."""
    from serq.interp.trace import load_trace
    wl = prog.workload
    if wl.trace is None:
        raise UsageError(f"--trace replaces the program's trace, and {prog.files[0]} names none (`trace \"file.csv\";`)")
    from serq.exp.trace_import import converted
    path = converted(path) or path  # FORMAT:INPUT, a public trace: serq import's, at once
    if not os.path.isfile(path):
        raise UsageError(f"--trace {path}: no such file")
    full = os.path.abspath(path)
    load_trace(full, wl.arrive.k == "trace")  # a malformed one: its diagnostic (T001)
    return prog.model_copy(update={"workload": wl.model_copy(update={"trace": wl.trace.model_copy(update={"file": full})})})


def program_id(prog) -> dict:
    """The program's files (its source and the libraries it uses) and one SHA-256 over their bytes, in
    that order: two reports with the same `sha256` ran the same text (their inputs beside it)."""
    import hashlib
    h = hashlib.sha256()
    files = list(prog.files)
    if prog.workload is not None and prog.workload.trace is not None:
        files.append(prog.workload.trace.file)  # the data it replays: another trace, another run
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read()
        except OSError:
            data = b""
        h.update(hashlib.sha256(data).digest())
    def shown(f):   # as the user named it: within the working directory relative, else as it is
        rel = os.path.relpath(f) if os.path.isabs(f) else f
        return f if rel.startswith("..") else rel
    return {"files": [shown(f) for f in files], "sha256": h.hexdigest()}


def objectives(rep: dict, stats: list) -> list:
    """Each statistic objective read on the report: its value (None where the run has none) and whether
    it held."""
    out = []
    for metric, op, bound in stats:
        v = rep
        for part in metric.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        value = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        held = value is not None and (value <= bound if op == "<=" else value >= bound)
        out.append({"metric": metric, "op": op, "bound": bound, "value": value, "held": held})
    return out


def _count(text: str, what: str) -> int:
    v = _number(text, what)
    if not whole(v, 1):
        raise UsageError(f"{what} is a positive integer, not {text}")
    return int(v)


def _bound(args) -> tuple:
    """verify's bound and timeout, refused before the program is read."""
    timeout = _number(args.timeout, "--timeout")
    if not 0 < timeout < math.inf:
        raise UsageError(f"--timeout is a positive number of seconds, not {args.timeout}")
    return _count(args.sessions, "--sessions"), _count(args.values, "--values"), timeout


def _verify_out(out: str | None) -> None:
    """`verify --out DIR`, looked at before any claim is decided (a search can take minutes): a path
    that is not a directory, or a place where no file can be made, is exit 1 at once, as when a
    workload cannot be written (cli.md). Nothing is made here: DIR and its parents are made when a
    workload is written."""
    if out is None:
        return
    if not out:
        raise _Failure("--out needs a directory name")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise _Failure(f"cannot write the workloads to {out}: it exists and is not a directory")
    anc = os.path.abspath(out)
    while not os.path.lexists(anc):
        anc = os.path.dirname(anc)
    if not os.path.isdir(anc):
        raise _Failure(f"cannot write the workloads to {out}: {anc} is not a directory")
    import tempfile
    try:  # whether a file can be made there (a read-only file system, /proc): one made and removed
        fd, probe = tempfile.mkstemp(dir=anc, prefix=".serq-verify-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _Failure(f"cannot write the workloads to {out}: {exc.strerror or exc}") from None


def _verify(args, prog) -> int:
    """Each claim's verdict within the bound; the workloads of its counterexamples and witnesses. A
    workload that cannot be written loses nothing of the search: every verdict is printed, the
    workload with it, then the error (exit 1)."""
    from serq.verify import Disagreement, verify
    from serq.verify.output import as_json, as_text, write_disagreement, write_workloads
    try:
        res = verify(prog, *_bound(args))
    except Disagreement as d:  # one semantics read two ways: serQ's bug, with what shows it
        try:
            path = write_disagreement(d, args.file, args.out)
        except (OSError, OutputError) as exc:
            path = f"(not written: {getattr(exc, 'strerror', None) or exc})"
        _say(f"serq: internal error: {d} (a bug in serQ); the workload: {path}")
        return 3
    run_args = [x for b in args.set + args.rest for x in ("--set", b)]
    if args.instance:
        run_args += ["--instance", args.instance]
    unwritten: dict = {}
    replay = write_workloads(res, args.file, args.out, run_args, unwritten)
    if args.json:
        _out(json.dumps(as_json(res, replay, unwritten), indent=1))
    else:
        _out(as_text(res, args.file, replay, unwritten))
    if unwritten:
        errors = list(dict.fromkeys(unwritten.values()))
        for e in errors[:-1]:
            _say(f"serq: error: {e}")
        raise _Failure(errors[-1])
    return 0


def _claims(args, prog) -> int:
    """The Lean file (stdout or -o); a program without claims still gets its IR, said on stderr."""
    out = api.claims_lean(prog)
    if args.output:
        write_text(args.output, out.text)  # whole or not at all; OutputError: exit 1
        # as draw, plot and calibrate say what they wrote
        _say(f"{args.file}: wrote {args.output}"
             + (f" (its IR and {out.claims} claim{'s' if out.claims != 1 else ''})" if out.claims else ""))
    else:
        _out(out.text.removesuffix("\n"))
    if out.claims == 0:
        _say(f"{args.file}: the program states no claim; the Lean file holds its IR only")
    return 0


def _size(args, supplied: dict) -> None:
    """--model, --gpu, --tp: the catalogue's numbers for the inputs the program declares and the user did
    not supply (serq/catalogue/sizing.py), added to `supplied`; what was sized kept as args.sizing."""
    args.sizing = None
    model, gpu, tp = (getattr(args, k, None) for k in ("model", "gpu", "tp"))
    if model is None and gpu is None and tp is None:
        return
    file = getattr(args, "file", None)
    if not file or file.endswith(".json"):
        raise UsageError("--model, --gpu and --tp size a program (.sq) whose inputs they fill, not "
                         + (f"an IR ({file})" if file else "nothing"))
    from serq.catalogue import CatalogueError
    from serq.catalogue.sizing import resolve
    declared = api.inputs(file)
    try:
        add, args.sizing = resolve(declared, supplied, model, gpu, tp)
    except CatalogueError as exc:
        raise UsageError(str(exc)) from None
    supplied.update(add)


def sizing_summary(args, supplied: dict) -> dict | None:
    """The model, GPU and numbers a sized run used (the report's `sizing`), with the program's own step
    times of a 1-request decode at the prompt's length and of the prompt's prefill, read from its execute
    (serq calibrate's evaluator)."""
    sz = getattr(args, "sizing", None)
    if sz is None:
        return None
    from serq.catalogue.sizing import step_times
    out = sz.summary()
    out.update(step_times(args.file, supplied))
    out["notes"] = out.pop("notes")   # last, after the figures
    return out


def _inputs(args, supplied: dict | None = None) -> int:
    """`serq inputs FILE`: each input the program declares and its default, in the program's order; with
    --model and --gpu, the values the catalogue gives them."""
    found = api.inputs(args.file)
    found.update({k: v for k, v in (supplied or {}).items() if k in found})
    summary = sizing_summary(args, supplied or {})
    if args.json:
        def plain(v):  # a whole number as an integer; one not finite as `serq ir` writes it (strict JSON has
            # none), which an instance file takes back (api.parse_instance)
            if not math.isfinite(v):
                return "Infinity" if v > 0 else "-Infinity"
            return int(v) if whole(v, -2 ** 53, 2 ** 53) else v
        doc = {"inputs": {k: plain(v) for k, v in found.items()}}
        if summary is not None:
            doc["sizing"] = summary
        _out(json.dumps(doc, indent=1))
    elif found:
        width = max(map(len, found))
        _out("\n".join(f"{k.ljust(width)}  {fmt(v)}" for k, v in found.items()))
        if summary is not None:
            _out(sizing_text(summary))
    else:
        _say(f"{args.file}: the program declares no input")
    return 0


def draw_path(file: str, output: str | None) -> str | None:
    """Where `serq draw` writes: -o, '-' (None) for stdout, else FILE's stem and .svg beside it."""
    if output == "-":
        return None
    if output:
        return output
    return os.path.splitext(file)[0] + ".svg"


def _draw(args, prog) -> int:
    from serq.draw import svg
    text = svg(prog, os.path.basename(args.file))
    out = draw_path(args.file, args.output)
    if out is None:
        _out(text.removesuffix("\n"))
        return 0
    write_text(out, text)  # whole or not at all; OutputError: exit 1, as every output that cannot be written
    _say(f"{args.file}: drew {out}")
    return 0


# An input or output error that is neither the program's nor the command line's: exit 1. The one class
# of serq/_write.py, so that what the experiments' modules raise through `serq.cli` is caught here even
# when this module runs as `python -m serq.cli` (then `__main__`, a second copy of it)
_Failure = OutputError


def _out(text: str):
    """The command's result on stdout. A full disk is a _Failure; a closed pipe is raised as it is."""
    if sys.stdout is None:  # started with stdout closed (`>&-`)
        raise _Failure("cannot write the output: standard output is closed")
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _Failure(f"cannot write the output: {exc.strerror or exc}") from None


def _say(text: str):
    """A message on stderr; when stderr itself cannot be written there is no one to tell."""
    if sys.stderr is None:  # started with stderr closed (`2>&-`)
        return
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        _silence(sys.stderr)


def _silence(stream):
    """Point a failed stream at /dev/null, so the flush at exit does not fail again and print."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def _jsonable(v):
    return None


def _clock(seconds: float) -> str:
    """A duration as m:ss (h:mm:ss past an hour)."""
    s = int(seconds + 0.5)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class _Progress:
    """A progress bar on stderr for runs longer than a couple of seconds."""

    def __init__(self, settings):
        import threading
        import time
        self.t0 = time.monotonic()
        self.last = 0.0
        self.settings = settings
        self.shown = False
        self.lock = threading.Lock()  # the bar and a note (_Watch's thread) take turns on stderr

    def __call__(self, sim):
        import time
        t = time.monotonic()
        if t - self.t0 < 2 or t - self.last < 0.2:
            return
        self.last = t
        if sim.arrivals_n:
            frac = min(1.0, (sim.sessions_completed + sim.sessions_rejected) / sim.arrivals_n)
        elif sim.horizon:
            frac = min(1.0, sim.now / sim.horizon)
        else:
            frac = 0.0
        bar = "#" * int(frac * 25)
        spent = t - self.t0
        # the time left at the pace so far (the elapsed wall time over the fraction done), as sweep's bar says it
        left = f", {_clock(spent * (1 - frac) / frac)} left" if frac > 0.01 else ""
        with self.lock:
            sys.stderr.write(f"\r[{bar:<25}] {frac * 100:5.1f}%  t={sim.now:.6g}  {_clock(spent)} elapsed{left}   ")
            sys.stderr.flush()
            self.shown = True

    def note(self, text: str):
        """A line above the bar (which the next instant draws again)."""
        with self.lock:
            if self.shown:
                sys.stderr.write("\r" + " " * 79 + "\r")
            _say(text)

    def close(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()


# A run too slow to finish says so (_Watch). Once it has used SLOW_AFTER seconds of CPU, looking
# every SLOW_EVERY seconds, at the pace of the last SLOW_AFTER seconds: a run that ends when its
# sessions have ended (--arrivals N, a batch, a workload file) is too slow when they would take more
# than SLOW_LIMIT seconds of CPU to end (none ending: forever); a run that ends at its horizon, when
# its clock would take more than CLOCK_MARGIN times that to reach it, or SLOW_LIMIT where an engine
# is seen serving a vanishing number of tokens. The clock's pace is the weaker sign: early in a run
# it can be far below its average (a million closed sessions' first simulated seconds: a thousandth)
SLOW_AFTER = 10.0
SLOW_EVERY = 0.5
SLOW_LIMIT = 3600.0
CLOCK_MARGIN = 24.0
VANISHING = 1e-6  # tokens an iteration, on average over the window: an engine that serves nothing


class _Watch:
    """`serq run`'s watch over the run (Sim.run gives it the run with `start`): the progress bar,
    if any, is called at each instant; and a thread of its own looks at the run every `every`
    seconds, costing the run's loop nothing. Once the run has used `after` seconds of CPU, if at
    the pace of the last `after` seconds it would need more than `limit` seconds of CPU to finish
    (the rules above), one note on stderr says so: how far the run is, its events and clock per CPU
    second, and the likely cause when it is cheap to see (an engine whose iterations serve a
    vanishing number of tokens; inputs set near 0). The run goes on."""

    def __init__(self, bar=None, supplied: dict | None = None, after: float | None = None,
                 every: float | None = None, limit: float | None = None, say=None):
        self.bar = bar
        self.supplied = supplied or {}
        self.after = SLOW_AFTER if after is None else after
        self.every = SLOW_EVERY if every is None else every
        self.limit = SLOW_LIMIT if limit is None else limit
        self.say = say or (bar.note if bar is not None else _say)
        self.noted = None  # the note, once said
        self.thread = None
        self.stop = None

    def start(self, sim):
        import threading
        self.sim = sim
        self.stop = threading.Event()
        t = self.thread = threading.Thread(target=self._watch, name="serq-watch", daemon=True)
        t.start()
        return self.bar

    def close(self):
        if self.thread is not None:
            self.stop.set()
            # a signal in the main thread (it waits on api._deep's run thread) can close the watch
            # while the run thread is still starting it: a thread not yet started has nothing to
            # join, and sees `stop` once it starts
            if self.thread.is_alive():
                self.thread.join()
            self.thread = None
        if self.bar is not None:
            self.bar.close()

    # -- the watch
    def _total(self):
        """The sessions the run ends after, or None (it ends at the horizon, or when nothing is left)."""
        sim = self.sim
        if sim.arrivals_n:
            return sim.arrivals_n
        if sim.workload is not None:
            return len(sim.workload.get("sessions", ())) or None
        arr = sim.prog.workload.arrive
        if arr.k == "trace":
            return len(sim.trace)
        return arr.n if arr.k == "batch" and arr.n else None

    def _sample(self, cpu):
        """(CPU seconds, sessions ended, sessions arrived, the clock, events scheduled, each engine's
        (iterations, tokens served))."""
        sim = self.sim
        return (cpu, sim.sessions_completed + sim.sessions_rejected, sim.sessions_arrived, sim.now, sim.seq,
                [(e.iterations, e.served_total) for e in sim.engines])

    def _watch(self):
        import time
        c0 = time.process_time()
        samples = [self._sample(0.0)]
        total = self._total()
        hz = self.sim.horizon if self.sim.horizon is not None and 0 < self.sim.horizon < math.inf else None
        if total is None and hz is None:
            return  # nothing to measure the pace against
        while not self.stop.wait(self.every):
            s = self._sample(time.process_time() - c0)
            samples.append(s)
            if s[0] < self.after:
                continue
            while len(samples) > 2 and samples[1][0] <= s[0] - self.after:
                samples.pop(0)  # the window: from the last look at least `after` seconds of CPU ago
            base = samples[0]
            span = s[0] - base[0]
            causes = self._causes(base, s, span)
            # the CPU seconds each way of ending would take at this pace (inf: it does not move)
            by_count = _left(s[1] / total, base[1] / total, span) if total else math.inf
            by_clock = _left(s[3] / hz, base[3] / hz, span) if hz else math.inf
            slow_count = total is None or by_count > self.limit
            slow_clock = hz is None or by_clock > self.limit * (1 if causes else CLOCK_MARGIN)
            if slow_count and slow_clock:
                self.noted = self._note(base, s, span, total, min(by_count, by_clock), causes)
                self.say(self.noted)
                return

    def _causes(self, base, s, span):
        causes = []
        for e, (i0, v0), (i1, v1) in zip(self.sim.engines, base[5], s[5]):
            n = i1 - i0
            if n >= 100 and (v1 - v0) / n < VANISHING:
                causes.append(f"engine `{e.label}` ran {n:,} iterations in the last {span:.0f} s of CPU and they "
                              f"served {v1 - v0:.3g} tokens in all: an iteration that schedules a vanishing number "
                              "of tokens (a token budget or chunk cap near 0) advances a prefill by nothing")
        return causes

    def _note(self, base, s, span, total, left, causes):
        sim = self.sim
        span = max(span, 1e-9)
        where = []
        if total:
            where.append(f"{s[1]:,} of its {total:,} sessions have ended, {s[1] - base[1]:,} in the last {span:.0f} s")
        hz = sim.horizon
        if hz is not None and 0 < hz < math.inf:
            where.append(f"the clock is at {s[3]:.6g} of the horizon {hz:.6g}")
        pace = (f"at this pace the rest takes about {_duration(left)} of CPU" if left < math.inf
                else "at this pace it may never finish")
        text = (f"serq: note: the run is progressing too slowly to finish: after {s[0]:.0f} s of CPU, "
                f"{'; '.join(where)}; {pace} ({(s[4] - base[4]) / span:,.0f} events a CPU second, the clock at "
                f"{s[3]:.6g} and advancing {(s[3] - base[3]) / span:.3g} a CPU second).")
        tiny = [f"{k}={v:g}" for k, v in self.supplied.items() if v != 0 and abs(v) < VANISHING]
        if tiny:
            causes = causes + [f"inputs set near 0: {', '.join(tiny)}"]
        if causes:
            text += " Likely cause: " + "; ".join(causes) + "."
        return text + " The run goes on (Ctrl-C stops it)."


def _left(f1: float, f0: float, span: float) -> float:
    """The CPU seconds the rest of a run takes at the pace of the last `span` seconds, in which the
    fraction done went from f0 to f1 (inf: it did not move)."""
    return (1 - f1) * span / (f1 - f0) if f1 > f0 else math.inf


def _duration(sec: float) -> str:
    if sec >= 7200:
        return f"{sec / 3600:.3g} h"
    if sec >= 120:
        return f"{sec / 60:.3g} min"
    return f"{sec:.3g} s"


def main(argv: list[str] | None = None) -> int:
    """The exit status (cli.md): 0, 1 a program or I/O error, 2 a usage error, 3 an internal error,
    130 interrupted, 141 the output's reader went away; ended by SIGTERM or SIGHUP, after its
    cleanups, the process ends by that signal (128 + N in argv's case). Never a Python traceback.
    Run as the process's own command (argv None), the process ends here (_exit)."""
    if argv is None:
        _whole_stdout()
    ended: list = []
    code = _guarded(argv, ended)
    if argv is None:
        _exit(code, ended[0] if ended else None)
    return code


def _whole_stdout():
    """The process's stdout as a text stream whose every write reaches the system whole or raises
    (serq/_write.py, WholeWriter): Python's own returns a short count from a large write that a full
    disk or a reader going away took only part of, and its text layer ignores it, so `serq ir P > f`
    on a filling disk wrote part of the IR and exited 0 (issue 50, item 3)."""
    import io
    out = sys.stdout
    if out is None:
        return
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError, AttributeError):
        return
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(WholeWriter(fd)), encoding=out.encoding, errors=out.errors,
                                  line_buffering=out.line_buffering, write_through=out.write_through)


def _flushed(code: int) -> int:
    """stdout flushed at the end: what a command printed and a buffer still holds. A failure is the
    command's output lost: its reader gone, 141; otherwise exit 1, said, unless it failed already."""
    if sys.stdout is None:
        return code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence(sys.stdout)
        return 141 if code == 0 else code
    except OSError as exc:
        _silence(sys.stdout)
        if code == 0:
            _say(f"serq: error: cannot write the output: {exc.strerror or exc}")
            return 1
    except ValueError:  # closed
        pass
    return code


def _exit(code: int, signum: int | None = None):
    """End the process without the interpreter's teardown, which only frees memory: every module,
    class and object one by one, and a last full collection, a fifth of a short `serq run`'s CPU
    time. The output is flushed first (each write already is; a stream that cannot take it was
    pointed at /dev/null, _silence); every file serQ writes is closed by its `with`. A command ended
    by a signal (its cleanups done) ends by that signal, as a process it would have killed."""
    code = _flushed(code)
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if signum is not None:
        import signal
        try:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        except (OSError, ValueError):
            pass
    os._exit(code)


def _guarded(argv: list[str] | None, ended: list | None = None) -> int:
    """_main, whatever it raises turned into the exit status. While a command has something to clean up
    (a staging directory, workers, a temporary file being written: serq/staged.py, serq/_write.py),
    SIGTERM and SIGHUP are raised in it as a KeyboardInterrupt that says which (`signalled`); `ended`
    then gets the signal, which the process ends by (main). Elsewhere they end it at once, as usual
    (a long z3 call in `serq verify` is not waited for)."""
    forget_signals()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `serq run ... | head`: quiet, as a Unix tool killed by SIGPIPE
        _silence(sys.stdout)
        return 141
    except KeyboardInterrupt as exc:
        signum = signalled(exc)
        if signum is not None:  # SIGTERM, SIGHUP: quiet, as a process the signal ends
            if ended is not None:
                ended.append(signum)
            return 128 + signum
        _say("serq: interrupted")
        return 130
    except Exception as exc:  # the safety net: a bug in serQ, not the user's
        if os.environ.get("SERQ_DEBUG"):
            raise
        _say(f"serq: internal error: {type(exc).__name__}: {exc} (a bug in serQ; SERQ_DEBUG=1 shows where)")
        return 3


def _main(argv: list[str]) -> int:
    head, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    try:
        p = _parser(_command(head))
        try:
            args, extra = p.parse_known_args(head)
        except _VersionAsked:
            _out(f"serq {version()}")
            return 0
        if extra:
            stray = any("=" in x and not x.startswith("-") for x in extra)
            hint = "; inputs go after --: -- NAME=VALUE" if stray else ""
            p.commands[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}{hint}")
        args.rest = rest
        inst = api.parse_instance(args.instance) if getattr(args, "instance", None) else {}
        supplied, settings = settings_from(args, inst)
        if args.cmd == "ir" and args.schema:
            from serq.ir.schema import schema_text
            _out(schema_text().rstrip("\n"))
            return 0
        if not args.file:
            raise UsageError("a program file is required")
        if args.cmd == "verify":
            _bound(args)
            _verify_out(args.out)
        if args.cmd in EXPERIMENTS:
            return importlib.import_module(f"serq.exp.{MODULES.get(args.cmd, args.cmd)}").command(args)
        if args.cmd == "inputs":
            return _inputs(args, supplied)
        prog = api.load(args.file, supplied, settings)
        if getattr(args, "trace", None) is not None:
            prog = _with_trace(prog, args.trace)
        if args.cmd == "run":
            return _run(args, prog, settings, supplied)
        if args.cmd == "target":
            from serq.target.vllm import target
            _out(json.dumps(target(prog), indent=1))
            return 0
        if args.cmd == "check":
            _say(f"{args.file}: ok")
            return 0
        if args.cmd == "claims":
            return _claims(args, prog)
        if args.cmd == "draw":
            return _draw(args, prog)
        if args.cmd == "verify":
            return _verify(args, prog)
        if args.cmd == "ir":
            _out(prog.model_dump_json(indent=1, exclude_none=True))
            return 0
    except UsageError as exc:
        _say(f"serq: error: {exc}")
        return 2
    except SerqError as exc:
        _say(exc.render())
        return 1
    except (_Failure, OutputError) as exc:
        _silence(sys.stdout)
        _say(f"serq: error: {exc}")
        return 1
    except RecursionError:
        _say("serq: error: the program nests too deeply to read")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
