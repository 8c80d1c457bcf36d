"""The command line: argument parsing only; everything else is the API (architecture)."""
from __future__ import annotations

import argparse
import json
import math
import sys

from serq import api
from serq.diagnostics import SerqError
from serq.ir import model as I
from serq.lang.lower.inputs import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2
        self.print_usage(sys.stderr)
        print(f"serq: error: {message}", file=sys.stderr)
        sys.exit(2)


def _number(text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a number") from None
    if math.isnan(v):
        raise UsageError(f"{what}: NaN is not a value")
    return v


def _binding(text: str) -> tuple[str, float]:
    if "=" not in text:
        raise UsageError(f"an input is NAME=VALUE, not {text!r}")
    name, val = text.split("=", 1)
    name = name.strip()
    if not name:
        raise UsageError(f"an input is NAME=VALUE, not {text!r}")
    return name, _number(val.strip(), f"input {name}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="serq", description="serQ: a serving deployment as a program")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def inputs(sp):
        sp.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="supply an input")
        sp.add_argument("--instance", metavar="FILE.json", help="an instance file: inputs and settings")
        sp.add_argument("rest", nargs="*", metavar="-- NAME=VALUE", help="inputs after --")

    r = sub.add_parser("run", help="simulate the program and print the report")
    r.add_argument("file")
    r.add_argument("--horizon")
    r.add_argument("--warmup", default="0")
    r.add_argument("--seed", default="1")
    r.add_argument("--arrivals")
    r.add_argument("--json", action="store_true", help="the report as one JSON object")
    r.add_argument("--dump", metavar="DIR", help="write the observations and gauge/NAME.csv")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    inputs(r)
    t = sub.add_parser("target", help="the engine's settings as a vLLM configuration (JSON)")
    t.add_argument("file")
    inputs(t)
    c = sub.add_parser("check", help="parse and link only; exit 1 with diagnostics")
    c.add_argument("file")
    inputs(c)
    cl = sub.add_parser("claims", help="the program's IR and claims as Lean (the Lean fragment)")
    cl.add_argument("file")
    cl.add_argument("-o", "--output", metavar="OUT.lean", help="write the Lean file here (default: stdout)")
    inputs(cl)
    ir = sub.add_parser("ir", help="print the resolved kernel IR as JSON")
    ir.add_argument("file", nargs="?")
    ir.add_argument("--seed", default="1")
    ir.add_argument("--horizon")
    ir.add_argument("--warmup", default="0")
    ir.add_argument("--arrivals")
    ir.add_argument("--schema", action="store_true", help="print the IR's JSON Schema instead")
    inputs(ir)
    return p


def settings_from(args, inst: dict) -> tuple[dict, I.Settings]:
    supplied: dict[str, float] = {}
    for k, v in (inst.get("inputs") or {}).items():
        supplied[k] = float(v)
    for b in list(getattr(args, "set", [])) + list(getattr(args, "rest", [])):
        n, v = _binding(b)
        supplied[n] = v
    seed = getattr(args, "seed", None)
    seed = inst.get("seed", 1) if seed in (None, "1") and "seed" in inst else seed
    s = {}
    if seed is not None:
        sv = _number(str(seed), "--seed")
        if sv < 0 or sv != math.floor(sv) or math.isinf(sv):
            raise UsageError("--seed is a nonnegative integer")
        s["seed"] = int(sv)
    hz = getattr(args, "horizon", None) or inst.get("horizon")
    if hz is not None:
        hv = _number(str(hz), "--horizon")
        if not hv > 0:
            raise UsageError("--horizon is a positive time")
        s["horizon"] = hv
    wu = getattr(args, "warmup", None)
    wu = inst.get("warmup", wu) if wu in (None, "0") else wu
    if wu is not None:
        wv = _number(str(wu), "--warmup")
        if wv < 0 or math.isinf(wv):
            raise UsageError("--warmup is a nonnegative, finite time")
        s["warmup"] = wv
    ar = getattr(args, "arrivals", None) or inst.get("arrivals")
    if ar is not None:
        av = _number(str(ar), "--arrivals")
        if av < 1 or av != math.floor(av) or math.isinf(av):
            raise UsageError("--arrivals is a positive integer")
        s["arrivals"] = int(av)
    return supplied, I.Settings(**s)


def _run(args, prog, settings) -> int:
    from serq.interp.report import dump, text
    progress = None
    if not args.quiet and sys.stderr.isatty():
        progress = _Progress(settings)
    rep = api.run(prog, settings, progress)
    if progress is not None:
        progress.close()
    sim = rep.pop("_sim")
    if args.dump:
        dump(sim, rep, args.dump)
    if args.json:
        print(json.dumps(rep, indent=1, default=_jsonable))
    else:
        print(text(rep, args.file))
    return 0


def _claims(args, prog) -> int:
    """The Lean file (stdout or -o); a program without claims still gets its IR, said on stderr."""
    out = api.claims_lean(prog)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(out.text)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(out.text)
    if out.claims == 0:
        print(f"{args.file}: the program states no claim; the Lean file holds its IR only", file=sys.stderr)
    return 0


def _jsonable(v):
    return None


class _Progress:
    """A progress bar on stderr for runs longer than a couple of seconds."""

    def __init__(self, settings):
        import time
        self.t0 = time.monotonic()
        self.last = 0.0
        self.settings = settings
        self.shown = False

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
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r[{bar:<30}] {frac * 100:5.1f}%  t={sim.now:.6g}  sessions={sim.sessions_arrived}")
        sys.stderr.flush()
        self.shown = True

    def close(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        inst = api.parse_instance(args.instance) if getattr(args, "instance", None) else {}
        supplied, settings = settings_from(args, inst)
        if args.cmd == "ir" and args.schema:
            from serq.ir.schema import schema_text
            print(schema_text(), end="")
            return 0
        if args.file is None:
            raise UsageError("a program file is required")
        prog = api.load(args.file, supplied, settings)
        if args.cmd == "run":
            return _run(args, prog, settings)
        if args.cmd == "target":
            from serq.target.vllm import target
            print(json.dumps(target(prog), indent=1))
            return 0
        if args.cmd == "check":
            print(f"{args.file}: ok", file=sys.stderr)
            return 0
        if args.cmd == "claims":
            return _claims(args, prog)
        if args.cmd == "ir":
            print(prog.model_dump_json(indent=1, exclude_none=True))
            return 0
    except UsageError as exc:
        print(f"serq: error: {exc}", file=sys.stderr)
        return 2
    except SerqError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except RecursionError:
        print("serq: error: the program nests too deeply to read", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
