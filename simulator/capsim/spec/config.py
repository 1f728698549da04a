"""YAML -> validated, frozen config objects. The only module that reads YAML.

Every error a user can cause comes out as a CapsimError naming the file, the field and what is
allowed (pydantic does the checking; `_explain` turns its report into one paragraph).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capsim.spec import limits as L
from capsim.spec import safe_yaml
from capsim.errors import CapsimError, did_you_mean, quote, short_path

# pydantic puts the chosen member's tag into error locations of tagged unions; users never wrote
# it, so error messages leave these out.
_UNION_TAGS: set[str] = set()


class Frozen(BaseModel):
    """Base for config data: immutable, unknown keys rejected, numbers finite (inf and nan are
    refused with the field's name rather than turning into overflows or empty runs later), and
    true/false never taken for the number 1/0 (pydantic's lax mode would)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_number(cls, data: Any) -> Any:
        """A true/false given where a number belongs is passed on as the word 'true'/'false', which
        the number field then refuses under its own name (pydantic would take it for 1/0)."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: _words_for_bools(fields[k].annotation, v) if k in fields else v for k, v in data.items()}


def _kinds(annotation: Any) -> set:
    """The plain types an annotation admits (Annotated, Optional and unions opened)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _kinds(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_kinds(a) for a in get_args(annotation)))
    return {annotation}


def _words_for_bools(annotation: Any, value: Any) -> Any:
    """`value` with each bool that stands where the annotation wants a number (directly, in a
    list, or as a mapping's value) replaced by 'true' or 'false'."""
    if isinstance(value, bool):
        kinds = _kinds(annotation)
        return str(value).lower() if kinds & {int, float} and bool not in kinds else value
    if isinstance(value, (list, dict)):
        for kind in _kinds(annotation):
            args = get_args(kind)
            if isinstance(value, list) and get_origin(kind) is list and args:
                return [_words_for_bools(args[0], v) for v in value]
            if isinstance(value, dict) and get_origin(kind) is dict and len(args) == 2:
                return {k: _words_for_bools(args[1], v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# Hardware profiles
# --------------------------------------------------------------------------------------------

# fp16_acc16: the FP16-accumulate tensor rate, which GeForce cards run at twice their FP32-accumulate
# rate (engines that use it, like llama.cpp's cuBLAS path, get the higher peak; elsewhere = fp16).
Dtype = Literal["fp32", "tf32", "fp16", "fp16_acc16", "bf16", "fp8", "int8", "fp4", "int4"]


class Efficiency(Frozen):
    """Shares of the datasheet peaks a real server reaches (realistic mode).

    A GEMM of M tokens costs the 4-norm of weight bytes / (gemv_bandwidth x BW) and FLOPs /
    (compute x ramp(M) x peak) (their max in document mode; capsim.cost.decode_runs.GEMM_OVERLAP_NORM),
    with ramp(M) = M / (M + compute_half_tokens). The ramp is measured over a range of M;
    below `compute_ramp_from_tokens` it keeps its value there instead of falling towards 0, so a
    small-M GEMM stays weight-read bound (a GEMV) as GEMV measurements show."""

    bandwidth: float = Field(0.8, ge=L.MIN_EFFICIENCY, le=1, description="achieved / peak memory bandwidth of streaming "
                             "kernels (elementwise; weight reads too unless gemv_bandwidth is given)")
    gemv_bandwidth: float | None = Field(
        None, ge=L.MIN_EFFICIENCY, le=1, description="achieved / peak bandwidth of weight-streaming GEMV and small-M "
        "GEMMs (default: bandwidth)")
    compute: float = Field(0.7, ge=L.MIN_EFFICIENCY, le=1, description="achieved / peak dense tensor FLOPS, large GEMMs")
    compute_by_dtype: dict[Dtype, Annotated[float, Field(ge=L.MIN_EFFICIENCY, le=1)]] = Field(
        {}, description="large-GEMM share of the peak per compute dtype where it differs from `compute` "
        "(e.g. fp8 on Hopper)")
    compute_half_tokens: float = Field(
        0.0, ge=0, le=L.MAX_TOKENS, description="GEMM efficiency ramp: eff(M) = compute * M / (M + this); 0 = flat"
    )
    compute_ramp_from_tokens: float = Field(
        0.0, ge=0, le=L.MAX_TOKENS, description="below this many tokens the ramp keeps its value at this many "
        "(the smallest M it was measured at); 0: the ramp applies at every M")
    attention_bandwidth: float | None = Field(
        None, ge=L.MIN_EFFICIENCY, le=1, description="bandwidth efficiency of paged-attention KV reads (default: bandwidth)"
    )
    attention_compute: float | None = Field(None, ge=L.MIN_EFFICIENCY, le=1, description="achieved / peak fp16 "
                                            "FLOPS of prefill attention over long contexts (default: compute)")
    attention_half_keys: float = Field(0.0, ge=0, le=L.MAX_TOKENS, description="each prompt token's attention row "
                                       "costs as much as this many more keys: a token attending K keys runs at "
                                       "attention_compute * K / (K + this); 0 = flat")

    def compute_for(self, dtype: str) -> float:
        """The large-GEMM share of the peak for GEMMs computed in this dtype."""
        return self.compute_by_dtype.get(dtype, self.compute)  # type: ignore[call-overload]


class Overhead(Frozen):
    """Fixed GPU-side times: per forward pass, per layer, per kernel and per decoding sequence.

    `kernel_s` is the fixed cost of one kernel launched back to back (launch latency, ramp and
    tail) and is multiplied by the serving engine's kernels per layer; `launch_gap_s` is what a
    kernel adds when the engine does not replay CUDA graphs; `attention_seq_s` is the fixed cost
    of one sequence and KV head in one layer's decode-attention kernel (its context-independent
    part; it overlaps with streaming long contexts)."""

    step_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S)
    layer_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S)
    kernel_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S)
    launch_gap_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S)
    attention_seq_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S)


class Interconnect(Frozen):
    pcie_bytes_per_s: float = Field(ge=L.MIN_BYTES_PER_S, le=L.MAX_BYTES_PER_S, description="host link, one direction")
    gpu_link_bytes_per_s: float | None = Field(
        None, ge=L.MIN_BYTES_PER_S, le=L.MAX_BYTES_PER_S, description="GPU-to-GPU link (NVLink, Infinity Fabric), one direction, per GPU"
    )
    link_efficiency: float = Field(0.8, ge=L.MIN_EFFICIENCY, le=1, description="achieved / peak link bandwidth in all-reduce")
    allreduce_latency_s: float = Field(10e-6, ge=0, le=L.MAX_FIXED_TIME_S, description="fixed time of one all-reduce (small messages)")


class Calibration(Frozen):
    """Provenance and fit quality of a profile measured with `capsim calibrate`."""

    device_name: str
    backend: str
    date: str
    driver: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    raw_data_file: str | None = None
    raw_data_sha256: str | None = None
    fit: dict[str, float] = {}
    mape: dict[str, float] = {}
    notes: str = ""


class HardwareProfile(Frozen):
    name: str
    aliases: list[str] = []
    vendor: Literal["nvidia", "amd", "intel", "apple", "other"] = "nvidia"
    memory_bytes: int = Field(gt=0, le=L.MAX_MEMORY_BYTES)
    memory_visible_bytes: int | None = Field(
        None, gt=0, le=L.MAX_MEMORY_BYTES, description="memory the CUDA runtime reports as total (vLLM's total_gpu_memory); "
        "default: memory_bytes"
    )
    memory_bandwidth_bytes_per_s: float = Field(ge=L.MIN_BYTES_PER_S, le=L.MAX_BYTES_PER_S)
    peak_flops: dict[Dtype, Annotated[float, Field(ge=L.MIN_FLOPS, le=L.MAX_FLOPS)]] = Field(description="dense tensor peaks per dtype (fp32 = vector)")
    efficiency: Efficiency = Efficiency()
    overhead: Overhead = Overhead()
    interconnect: Interconnect
    price_per_hour_usd: float | None = Field(None, gt=0, le=1e6)
    sources: dict[str, str] = Field(description="where each number came from, keyed by field")
    notes: str = ""
    calibration: Calibration | None = None

    @model_validator(mode="after")
    def _check(self) -> HardwareProfile:
        if "fp16" not in self.peak_flops:
            raise ValueError("peak_flops must include fp16")
        return self

    def peak_for(self, dtype: str) -> float:
        """Dense peak for a compute dtype; falls back to fp16 when the GPU lacks that unit."""
        if dtype in ("bf16", "fp16_acc16") and dtype not in self.peak_flops:
            dtype = "fp16"
        return self.peak_flops.get(dtype, self.peak_flops["fp16"])  # type: ignore[call-overload]


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class LayerCounts(Frozen):
    """How many layers of each token-mixer kind. Full and sliding layers hold a KV cache; linear
    (recurrent) layers hold a fixed state per sequence instead."""

    full: int = Field(ge=0, le=L.MAX_LAYERS)
    sliding: int = Field(0, ge=0, le=L.MAX_LAYERS)
    linear: int = Field(0, ge=0, le=L.MAX_LAYERS)


class LinearAttention(Frozen):
    """Gated-DeltaNet-style linear attention (Qwen3-Next / Qwen3.5): recurrent state per sequence."""

    num_key_heads: int = Field(gt=0, le=L.MAX_WIDTH)
    num_value_heads: int = Field(gt=0, le=L.MAX_WIDTH)
    key_head_dim: int = Field(gt=0, le=L.MAX_WIDTH)
    value_head_dim: int = Field(gt=0, le=L.MAX_WIDTH)
    conv_kernel_tokens: int = Field(4, gt=0, le=L.MAX_WIDTH)
    state_bytes_per_value: float = Field(2.0, gt=0, le=64, description="recurrent state dtype (vLLM default: model dtype)")


class MoE(Frozen):
    num_experts: int = Field(gt=0, le=L.MAX_WIDTH)
    experts_per_token: int = Field(gt=0, le=L.MAX_WIDTH)
    expert_intermediate_size: int = Field(gt=0, le=L.MAX_WIDTH)
    num_shared_experts: int = Field(0, ge=0, le=L.MAX_WIDTH)
    shared_intermediate_size: int | None = Field(None, gt=0, le=L.MAX_WIDTH, description="default: expert size")
    dense_layers: int = Field(0, ge=0, le=L.MAX_LAYERS, description="leading layers with a dense MLP instead of experts")


class MLA(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent per token per layer."""

    kv_lora_rank: int = Field(gt=0, le=L.MAX_WIDTH)
    qk_rope_head_dim: int = Field(gt=0, le=L.MAX_WIDTH)
    qk_nope_head_dim: int = Field(gt=0, le=L.MAX_WIDTH)
    v_head_dim: int = Field(gt=0, le=L.MAX_WIDTH)
    q_lora_rank: int | None = Field(None, gt=0, le=L.MAX_WIDTH)


class ModelSpec(Frozen):
    name: str
    aliases: list[str] = []
    source: str = Field("", description="where the architecture numbers came from (config.json URL)")
    num_layers: int = Field(gt=0, le=L.MAX_LAYERS)
    hidden_size: int = Field(gt=0, le=L.MAX_WIDTH)
    num_heads: int = Field(gt=0, le=L.MAX_WIDTH)
    num_kv_heads: int = Field(gt=0, le=L.MAX_WIDTH)
    head_dim: int = Field(gt=0, le=L.MAX_WIDTH)
    intermediate_size: int = Field(gt=0, le=L.MAX_WIDTH, description="dense MLP width")
    mlp: Literal["gated", "plain"] = Field("gated", description="gated = SwiGLU (3 matrices), plain = 2")
    vocab_size: int = Field(gt=0, le=L.MAX_WIDTH)
    tie_embeddings: bool = False
    max_context_tokens: int = Field(gt=0, le=L.MAX_TOKENS)
    attention_output_gate: bool = Field(False, description="q_proj also produces a gate (Qwen3-Next/3.5)")
    layers: LayerCounts | None = Field(None, description="default: every layer full attention")
    sliding_window_tokens: int | None = Field(None, gt=0, le=L.MAX_TOKENS)
    linear_attention: LinearAttention | None = None
    moe: MoE | None = None
    mla: MLA | None = None
    published_params: float | None = Field(None, gt=0, le=1e16, description="total parameters as published")
    params_source: str | None = None
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        counts = self.layer_counts
        if counts.full + counts.sliding + counts.linear != self.num_layers:
            raise ValueError(f"layers: full + sliding + linear must equal num_layers ({self.num_layers})")
        if counts.sliding and self.sliding_window_tokens is None:
            raise ValueError("sliding layers need sliding_window_tokens")
        if counts.linear and self.linear_attention is None:
            raise ValueError("linear layers need a linear_attention block")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.moe and self.moe.experts_per_token > self.moe.num_experts:
            raise ValueError("moe.experts_per_token must not exceed moe.num_experts")
        return self

    @property
    def layer_counts(self) -> LayerCounts:
        return self.layers or LayerCounts(full=self.num_layers)


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

T = TypeVar("T", bound=BaseModel)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file within capsim.spec.safe_yaml's bounds (size, encoding, duplicate keys, alias
    expansion); every problem is a CapsimError naming the file, with the line and column."""
    return safe_yaml.load(safe_yaml.read_text(Path(path)), short_path(path))


def _loc(parts: tuple) -> str:
    """('arrivals', 'poisson', 'rate_per_s') -> 'arrivals.rate_per_s'; list indices as [i]."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p in _UNION_TAGS:
            continue  # pydantic inserts the chosen union member's tag; users never wrote it
        else:
            out += f".{p}" if out else str(p)
    return out or "(top level)"


def _model_at(cls: Any, parts: tuple) -> type[BaseModel] | None:
    """The config class an error location points into (to list the keys it allows), or None."""
    ann = cls
    for p in parts:
        kinds = [k for k in _kinds(ann) if k is not type(None)]
        models = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if models and isinstance(p, str):
            tagged = [m for m in models if any(p in get_args(f.annotation) for f in m.model_fields.values()
                                               if get_origin(f.annotation) is Literal)]
            if len(models) > 1 and tagged:
                ann = tagged[0]
                continue
            owner = next((m for m in models if p in m.model_fields), None)
            if owner is None:
                return None
            ann = owner.model_fields[p].annotation
        elif kinds and get_origin(kinds[0]) in (list, dict):
            ann = get_args(kinds[0])[-1]
        else:
            return None
    models = [k for k in _kinds(ann) if isinstance(k, type) and issubclass(k, BaseModel)]
    return models[0] if len(models) == 1 else None


def _unknown_key(cls: Any, loc: tuple, listed: set) -> str:
    """'unknown key. Did you mean: x?' for a misspelled key; where the key belongs in a block
    below (top-level max_num_seqs: in scheduler:); else the keys allowed there (once per place:
    `listed` holds the places already listed)."""
    owner = _model_at(cls, loc[:-1])
    if owner is None:
        return "unknown key"
    allowed = sorted(owner.model_fields)
    key = loc[-1]
    hint = did_you_mean(str(key), allowed) if isinstance(key, str) else ""
    if hint:
        return f"unknown key.{hint}"
    block = _block_holding(owner, key)
    if block:
        return f"unknown key here; '{key}' belongs in the '{block}' block ({block}: {{{key}: ...}})"
    if owner in listed:
        return "unknown key"
    listed.add(owner)
    return f"unknown key; allowed here: {', '.join(allowed)}"


def _block_holding(owner: type[BaseModel], key: Any) -> str | None:
    """The field of `owner` whose config block has a key named `key` (None: none has)."""
    for name, field in owner.model_fields.items():
        for kind in _kinds(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel) and key in kind.model_fields:
                return name
    return None


# At most this many problems are listed (a file can hold thousands; the rest are counted).
MAX_PROBLEMS = 20


def _explain(source: str, exc: ValidationError, cls: Any = None) -> str:
    """Every problem pydantic found, one paragraph (line) each naming the file, the failing field,
    what was given (cut short) and what is allowed. A check across fields reports all it finds
    as lines of one message, each its own paragraph here. Checks across fields run once the
    fields themselves are valid, so those come after the field problems are fixed."""
    problems: list[str] = []
    listed: set = set()
    for err in exc.errors():
        loc = _loc(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        ctx = err.get("ctx") or {}
        if err["type"] == "union_tag_invalid":  # pydantic's text repeats the whole tag given
            msg = f"'{ctx.get('discriminator')}' must be one of {ctx.get('expected_tags')} (got {quote(ctx.get('tag'))})"
        elif err["type"] == "extra_forbidden":
            msg = _unknown_key(cls, err["loc"], listed)
        elif err["type"] == "missing":
            msg = "required field is missing"
        given = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict) else f" (got {quote(given)})"
        for line in msg.split("\n"):
            field = "" if loc == "(top level)" else f"field '{quote(loc, 80).strip(chr(39))}': "
            text = f"{source}: {field}{line[:300]}{shown}"
            problems.append(text if text.endswith((".", "?")) else text + ".")
    more = len(problems) - MAX_PROBLEMS
    problems = problems[:MAX_PROBLEMS] + ([f"{source}: and {more} more problem(s)."] if more > 0 else [])
    return "\n".join(problems)


def validate(cls: type[T], data: Any, source: str) -> T:
    """Build a config object from parsed data, or raise a CapsimError naming `source`."""
    if not isinstance(data, dict):
        raise CapsimError(f"{source}: expected a mapping of keys to values at the top level, got {type(data).__name__}.")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise CapsimError(_explain(source, exc, cls)) from None


def load_yaml_as(cls: type[T], path: Path) -> T:
    return validate(cls, read_yaml(path), short_path(path))
