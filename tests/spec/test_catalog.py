"""The built-in catalogues: every GPU profile and model loads, holds plausible, sourced numbers,
and lookups accept aliases and suggest the closest names on a miss."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml
from capsim.spec.catalog import hardware_catalog, load_hardware, load_model, model_catalog
from capsim.errors import CapsimError

GIB = 2**30

GPUS = ["rtx3090", "rtx4090", "rtx5090", "l4", "l40s", "a100-40g", "a100-80g",
        "h100-sxm", "h100-pcie", "h200", "b200", "mi300x"]
MODELS = ["opt-13b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
          "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
          "qwen3.5-27b", "gemma-3-27b", "deepseek-v3"]

# Top-level profile fields that carry numbers and so need an entry under `sources`.
SOURCED_FIELDS = ["memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops", "interconnect",
                  "price_per_hour_usd", "efficiency", "overhead"]


def _raw_profiles() -> dict[str, dict]:
    """Shipped profile YAMLs as written (to see which fields a file fills, not the defaults)."""
    root = resources.files("capsim.hardware_profiles")
    return {p.name: yaml.safe_load(p.read_text()) for p in root.iterdir() if p.name.endswith(".yaml")}


# ------------------------------------------------------------------------------------------
# Hardware profiles
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GPUS)
def test_required_gpu_loads_by_name(name):
    assert load_hardware(name).name == name


def test_file_name_equals_name_field():
    for file_name, raw in _raw_profiles().items():
        assert raw["name"] == file_name.removesuffix(".yaml")


@pytest.mark.parametrize("name", GPUS)
def test_gpu_numbers_are_plausible(name):
    gpu = load_hardware(name)
    assert 8e9 <= gpu.memory_bytes <= 300e9
    assert 100e9 <= gpu.memory_bandwidth_bytes_per_s <= 20e12
    peaks = gpu.peak_flops
    assert all(v > 0 for v in peaks.values())
    assert peaks["fp16"] >= peaks["fp32"], "tensor fp16 below vector fp32"
    for low, high in [("fp16", "fp8"), ("fp8", "fp4"), ("fp16", "int8")]:
        if low in peaks and high in peaks:
            assert peaks[high] >= peaks[low], f"{high} peak below {low} peak"
    assert gpu.interconnect.pcie_bytes_per_s in (31.5e9, 63.0e9)  # PCIe 4.0 / 5.0 x16, one way
    if gpu.interconnect.gpu_link_bytes_per_s is not None:
        assert gpu.interconnect.gpu_link_bytes_per_s > gpu.interconnect.pcie_bytes_per_s
    if gpu.price_per_hour_usd is not None:
        assert 0.1 <= gpu.price_per_hour_usd <= 20.0
    # power-capped parts sustain far less than their tensor peak (the 72 W L4: 0.37)
    assert 0.5 <= gpu.efficiency.bandwidth <= 1.0 and 0.3 <= gpu.efficiency.compute <= 1.0


@pytest.mark.parametrize(
    ("name", "fp16_flops", "memory_gib"),
    [
        ("h100-sxm", 989.4e12, 80),  # dense, not the 1,979 sparsity figure
        ("rtx4090", 165.2e12, 24),  # FP32-accumulate rate, not 330
        ("a100-40g", 312e12, 40),
        ("a100-80g", 312e12, 80),
        ("h200", 989.5e12, 141),
        ("mi300x", 1307.4e12, 192),
    ],
)
def test_headline_figures_are_dense_and_gib_sized(name, fp16_flops, memory_gib):
    gpu = load_hardware(name)
    assert gpu.peak_flops["fp16"] == fp16_flops
    assert gpu.memory_bytes == memory_gib * GIB


def test_every_filled_numeric_field_has_a_source():
    for file_name, raw in _raw_profiles().items():
        sources = raw["sources"]
        for field in SOURCED_FIELDS:
            if raw.get(field) is not None:
                assert sources.get(field, "").strip(), f"{file_name}: no source for {field}"
        unknown = set(sources) - set(raw)
        assert not unknown, f"{file_name}: sources for fields it does not have: {unknown}"


@pytest.mark.parametrize(
    ("alias", "name"),
    [("h100", "h100-sxm"), ("H100", "h100-sxm"), ("4090", "rtx4090"), ("a100", "a100-80g"),
     ("3090", "rtx3090"), ("5090", "rtx5090"), ("mi300", "mi300x"), ("a100-40gb", "a100-40g")],
)
def test_gpu_aliases_resolve(alias, name):
    assert load_hardware(alias).name == name


def _assert_aliases_unique(catalog):
    seen: dict[str, str] = {}
    for name, item in catalog.items():
        for key in [name, *item.aliases]:
            owner = seen.setdefault(key.lower(), name)
            assert owner == name, f"{key!r} names both {owner} and {name}"


def test_aliases_are_unambiguous():
    _assert_aliases_unique(hardware_catalog())
    _assert_aliases_unique(model_catalog())


def test_unknown_gpu_suggests_closest_names():
    with pytest.raises(CapsimError, match=r"Did you mean: .*rtx4090") as info:
        load_hardware("rtx4080")
    assert "'rtx4080'" in str(info.value)


# ------------------------------------------------------------------------------------------
# Malformed profiles: the error names the file and the field
# ------------------------------------------------------------------------------------------


def _valid_profile() -> dict:
    return yaml.safe_load((resources.files("capsim.hardware_profiles") / "rtx4090.yaml").read_text())


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(memory_bytes="lots"), "memory_bytes"),  # wrong type
        (lambda d: d.update(memory_gb=24), "memory_gb"),  # unknown key
        (lambda d: d.pop("memory_bandwidth_bytes_per_s"), "memory_bandwidth_bytes_per_s"),  # missing
        (lambda d: d["interconnect"].update(pcie_bytes_per_s=-1), "interconnect.pcie_bytes_per_s"),
        (lambda d: d["peak_flops"].update(fp12=1.0e12), "peak_flops.fp12"),  # dtype not allowed
    ],
)
def test_malformed_profile_error_names_file_and_field(tmp_path, mutate, field):
    data = _valid_profile()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(CapsimError) as info:
        load_hardware(path)
    message = str(info.value)
    assert str(path) in message
    assert field in message


def test_profile_with_bad_yaml_syntax_names_file_and_line(tmp_path):
    path = tmp_path / "syntax.yaml"
    path.write_text("name: x\npeak_flops: {fp16: 1.0e+12\n")
    with pytest.raises(CapsimError, match="line") as info:
        load_hardware(path)
    assert str(path) in str(info.value)


def test_valid_profile_copy_loads_from_a_path(tmp_path):
    assert load_hardware(_write(tmp_path, _valid_profile())).name == "rtx4090"


# ------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_required_model_loads_with_sourced_numbers(name):
    model = load_model(name)
    assert model.name == name
    assert model.source.startswith("https://huggingface.co/")
    assert model.published_params and model.params_source
    for value in (model.num_layers, model.hidden_size, model.num_heads, model.num_kv_heads,
                  model.head_dim, model.intermediate_size, model.vocab_size, model.max_context_tokens):
        assert value > 0
    assert model.num_heads % model.num_kv_heads == 0
    assert 64 <= model.head_dim <= 256


def test_catalog_holds_every_required_model():
    assert set(MODELS) <= set(model_catalog())


@pytest.mark.parametrize(
    ("alias", "name"),
    [("meta-llama/llama-3.1-8b-instruct", "llama-3.1-8b"), ("Meta-Llama/Llama-2-7b-hf", "llama-2-7b"),
     ("mistral-7b-v0.1", "mistral-7b"), ("facebook/opt-13b", "opt-13b"),
     ("Qwen/Qwen3.5-27B", "qwen3.5-27b"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
     ("google/gemma-3-27b-it", "gemma-3-27b"), ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b")],
)
def test_model_aliases_resolve(alias, name):
    assert load_model(alias).name == name


def test_unknown_model_suggests_closest_names():
    with pytest.raises(CapsimError, match=r"Did you mean: .*llama-2-7b"):
        load_model("lama-2-7b")


def test_unknown_model_without_close_match_lists_known_models():
    with pytest.raises(CapsimError, match="Known models: .*opt-13b"):
        load_model("zzzzzz")
