"""Run a fuzz case (tests/fuzzgen.py) and judge it, in a worker process that a deadline can kill.

The oracle: each `serq` command of a case ends with a report (exit 0; with --json, strict JSON),
a diagnostic (exit 1, `file:line:col: error[CODE]: ...` on stderr) or a usage error (exit 2,
`serq: error: ...`) — never a traceback, never a hang. The case runs in-process in a worker
(`python tests/fuzzrun.py`, one JSON line in, one out) so a case costs no interpreter start; the
parent lets it use at most `timeout` seconds of the worker's CPU time (read from /proc, so a case
on a loaded machine is not charged for waiting for a core; where /proc is not, wall time), and at
most WALL_FACTOR times that in wall time (a case blocked without computing), then asks the worker
for its stacks (SIGUSR1, written at a safe point; faulthandler on SIGUSR2 where none comes), kills
it and starts another: a case over its budget is a failure named "hang", with the innermost serQ
frame of the thread that was working, never a hung test.

A suspected hang is not called one at once: `run_retrying` runs the case again, once, alone (no
other case of the campaign running: `Gate`) with RETRY_FACTOR times the budget, and it is a hang
only if that run is over its budget too; a retry that ends says so in the verdict ("retried").

A program that can never finish is not a hang either when serQ itself says so: `serq run`'s
slow-run note (serq/cli.py `_Watch`, docs/reference/cli.md: too slow to finish at its pace) goes
from the worker to a file the parent reads while the case runs, and a case whose note shows the
run moving (events each CPU second) is stopped there and called a slow program (`"slow"`: the
note), not a failure: its own values (a gap or a chunk cap of 1e-300) make it endless. A case over
its budget with no note, or with a note whose run schedules no event (stuck within one instant),
is still a hang. The worker's watch looks after `slow_after` seconds of CPU (serQ's 10 s unless
the campaign's budget is shorter).
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
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERQ = os.path.join(ROOT, "serq") + os.sep

STARTUP = 120.0  # seconds a worker may take to import serQ and build its parser (not a case's budget)
WALL_FACTOR = 6.0   # a case may take this many times its CPU budget in wall time (waiting for a core, blocked)
RETRY_FACTOR = 3.0  # a suspected hang's second run, alone, has this many times the budget
TICK = 0.25         # seconds between looks at a running case's CPU time
SLOW_NOTE = "serq: note: the run is progressing too slowly to finish"  # serq/cli.py, _Watch._note
_EVENTS = re.compile(r"\(([\d,]+) events a CPU second")
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


_NOTES = None  # in a worker: the file serQ's slow-run note goes to as soon as it is said


class _Stderr(io.StringIO):
    """A case's stderr; in a worker, serQ's slow-run note is also written at once to the notes file,
    which the parent reads while the run goes on (the run's own stderr is seen only when it ends)."""

    def write(self, s):
        if _NOTES is not None and s.startswith(SLOW_NOTE):
            with open(_NOTES, "a", encoding="utf-8") as fh:
                fh.write(s.rstrip("\n") + "\n")
        return super().write(s)


def slow_program(note: str | None) -> bool:
    """Whether serQ's slow-run note says the run moves but cannot finish (a slow program), rather
    than that it schedules no event at all (stuck within one instant: a hang)."""
    m = _EVENTS.search(note or "")
    return bool(note) and note.startswith(SLOW_NOTE) and m is not None and int(m.group(1).replace(",", "")) > 0


def serq(argv: list[str], want_json: bool = False) -> tuple[int, str, str]:
    """`serq ARGV` in this process; a Failure unless it ends as the CLI promises."""
    from serq import cli
    out, err = io.StringIO(), _Stderr()
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
        elif case["target"] == "verify":   # exit 3: a workload the interpreter replays otherwise
            serq_(["verify", prog] + case["argv"] + ["--out", workdir], want_json=True)
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
def _stacks_handler(dump):
    """A SIGUSR1 handler that writes every thread's stack to `dump`, as faulthandler does. It runs at
    a safe point, between two bytecodes, with the other threads stopped where they are: faulthandler
    reads a running thread's frames as they change, and gave line numbers such as 2122677472."""
    def handler(signum, frame):
        import traceback as tb
        me = threading.get_ident()
        blocks = []
        for ident, f in sys._current_frames().items():
            f = frame if ident == me else f
            head = f"{'Current thread' if ident == me else 'Thread'} 0x{ident:016x} (most recent call first):"
            lines = [f'  File "{fs.filename}", line {fs.lineno} in {fs.name}' for fs in reversed(tb.extract_stack(f))]
            blocks.append("\n".join([head] + lines))
        dump.write("\n\n".join(blocks) + "\n")
        dump.flush()
    return handler


def _worker_main():
    import faulthandler
    global _NOTES
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the protocol is the only thing on the pipe
    dump = open(sys.argv[2], "w")  # noqa: SIM115 - open for the worker's life
    signal.signal(signal.SIGUSR1, _stacks_handler(dump))
    # a worker stuck in C code that holds the GIL never reaches a safe point: faulthandler, at once
    faulthandler.register(signal.SIGUSR2, file=dump, all_threads=True)
    _NOTES = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
    sys.path.insert(0, HERE)
    from serq import api, cli
    if len(sys.argv) > 4 and sys.argv[4]:
        cli.SLOW_AFTER = float(sys.argv[4])  # the watch's window and first look (serq/cli.py, _Watch)
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


_WAITING = os.sep + "threading.py"


def _hang_cause(dump: str) -> tuple[str, str]:
    """The innermost serQ frame of the thread that was working: not one waiting in threading.py (the
    caller in api._deep, `serq run`'s watch between its looks)."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = [(m.group(1), m.group(2)) for m in re.finditer(r'File "([^"]+)", line \d+ in (\S+)', block)]
        serq_frames = [f for f in frames if f[0].startswith(SERQ)]
        if frames and frames[0][0].endswith(_WAITING):
            continue
        if serq_frames and not serq_frames[0][0].endswith(os.path.join("serq", "api.py")):
            return _frame_cause("hang", list(reversed(frames))), dump  # innermost first
    return "hang", dump


def cpu_seconds(pid: int):
    """The CPU time (user + system, all its threads) the process has used, from /proc; None where
    it cannot be read (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _HZ  # utime, stime: fields 14 and 15 of stat(5)
    except (OSError, IndexError, ValueError):
        return None


try:
    _HZ = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _HZ = 100


class Worker:
    """One worker process; `run(case)` returns the verdict once the case has used `timeout` seconds
    of CPU time (or `wall_factor` times that in wall time), or once serQ's slow-run note says the
    run cannot finish, whatever happens. `argv`: the worker's command, `--worker STACKS NOTES
    SLOW_AFTER` appended (a test's stand-in; by default this file). `slow_after`: the seconds of CPU
    after which `serq run`'s watch first looks (None: serQ's own, serq/cli.py SLOW_AFTER)."""

    def __init__(self, timeout: float, wall_factor: float = WALL_FACTOR, argv: list | None = None,
                 slow_after: float | None = None):
        self.timeout = timeout
        self.wall_factor = wall_factor
        self.slow_after = slow_after
        self.argv = argv or [sys.executable, os.path.abspath(__file__)]
        self.proc = None
        self.stacks = tempfile.NamedTemporaryFile(prefix="serq-fuzz-stacks-", delete=False).name
        self.notes = tempfile.NamedTemporaryFile(prefix="serq-fuzz-notes-", delete=False).name

    def _note(self) -> str | None:
        """serQ's slow-run note of the case running, if it has said one."""
        try:
            if os.path.getsize(self.notes) == 0:
                return None
            with open(self.notes, encoding="utf-8", errors="replace") as fh:
                return fh.read().strip() or None
        except OSError:
            return None

    def _start(self):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        after = "" if self.slow_after is None else repr(float(self.slow_after))
        self.proc = subprocess.Popen(self.argv + ["--worker", self.stacks, self.notes, after],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=ROOT)
        ready, _, _ = select.select([self.proc.stdout], [], [], STARTUP)
        if not ready or self.proc.stdout.readline() != "ready\n":
            self.kill()
            raise RuntimeError(f"the fuzz worker did not start within {STARTUP:g} s")

    def run(self, case: dict, timeout: float | None = None) -> dict:
        """The case's verdict, within `timeout` (default the worker's) seconds of the worker's CPU
        time and wall_factor times that of wall time; with "seconds" (wall) and "cpu" (the worker's
        CPU seconds, None where /proc is not) it took."""
        budget = self.timeout if timeout is None else timeout
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        pid = self.proc.pid
        open(self.notes, "w").close()  # the worker is idle: no note of an earlier case is left
        c0 = cpu_seconds(pid)
        t0 = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps(case) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died(t0)
        wall_limit = budget * self.wall_factor if c0 is not None else budget
        used = None
        while True:
            waited = time.monotonic() - t0
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, min(TICK, wall_limit - waited)))
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    v = json.loads(line)
                    c = cpu_seconds(pid)
                    v["cpu"] = c - c0 if c is not None and c0 is not None else None
                    return v
                return self._died(t0)
            c = cpu_seconds(pid) if c0 is not None else None
            used = c - c0 if c is not None else None
            note = self._note()
            if slow_program(note):  # by serQ's own account it cannot finish: stopped, not a hang
                self.kill()
                return {"ok": True, "slow": note, "exits": [], "seconds": time.monotonic() - t0, "cpu": used,
                        "budget": budget}
            if (used is not None and used > budget) or time.monotonic() - t0 >= wall_limit:
                break
        note = self._note()
        if slow_program(note):  # said just as the budget ran out
            self.kill()
            return {"ok": True, "slow": note, "exits": [], "seconds": time.monotonic() - t0, "cpu": used,
                    "budget": budget}
        wall = time.monotonic() - t0
        if c0 is None:
            over = f"over the budget of {budget:g} s (wall time: no CPU time to read here)"
        elif used is not None and used > budget:
            over = f"over the budget of {budget:g} s (CPU time: {used:.1f} s of CPU in {wall:.1f} s)"
        else:
            over = (f"over the budget of {budget:g} s (wall time: {wall:.1f} s, {self.wall_factor:g} times the "
                    f"CPU budget, with {used if used is not None else 0:.1f} s of CPU: blocked, or starved of a core)")
        if note:
            over += ("\nserQ's slow-run note, of a run that schedules no event (stuck within one instant):\n"
                     + note)
        elif case.get("target") in ("run", "ir"):
            over += "\nno slow-run note from serQ (a run too slow to finish says so: serq/cli.py, _Watch)"
        # over budget: the stacks (at the worker's next safe point; faulthandler where there is none
        # within 2 s: C code that holds the GIL), then the worker goes
        self.proc.send_signal(signal.SIGUSR1)
        if not self._dumped(2.0):
            self.proc.send_signal(signal.SIGUSR2)
            self._dumped(5.0)
        self.kill()
        with open(self.stacks, errors="replace") as fh:
            cause, dump = _hang_cause(fh.read())
        return {"ok": False, "cause": cause, "detail": f"{over}\n{dump}", "artifacts": {},
                "seconds": time.monotonic() - t0, "cpu": used, "budget": budget}

    def _dumped(self, limit: float) -> bool:
        """Wait, at most `limit` seconds, until the stacks are written and the dump has stopped
        growing (the worker writes them when it is next scheduled: a loaded machine may take a while)."""
        deadline = time.monotonic() + limit
        size, still = 0, 0
        while time.monotonic() < deadline and still < 4:
            time.sleep(0.05)
            now = os.path.getsize(self.stacks)
            still = still + 1 if now == size and now > 0 else 0
            size = now
        return size > 0

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
        for f in (self.stacks, self.notes):
            with contextlib.suppress(OSError):
                os.unlink(f)


class Gate:
    """Cases run side by side (`shared`), but a retried one runs `alone`: it waits until the cases
    running end, and no new one starts until it is done."""

    def __init__(self):
        self._cond = threading.Condition()
        self._running = 0
        self._alone = 0    # retries waiting or running: new shared cases wait behind them

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: self._alone == 0)
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        with self._cond:
            self._alone += 1
            self._cond.wait_for(lambda: self._running == 0)
            self._running += 1  # one retry at a time: another waits for this one
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._alone -= 1
                self._cond.notify_all()


def run_retrying(worker: Worker, case: dict, factor: float = RETRY_FACTOR, gate: Gate | None = None) -> dict:
    """`worker.run(case)`, side by side with other cases (`gate.shared()`); a suspected hang is run
    again, once, alone (`gate.alone()`), with `factor` times the budget, and is a hang only if that
    run is over its budget too (a slow program, by serQ's note, is not). The verdict of a retried
    case has "retried": what the first run took and how the second ended; a hang's detail says it
    was retried."""
    gate = gate or Gate()
    with gate.shared():
        v = worker.run(case)
    if v["ok"] or not v["cause"].startswith("hang"):
        return v
    budget = worker.timeout * factor
    with gate.alone():
        v2 = worker.run(case, timeout=budget)
    first = (f"over its budget of {worker.timeout:g} s side by side with other cases "
             f"({v.get('cpu') or 0:.1f} s of CPU, {v.get('seconds', 0):.1f} s wall)")
    if v2["ok"] or not v2["cause"].startswith("hang"):
        took = f"{v2['cpu']:.1f} s of CPU" if v2.get("cpu") is not None else f"{v2.get('seconds', 0):.1f} s"
        if v2.get("slow"):
            v2["retried"] = (f"{first}; run again alone with {budget:g} s, serQ said after {took} that it is too "
                             "slow to finish: a slow program, not a hang")
        else:
            v2["retried"] = f"{first}; run again alone with {budget:g} s, it ended in {took}: not a hang"
        return v2
    v2["retried"] = f"{first}; run again alone with {budget:g} s, over that too: a hang"
    v2["detail"] = f"{v2['retried']}\n{v2['detail']}"
    return v2


def command(case: dict, verdict: dict | None = None) -> str:
    """The shell command that replays a saved case from its folder (tools/fuzz.py writes case.sq):
    the command that failed, else the case's commands."""
    if verdict and verdict.get("argv"):
        return "serq " + " ".join(verdict["argv"])
    if case["target"] == "check":
        return "serq check case.sq"
    if case["target"] == "run":
        return "serq run case.sq --quiet " + " ".join(case["argv"])
    if case["target"] == "verify":
        return "serq verify case.sq " + " ".join(case["argv"])
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
