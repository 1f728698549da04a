"""Model specs from Hugging Face config.json files (capsim.spec.hf_config). The configs under
tests/data/hf_configs/ are the models' published config.json files; each derived parameter count is
checked against the published size, and where the catalogue holds the same model, the derived
spec must size it exactly as the catalogue does."""

from __future__ import annotations

import json

import pytest
from helpers import REPO

from capsim.errors import CapsimError
from capsim.spec.architecture import kv_values_per_token, param_counts
from capsim.spec.catalog import load_model
from capsim.spec.hf_config import model_from_hf_config

CONFIGS = REPO / "tests" / "data" / "hf_configs"

# file -> (published total parameters, where it is published, catalogue entry or None)
PUBLISHED = {
    "llama-3.1-8b.json": (8.03e9, "Llama 3.1 model card (8B); safetensors 8,030,261,248", "llama-3.1-8b"),
    "mistral-7b-v0.1.json": (7.24e9, "Mistral 7B paper / safetensors 7,241,732,096", "mistral-7b"),
    "mixtral-8x7b-v0.1.json": (46.7e9, "Mixtral of Experts paper: 47B total", "mixtral-8x7b"),
    "qwen2.5-7b-instruct.json": (7.61e9, "Qwen2.5-7B-Instruct model card: 7.61B", "qwen2.5-7b"),
    "qwen3-8b.json": (8.2e9, "Qwen3-8B model card: 8.2B", "qwen3-8b"),
    "qwen3-30b-a3b.json": (30.5e9, "Qwen3-30B-A3B model card: 30.5B total", "qwen3-30b-a3b"),
    "qwen2-57b-a14b.json": (57.4e9, "Qwen2 technical report: 57B total, 14B active", None),
    "gemma-7b.json": (8.54e9, "Gemma report, Table 2: 786M embedding + 7,751M non-embedding", None),
    "gemma-2-9b.json": (9.24e9, "Gemma 2 report, Table 2: 918M embedding + 8,324M non-embedding", None),
    "gemma-3-27b-it.json": (27.0e9, "Gemma 3 report, Table 1: 1,416M embedding + 25,600M non-embedding",
                            "gemma-3-27b"),
    "deepseek-v2-lite.json": (15.7e9, "DeepSeek-V2-Lite model card: 15.7B total, 2.4B active", None),
    "deepseek-v3.json": (671e9, "DeepSeek-V3 report: 671B total, 37B active", "deepseek-v3"),
}


def test_every_shipped_config_is_checked():
    assert {p.name for p in CONFIGS.glob("*.json")} == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_derived_size_matches_the_published_one(name):
    spec = model_from_hf_config(CONFIGS / name)
    published, _, _ = PUBLISHED[name]
    total = param_counts(spec).total
    assert abs(total / published - 1) < 0.03, (name, total, published)


@pytest.mark.parametrize("name", sorted(k for k, v in PUBLISHED.items() if v[2]))
def test_sized_as_the_catalogue_sizes_the_same_model(name):
    spec, entry = model_from_hf_config(CONFIGS / name), load_model(PUBLISHED[name][2])
    assert param_counts(spec) == param_counts(entry)
    assert kv_values_per_token(spec) == kv_values_per_token(entry)
    for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "layers", "sliding_window_tokens", "moe",
                  "mla", "tie_embeddings", "vocab_size"):
        assert getattr(spec, field) == getattr(entry, field), field


def test_features_land_on_the_spec_fields():
    gemma2 = model_from_hf_config(CONFIGS / "gemma-2-9b.json")
    assert gemma2.layer_counts.sliding == 21 and gemma2.layer_counts.full == 21 and gemma2.sliding_window_tokens == 4096
    qwen2moe = model_from_hf_config(CONFIGS / "qwen2-57b-a14b.json")
    assert qwen2moe.moe.num_shared_experts == 1 and qwen2moe.moe.shared_intermediate_size == 20480
    lite = model_from_hf_config(CONFIGS / "deepseek-v2-lite.json")
    assert lite.mla.q_lora_rank is None and lite.moe.dense_layers == 1 and lite.moe.num_shared_experts == 2
    assert model_from_hf_config(CONFIGS / "llama-3.1-8b.json").name == "llama-3.1-8b"


def _write(tmp_path, data: dict):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder / "config.json"


def test_a_config_it_cannot_map_names_the_field_and_file(tmp_path):
    base = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    path = _write(tmp_path, base | {"model_type": "mamba"})
    with pytest.raises(CapsimError, match=r"config.json: field 'model_type' is 'mamba'.*supported: llama"):
        model_from_hf_config(path)
    del base["num_hidden_layers"]
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(base))
    with pytest.raises(CapsimError, match=r"my-model/config.json: field 'num_hidden_layers' is missing"):
        model_from_hf_config(path)
    qwen = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(qwen | {"mlp_only_layers": [0, 1]}))
    with pytest.raises(CapsimError, match=r"field 'mlp_only_layers' is \[0, 1\]: dense layers"):
        model_from_hf_config(path)
    gemma = json.loads((CONFIGS / "gemma-2-9b.json").read_text())
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(gemma | {"layer_types": ["mamba"] * 42}))
    with pytest.raises(CapsimError, match=r"field 'layer_types'.*mamba have no mapping"):
        model_from_hf_config(path)
    (tmp_path / "my-model" / "config.json").write_text("{not json")
    with pytest.raises(CapsimError, match=r"cannot read it as a Hugging Face config.json"):
        model_from_hf_config(path)


LLAMA = json.loads((CONFIGS / "llama-3.1-8b.json").read_text()) if CONFIGS.exists() else {}


@pytest.mark.parametrize(("change", "message"), [
    ({"num_attention_heads": 0}, r"'num_attention_heads' is 0; expected a positive whole number"),
    ({"hidden_size": "4096"}, r"'hidden_size' is '4096'; expected a positive whole number"),
    ({"hidden_size": 4096.5}, r"'hidden_size' is 4096.5; expected a positive"),
    ({"hidden_size": True}, r"'hidden_size' is True; expected a positive"),
    ({"hidden_size": [1]}, r"'hidden_size' is \[1\]; expected a positive"),
    ({"num_hidden_layers": -3}, r"'num_hidden_layers' is -3; expected a positive"),
    ({"intermediate_size": float("inf")}, r"'intermediate_size' is inf; expected a positive"),
    ({"vocab_size": float("nan")}, r"'vocab_size' is nan; expected a positive"),
    ({"tie_word_embeddings": "no"}, r"'tie_word_embeddings' is 'no'; expected true or false"),
    ({"layer_types": ["full_attention"]}, r"'layer_types' is \['full_attention'\]: expected a list of 32 layer kinds"),
    ({"layer_types": 5}, r"'layer_types' is 5: expected a list of 32"),
    ({"layer_types": [["x"]] * 32}, r"'layer_types' is .*: layer kind\(s\) \['x'\] have no mapping"),
    ({"text_config": [1]}, r"'text_config' is \[1\]; expected an object"),
    ({"model_type": "gemma3", "sliding_window_pattern": 0}, r"'sliding_window_pattern' is 0; expected a positive"),
    ({"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": "x", "sliding_window": 100},
     r"'max_window_layers' is 'x'; expected a non-negative whole number"),
    ({"model_type": "mixtral", "num_local_experts": "x", "num_experts_per_tok": 2}, r"'num_local_experts' is 'x'"),
    ({"model_type": "qwen2_moe", "decoder_sparse_step": "a", "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 100}, r"'decoder_sparse_step' is 'a'"),
    ({"model_type": "deepseek_v3", "n_routed_experts": 8}, r"'v_head_dim' is missing"),
])
def test_a_field_of_the_wrong_type_or_size_names_the_field(tmp_path, change, message):
    """Zero, negative, fractional, non-finite, string or boolean numbers, and malformed lists, are
    errors naming the field; none is truncated, coerced or divided by (a ZeroDivisionError, a
    ValueError from int() or a silently shorter layer list before)."""
    path = _write(tmp_path, LLAMA | change)
    with pytest.raises(CapsimError, match=r"my-model/config.json: field " + message):
        model_from_hf_config(path)


@pytest.mark.parametrize("text", ["", "[1, 2]", '"x"', "[" * 100_000 + "]" * 100_000, '{"hidden_size": 40'])
def test_a_file_that_is_not_a_json_object_is_refused(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CapsimError, match=r"config.json: (cannot read it as a Hugging Face|expected a JSON object)"):
        model_from_hf_config(path)
    with pytest.raises(CapsimError, match=r"cannot read it"):
        model_from_hf_config(tmp_path)  # a folder
