"""Reports of every example, recorded so that a change meant to alter only speed or memory is seen to
change nothing else (issue 12, "nothing changes but time"): `serq run`'s text report and its JSON
report, byte for byte, for each case below, at its seed and horizon.

    python tools/golden_reports.py            # compare with tests/golden/reports/, exit 1 on a change
    python tools/golden_reports.py --update   # record them

tests/test_golden_reports.py runs the comparison in the suite.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

OUT = os.path.join(ROOT, "tests", "golden", "reports")

# each example's run: long enough that its engine admits, grows, preempts and caches where the
# program can, short enough that the suite runs them all in about half a minute
HORIZON = {"mg1": None, "ps": None, "closed": 400, "replica": 200, "routing": 20, "vllm": 200,
           "vllm_chat": 200, "vllm_chat_shared": 200, "vllm_single_turn": 60, "vllm_subagents": 120,
           "vllm_replay": 60, "vllm_request": 200, "vllm_shared": 200, "llmd_nixl_pull": 20,
           "vllm_nixl_push": 20, "gpu_testbeds": 40, "sglang": 30, "tgi": 30, "tensorrt_llm": 30}
ARRIVALS = {"mg1": 20000, "ps": 20000}
# more runs of one example: its inputs (each routing policy, the testbeds' other card) and seeds
EXTRA = [("multi-turn/routing.sq", ["--set", f"policy={k}"]) for k in range(1, 5)] + [
    ("vendors/gpu_testbeds.sq", ["--set", "card=1"]),
    ("multi-turn/vllm.sq", ["--seed", "7"]),
    ("single-turn/mg1.sq", ["--seed", "3", "--set", "c2=4"]),
    ("sizing/vllm.sq", ["--model", "qwen3-30b-a3b", "--gpu", "h200", "--set", "rate=20"]),   # the catalogue's inputs
]


def cases() -> list:
    """[(case name, argv after `serq run`)]: every example under examples/ (found, not listed), then EXTRA."""
    out = []
    for p in sorted([q for q in glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q]):
        rel = os.path.relpath(p, os.path.join(ROOT, "examples")).replace(os.sep, "/")
        out.append((rel, _argv(rel, [])))
    for rel, more in EXTRA:
        out.append((rel + " " + " ".join(more), _argv(rel, more)))
    return out


def _argv(rel: str, more: list) -> list:
    stem = os.path.splitext(os.path.basename(rel))[0]
    argv = [os.path.join("examples", rel), "--quiet"]
    if stem in ARRIVALS:
        argv += ["--arrivals", str(ARRIVALS[stem])]
    else:
        argv += ["--horizon", str(HORIZON.get(stem, 50))]
    return argv + more


def file_name(case: str) -> str:
    return case.replace("/", "__").replace(" ", "_").replace("=", "-").replace(".sq", "")


def reports(argv: list) -> tuple:
    """(text report, JSON report) of `serq run` on argv, run from the repository's root."""
    from serq.cli import main
    outs = []
    for extra in ([], ["--json"]):
        buf = io.StringIO()
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            with contextlib.redirect_stdout(buf):
                rc = main(["run"] + argv + extra)
        finally:
            os.chdir(cwd)
        if rc not in (0, None):
            raise RuntimeError(f"serq run {' '.join(argv)} exited {rc}")
        outs.append(buf.getvalue())
    # the program's hash says which text ran, not what the run did: an example's comment changes it
    js = json.loads(outs[1])
    js["program"].pop("sha256", None)
    return outs[0], json.dumps(js, indent=1) + "\n"


def check(update: bool = False, only=None) -> list:
    """The cases whose reports differ from the recorded ones (all of them recorded with `update`)."""
    bad = []
    os.makedirs(OUT, exist_ok=True)
    for case, argv in cases():
        if only is not None and case not in only:
            continue
        text, js = reports(argv)
        base = os.path.join(OUT, file_name(case))
        if update:
            for ext, body in ((".txt", text), (".json", js)):
                with open(base + ext, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(body)
            continue
        for ext, body in ((".txt", text), (".json", js)):
            try:
                with open(base + ext, encoding="utf-8") as fh:
                    want = fh.read()
            except FileNotFoundError:
                want = None
            if want != body:
                bad.append(case + ext)
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args(argv)
    bad = check(args.update)
    if args.update:
        print(f"recorded {len(cases())} cases in {os.path.relpath(OUT, ROOT)}")
        return 0
    for b in bad:
        print(f"differs: {b}")
    print(f"{len(cases()) * 2 - len(bad)}/{len(cases()) * 2} reports as recorded")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
