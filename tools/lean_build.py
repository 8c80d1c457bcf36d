"""Compile serQ's Lean modules to .olean files in dependency order, no lake needed (docs/lean.md).

  python tools/lean_build.py [--lean CMD] [--out DIR] [--jobs N] FILE.lean ...

Each FILE is compiled after the project modules it imports (found under lean/, `import Serq.X`
is lean/Serq/X.lean), each module once, to DIR/olean; a FILE outside lean/ is only checked.
Errors are printed as the compiler prints them, at the source file's own path and line, and the
exit code is the first failing compile's (0 when every one passed). Each compile's CPU time
is printed (`node`'s and its threads' own, from the process's rusage).

Lean in WebAssembly (tools/lean_wasm.py) imports only a module's exported level, so a file that is
not a `module` exports nothing to its importers there. Each project module is therefore compiled
from a copy that is one (`wrap`): `module` and `public import` on its import lines, `@[expose]
public section noncomputable section` after them, no line moved, so every line number is the
source's. A file that is only checked is wrapped the same way (a definition
its theorems need is then compiled as a native toolchain compiles it: `noncomputable section` only
keeps this build, which has no code of the imported modules, from refusing it). A native Lean
(`--lean lean`, or lake) compiles the sources as they are.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "lean"
IMPORT = re.compile(r"^\s*import\s+([\w.]+)\s*$")


def imports(text: str) -> list[str]:
    """The modules a file's header imports (the lines before its first command)."""
    out = []
    in_comment = False
    for line in text.split("\n"):
        s = line.strip()
        if in_comment:
            in_comment = "-/" not in s
            continue
        if not s or s.startswith("--"):
            continue
        if s.startswith("/-") and not s.startswith(("/-!", "/--")):
            in_comment = "-/" not in s[2:]
            continue
        m = IMPORT.match(line)
        if not m:
            break
        out.append(m.group(1))
    return out


def wrap(text: str) -> str:
    """The file as a `module` whose declarations are public with exposed bodies, every line where
    it was: what a file that is not a module is to its importers in a native toolchain."""
    lines = text.split("\n")
    heads = []
    first = None
    in_comment = False
    for i, line in enumerate(lines):
        s = line.strip()
        if in_comment:
            in_comment = "-/" not in s
            continue
        if not s or s.startswith("--"):
            continue
        if s.startswith("/-") and not s.startswith(("/-!", "/--")):
            in_comment = "-/" not in s[2:]
            continue
        if IMPORT.match(line):
            heads.append(i)
            continue
        first = i
        break
    opening = "@[expose] public section noncomputable section"
    if heads:
        for i in heads:
            lines[i] = re.sub(r"^(\s*)import\s", r"\1public import ", lines[i])
        lines[heads[0]] = "module " + lines[heads[0]]
        lines[heads[-1]] += " " + opening
    elif first is not None:
        lines[first] = "module " + opening + " " + lines[first]
    return "\n".join(lines)


def module_file(name: str) -> Path | None:
    p = SRC.joinpath(*name.split(".")).with_suffix(".lean")
    return p if p.exists() else None


def module_name(path: Path) -> str | None:
    try:
        rel = path.resolve().relative_to(SRC)
    except ValueError:
        return None
    return ".".join(rel.with_suffix("").parts)


@dataclass
class Unit:
    path: Path              # the source
    module: str | None      # its module name, None for a file that is only checked
    deps: list[str] = field(default_factory=list)


@dataclass
class Result:
    unit: Unit
    rc: int
    seconds: float          # CPU time of the compile (user + system, the process and its threads)
    wall: float
    output: str
    cached: bool = False
    peak: int = 0           # the process's peak resident memory, bytes


def run_measured(args: list[str], cwd: Path, env: dict, timeout: float | None):
    """Run a command: (exit code, its output, its CPU seconds, wall seconds, peak resident bytes),
    read from the child's own rusage (node's threads are its own). 124 when it ran out of time."""
    import signal
    import tempfile
    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        p = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        deadline = None if timeout is None else t0 + timeout
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.monotonic() > deadline and not timed_out:
                os.killpg(p.pid, signal.SIGKILL)
                timed_out = True
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    rc = 124 if timed_out else p.returncode
    return rc, text, ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss * 1024


def plan(files: list[Path]) -> list[Unit]:
    """Every file and the project modules they import, each after its imports."""
    units: dict[str, Unit] = {}
    order: list[Unit] = []

    def visit(path: Path, stack: tuple[str, ...]) -> None:
        key = str(path.resolve())
        if key in units:
            return
        if key in stack:
            raise SystemExit("lean_build.py: %s imports itself (through %s)" % (path, " -> ".join(stack)))
        deps = []
        for name in imports(path.read_text()):
            f = module_file(name)
            if f is not None:
                visit(f, stack + (key,))
                deps.append(name)
        u = Unit(path, module_name(path), deps)
        units[key] = u
        order.append(u)

    for f in files:
        visit(f, ())
    return order


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


class Builder:
    def __init__(self, lean: list[str], out: Path, wrapped: bool, env: dict[str, str] | None = None):
        self.lean = lean
        self.out = out
        self.wrapped = wrapped
        self.env = dict(os.environ if env is None else env)
        self.src = out / "src"
        self.olean = out / "olean"
        self.digests: dict[str, str] = {}

    def _digest(self, u: Unit, text: str) -> str:
        h = hashlib.sha256(text.encode())
        h.update(" ".join(self.lean).encode())
        for d in u.deps:
            h.update(self.digests.get(d, "?").encode())
        return h.hexdigest()

    def compile(self, u: Unit, timeout: float | None = None) -> Result:
        text = u.path.read_text()
        if self.wrapped:
            text = wrap(text)
        digest = self._digest(u, text)
        if u.module is not None:
            rel = Path(*u.module.split(".")).with_suffix(".lean")
            olean = self.olean / rel.with_suffix(".olean")
            stamp = olean.with_suffix(".digest")
            if olean.exists() and stamp.exists() and stamp.read_text() == digest:
                self.digests[u.module] = digest
                return Result(u, 0, 0.0, 0.0, "", cached=True)
            olean.parent.mkdir(parents=True, exist_ok=True)
            if stamp.exists():
                stamp.unlink()
        # a module is compiled from the folder its name is relative to (Lean names the main module
        # by its path there); a file that is only checked from the project's root
        if self.wrapped:
            cwd = self.src
            target = self.src / (rel if u.module is not None else Path("_checked") / _rel(u.path).lstrip("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        elif u.module is not None:
            cwd, target = SRC, u.path
        else:
            cwd, target = ROOT, u.path
        args = list(self.lean)
        if u.module is not None:
            args += ["-o", str(olean)]
        args.append(os.path.relpath(target, cwd))
        env = dict(self.env)
        env["LEAN_PATH"] = str(self.olean) + (":" + env["LEAN_PATH"] if env.get("LEAN_PATH") else "")
        rc, output, cpu, wall, peak = run_measured(args, cwd, env, timeout)
        if rc == 124:
            output += "lean_build.py: %s: out of time after %.0f s\n" % (_rel(u.path), timeout)
        # messages at the wrapped copy's path are the source's: the same lines
        if target != u.path or cwd != ROOT:
            output = output.replace(args[-1] + ":", _rel(u.path) + ":")
        output = output.replace(str(ROOT) + "/", "")
        if rc == 0 and u.module is not None:
            stamp.write_text(digest)
            self.digests[u.module] = digest
        return Result(u, rc, cpu, wall, output, peak=peak)


def build(files: list[Path], builder: Builder, jobs: int = 1, log=print,
          timeout: float | None = None, explain=None) -> list[Result]:
    """Compile every unit of `plan(files)`, up to `jobs` at once, each once its imports are built;
    a unit whose import failed is not compiled (rc -1). `explain(result)` may rewrite a unit's
    output before it is printed (a batch's lines at their files')."""
    units = plan(files)
    done: dict[str, Result] = {}
    results: list[Result] = []
    pending = list(units)
    running = {}
    # the costliest ready unit first, so that the long checks do not end the run alone
    pending.sort(key=lambda u: -cost_hint(u.path))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while pending or running:
            for u in list(pending):
                if len(running) >= max(1, jobs):
                    break
                if any(d not in done for d in u.deps):
                    continue
                pending.remove(u)
                failed = [d for d in u.deps if done[d].rc != 0]
                if failed:
                    r = Result(u, -1, 0.0, 0.0, "not compiled: %s failed\n" % ", ".join(failed))
                    results.append(r)
                    if u.module:
                        done[u.module] = r
                    log(_line(r))
                    continue
                running[pool.submit(builder.compile, u, timeout)] = u
            if not running:
                continue
            fut = next(iter(_first_done(running)))
            u = running.pop(fut)
            r = fut.result()
            if explain is not None:
                r.output = explain(r)
            results.append(r)
            if u.module:
                done[u.module] = r
            log(_line(r))
            if r.output.strip():
                log("\n".join("  " + line for line in r.output.rstrip().split("\n")))
    return results


def cost_hint(path: Path) -> int:
    """How long a unit's compile is expected to take, to order the ready ones: the kernel's calls its
    theorems say they cost (tools/kernel_cost.py, in the generated files' comments), else its size
    (a definition's elaboration)."""
    text = path.read_text(encoding="utf-8")
    calls = sum(int(x) for x in re.findall(r"(\d+) calls of\s+the kernel", text))
    return calls * 100 + len(text)


def _first_done(running):
    from concurrent.futures import FIRST_COMPLETED, wait
    finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
    return finished


def _line(r: Result) -> str:
    what = r.unit.module or _rel(r.unit.path)
    if r.cached:
        return "%-44s up to date" % what
    status = "ok" if r.rc == 0 else ("not compiled" if r.rc == -1 else "FAILED (exit %d)" % r.rc)
    if r.rc == -1:
        return "%-44s %s" % (what, status)
    return "%-44s %-10s %7.1f s CPU %7.1f s %6.2f GiB" % (what, status, r.seconds, r.wall, r.peak / 2**30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lean_build.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--lean", default=None, help="the lean command (default: tools/lean_wasm.py's)")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "lean")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    if a.lean:
        lean, wrapped = a.lean.split(), False
    else:
        sys.path.insert(0, str(ROOT / "tools"))
        import lean_wasm
        w = lean_wasm.installed()
        if w is None:
            print("lean_build.py: no Lean (python tools/lean_wasm.py install, or --lean)", file=sys.stderr)
            return 2
        lean, wrapped = [str(w)], True
    results = build(a.files, Builder(lean, a.out, wrapped), a.jobs)
    bad = [r for r in results if r.rc != 0]
    return bad[0].rc if bad and bad[0].rc > 0 else (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
