"""Sizing a model on GPUs in one line (docs/sizing.md): `--model`, `--gpu`, `--tp` fill the inputs of
examples/sizing/vllm.sq from the catalogue (serq/catalogue/sizing.py)."""
from __future__ import annotations

import json
import math
import os

import pytest

from serq.catalogue import gpu_names, kv_blocks, load_gpu, load_model, model_names
from serq.catalogue.sizing import FILLED, roofline_inputs, size, step_times, vllm_defaults
from serq.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQ = os.path.join(ROOT, "examples", "sizing", "vllm.sq")


def serq(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def smallest_tp(model: str, gpu: str) -> int | None:
    """The fewest GPUs (1, 2, 4, 8) the model fits on, as vLLM would load it."""
    from serq.catalogue import CatalogueError
    for tp in (1, 2, 4, 8):
        try:
            size(model, gpu, tp, vllm_defaults(load_gpu(gpu)))
            return tp
        except CatalogueError:
            continue
    return None


PAIRS = [(m, g) for m in model_names() for g in gpu_names()]


@pytest.mark.parametrize("model,gpu", PAIRS)
def test_every_shipped_pair_is_sized_and_respects_the_physical_floor(model, gpu):
    """Each shipped model on each shipped GPU (at the fewest GPUs it fits on, 8 at most): the inputs
    resolve, a decode step is never faster than the weights over the bandwidth (nor than the KV it
    reads), and a prefill never faster than its FLOPs at the GPU's peak."""
    tp = smallest_tp(model, gpu)
    if tp is None:   # BLOOM-176B's 352 GB of weights fit no 8 of the 40 GB A100s
        assert load_model(model).weight_bytes > 8 * load_gpu(gpu).memory_bytes * 0.9
        return
    sz = size(model, gpu, tp, vllm_defaults(load_gpu(gpu)))
    v = sz.values
    supplied = {k: v[k] for k in FILLED if k in v} | {"B": v.get("B", 8192)}
    t = step_times(SQ, supplied)
    floor = (v["w_read"] + v["w_expert"] * v["topk"]) / v["bw"]   # and the experts a token is sent to
    kv = v["kv_tok"] * (t["decode_context"] + 1) / v["bw"]
    assert t["decode_step_s"] >= floor + kv
    flops = v["f_tok"] * t["prefill_tokens"] / v["peak"]
    assert t["prefill_step_s"] >= flops
    # and the figures are the catalogue's: weights per GPU over tp GPUs
    m = load_model(model)
    assert v["w_read"] <= m.weight_bytes_per_gpu(tp) <= sz.plan.weights + 1
    assert sz.plan.usable_blocks == v["blocks"] > 0


def test_the_blocks_input_is_vllm_s_count_with_vllm_s_defaults_on_that_gpu(capsys):
    """`serq inputs --json` prints `blocks` and `bs` resolved: vLLM's count (kv.py) with the GPU's
    defaults of max_num_batched_tokens and max_num_seqs (vllm/engine/arg_utils.py): 8192 and 1024 on
    an H100, 2048 and 256 on an A100, 16384 and 1024 on a B200."""
    for gpu, B, seqs in (("h100", 8192, 1024), ("a100-80", 2048, 256), ("b200", 16384, 1024)):
        code, out, _ = serq(capsys, "inputs", SQ, "--model", "llama-3.1-8b", "--gpu", gpu, "--json")
        assert code == 0
        doc = json.loads(out)
        got = doc["inputs"]
        assert (got["B"], got["max_seqs"], got["bs"]) == (B, seqs, 16)
        plan = kv_blocks("llama-3.1-8b", gpu, 1, 0.9, 16, max_num_batched_tokens=B, max_num_seqs=seqs)
        assert got["blocks"] == plan.usable_blocks == doc["sizing"]["kv_blocks"]
        assert doc["sizing"]["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    # a setting the user names is kept, and the blocks follow it
    code, out, _ = serq(capsys, "inputs", SQ, "--model", "llama-3.1-8b", "--gpu", "h100", "--json",
                        "--", "bs=32", "util=0.8", "blocks=1000")
    got = json.loads(out)["inputs"]
    assert got["bs"] == 32 and got["util"] == 0.8 and got["blocks"] == 1000
    code, out, _ = serq(capsys, "inputs", SQ, "--model", "llama-3.1-8b", "--gpu", "h100", "--json",
                        "--", "bs=32", "util=0.8")
    plan = kv_blocks("llama-3.1-8b", "h100", 1, 0.8, 32, max_num_batched_tokens=8192, max_num_seqs=1024)
    assert json.loads(out)["inputs"]["blocks"] == plan.usable_blocks


def test_the_roofline_the_program_reads_is_the_formula_by_hand():
    """Llama-3.1-8B on one H100, a decode of one request at 1024 tokens and a prefill of 1024 from 0,
    computed here from the model's published shape and the H100's datasheet, with the defaults' factors
    (docs/sizing.md, *A worked example by hand*)."""
    L, H, heads, kvh, hd, I, V = 32, 4096, 32, 8, 128, 14336, 128256
    per_layer = H * heads * hd + 2 * H * kvh * hd + heads * hd * H + 3 * H * I + 2 * H
    params = V * H * 2 + L * per_layer + H          # embedding, lm_head (untied), layers, final norm
    assert params == load_model("llama-3.1-8b").total_params
    w_read = (params - V * H) * 2                   # bf16, the embedding table is looked up, not read
    f_tok = 2 * (params - 2 * V * H)
    f_head = 2 * V * H
    f_attn = 4 * L * heads * hd
    kv_tok = 2 * L * kvh * hd * 2
    peak, bw, mfu, mbu, c0 = 989.4e12, 3.35e12, 0.5, 0.8, 0.003
    v = roofline_inputs(load_model("llama-3.1-8b"), load_gpu("h100"), 1)
    # the shipped lm_head is padded to 64 rows by vLLM in the weights per GPU: within 0.1%
    assert math.isclose(v["w_read"], w_read, rel_tol=1e-3)
    assert (v["f_tok"], v["f_head"], v["f_attn"], v["kv_tok"]) == (f_tok, f_head, f_attn, kv_tok)
    p = 1024
    decode = c0 + max((f_tok + f_head + f_attn * (p + 1)) / (peak * mfu),
                      (v["w_read"] + kv_tok * (p + 1)) / (bw * mbu))
    pairs = max(p * p - p * (p - 1) / 2, p * p / 2)
    prefill = c0 + max((f_tok * p + f_head + f_attn * pairs) / (peak * mfu), (v["w_read"] + kv_tok * p) / (bw * mbu))
    t = step_times(SQ, {k: v[k] for k in FILLED if k != "blocks"})
    assert math.isclose(t["decode_step_s"], decode, rel_tol=1e-12)
    assert math.isclose(t["prefill_step_s"], prefill, rel_tol=1e-12)


def test_tensor_parallelism_splits_the_work_and_adds_the_all_reduces():
    """At tp 2 each GPU reads half the layers' weights and computes half the FLOPs, and each layer adds
    two ring all-reduces of the batch's hidden states: 2 (t - 1) steps of a latency, and 2 (t - 1) / t of
    their bytes over the link."""
    one = size("llama-3.1-8b", "h100", 1).values
    two = size("llama-3.1-8b", "h100", 2).values
    assert math.isclose(two["f_tok"], one["f_tok"] / 2) and math.isclose(two["f_attn"], one["f_attn"] / 2)
    assert two["kv_tok"] == one["kv_tok"] / 2 and two["tp"] == 2
    t1 = step_times(SQ, {k: one[k] for k in FILLED if k != "blocks"})
    t2 = step_times(SQ, {k: two[k] for k in FILLED if k != "blocks"})
    comm = 2 * 32 * (2 * 1 * 8e-6 + 2 * 1 / 2 * 1 * 4096 * 2 / 450e9)   # a 1-token decode's all-reduces: 2 ring steps
    assert t2["decode_step_s"] < t1["decode_step_s"]
    mem2 = (two["w_read"] + two["kv_tok"] * 1025) / (3.35e12 * 0.8)
    assert math.isclose(t2["decode_step_s"], 0.003 + mem2 + comm, rel_tol=1e-9)


def test_a_moe_model_reads_the_experts_its_batch_touches():
    """Mixtral-8x7B: a token is sent to 2 of 8 experts, so one token reads 2 experts' weights and a
    large batch all 8; its FLOPs are the active parameters' (12.9B), not the total's (46.7B)."""
    v = size("mixtral-8x7b", "h100", 2).values
    assert (v["experts"], v["topk"]) == (8, 2)
    one = v["w_read"] + v["w_expert"] * 2
    every = v["w_read"] + v["w_expert"] * 8
    m = load_model("mixtral-8x7b")
    assert math.isclose(every, m.weight_bytes_per_gpu(2) - m.vocab * m.hidden * 2 / 2, rel_tol=2e-3)
    assert v["f_tok"] < 2 * m.active_params / 2
    base = {k: v[k] for k in FILLED if k != "blocks"}
    t = step_times(SQ, base)
    assert t["decode_step_s"] >= one / v["bw"]


def test_one_line_answers_the_question(capsys, tmp_path):
    """`serq run` with a model and a GPU: the report says which, and the numbers it used."""
    code, out, err = serq(capsys, "run", SQ, "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "1",
                          "--horizon", "20", "--quiet", "--json", "--", "rate=5")
    assert code == 0, err
    rep = json.loads(out)
    s = rep["sizing"]
    assert (s["model"], s["gpu"], s["tp"]) == ("llama-3.1-8b", "h100", 1)
    assert s["decode_step_s"] > s["floor_s"] > 0 and s["prefill_step_s"] > 0
    assert rep["client"]["ttft"]["count"] > 0
    code, out, err = serq(capsys, "run", SQ, "--model", "qwen3-30b-a3b", "--gpu", "h200", "--horizon", "10",
                          "--quiet", "--", "rate=5")
    assert code == 0, err
    assert out.startswith("sizing: qwen3-30b-a3b (30.53B parameters, 3.35B active) on 1 x h200")


def test_a_model_given_as_a_config_json(capsys, tmp_path):
    """A user's config.json: the same reader as the shipped models'."""
    with open(os.path.join(ROOT, "serq", "catalogue", "models", "qwen2.5-7b.json"), encoding="utf-8") as fh:
        cfg = {k: v for k, v in json.load(fh).items() if not k.startswith("_")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = serq(capsys, "inputs", SQ, "--model", str(path), "--gpu", "l40s", "--json")
    assert code == 0, err
    mine = json.loads(out)
    code, out, err = serq(capsys, "inputs", SQ, "--model", "qwen2.5-7b", "--gpu", "l40s", "--json")
    assert json.loads(out)["inputs"] == mine["inputs"]


@pytest.mark.parametrize("argv,says", [
    (["--model", "llama-9", "--gpu", "h100"], ["llama-9", "llama-3.1-8b", "qwen3-30b-a3b"]),
    (["--model", "llama-3.1-8b", "--gpu", "h900"], ["h900", "a100-40", "mi300x"]),
    (["--model", "llama-3.1-70b", "--gpu", "h100"], ["needs 141.1 GB", "h100 has 76.5 GB", "it fits at --tp 2"]),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "3"], ["tp 3"]),
    (["--model", "llama-3.1-8b"], ["--gpu is missing"]),
    (["--tp", "2"], ["--model and --gpu"]),
])
def test_bad_sizing_is_a_usage_error_that_says_what_to_change(capsys, argv, says):
    code, out, err = serq(capsys, "run", SQ, "--horizon", "5", *argv)
    assert code == 2 and out == ""
    assert err.startswith("serq: error: ") and "Traceback" not in err
    for word in says:
        assert word in err, (word, err)


def test_a_bad_config_json_names_the_field_or_the_architecture(capsys, tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
           "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = serq(capsys, "inputs", SQ, "--model", str(path), "--gpu", "h100")
    assert code == 2 and "num_hidden_layers" in err and str(path) in err
    path.write_text(json.dumps({**cfg, "num_hidden_layers": 32, "architectures": ["MambaForCausalLM"]}))
    code, _, err = serq(capsys, "inputs", SQ, "--model", str(path), "--gpu", "h100")
    assert code == 2 and "MambaForCausalLM" in err and "LlamaForCausalLM" in err
    path.write_text("{not json")
    code, _, err = serq(capsys, "inputs", SQ, "--model", str(path), "--gpu", "h100")
    assert code == 2 and "JSON" in err and "Traceback" not in err


def test_a_program_that_is_not_the_roofline_is_told_so(capsys):
    code, _, err = serq(capsys, "run", os.path.join(ROOT, "examples", "single-turn", "mg1.sq"), "--horizon", "5",
                        "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and "roofline.sq" in err
