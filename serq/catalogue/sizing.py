"""A model on GPUs as the inputs of a program whose `execute` is the roofline of
examples/sizing/lib/roofline.sq (docs/sizing.md): the bytes an iteration reads, the FLOPs its tokens
and its attention take, the GPU's peaks, and the KV blocks vLLM would allocate.

`--model`, `--gpu` and `--tp` on `serq run`, `serq sweep`, `serq inputs` and `serq calibrate` fill
the inputs of this table that the program declares and the user did not supply; the vLLM settings
the block count depends on (`bs`, `B`, `max_seqs`, `util`) are read from the program's inputs as
supplied, else their defaults.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from serq.catalogue import CatalogueError
from serq.catalogue.gpu import GPU, load_gpu
from serq.catalogue.kv import KVPlan, kv_blocks
from serq.catalogue.model import Model, load_model

# the efficiency factors' defaults (docs/sizing.md, *Efficiency*): `serq calibrate` fits them
MFU = 0.5           # of the peak FLOP/s a prefill reaches
MBU = 0.8           # of the HBM bandwidth a decode reaches
OVERHEAD = 0.003    # seconds an iteration costs besides its kernels (scheduling, sampling, launches)
LINK_LATENCY = 8e-6  # seconds a step of a ring all-reduce costs besides its bytes (2 (t - 1) steps each)

# the inputs the catalogue fills, and what each is (docs/sizing.md, *The inputs*)
FILLED = {
    "w_read": "bytes of weights each GPU reads an iteration (all but the routed experts and the input embedding)",
    "w_expert": "bytes on each GPU of one routed expert, summed over the MoE layers (0: a dense model)",
    "experts": "routed experts of a MoE layer (0: a dense model)",
    "topk": "experts each token is sent to",
    "f_tok": "FLOPs per token on each GPU: 2 x the parameters a token multiplies (experts it is sent to)",
    "f_head": "FLOPs of the LM head for one sampled token on each GPU: 2 x vocabulary x hidden / tp",
    "f_attn": "FLOPs on each GPU per (query token, key position) pair: 4 x layers x heads x head_dim / tp",
    "kv_tok": "KV-cache bytes of one token on each GPU (K and V of every layer)",
    "peak": "the GPU's dense FLOP/s at the weights' precision",
    "bw": "the GPU's HBM bandwidth, bytes/s",
    "link": "the GPU's interconnect bandwidth, one direction, bytes/s",
    "tp": "GPUs the model is split over (tensor parallelism)",
    "layers": "decoder layers (two all-reduces each under tp > 1)",
    "act_b": "bytes of one token's hidden state (what an all-reduce sums per token)",
    "blocks": "KV blocks vLLM allocates on each GPU (less its null block)",
}
DEFAULTS = {"mfu": MFU, "mbu": MBU, "c0": OVERHEAD, "ar_lat": LINK_LATENCY}
# vLLM's settings the block count reads, by the input names of examples/sizing/vllm.sq, and vLLM's
# defaults where the program declares none
SETTINGS = {"bs": ("block_size", 16), "B": ("max_num_batched_tokens", 8192), "max_seqs": ("max_num_seqs", 256),
            "util": ("gpu_memory_utilization", 0.9)}


@dataclass(frozen=True)
class Sizing:
    model: Model
    gpu: GPU
    tp: int
    plan: KVPlan
    values: dict = field(default_factory=dict)   # every input of FILLED and DEFAULTS

    def summary(self) -> dict:
        """What the report says of the deployment (docs/sizing.md): the model, the GPU, the numbers."""
        v = self.values
        return {"model": self.model.name, "gpu": self.gpu.name, "tp": self.tp,
                "parameters": self.model.total_params,
                "active_parameters": round(self.model.active_params),
                "weights_per_gpu_bytes": self.plan.weights,
                "kv_blocks": self.plan.usable_blocks, "block_size": self.plan.block_size,
                "kv_bytes_per_token": v["kv_tok"],
                "kv_tokens": self.plan.usable_blocks * self.plan.block_size,
                "peak_flops": v["peak"], "hbm_bytes_per_s": v["bw"], "link_bytes_per_s": v["link"],
                # a 1-token decode reads the weights and the k experts its token is sent to: no faster
                "floor_s": (v["w_read"] + v["w_expert"] * v["topk"]) / v["bw"],
                # what the catalogue assumed or defaulted in reading a user's own files (Model.notes,
                # GPU.notes); the shipped files' are docs/sizing.md's
                "notes": [n for x in (self.model, self.gpu) if not _shipped(x.path) for n in x.notes]}


def _shipped(path: str) -> bool:
    from pathlib import Path
    return Path(path).resolve().parent.parent == Path(__file__).resolve().parent


def peak_flops(model: Model, gpu: GPU) -> float:
    """The dense peak at the linear layers' precision: fp8 where the checkpoint's matrices are 1 byte
    and the GPU has fp8 tensor cores, else bf16 (an fp8 checkpoint on an A100 runs as bf16 would)."""
    if model.linear_bytes <= 1 and gpu.fp8_flops:
        return float(gpu.fp8_flops)
    return float(gpu.bf16_flops)


def roofline_inputs(model: Model, gpu: GPU, tp: int) -> dict:
    """The model's and GPU's numbers the roofline reads, per GPU at tensor parallelism tp."""
    model.check_tp(tp)
    per_gpu = model.weight_bytes_per_gpu(tp)
    experts = [p for p in model.parts() if p.name.startswith("experts")]
    embedding = next(p for p in model.parts() if p.name == "embedding")
    # the experts' bytes on one GPU, and the embedding's (a lookup reads its rows, not the table; a
    # tied table is read whole as the LM head)
    expert_bytes = sum(p.params * p.bytes_per_param for p in experts) / tp
    embed_bytes = 0.0 if model.tied else embedding.params * embedding.bytes_per_param / tp
    E = model.experts if model.is_moe else 0
    # FLOPs: 2 per multiply-add; the parameters a token multiplies, less the embedding (a lookup) and
    # the LM head (once a sampled token: f_head)
    head = model.vocab * model.hidden
    per_token = 2 * (model.active_params - embedding.params - (0 if model.tied else head))   # a tied table is one
    return {
        "w_read": per_gpu - expert_bytes - embed_bytes,
        "w_expert": expert_bytes / E if E else 0.0,
        "experts": E,
        "topk": model.experts_per_token if E else 0,
        "f_tok": per_token / tp,
        "f_head": 2 * head / tp,
        "f_attn": 4 * model.layers * model.heads * model.head_dim / tp,
        "kv_tok": model.kv_bytes_per_token(tp),
        "peak": peak_flops(model, gpu),
        "bw": float(gpu.hbm_bandwidth),
        "link": float(gpu.link_bandwidth),
        "tp": tp,
        "layers": model.layers,
        "act_b": model.hidden * model.dtype_bytes,
    }


def size(model: str, gpu: str | GPU, tp: int = 1, settings: dict | None = None) -> Sizing:
    """The inputs for `model` on `gpu` at tensor parallelism tp; `settings`: vLLM's, by the program's input
    names (SETTINGS), the defaults where absent."""
    m, g = load_model(model), (gpu if isinstance(gpu, GPU) else load_gpu(gpu))
    s = {k: (settings or {}).get(k, d) for k, (_, d) in SETTINGS.items()}
    for k in ("bs", "B", "max_seqs"):
        v = s[k]
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v == int(v) and v >= 1):
            raise CatalogueError(f"input {k} ({SETTINGS[k][0]}) must be a whole number >= 1 for the KV blocks, "
                                 f"not {v:g}")
    plan = kv_blocks(m, g, tp, gpu_memory_utilization=float(s["util"]), block_size=int(s["bs"]),
                     max_num_batched_tokens=int(s["B"]), max_num_seqs=int(s["max_seqs"]))
    values = roofline_inputs(m, g, tp)
    values["blocks"] = plan.usable_blocks
    values.update(DEFAULTS)
    return Sizing(m, g, tp, plan, values)


def resolve(declared: dict, supplied: dict, model: str | None, gpu: str | None, tp) -> tuple[dict, Sizing | None]:
    """The inputs the catalogue adds for a program that declares `declared` (name -> default), the user
    having supplied `supplied`: those of FILLED and DEFAULTS the program declares and the user did not
    set. A model needs a GPU and the other way round; tp defaults to 1."""
    if model is None and gpu is None:
        if tp is not None:
            raise CatalogueError("--tp sizes a model on GPUs: name them with --model and --gpu")
        return {}, None
    if model is None or gpu is None:
        raise CatalogueError("--model and --gpu go together: a model is sized on a GPU "
                             f"(--{'gpu' if model is not None else 'model'} is missing)")
    t = 1 if tp is None else tp
    if not isinstance(t, int):
        try:
            t = int(str(t))
        except ValueError:
            raise CatalogueError(f"--tp must be a whole number >= 1, not {tp!r}") from None
    if t < 1:
        raise CatalogueError(f"--tp must be a whole number >= 1, not {tp!r}")
    g = load_gpu(gpu)
    # vLLM's defaults on this GPU for the settings the user did not name
    dflt = {k: v for k, v in vllm_defaults(g).items() if k in declared and k not in supplied}
    settings = {k: supplied.get(k, dflt.get(k, declared.get(k, d))) for k, (_, d) in SETTINGS.items()}
    try:
        sz = size(model, g, t, settings)
    except CatalogueError as exc:
        # where the weights or the KV cache do not fit, the fewest GPUs that hold them
        fits = _fits_at(model, g, t, settings) if " needs " in str(exc) or "no room" in str(exc) else ""
        raise CatalogueError(str(exc) + fits) from None
    sz.values.update(dflt)
    # the catalogue fills a roofline program's inputs, never another program's of the same names (a
    # `c0` or `blocks` of its own meaning)
    missing = [k for k in FILLED if k not in declared]
    if missing:
        raise CatalogueError("--model and --gpu fill the inputs of a program whose execute is the roofline of "
                             "examples/sizing/lib/roofline.sq (docs/sizing.md); this one does not declare "
                             + ", ".join(missing))
    add = {k: v for k, v in sz.values.items() if k in declared and k not in supplied}
    return add, sz


def vllm_defaults(gpu: GPU) -> dict:
    """`vllm serve`'s max_num_batched_tokens and max_num_seqs on this GPU, by its memory as torch reports
    it (vLLM 0.33.0, vllm/engine/arg_utils.py:2970-3006, UsageContext.OPENAI_API_SERVER): 16384 and 1024 at
    160 GiB or more; 8192 and 1024 at 70 GiB or more but on an A100; else 2048 and 256."""
    gib = 1 << 30
    if gpu.memory_bytes >= 160 * gib:
        return {"B": 16384, "max_seqs": 1024}
    if gpu.memory_bytes >= 70 * gib and "a100" not in (gpu.name + " " + gpu.description).lower():
        return {"B": 8192, "max_seqs": 1024}
    return {"B": 2048, "max_seqs": 256}


def step_times(file: str, supplied: dict) -> dict:
    """The program's own step times (its execute, as `serq calibrate` evaluates it) for a 1-request
    decode at the prompt's length and for the prompt's prefill from position 0 (at most the tokens cap)."""
    import numpy as np
    from serq.exp.calibrate import COLUMNS, cost_model
    cost = cost_model(file, supplied, None)
    val = {**cost.inputs, **supplied}
    p = float(val.get("prompt", 1024))
    pre = float(min(p, val.get("B", p)))
    rows = {"tokens": [1, pre], "prefilled": [0, pre], "decoding": [1, 0], "kv_decode": [p, 0],
            "kv_prefill": [0, 0], "attention": [p + 1, pre * pre], "running": [1, 1], "waiting": [0, 0]}
    cols = {c: np.asarray(rows[c], dtype=float) for c in COLUMNS.values()}
    t = cost.predict({}, cols, 2)
    return {"decode_context": int(p), "decode_step_s": float(t[0]), "prefill_tokens": int(pre),
            "prefill_step_s": float(t[1])}


def _fits_at(model: str, gpu: GPU, tp: int, settings: dict) -> str:
    """Where a model does not fit at tp: the fewest GPUs (up to 8) it fits on, said to the user."""
    for t in (2, 4, 8):
        if t <= tp:
            continue
        try:
            size(model, gpu, t, settings)
        except CatalogueError:
            continue
        return f"; it fits at --tp {t}"
    return ""
