"""Realistic-mode rates of one (GPU, serving engine, weight format, tensor parallelism): the
efficiencies, peaks and fixed times the cost model multiplies by bytes, FLOPs and kernel counts,
each with the source it came from (`capsim run --explain` prints them).

Composition (DESIGN §3): an efficiency is the GPU's achievable share of its datasheet peak
(hardware profile) times the engine's kernel class (engine profile, 1 = the GPU's rate). Fixed
times add up: the engine's host time per step and per running sequence, and per layer the GPU's
`layer_s` plus the engine's kernels per layer x the GPU's fixed time per kernel (plus a launch
gap per kernel when the step is not replayed from a CUDA graph).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsim.spec.config import HardwareProfile
from capsim.spec.serving import EngineProfile
from capsim.spec.formats import NumberFormat

# A calibrated profile's layer_s already holds the intercepts of these kernels per layer
# (decode attention + 4 GEMMs, capsim.harness.profile); only the engine's other kernels add kernel_s.
CALIBRATED_KERNELS_PER_LAYER = 5
# Without flash attention the fp32 scores of each (query, key) pair and head are written by the
# QK^T GEMM, read and written by the softmax and read by the PV GEMM: 4 passes x 4 bytes.
SCORE_BYTES_PER_PAIR = 16.0


@dataclass(frozen=True)
class Rates:
    bandwidth_bytes_per_s: float
    eta_weights_bw: float  # weight (GEMM) reads: the GPU's GEMV share x the engine's factor for the weight format
    eta_stream_bw: float  # elementwise kernels' traffic: the GPU's streaming share x the engine's bandwidth factor
    eta_attn_bw: float  # KV reads and writes
    eta_gemm: float  # large-GEMM share of gemm_peak_flops, for the weights' compute dtype
    half_tokens: float  # GEMM ramp: eta(M) = eta_gemm * M / (M + half_tokens) ...
    ramp_from_tokens: float  # ... for M at or above this; below it eta keeps its value here
    eta_attn_fl: float  # prefill attention share of attn_peak_flops (long contexts) ...
    attention_half_keys: float  # ... each prompt token's row costing as much as this many more keys
    gemm_peak_flops: float
    attn_peak_flops: float
    vector_flops: float
    step_s: float  # host time per step (engine) + GPU step_s
    seq_s: float  # host time per running sequence per step
    steps_per_schedule: int  # multi-step scheduling: decode-only steps pay host time / this
    layer_graph_s: float  # fixed GPU time per layer when the step replays a CUDA graph
    layer_eager_s: float  # ... and when it launches kernel by kernel
    moe_layer_graph_s: float  # what an MoE layer adds to those (the engine's extra kernels per MoE layer) ...
    moe_layer_eager_s: float  # ... without and with launch gaps
    graphs: bool
    graph_max_tokens: int | None
    attention_seq_s: float  # fixed time per decoding sequence per layer
    score_bytes_per_pair: float  # materialised attention scores (no flash attention), per head
    elementwise_hidden_bytes: float  # non-GEMM traffic per token per layer, per unit of hidden size
    elementwise_intermediate_bytes: float  # ... per unit of MLP width
    dequant_above_tokens: int | None  # weight-only formats: fp16 copy of the weights above this many tokens
    kv_read_per_query_head: bool  # attention re-reads a KV head for each query head sharing it (no GQA reuse)
    request_s: float  # front-end time per request (not GPU time), added to its TTFT and E2EL ...
    prompt_token_s: float  # ... plus this per prompt token (tokenisation)
    output_lag_steps: int = 0  # steps after its own that a token reaches the front end (overlap scheduler)
    tp: int = 1
    allreduce_latency_s: float = 0.0
    link_bytes_per_s: float = 1.0
    sources: dict[str, str] = field(default_factory=dict)

    def uses_graph(self, num_tokens: int, decode_only: bool) -> bool:
        """Whether a step of num_tokens tokens replays a captured CUDA graph (decode-only steps
        up to the engine's largest captured batch)."""
        if not self.graphs or not decode_only:
            return False
        return self.graph_max_tokens is None or num_tokens <= self.graph_max_tokens

    def allreduce_s(self, num_tokens: int, hidden_size: int, num_layers: int) -> float:
        """Two ring all-reduces per layer (after attention and after the MLP) of num_tokens x
        hidden bf16 activations: latency + 2(tp-1)/tp x bytes / link bandwidth each."""
        if self.tp <= 1:
            return 0.0
        payload = 2.0 * (self.tp - 1) / self.tp * num_tokens * hidden_size * 2.0
        return 2.0 * num_layers * (self.allreduce_latency_s + payload / self.link_bytes_per_s)


def _eff(value: float, factor: float) -> float:
    return min(1.0, value * factor)


def _gemm_dtype(engine: EngineProfile | None, weights: NumberFormat) -> str:
    """The tensor-core rate the engine's GEMMs run at: the weights' compute dtype, or fp16 with fp16
    accumulation for engines that ask cuBLAS for it (its peak and its measured share differ)."""
    dtype = weights.compute_dtype
    if engine is not None and engine.kernel_efficiency.fp16_accumulate and dtype == "fp16":
        return "fp16_acc16"
    return dtype


def realistic_rates(hardware: HardwareProfile, engine: EngineProfile | None, weights: NumberFormat,
                    tp: int = 1) -> Rates:
    """The rates of one set-up; engine None is the bare GPU roofline (no host time, no kernels)."""
    eff, over = hardware.efficiency, hardware.overhead
    k = engine.kernel_efficiency if engine is not None else None
    gemm_dtype = _gemm_dtype(engine, weights)
    bw_factor = k.weight_format_bandwidth(weights.name, hardware.name) if k else 1.0
    gemv = eff.gemv_bandwidth if eff.gemv_bandwidth is not None else eff.bandwidth
    weight_only = weights.compute_dtype == "fp16" and weights.bits_per_value < 16
    kernels = engine.kernels_for(weight_only) if engine is not None else 0.0
    if hardware.calibration is not None:
        kernels = max(0.0, kernels - CALIBRATED_KERNELS_PER_LAYER)
    layer_graph = over.layer_s + kernels * over.kernel_s
    moe_kernels = engine.extra_kernels_moe if engine is not None else 0.0
    eng_over = engine.overhead if engine is not None else None
    link = hardware.interconnect.gpu_link_bytes_per_s or hardware.interconnect.pcie_bytes_per_s
    return Rates(
        bandwidth_bytes_per_s=hardware.memory_bandwidth_bytes_per_s,
        eta_weights_bw=_eff(gemv, bw_factor),
        eta_stream_bw=_eff(eff.bandwidth, k.bandwidth if k else 1.0),  # activations stay 16-bit whatever the weights
        eta_attn_bw=_eff(eff.attention_bandwidth or eff.bandwidth, k.attention_bandwidth if k else 1.0),
        eta_gemm=_eff(eff.compute_for(gemm_dtype), k.gemm_compute(gemm_dtype, hardware.name) if k else 1.0),
        half_tokens=eff.compute_half_tokens,
        ramp_from_tokens=eff.compute_ramp_from_tokens,
        eta_attn_fl=_eff(eff.attention_compute or eff.compute, k.attention_compute if k else 1.0),
        attention_half_keys=eff.attention_half_keys,
        gemm_peak_flops=hardware.peak_for(gemm_dtype),
        attn_peak_flops=hardware.peak_for("fp16"),
        vector_flops=hardware.peak_flops.get("fp32", hardware.peak_flops["fp16"] / 4),
        step_s=over.step_s + (eng_over.step_s if eng_over else 0.0),
        seq_s=eng_over.seq_s if eng_over else 0.0,
        steps_per_schedule=eng_over.steps_per_schedule if eng_over else 1,
        layer_graph_s=layer_graph,
        layer_eager_s=layer_graph + kernels * over.launch_gap_s,
        moe_layer_graph_s=moe_kernels * over.kernel_s,
        moe_layer_eager_s=moe_kernels * (over.kernel_s + over.launch_gap_s),
        graphs=engine.cuda_graphs if engine is not None else True,
        graph_max_tokens=engine.cuda_graph_max_batch if engine is not None else None,
        attention_seq_s=over.attention_seq_s,
        score_bytes_per_pair=0.0 if engine is None or engine.flash_attention else SCORE_BYTES_PER_PAIR,
        elementwise_hidden_bytes=engine.elementwise_bytes.hidden if engine is not None else 0.0,
        elementwise_intermediate_bytes=engine.elementwise_bytes.intermediate if engine is not None else 0.0,
        dequant_above_tokens=engine.dequant_gemm_above_tokens if engine is not None and weight_only else None,
        kv_read_per_query_head=engine is not None and engine.attention_kv_reuse == "per_query_head",
        request_s=eng_over.request_s if eng_over else 0.0,
        prompt_token_s=eng_over.prompt_token_s if eng_over else 0.0,
        output_lag_steps=eng_over.output_lag_steps if eng_over else 0,
        tp=tp,
        allreduce_latency_s=(engine.allreduce_latency_s if engine is not None and engine.allreduce_latency_s is not None
                             else hardware.interconnect.allreduce_latency_s),
        link_bytes_per_s=hardware.interconnect.link_efficiency * link,
        sources=_sources(hardware, engine),
    )


def _sources(hardware: HardwareProfile, engine: EngineProfile | None) -> dict[str, str]:
    gpu = hardware.sources
    out = {f"gpu.{key}": gpu.get(key, "not given in the profile") for key in ("efficiency", "overhead", "interconnect")}
    if hardware.calibration is not None:
        out["gpu.calibration"] = f"{hardware.calibration.device_name}, {hardware.calibration.backend}, {hardware.calibration.date}"
    if engine is None:
        out["engine"] = "none: the GPU roofline alone (no host time, no per-kernel costs)"
    else:
        out.update({f"engine.{key}": text for key, text in engine.sources.items()})
    return out
