"""The model and GPU catalogue (serq/catalogue): parameter counts against the published figures, GPU
figures in SI, the KV blocks vLLM 0.33.0 would allocate, and errors a user can act on."""
from __future__ import annotations

import json
import os
from importlib import resources

import pytest

from serq.catalogue import (GPU, CatalogueError, Model, gpu_names, kv_blocks, load_gpu, load_model,
                            model_names)
from serq.catalogue.kv import DEFAULT_CUDAGRAPH_BYTES, activation_estimate

# Published parameter counts (model cards / release posts; see each file's "_source").
PUBLISHED = {
    "llama-3.1-8b": 8.03e9, "llama-3.1-70b": 70.6e9, "qwen2.5-7b": 7.61e9, "qwen3-14b": 14.8e9,
    "qwen3-30b-a3b": 30.5e9, "mixtral-8x7b": 46.7e9, "mistral-nemo-12b": 12.2e9, "codellama-34b": 33.7e9,
    "llama-2-70b": 69.0e9, "bloom-176b": 176.247271424e9, "gpt-oss-20b": 20.91e9,
}
PUBLISHED_ACTIVE = {"mixtral-8x7b": 12.9e9, "qwen3-30b-a3b": 3.3e9}
GPUS = {"a100-40", "a100-80", "h100", "h200", "b200", "l40s", "mi300x"}

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def write(tmp_path, data, name="config.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


# ---- models ----

def test_the_shipped_models_are_the_catalogue():
    assert set(model_names()) == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_model_loads_and_counts_its_published_parameters(name):
    m = load_model(name)
    assert isinstance(m, Model) and m.name == name
    assert m.total_params == pytest.approx(PUBLISHED[name], rel=0.02)
    src = m.source
    assert src["hf_repo"] and src["config_url"].startswith("https://huggingface.co/") and src["read_from"]


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_moe_active_parameters(name):
    m = load_model(name)
    assert m.is_moe
    assert m.active_params == pytest.approx(PUBLISHED_ACTIVE[name], rel=0.02)


def test_gpt_oss_counts_as_openai_does():
    m = load_model("gpt-oss-20b")
    # OpenAI's 3.61B active leaves the input embedding out (it keeps the unembedding).
    assert m.active_params - m.embedding_params == pytest.approx(3.61e9, rel=0.02)
    assert m.sinks and m.expert_bias and m.router_bias and m.sliding_window == 128
    assert m.expert_bytes == pytest.approx(4.25 / 8)  # MXFP4 experts
    # 12.8 GiB checkpoint: the MXFP4 experts plus everything else in bf16
    assert m.weight_bytes / 2**30 == pytest.approx(12.8, abs=0.1)
    assert any("mxfp4" in n for n in m.notes) and any("bfloat16" in n for n in m.notes)


def test_parameter_count_by_hand_llama_3_1_8b():
    m = load_model("llama-3.1-8b")
    embedding = 128256 * 4096  # and as much again in the untied lm_head
    per_layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096  # q, o; k, v; MLP; norms
    assert m.total_params == 2 * embedding + 32 * per_layer + 4096 == 8_030_261_248


def test_bloom_counts_every_bias_and_layernorm_exactly():
    m = load_model("bloom-176b")
    assert (m.kv_heads, m.head_dim, m.intermediate, m.tied, m.gated) == (112, 128, 4 * 14336, True, False)
    assert m.total_params == 176_247_271_424


def test_qwen2_has_qkv_bias_and_qwen3_qk_norms():
    assert load_model("qwen2.5-7b").qkv_bias and not load_model("qwen2.5-7b").o_bias
    q3 = load_model("qwen3-14b")
    assert q3.qk_norm and not q3.qkv_bias


def test_kv_bytes_per_token_llama_3_1_8b():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes (bf16)
    assert load_model("llama-3.1-8b").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131072


def test_kv_heads_under_tensor_parallelism():
    m = load_model("llama-3.1-70b")  # 8 KV heads
    assert [m.kv_heads_per_gpu(t) for t in (1, 2, 8, 16)] == [8, 4, 1, 1]  # replicated past 8
    assert m.kv_bytes_per_token(tp=8) == 2 * 80 * 1 * 128 * 2
    assert m.weight_bytes_per_gpu(8) == pytest.approx(m.weight_bytes / 8, rel=0.001)


def test_a_users_config_json_reads_like_a_shipped_one(tmp_path):
    write(tmp_path, LLAMA_8B)
    m = load_model(tmp_path)  # a directory: its config.json
    assert m.name == tmp_path.name
    assert m.total_params == load_model("llama-3.1-8b").total_params


def test_defaults_are_applied_and_recorded(tmp_path):
    cfg = {k: v for k, v in LLAMA_8B.items() if k not in ("num_key_value_heads", "torch_dtype", "architectures")}
    cfg["model_type"] = "mistral"
    m = load_model(write(tmp_path, cfg, "mine.json"))
    assert m.architecture == "MistralForCausalLM" and m.name == "mine"
    assert (m.kv_heads, m.head_dim, m.dtype_bytes) == (32, 128, 2)
    assert any("num_key_value_heads" in n for n in m.notes) and any("head_dim" in n for n in m.notes)
    assert any("torch_dtype" in n for n in m.notes)


def test_qwen3_moe_layout_fields(tmp_path):
    cfg = json.loads((resources.files("serq.catalogue") / "models" / "qwen3-30b-a3b.json").read_text())
    cfg.update(decoder_sparse_step=2, mlp_only_layers=[1])
    m = load_model(write(tmp_path, cfg))
    assert m.moe_layers == tuple(i for i in range(3, 48, 2))  # (i + 1) % 2 == 0, layer 1 dense
    assert m.total_params < load_model("qwen3-30b-a3b").total_params


def test_fp8_checkpoint_halves_the_linear_weights(tmp_path):
    cfg = dict(LLAMA_8B, quantization_config={"quant_method": "fp8"})
    m = load_model(write(tmp_path, cfg))
    bf16 = load_model("llama-3.1-8b")
    embeddings = 2 * 128256 * 4096 * 2
    assert m.weight_bytes == pytest.approx((bf16.weight_bytes - embeddings) / 2 + embeddings, rel=1e-4)


# ---- GPUs ----

def test_the_shipped_gpus_are_the_catalogue():
    assert set(gpu_names()) == GPUS


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_loads(name):
    g = load_gpu(name)
    assert isinstance(g, GPU) and g.name == name
    assert g.bf16_flops > 1e14 and g.hbm_bandwidth > 5e11 and g.link_bandwidth >= 3.2e10
    assert 0.9 < g.memory_bytes / g.hbm_bytes < 1.1  # torch-reported total near the datasheet's
    assert g.source["datasheet"] and g.source["url"].startswith("https://") and g.source["usable"]


def test_gpu_units_are_si():
    h = load_gpu("h100")
    assert (h.bf16_flops, h.fp8_flops, h.hbm_bytes) == (989.4e12, 1978.9e12, 80e9)
    assert (h.hbm_bandwidth, h.link_bandwidth) == (3.35e12, 450e9)  # NVLink 4: 900 GB/s both ways
    assert h.memory_bytes == 81090 * 2**20  # what torch reports: 79.19 GiB
    assert load_gpu("a100-80").fp8_flops is None
    assert load_gpu("l40s").link_bandwidth == 32e9  # PCIe Gen4 x16, one way


def test_a_users_gpu_file(tmp_path):
    g = load_gpu(write(tmp_path, {"bf16_tflops": 100, "hbm_gb": 24, "hbm_tb_s": 1, "link_gb_s": 16}, "mine.json"))
    assert (g.name, g.bf16_flops, g.memory_bytes, g.fp8_flops) == ("mine", 100e12, 24e9, None)
    assert any("usable_mib" in n for n in g.notes)


# ---- errors ----

def test_unknown_model_lists_the_known_ones():
    with pytest.raises(CatalogueError, match="unknown model 'llama-9'") as e:
        load_model("llama-9")
    assert all(n in str(e.value) for n in model_names())


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(CatalogueError, match="unknown GPU 'v100'") as e:
        load_gpu("v100")
    assert all(n in str(e.value) for n in gpu_names())


def test_missing_field_names_the_field_and_the_file(tmp_path):
    p = write(tmp_path, {k: v for k, v in LLAMA_8B.items() if k != "num_hidden_layers"})
    with pytest.raises(CatalogueError, match="num_hidden_layers") as e:
        load_model(p)
    assert str(p) in str(e.value)


def test_unsupported_architecture_is_named_with_the_supported_ones(tmp_path):
    p = write(tmp_path, dict(LLAMA_8B, architectures=["GPT2LMHeadModel"]))
    with pytest.raises(CatalogueError, match="GPT2LMHeadModel") as e:
        load_model(p)
    assert all(a in str(e.value) for a in ("LlamaForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM",
                                           "BloomForCausalLM"))


def test_a_file_that_is_not_json(tmp_path):
    with pytest.raises(CatalogueError, match="is not JSON"):
        load_model(write(tmp_path, "{hidden_size: 4096"))
    with pytest.raises(CatalogueError, match="is not JSON"):
        load_gpu(write(tmp_path, "h100\n", "gpu.json"))


def test_a_missing_file(tmp_path):
    with pytest.raises(CatalogueError, match="no such model file"):
        load_model(tmp_path / "absent.json")


def test_gpu_file_missing_a_key_names_it_and_the_required_ones(tmp_path):
    p = write(tmp_path, {"bf16_tflops": 100, "hbm_gb": 24, "link_gb_s": 16}, "gpu.json")
    with pytest.raises(CatalogueError, match="'hbm_tb_s'") as e:
        load_gpu(p)
    assert "bf16_tflops, hbm_gb, hbm_tb_s, link_gb_s" in str(e.value)


def test_bad_values_and_quantizations_are_refused(tmp_path):
    with pytest.raises(CatalogueError, match="'hidden_size'.*whole number"):
        load_model(write(tmp_path, dict(LLAMA_8B, hidden_size="4096")))
    with pytest.raises(CatalogueError, match="'awq' is not modelled; supported: fp8, mxfp4"):
        load_model(write(tmp_path, dict(LLAMA_8B, quantization_config={"quant_method": "awq"})))


def test_tp_must_divide_the_heads():
    with pytest.raises(CatalogueError, match="28 attention heads, which tp 8"):
        kv_blocks("qwen2.5-7b", "h100", tp=8)


def test_a_model_that_does_not_fit():
    with pytest.raises(CatalogueError) as e:
        kv_blocks("llama-3.1-70b", "h100")
    assert str(e.value) == ("llama-3.1-70b needs 141.1 GB of weights per GPU at tp 1; an h100 has 76.5 GB at "
                            "gpu_memory_utilization 0.9 (85.0 GB as torch reports it)")


def test_a_request_longer_than_the_cache_is_refused():
    with pytest.raises(CatalogueError, match="max_model_len 131072 needs"):
        kv_blocks("llama-3.1-70b", "h100", tp=2, max_model_len=131072)  # 26,384 tokens fit


# ---- KV blocks ----

def test_kv_blocks_llama_3_1_8b_on_an_h100_by_hand():
    """vLLM 0.33.0's formula, written out (numbers in bytes):
    total      = 81090 MiB (torch's total_memory for an H100 80GB HBM3)        = 85,029,027,840
    requested  = ceil(0.9 x total)                    (worker/utils.py:724)   = 76,526,125,056
    weights    = 8,030,261,248 parameters x 2 (bf16; 128256 is a multiple of 64) = 16,060,522,496
    activation = max(forward, sampler):
      forward  = 8192 tokens x 2 bytes x (3 x 4096 + 3 x 14336)  (the MLP)    =    905,969,664
      sampler  = 256 rows x 128256 x (2 + 4 + 4 + 4) + 8192 x 4096 x 2      =    526,778,368
    CUDA graphs (the default allowance, 0.5 GiB)                             =    536,870,912
    available  = 76,526,125,056 - 16,060,522,496 - 905,969,664 - 536,870,912 = 59,022,761,984
    page       = 16 tokens x 8 KV heads x (128 + 128) x 2 bytes             =         65,536
    per block  = 32 layers x 65,536                                          =      2,097,152
    blocks     = 59,022,761,984 // 2,097,152                                 =         28,144
    """
    p = kv_blocks("llama-3.1-8b", "h100", tp=1, gpu_memory_utilization=0.9)
    total = 81090 * 2**20
    requested = -(-total * 9 // 10)
    weights = 8_030_261_248 * 2
    forward = 8192 * 2 * (3 * 4096 + 3 * 14336)
    sampler = 256 * 128256 * (2 + 4 + 4 + 4) + 8192 * 4096 * 2
    available = requested - weights - max(forward, sampler) - DEFAULT_CUDAGRAPH_BYTES
    page = 16 * 8 * (128 + 128) * 2
    assert (total, requested, weights, forward, sampler, DEFAULT_CUDAGRAPH_BYTES) == \
        (85_029_027_840, 76_526_125_056, 16_060_522_496, 905_969_664, 526_778_368, 536_870_912)
    assert (p.total_memory, p.requested_memory, p.weights) == (total, requested, weights)
    assert (p.activation_forward, p.activation_sampler, p.activation_peak) == (forward, sampler, forward)
    assert p.available_kv == available == 59_022_761_984
    assert (p.page_bytes, p.bytes_per_block, p.kv_groups) == (65_536, 32 * 65_536, 1)
    assert p.num_gpu_blocks == available // (32 * page) == 28_144
    assert p.usable_blocks == 28_143  # block 0 is vLLM's null block
    assert p.bytes_per_token == 131072 and p.token_capacity == 28_143 * 16


def test_kv_blocks_follow_the_knobs():
    base = kv_blocks("llama-3.1-8b", "h100")
    fp8 = kv_blocks("llama-3.1-8b", "h100", kv_cache_dtype_bytes=1)
    assert fp8.num_gpu_blocks == 2 * base.num_gpu_blocks or fp8.num_gpu_blocks == 2 * base.num_gpu_blocks + 1
    eager = kv_blocks("llama-3.1-8b", "h100", cudagraph_bytes=0)
    assert eager.available_kv - base.available_kv == DEFAULT_CUDAGRAPH_BYTES
    tp2 = kv_blocks("llama-3.1-70b", "h100", tp=2)
    assert tp2.kv_heads_per_gpu == 4 and tp2.bytes_per_block == 80 * 16 * 4 * 256 * 2
    assert tp2.weights == pytest.approx(load_model("llama-3.1-70b").weight_bytes / 2, rel=1e-3)


def test_activation_estimate_grows_with_the_batch():
    m = load_model("llama-3.1-8b")
    small, big = activation_estimate(m, 1, 2048, 256), activation_estimate(m, 1, 16384, 1024)
    assert big[0] == 8 * small[0] and big[1] > small[1]
    moe = load_model("qwen3-30b-a3b")
    f, _ = activation_estimate(moe, 1, 8192, 256)
    # residual/input/output + fused_moe caches (k max(2Im, H) and k Im) + fp32 router logits
    assert f == 8192 * 2 * (3 * 2048 + 8 * 2048 + 8 * 768) + 8192 * 128 * 4


def test_gpt_oss_uses_vllms_hybrid_groups():
    p = kv_blocks("gpt-oss-20b", "h100")
    page = 16 * 8 * (64 + 64) * 2
    assert (p.kv_groups, p.page_bytes, p.bytes_per_block) == (2, page, 12 * page)  # 12 full + 12 sliding
    assert p.token_capacity == (p.num_gpu_blocks - 1) * 16


def test_the_json_files_ship_inside_the_package():
    root = resources.files("serq.catalogue")
    assert {p.name for p in (root / "models").iterdir()} >= {f"{n}.json" for n in PUBLISHED}
    assert {p.name for p in (root / "gpus").iterdir()} >= {f"{n}.json" for n in GPUS}


def test_a_mutated_file_is_read_or_refused_with_a_message_never_a_traceback(tmp_path):
    """Shipped model and GPU files with fields dropped or set to 0, -1, NaN, 1e308, 2**70, a string,
    null, a list: each pair is sized or refused with a CatalogueError, and what is sized is finite."""
    import math
    import random

    from serq.catalogue.sizing import size
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serq", "catalogue")
    models = [json.load(open(os.path.join(root, "models", n))) for n in sorted(os.listdir(os.path.join(root, "models")))]
    gpus = [json.load(open(os.path.join(root, "gpus", n))) for n in sorted(os.listdir(os.path.join(root, "gpus")))]
    values = [0, -1, 1, 3, 0.5, 1e308, float("nan"), "abc", None, [], {}, True, 2 ** 70]
    rnd = random.Random(7)
    mp, gp = tmp_path / "m.json", tmp_path / "g.json"
    for _ in range(400):
        m, g = dict(rnd.choice(models)), dict(rnd.choice(gpus))
        for obj in (m, g):
            for _ in range(rnd.randint(1, 2)):
                k = rnd.choice(list(obj))
                if rnd.random() < 0.2:
                    obj.pop(k)
                else:
                    obj[k] = rnd.choice(values)
        mp.write_text(json.dumps(m))
        gp.write_text(json.dumps(g))
        try:
            got = size(str(mp), str(gp), rnd.choice([1, 2, 4, 8]))
        except CatalogueError as exc:
            assert str(exc)
            continue
        assert all(math.isfinite(v) for v in got.values.values()), got.values
