"""Turn SplitwiseSim's measured characterization runs (`data/perf_model.csv` of
github.com/Mutinifni/splitwise-sim, MIT) into the per-iteration CSVs `serq calibrate --measured`
reads, one file per model, GPU and tensor-parallel degree (examples/data/README.md says why each
column is what it is).

    python examples/data/splitwise_iterations.py PATH/TO/perf_model.csv [OUT_DIR]

Each source row is one run: `batch_size` identical requests of `prompt_size` prompt tokens and
`token_size` output tokens, started together; `prompt_time` (ms) the prompt phase of the batch,
`token_time` (ms) the mean time of a token-generation iteration, `e2e_time` (ms) the whole run.

A run is kept when it is self-consistent: its e2e_time agrees with
prompt_time + (token_size - 1) * token_time within 1.5% (elsewhere the run did not generate the
token_size - 1 tokens its row names, or its prompt phase is not what the row says, and the
iterations' batches are not known). A row the source repeats verbatim (every field the same) is one
run, kept once. A kept run gives up to two iterations:

- prefill: tokens = batch_size * prompt_size, kv_decode = kv_prefill = 0 (no request has a KV
  before its prompt), prefilled = tokens, decoding = 0, attention = batch_size * prompt_size ** 2
  (each prompt's prompt_size tokens from position 0: tokens x (position + tokens)),
  time = prompt_time / 1000; only where tokens <= 2048, vllm.sq's token budget
  (`B`, vLLM's max_num_batched_tokens): the engine there never runs a larger iteration, and the
  source's larger prompt phases (4096 and 8192 tokens, 8 to 64 prompts of 512) grow faster than
  linearly, so fitting them would tilt the line away from the iterations vllm.sq does run;
- decode, the mean of the run's token_size - 1 decode iterations: tokens = batch_size; each request's
  position before decode iteration j (j = 1 .. token_size - 1) is prompt_size + j - 1, whose mean is
  prompt_size + (token_size - 2) / 2, so kv_decode = batch_size * (prompt_size + (token_size - 2) / 2);
  prefilled = 0, decoding = batch_size, attention = kv_decode + tokens (one token at each position:
  position + 1, summed; the mean over the iterations, as kv_decode is); time = token_time / 1000.

The columns `tokens`, `kv_decode`, `kv_prefill` are what examples/multi-turn/vllm.sq's execute reads;
`prefilled`, `decoding`, `attention` are what the roofline of examples/sizing/lib/roofline.sq reads besides
(docs/calibrate.md, *The measured iterations*). They are written last, so the older columns keep
their places.

The power-capped H100 rows (`h100-80gb-pcap`) are left out (examples/data/README.md). Every number
written is the source's, or computed from it as above; `ms` (prompt_time or token_time) and `e2e_ms`
are the source's text, `source_line` the run's line in the source file.
"""
from __future__ import annotations

import csv
import os
import sys

# the source's model and hardware names -> the names of the files here
MODELS = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}
GPUS = {"a100-80gb": "a100", "h100-80gb": "h100"}
MAX_TOKENS = 2048   # vllm.sq's token budget B (max_num_batched_tokens): no larger iteration runs there
AGREE = 0.015   # a run is kept when e2e_time is within 1.5% of prompt_time + (token_size - 1) * token_time
COLUMNS = ["source_line", "phase", "batch_size", "prompt_size", "token_size", "tokens", "kv_decode", "kv_prefill",
           "time", "ms", "e2e_ms", "prefilled", "decoding", "attention"]


def name(model: str, gpu: str, tp: str) -> str:
    return f"{MODELS[model]}_{GPUS[gpu]}_tp{int(tp)}"


def rows(path: str) -> dict[str, list[dict]]:
    """The iteration rows of every (model, GPU, TP) the source has, in the source's order."""
    out: dict[str, list[dict]] = {}
    seen: set[tuple] = set()
    with open(path, newline="", encoding="utf-8") as fh:
        for line, r in enumerate(csv.DictReader(fh), start=2):
            if r["model"] not in MODELS or r["hardware"] not in GPUS:
                continue
            key = name(r["model"], r["hardware"], r["tensor_parallel"])
            b, p, t = int(r["batch_size"]), int(r["prompt_size"]), int(r["token_size"])
            pt, tt, e2e = float(r["prompt_time"]), float(r["token_time"]), float(r["e2e_time"])
            if abs(pt + (t - 1) * tt - e2e) > AGREE * e2e:
                continue   # the run is not self-consistent
            same = tuple(r.values())
            if same in seen:
                continue   # a row repeated verbatim: one run
            seen.add(same)
            common = {"source_line": line, "batch_size": b, "prompt_size": p, "token_size": t,
                      "kv_prefill": 0, "e2e_ms": r["e2e_time"]}
            rs = out.setdefault(key, [])
            if b * p <= MAX_TOKENS:
                rs.append(dict(common, phase="prefill", tokens=b * p, kv_decode=0, time=repr(pt / 1000),
                               ms=r["prompt_time"], prefilled=b * p, decoding=0, attention=b * p * p))
            kv = b * (p + (t - 2) // 2)   # token_size is even in every row
            rs.append(dict(common, phase="decode", tokens=b, kv_decode=kv, time=repr(tt / 1000),
                           ms=r["token_time"], prefilled=0, decoding=b, attention=kv + b))
    return out


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    src = argv[0]
    dest = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for key, rs in sorted(rows(src).items()):
        path = os.path.join(dest, f"splitwise_{key}.csv")
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rs)
        print(f"{path}: {len(rs)} iterations", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
