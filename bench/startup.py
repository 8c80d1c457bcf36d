"""serQ's start-up: the CPU time (user + system) of `serq check examples/multi-turn/vllm.sq` and of
`serq run examples/single-turn/mg1.sq --arrivals 1000 --quiet`, each as a child process, against
the 0.5 s target (issue 12). Each command's peer is the same command with a cold cache (a fresh,
empty XDG_CACHE_HOME: the parser's tables and the IR's schemas are built and written, as at a first
use, serq/_cache.py), and the floor is `python -c pass`. Where PYTHONDONTWRITEBYTECODE is set (as on
the shared machine), Python writes no bytecode, but it reads what `make install` compiled
(`compileall serq`: an editable install compiles nothing); a module edited since is compiled from
source at every start. The row "check (.pyc kept)" shows the same check with bytecode written once
to a private PYTHONPYCACHEPREFIX, as in an ordinary environment. Rounds interleave every command (A, B, C, ...), so a noisy neighbour
slows all alike; each figure is the median (min-max) of the rounds.

    python bench/startup.py [ROUNDS]     # default 7 rounds
"""
from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(BIN, "python") if os.path.exists(os.path.join(BIN, "python")) else sys.executable
SERQ = [os.path.join(BIN, "serq")] if os.path.exists(os.path.join(BIN, "serq")) else [PYTHON, "-m", "serq.cli"]
TARGET = 0.5

CHECK = SERQ + ["check", "examples/multi-turn/vllm.sq"]
RUN = SERQ + ["run", "examples/single-turn/mg1.sq", "--arrivals", "1000", "--quiet"]


def cpu(cmd: list, env: dict) -> float:
    """The child's user + system CPU seconds (getrusage of the children, before and after)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode()}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    warm_home = tempfile.mkdtemp(prefix="serq-bench-warm-")
    warm = dict(os.environ, XDG_CACHE_HOME=warm_home)
    subprocess.run(CHECK, cwd=ROOT, env=warm, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fill it
    pyc_dir = tempfile.mkdtemp(prefix="serq-bench-pyc-")
    pyc = {k: v for k, v in warm.items() if k != "PYTHONDONTWRITEBYTECODE"}
    pyc["PYTHONPYCACHEPREFIX"] = pyc_dir
    subprocess.run(CHECK, cwd=ROOT, env=pyc, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # write them
    rows = [("check", CHECK, "warm"), ("check (cold cache)", CHECK, "cold"), ("check (.pyc kept)", CHECK, "pyc"),
            ("run mg1 --arrivals 1000", RUN, "warm"), ("run mg1 (cold cache)", RUN, "cold"),
            ("python -c pass (floor)", [PYTHON, "-c", "pass"], "warm")]
    times: dict = {name: [] for name, _, _ in rows}
    try:
        for _ in range(rounds):
            for name, cmd, cache in rows:
                if cache == "cold":
                    cold_home = tempfile.mkdtemp(prefix="serq-bench-cold-")
                    try:
                        times[name].append(cpu(cmd, dict(os.environ, XDG_CACHE_HOME=cold_home)))
                    finally:
                        shutil.rmtree(cold_home, ignore_errors=True)
                else:
                    times[name].append(cpu(cmd, pyc if cache == "pyc" else warm))
    finally:
        shutil.rmtree(warm_home, ignore_errors=True)
        shutil.rmtree(pyc_dir, ignore_errors=True)
    print(f"CPU seconds (user + sys), median (min-max) of {rounds} interleaved rounds; target {TARGET} s")
    for name, _, _ in rows:
        t = times[name]
        med = statistics.median(t)
        mark = "" if "floor" in name or "cold" in name or "pyc" in name else ("  ok" if med <= TARGET else "  over")
        print(f"  {name:<26} {med:6.3f}  ({min(t):.3f}-{max(t):.3f}){mark}")


if __name__ == "__main__":
    main()
