"""A fuzz campaign: many cases of tests/fuzzgen.py in a pool of workers, each under a time budget.

    python tools/fuzz.py --cases 20000 --jobs 2 --timeout 10 --out fuzz-out [--seed S]
                         [--profile full|suite] [--on SWITCH]... [--target check|run|ir|verify]

Each case ends with a report, a diagnostic or a usage error, or is a failure: a traceback, JSON
that a strict parser refuses, or a hang. A case's budget is --timeout seconds of its worker's CPU
time (wall time only where /proc is not, and at most 6 times the budget of wall time either way),
so a case that is merely slow on a loaded machine is not charged for waiting for a core; and a
case over its budget is run again, alone (no other case running) with --retry-factor times the
budget, and is a hang only if it is over that too. A retry that clears a case is printed, and
counted in the figures. A case that `serq run` itself says is too slow to finish (its slow-run
note: a program whose own values, a gap or a chunk cap of 1e-300, make it endless) is stopped
there and is a slow program, not a failure: printed, counted, and listed in OUT/slow.txt with its
note and program (tests/fuzzrun.py says how it is told from a hang). Failures are grouped by cause
(the exception's type and the innermost serQ function, or "hang@" the function it was stuck in);
each cause's smallest case, shrunk further by deleting lines while the cause stays, is written to
OUT/NN-CAUSE/ (case.sq and the trace beside it, mutated.json for an IR case, command.txt,
evidence.txt, case.json). The figures go to stdout and OUT/summary.txt. Exit 1 if anything failed.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import os
import queue
import re
import shutil
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

import fuzzgen  # noqa: E402
import fuzzrun  # noqa: E402


def _size(case: dict) -> int:
    return len(case["program"]) + len(json.dumps(case.get("ir", []))) + len(" ".join(case["argv"]))


def shrink(worker: fuzzrun.Worker, case: dict, cause: str, budget: int) -> tuple[dict, dict | None]:
    """Delete lines, then IR mutations and changes of settings, while the case keeps its cause.
    At most `budget` runs; hangs are not shrunk (each try costs a whole timeout)."""
    best, verdict = case, None
    if cause.startswith("hang"):
        return best, verdict
    tries = 0

    def same(c):
        nonlocal tries
        tries += 1
        v = worker.run(c)
        return v if not v["ok"] and v["cause"] == cause else None

    progress = True
    while progress and tries < budget:
        progress = False
        lines = best["program"].split("\n")
        for i in range(len(lines)):
            if tries >= budget:
                break
            c = dict(best, program="\n".join(lines[:i] + lines[i + 1:]))
            v = same(c)
            if v:
                best, verdict, progress = c, v, True
                break
        for i in range(len(best.get("ir", []))):
            if progress or tries >= budget:
                break
            c = dict(best, ir=best["ir"][:i] + best["ir"][i + 1:])
            v = same(c)
            if v:
                best, verdict, progress = c, v, True
    return best, verdict


def _slug(cause: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", cause)[:80]


def write(out: str, n: int, cause: str, case: dict, verdict: dict, count: int) -> str:
    d = os.path.join(out, f"{n:02d}-{_slug(cause)}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "case.sq"), "w", encoding="utf-8") as fh:
        fh.write(case["program"])
    for name, text in case.get("files", {}).items():
        with open(os.path.join(d, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    for name, text in verdict.get("artifacts", {}).items():
        with open(os.path.join(d, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    with open(os.path.join(d, "command.txt"), "w", encoding="utf-8") as fh:
        fh.write(fuzzrun.command(case, verdict) + "\n"
                 "# or, from the repository, the whole case (an IR case writes ./mutated.json):\n"
                 f"python tests/fuzzrun.py --replay {os.path.join(d, 'case.json')}\n")
    with open(os.path.join(d, "evidence.txt"), "w", encoding="utf-8") as fh:
        fh.write(f"{cause}\n{count} case(s) of this cause\n\n{verdict['detail']}\n")
    with open(os.path.join(d, "case.json"), "w", encoding="utf-8") as fh:
        json.dump(case, fh, indent=1)
    return d


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds of CPU time a case may take (wall time where /proc is not)")
    p.add_argument("--seed", default="1", help="the campaign's seed: case i is random_case(f'{seed}:{i}')")
    p.add_argument("--out", default="fuzz-out")
    p.add_argument("--profile", choices=["full", "suite"], default="full")
    switches = [f for f in fuzzgen.Gen.__dataclass_fields__ if f != "max_mutations"]
    p.add_argument("--on", action="append", default=[], choices=switches, metavar="SWITCH",
                   help="turn a switch of tests/fuzzgen.Gen on over the profile (with --profile suite: "
                        "is a family fixed?)")
    p.add_argument("--target", choices=["check", "run", "ir", "verify"],
                   help="only this target (verify: only when asked, a program with claims, a small bound)")
    p.add_argument("--shrink", type=int, default=60, help="runs spent shrinking each cause's case")
    p.add_argument("--retry-factor", type=float, default=fuzzrun.RETRY_FACTOR,
                   help="a case over its budget is run again alone with this many times the budget "
                        f"(default {fuzzrun.RETRY_FACTOR:g}); a hang only if over that too")
    args = p.parse_args(argv)
    gen = fuzzgen.FULL if args.profile == "full" else fuzzgen.SUITE
    gen = dataclasses.replace(gen, **{s: True for s in args.on})

    # serQ's watch looks after 10 s of CPU; sooner where the retry's budget would not reach it
    from serq.cli import SLOW_AFTER
    slow_after = min(SLOW_AFTER, args.timeout * args.retry_factor / 2)
    workers: queue.Queue = queue.Queue()
    for _ in range(args.jobs):
        workers.put(fuzzrun.Worker(args.timeout, slow_after=slow_after))
    causes: dict[str, list] = {}  # cause -> [count, smallest case, its verdict]
    lock = threading.Lock()
    figures = {"tried": 0, "ok": 0, "seconds": 0.0, "by_target": {}, "ended": {}, "retried": 0, "cleared": 0,
               "retried_slow": 0}
    slow: list = []  # (case number, case, serQ's note) of the slow programs
    gate = fuzzrun.Gate()  # cases run side by side; a suspected hang's retry runs alone
    t0 = time.monotonic()

    def one(i):
        case = fuzzgen.random_case(f"{args.seed}:{i}", gen, args.target)
        w = workers.get()
        try:
            v = fuzzrun.run_retrying(w, case, args.retry_factor, gate)
        finally:
            workers.put(w)
        with lock:
            if "retried" in v:
                figures["retried"] += 1
                slow_found = bool(v.get("slow"))  # by serQ's note, in the retry: counted with the slow programs
                figures["cleared"] += (v["ok"] and not slow_found) or (not v["ok"] and not v["cause"].startswith("hang"))
                figures["retried_slow"] += slow_found
                print(f"[{time.monotonic() - t0:7.0f} s] case {args.seed}:{i} ({case['target']}, {case['seed']}): "
                      f"{v['retried']}", flush=True)
            figures["tried"] += 1
            figures["seconds"] += v.get("seconds", 0.0)
            figures["by_target"][case["target"]] = figures["by_target"].get(case["target"], 0) + 1
            if v.get("slow"):
                slow.append((i, case, v["slow"]))
                print(f"[{time.monotonic() - t0:7.0f} s] case {args.seed}:{i} ({case['target']}, {case['seed']}): "
                      f"a slow program, not a failure: {v['slow']}", flush=True)
            elif v["ok"]:
                figures["ok"] += 1
                last = {0: "a report or ok", 1: "a diagnostic", 2: "a usage error"}[v["exits"][-1]]
                key = f"{case['target']} ended in {last}"
                figures["ended"][key] = figures["ended"].get(key, 0) + 1
            else:
                entry = causes.setdefault(v["cause"], [0, None, None])
                entry[0] += 1
                if entry[1] is None or _size(case) < _size(entry[1]):
                    entry[1], entry[2] = case, v
            if figures["tried"] % 200 == 0:
                print(f"[{time.monotonic() - t0:7.0f} s] {figures['tried']} cases, "
                      f"{sum(e[0] for e in causes.values())} failures, {len(causes)} causes", flush=True)

    with cf.ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(one, range(args.cases)))

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    w = workers.get()
    lines = []
    hangs = sum(e[0] for c, e in causes.items() if c.startswith("hang"))
    fails = sum(e[0] for e in causes.values())
    lines.append(f"programs tried: {figures['tried']} ({', '.join(f'{k} {v}' for k, v in sorted(figures['by_target'].items()))}),"
                 f" {time.monotonic() - t0:.0f} s, profile {args.profile}{''.join(' +' + s for s in args.on)},"
                 f" seed {args.seed}, timeout {args.timeout:g} s of CPU a case")
    lines.append(f"passed: {figures['ok']}; slow programs: {len(slow)}; failures: {fails} "
                 f"(tracebacks and broken output {fails - hangs}, hangs {hangs}); distinct causes: {len(causes)}")
    lines.append("  " + "; ".join(f"{k}: {v}" for k, v in sorted(figures["ended"].items())))
    if figures["retried"]:
        lines.append(f"  suspected hangs retried alone with {args.retry_factor:g} times the budget: "
                     f"{figures['retried']}; cleared by the retry (slow, not hung): {figures['cleared']}"
                     + (f"; slow programs by serQ's note: {figures['retried_slow']}" if figures["retried_slow"] else ""))
    if slow:
        lines.append(f"  slow programs (serq run's own note: too slow to finish; not failures): {len(slow)}"
                     f"  ->  {os.path.relpath(os.path.join(args.out, 'slow.txt'))}")
        with open(os.path.join(args.out, "slow.txt"), "w", encoding="utf-8") as fh:
            for i, case, note in sorted(slow, key=lambda s: s[0]):
                fh.write(f"case {args.seed}:{i} ({case['target']}, {case['seed']}, changes {case.get('changes')}, "
                         f"ir {case.get('ir')})\n$ {fuzzrun.command(case)}\n{note}\n--- case.sq\n"
                         f"{case['program'].rstrip()}\n\n")
    for n, (cause, (count, case, verdict)) in enumerate(sorted(causes.items(), key=lambda kv: -kv[1][0]), 1):
        small, v2 = shrink(w, case, cause, args.shrink)
        d = write(args.out, n, cause, small, v2 or verdict, count)
        lines.append(f"  {count:6d}  {cause}  ->  {os.path.relpath(d)}")
    w.close()
    while not workers.empty():
        workers.get().close()
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "summary.txt"), "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return 1 if causes else 0


if __name__ == "__main__":
    sys.exit(main())
