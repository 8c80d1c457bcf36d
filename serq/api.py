"""The host API: load(path, inputs) -> Program (the resolved kernel IR)."""
from __future__ import annotations

import json
import math
import sys
import threading

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.lang.lower.inputs import UsageError
from serq.lang.lower.program import lower
from serq.lang.parse import parse_file, parse_text
from serq.link.program import link_kernel

__all__ = ["load", "load_text", "load_ir", "parse_instance", "run", "claims_lean", "SerqError", "UsageError"]


def run(program: I.Program, settings: I.Settings | None = None, progress=None) -> dict:
    """Simulate the program; the report as the catalogue's JSON object (a dict)."""
    return _deep(program.files[0] if program.files else "<ir>", lambda: _run(program, settings, progress))


def _run(program, settings, progress):
    from serq.interp.sim import Sim
    sim = Sim(program, settings)
    rep = sim.run(progress)
    rep["_sim"] = sim
    return rep


def claims_lean(program: I.Program, source: str | None = None):
    """The program's IR and claims as a Lean file (serq.leangen.ClaimsFile: text, claims), or the
    fragment check's diagnostic (an F-code) when the program is outside the Lean fragment."""
    from serq.leangen import generate
    return generate(program, source)


def _deep(file: str, fn, *args):
    """Run fn in a thread with room to recurse: long expressions make deep trees. What still does
    not fit is refused with a diagnostic, never a crash."""
    out: dict = {}

    def work():
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(25000)
        try:
            out["v"] = fn(*args)
        except RecursionError:
            out["e"] = SerqError("P007", "the program nests too deeply to read", Span(file, 1, 1))
        except BaseException as exc:  # re-raised in the caller's thread
            out["e"] = exc
        finally:
            sys.setrecursionlimit(old)

    old_size = threading.stack_size()
    threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=work)
        t.start()
    finally:
        threading.stack_size(old_size)
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def load(path: str, inputs: dict[str, float] | None = None, settings: I.Settings | None = None) -> I.Program:
    """Parse, lower and link a program file into its IR, with the execution settings."""
    if path.endswith(".json"):
        return load_ir(path)
    return _deep(path, lambda: _finish(parse_file(path), inputs, settings))


def load_text(text: str, file: str = "<input>", inputs=None, settings=None) -> I.Program:
    return _deep(file, lambda: _finish(parse_text(text, file), inputs, settings))


def _finish(ast, inputs, settings):
    k = lower(ast, inputs or {})
    return link_kernel(k, settings or I.Settings())


def load_ir(path: str) -> I.Program:
    """A JSON IR written by `serq ir` (or by hand): validated against the schema and the IR's rules."""
    from pydantic import ValidationError

    from serq.link.rules import check_program
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SerqError("P006", f"cannot read the file: {exc.strerror}", Span(path, 1, 1)) from None
    try:
        prog = I.Program.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise SerqError("I001", f"not a serQ IR: {where}: {err['msg']}", Span(path, 1, 1)) from None
    check_program(prog)
    return prog


def parse_instance(path: str) -> dict:
    """An instance file: a JSON object with `inputs` and any of seed, horizon, warmup, arrivals."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise UsageError(f"cannot read the instance file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}:{exc.colno}: the instance file is not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: an instance file is a JSON object")
    allowed = {"inputs", "seed", "horizon", "warmup", "arrivals"}
    extra = set(data) - allowed
    if extra:
        raise UsageError(f"{path}: unknown key(s) {', '.join(sorted(extra))} (allowed: {', '.join(sorted(allowed))})")
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in inputs.values()):
        raise UsageError(f"{path}: `inputs` maps input names to numbers")
    for k, v in inputs.items():
        if isinstance(v, float) and math.isnan(v):
            raise UsageError(f"{path}: input {k} is NaN")
    return data
