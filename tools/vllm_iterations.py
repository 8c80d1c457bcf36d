"""vLLM's iterations as the CSV `serq calibrate --measured` reads (docs/calibrate.md).

Two sources, both vLLM v1 (read in vLLM 0.33.0's source):

- the log: `vllm serve ... --enable-logging-iteration-details` logs one line per engine step
  (vllm/v1/metrics/loggers.py:199-214):
      Iteration(%d): %d context requests, %d context tokens, %d generation requests,
      %d generation tokens, iteration elapsed time: %.2f ms%s, %s KV cache usage: %.1f%%%s
  `python tools/vllm_iterations.py vllm.log > iterations.csv` turns them into the columns
  tokens, prefilled, decoding and time. The log has no KV lengths: a cost that reads
  batch.kv_decode or batch.kv_prefill needs the second source.
- the scheduler's output of each step (vllm/v1/core/sched/output.py:41-191): `step_row` computes
  every column from a SchedulerOutput, the KV lengths included, for a hook around EngineCore.step
  (the docs show one).
"""
from __future__ import annotations

import csv
import re
import sys

# vllm/v1/metrics/loggers.py:199-214, the format written out as a pattern
LOG_LINE = re.compile(
    r"Iteration\((?P<index>\d+)\): (?P<ctx_reqs>\d+) context requests, (?P<ctx_tokens>\d+) context tokens, "
    r"(?P<gen_reqs>\d+) generation requests, (?P<gen_tokens>\d+) generation tokens, "
    r"iteration elapsed time: (?P<ms>[0-9.]+) ms(?P<dummy> \(dummy\))?")

LOG_COLUMNS = ["iteration", "tokens", "prefilled", "decoding", "time"]
STEP_COLUMNS = ["tokens", "prefilled", "decoding", "kv_decode", "kv_prefill", "attention", "time"]


def log_rows(lines):
    """One row per logged iteration; a data-parallel dummy step (no batch) is skipped.
    A context request is one with no output token yet (vllm/v1/utils.py:835-870), so its
    tokens are the prefill's; generation requests decode one token each (without speculative
    decoding)."""
    for line in lines:
        m = LOG_LINE.search(line)
        if m is None or m.group("dummy"):
            continue
        ctx, gen = int(m.group("ctx_tokens")), int(m.group("gen_tokens"))
        yield {"iteration": int(m.group("index")), "tokens": ctx + gen, "prefilled": ctx,
               "decoding": int(m.group("gen_reqs")), "time": float(m.group("ms")) / 1000}


def step_row(so, elapsed: float) -> dict:
    """The columns of one step from its SchedulerOutput `so` and its measured time in seconds
    (docs/reference/engine.md *Values*: kv_… are the positions before the step's tokens,
    attention is Σ tokens × (position + tokens)).
    num_computed_tokens is read before the step adds its own (scheduler.py:1646-1665 builds the
    output, 1858 advances the requests), so it is the KV each request reads: for a new request,
    its prefix-cache hit. A request is decoding when it has an output token already (the log's
    rule, vllm/v1/utils.py:835-870)."""
    tokens = so.num_scheduled_tokens           # req_id -> tokens this step
    row = {"tokens": 0, "prefilled": 0, "decoding": 0, "kv_decode": 0, "kv_prefill": 0, "attention": 0}
    computed, outputs = {}, {}
    for r in so.scheduled_new_reqs:
        computed[r.req_id], outputs[r.req_id] = r.num_computed_tokens, 0
    c = so.scheduled_cached_reqs
    for rid, nc, no in zip(c.req_ids, c.num_computed_tokens, c.num_output_tokens):
        computed[rid], outputs[rid] = nc, no
    for rid, n in tokens.items():
        row["tokens"] += n
        row["attention"] += n * (computed.get(rid, 0) + n)
        if outputs.get(rid, 0) > 0:
            row["decoding"] += 1
            row["kv_decode"] += computed.get(rid, 0)
        else:
            row["prefilled"] += n
            row["kv_prefill"] += computed.get(rid, 0)
    row["time"] = elapsed
    return row


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tools/vllm_iterations.py VLLM.log > iterations.csv", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8", errors="replace") as fh:
        w = csv.DictWriter(sys.stdout, LOG_COLUMNS, lineterminator="\n")
        w.writeheader()
        for row in log_rows(fh):
            w.writerow(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
