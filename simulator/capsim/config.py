"""YAML -> validated, frozen config objects. The only module that reads YAML.

Every error a user can cause comes out as a CapsimError naming the file, the field and what is
allowed (pydantic does the checking; `_explain` turns its report into one paragraph).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capsim.errors import CapsimError

# pydantic puts the chosen member's tag into error locations of tagged unions; users never wrote
# it, so error messages leave these out.
_UNION_TAGS: set[str] = set()


class Frozen(BaseModel):
    """Base for config data: immutable, unknown keys rejected, numbers finite (inf and nan are
    refused with the field's name rather than turning into overflows or empty runs later)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


# --------------------------------------------------------------------------------------------
# Hardware profiles
# --------------------------------------------------------------------------------------------

# fp16_acc16: the FP16-accumulate tensor rate, which GeForce cards run at twice their FP32-accumulate
# rate (engines that use it, like llama.cpp's cuBLAS path, get the higher peak; elsewhere = fp16).
Dtype = Literal["fp32", "tf32", "fp16", "fp16_acc16", "bf16", "fp8", "int8", "fp4", "int4"]


class Efficiency(Frozen):
    """Shares of the datasheet peaks a real server reaches (realistic mode)."""

    bandwidth: float = Field(0.8, gt=0, le=1, description="achieved / peak memory bandwidth of weight reads")
    compute: float = Field(0.7, gt=0, le=1, description="achieved / peak dense tensor FLOPS, large GEMMs")
    compute_half_tokens: float = Field(
        0.0, ge=0, description="GEMM efficiency ramp: eff(M) = compute * M / (M + this); 0 = flat"
    )
    attention_bandwidth: float | None = Field(
        None, gt=0, le=1, description="bandwidth efficiency of paged-attention KV reads (default: bandwidth)"
    )
    attention_compute: float | None = Field(
        None, gt=0, le=1, description="achieved / peak fp16 FLOPS of prefill attention (default: compute)"
    )


class Overhead(Frozen):
    """Fixed GPU-side times: per forward pass, per layer, per kernel and per decoding sequence.

    `kernel_s` is the fixed cost of one kernel launched back to back (launch latency, ramp and
    tail) and is multiplied by the serving engine's kernels per layer; `launch_gap_s` is what a
    kernel adds when the engine does not replay CUDA graphs; `attention_seq_s` is the fixed cost
    of one sequence and KV head in one layer's decode-attention kernel (its context-independent
    part; it overlaps with streaming long contexts)."""

    step_s: float = Field(0.0, ge=0)
    layer_s: float = Field(0.0, ge=0)
    kernel_s: float = Field(0.0, ge=0)
    launch_gap_s: float = Field(0.0, ge=0)
    attention_seq_s: float = Field(0.0, ge=0)


class Interconnect(Frozen):
    pcie_bytes_per_s: float = Field(gt=0, description="host link, one direction")
    gpu_link_bytes_per_s: float | None = Field(
        None, gt=0, description="GPU-to-GPU link (NVLink, Infinity Fabric), one direction, per GPU"
    )
    link_efficiency: float = Field(0.8, gt=0, le=1, description="achieved / peak link bandwidth in all-reduce")
    allreduce_latency_s: float = Field(10e-6, ge=0, description="fixed time of one all-reduce (small messages)")


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
    memory_bytes: int = Field(gt=0)
    memory_visible_bytes: int | None = Field(
        None, gt=0, description="memory the CUDA runtime reports as total (vLLM's total_gpu_memory); "
        "default: memory_bytes"
    )
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    peak_flops: dict[Dtype, float] = Field(description="dense tensor peaks per dtype (fp32 = vector)")
    efficiency: Efficiency = Efficiency()
    overhead: Overhead = Overhead()
    interconnect: Interconnect
    price_per_hour_usd: float | None = Field(None, gt=0)
    sources: dict[str, str] = Field(description="where each number came from, keyed by field")
    notes: str = ""
    calibration: Calibration | None = None

    @model_validator(mode="after")
    def _check(self) -> HardwareProfile:
        if "fp16" not in self.peak_flops:
            raise ValueError("peak_flops must include fp16")
        if any(v <= 0 for v in self.peak_flops.values()):
            raise ValueError("peak_flops values must be > 0")
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

    full: int = Field(ge=0)
    sliding: int = Field(0, ge=0)
    linear: int = Field(0, ge=0)


class LinearAttention(Frozen):
    """Gated-DeltaNet-style linear attention (Qwen3-Next / Qwen3.5): recurrent state per sequence."""

    num_key_heads: int = Field(gt=0)
    num_value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel_tokens: int = Field(4, gt=0)
    state_bytes_per_value: float = Field(2.0, gt=0, description="recurrent state dtype (vLLM default: model dtype)")


class MoE(Frozen):
    num_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(0, ge=0)
    shared_intermediate_size: int | None = Field(None, gt=0, description="default: expert size")
    dense_layers: int = Field(0, ge=0, description="leading layers with a dense MLP instead of experts")


class MLA(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent per token per layer."""

    kv_lora_rank: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    q_lora_rank: int | None = Field(None, gt=0)


class ModelSpec(Frozen):
    name: str
    aliases: list[str] = []
    source: str = Field("", description="where the architecture numbers came from (config.json URL)")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0, description="dense MLP width")
    mlp: Literal["gated", "plain"] = Field("gated", description="gated = SwiGLU (3 matrices), plain = 2")
    vocab_size: int = Field(gt=0)
    tie_embeddings: bool = False
    max_context_tokens: int = Field(gt=0)
    attention_output_gate: bool = Field(False, description="q_proj also produces a gate (Qwen3-Next/3.5)")
    layers: LayerCounts | None = Field(None, description="default: every layer full attention")
    sliding_window_tokens: int | None = Field(None, gt=0)
    linear_attention: LinearAttention | None = None
    moe: MoE | None = None
    mla: MLA | None = None
    published_params: float | None = Field(None, gt=0, description="total parameters as published")
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
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML was built with it


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors become a CapsimError with the line and column."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CapsimError(f"{path}: cannot read the file ({exc.strerror}).") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CapsimError(f"{path}: not valid YAML{where}: {problem}.") from None


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


def _explain(source: str, exc: ValidationError) -> str:
    """One paragraph naming the file, each failing field, what was given and what is allowed."""
    parts = []
    for err in exc.errors()[:6]:
        loc = _loc(err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the documented keys)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        given = err.get("input")
        shown = "" if err["type"] in ("missing",) or isinstance(given, dict) else f" (got {given!r})"
        parts.append(f"field '{loc}': {msg}{shown}")
    more = len(exc.errors()) - 6
    tail = f"; and {more} more problem(s)" if more > 0 else ""
    return f"{source}: " + "; ".join(parts) + tail + "."


def validate(cls: type[T], data: Any, source: str) -> T:
    """Build a config object from parsed data, or raise a CapsimError naming `source`."""
    if not isinstance(data, dict):
        raise CapsimError(f"{source}: expected a mapping of keys to values at the top level, got {type(data).__name__}.")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise CapsimError(_explain(source, exc)) from None


def load_yaml_as(cls: type[T], path: Path) -> T:
    return validate(cls, read_yaml(path), str(path))
