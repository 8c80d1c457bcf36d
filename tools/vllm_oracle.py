"""Check serQ's vLLM v1 program against scenarios recorded from vLLM's real scheduler.

    python tools/vllm_oracle.py check [--ref] FILE...

Each FILE is a result file (tools/oracle/results/*.json, or any of that format): a scenario's
config and requests, and what vLLM did. Each scenario runs through examples/oracle/vllm_request.sq
(each request a session's turn of a trace written beside a copy of the program); the tool prints,
per scenario, `agree` or the first request and field that differ, then `K/N scenarios agree`.

With `--ref` the scenarios run through the reference kernel (serq/ref/, docs/lean.md) instead
of the interpreter, with the same output.

Requests chained by `arrive_after` are one session's turns (the next prompt extends the last
prompt and its output); a prompt whose first token differs is a forced miss (a session of its own).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

PROGRAM = os.path.join(ROOT, "examples", "oracle", "vllm_request.sq")
# the same request on a content-addressed cache (docs/reference/content.md), which the reference
# kernel does not have: the interpreter runs this one, `--ref` the one above
SHARED = os.path.join(ROOT, "examples", "oracle", "vllm_shared.sq")
TOKEN = 7  # the token the driver's fake model runner samples (tools/oracle/README.md)
FIELDS = ("first_token_step", "last_token_step", "num_preemptions", "num_cached_tokens_first_admission")
CONFIG_INPUTS = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
                 "long_prefill_token_threshold", "scheduler_reserve_full_isl", "enable_prefix_caching")


def sessions_of(requests: list[dict], outcome: dict[str, dict]):
    """Group the requests into sessions and turns: [(request ids in turn order)], with the trace rows."""
    by_id = {r["id"]: r for r in requests}
    session_of: dict[str, list] = {}
    sessions: list[list] = []
    miss: set[str] = set()
    for r in requests:
        aa = r.get("arrive_after")
        prev = aa["request_id"] if aa else None
        toks, ptoks = r.get("prompt_token_ids"), by_id[prev].get("prompt_token_ids") if prev else None
        if toks is not None and ptoks is not None and toks[:1] != ptoks[:1]:
            # a prompt whose first token differs shares nothing: a forced miss, as a session of its own
            # (sessions are numbered in the scenario's order, which orders same-step arrivals)
            miss.add(r["id"])
            s = [r["id"]]
            sessions.append(s)
        elif prev is not None and prev in session_of and session_of[prev][-1] == prev:
            s = session_of[prev]
            s.append(r["id"])
        else:
            s = [r["id"]]
            sessions.append(s)
        session_of[r["id"]] = s
    content = contents(requests, {rid: o["arrival_step"] for rid, o in outcome.items()})
    rows = []
    for si, s in enumerate(sessions):
        last = None
        for ti, rid in enumerate(s):
            r = by_id[rid]
            toks = r.get("prompt_token_ids")
            plen = len(toks) if toks is not None else r["prompt_len"]
            arrival = outcome[rid]["arrival_step"]
            forced = 1 if rid in miss else 0
            if ti == 0:
                think, new = arrival, plen
            else:
                prev = outcome[last]
                think = arrival - (prev["finish_step"] + 1)  # from the previous answer, at the end of its step
                prompt_prev = by_id[last]
                ptoks = prompt_prev.get("prompt_token_ids")
                ctx_len = (len(ptoks) if ptoks is not None else prompt_prev["prompt_len"]) + prompt_prev["max_tokens"]
                new = plen - ctx_len
            stream, parent, common = content[rid]
            rows.append({"session": f"s{si}", "turn": ti, "new": new, "out": r["max_tokens"], "think": think,
                         "forced": forced, "stream": stream, "parent": parent, "common": common, "_id": rid})
            last = rid
    return sessions, rows


def contents(requests: list[dict], arrival: dict | None = None) -> dict:
    """Each request's content as the trace says it (docs/reference/content.md): a stream of its own
    (numbered from 1 in the scenario's order) whose first `common` tokens are those of the request
    that arrived before it (`arrival`: request id -> step; same-step arrivals in the scenario's
    order) it shares the longest common prefix with (`parent`; 0 and 0 when it shares none). The
    tokens are the prompt's and the outputs' (the driver samples TOKEN), as vLLM hashes both; taking
    the longest prefix with any earlier request makes every pair's common prefix exact. A request
    given by its length alone shares nothing (the driver gives it distinct tokens)."""
    order = sorted(range(len(requests)), key=lambda i: ((arrival or {}).get(requests[i]["id"], 0), i))
    seqs: list = []
    out = {}
    for i in order:
        r = requests[i]
        toks = r.get("prompt_token_ids")
        best, common = 0, 0
        if toks is not None:
            toks = list(toks) + [TOKEN] * r["max_tokens"]
            for j, q in seqs:
                n = 0
                for a, b in zip(toks, q):
                    if a != b:
                        break
                    n += 1
                if n > common:
                    best, common = j + 1, n
            seqs.append((i, toks))
        out[r["id"]] = (i + 1, best, common)
    return out


def scenario_inputs(path: str, result: dict) -> list[dict]:
    """The requests as the scenario gave them (token ids, arrive_after): from the result file, or
    from the scenario of the same name in a sibling `scenarios/` folder when the result lacks them."""
    if "inputs" in result:
        return result["inputs"]
    name = result.get("name") or os.path.splitext(os.path.basename(path))[0]
    here = os.path.dirname(os.path.abspath(path))
    for cand in (os.path.join(here, "..", "scenarios", name + ".json"), os.path.join(here, name + ".scenario.json")):
        if os.path.isfile(cand):
            with open(cand, encoding="utf-8") as fh:
                return json.load(fh)["requests"]
    return result["requests"]


@contextlib.contextmanager
def scenario_program(result: dict, path: str = "", shared: bool = False):
    """One scenario as the program reads it, while the context lasts: (the linked program, the
    sessions [(request ids in turn order)], the trace rows, the horizon); its config as the inputs,
    its requests as the trace beside a copy of the program (which a run reads)."""
    from serq import api
    cfg = result["config"]
    outcome = {r["id"]: r for r in result["requests"]}
    requests = scenario_inputs(path, result) if path else result.get("inputs", result["requests"])
    sessions, rows = sessions_of(requests, outcome)
    tmp = tempfile.mkdtemp(prefix="serq-oracle-")
    try:
        shutil.copy(SHARED if shared else PROGRAM, os.path.join(tmp, "vllm_request.sq"))
        with open(os.path.join(tmp, "trace.csv"), "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            cols = ["session", "turn", "new", "out", "think", "forced"] + (["stream", "parent", "common"] if shared else [])
            w.writerow(cols)
            for row in rows:
                w.writerow([row[k] for k in cols])
        inputs = {k: float(cfg[k]) for k in CONFIG_INPUTS if k in cfg}
        inputs["sessions"] = float(len(sessions))
        prog = api.load(os.path.join(tmp, "vllm_request.sq"), inputs)
        horizon = float(result.get("max_steps") or result.get("summary", {}).get("max_steps") or 100000)
        yield prog, sessions, rows, horizon
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_scenario(result: dict, path: str = "", ref: bool = False):
    """serQ's values for each request of one recorded scenario: {id: {field: value}}; with `ref`,
    the reference kernel's."""
    from serq import api
    from serq.ir.model import Settings
    outcome = {r["id"]: r for r in result["requests"]}
    with scenario_program(result, path, shared=not ref) as (prog, sessions, rows, horizon):
        if ref:
            obs_rows = _ref_observations(prog, rows, len(sessions), int(horizon))
        else:
            rep = api.run(prog, Settings(horizon=horizon))
            sim = rep.pop("_sim")
            obs_rows = {name: [(serial, turn, v) for (t, serial, turn), v in zip(ser.rows, ser.v)]
                        for name, ser in sim.obs.items()}
    serial_key = {}
    for si, s in enumerate(sessions):
        for ti, rid in enumerate(s):
            serial_key[(si, ti)] = rid
    got: dict[str, dict] = {rid: {} for rid in outcome}
    names = {"first_token": "first_token_step", "last_token": "last_token_step", "preemptions": "num_preemptions",
             "first_hit": "num_cached_tokens_first_admission"}
    for obs, field in names.items():
        for serial, turn, v in obs_rows.get(obs, ()):
            rid = serial_key.get((serial, turn))
            if rid is not None:
                got[rid][field] = int(v)
    return got


def ref_workload(p, rows, n):
    """The reference kernel's workload of a scenario: the trace's rows, every session at 0
    (`arrive batch`)."""
    from serq import ref
    from serq.ref import ir as R
    trace: list = [[] for _ in range(n)]
    for row in rows:
        trace[int(row["session"][1:])].append(R.Row(row["new"], row["out"], row["think"], row["forced"]))
    return ref.workload(p, n, trace=trace)


def _ref_observations(prog, rows, n, horizon):
    """The reference kernel's observations, {name: [(session, turn, value)]}."""
    from serq import ref
    p = ref.convert(prog)
    res = ref.evaluate(p, ref_workload(p, rows, n), horizon=horizon)
    out: dict = {}
    for name, v, _t, sid, turn in res.observations:
        out.setdefault(name, []).append((sid, turn, v))
    return out


def compare(result: dict, got: dict):
    """The first (request, field, vLLM's, serQ's) that differ, or None."""
    for r in result["requests"]:
        for f in FIELDS:
            want = r.get(f)
            have = got.get(r["id"], {}).get(f)
            if result.get("expect_stall") and want is None:
                continue
            if want != have:
                return r["id"], f, want, have
    return None


def check(paths: list[str], ref: bool = False) -> int:
    agree = 0
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            result = json.load(fh)
        name = result.get("name", os.path.basename(p))
        try:
            got = run_scenario(result, p, ref)
        except Exception as exc:  # a scenario the program cannot run is a disagreement, said plainly
            print(f"{name}: error: {exc}")
            continue
        diff = compare(result, got)
        if diff is None:
            agree += 1
            print(f"{name}: agree")
        else:
            rid, f, want, have = diff
            print(f"{name}: request {rid}: {f} vLLM {want}, serQ {have}")
    print(f"{agree}/{len(paths)} scenarios agree")
    return 0 if agree == len(paths) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="vllm_oracle.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="run result files through examples/oracle/vllm_request.sq")
    c.add_argument("--ref", action="store_true", help="run the reference kernel (serq/ref/) instead")
    c.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        return check(args.files, args.ref)
    return 2


if __name__ == "__main__":
    sys.exit(main())
