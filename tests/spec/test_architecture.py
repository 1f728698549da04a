"""Derived architecture quantities against hand formulas and published figures.

Every expected number is written out from the model's config.json so a reader can redo it.
"""

from __future__ import annotations

import pytest
from capsim.errors import CapsimError
from capsim.spec.architecture import (
    kv_bytes_for_context,
    kv_bytes_per_token,
    kv_values_per_token,
    param_counts,
    state_bytes_per_sequence,
)
from capsim.spec.catalog import load_model, model_catalog
from capsim.spec.formats import get_format

FP16 = 2  # bytes per value
GIB = 2**30

# ------------------------------------------------------------------------------------------
# KV cache bytes per token
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # K and V x hidden x layers x bytes (OPT: no GQA, head_dim x heads = hidden); seeds/002
        ("opt-13b", 2 * 5120 * 40 * 2),  # 819,200
        # K and V x kv_heads x head_dim x layers x bytes
        ("llama-2-7b", 2 * 32 * 128 * 32 * 2),  # 524,288
        ("llama-3.1-8b", 2 * 8 * 128 * 32 * 2),  # 131,072
        ("llama-2-70b", 2 * 8 * 128 * 80 * 2),
        ("qwen2.5-7b", 2 * 4 * 128 * 28 * 2),
        # hybrid: only the 16 full-attention layers cache K and V; seeds/000 "64 KiB per token"
        ("qwen3.5-27b", 16 * 4 * 256 * 2 * 2),  # 65,536
        # MLA: one latent of kv_lora_rank + qk_rope_head_dim = 576 values per layer
        ("deepseek-v3", 61 * (512 + 64) * 2),  # 70,272
    ],
)
def test_kv_bytes_per_token_fp16(name, expected):
    assert kv_bytes_per_token(load_model(name), FP16) == expected


def test_seed_figures_opt13b_and_qwen35():
    assert kv_bytes_per_token(load_model("opt-13b"), FP16) == 819_200
    assert kv_bytes_for_context(load_model("opt-13b"), 2048, FP16) == pytest.approx(1.68e9, rel=0.01)
    assert kv_bytes_per_token(load_model("qwen3.5-27b"), FP16) == 64 * 1024


def test_gemma3_splits_full_and_sliding_layers():
    gemma = load_model("gemma-3-27b")
    per_layer = 2 * 16 * 128  # K and V x 16 KV heads x head_dim 128
    # 62 layers, one global layer after every five local ones: (i + 1) % 6 == 0 -> 10 global
    assert kv_values_per_token(gemma) == (10 * per_layer, 52 * per_layer)
    assert gemma.sliding_window_tokens == 1024


def test_kv_for_context_caps_sliding_layers_at_the_window():
    gemma = load_model("gemma-3-27b")
    full, sliding = 10 * 2 * 16 * 128, 52 * 2 * 16 * 128
    # Inside the window every layer grows with the context.
    assert kv_bytes_for_context(gemma, 512, FP16) == (full + sliding) * 512 * FP16
    assert kv_bytes_for_context(gemma, 512, FP16) == kv_bytes_per_token(gemma, FP16) * 512
    # Past it, sliding layers hold exactly the window.
    assert kv_bytes_for_context(gemma, 32_768, FP16) == (full * 32_768 + sliding * 1024) * FP16
    # So the growth from 64K to 128K is full layers only.
    growth = kv_bytes_for_context(gemma, 131_072, FP16) - kv_bytes_for_context(gemma, 65_536, FP16)
    assert growth == full * 65_536 * FP16


def test_all_sliding_model_kv_stops_growing_after_the_window():
    mistral = load_model("mistral-7b")  # v0.1: every layer has a 4,096-token window
    assert kv_bytes_for_context(mistral, 32_768, FP16) == kv_bytes_for_context(mistral, 4096, FP16)
    assert kv_bytes_for_context(mistral, 4096, FP16) == 2 * 8 * 128 * 32 * 4096 * FP16


def test_models_without_windows_grow_linearly():
    llama = load_model("llama-3.1-8b")
    assert kv_bytes_for_context(llama, 100_000, FP16) == 100_000 * 131_072


# ------------------------------------------------------------------------------------------
# KV formats (block scales included)
# ------------------------------------------------------------------------------------------


def test_block_format_sizes():
    assert get_format("q8_0", for_kv=True).bytes_per_value * 32 == 34  # 32 int8 + fp16 scale
    assert get_format("q4_0", for_kv=True).bytes_per_value * 32 == 18  # 32 nibbles + fp16 scale
    assert get_format("tbq4", for_kv=True).bits_per_value == 4.125
    assert get_format("fp8", for_kv=True).bytes_per_value == 1
    # fine-grained FP8 weights: one fp32 scale per 128 x 128 block, tensor-core math in fp8; not a KV format
    blk = get_format("fp8_block")
    assert blk.bytes_per_value * 128 * 128 == 128 * 128 + 4 and blk.compute_dtype == "fp8" and not blk.kv_capable
    with pytest.raises(CapsimError, match="unknown KV-cache format 'fp8_block'"):
        get_format("fp8_block", for_kv=True)


@pytest.mark.parametrize(
    ("fmt", "bytes_per_token", "tokens_in_7gib"),
    [
        # seeds/000: "roughly 7 GiB" free on a 24 GB card for the 27B hybrid model
        ("fp16", 65_536, 115e3),  # ~115K tokens
        ("q8_0", 32_768 * 34 / 32, 216e3),  # 34,816 B/token, ~216K
        ("tbq4", 32_768 * 4.125 / 8, 445e3),  # 16,896 B/token, ~445K
    ],
)
def test_qwen35_kv_formats_reproduce_the_seed_capacity_table(fmt, bytes_per_token, tokens_in_7gib):
    model = load_model("qwen3.5-27b")
    per_token = kv_bytes_per_token(model, get_format(fmt, for_kv=True).bytes_per_value)
    assert per_token == bytes_per_token
    assert 7 * GIB / per_token == pytest.approx(tokens_in_7gib, rel=0.005)


# ------------------------------------------------------------------------------------------
# Linear-attention state
# ------------------------------------------------------------------------------------------


def test_qwen35_state_bytes_per_sequence():
    # 48 Gated-DeltaNet layers, each: recurrent matrix value_heads x key_dim x value_dim
    # + conv window (kernel - 1) over q, k, v channels (2 x 16 x 128 + 48 x 128), at 2 bytes.
    recurrent = 48 * 128 * 128
    conv = (2 * 16 * 128 + 48 * 128) * (4 - 1)
    expected = 48 * (recurrent + conv) * 2
    assert expected == 78_446_592  # about 75 MiB, whatever the context length
    assert state_bytes_per_sequence(load_model("qwen3.5-27b")) == expected


def test_models_without_linear_layers_have_no_state():
    assert state_bytes_per_sequence(load_model("llama-3.1-8b")) == 0
    assert state_bytes_per_sequence(load_model("deepseek-v3")) == 0


# ------------------------------------------------------------------------------------------
# Parameters
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(model_catalog()))
def test_derived_total_within_3_percent_of_published(name):
    model = load_model(name)
    if model.published_params is None:
        pytest.skip("no published count")
    total = param_counts(model).total
    assert total == pytest.approx(model.published_params, rel=0.03)


def test_llama2_7b_hand_count():
    embed = 32_000 * 4096
    per_layer = 4 * 4096 * 4096 + 3 * 4096 * 11_008  # q, k, v, o + gate, up, down
    counts = param_counts(load_model("llama-2-7b"))
    assert counts.total == 2 * embed + 32 * per_layer == 6_738_149_376  # published 6,738,415,616 with norms


def test_opt13b_plain_mlp_and_tied_head():
    counts = param_counts(load_model("opt-13b"))
    assert counts.mlp_dense == 40 * 2 * 5120 * 20_480  # fc1 + fc2, two matrices
    assert counts.lm_head == 0 and counts.embedding == 50_272 * 5120


def test_qwen35_hybrid_hand_count():
    h = 5120
    q, kv = 24 * 256, 4 * 256
    gated_attention = h * 2 * q + 2 * h * kv + q * h  # q_proj doubles for the output gate
    key, value = 16 * 128, 48 * 128
    deltanet = h * (2 * key + 2 * value) + h * 2 * 48 + (2 * key + value) * 4 + value * h
    counts = param_counts(load_model("qwen3.5-27b"))
    assert counts.attention == 16 * gated_attention + 48 * deltanet
    assert counts.mlp_dense == 64 * 3 * h * 17_408


def test_deepseek_v3_mla_and_moe_hand_count():
    h, n = 7168, 128
    mla = h * 1536 + 1536 * n * (128 + 64) + h * (512 + 64) + 512 * n * (128 + 128) + n * 128 * h
    counts = param_counts(load_model("deepseek-v3"))
    assert counts.attention == 61 * mla
    assert counts.mlp_dense == 3 * 3 * h * 18_432  # first_k_dense_replace = 3
    assert counts.mlp_experts == 58 * 256 * 3 * h * 2048
    assert counts.mlp_experts_active == 58 * 8 * 3 * h * 2048
    assert counts.mlp_shared == 58 * (3 * h * 2048 + h * 256)  # 1 shared expert + router


# Published active counts include the input embedding table, so compare active + embedding.
ACTIVE_PUBLISHED = {
    # Jiang et al., "Mixtral of Experts" (arXiv 2401.04088), abstract: "only uses 13B active parameters";
    # Mistral AI release post "Mixtral of experts" (2023-12-11): "12.9B parameters per token"
    "mixtral-8x7b": 12.9e9,
    # Qwen3-30B-A3B model card: "Number of Parameters: 30.5B in total and 3.3B activated"
    "qwen3-30b-a3b": 3.3e9,
    # DeepSeek-V3 Technical Report (arXiv 2412.19437), abstract: "37B activated for each token"
    "deepseek-v3": 37e9,
}


@pytest.mark.parametrize(("name", "published_active"), sorted(ACTIVE_PUBLISHED.items()))
def test_moe_active_parameters_near_published(name, published_active):
    counts = param_counts(load_model(name))
    assert counts.active + counts.embedding == pytest.approx(published_active, rel=0.03)
    assert counts.active < counts.total / 3


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-32b", "gemma-3-27b", "opt-13b"])
def test_dense_models_touch_every_parameter(name):
    counts = param_counts(load_model(name))
    assert counts.mlp_experts == counts.mlp_experts_active == 0
    embedding_not_multiplied = 0 if load_model(name).tie_embeddings else counts.embedding
    assert counts.active + embedding_not_multiplied == counts.total
