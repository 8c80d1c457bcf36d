"""The KV-cache blocks vLLM v1 gives a model on a GPU, following vLLM 0.33.0's source:

- requested = ceil(total x gpu_memory_utilization)          v1/worker/utils.py:716-726 (request_memory)
- available = requested - non-KV memory - CUDA-graph estimate  v1/worker/gpu_worker.py:641-757
  (determine_available_memory; non-KV memory = weights + what else the instance keeps + the profiled
  transient peak, utils/mem_utils.py:230-321, memory_profiling)
- page of one layer = block_size x KV heads x (head_size + head_size_v) x dtype bytes
                                                            v1/kv_cache_interface.py:586-601
- blocks = available // (page x layers in the largest cache group)
                                                            v1/core/kv_cache_planning.py:574-605, 681
- KV heads per GPU = max(1, KV heads // tp)                 config/model.py:1663-1683

vLLM measures the non-KV memory by profiling a dummy forward pass; here it is estimated (see
`activation_estimate`), and the CUDA-graph memory vLLM also subtracts (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS,
on by default, envs.py:2219) is an allowance the caller may set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from serq.catalogue import CatalogueError
from serq.catalogue.gpu import GPU, load_gpu
from serq.catalogue.model import Model, load_model

GIB = 1 << 30
# vLLM's "Estimated CUDA graph memory" ranges from 0.07 to 2.35 GiB in published logs; 0.5 GiB is an
# allowance, not derived from the model. Pass cudagraph_bytes (or 0 for enforce_eager) to change it.
DEFAULT_CUDAGRAPH_BYTES = GIB // 2
FP32 = 4


@dataclass(frozen=True)
class KVPlan:
    model: str
    gpu: str
    tp: int
    gpu_memory_utilization: float
    block_size: int
    kv_cache_dtype_bytes: float
    total_memory: int  # per GPU, as torch reports it
    requested_memory: int  # ceil(total x utilization)
    weights: int  # per GPU
    activation_forward: int  # estimated peak of the dummy forward pass
    activation_sampler: int  # estimated peak of the dummy sampler run
    activation_peak: int  # the larger: vLLM's transient peak headroom
    cudagraph: int  # the CUDA-graph allowance subtracted
    other: int  # any other non-KV memory the caller names (not modelled by default)
    available_kv: int  # requested - weights - activation_peak - cudagraph - other
    kv_heads_per_gpu: int
    page_bytes: int  # one layer, one block, one GPU
    bytes_per_block: int  # vLLM's divisor: the pages of the layers of the largest cache group
    kv_groups: int  # vLLM's KV cache groups (1 unless the model mixes full and sliding attention)
    num_gpu_blocks: int  # available_kv // bytes_per_block (block 0 is vLLM's null block)
    usable_blocks: int  # num_gpu_blocks - 1
    bytes_per_token: float  # per GPU, every layer
    token_capacity: int  # tokens a long request can hold in the usable blocks (see kv_blocks)
    notes: tuple[str, ...] = ()


def activation_estimate(model: Model, tp: int, max_num_batched_tokens: int, max_num_seqs: int) -> tuple[int, int]:
    """(forward peak, sampler peak) in bytes per GPU, estimating what vLLM's profile_run measures
    (v1/worker/gpu_model_runner.py:6072-6145): a dummy forward pass of max_num_batched_tokens tokens spread
    over min(tokens, max_num_seqs) requests (_dummy_run, :5545), then the sampler on one row of logits per
    request (_dummy_sampler_run, :5866-5930). Counted (activations in the model dtype):

    forward, the largest layer block, for T tokens:
      attention: residual, its normed input, q/k/v out, attention out, o_proj out = T (3H + q + 2kv + q)
      dense MLP: residual, input, gate_up out (2I), SiLU-and-mul out (I), down out = T (3H + 3I)
                 (BLOOM: up out I and GELU out I, so 2I)
      MoE:       residual, input, output, vLLM's fused_moe caches (fused_moe.py:1749-1765: one of
                 T k max(2Im, H), one of T k Im) and the router logits in fp32 = T (3H + k max(2Im, H) + k Im)
                 + T E 4 bytes
      with q, I, Im divided by tp and kv the KV heads kept on one GPU.
    sampler, for R = min(T, max_num_seqs) rows of vocabulary V: the logits in the model dtype and in fp32
      (sampler.py:158), the fp32 softmax probabilities and the fp32 exponential noise of random_sample
      (topk_topp_sampler.py:309, 616) = R V (dtype + 12) bytes, plus the T x H hidden states profile_run
      still holds.
    Not counted: the attention kernel's workspace, torch.compile's buffers and allocator fragmentation;
    vLLM logs show 1.19-1.26 GiB for Llama-3-8B at 8192 tokens where this gives 0.84 GiB.
    """
    a, H, T = model.dtype_bytes, model.hidden, max_num_batched_tokens
    q = model.heads * model.head_dim / tp
    kv = model.kv_heads_per_gpu(tp) * model.head_dim
    blocks = [3 * H + 2 * q + 2 * kv]
    if model.layers > len(model.moe_layers):
        I = model.intermediate / tp
        blocks.append(3 * H + (3 * I if model.gated else 2 * I))
    forward = T * a * max(blocks)
    if model.moe_layers:
        Im, k = model.moe_intermediate / tp, model.experts_per_token
        forward = max(forward, T * a * (3 * H + k * max(2 * Im, H) + k * Im) + T * model.experts * FP32)
    rows = min(T, max_num_seqs)
    sampler = rows * model.vocab * (a + 3 * FP32) + T * H * a
    return math.ceil(forward), math.ceil(sampler)


def _groups(model: Model) -> tuple[int, int, int]:
    """(layers per group, groups, groups holding every token). vLLM gives each attention type its own
    groups of equally many layers, the smallest type's count (kv_cache_planning.py:416-520)."""
    if not model.layer_types or len(set(model.layer_types)) == 1:
        return model.layers, 1, 1
    full = model.layers - model.sliding_layers
    size = min(full, model.sliding_layers)
    full_groups = math.ceil(full / size)
    return size, full_groups + math.ceil(model.sliding_layers / size), full_groups


def _an(name: str) -> str:
    return ("an " if name[:1].lower() in "aefhilmnorsx" else "a ") + name  # "an h100", "a b200"


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def kv_blocks(model: Model | str, gpu: GPU | str, tp: int = 1, gpu_memory_utilization: float = 0.9,
              block_size: int = 16, kv_cache_dtype_bytes: float | None = None, max_num_batched_tokens: int = 8192,
              max_num_seqs: int = 256, *, cudagraph_bytes: int = DEFAULT_CUDAGRAPH_BYTES, other_bytes: int = 0,
              max_model_len: int | None = None) -> KVPlan:
    """The KV blocks vLLM would allocate on each of tp GPUs. Raises CatalogueError when the model does not
    fit (or, given max_model_len, when one request of that length would not fit, as vLLM refuses)."""
    m = load_model(model) if isinstance(model, str) else model
    g = load_gpu(gpu) if isinstance(gpu, str) else gpu
    if not 0 < gpu_memory_utilization <= 1:
        raise CatalogueError(f"gpu_memory_utilization must be in (0, 1], not {gpu_memory_utilization}")
    for key, v in (("block_size", block_size), ("max_num_batched_tokens", max_num_batched_tokens),
                   ("max_num_seqs", max_num_seqs)):
        if not isinstance(v, int) or v < 1:
            raise CatalogueError(f"{key} must be a whole number >= 1, not {v!r}")
    m.check_tp(tp)
    kv_bytes = m.dtype_bytes if kv_cache_dtype_bytes is None else kv_cache_dtype_bytes
    total = g.memory_bytes
    requested = math.ceil(total * gpu_memory_utilization)
    weights = math.ceil(m.weight_bytes_per_gpu(tp))
    if weights >= requested:
        raise CatalogueError(f"{m.name} needs {_gb(weights)} of weights per GPU at tp {tp}; {_an(g.name)} has "
                             f"{_gb(requested)} at gpu_memory_utilization {gpu_memory_utilization} "
                             f"({_gb(total)} as torch reports it)")
    forward, sampler = activation_estimate(m, tp, max_num_batched_tokens, max_num_seqs)
    peak = max(forward, sampler)
    available = requested - weights - peak - cudagraph_bytes - other_bytes
    kvl = m.kv_heads_per_gpu(tp)
    page = math.ceil(block_size * kvl * 2 * m.head_dim * kv_bytes)
    size, groups, full_groups = _groups(m)
    per_block = page * size
    if available < per_block * 2:  # the null block and one more
        raise CatalogueError(f"{m.name} at tp {tp} leaves {_an(g.name)} no room for the KV cache: {_gb(requested)} "
                             f"at gpu_memory_utilization {gpu_memory_utilization} - {_gb(weights)} of weights - "
                             f"{_gb(peak)} of activations - {_gb(cudagraph_bytes + other_bytes)} of CUDA graphs "
                             f"and other = {_gb(available)}")
    blocks = available // per_block
    # A long request takes a block in every full-attention group for each block_size tokens; a sliding
    # group holds only its window's blocks, left out here.
    capacity = (blocks - 1) * block_size // full_groups
    if max_model_len is not None and capacity < max_model_len:
        raise CatalogueError(f"one request of max_model_len {max_model_len} needs "
                             f"{_gb(math.ceil(max_model_len / block_size) * per_block * full_groups)} of KV cache "
                             f"per GPU; {m.name} at tp {tp} on {_an(g.name)} leaves {_gb(available)} "
                             f"({capacity} tokens)")
    notes = m.notes + g.notes
    if groups > 1:
        notes += (f"{groups} KV cache groups of {size} layers (full and sliding attention): token_capacity counts "
                  "the full-attention groups only",)
    return KVPlan(model=m.name, gpu=g.name, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                  block_size=block_size, kv_cache_dtype_bytes=kv_bytes, total_memory=total,
                  requested_memory=requested, weights=weights, activation_forward=forward,
                  activation_sampler=sampler, activation_peak=peak, cudagraph=cudagraph_bytes, other=other_bytes,
                  available_kv=available, kv_heads_per_gpu=kvl, page_bytes=page, bytes_per_block=per_block,
                  kv_groups=groups, num_gpu_blocks=blocks, usable_blocks=blocks - 1,
                  bytes_per_token=m.kv_bytes_per_token(tp, kv_bytes), token_capacity=capacity, notes=notes)
