"""A model spec from a local Hugging Face `config.json` (no download): Llama, Mistral, Mixtral,
Qwen 2 / 2.5 / 3 (dense and MoE), Gemma 1 / 2 / 3 and DeepSeek V2 / V3 (MLA + MoE) configs map
onto the same ModelSpec fields the catalogue uses (capsim.spec.config: sliding windows, MoE, MLA).

What a config leaves out is taken from the `transformers` config class's default for that model
type (_DEFAULTS, each cited), never guessed; a field or feature with no mapping is an error naming
it and the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from capsim.errors import CapsimError, quote, short_path
from capsim.spec.config import ModelSpec, validate

# model_type -> family; the family decides how attention layers, MoE and MLA are read.
FAMILIES = {"llama": "llama", "mistral": "mistral", "mixtral": "mixtral", "qwen2": "qwen2", "qwen3": "qwen2",
            "qwen2_moe": "qwen_moe", "qwen3_moe": "qwen_moe", "gemma": "gemma", "gemma2": "gemma2",
            "gemma3": "gemma3", "gemma3_text": "gemma3", "deepseek_v2": "deepseek", "deepseek_v3": "deepseek"}
# Values a published config.json omits because its transformers config class supplies them
# (transformers/models/<type>/configuration_<type>.py defaults).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": False},      # LlamaConfig
    "mistral": {"tie_word_embeddings": False},    # MistralConfig
    "mixtral": {"tie_word_embeddings": False},    # MixtralConfig
    "qwen2": {"tie_word_embeddings": False},      # Qwen2Config / Qwen3Config
    "qwen_moe": {"tie_word_embeddings": False, "decoder_sparse_step": 1, "mlp_only_layers": []},  # Qwen2Moe/Qwen3Moe
    "gemma": {"tie_word_embeddings": True},       # GemmaConfig
    "gemma2": {"tie_word_embeddings": True},      # Gemma2Config
    # Gemma3TextConfig: vocab 262,208, 131,072 positions, a 4,096-token window (the published
    # configs set their own), every 6th layer global
    "gemma3": {"tie_word_embeddings": True, "vocab_size": 262_208, "max_position_embeddings": 131_072,
               "sliding_window": 4096, "sliding_window_pattern": 6},
    "deepseek": {"tie_word_embeddings": False, "moe_layer_freq": 1, "first_k_dense_replace": 0,
                 "n_shared_experts": 0},          # DeepseekV2Config / DeepseekV3Config
}
_LAYER_KINDS = {"full_attention": "full", "sliding_attention": "sliding"}
_NEEDED = object()  # _Config.count: no default, the field must be there


class _Config:
    """The config's fields with the family's defaults, read by name; a missing one, or one of the
    wrong type, is an error that names it and the file."""

    def __init__(self, data: dict, family: str, source: str) -> None:
        self.data, self.family, self.source = {**_DEFAULTS.get(family, {}), **data}, family, source

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def need(self, key: str) -> Any:
        value = self.data.get(key)
        if value is None:
            raise CapsimError(f"{self.source}: field '{key}' is missing; a {self.family} config needs it to size "
                              "the model.")
        return value

    def count(self, key: str, default: Any = _NEEDED, positive: bool = True) -> int:
        """A whole-number field (JSON 4096 or 4096.0; not 4096.5, "4096", true, NaN or 1e309): a
        value truncated or coerced here would size a different model than the file describes."""
        value = self.need(key) if default is _NEEDED else self.get(key, default)
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer())
        if not ok or (positive and value <= 0) or value < 0:
            least = "a positive" if positive else "a non-negative"
            raise CapsimError(f"{self.source}: field '{key}' is {quote(value)}; expected {least} whole number.")
        return int(value)

    def flag(self, key: str) -> bool:
        value = self.get(key, False)
        if not isinstance(value, bool):
            raise CapsimError(f"{self.source}: field '{key}' is {quote(value)}; expected true or false.")
        return value

    def unsupported(self, key: str, why: str) -> CapsimError:
        return CapsimError(f"{self.source}: field '{key}' is {quote(self.data.get(key))}: {why}; capsim cannot map "
                           "it onto a model spec (write the model inline in a workload's model: block instead).")


def model_from_hf_config(path: Path, name: str | None = None) -> ModelSpec:
    """The ModelSpec a local Hugging Face config.json describes (see the module docstring). Its
    name: `name`, else the config's folder ('Llama-3.1-8B/config.json' -> 'llama-3.1-8b')."""
    source = short_path(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nesting too deep to parse
        raise CapsimError(f"{source}: cannot read it as a Hugging Face config.json ({getattr(exc, 'strerror', None) or exc})."
                          ) from None
    if not isinstance(data, dict):
        raise CapsimError(f"{source}: expected a JSON object of config fields, got {type(data).__name__}.")
    outer_type = data.get("model_type")
    if data.get("text_config") is not None:  # multimodal configs keep the language model's fields here
        if not isinstance(data["text_config"], dict):
            raise CapsimError(f"{source}: field 'text_config' is {quote(data['text_config'])}; expected an object "
                              "of the language model's config fields.")
        data = {"model_type": outer_type, **data["text_config"]}
    model_type = str(data.get("model_type") or outer_type or "")
    family = FAMILIES.get(model_type)
    if family is None:
        raise CapsimError(f"{source}: field 'model_type' is {quote(model_type or None)}, which capsim cannot map; "
                          f"supported: {', '.join(FAMILIES)}.")
    c = _Config(data, family, source)
    spec = _base_fields(c) | _layer_fields(c) | _moe_fields(c) | _mla_fields(c)
    spec["name"] = name or _name_from(Path(path))
    spec["source"] = f"{source} (Hugging Face config.json, model_type {model_type})"
    return validate(ModelSpec, spec, f"{source} (as a model spec)")


def _name_from(path: Path) -> str:
    folder = path.resolve().parent.name
    return (folder if path.name == "config.json" and folder else path.stem).lower()


def _base_fields(c: _Config) -> dict:
    heads = c.count("num_attention_heads")
    hidden = c.count("hidden_size")
    head_dim = c.count("v_head_dim") if c.family == "deepseek" else c.count("head_dim", hidden // heads)
    return {
        "num_layers": c.count("num_hidden_layers"), "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": c.count("num_key_value_heads", heads), "head_dim": head_dim,
        "intermediate_size": c.count("intermediate_size"), "mlp": "gated",  # SwiGLU / GeGLU: 3 matrices
        "vocab_size": c.count("vocab_size"), "tie_embeddings": c.flag("tie_word_embeddings"),
        "max_context_tokens": c.count("max_position_embeddings"),
    }


def _layer_fields(c: _Config) -> dict:
    """Full and sliding-window attention layers, from `layer_types` where the config lists them
    (one per layer), else by the family's rule (Mistral: every layer when sliding_window is set;
    Gemma 2: every other layer; Gemma 3: all but every sliding_window_pattern-th)."""
    n = c.count("num_hidden_layers")
    types = c.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n:
            raise c.unsupported("layer_types", f"expected a list of {n} layer kinds, one per hidden layer")
        unknown = sorted({str(t) for t in types if not isinstance(t, str) or t not in _LAYER_KINDS})
        if unknown:
            raise c.unsupported("layer_types", f"layer kind(s) {', '.join(unknown)} have no mapping (supported: "
                                f"{', '.join(_LAYER_KINDS)})")
        sliding = sum(t == "sliding_attention" for t in types)
    elif c.family == "mistral":
        sliding = n if c.get("sliding_window") else 0
    elif c.family in ("qwen2", "qwen_moe") and c.flag("use_sliding_window"):
        sliding = max(0, n - c.count("max_window_layers", n, positive=False))  # layers from max_window_layers on slide
    elif c.family == "gemma2":
        sliding = (n + 1) // 2  # layers 0, 2, 4, ... slide
    elif c.family == "gemma3":
        sliding = n - n // c.count("sliding_window_pattern")
    else:
        sliding = 0
    if not sliding:
        return {}
    return {"layers": {"full": n - sliding, "sliding": sliding}, "sliding_window_tokens": c.count("sliding_window")}


def _moe_fields(c: _Config) -> dict:
    if c.family == "mixtral":
        moe = {"num_experts": c.count("num_local_experts"), "experts_per_token": c.count("num_experts_per_tok"),
               "expert_intermediate_size": c.count("intermediate_size")}
    elif c.family == "qwen_moe":
        if c.get("mlp_only_layers") or c.count("decoder_sparse_step") != 1:
            key = "mlp_only_layers" if c.get("mlp_only_layers") else "decoder_sparse_step"
            raise c.unsupported(key, "dense layers between the MoE layers")
        moe = {"num_experts": c.count("num_experts"), "experts_per_token": c.count("num_experts_per_tok"),
               "expert_intermediate_size": c.count("moe_intermediate_size")}
        shared = c.count("shared_expert_intermediate_size", 0, positive=False)
        if shared:  # Qwen2-MoE: one shared expert of its own width
            moe |= {"num_shared_experts": 1, "shared_intermediate_size": shared}
    elif c.family == "deepseek" and c.get("n_routed_experts"):
        if c.count("moe_layer_freq") != 1:
            raise c.unsupported("moe_layer_freq", "MoE in only every few layers")
        moe = {"num_experts": c.count("n_routed_experts"), "experts_per_token": c.count("num_experts_per_tok"),
               "expert_intermediate_size": c.count("moe_intermediate_size"),
               "num_shared_experts": c.count("n_shared_experts", positive=False),
               "dense_layers": c.count("first_k_dense_replace", positive=False)}
    else:
        return {}
    return {"moe": moe}


def _mla_fields(c: _Config) -> dict:
    if c.family != "deepseek":
        return {}
    mla = {k: c.count(k) for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    if c.get("q_lora_rank"):
        mla["q_lora_rank"] = c.count("q_lora_rank")
    return {"mla": mla}
