"""Instructions a request, this checkout against a baseline commit (issue 49): the count CPU time on a
shared machine cannot show, the same at every run.

    .venv/bin/python bench/instructions.py   # INSTR_BASELINE=3e62949 INSTR_SMALL=1000 INSTR_LARGE=3000
                                             # INSTR_PROGRAMS=blis_shared (those alone)

For each program (../shared/bench/blis_shared.sq, examples/single-turn/vllm_single_turn.sq), valgrind's
callgrind counts the instructions of `serq run PROGRAM --arrivals N --quiet` at INSTR_SMALL and at
INSTR_LARGE requests, in this checkout and in INSTR_BASELINE (a commit of this repository, checked out
in a temporary worktree and run by this venv's Python, both trees' bytecode compiled first); the
marginal instructions a request are (large - small) / (large - small requests): the start-up, the
parse and the report's fixed part cancel. PYTHONHASHSEED is fixed (0): with it free a string-keyed
dict's probes change from run to run, and the count by up to 2%. The ratio is the baseline's count
over this checkout's (above 1: fewer instructions here). Instructions are not time (a cache miss
costs more than an addition), so docs/speed.md gives both: this for each change, bench/requests.py
(CPU time) for the whole. Needs valgrind (Debian: apt-get install valgrind); without it, says so.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import importlib.util  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import ROOT  # noqa: E402

# bench/requests.py's programs, command and trees (loaded by its path: `requests` is also a package's name)
_spec = importlib.util.spec_from_file_location("bench_requests", os.path.join(ROOT, "bench", "requests.py"))
_req = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_req)
PROGRAMS, RUN, compiled, worktree = _req.PROGRAMS, _req.RUN, _req.compiled, _req.worktree

BASELINE = os.environ.get("INSTR_BASELINE", "3e62949")
SMALL = int(os.environ.get("INSTR_SMALL", 1000))
LARGE = int(os.environ.get("INSTR_LARGE", 3000))
ONLY = [x for x in os.environ.get("INSTR_PROGRAMS", "").split(",") if x.strip()]


def instructions(tree: str, prog: str, n: int) -> int:
    """The instructions callgrind counts for one run of `n` requests of `prog` in `tree`."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "callgrind.out")
        env = dict(os.environ, PYTHONPATH=tree, PYTHONHASHSEED="0")
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c",
                            RUN, "run", prog, "--arrivals", str(n), "--quiet"],
                           cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        m = re.search(r"Collected : (\d+)", p.stderr)
        if p.returncode != 0 or m is None:
            sys.exit(f"bench/instructions.py: callgrind of {prog} in {tree} failed ({p.returncode}): "
                     f"{p.stderr.strip()[-400:]}")
        return int(m.group(1))


def marginal(tree: str, prog: str) -> float:
    return (instructions(tree, prog, LARGE) - instructions(tree, prog, SMALL)) / (LARGE - SMALL)


def main():
    if shutil.which("valgrind") is None:
        print("bench/instructions.py: valgrind is not installed (Debian: apt-get install valgrind): nothing measured")
        return
    progs = [p for p in PROGRAMS if not ONLY or any(x in os.path.basename(p) for x in ONLY)]
    base = worktree(BASELINE)
    try:
        compiled(ROOT)
        compiled(base)
        print(f"instructions a request (callgrind: {LARGE:,} requests less {SMALL:,}, over {LARGE - SMALL:,}; "
              f"PYTHONHASHSEED=0), this checkout against {BASELINE}:")
        for prog in progs:
            name = os.path.basename(prog)
            if not os.path.isfile(prog):
                print(f"  {name}: not here, skipped")
                continue
            mine, theirs = marginal(ROOT, prog), marginal(base, prog)
            print(f"  {name:<24} {mine:12,.0f}   baseline {theirs:12,.0f}   {theirs / mine:.3f}x "
                  f"({100 * (mine - theirs) / theirs:+.1f}%)", flush=True)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
