"""`make check`'s Lean step: compile every Lean module of the project and every generated Lean file,
checking every theorem (docs/lean.md, *Lean here*).

  python tools/lean_check.py [--jobs N] [--no-differential] [--cases N --seed S]

With a native `lake` on the PATH, it builds lean/ with it (`lake build`, every library) and checks
each file outside lean/ with `lake env lean`. Else, where Node.js and npm are, it installs Lean in
WebAssembly into .lean-wasm/ once (tools/lean_wasm.py) and compiles the modules in dependency order
itself (tools/lean_build.py), N at a time (default 2). Where neither is, it says SKIPPED and exits 0:
never a check that did not run.

What it compiles: lean/Serq.lean and every module under lean/Serq/ (the semantics, the vLLM
oracle's theorems, the serving order's, the papers' checks), the golden files (tests/golden/lean/),
examples/papers/ClaimsProved.lean, and the interpreter-against-Lean campaign
(tools/lean_differential.py) unless --no-differential. A module or file that prints an error or a
warning fails the check. Each compile's time is printed, then the totals; the exit code is 1 when
anything failed.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import lean_build  # noqa: E402
import lean_wasm  # noqa: E402

BUILD = ROOT / "build" / "lean"
GOLDEN = ROOT / "tests" / "golden" / "lean"


def modules() -> list[Path]:
    """lean/Serq.lean and every module under lean/Serq/, sorted."""
    return [ROOT / "lean" / "Serq.lean"] + sorted((ROOT / "lean" / "Serq").rglob("*.lean"))


def checked_files() -> list[Path]:
    """The Lean files outside lean/ that are checked: the golden files and ClaimsProved.lean."""
    return sorted((ROOT / "tests" / "golden" / "lean").rglob("*.lean")) + [ROOT / "examples" / "papers" / "ClaimsProved.lean"]


class Batch:
    """Files checked as one: their imports first, then each file's text after its imports, in order
    (each golden file is a namespace of its own). A message at the batch's line is the file's."""

    def __init__(self, path: Path, files: list[Path]):
        self.path, self.files, self.spans = path, files, []
        heads: list[str] = []
        body: list[str] = []
        for f in files:
            lines = f.read_text(encoding="utf-8").split("\n")
            n = len(lean_build.imports("\n".join(lines)))
            k = 0
            for i, line in enumerate(lines):     # the line after the file's last import
                if n and lean_build.IMPORT.match(line):
                    n -= 1
                    k = i + 1
                    if not n:
                        break
            heads += [f"import {m}" for m in lean_build.imports("\n".join(lines)) if f"import {m}" not in heads]
            body.append(f"-- {os.path.relpath(f, ROOT)}")
            self.spans.append((f, len(body) + 1, k))   # body line j (1-based) is the file's line j - start + k + 1
            body += lines[k:]
        self.offset = len(heads)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(heads + body) + "\n", encoding="utf-8")

    def where(self, line: int) -> tuple[str, int]:
        j = line - self.offset
        for f, start, k in reversed(self.spans):
            if j >= start:
                return os.path.relpath(f, ROOT), j - start + k + 1
        return os.path.relpath(self.path, ROOT), line

    def explain(self, output: str) -> str:
        rel = re.escape(os.path.relpath(self.path, ROOT))
        return re.sub(rel + r":(\d+):(\d+):",
                      lambda m: "%s:%d:%s:" % (*self.where(int(m.group(1))), m.group(2)), output)


def batches(files: list[Path], n: int) -> list[Batch]:
    """The golden files in `n` batches (one Lean process each, where they took 22: each file's own
    start, 6 s of Lean's in WebAssembly)."""
    per = -(-len(files) // n)
    return [Batch(BUILD / "golden" / f"Golden{k + 1}.lean", files[k * per:(k + 1) * per])
            for k in range(n) if files[k * per:(k + 1) * per]]


def theorems(path: Path) -> int:
    return len(re.findall(r"^theorem\s", path.read_text(encoding="utf-8"), re.M))


def problems(output: str) -> bool:
    """Whether a compile printed an error or a warning (Lean's exit code says only the errors)."""
    return bool(re.search(r":\d+:\d+: (error|warning)\b", output))


def native(files: list[Path], log) -> int:
    lake = shutil.which("lake")
    t0 = time.monotonic()
    bad = 0
    for lib in ("Serq", "SerqOracle", "SerqServe", "SerqPapers"):
        s = time.monotonic()
        r = subprocess.run([lake, "build", lib], cwd=ROOT / "lean", capture_output=True, text=True)
        out = r.stdout + r.stderr
        log("lake build %-38s %s %7.1f s" % (lib, "ok" if r.returncode == 0 and not problems(out) else "FAILED",
                                             time.monotonic() - s))
        if r.returncode or problems(out):
            log(out)
            bad += 1
    for f in files:
        s = time.monotonic()
        r = subprocess.run([lake, "env", "lean", str(f)], cwd=ROOT / "lean", capture_output=True, text=True)
        out = r.stdout + r.stderr
        ok = r.returncode == 0 and not problems(out)
        log("lake env lean %-44s %s %7.1f s" % (os.path.relpath(f, ROOT), "ok" if ok else "FAILED", time.monotonic() - s))
        if not ok:
            log(out)
            bad += 1
    log("Lean (native lake): %s in %.0f s" % ("every module and file checked" if not bad else "%d FAILED" % bad,
                                             time.monotonic() - t0))
    return 1 if bad else 0


def wasm(files: list[Path], jobs: int, log) -> int:
    try:
        lean = lean_wasm.install(log=log)
    except lean_wasm.InstallError as e:
        log("Lean in WebAssembly could not be installed: %s" % e)
        return 1
    t0 = time.monotonic()
    log("Lean %s in WebAssembly (%s), %d at a time" % (lean_wasm.VERSION, os.path.relpath(lean, ROOT), jobs))
    builder = lean_build.Builder([str(lean)], BUILD, wrapped=True)
    golden = [f for f in files if GOLDEN in f.parents]
    batched = batches(golden, jobs)
    by_path = {b.path: b for b in batched}
    results = lean_build.build(modules() + [b.path for b in batched] + [f for f in files if f not in golden],
                               builder, jobs=jobs, log=log,
                               explain=lambda r: by_path[r.unit.path].explain(r.output) if r.unit.path in by_path else r.output)
    bad = [r for r in results if r.rc != 0 or problems(r.output)]
    for r in results:
        if r.rc == 0 and problems(r.output):
            log("%s: compiled with a warning: the check asks for none" % lean_build._rel(r.unit.path))
    cpu = sum(r.seconds for r in results)
    n_th = sum(theorems(r.unit.path) for r in results if r.rc == 0)
    n_mod = sum(1 for r in results if r.unit.module)
    n_files = len(results) - n_mod - len(batched) + sum(len(b.files) for b in batched)
    log("Lean %s in WebAssembly: %d modules and %d files (the golden ones in %d batches), %d theorems, %s; "
        "%.0f s of CPU, %.0f s"
        % (lean_wasm.VERSION, n_mod, n_files, len(batched), n_th,
           "every one checked" if not bad else "%d FAILED: %s" % (len(bad), ", ".join(
               lean_build._rel(r.unit.path) for r in bad)), cpu, time.monotonic() - t0))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lean_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-differential", action="store_true",
                    help="leave out the interpreter-against-Lean campaign (tools/lean_differential.py)")
    ap.add_argument("--cases", type=int, default=None, help="the campaign's cases (default: its own, 24)")
    ap.add_argument("--seed", type=int, default=None, help="the campaign's seed (default: its own, 45)")
    a = ap.parse_args(argv)

    def log(s):
        print(s, flush=True)

    files = checked_files()
    if not a.no_differential:
        import lean_differential
        files += lean_differential.write(BUILD / "differential", a.cases or lean_differential.CASES,
                                         lean_differential.SEED if a.seed is None else a.seed, log=log)
    if shutil.which("lake"):
        return native(files, log)
    if shutil.which("node") and shutil.which("npm"):
        rc = wasm(files, a.jobs, log)
        if not a.no_differential and rc:
            lean_differential.explain(BUILD / "differential", log=log)
        return rc
    log("Lean build SKIPPED: neither lake nor Node.js and npm are on the PATH (no Lean here); lean/, "
        "the golden files and ClaimsProved.lean were not compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
