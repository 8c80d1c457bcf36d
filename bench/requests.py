"""Requests per CPU second, as a user running a workload feels it (issue 49), against a baseline
commit run in the same script, and how an iteration's cost grows with the running requests.

    .venv/bin/python bench/requests.py        # REQ_ROUNDS=3 REQ_SIZES=10000,100000 BASELINE=1c4cdf6
                                              # REQ_PROGRAMS=blis_shared (those alone) REQ_RUNNING= (no part 2)

1. `serq run PROGRAM --arrivals N --quiet` for ../shared/bench/blis_shared.sq (the workload shared
   with BLIS, whose figures ../shared/bench/README.md records: BLIS's fastest mode 8,500-9,000
   requests per CPU second) and examples/single-turn/vllm_single_turn.sq (the goal: 10,000 at
   100,000 requests), each a child process (user + system CPU from os.wait4, start-up included),
   this checkout and BASELINE in interleaved rounds (this, baseline, this, baseline, ...): the
   median requests per CPU second of each and the median ratio with its min and max. BASELINE (a
   commit of this repository, default the main issue 49 was measured against) is checked out in a
   temporary worktree and run by this venv's Python, so both sides have the same dependencies;
   both trees' bytecode is compiled first (compiled()). Every request of a run is answered (the
   runs drain), so N / CPU is requests per CPU second. Each program's start-up (a run of one
   request: imports, parse, link, report) is printed first, and beside each ratio the ratio of
   the CPU beyond it (each side's run less its start-up's median): the start-up is the same in
   both trees, and a sixth of a 10,000-request run of blis_shared.sq on a slow machine.
2. The cost of one iteration planned alone (fast-forward off: every iteration scheduled, costed and
   applied, as vLLM's loop does) with 16, 64, 256 and 1,024 requests decoding, in process: a batch of
   that many sessions, each a 16-token prompt and 4,096 output tokens, KV and seats to spare; the
   microseconds an iteration (the run's CPU over its iterations), and the iteration alone (the CPU
   of the 2,048 iterations an output of 4,096 has beyond one of 2,048, over them: the sessions'
   arrivals, admissions, ends and report cancel out), and the ratio of the largest to the smallest
   of each. Flat is the goal (within 1.5x); today it grows with the running count.
3. Runs that preempt (a KV pool too small for the load), in process: the engine path (enginepath.py,
   which takes preemptions since e12a169; before, such a run was made again from its start on the
   general path) against the general path (Sim.engine_path off) in interleaved rounds, each run's
   report checked the same; the median ratio of CPU (REQ_PREEMPT= skips this part).
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import ROOT, child, cpu, spread  # noqa: E402

ROUNDS = int(os.environ.get("REQ_ROUNDS", 3))
SIZES = [int(x) for x in os.environ.get("REQ_SIZES", "10000,100000").split(",") if x.strip()]
BASELINE = os.environ.get("BASELINE", "1c4cdf6")
RUNNING = [int(x) for x in os.environ.get("REQ_RUNNING", "16,64,256,1024").split(",") if x.strip()]
PREEMPT = os.environ.get("REQ_PREEMPT", "1") != ""
PROGRAMS = [os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "blis_shared.sq")),
            os.path.join(ROOT, "examples", "single-turn", "vllm_single_turn.sq")]
ONLY = [x for x in os.environ.get("REQ_PROGRAMS", "").split(",") if x.strip()]  # e.g. blis_shared: those alone
if ONLY:
    PROGRAMS = [p for p in PROGRAMS if any(x in os.path.basename(p) for x in ONLY)]
RUN = "import sys; from serq.cli import main; sys.exit(main(sys.argv[1:]))"


def worktree(commit: str) -> str:
    """A checkout of `commit` in a temporary folder (git worktree), removed at the end."""
    where = tempfile.mkdtemp(prefix="serq-baseline-")
    os.rmdir(where)
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", where, commit], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return where


def compiled(tree: str):
    """serq's bytecode written for `tree`: where PYTHONDONTWRITEBYTECODE is set (these machines), a
    fresh worktree, or a module edited since `make install`, is compiled from source at every run
    (~0.07 CPU s a run for the whole package: 5% of 10,000 requests), which a user's install does
    not pay (the Makefile compiles serq)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "serq")], check=True,
                   stdout=subprocess.DEVNULL)


def serq_cpu(tree: str, argv: list) -> float:
    env = dict(os.environ, PYTHONPATH=tree)
    secs, _, rc, _, err = child([sys.executable, "-c", RUN, *argv], cwd=tree, env=env)
    if rc != 0:
        sys.exit(f"bench/requests.py: `serq {' '.join(argv)}` in {tree} failed ({rc}): {err.strip()[-400:]}")
    return secs


def requests_per_cpu(base: str | None):
    print(f"requests per CPU second, this checkout against {BASELINE if base else '(no baseline)'}, "
          f"{ROUNDS} interleaved rounds, medians (min, max):")
    for prog in PROGRAMS:
        if not os.path.isfile(prog):
            print(f"  {prog}: not here, skipped")
            continue
        name = os.path.basename(prog)
        # a run's start-up (imports, parse, link, one request and its report): in every figure
        # below, and a larger share of a shorter run; the work beyond it is read beside each ratio
        one = ["run", prog, "--arrivals", "1", "--quiet", "--json"]
        s_mine, s_theirs = [], []
        for _ in range(ROUNDS):
            s_mine.append(serq_cpu(ROOT, one))
            if base:
                s_theirs.append(serq_cpu(base, one))
        s0, s1 = statistics.median(s_mine), statistics.median(s_theirs) if base else None
        print(f"  {name:<24} start-up (1 request): {s0:.3f} CPU s" + (f"   baseline {s1:.3f}" if base else ""),
              flush=True)
        for n in SIZES:
            argv = ["run", prog, "--arrivals", str(n), "--quiet", "--json"]
            mine, theirs = [], []
            for _ in range(ROUNDS):
                mine.append(serq_cpu(ROOT, argv))
                if base:
                    theirs.append(serq_cpu(base, argv))
            line = f"  {name:<24} {n:>8,} requests: {n / statistics.median(mine):8,.0f} req/CPU s"
            if base:
                ratios = [b / a for a, b in zip(mine, theirs)]
                line += f"   baseline {n / statistics.median(theirs):8,.0f}   ratio {spread(ratios)}"
                beyond = [(b - s1) / (a - s0) for a, b in zip(mine, theirs) if a > s0]
                if beyond:  # (a run of a few requests may cost no more than the start-up's median)
                    line += f"   beyond the start-up {statistics.median(beyond):.2f}x"
            print(line, flush=True)


def scaling_program(n: int, out: int = 4096) -> str:
    return f"""fn main() {{
  device gpu {{ kv cap {16 * (n + 8) * 260}; }}
  engine llm on gpu {{
    reqs cap {n};
    tokens cap {max(2048, n)};
    request (p, o) {{
      prefill (p) growing kv;
      decode (o - 1) growing kv;
    }}
    schedule {{
      advance running;
      admit waiting while (running.preempted == 0) taking reqs (1), kv (p + 1);
    }}
    execute (0.003 + 0.0000001 * (batch.kv_decode + batch.kv_prefill) + 0.00004 * batch.tokens);
  }}
  pool kv on gpu {{ block 16; evict lru; preempt lifo; }}
  pool reqs on llm {{ queue fifo; }}
  workload {{
    arrive batch({n});
    hidden o;
    turn {{ Size p = 16; Size o = {out}; }}
  }}
  server {{ llm (p, o); }}
}}
"""


def per_iteration():
    if not RUNNING:  # REQ_RUNNING= : the first part alone
        return
    from serq import api
    from serq.interp.sim import Sim
    from serq.ir import model as I
    print("one iteration planned alone (fast-forward off), microseconds of CPU, median of "
          f"{ROUNDS} rounds (min, max):")
    folder = tempfile.mkdtemp(prefix="serq-bench-")
    us = {}
    try:
        progs = {}
        for n in RUNNING:
            for out in (4096, 2048):
                path = os.path.join(folder, f"decode_{n}_{out}.sq")
                with open(path, "w") as fh:
                    fh.write(scaling_program(n, out))
                progs[n, out] = api.load(path, {})
        samples = {n: [] for n in RUNNING}
        marginal = {n: [] for n in RUNNING}
        for _ in range(ROUNDS):
            for n in RUNNING:
                got = {}
                for out in (4096, 2048):
                    def one(out=out):
                        sim = Sim(progs[n, out], I.Settings(seed=1))
                        sim.fast_forward = False
                        sim.run(None)
                        return sum(e.iterations for e in sim.engines)
                    got[out] = cpu(one)
                (secs, iters), (secs2, iters2) = got[4096], got[2048]
                samples[n].append(1e6 * secs / iters)
                # the extra 2,048 decode iterations alone: the sessions' arrivals, admissions, ends and
                # report, the same in both runs, cancel out
                marginal[n].append(1e6 * (secs - secs2) / (iters - iters2))
        for n in RUNNING:
            us[n] = statistics.median(samples[n]), statistics.median(marginal[n])
            print(f"  {n:>5} running: {us[n][0]:9.1f} us an iteration (min {min(samples[n]):.1f}, "
                  f"max {max(samples[n]):.1f}); the iteration alone {us[n][1]:.1f} us (the 2,048 more of an "
                  f"output of 4,096 than of 2,048: min {min(marginal[n]):.1f}, max {max(marginal[n]):.1f})",
                  flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    lo, hi = min(RUNNING), max(RUNNING)
    for j, what in ((0, "a run's CPU over its iterations"), (1, "the iteration alone")):
        growth = us[hi][j] / us[lo][j]
        print(f"  {hi} against {lo}, {what}: {growth:.2f}x "
              f"({'flat: within 1.5x' if growth <= 1.5 else 'NOT flat (goal: within 1.5x)'})")


# (program, its inputs, --arrivals): pools small enough that growths preempt, the first a few running
# requests, the second a cohort of dozens
PREEMPTING = [("vllm_single_turn.sq", {"blocks": 200, "rate": 6}, 4000),
              ("blis_shared.sq", {"blocks": 2000, "rate": 120, "output": 700}, 1500)]


def preempting():
    if not PREEMPT:
        return
    import json
    from serq import api
    from serq.interp.sim import Sim
    from serq.ir import model as I
    print(f"runs that preempt, in process: the engine path against the general path, {ROUNDS} interleaved "
          "rounds, medians (min, max):")
    for name, inputs, n in PREEMPTING:
        prog_path = next((p for p in PROGRAMS if os.path.basename(p) == name), None)
        if prog_path is None or not os.path.isfile(prog_path):
            print(f"  {name}: not here, skipped")
            continue
        prog = api.load(prog_path, inputs)
        secs = {True: [], False: []}
        reports, preempted = {}, 0
        for _ in range(ROUNDS):
            for on in (True, False):
                sim = Sim(prog, I.Settings(seed=1, arrivals=n))
                sim.engine_path = on
                t, rep = cpu(sim.run)
                secs[on].append(t)
                rep.pop("_sim", None)
                reports[on] = json.dumps(rep, sort_keys=True, default=str)
                if on:
                    kept = sim.engine_path  # False: made again on the general path
                    preempted = sum(m.preempted for m in sim.pools)
        same = "the same report" if reports[True] == reports[False] else "REPORTS DIFFER"
        ratios = [g / e for e, g in zip(secs[True], secs[False])]
        print(f"  {name:<24} {inputs}, {n:,} requests, {preempted:,} preemptions: engine path "
              f"{1e6 * statistics.median(secs[True]) / n:.0f} us a request, general "
              f"{1e6 * statistics.median(secs[False]) / n:.0f}: {spread(ratios)}; {same}"
              f"{'' if kept else ' (the engine path made it again on the general path)'}", flush=True)


def main():
    base = None
    if BASELINE and BASELINE != "none":
        try:
            base = worktree(BASELINE)
        except (subprocess.CalledProcessError, OSError) as exc:
            print(f"bench/requests.py: no baseline ({BASELINE}: {exc}); this checkout alone")
    compiled(ROOT)
    if base:
        compiled(base)
    try:
        requests_per_cpu(base)
    finally:
        if base:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    per_iteration()
    preempting()


if __name__ == "__main__":
    main()
