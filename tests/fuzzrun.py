"""Run a fuzz case (tests/fuzzgen.py) and judge it, in a worker process that a deadline can kill.

The oracle: each `serq` command of a case ends with a report (exit 0; with --json, strict JSON),
a diagnostic (exit 1, `file:line:col: error[CODE]: ...` on stderr) or a usage error (exit 2,
`serq: error: ...`) — never a traceback, never a hang. The case runs in-process in a worker
(`python tests/fuzzrun.py`, one JSON line in, one out) so a case costs no interpreter start; the
parent waits at most `timeout` seconds, then asks the worker for its stacks (faulthandler on
SIGUSR1), kills it and starts another: a case over its budget is a failure named "hang", with
the innermost serQ frame it was in, never a hung test.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERQ = os.path.join(ROOT, "serq") + os.sep

STARTUP = 120.0  # seconds a worker may take to import serQ and build its parser (not a case's budget)
DIAG = re.compile(r"^\S.*:\d+:\d+: error\[[A-Z]+\d+\]: ", re.M)
USAGE = re.compile(r"^serq: error: ", re.M)


# -------------------------------------------------------------------------------------- the oracle
class Failure(Exception):
    """A broken promise: `cause` names it (the same bug, the same cause), `detail` shows it."""

    def __init__(self, cause: str, detail: str, argv: list[str] | None = None):
        super().__init__(cause)
        self.cause, self.detail, self.argv = cause, detail, argv


def _frame_cause(kind: str, frames) -> str:
    """kind@serq/FILE:FUNCTION of the innermost named function in serQ's own code (a comprehension
    counts as the function around it, so one loop is one cause)."""
    for fn, func in reversed(frames):
        if fn.startswith(SERQ) and not func.startswith("<"):
            return f"{kind}@{os.path.relpath(fn, ROOT)}:{func}"
    return kind


def _strict_json(text: str):
    def refuse(c):
        raise ValueError(f"non-finite constant {c}")
    return json.loads(text, parse_constant=refuse)


def serq(argv: list[str], want_json: bool = False) -> tuple[int, str, str]:
    """`serq ARGV` in this process; a Failure unless it ends as the CLI promises."""
    from serq import cli
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # noqa: BLE001 - every exception is the finding
        frames = [(f.filename, f.name) for f in traceback.extract_tb(exc.__traceback__)]
        raise Failure(_frame_cause(type(exc).__name__, frames),
                      "serq " + " ".join(argv) + "\n" + "".join(traceback.format_exception(exc)), argv) from None
    o, e = out.getvalue(), err.getvalue()
    shown = f"serq {' '.join(argv)}  (exit {code})\n--- stderr\n{e[-2000:]}\n--- stdout\n{o[-2000:]}"
    if code == 0:
        if want_json and o.strip():
            try:
                _strict_json(o)
            except ValueError as exc:
                raise Failure("not-strict-json", f"{exc}\n{shown}", argv) from None
    elif code == 1:
        if not DIAG.search(e):
            raise Failure("exit-1-without-diagnostic", shown, argv)
    elif code == 2:
        if not USAGE.search(e):
            raise Failure("exit-2-without-usage-error", shown, argv)
    else:
        raise Failure(f"exit-{code}", shown, argv)
    return code, o, e


def _leaves(node, path=()):
    """Every leaf of a JSON value with its path, in document order."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    else:
        yield path, node


def _at(node, path):
    for k in path:
        node = node[k]
    return node


_EXPR_KINDS = {"num", "inf", "attr", "ctx", "step", "reg", "obs", "agg", "un", "bin", "if", "fn", "draw", "cost"}
_CTX = ("now", "present", "waited", "decoding", "admission", "remaining", "position", "demand", "served", "arrived")
_STEP = ("Nres", "Ndec", "Kvb", "Kvp", "Preempted", "Admitted", "Ntok", "Npre", "Attn", "Queued")
_OBS = ("used", "free", "holders", "queued", "cachedin", "queue", "busy", "work", "budget_left", "blocksize")


def _expr_paths(node, path=()):
    """The paths of the IR's expression nodes, in document order."""
    if isinstance(node, dict):
        if path and isinstance(node.get("k"), str) and node["k"] in _EXPR_KINDS:
            yield path
        for k, v in node.items():
            yield from _expr_paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _expr_paths(v, path + (i,))


def _probes(ir: dict) -> list:
    """Expressions that read the program's own resources and engines: every observable of every pool
    and stage (member 0 of an array), every engine value, every register, every context variable;
    a draw and an aggregate."""
    def dicts(v):  # an earlier mutation may have retyped any of these
        return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []

    out = [{"k": "ctx", "name": n} for n in _CTX]
    # a draw and an aggregate, which only some moments read (L081, L077)
    out += [{"k": "draw", "dist": "exp", "args": [{"k": "num", "v": 1.0}]}, {"k": "agg", "fn": "count", "name": "response"}]
    out += [{"k": "step", "name": n, "batch": b} for n in _STEP for b in (False, True)]
    for st in dicts(ir.get("stages")):
        kind = st.get("kind") if isinstance(st.get("kind"), dict) else {}
        for r in dicts(kind.get("registers")):
            out.append({"k": "reg", "stage": st.get("name"), "name": r.get("name")})
    for d in dicts(ir.get("pools")) + dicts(ir.get("stages")):
        target = {"name": d.get("name")}
        if d.get("count") is not None:
            target["index"] = {"k": "num", "v": 0}
        out += [{"k": "obs", "fn": fn, "of": target} for fn in _OBS]
    return out


def apply_ir(ir: dict, mutations: list) -> dict:
    """The case's IR mutations (tests/fuzzgen.ir_mutations): a leaf is chosen by index modulo the
    leaves that the operation applies to ("expr": an expression node, replaced by _probes' val-th)."""
    for leaf, op, val in mutations:
        if op == "expr":
            paths = list(_expr_paths(ir))
            probes = _probes(ir)
            if paths:
                path = paths[leaf % len(paths)]
                _at(ir, path[:-1])[path[-1]] = json.loads(json.dumps(probes[val % len(probes)]))
            continue
        leaves = list(_leaves(ir))
        if op in ("num", "str"):  # the program's values, not its source positions or version
            kind = (int, float) if op == "num" else str
            leaves = [(p, v) for p, v in leaves if isinstance(v, kind) and not isinstance(v, bool)
                      and p and p[0] not in ("files", "version") and "at" not in p]
        leaves = [(p, v) for p, v in leaves if p]
        if not leaves:
            continue
        path, old = leaves[leaf % len(leaves)]
        parent, key = _at(ir, path[:-1]), path[-1]
        if op in ("num", "retype"):
            parent[key] = val
        elif op == "str":
            strings = sorted({v for _, v in _leaves(ir) if isinstance(v, str)})
            parent[key] = strings[val % len(strings)]
        elif op == "del":
            del parent[key]
        elif op == "dup":  # duplicate the innermost list item holding the leaf
            for cut in range(len(path) - 1, -1, -1):
                if isinstance(path[cut], int):
                    lst = _at(ir, path[:cut])
                    lst.insert(path[cut], json.loads(json.dumps(lst[path[cut]])))
                    break
    return ir


def execute(case: dict, workdir: str) -> dict:
    """Run one case in `workdir`: {"ok": True, "exits": [the exit status of each command]} or
    {"ok": False, "cause", "detail", "artifacts", "argv": the command that failed}."""
    prog = os.path.join(workdir, "case.sq")
    with open(prog, "w", encoding="utf-8") as fh:
        fh.write(case["program"])
    for name, text in case.get("files", {}).items():
        with open(os.path.join(workdir, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    artifacts = {}
    exits = []

    def serq_(argv, want_json=False):
        r = serq(argv, want_json)
        exits.append(r[0])
        return r
    try:
        if case["target"] == "check":
            serq_(["check", prog])
        elif case["target"] == "run":
            serq_(["run", prog, "--quiet"] + case["argv"], want_json="--json" in case["argv"])
        else:
            code, out, _ = serq_(["ir", prog], want_json=True)
            if code != 0:
                return {"ok": True, "exits": exits}
            ir_file = os.path.join(workdir, "case.json")
            with open(ir_file, "w", encoding="utf-8") as fh:
                fh.write(out)
            if serq_(["check", ir_file])[0] != 0:  # cli.md: the IR loads back
                raise Failure("ir-does-not-load-back", out[:4000], ["check", ir_file])
            ir = apply_ir(json.loads(out), case["ir"])
            text = json.dumps(ir, indent=1)  # Infinity and NaN on purpose: a reader's input
            artifacts["mutated.json"] = text
            with open(ir_file, "w", encoding="utf-8") as fh:
                fh.write(text)
            if serq_(["check", ir_file])[0] == 0:
                serq_(["run", ir_file, "--quiet"] + case["argv"], want_json=True)
    except Failure as f:
        argv = [os.path.relpath(a, workdir) if a.startswith(workdir) else a for a in f.argv or []]
        return {"ok": False, "cause": f.cause, "detail": f.detail, "artifacts": artifacts, "argv": argv}
    return {"ok": True, "exits": exits}


# ----------------------------------------------------------------------------- the worker process
def _worker_main():
    import faulthandler
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the protocol is the only thing on the pipe
    dump = open(sys.argv[2], "w")  # noqa: SIM115 - open for the worker's life
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    sys.path.insert(0, HERE)
    from serq import api
    with contextlib.suppress(api.SerqError):  # the imports and the parser, outside any budget
        api.load_text("fn main() { }", "warm-up.sq")
    proto.write("ready\n")
    for line in sys.stdin:
        case = json.loads(line)
        with tempfile.TemporaryDirectory(prefix="serq-fuzz-") as d:
            t0 = time.monotonic()
            res = execute(case, d)
            res["seconds"] = time.monotonic() - t0
        proto.write(json.dumps(res) + "\n")


def _hang_cause(dump: str) -> tuple[str, str]:
    """The innermost serQ frame of the thread that was working (not the one waiting in api._deep)."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = [(m.group(1), m.group(2)) for m in re.finditer(r'File "([^"]+)", line \d+ in (\S+)', block)]
        serq_frames = [f for f in frames if f[0].startswith(SERQ)]
        if serq_frames and not serq_frames[0][0].endswith(os.path.join("serq", "api.py")):
            return _frame_cause("hang", list(reversed(frames))), dump  # faulthandler: innermost first
    return "hang", dump


class Worker:
    """One worker process; `run(case)` returns the verdict within `timeout` seconds, whatever happens."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.proc = None
        self.stacks = tempfile.NamedTemporaryFile(prefix="serq-fuzz-stacks-", delete=False).name

    def _start(self):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", self.stacks],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=ROOT)
        ready, _, _ = select.select([self.proc.stdout], [], [], STARTUP)
        if not ready or self.proc.stdout.readline() != "ready\n":
            self.kill()
            raise RuntimeError(f"the fuzz worker did not start within {STARTUP:g} s")

    def run(self, case: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps(case) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died(t0)
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if ready:
            line = self.proc.stdout.readline()
            if line:
                return json.loads(line)
            return self._died(t0)
        # over budget: the stacks, then the worker goes
        self.proc.send_signal(signal.SIGUSR1)
        # the stacks are written, thread by thread, when the worker is next scheduled: wait until the
        # dump has stopped growing (a loaded machine may take a while), then the worker goes
        deadline = time.monotonic() + 5
        size, still = 0, 0
        while time.monotonic() < deadline and still < 4:
            time.sleep(0.05)
            now = os.path.getsize(self.stacks)
            still = still + 1 if now == size and now > 0 else 0
            size = now
        self.kill()
        with open(self.stacks, errors="replace") as fh:
            cause, dump = _hang_cause(fh.read())
        return {"ok": False, "cause": cause, "detail": f"over the budget of {self.timeout:g} s\n{dump}",
                "artifacts": {}, "seconds": time.monotonic() - t0}

    def _died(self, t0):
        code = self.proc.wait()
        self.proc = None
        return {"ok": False, "cause": "worker-died" if code >= 0 else f"worker-killed-by-signal-{-code}",
                "detail": f"the worker exited with {code}", "artifacts": {}, "seconds": time.monotonic() - t0}

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None
        with contextlib.suppress(OSError):
            os.unlink(self.stacks)


def command(case: dict, verdict: dict | None = None) -> str:
    """The shell command that replays a saved case from its folder (tools/fuzz.py writes case.sq):
    the command that failed, else the case's commands."""
    if verdict and verdict.get("argv"):
        return "serq " + " ".join(verdict["argv"])
    if case["target"] == "check":
        return "serq check case.sq"
    if case["target"] == "run":
        return "serq run case.sq --quiet " + " ".join(case["argv"])
    return "serq check mutated.json && serq run mutated.json --quiet " + " ".join(case["argv"])


def show(case: dict, verdict: dict) -> str:
    """A failure as a test prints it: the cause, the program, the command, the evidence."""
    return (f"{verdict['cause']}\nseed {case['seed']}, changes {case.get('changes')}, ir {case.get('ir')}\n"
            f"$ {command(case, verdict)}\n--- case.sq\n{case['program']}\n--- evidence\n{verdict['detail'][-6000:]}")


def _replay(path: str) -> int:
    """`python tests/fuzzrun.py --replay case.json`: the case here, its verdict printed (an IR case
    leaves its mutated IR in ./mutated.json)."""
    with open(path, encoding="utf-8") as fh:
        case = json.load(fh)
    with tempfile.TemporaryDirectory(prefix="serq-fuzz-") as d:
        v = execute(case, d)
    for name, text in v.get("artifacts", {}).items():
        with open(name, "w", encoding="utf-8") as fh:
            fh.write(text)
    print("ok" if v["ok"] else show(case, v))
    return 0 if v["ok"] else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker_main()
    elif sys.argv[1:2] == ["--replay"]:
        sys.exit(_replay(sys.argv[2]))
