"""Serving-engine profiles (`--engine vllm|sglang|trt-llm|llama.cpp`): what an engine adds to the
GPU's roofline and which scheduling and memory defaults it starts from.

Each profile lives in capsim/data/engines.yaml with a source for every number. A profile may
`extends:` another (an older release of the same engine): it then lists only what differs. The
cost model reads `overhead`, `kernels_per_layer`, `cuda_graphs` and `kernel_efficiency`; the KV
sizing (capsim.cost.memory) reads `kv_memory`, `gpu_memory_utilization` and `memory`; simulate.resolve
applies `scheduler` where the workload leaves a field unset.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator

from capsim.spec.config import Dtype, Frozen, read_yaml, validate
from capsim.spec.formats import FORMATS
from capsim.errors import CapsimError, did_you_mean, quote


class EngineScheduler(Frozen):
    """The engine's scheduling defaults (vLLM's names)."""

    kind: Literal["static", "continuous", "chunked", "prefill_first"]
    max_num_seqs: int = Field(gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0, description="None: max(max_model_len, 2048)")
    block_size: int = Field(gt=0)


class LargeGpuDefaults(Frozen):
    """Scheduler defaults that replace `scheduler`'s on GPUs with at least this much memory (vLLM
    raises its defaults on H100/H200/MI300-class GPUs, but not on the A100)."""

    min_memory_bytes: float = Field(gt=0)
    except_names: list[str] = []
    max_num_seqs: int = Field(gt=0)
    max_num_batched_tokens: int = Field(gt=0)


class PoolDerivedSeqs(Frozen):
    """A running-request limit the engine derives from its KV pool when none is given (SGLang):
    min(pool tokens x pool_fraction, clamp(pool tokens / context length x per_context_tokens, floor,
    cap)). It replaces `scheduler.max_num_seqs` unless the workload sets max_num_seqs."""

    per_context_tokens: float = Field(gt=0, description="requests per context length of pool tokens")
    floor: int = Field(gt=0)
    cap: int = Field(gt=0)
    pool_fraction: float = Field(gt=0, le=1, description="at most this share of the pool's tokens")

    def limit(self, pool_tokens: int, context_tokens: int) -> int:
        """The running-request limit for a pool of this many tokens and this context length."""
        by_context = min(max(int(pool_tokens / context_tokens * self.per_context_tokens), self.floor), self.cap)
        return max(1, min(int(pool_tokens * self.pool_fraction), by_context))


class ElementwiseBytes(Frozen):
    """Memory traffic of the non-GEMM kernels (norms, rope, activation function, residual adds,
    dtype conversions) per token per layer: hidden x hidden_size + intermediate x MLP width bytes."""

    hidden: float = Field(0.0, ge=0)
    intermediate: float = Field(0.0, ge=0)


class EngineOverhead(Frozen):
    """Host-side time per forward pass that the GPU waits for (scheduling, input preparation,
    sampling, output processing): step_s + seq_s x running sequences. Multi-step scheduling runs
    `steps_per_schedule` decode steps per scheduler call, so decode-only steps pay 1/that.

    `request_s` + `prompt_token_s` x prompt tokens is the front end's time per request (HTTP,
    tokenising, handing the request to the engine process, detokenising and streaming back): it
    is on every request's path but not on the GPU's, so it adds to TTFT and E2EL and delays a
    closed-loop user's next send, and never holds up a step.

    `output_lag_steps` 1 is an overlap scheduler (SGLang 0.4+): the host launches step n+1 before
    it processes step n's output, so every token leaves one step later than its step ends.

    `chat_request_s` is front-end time that only chat requests pay (templating the conversation),
    added to request_s for a workload of `endpoint: chat` (the default), dropped for completions."""

    step_s: float = Field(0.0, ge=0)
    seq_s: float = Field(0.0, ge=0)
    steps_per_schedule: int = Field(1, gt=0)
    request_s: float = Field(0.0, ge=0, le=10.0, description="front-end time per request (added to TTFT and E2EL)")
    prompt_token_s: float = Field(0.0, ge=0, le=1e-3, description="front-end time per prompt token (tokenisation)")
    output_lag_steps: int = Field(0, ge=0, le=1, description="1: an overlap scheduler hands a step's tokens to the "
                                  "front end only after the replica's next step (its first and last tokens arrive "
                                  "one step later)")
    chat_request_s: float = Field(0.0, ge=0, le=10.0, description="front-end time per chat-completions request on "
                                  "top of request_s (templating the conversation; not paid by the completions endpoint)")


class KernelEfficiency(Frozen):
    """Multipliers on the GPU profile's efficiencies for this engine's kernels (1 = the GPU's
    achievable rate): `bandwidth` for weight reads (GEMV), `attention_bandwidth` for KV reads.
    `weight_formats` overrides `bandwidth` per weight format, keyed `FORMAT` or `FORMAT@GPU` (a
    catalogue GPU's name: the engine's kernels for that format measured on that GPU); the GPU's
    own key wins (weight_format_bandwidth). `compute_dtypes` overrides `compute` the same way per
    GEMM compute dtype (`DTYPE` or `DTYPE@GPU`, gemm_compute)."""

    bandwidth: float = Field(1.0, gt=0, le=1.5)
    attention_bandwidth: float = Field(1.0, gt=0, le=1.5)
    compute: float = Field(1.0, gt=0, le=1.5)
    attention_compute: float = Field(1.0, gt=0, le=1.5)
    weight_formats: dict[str, Annotated[float, Field(gt=0, le=1.5)]] = {}
    compute_dtypes: dict[str, Annotated[float, Field(gt=0, le=1.5)]] = {}
    fp16_accumulate: bool = Field(False, description="fp16 GEMMs accumulate in fp16 (GeForce: twice the rate)")

    @field_validator("weight_formats", "compute_dtypes")
    @classmethod
    def _known_keys(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        word, allowed = ("FORMAT", FORMATS) if info.field_name == "weight_formats" else ("DTYPE", get_args(Dtype))
        for key in value:
            name, _, gpu = key.partition("@")
            if name not in allowed or (("@" in key) and not gpu):
                raise ValueError(f"{info.field_name} key {key!r}: expected {word} or {word}@GPU with {word} one of "
                                 f"{', '.join(allowed)}")
        return value

    def gemm_compute(self, dtype: str, gpu: str) -> float:
        """The multiplier on the GPU's GEMM share for GEMMs computed in `dtype` on GPU `gpu`."""
        return self.compute_dtypes.get(f"{dtype}@{gpu}", self.compute_dtypes.get(dtype, self.compute))

    def weight_format_bandwidth(self, fmt: str, gpu: str) -> float:
        """The multiplier on the GPU's weight-read rate for weights in `fmt` on GPU `gpu`."""
        return self.weight_formats.get(f"{fmt}@{gpu}", self.weight_formats.get(fmt, self.bandwidth))


class EngineMemory(Frozen):
    """How the engine sizes its KV cache (see capsim.cost.memory): a runtime reserve outside the
    framework's allocator (CUDA context, cuBLAS/NCCL workspaces), and whether the activation
    peak of a max-size step is profiled and set aside (vLLM, TensorRT-LLM) or not."""

    reserve_bytes: float = Field(0.0, ge=0)
    reserve_bytes_per_extra_gpu: float = Field(0.0, ge=0, description="extra reserve per TP rank above 1 (NCCL)")
    activation_peak: bool = True
    sampler_buffers: int = Field(3, ge=0, description="fp32 vocab-sized buffers per sequence in the sampler")


class EngineProfile(Frozen):
    name: str
    aliases: list[str] = []
    version: str
    description: str = ""
    scheduler: EngineScheduler
    gpu_memory_utilization: float = Field(gt=0, le=1)
    kv_memory: Literal["total_fraction", "free_fraction"] = Field(
        "total_fraction", description="total x utilisation - the rest (vLLM, SGLang), or (total - the rest) "
        "x fraction (TensorRT-LLM's kv_cache_free_gpu_mem_fraction)")
    scheduler_large_gpu: LargeGpuDefaults | None = None
    max_num_seqs_from_pool: PoolDerivedSeqs | None = None
    cuda_graphs: bool = True
    cuda_graph_max_batch: int | None = Field(None, gt=0, description="larger decode batches run eagerly")
    kernels_per_layer: float = Field(gt=0)
    extra_kernels_quantized: float = Field(0.0, ge=0, description="more kernels per layer with weight-only "
                                           "quantised formats (activation quantisation before each GEMV)")
    extra_kernels_moe: float = Field(0.0, ge=0, description="more kernels per MoE layer than per dense layer (router "
                                     "softmax, top-k, expert-indexed GEMVs, weighting and summing the experts)")
    flash_attention: bool = Field(True, description="False: attention scores are materialised in fp32 and "
                                  "read and written by the softmax (memory traffic per head per pair)")
    attention_kv_reuse: Literal["full", "per_query_head"] = Field(
        "full", description="full: the attention kernel reads each KV head once for all the query heads that share "
        "it (GQA); per_query_head: once per query head (KV reads x query heads / KV heads)")
    elementwise_bytes: ElementwiseBytes = ElementwiseBytes()
    dequant_gemm_above_tokens: int | None = Field(
        None, gt=0, description="steps with more tokens dequantise weight-only-quantised weights to fp16 before "
        "each GEMM (llama.cpp's cuBLAS path): the fp16 copy is written and read once per step")
    allreduce_latency_s: float | None = Field(
        None, ge=0, description="the engine's custom all-reduce kernel (small messages); None: the GPU's NCCL figure")
    overhead: EngineOverhead = EngineOverhead()
    kernel_efficiency: KernelEfficiency = KernelEfficiency()
    memory: EngineMemory = EngineMemory()
    sources: dict[str, str]
    notes: str = ""

    def scheduler_for(self, memory_bytes: float, gpu_name: str) -> EngineScheduler:
        """The scheduling defaults on a GPU with this much memory (see LargeGpuDefaults)."""
        big = self.scheduler_large_gpu
        if big is None or memory_bytes < big.min_memory_bytes or any(n in gpu_name for n in big.except_names):
            return self.scheduler
        return self.scheduler.model_copy(update={"max_num_seqs": big.max_num_seqs,
                                                 "max_num_batched_tokens": big.max_num_batched_tokens})

    def for_endpoint(self, endpoint: str) -> EngineProfile:
        """The profile as a run's requests see it: chat requests pay chat_request_s in request_s,
        completions requests do not."""
        over = self.overhead
        if over.chat_request_s == 0.0:
            return self
        request_s = over.request_s + (over.chat_request_s if endpoint == "chat" else 0.0)
        return self.model_copy(update={"overhead": over.model_copy(update={"request_s": request_s, "chat_request_s": 0.0})})

    def kernels_for(self, weight_only_quantised: bool) -> float:
        """Kernels launched per layer per step."""
        return self.kernels_per_layer + (self.extra_kernels_quantized if weight_only_quantised else 0.0)


def _data_path() -> Path:
    return Path(str(resources.files("capsim.spec.data").joinpath("engines.yaml")))


def _merge(base: dict, over: dict) -> dict:
    """Two-level merge: a sub-block given in `over` updates the base's block key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}
        else:
            out[key] = value
    return out


@cache
def engine_catalog() -> dict[str, EngineProfile]:
    """Every engine profile by name, with `extends:` resolved."""
    path = _data_path()
    raw = read_yaml(path)
    if not isinstance(raw, list):
        raise CapsimError(f"{path}: expected a list of engine profiles.")
    by_name = {e.get("name"): e for e in raw if isinstance(e, dict)}
    profiles = {}
    for i, entry in enumerate(raw):
        name = entry.get("name", f"[{i}]") if isinstance(entry, dict) else f"[{i}]"
        data = _resolved(entry, by_name, path, name, (name,)) if isinstance(entry, dict) else entry
        profiles[name] = validate(EngineProfile, data, f"{path} (engine {name})")
    return profiles


def _resolved(entry: dict, by_name: dict, path: Path, name: str, seen: tuple[str, ...] = ()) -> dict:
    """An entry with its `extends:` chain merged in (the parent's aliases are not inherited)."""
    data = dict(entry)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if parent not in by_name or parent in seen:
        why = "a cycle of" if parent in seen else "unknown engine"
        raise CapsimError(f"{path} (engine {name}): field 'extends' names {why} {parent!r}.")
    base = _resolved(by_name[parent], by_name, path, name, seen + (parent,))
    base.pop("aliases", None)
    return _merge(base, data)


def load_engine(name: str) -> EngineProfile:
    """An engine profile by name or alias (case-insensitive)."""
    catalog = engine_catalog()
    table = {k.lower(): k for k in catalog}
    for key, prof in catalog.items():
        table.update({a.lower(): key for a in prof.aliases})
    key = table.get(name.lower())
    if key is None:
        raise CapsimError(f"unknown engine {quote(name)}.{did_you_mean(name, list(table))} "
                          f"Known engines: {', '.join(catalog)}.")
    return catalog[key]
