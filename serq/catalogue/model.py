"""A model's shape read from a Hugging Face config.json: its parameters (total, active per token,
bytes per GPU under tensor parallelism) and its KV-cache bytes per token.

The shipped descriptions in models/ hold the published config.json's own keys, so the one reader reads
them and a user's config.json alike. Keys starting with '_' (e.g. "_source") are not read. Every default
the reader applies is recorded in `Model.notes`, so nothing is guessed silently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from serq.catalogue import CatalogueError
from serq.catalogue._files import names, read_json, resolve

MODELS_DIR = Path(__file__).parent / "models"

# architectures[0] -> family; model_type -> architecture when "architectures" is absent.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral", "Qwen3MoeForCausalLM": "qwen3_moe",
    "GptOssForCausalLM": "gpt_oss", "BloomForCausalLM": "bloom",
}
MODEL_TYPES = {family: arch for arch, family in ARCHITECTURES.items()}

# vLLM's VocabParallelEmbedding / ParallelLMHead pad the vocabulary to a multiple of 64
# (vllm/model_executor/layers/vocab_parallel_embedding.py:36, pad_vocab_size :95).
VOCAB_PADDING = 64
# MXFP4: 4-bit values and one 8-bit (E8M0) scale per block of 32 values = 4.25 bits a parameter.
MXFP4_BYTES = (4 + 8 / 32) / 8
HALF_DTYPES = {"bfloat16", "bf16", "float16", "fp16", "half"}
FLOAT32_DTYPES = {"float32", "fp32", "float"}
QUANT_METHODS = ("fp8", "mxfp4")


@dataclass(frozen=True)
class Part:
    """One kind of weight, summed over the layers that have it."""
    name: str
    params: int
    bytes_per_param: float
    shard: str  # how tensor parallelism splits it: vocab | q | kv | tp (divided by tp) | rep (replicated)
    active: float = 1.0  # the fraction used by one token (k / E for routed experts)


@dataclass(frozen=True)
class Model:
    name: str
    architecture: str
    path: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP's FFN size (Mixtral/gpt-oss: the experts' size)
    vocab: int
    tied: bool
    dtype_bytes: int  # weights that are not quantized; also the activations and the default KV dtype
    linear_bytes: float  # attention and MLP matrices (1 for fp8 checkpoints)
    expert_bytes: float  # routed experts' matrices (MXFP4 in gpt-oss)
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    gated: bool  # SwiGLU: 3 matrices hidden x intermediate; else up + down (BLOOM's GELU MLP)
    layer_norm: bool  # LayerNorm (weight and bias) rather than RMSNorm (weight)
    qk_norm: bool  # Qwen3: RMSNorm of head_dim on q and on k
    embed_norm: bool  # BLOOM: LayerNorm after the word embeddings
    sinks: bool  # gpt-oss: one learned attention-sink logit per head
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    moe_layers: tuple[int, ...] = ()
    layer_types: tuple[str, ...] = ()  # per layer, "full_attention" or "sliding_attention"
    sliding_window: int | None = None
    notes: tuple[str, ...] = ()
    source: dict | None = None

    # ---- parameters ----

    @property
    def is_moe(self) -> bool:
        return bool(self.moe_layers)

    def parts(self) -> list[Part]:
        H, L, hd, d = self.hidden, self.layers, self.head_dim, self.dtype_bytes
        q, kv = self.heads * hd, self.kv_heads * hd
        norm = 2 * H if self.layer_norm else H
        out = [Part("embedding", self.vocab * H, d, "vocab")]
        if self.embed_norm:
            out.append(Part("embedding norm", 2 * H, d, "rep"))
        out.append(Part("attention q", L * H * q, self.linear_bytes, "q"))
        out.append(Part("attention k, v", L * 2 * H * kv, self.linear_bytes, "kv"))
        out.append(Part("attention o", L * q * H, self.linear_bytes, "q"))
        if self.qkv_bias:
            out.append(Part("attention q bias", L * q, d, "q"))
            out.append(Part("attention k, v bias", L * 2 * kv, d, "kv"))
        if self.o_bias:
            out.append(Part("attention o bias", L * H, d, "rep"))
        if self.qk_norm:
            out.append(Part("q, k norms", L * 2 * hd, d, "rep"))
        if self.sinks:
            out.append(Part("attention sinks", L * self.heads, d, "q"))
        out.append(Part("layer norms", L * 2 * norm, d, "rep"))
        dense = L - len(self.moe_layers)
        if dense:
            I = self.intermediate
            mats = 3 if self.gated else 2
            out.append(Part("MLP", dense * mats * H * I, self.linear_bytes, "tp"))
            if self.mlp_bias:
                out.append(Part("MLP bias", dense * ((mats - 1) * I + H), d, "tp"))
        if self.moe_layers:
            n, E, Im = len(self.moe_layers), self.experts, self.moe_intermediate
            share = self.experts_per_token / E
            out.append(Part("router", n * (H * E + (E if self.router_bias else 0)), d, "rep"))
            out.append(Part("experts", n * E * 3 * H * Im, self.expert_bytes, "tp", share))
            if self.expert_bias:
                out.append(Part("experts bias", n * E * (2 * Im + H), d, "tp", share))
        out.append(Part("final norm", norm, d, "rep"))
        if not self.tied:
            out.append(Part("lm_head", self.vocab * H, d, "vocab"))
        return out

    @property
    def total_params(self) -> int:
        return sum(p.params for p in self.parts())

    @property
    def active_params(self) -> float:
        """Parameters one token uses: everything but the routed experts it is not sent to. Counts the
        embedding and the lm_head, as Mixtral's 12.9B and Qwen3-30B-A3B's 3.3B do (gpt-oss's published
        3.6B leaves the input embedding out: subtract `embedding_params`)."""
        return sum(p.params * p.active for p in self.parts())

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def check_tp(self, tp: int) -> None:
        """vLLM's QKVParallelLinear divides the heads among tp GPUs (linear.py:1065-1071)."""
        if not isinstance(tp, int) or tp < 1:
            raise CatalogueError(f"tp must be a whole number >= 1, not {tp!r}")
        if self.heads % tp:
            raise CatalogueError(f"{self.name} has {self.heads} attention heads, which tp {tp} does not divide "
                                 f"(vLLM requires it)")
        if (self.kv_heads % tp) if self.kv_heads >= tp else (tp % self.kv_heads):
            raise CatalogueError(f"{self.name} has {self.kv_heads} KV heads: tp {tp} must divide them or be a "
                                 f"multiple of them (vLLM requires it)")

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        """vLLM's ModelConfig.get_num_kv_heads (config/model.py:1663-1683): KV heads are replicated when
        tp exceeds them."""
        return max(1, self.kv_heads // tp)

    def weight_bytes_per_gpu(self, tp: int = 1) -> float:
        """Each GPU's share of the weights, sharded as vLLM shards them: q/o, MLP and experts divided
        by tp, k/v by the KV heads each GPU keeps, the (padded) vocabulary divided by tp, norms and the
        router replicated."""
        self.check_tp(tp)
        vocab = math.ceil(self.vocab / VOCAB_PADDING) * VOCAB_PADDING
        kv_share = self.kv_heads_per_gpu(tp) / self.kv_heads
        total = 0.0
        for p in self.parts():
            per_gpu = {"vocab": p.params * vocab / self.vocab / tp, "q": p.params / tp, "kv": p.params * kv_share,
                       "tp": p.params / tp, "rep": p.params}[p.shard]
            total += per_gpu * p.bytes_per_param
        return total

    @property
    def weight_bytes(self) -> float:
        return self.weight_bytes_per_gpu(1)

    # ---- KV cache ----

    def kv_bytes_per_token(self, tp: int = 1, kv_bytes: float | None = None) -> float:
        """2 (K and V) x layers x KV heads on one GPU x head_dim x bytes. Every layer counts, the
        sliding-window ones too (they hold at most the window: see kv.py)."""
        b = self.dtype_bytes if kv_bytes is None else kv_bytes
        return 2 * self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * b

    @property
    def sliding_layers(self) -> int:
        return sum(t == "sliding_attention" for t in self.layer_types)

    def describe(self) -> str:
        act = f", {self.active_params / 1e9:.2f}B active" if self.is_moe else ""
        return f"{self.name}: {self.architecture}, {self.total_params / 1e9:.2f}B parameters{act}"


# ---- reading a config.json ----

class _Reader:
    def __init__(self, cfg: dict, path: Path, arch: str):
        self.cfg, self.path, self.arch, self.notes = cfg, path, arch, []

    def req(self, key: str, *alts: str) -> int:
        for k in (key, *alts):
            if self.cfg.get(k) is not None:
                return self._count(k, self.cfg[k])
        also = f" (or {', '.join(repr(a) for a in alts)})" if alts else ""
        raise CatalogueError(f"{self.path} has no '{key}'{also}, which a {self.arch} config needs")

    def opt(self, key: str, default, why: str | None = None):
        v = self.cfg.get(key)
        if v is None:
            if why:
                self.notes.append(why)
            return default
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise CatalogueError(f"'{key}' in {self.path} must be true or false, not {v!r}")
            return v
        if isinstance(default, int):
            return self._count(key, v)
        return v

    def _count(self, key: str, v) -> int:
        # no model has ten million of anything it counts (layers, heads, sizes, a vocabulary)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT:
            raise CatalogueError(f"'{key}' in {self.path} must be a whole number from 1 to {MAX_COUNT:,}, not {v!r}")
        return v


MAX_COUNT = 10_000_000


def _architecture(cfg: dict, path: Path) -> tuple[str, str]:
    supported = ", ".join(ARCHITECTURES)
    archs = cfg.get("architectures")
    if archs:
        if not isinstance(archs, list) or not isinstance(archs[0], str):
            raise CatalogueError(f"'architectures' in {path} must be a list of names, not {archs!r}")
        if archs[0] not in ARCHITECTURES:
            raise CatalogueError(f"{path}: architecture '{archs[0]}' is not supported; supported: {supported}")
        return archs[0], ARCHITECTURES[archs[0]]
    mt = cfg.get("model_type")
    if mt is None:
        raise CatalogueError(f"{path} has neither 'architectures' nor 'model_type'; one names the architecture "
                             f"(supported: {supported})")
    if mt not in MODEL_TYPES:
        raise CatalogueError(f"{path}: model_type '{mt}' is not supported; supported architectures: {supported}")
    return MODEL_TYPES[mt], mt


def _dtype_bytes(r: _Reader) -> int:
    dt = r.cfg.get("torch_dtype", r.cfg.get("dtype"))
    if dt is not None and not isinstance(dt, str):
        raise CatalogueError(f"'torch_dtype' in {r.path} must be a name such as \"bfloat16\", not {dt!r}")
    if dt is None or dt in FLOAT32_DTYPES:
        # vLLM's dtype "auto" runs a float32 (or unstated, float32 by default) checkpoint in bf16 on
        # GPUs (config/model.py:2440-2442, _resolve_auto_dtype).
        r.notes.append(f"torch_dtype {dt!r}: taken as bfloat16 (2 bytes), as vLLM's dtype 'auto' runs it")
        return 2
    if dt in HALF_DTYPES:
        return 2
    raise CatalogueError(f"'torch_dtype' {dt!r} in {r.path} is not supported; supported: bfloat16, float16, "
                         f"float32 (run as bfloat16)")


def _quantization(r: _Reader, d: int) -> tuple[float, float]:
    """(bytes a parameter of the attention/MLP matrices, of the routed experts' matrices)."""
    q = r.cfg.get("quantization_config")
    if not q:
        return d, d
    method = q.get("quant_method") if isinstance(q, dict) else None
    if method == "fp8":
        # Linear layers in 1 byte; embedding, lm_head, norms and biases stay in dtype (scales not counted).
        r.notes.append("quantization fp8: attention, MLP and expert matrices at 1 byte a parameter "
                       "(scales not counted)")
        return 1, 1
    if method == "mxfp4":
        # gpt-oss: only the experts are MXFP4 (modules_to_not_convert: attention, router, embedding, lm_head).
        r.notes.append("quantization mxfp4: routed experts' matrices at 4.25 bits a parameter (4-bit values + "
                       "an 8-bit scale per 32); their biases and all other weights in dtype")
        return d, MXFP4_BYTES
    raise CatalogueError(f"{r.path}: quantization method {method!r} is not modelled; supported: "
                         f"{', '.join(QUANT_METHODS)} (or remove quantization_config to count the weights in "
                         f"torch_dtype)")


def from_config(cfg: dict, path: Path, name: str) -> Model:
    arch, family = _architecture(cfg, path)
    r = _Reader(cfg, path, arch)
    if family == "bloom":
        return _bloom(r, name)
    H = r.req("hidden_size")
    L = r.req("num_hidden_layers")
    nq = r.req("num_attention_heads")
    V = r.req("vocab_size")
    nkv = r.opt("num_key_value_heads", nq, "num_key_value_heads absent: taken as num_attention_heads (no GQA)")
    if nq % nkv:
        raise CatalogueError(f"{path}: num_attention_heads ({nq}) must be a multiple of num_key_value_heads ({nkv})")
    if family == "gpt_oss":  # transformers' GptOssConfig default head_dim is 64, not hidden / heads
        hd = r.opt("head_dim", 64, "head_dim absent: 64, transformers' GptOssConfig default")
    else:
        if "head_dim" not in r.cfg and H % nq:
            raise CatalogueError(f"{path}: hidden_size ({H}) is not a multiple of num_attention_heads ({nq}): "
                                 "give head_dim")
        hd = r.opt("head_dim", H // nq, f"head_dim absent: hidden_size / num_attention_heads = {H // nq}")
    tied = r.opt("tie_word_embeddings", False, "tie_word_embeddings absent: false (the default of "
                 f"transformers' config for {arch})")
    d = _dtype_bytes(r)
    linear, expert = _quantization(r, d)
    attn_bias = False if family in ("mistral", "mixtral") else r.opt("attention_bias", family == "gpt_oss")
    kw = dict(qkv_bias=attn_bias or family == "qwen2", o_bias=attn_bias,
              mlp_bias=r.opt("mlp_bias", False) if family == "llama" else False,
              gated=True, layer_norm=False, qk_norm=family in ("qwen3", "qwen3_moe"), embed_norm=False,
              sinks=family == "gpt_oss")
    layer_types = cfg.get("layer_types") or ()
    window = cfg.get("sliding_window") if layer_types else None
    if layer_types and (not isinstance(layer_types, list) or len(layer_types) != L
                        or not all(isinstance(t, str) for t in layer_types)
                        or not set(layer_types) <= {"full_attention", "sliding_attention"}):
        raise CatalogueError(f"'layer_types' in {path} must list num_hidden_layers ({L}) entries, each "
                             f"'full_attention' or 'sliding_attention'")
    if family == "mixtral":
        E, k = r.req("num_local_experts"), r.req("num_experts_per_tok")
        I = r.req("intermediate_size")
        moe = dict(experts=E, experts_per_token=k, moe_intermediate=I, moe_layers=tuple(range(L)))
    elif family == "qwen3_moe":
        E, k, Im = r.req("num_experts"), r.req("num_experts_per_tok"), r.req("moe_intermediate_size")
        step = r.opt("decoder_sparse_step", 1, "decoder_sparse_step absent: 1 (every layer MoE)")
        dense_only = cfg.get("mlp_only_layers") or []
        if not isinstance(dense_only, list) or not all(isinstance(i, int) for i in dense_only):
            raise CatalogueError(f"'mlp_only_layers' in {path} must be a list of layer numbers, not {dense_only!r}")
        # transformers' Qwen3MoeDecoderLayer: MoE where not in mlp_only_layers and (i + 1) % step == 0.
        layers = tuple(i for i in range(L) if i not in dense_only and (i + 1) % step == 0)
        I = r.req("intermediate_size") if len(layers) < L else r.opt("intermediate_size", 0)
        moe = dict(experts=E, experts_per_token=k, moe_intermediate=Im, moe_layers=layers)
    elif family == "gpt_oss":
        E = r.req("num_local_experts")
        k = r.req("num_experts_per_tok", "experts_per_token")
        I = r.req("intermediate_size")
        moe = dict(experts=E, experts_per_token=k, moe_intermediate=I, moe_layers=tuple(range(L)),
                   router_bias=True, expert_bias=True)
        r.notes.append("gpt-oss attention sinks (one logit per head) are counted as parameters; they add no "
                       "KV cache")
        if layer_types:
            r.notes.append(f"gpt-oss sliding-window layers (window {window}) are counted in kv_bytes_per_token "
                           f"as if they held every token; kv_blocks groups them as vLLM's hybrid allocator does")
    else:
        I = r.req("intermediate_size")
        moe = {}
    if family in ("mistral", "mixtral") and cfg.get("sliding_window"):
        r.notes.append(f"sliding_window {cfg['sliding_window']} on every layer: vLLM keeps only the window's "
                       f"blocks of a request; kv_bytes_per_token and token_capacity count every token")
    return Model(name=name, architecture=arch, path=str(path), layers=L, hidden=H, heads=nq, kv_heads=nkv,
                 head_dim=hd, intermediate=I, vocab=V, tied=tied, dtype_bytes=d, linear_bytes=linear,
                 expert_bytes=expert, layer_types=tuple(layer_types), sliding_window=window,
                 notes=tuple(r.notes), source=cfg.get("_source"), **kw, **moe)


def _bloom(r: _Reader, name: str) -> Model:
    """BLOOM: LayerNorm everywhere (also after the embedding), biases on every linear layer, ALiBi (no
    position parameters), no GQA, a GELU MLP of 4 x hidden, lm_head tied to the embedding."""
    H = r.req("hidden_size", "n_embed")
    L = r.req("n_layer", "num_hidden_layers")
    nq = r.req("n_head", "num_attention_heads")
    V = r.req("vocab_size")
    if H % nq:
        raise CatalogueError(f"{r.path}: hidden_size ({H}) is not a multiple of n_head ({nq})")
    tied = r.opt("tie_word_embeddings", True, "tie_word_embeddings absent: true (BloomForCausalLM ties lm_head "
                 "to the word embeddings)")
    d = _dtype_bytes(r)
    linear, expert = _quantization(r, d)
    return Model(name=name, architecture="BloomForCausalLM", path=str(r.path), layers=L, hidden=H, heads=nq,
                 kv_heads=nq, head_dim=H // nq, intermediate=4 * H, vocab=V, tied=tied, dtype_bytes=d,
                 linear_bytes=linear, expert_bytes=expert, qkv_bias=True, o_bias=True, mlp_bias=True,
                 gated=False, layer_norm=True, qk_norm=False, embed_norm=True, sinks=False,
                 notes=tuple(r.notes), source=r.cfg.get("_source"))


def model_names() -> list[str]:
    return names(MODELS_DIR)


def load_model(name_or_path) -> Model:
    """A shipped model by name (see model_names()), or a config.json (or a directory holding one)."""
    path = resolve(name_or_path, MODELS_DIR, "model", "config.json")
    cfg = read_json(path)
    if path.parent == MODELS_DIR:
        name = path.stem
    else:
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return from_config(cfg, path, name)
