"""Roofline cost of one forward pass (DESIGN §3).

A step is priced as two rooflines run back to back, plus memory-bound elementwise kernels and
fixed times:
  GEMMs:       p-norm of weight bytes / (eta_bw * BW) and matmul FLOPs / (eta_fl(T) * peak[dtype])
               (eta_bw: GEMV share; p = decode_runs.GEMM_OVERLAP_NORM; document mode: their max)
  attention:   max(KV (+ score) bytes / (eta_attn * BW),
                   attention FLOPs / (eta_attn_fl * peak) + dequant work + per-sequence cost
                   + per-prompt-token row cost)
  elementwise: activation bytes per token x T / (eta_stream_bw * BW)
  fixed:       host time per step and sequence + per-layer kernel times + TP all-reduces
The GEMM, elementwise and fixed parts depend only on the token count T (and the sequence count);
the attention part on the contexts.

Decode-only steps, one or a run of them, are priced from per-batch-size coefficients built from
these parts (capsim.cost.decode_runs, a base class of CostModel).

Realistic mode takes its efficiencies and fixed times from capsim.cost.rates (GPU profile x serving
engine profile). Tensor parallelism over `tp` GPUs divides weights, FLOPs and KV heads and adds two
all-reduces per layer; every time and byte count here is per GPU.

Modes: `realistic` (the default for `run`), `document` (the source note's simplified model:
weights-only traffic, eta_bw = 1, eta_fl = 0.5, no overheads) and `unit` (every step takes
`unit_step_s`: the explainer's slot-step examples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from capsim.spec import architecture as arch
from capsim.spec.config import HardwareProfile, ModelSpec
from capsim.spec.serving import EngineProfile
from capsim.spec.formats import NumberFormat
from capsim.core.plan import StepPlan
from capsim.cost.decode_runs import DecodeRuns
from capsim.cost.rates import realistic_rates

Mode = Literal["realistic", "document", "unit"]


class StepCost:
    """What one forward pass costs."""

    # PERF: a plain class, not a dataclass: mypyc compiles this __init__ (one per general step).

    def __init__(self, seconds: float, compute_s: float, memory_s: float, overhead_s: float, flops: float,
                 bytes: float, bound: str) -> None:
        self.seconds, self.compute_s, self.memory_s, self.overhead_s = seconds, compute_s, memory_s, overhead_s
        self.flops, self.bytes = flops, bytes
        self.bound = bound  # one of core.names.BOUNDS: the term that took the most time

    def __repr__(self) -> str:
        return (f"StepCost(seconds={self.seconds!r}, compute_s={self.compute_s!r}, memory_s={self.memory_s!r}, "
                f"overhead_s={self.overhead_s!r}, flops={self.flops!r}, bytes={self.bytes!r}, bound={self.bound!r})")


@dataclass(frozen=True)
class DocumentAssumptions:
    """The source note's stated numbers; each None means 'derive it from the catalogue'."""

    weight_bytes: float | None = None
    flops_per_token: float | None = None
    peak_flops: float | None = None
    bandwidth_bytes_per_s: float | None = None
    compute_efficiency: float = 0.5
    bandwidth_efficiency: float = 1.0


class CostModel(DecodeRuns):
    """Prices StepPlans for one (model, GPU, weight format, KV format, mode, engine, TP degree);
    decode-only steps through DecodeRuns' methods."""

    # PERF: the numbers every step reads, declared so that compiled they are C doubles and ints.
    total_weight_bytes: float
    doc_flops_per_token: float
    dense_weight_bytes: float
    moe_layers: int
    expert_bytes: float
    body_flops_per_token: float
    head_flops_per_logit: float
    state_bytes_per_seq: float
    window: int
    attention_layers: int
    ramp_from_tokens: float
    eta_stream_bw: float

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareProfile,
        weights: NumberFormat,
        kv_cache: NumberFormat,
        mode: Mode = "realistic",
        document: DocumentAssumptions | None = None,
        unit_step_s: float = 1.0,
        engine: EngineProfile | None = None,
        tp: int = 1,
        draft_tokens: int = 0,
        draft: CostModel | None = None,
    ) -> None:
        self.model, self.hardware, self.mode, self.unit_step_s = model, hardware, mode, unit_step_s
        self.weights_format, self.kv_format, self.engine, self.tp = weights, kv_cache, engine, tp
        self.params = params = arch.param_counts(model)
        self.document = doc = document or DocumentAssumptions()
        if mode == "document":
            self.rates = None
            self.eta_bw = self.eta_attn_bw = doc.bandwidth_efficiency
            self.eta_fl = self.eta_attn_fl = doc.compute_efficiency
            self.half_tokens = self.ramp_from_tokens = 0.0
            self.eta_stream_bw = self.eta_bw
            self.bandwidth = doc.bandwidth_bytes_per_s or hardware.memory_bandwidth_bytes_per_s
            self.peak = self.attn_peak = doc.peak_flops or hardware.peak_for(weights.compute_dtype)
            self.vector_peak = hardware.peak_flops.get("fp32", hardware.peak_flops["fp16"] / 4)
        else:
            r = self.rates = realistic_rates(hardware, engine if mode == "realistic" else None, weights, tp)
            self.eta_bw, self.eta_attn_bw, self.eta_fl = r.eta_weights_bw, r.eta_attn_bw, r.eta_gemm
            self.eta_attn_fl, self.half_tokens, self.bandwidth = r.eta_attn_fl, r.half_tokens, r.bandwidth_bytes_per_s
            self.peak, self.attn_peak, self.vector_peak = r.gemm_peak_flops, r.attn_peak_flops, r.vector_flops
            self.ramp_from_tokens, self.eta_stream_bw = r.ramp_from_tokens, r.eta_stream_bw
        self._gemm_setup(model, params, weights, doc, tp)
        self._attention_setup(model, kv_cache, tp)
        self._per_step_setup(model)
        self._decode_cache: dict[int, tuple] = {}
        # Speculative decoding: each decode step verifies draft_tokens + 1 tokens per sequence,
        # after `draft_tokens` passes of the draft model (if one is priced).
        self.queries = draft_tokens + 1
        self.draft, self.draft_passes = draft, (draft_tokens if draft is not None else 0)

    def _gemm_setup(self, model, params, weights, doc, tp) -> None:
        wb = weights.bytes_per_value
        self.total_weight_bytes = doc.weight_bytes if doc.weight_bytes else params.total * wb / tp
        self.doc_flops_per_token = doc.flops_per_token or 2.0 * params.active / tp
        head = params.lm_head or params.embedding
        self.dense_weight_bytes = (params.attention + params.mlp_dense + params.mlp_shared + head) * wb / tp
        moe = model.moe
        self.moe_layers = (model.num_layers - moe.dense_layers) if moe else 0
        self.expert_bytes = (params.mlp_experts / (self.moe_layers * moe.num_experts) * wb / tp) if moe else 0.0
        self.body_flops_per_token = (2.0 * params.body_active + arch.linear_attention_flops_per_token(model)) / tp
        self.head_flops_per_logit = 2.0 * head / tp
        self.state_bytes_per_seq = 2.0 * arch.state_bytes_per_sequence(model) / tp  # read + write

    def _per_step_setup(self, model: ModelSpec) -> None:
        """The model's numbers that every step reads, copied out of the config once: a pydantic
        attribute is a Python-level lookup, several per step."""
        self.num_layers, self.hidden_size = model.num_layers, model.hidden_size
        moe = model.moe
        self.num_experts, self.experts_per_token = (moe.num_experts, moe.experts_per_token) if moe else (0, 0)
        r = self.rates
        self.elementwise_bytes_per_token = 0.0  # elementwise_part's traffic per token, all layers
        if r is not None and self.mode == "realistic":
            width = moe.expert_intermediate_size * moe.experts_per_token if moe else model.intermediate_size
            self.elementwise_bytes_per_token = model.num_layers * (r.elementwise_hidden_bytes * model.hidden_size
                                                                   + r.elementwise_intermediate_bytes * width / self.tp)

    def _attention_setup(self, model, kv_cache, tp) -> None:
        # KV heads split across TP ranks; with more ranks than KV heads each rank keeps a copy of
        # one (MLA's single latent is replicated on every rank).
        share = 1.0 if model.mla else max(1.0, model.num_kv_heads / tp) / model.num_kv_heads
        full_v, sliding_v = arch.kv_values_per_token(model)
        kvb = kv_cache.bytes_per_value
        self.kv_values_full, self.kv_values_sliding = full_v * share, sliding_v * share
        self.kv_full_bytes, self.kv_sliding_bytes = self.kv_values_full * kvb, self.kv_values_sliding * kvb
        # A kernel without GQA reuse reads a rank's KV head once per query head that shares it.
        reread = 1.0
        if self.rates is not None and self.rates.kv_read_per_query_head and not model.mla:
            reread = (model.num_heads / tp) / max(1.0, model.num_kv_heads / tp)
        self.kv_read_full_bytes, self.kv_read_sliding_bytes = self.kv_full_bytes * reread, self.kv_sliding_bytes * reread
        self.window = model.sliding_window_tokens or 0
        counts = model.layer_counts
        self.attention_layers = counts.full + counts.sliding
        per_layer = arch.attention_flops_per_context_token(model) / tp
        self.attn_flops_full, self.attn_flops_sliding = per_layer * counts.full, per_layer * counts.sliding
        scores = (self.rates.score_bytes_per_pair if self.rates else 0.0) * model.num_heads / tp
        self.score_bytes_full, self.score_bytes_sliding = scores * counts.full, scores * counts.sliding
        self.dequant_flops_per_value = kv_cache.dequant_flops_per_value
        # A prompt token's row costs as much as `attention_half_keys` more keys, in every attention
        # layer (realistic and bare-GPU modes; document mode prices no attention).
        half_keys = self.rates.attention_half_keys if self.rates is not None else 0.0
        self.attention_token_s = (half_keys * (self.attn_flops_full + self.attn_flops_sliding)
                                  / (self.eta_attn_fl * self.attn_peak))
        seq_s = self.rates.attention_seq_s if self.rates is not None and self.mode == "realistic" else 0.0
        kv_heads = 1.0 if model.mla else max(1.0, model.num_kv_heads / tp)
        self.attention_seq_s = seq_s * kv_heads * self.attention_layers  # per sequence, all layers

    # ---------------------------------------------------------------- fixed times

    def front_end(self) -> tuple[float, float]:
        """(seconds per request, seconds per prompt token) of the serving engine's front end:
        added to each request's TTFT and E2EL, never to a step (realistic mode only)."""
        r = self.rates
        if r is None or self.mode != "realistic":
            return 0.0, 0.0
        return r.request_s, r.prompt_token_s

    def output_lag_steps(self) -> int:
        """Steps after its own that a token reaches the front end: 1 with an overlap scheduler
        (realistic mode only)."""
        r = self.rates
        if r is None or self.mode != "realistic":
            return 0
        return r.output_lag_steps

    def fixed_seconds(self, num_tokens: int, num_seqs: int, decode_only: bool) -> tuple[float, float]:
        """(overhead_s, allreduce_s) of a step: host time, per-layer and per-kernel GPU fixed
        times; and the TP all-reduces. Zero in document mode."""
        r = self.rates
        if r is None:
            return 0.0, 0.0
        host = r.step_s + r.seq_s * num_seqs
        if decode_only:
            host = host / r.steps_per_schedule
        graph = r.uses_graph(num_tokens, decode_only)
        layer = r.layer_graph_s if graph else r.layer_eager_s
        overhead = host + layer * self.num_layers
        if self.moe_layers:
            overhead += (r.moe_layer_graph_s if graph else r.moe_layer_eager_s) * self.moe_layers
        return overhead, r.allreduce_s(num_tokens, self.hidden_size, self.num_layers)

    # ---------------------------------------------------------------- GEMM part (depends on T only)

    def experts_touched(self, num_tokens: int) -> float:
        """Expected distinct experts per MoE layer when num_tokens each pick k of E uniformly."""
        e, k = self.num_experts, self.experts_per_token
        if not e:
            return 0.0
        return e * (1.0 - (1.0 - k / e) ** num_tokens)

    def gemm_part(self, num_tokens: int, num_logits: int, num_seqs: int) -> tuple[float, float, float, float]:
        """(compute_s, memory_s, flops, bytes) of the matmuls of a step with num_tokens tokens."""
        if self.mode == "document":
            flops = self.doc_flops_per_token * num_tokens
            byts = self.total_weight_bytes
            return flops / (self.eta_fl * self.peak), byts / (self.eta_bw * self.bandwidth), flops, byts
        flops = self.body_flops_per_token * num_tokens + self.head_flops_per_logit * num_logits
        byts = self.dense_weight_bytes + self.moe_layers * self.experts_touched(num_tokens) * self.expert_bytes
        byts += self.state_bytes_per_seq * num_seqs
        return flops / (self.gemm_eta(num_tokens) * self.peak), byts / (self.eta_bw * self.bandwidth), flops, byts

    def gemm_eta(self, num_tokens: int) -> float:
        """The GEMMs' share of the peak at num_tokens rows: the ramp M / (M + half_tokens), held
        at its value at ramp_from_tokens below that (the ramp's measured range), so small-M
        GEMMs stay weight-read bound as GEMV measurements show."""
        m = float(num_tokens) if num_tokens >= self.ramp_from_tokens else self.ramp_from_tokens
        return self.eta_fl * m / (m + self.half_tokens)

    def elementwise_part(self, num_tokens: int) -> tuple[float, float]:
        """(seconds, bytes) of the memory-bound kernels between the GEMMs (norms, rope, activation
        function, residual adds, dtype conversions; per the engine's profile), plus, for engines
        that dequantise weight-only formats to fp16 before large GEMMs, writing and reading
        that copy. Runs after the GEMMs, so it adds to the step time."""
        r = self.rates
        if r is None or self.mode != "realistic":
            return 0.0, 0.0
        byts = self.elementwise_bytes_per_token * num_tokens
        if r.dequant_above_tokens is not None and num_tokens > r.dequant_above_tokens:
            wb = self.weights_format.bytes_per_value
            byts += self.dense_weight_bytes / wb * (2.0 + wb)
        return byts / (self.eta_stream_bw * self.bandwidth), byts

    # ---------------------------------------------------------------- attention part

    def attention_part(self, ctx_full: float, ctx_sliding: float, pairs_full: float, pairs_sliding: float,
                       num_tokens: float, num_seqs: float = 0.0, prompt_tokens: float = 0.0
                       ) -> tuple[float, float, float, float]:
        """(compute_s, memory_s, flops, bytes) of attention in one step.

        ctx_*: context positions read from the cache, summed over sequences (each read once per KV
        head, or once per query head when the engine's kernel has no GQA reuse); pairs_*: (new token,
        attended position) pairs, summed. The kernels' fixed cost per sequence and layer, and each
        prompt token's row cost (attention_token_s, the ramp of Efficiency.attention_half_keys; a
        decoding token's is in the per-sequence cost), sit on the compute side: they overlap with
        streaming a long context and show with short ones.
        attention_arrays is the same expression over numpy arrays of steps: keep the two identical
        (tests/cost/test_roofline.py compares their bits).
        """
        if self.mode == "document":
            return 0.0, 0.0, 0.0, 0.0
        read = self.kv_read_full_bytes * ctx_full + self.kv_read_sliding_bytes * ctx_sliding
        read = read + (self.score_bytes_full * pairs_full + self.score_bytes_sliding * pairs_sliding)
        byts = read + (self.kv_full_bytes + self.kv_sliding_bytes) * num_tokens
        flops = self.attn_flops_full * pairs_full + self.attn_flops_sliding * pairs_sliding
        values_read = self.kv_values_full * ctx_full + self.kv_values_sliding * ctx_sliding
        dequant = self.dequant_flops_per_value * values_read
        compute_s = flops / (self.eta_attn_fl * self.attn_peak) + dequant / (self.eta_attn_fl * self.vector_peak)
        compute_s = compute_s + self.attention_seq_s * num_seqs + self.attention_token_s * prompt_tokens
        return compute_s, byts / (self.eta_attn_bw * self.bandwidth), flops + dequant, byts

    def attention_arrays(self, ctx_full: np.ndarray, ctx_sliding: np.ndarray, pairs_full: np.ndarray,
                         pairs_sliding: np.ndarray, num_tokens: np.ndarray, num_seqs: np.ndarray) -> tuple:
        """attention_part for many decode-only steps at once (numpy arrays, one entry per step; no
        prompt tokens): the same operations in the same order, so each entry has the bits
        attention_part gives."""
        if self.mode == "document":
            zero = ctx_full * 0.0
            return zero, zero, zero, zero
        read = self.kv_read_full_bytes * ctx_full + self.kv_read_sliding_bytes * ctx_sliding
        read = read + (self.score_bytes_full * pairs_full + self.score_bytes_sliding * pairs_sliding)
        byts = read + (self.kv_full_bytes + self.kv_sliding_bytes) * num_tokens
        flops = self.attn_flops_full * pairs_full + self.attn_flops_sliding * pairs_sliding
        values_read = self.kv_values_full * ctx_full + self.kv_values_sliding * ctx_sliding
        dequant = self.dequant_flops_per_value * values_read
        compute_s = flops / (self.eta_attn_fl * self.attn_peak) + dequant / (self.eta_attn_fl * self.vector_peak)
        compute_s = compute_s + self.attention_seq_s * num_seqs
        return compute_s, byts / (self.eta_attn_bw * self.bandwidth), flops + dequant, byts

    # ---------------------------------------------------------------- whole steps

    def step_cost(self, plan: StepPlan, decode_context_tokens: int = 0, decode_sliding_tokens: int = 0) -> StepCost:
        """Price any plan (prefill, decode or mixed). With decode_all, the running decoders' context
        after this step (all of it, and the part inside a sliding window) comes from the running set."""
        if self.mode == "unit":
            return StepCost(self.unit_step_s, 0.0, 0.0, self.unit_step_s, 0.0, 0.0, "overhead")
        ctx_f = ctx_s = pairs_f = pairs_s = 0
        q = self.queries
        logits = plan.num_decodes * q
        draft_s = 0.0
        if plan.num_decodes:
            ctx_f = decode_context_tokens
            pairs_f = q * ctx_f + plan.num_decodes * (q * (q - 1) // 2)
            if self.window:
                ctx_s = decode_sliding_tokens
                pairs_s = q * ctx_s
            if self.draft is not None:  # the draft's passes for the decoding sequences
                draft_s = self.draft_passes * self.draft.decode_seconds(plan.num_decodes, ctx_f, 0)
        w = self.window
        prompt = 0  # tokens of prompts (or recomputed ones) in this step: the attention rows' own cost
        for req, n in zip(plan.scheduled, plan.new_tokens):
            c0 = req.computed_tokens
            c1 = c0 + n
            ctx_f += c1
            pairs_f += n * c0 + n * (n + 1) // 2
            if not req.is_decoding:
                prompt += n
            if w:
                ctx_s += min(c1, w)
                pairs_s += _capped_pairs(c0, n, w)
            if c1 == req.known_tokens:
                logits += 1
        num_tokens = plan.num_tokens + plan.num_decodes * (q - 1)  # a decoder computes q tokens
        gc, gm, gf, gb = self.gemm_part(num_tokens, logits, plan.num_seqs)
        ac, am, af, ab = self.attention_part(ctx_f, ctx_s, pairs_f, pairs_s, num_tokens, plan.num_seqs, prompt)
        decode_only = plan.num_tokens == plan.num_seqs
        overhead, comm = self.fixed_seconds(num_tokens, plan.num_seqs, decode_only=decode_only)
        es, eb = self.elementwise_part(num_tokens)
        return _combine(self.gemm_seconds(gc, gm), gc, gm, ac, am, gf + af, gb + ab + eb, overhead + comm + draft_s, es)

    @staticmethod
    def with_overhead(cost: StepCost, extra_s: float) -> StepCost:
        """The same step held up by extra_s of other work (swap copies over PCIe)."""
        overhead = cost.overhead_s + extra_s
        bound = "overhead" if overhead > cost.compute_s and overhead > cost.memory_s else cost.bound
        return StepCost(cost.seconds + extra_s, cost.compute_s, cost.memory_s, overhead, cost.flops, cost.bytes, bound)

def _capped_pairs(c0: int, n: int, window: int) -> int:
    """Sum over new positions p = c0+1 .. c0+n of min(p, window)."""
    lo, hi = c0 + 1, c0 + n
    if hi <= window:
        return n * c0 + n * (n + 1) // 2
    if lo > window:
        return n * window
    below = window - c0  # positions lo..window count their own index
    return below * c0 + below * (below + 1) // 2 + (n - below) * window


def _combine(gemm_s: float, gc: float, gm: float, ac: float, am: float, flops: float, byts: float, overhead_s: float,
             elementwise_s: float = 0.0) -> StepCost:
    seconds = gemm_s + max(ac, am) + elementwise_s + overhead_s
    compute_t = (gc if gc >= gm else 0.0) + (ac if ac >= am else 0.0)
    memory_t = (gm if gm > gc else 0.0) + (am if am > ac else 0.0) + elementwise_s
    if overhead_s > compute_t and overhead_s > memory_t:
        bound = "overhead"
    else:
        bound = "compute" if compute_t >= memory_t else "memory"
    return StepCost(seconds, gc + ac, gm + am + elementwise_s, overhead_s, flops, byts, bound)
