"""Check serQ's vLLM v1 program against scenarios recorded from vLLM's real scheduler.

    python tools/vllm_oracle.py check [--ref] [--per-session] [--steps] FILE...

Each FILE is a result file (tools/oracle/results/*.json, or any of that format): a scenario's
config and requests, and what vLLM did. Each scenario runs through examples/oracle/vllm_shared.sq
(each request a session's turn of a trace written beside a copy of the program); the tool prints,
per scenario, `agree` or the first request and field that differ, then `K/N scenarios agree` and
how many of the others differ as expected, differ unexpectedly (or could not run) and, with
--steps, have no steps recorded.

With `--ref` the scenarios run through the reference kernel (serq/ref/, docs/lean.md) instead
of the interpreter, with the same output: through vllm_shared.sq when the kernel's fragment takes
it, else through vllm_request.sq (the same request on the per-session cache; `--per-session` runs it
either way).

With `--steps` every step is compared as well (docs/vllm.md, *Step for step*): step k is vLLM's k-th
`schedule()` call and serQ's iteration that starts at time k; each compares the tokens scheduled to
each request, the requests preempted, the requests finished, and the free KV blocks after the step
(the result's `trace`, or for a result recorded without it the `steps/` file beside `results/`).
The first differing step is printed with both sides.

A scenario whose difference docs/vllm.md explains (*Known divergences*; EXPECTED below, the one
list of them) is printed with `expected (docs/vllm.md, ...): WHY` and does not fail the check;
the exit status is 0 when every other scenario agrees, 1 on any other difference, and 1 when a
scenario EXPECTED to differ agrees (or differs elsewhere): the list is then out of date.

Requests chained by `arrive_after` are one session's turns (the next prompt extends the last
prompt and its output); a prompt whose first token differs is a forced miss (a session of its own).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from typing import NamedTuple, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

PROGRAM = os.path.join(ROOT, "examples", "oracle", "vllm_request.sq")
# the same request on a content-addressed cache (docs/reference/content.md): the interpreter and
# `--ref` run this one; the one above with `--per-session`
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


def run_scenario(result: dict, path: str = "", ref: bool = False, shared: bool = True):
    """serQ's values for each request of one recorded scenario: {id: {field: value}}; with `ref`,
    the reference kernel's. `shared`: through vllm_shared.sq (True) or vllm_request.sq (False)."""
    return run_steps(result, path, ref, steps=False, shared=shared)[0]


def run_steps(result: dict, path: str = "", ref: bool = False, steps: bool = True, shared: bool = True,
              at_least: int = 0):
    """serQ's run of one recorded scenario: ({id: {field: value}}, its steps as StepLog.steps gives
    them, at least `at_least` of them, or None without `steps`); with `ref`, the reference kernel's;
    `shared` as run_scenario's."""
    from serq import api
    from serq.ir.model import Settings
    outcome = {r["id"]: r for r in result["requests"]}
    with scenario_program(result, path, shared=shared) as (prog, sessions, rows, horizon):
        log = None
        if ref:
            obs_rows, log = _ref_observations(prog, rows, len(sessions), int(horizon), steps, shared)
        elif steps:
            from serq.interp.sim import Sim
            sim = Sim(prog, Settings(horizon=horizon))
            sim.fast_forward = False  # every iteration planned as one (Sim.step_log)
            sim.step_log = log = InterpSteps(sim)
            sim.run()
            log.end()
            obs_rows = {name: [(serial, turn, v) for (t, serial, turn), v in zip(ser.rows, ser.v)]
                        for name, ser in sim.obs.items()}
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
    return got, (log.steps(serial_key, at_least) if log is not None else None)


def ref_workload(p, rows, n, shared: bool = False):
    """The reference kernel's workload of a scenario: the trace's rows, every session at 0
    (`arrive batch`); with `shared` (vllm_shared.sq's trace) the content columns too (stream,
    parent, common), as far as the kernel's rows have them."""
    from serq import ref
    from serq.ref import ir as R
    cols = ["new", "out", "think", "forced"] + (["stream", "parent", "common"] if shared else [])
    names = {f.name for f in dataclasses.fields(R.Row)}
    trace: list = [[] for _ in range(n)]
    for row in rows:
        trace[int(row["session"][1:])].append(R.Row(**{k: int(row[k]) for k in cols if k in names}))
    return ref.workload(p, n, trace=trace)


def _ref_observations(prog, rows, n, horizon, steps=False, shared=False):
    """The reference kernel's observations, {name: [(session, turn, value)]}, and with `steps` its
    steps (RefSteps)."""
    from serq import ref
    p = ref.convert(prog)
    wl = ref_workload(p, rows, n, shared)
    log = None
    if steps:
        log = RefSteps(p)
        obs = log.walk(wl, horizon)
    else:
        obs = ref.evaluate(p, wl, horizon=horizon).observations
    out: dict = {}
    for name, v, _t, sid, turn in obs:
        out.setdefault(name, []).append((sid, turn, v))
    return out, log


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


# ---------------------------------------------------------------- step for step


class Step(NamedTuple):
    """One step, as both sides are read: the tokens scheduled to each request ({id: tokens}), the
    requests preempted and those finished (sorted ids), and the free KV blocks after the step."""
    scheduled: dict
    preempted: tuple
    finished: tuple
    free: int

    def __str__(self):
        sched = ", ".join(f"{rid}: {n}" for rid, n in self.scheduled.items())
        return (f"scheduled {{{sched}}}, preempted [{', '.join(self.preempted)}], "
                f"finished [{', '.join(self.finished)}], free blocks {self.free}")


def steps_file(path: str, result: dict) -> Optional[str]:
    """Where the steps of a result recorded without its `trace` are: `steps/NAME.json` beside the
    `results/` folder it is in (tools/oracle/extra/steps/)."""
    name = result.get("name") or os.path.splitext(os.path.basename(path))[0]
    cand = os.path.join(os.path.dirname(os.path.abspath(path)), "..", "steps", name + ".json")
    return cand if os.path.isfile(cand) else None


def vllm_steps(result: dict, path: str = "") -> Optional[list]:
    """vLLM's steps, [Step], step k at index k: from the result's `trace`, or from its steps file
    (a `trace` of the same records, each a list in the file's `fields` order); None when neither is."""
    trace = result.get("trace")
    if trace is None and path:
        sf = steps_file(path, result)
        if sf is not None:
            with open(sf, encoding="utf-8") as fh:
                data = json.load(fh)
            trace = [dict(zip(data["fields"], t)) for t in data["trace"]]
    if trace is None:
        return None
    out = []
    for k, t in enumerate(trace):
        if t["step"] != k:
            raise ValueError(f"the trace's step {k} is numbered {t['step']}")
        out.append(Step(dict(t["scheduled"]), tuple(sorted(t["preempted"])), tuple(sorted(t["finished"])),
                        t["free_blocks_after"]))
    return out


class StepLog:
    """serQ's steps as a run plans them, keyed by (session, turn) until `steps` names them: each
    iteration's batch and preemptions at the time it starts, its finishes (the requests of its
    batch whose turn is over when the engine plans next, or when the run ends), and the free blocks
    of the KV pool before each planning (after the last iteration's end and what it released)."""

    def __init__(self):
        self.iters: dict = {}    # start time -> [batch [(key, tokens)], preempted [key], finished [key]]
        self.free: list = []     # (time, free blocks) before each planning, in time order, and at the end
        self.pending = None      # the last iteration's start and its batch's requests, finishes unread

    def _sample(self, t, free):
        if self.free and self.free[-1][0] == t:
            self.free[-1] = (t, free)
        else:
            self.free.append((t, free))

    def steps(self, names: dict, at_least: int = 0) -> list:
        """[Step], step k at index k, from 0 to the last iteration (at least `at_least` of them):
        a time with no iteration is a step that schedules nothing; the free blocks after step k are
        those before the first planning at or after k + 1."""
        odd = [t for t in self.iters if t != int(t)]
        if odd:
            raise ValueError(f"an iteration starts at {odd[0]}, off the step clock (`execute (1)`)")
        last = max(self.iters, default=-1)
        n = max(at_least, int(last) + 1)

        def name(key):
            return names.get(key, f"s{key[0]}t{key[1]}")
        out = []
        j = 0
        free = None
        for k in range(n):
            while j < len(self.free) and self.free[j][0] <= k + 1:
                free = self.free[j][1]
                j += 1
            it = self.iters.get(k)
            if it is None:
                out.append(Step({}, (), (), free))
            else:
                batch, pre, fin = it
                out.append(Step({name(key): int(n_) for key, n_ in batch}, tuple(sorted(map(name, pre))),
                                tuple(sorted(map(name, fin))), free))
        return out


class InterpSteps(StepLog):
    """The interpreter's recorder (Sim.step_log): told before each planning (`before`), once an
    iteration is planned (`planned`), and of each preemption; sessions are keyed (serial, turn)."""

    def __init__(self, sim):
        super().__init__()
        self.sim = sim
        self.pool = next(m for m in sim.pools if m.name == "kv")
        self.pre: list = []
        self._sample(sim.now, self._free())   # the pool as the run starts

    def _free(self):
        v = (self.pool.cap - self.pool.used) / self.pool.block
        return int(v) if v == int(v) else v

    def _finishes(self):
        if self.pending is not None:
            t, reqs = self.pending
            self.iters[t][2] = [(s.serial, turn) for s, turn in reqs if s.turn_idx != turn]
            self.pending = None

    def before(self, eng):
        self._finishes()
        self._sample(self.sim.now, self._free())
        self.pre = []

    def preempted(self, sess):
        self.pre.append((sess.serial, sess.turn_idx))

    def planned(self, eng):
        t = self.sim.now
        reqs = [(r.sess, r.sess.turn_idx) for r in eng.batch_reqs]
        self.iters[t] = [[((s.serial, turn), r.served) for (s, turn), r in zip(reqs, eng.batch_reqs)], self.pre, []]
        self.pending = (t, reqs)
        self.pre = []

    def end(self):
        self._finishes()
        if self.sim.now not in self.iters:  # else the iteration in flight at the horizon holds it
            self._sample(self.sim.now, self._free())


class RefSteps(StepLog):
    """The reference kernel's steps: its run walked move by move with serq.ref.exec.step, each
    move's machine settled first (as `step` does); a move that plans reads the settled machine
    before it and the planned one its path keeps (`Machine.path`: the batch; preemptions as each
    turn's count rose). Sessions are keyed (sid, turn)."""

    def __init__(self, p):
        super().__init__()
        self.p = p
        self.kv = next(i for i, pool in enumerate(p.pools) if pool.name == "kv")

    def _free(self, m):
        pool = self.p.pools[self.kv]
        return (pool.cap - m.pools[self.kv].used) // pool.block

    def _finishes(self, m):
        if self.pending is not None:
            t, reqs = self.pending
            self.iters[t][2] = [(sid, turn) for sid, turn in reqs if m.sess[sid].turn_idx != turn]
            self.pending = None

    def walk(self, wl, horizon, fuel: int = 10_000_000):
        """Run the workload, recording the steps; the run's observations."""
        from serq.ref import exec as X
        p = self.p
        m = X.initial(p, wl)
        self._sample(m.now, self._free(m))   # the pool as the run starts
        while fuel > 0:
            fuel -= 1
            m = X.settle(p, m)   # `step` settles first: a settled machine settles to itself
            m2, over = X.step(p, m, horizon)
            if over:
                m = m2
                break
            planned = m2.eng.iterations > m.eng.iterations
            # a planning (an iteration or none): the engine was idle and wanted, and the move took
            # the want (a busy engine's want is taken too, and it plans nothing)
            if planned or (m.eng.want and not m.eng.busy and not m2.eng.want):
                self._finishes(m)
                self._sample(m.now, self._free(m))
            if planned:
                t, pm = m2.path[-1]
                reqs = {r.rid: r for r in pm.eng.reqs}
                batch = [((reqs[rid].sid, pm.sess[reqs[rid].sid].turn_idx), n) for rid, n in pm.eng.plan.batch]

                def count(s):
                    return s.rec.preemptions if s.rec is not None else 0
                pre = [(s.sid, s.turn_idx) for s in pm.sess if s.sid < len(m.sess) and count(s) > count(m.sess[s.sid])]
                self.iters[t] = [batch, pre, []]
                self.pending = (t, [key for key, _ in batch])
            m = m2
        else:
            raise RuntimeError("the reference kernel's run did not end")
        self._finishes(m)
        if m.now not in self.iters:
            self._sample(m.now, self._free(m))
        return m.obs


def compare_steps(want: list, have: list):
    """The first (step, vLLM's, serQ's) that differ, None for a side that has no such step; or None."""
    for k in range(max(len(want), len(have))):
        a = want[k] if k < len(want) else None
        b = have[k] if k < len(have) else None
        if a != b:
            return k, a, b
    return None


# ------------------------------------------------------------ expected disagreements

# The disagreements docs/vllm.md documents (*Known divergences*), all of them and only here: a
# scenario named here must differ exactly so, on the sides named (`side`: `interp` or `ref`, the
# kernel, on vllm_shared.sq, or with ` per-session`, on vllm_request.sq), and is then printed
# `expected (docs/vllm.md): WHY` and fails nothing. Any other disagreement fails the check (exit
# 1), and so does a scenario named here that agrees or differs otherwise: the list never goes stale.
# For each: the first step and the fields there that `check --steps` finds to differ, and the first
# request field (vLLM's value, serQ's) that the plain check finds.
class Expected(NamedTuple):
    sides: tuple
    step: tuple      # (step k, the fields that differ there)
    request: tuple   # (request id, field, vLLM's value, serQ's value)
    why: str


_ALL = ("interp", "ref", "interp per-session", "ref per-session")
_PER_SESSION_SIDES = ("interp per-session", "ref per-session")
_STALL = ("the language reference rejects a request that can never fit after it preempts itself (*Engines*): "
          "A's reservation after its preemption (145 tokens, 10 blocks) is above the cap of 9, so serQ refuses "
          "A and B runs when it arrives; vLLM keeps A at the head of its waiting queue for good "
          "(kv_cache_manager.py:531-548, scheduler.py:1454) and B waits behind it")
_PER_SESSION = ("the per-session cache: `repeat` has s2t1's prompt and misses its blocks, which vLLM's "
                "content-addressed cache gives it (kv_cache_manager.py:266-302)")
EXPECTED = {
    "10_preempt_only_step_stall": [Expected(_ALL, (50, ("scheduled", "free")), ("A", "last_token_step", 44, None),
                                            _STALL)],
    "09_prefix_caching_multiturn": [Expected(_PER_SESSION_SIDES, (21, ("scheduled", "free")),
                                             ("repeat", "num_cached_tokens_first_admission", 32, 0), _PER_SESSION)],
    "09b_prefix_caching_multiturn_tight": [Expected(_PER_SESSION_SIDES, (35, ("scheduled", "free")),
                                                    ("s2t3", "first_token_step", 50, 53), _PER_SESSION)],
}


def side(ref: bool, shared: bool) -> str:
    """What runs the scenarios (EXPECTED): the interpreter or the kernel, on which program."""
    return ("ref" if ref else "interp") + ("" if shared else " per-session")


def expected(name: str, where: str, steps: bool) -> Optional[tuple]:
    """(the key of the disagreement docs/vllm.md expects there, why) for the scenario on that side,
    in that mode (`steps`: check --steps), or None where it is expected to agree."""
    for e in EXPECTED.get(name, ()):
        if where in e.sides:
            return (("step",) + e.step if steps else ("request",) + e.request), e.why
    return None


def known(name: str, where: str, key: tuple) -> Optional[str]:
    """Why docs/vllm.md says the scenario differs so on that side (`key`: a step difference,
    ("step", k, fields), or a request's, ("request", id, field, vLLM's, serQ's)), or None."""
    for e in EXPECTED.get(name, ()):
        if where in e.sides and key in (("step",) + e.step, ("request",) + e.request):
            return e.why
    return None


def describe(key: tuple) -> str:
    """A difference's key as words: `step 50: scheduled, free`, `request A: last_token_step vLLM 44, serQ None`."""
    if key[0] == "step":
        return f"step {key[1]}: {', '.join(key[2])}"
    return f"request {key[1]}: {key[2]} vLLM {key[3]}, serQ {key[4]}"


def step_diff_key(diff) -> tuple:
    """What names a step difference: the step and the fields that differ there."""
    k, a, b = diff
    if a is None or b is None:
        return k, ("step",)
    return k, tuple(f for f in Step._fields if getattr(a, f) != getattr(b, f))


def check(paths: list[str], ref: bool = False, steps: bool = False, per_session: bool = False) -> int:
    """Print each scenario's verdict and the total; 0 when every scenario agrees or differs exactly
    as EXPECTED says, else 1."""
    agree = nexpected = unexpected = unstepped = 0  # unexpected: a difference EXPECTED does not name, or an error
    stale: list = []
    shared = not per_session
    where = side(ref, shared)
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            result = json.load(fh)
        name = result.get("name", os.path.basename(p))
        exp = expected(name, where, steps)
        want = None
        try:
            if steps:
                want = vllm_steps(result, p)
                if want is None:
                    unstepped += 1
                    print(f"{name}: no steps recorded (no `trace`, no steps/{name}.json beside results/)")
                    continue
            got, have = run_steps(result, p, ref, steps, shared, len(want) if want else 0)
        except Exception as exc:  # a scenario the program cannot run is a disagreement, said plainly
            unexpected += 1
            print(f"{name}: error: {exc}")
            continue
        sdiff = compare_steps(want, have) if steps else None
        diff = compare(result, got)
        if sdiff is None and diff is None:
            if exp is not None:  # the list is stale: the difference docs/vllm.md explains is gone
                stale.append(name)
                print(f"{name}: agree, but it is EXPECTED to differ ({describe(exp[0])}: {exp[1]}); "
                      "if that is fixed, take it out of EXPECTED (tools/vllm_oracle.py) and docs/vllm.md")
                continue
            agree += 1
            print(f"{name}: agree")
            continue
        if sdiff is not None:
            k, a, b = sdiff
            text = (f"{name}: step {k}:\n  vLLM {a if a is not None else 'no step'}\n"
                    f"  serQ {b if b is not None else 'no step'}")
            key = ("step",) + step_diff_key(sdiff)
        else:
            rid, f, w, h = diff
            text = f"{name}: request {rid}: {f} vLLM {w}, serQ {h}"
            key = ("request", rid, f, w, h)
        if exp is not None and exp[0] == key:
            nexpected += 1
            print(f"{text}\n  expected (docs/vllm.md, *Known divergences*): {exp[1]}")
            continue
        unexpected += 1
        if exp is not None:
            print(f"{text}\n  NOT the expected difference ({describe(exp[0])}: EXPECTED in tools/vllm_oracle.py, "
                  "docs/vllm.md)")
            continue
        print(text)
    total = (f"{agree}/{len(paths)} scenarios agree" + (" step for step" if steps else "")
             + (f"; {nexpected} expected (docs/vllm.md)" if nexpected else "")
             + (f"; {unexpected} unexpected" if unexpected else "")
             + (f"; {len(stale)} expected to differ but agree" if stale else "")
             + (f"; {unstepped} without steps" if unstepped else ""))
    print(total)
    return 0 if agree + nexpected == len(paths) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="vllm_oracle.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="run result files through examples/oracle/vllm_shared.sq")
    c.add_argument("--ref", action="store_true", help="run the reference kernel (serq/ref/) instead")
    c.add_argument("--per-session", action="store_true",
                   help="run examples/oracle/vllm_request.sq, the same request on the per-session cache")
    c.add_argument("--steps", action="store_true",
                   help="compare every step as well: tokens scheduled, preempted, finished, free blocks")
    c.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        return check(args.files, args.ref, args.steps, args.per_session)
    return 2


if __name__ == "__main__":
    sys.exit(main())
