"""The host API: load(path, inputs) -> Program (the resolved kernel IR)."""
from __future__ import annotations

import gc
import json
import math
import sys
import threading

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.lang.lower.inputs import UsageError
from serq.lang.lower.program import lower
from serq.lang.parse import parse_file, parse_text, read_source
from serq.link.program import link_kernel

__all__ = ["load", "load_text", "load_ir", "inputs", "parse_instance", "run", "claims_lean", "SerqError", "UsageError"]


def run(program: I.Program, settings: I.Settings | None = None, progress=None, workload: dict | None = None,
        record: bool = False, slo: dict | None = None, percentiles=None) -> dict:
    """Simulate the program; the report as the catalogue's JSON object (a dict). `workload` (a
    workload file's object, `serq run --workload`) replaces the program's arrivals and draws;
    `record` keeps the engines' and stages' queues over time, and each answered turn, for `--dump`
    (serq/interp/dump.py); `slo` ({"ttft"|"tpot"|"itl"|"response": limit}, `serq run --slo`) adds
    the goodput (docs/reference/report.md); `percentiles` (percent values, `serq run --percentiles`) the
    summaries' percentiles in place of 50, 90 and 99."""
    return _deep(program.files[0] if program.files else "<ir>",
                 lambda: _run(program, settings, progress, workload, record, slo, percentiles))


def _run(program, settings, progress, workload=None, record=False, slo=None, percentiles=None):
    from serq.interp.sim import Sim
    sim = Sim(program, settings, workload)
    if record:
        from serq.interp.dump import Recorder, Requests
        sim.recorder = Recorder(sim)
        sim.requests = Requests()
    if slo:
        sim.set_slo(slo)
    if percentiles:
        sim.percentiles = tuple(percentiles)
    rep = sim.run(progress)
    rep["_sim"] = sim
    return rep


def claims_lean(program: I.Program, source: str | None = None):
    """The program's IR and claims as a Lean file (serq.leangen.ClaimsFile: text, claims), or the
    fragment check's diagnostic (an F-code) when the program is outside the Lean fragment."""
    from serq.leangen import generate
    return generate(program, source)


# (stack, recursion limit) for the thread that parses, links and runs: parsing 25 000 levels deep
# takes about 7 MiB of C stack (CPython 3.11, measured), so 64 MiB leaves a wide margin. Where the
# address space is limited (`ulimit -v`) a smaller stack with a limit scaled to it, and at last the
# caller's own thread and limit: deep input is then refused sooner (P007), never a crash.
_STACKS = ((64 << 20, 25000), (16 << 20, 6000))


def _deep(file: str, fn, *args):
    """Run fn in a thread with room to recurse: long expressions make deep trees. What still does
    not fit is refused with a diagnostic, never a crash."""
    out: dict = {}

    def work(limit):
        old = sys.getrecursionlimit()
        if limit:
            sys.setrecursionlimit(limit)
        try:
            out["v"] = fn(*args)
        except RecursionError:
            out["e"] = SerqError("P007", "the program nests too deeply to read", Span(file, 1, 1))
        except BaseException as exc:  # re-raised in the caller's thread
            out["e"] = exc
        finally:
            sys.setrecursionlimit(old)

    for size, limit in _STACKS:
        old_size = threading.stack_size()
        try:
            threading.stack_size(size)
            # a daemon: an interrupted caller (Ctrl-C) does not wait for a long run to finish
            t = threading.Thread(target=work, args=(limit,), daemon=True)
            t.start()
        except RuntimeError:  # the address space cannot hold this stack: try a smaller one
            continue
        finally:
            threading.stack_size(old_size)
        t.join()
        break
    else:
        work(None)
    if "e" in out:
        raise out["e"]
    return out["v"]


def load(path: str, inputs: dict[str, float] | None = None, settings: I.Settings | None = None) -> I.Program:
    """Parse, lower and link a program file into its IR, with the execution settings."""
    if path.endswith(".json"):
        return load_ir(path)
    return _deep(path, lambda: _finish(lambda: parse_file(path), inputs, settings))


def load_text(text: str, file: str = "<input>", inputs=None, settings=None) -> I.Program:
    return _deep(file, lambda: _finish(lambda: parse_text(text, file), inputs, settings))


def inputs(path: str) -> dict[str, float]:
    """A program's inputs (`args.number`) and their defaults, in the order the program declares them.
    The program is linked as `serq check` links it, so a program error is its diagnostic."""
    if path.endswith(".json"):
        raise UsageError(f"{path} is an IR, its inputs resolved already (settings.inputs): "
                         "the program declares them")
    return _deep(path, lambda: _finish(lambda: parse_file(path), None, None, declared=True))


def _finish(parse, inputs, settings, declared=False):
    """Parse, lower and link with the cyclic collector paused: the trees these build are long-lived
    and almost free of cycles, and each full collection would walk all of them again, so a long
    program's check grew faster than its length (bench/link.py). The few cycles left are
    collected when the collector resumes. `declared`: the inputs and their values, not the IR."""
    paused = gc.isenabled()
    gc.disable()
    try:
        k = lower(parse(), inputs or {})
        prog = link_kernel(k, settings or I.Settings())
        return dict(k.inputs) if declared else prog
    finally:
        if paused:
            gc.enable()


def load_ir(path: str) -> I.Program:
    """A JSON IR written by `serq ir` (or by hand): validated against the schema and the IR's rules."""
    from pydantic import ValidationError

    from serq.link.rules import check_program, check_values
    text = read_source(path)
    try:
        prog = I.Program.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise SerqError("I001", f"not a serQ IR: {where}: {err['msg']}", Span(path, 1, 1)) from None
    check_values(prog)
    check_program(prog)
    return prog


def parse_instance(path: str) -> dict:
    """An instance file: a JSON object with `inputs` and any of seed, horizon, warmup, arrivals."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except UnicodeDecodeError:
        raise UsageError(f"cannot read the instance file {path}: it is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read the instance file {path}: {exc.strerror or exc}") from None
    except RecursionError:
        raise UsageError(f"{path}: the instance file nests too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}:{exc.colno}: the instance file is not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: an instance file is a JSON object")
    allowed = {"inputs", "seed", "horizon", "warmup", "arrivals", "sizing"}   # sizing: what serq inputs --model said
    extra = set(data) - allowed
    if extra:
        raise UsageError(f"{path}: unknown key(s) {', '.join(sorted(extra))} (allowed: {', '.join(sorted(allowed))})")
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict):
        raise UsageError(f"{path}: `inputs` maps input names to numbers")
    for k, v in inputs.items():
        if isinstance(v, str) and v.strip().lstrip("+-").lower() in ("infinity", "inf"):
            # strict JSON has no infinity: `serq inputs --json` and `serq ir` write it "Infinity"
            inputs[k] = v = float(v)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise UsageError(f"{path}: `inputs` maps input names to numbers (an infinite one as \"Infinity\" or "
                             f"\"-Infinity\"), not {json.dumps(v)[:40]} for {k}")
        if isinstance(v, float) and math.isnan(v):
            raise UsageError(f"{path}: input {k} is NaN")
    return data
