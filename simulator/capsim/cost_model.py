"""Roofline cost of one forward pass (DESIGN §3).

A step is priced as two rooflines run back to back, plus fixed overheads:
  GEMMs:     max(weight bytes / (eta_bw * BW),  matmul FLOPs / (eta_fl(T) * peak[dtype]))
  attention: max(KV bytes / (eta_attn * BW),    attention FLOPs / (eta_fl * peak) + dequant work)
The GEMM part depends only on the token count T; the attention part on the contexts.

Decode-only steps (every running request computes one token) are priced by `decode_seconds`, a
function of the batch size n and the summed contexts S (full attention) and Ss (sliding window)
only, and summed into end times by `decode_ends`: a numpy path for long runs and a scalar loop
for short ones, using the same float operations in the same order. That is what makes a
macro-step of k steps and k single steps land on the same bits (tests/test_engine.py). Anything
that refines decode pricing must stay a function of (n, S, Ss) built from + - * / and max/min,
identical in both paths (tests/test_cost_model.py checks bit-identity).

Modes: `realistic` (the default for `run`), `document` (the source note's simplified model:
weights-only traffic, eta_bw = 1, eta_fl = 0.5, no overheads) and `unit` (every step takes
`unit_step_s`: the explainer's slot-step examples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from capsim import architecture as arch
from capsim.config import HardwareProfile, ModelSpec
from capsim.formats import NumberFormat
from capsim.plan import StepPlan

Mode = Literal["realistic", "document", "unit"]
_VECTOR_FROM = 16  # decode runs this long or longer are priced with numpy, shorter ones in a loop
BOUNDS = ("compute", "memory", "overhead")


@dataclass(frozen=True, slots=True)
class StepCost:
    seconds: float
    compute_s: float
    memory_s: float
    overhead_s: float
    flops: float
    bytes: float
    bound: str  # one of BOUNDS: the term that took the most time


@dataclass(frozen=True)
class DocumentAssumptions:
    """The source note's stated numbers; each None means 'derive it from the catalogue'."""

    weight_bytes: float | None = None
    flops_per_token: float | None = None
    peak_flops: float | None = None
    bandwidth_bytes_per_s: float | None = None
    compute_efficiency: float = 0.5
    bandwidth_efficiency: float = 1.0


@dataclass(frozen=True, slots=True)
class DecodeSteps:
    """k consecutive pure-decode steps, one entry per step (numpy arrays, or lists for a few)."""

    seconds: np.ndarray | list
    flops: np.ndarray | list
    bytes: np.ndarray | list
    bound: np.ndarray | list  # index into BOUNDS


class CostModel:
    """Prices StepPlans for one (model, GPU, weight format, KV format, mode)."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareProfile,
        weights: NumberFormat,
        kv_cache: NumberFormat,
        mode: Mode = "realistic",
        document: DocumentAssumptions | None = None,
        unit_step_s: float = 1.0,
    ) -> None:
        self.model, self.hardware, self.mode, self.unit_step_s = model, hardware, mode, unit_step_s
        self.weights_format, self.kv_format = weights, kv_cache
        params = arch.param_counts(model)
        wb = weights.bytes_per_value
        self.params = params
        doc = document or DocumentAssumptions()
        self.document = doc
        if mode == "document":
            self.eta_bw = doc.bandwidth_efficiency
            self.eta_attn_bw = doc.bandwidth_efficiency
            self.eta_fl = doc.compute_efficiency
            self.half_tokens = 0.0
            self.bandwidth = doc.bandwidth_bytes_per_s or hardware.memory_bandwidth_bytes_per_s
            self.peak = doc.peak_flops or hardware.peak_for(weights.compute_dtype)
            self.overhead_s = 0.0
        else:
            eff = hardware.efficiency
            self.eta_bw, self.eta_fl, self.half_tokens = eff.bandwidth, eff.compute, eff.compute_half_tokens
            self.eta_attn_bw = eff.attention_bandwidth or eff.bandwidth
            self.bandwidth = hardware.memory_bandwidth_bytes_per_s
            self.peak = hardware.peak_for(weights.compute_dtype)
            self.overhead_s = hardware.overhead.step_s + hardware.overhead.layer_s * model.num_layers
        self.attn_peak = hardware.peak_for("fp16") if mode != "document" else self.peak
        self.vector_peak = hardware.peak_flops.get("fp32", hardware.peak_flops["fp16"] / 4)
        # GEMM side
        self.total_weight_bytes = doc.weight_bytes if doc.weight_bytes else params.total * wb
        self.doc_flops_per_token = doc.flops_per_token or 2.0 * params.active
        head = params.lm_head or params.embedding
        self.dense_weight_bytes = (params.attention + params.mlp_dense + params.mlp_shared + head) * wb
        moe = model.moe
        self.moe_layers = (model.num_layers - moe.dense_layers) if moe else 0
        self.expert_bytes = (params.mlp_experts / (self.moe_layers * moe.num_experts) * wb) if moe else 0.0
        self.body_flops_per_token = 2.0 * params.body_active + arch.linear_attention_flops_per_token(model)
        self.head_flops_per_logit = 2.0 * head
        self.state_bytes_per_seq = 2.0 * arch.state_bytes_per_sequence(model)  # read + write
        # Attention side
        full_v, sliding_v = arch.kv_values_per_token(model)
        kvb = kv_cache.bytes_per_value
        self.kv_full_bytes, self.kv_sliding_bytes = full_v * kvb, sliding_v * kvb
        self.kv_values_full, self.kv_values_sliding = full_v, sliding_v
        self.window = model.sliding_window_tokens or 0
        counts = model.layer_counts
        per_layer = arch.attention_flops_per_context_token(model)
        self.attn_flops_full, self.attn_flops_sliding = per_layer * counts.full, per_layer * counts.sliding
        self.dequant_flops_per_value = kv_cache.dequant_flops_per_value
        self._decode_cache: dict[int, tuple] = {}

    # ---------------------------------------------------------------- GEMM part (depends on T only)

    def experts_touched(self, num_tokens: int) -> float:
        """Expected distinct experts per MoE layer when num_tokens each pick k of E uniformly."""
        moe = self.model.moe
        if moe is None:
            return 0.0
        e, k = moe.num_experts, moe.experts_per_token
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
        eta = self.eta_fl * num_tokens / (num_tokens + self.half_tokens)
        return flops / (eta * self.peak), byts / (self.eta_bw * self.bandwidth), flops, byts

    # ---------------------------------------------------------------- attention part

    def attention_part(self, ctx_full, ctx_sliding, pairs_full, pairs_sliding, num_tokens: int):
        """(compute_s, memory_s, flops, bytes) of attention; inputs may be floats or numpy arrays.

        ctx_*: context positions read from the cache, summed over sequences; pairs_*: (new token,
        attended position) pairs, summed. Only + - * / and maximum are used, so arrays and scalars
        round identically.
        """
        if self.mode == "document":
            zero = ctx_full * 0.0
            return zero, zero, zero, zero
        read = self.kv_full_bytes * ctx_full + self.kv_sliding_bytes * ctx_sliding
        byts = read + (self.kv_full_bytes + self.kv_sliding_bytes) * num_tokens
        flops = self.attn_flops_full * pairs_full + self.attn_flops_sliding * pairs_sliding
        values_read = self.kv_values_full * ctx_full + self.kv_values_sliding * ctx_sliding
        dequant = self.dequant_flops_per_value * values_read
        compute_s = flops / (self.eta_fl * self.attn_peak) + dequant / (self.eta_fl * self.vector_peak)
        return compute_s, byts / (self.eta_attn_bw * self.bandwidth), flops + dequant, byts

    # ---------------------------------------------------------------- whole steps

    def step_cost(self, plan: StepPlan, running=None) -> StepCost:
        """Price any plan (prefill, decode or mixed). `running` supplies the decode aggregates
        when the plan has decode_all."""
        if self.mode == "unit":
            return StepCost(self.unit_step_s, 0.0, 0.0, self.unit_step_s, 0.0, 0.0, "overhead")
        ctx_f = ctx_s = pairs_f = pairs_s = 0
        logits = plan.num_decodes
        if plan.num_decodes:
            ctx_f = pairs_f = running.context_sum(1)
            if self.window:
                ctx_s = pairs_s = running.sliding_context_sum(1)
        w = self.window
        for req, n in zip(plan.scheduled, plan.new_tokens):
            c0 = req.computed_tokens
            c1 = c0 + n
            ctx_f += c1
            pairs_f += n * c0 + n * (n + 1) // 2
            if w:
                ctx_s += min(c1, w)
                pairs_s += _capped_pairs(c0, n, w)
            if c1 == req.known_tokens:
                logits += 1
        num_tokens = plan.num_tokens
        gc, gm, gf, gb = self.gemm_part(num_tokens, logits, plan.num_seqs)
        ac, am, af, ab = self.attention_part(ctx_f, ctx_s, pairs_f, pairs_s, num_tokens)
        return _combine(gc, gm, ac, am, gf + af, gb + ab, self.overhead_s)

    def decode_coefficients(self, n: int) -> tuple[float, float, float, float, float, float]:
        """(c1, c2, c0, m1, m2, m0): a step in which n sequences decode one token each and attend
        S full-attention and Ss sliding-window positions in total takes
            max(c1*S + c2*Ss + c0, m1*S + m2*Ss + m0)  seconds
        (the compute side and the memory side of attention, each with the GEMM roofline and the
        overheads folded in). Every decode-only step, single or in a macro-step, is priced by
        this one expression, so they round identically."""
        cached = self._decode_cache.get(n)
        if cached is not None:
            return cached
        if self.mode == "unit":
            coefs = (0.0, 0.0, self.unit_step_s, 0.0, 0.0, self.unit_step_s)
        else:
            gc, gm, _, _ = self.gemm_part(n, n, n)
            base = max(gc, gm) + self.overhead_s
            if self.mode == "document":
                coefs = (0.0, 0.0, base, 0.0, 0.0, base)
            else:
                fl, vec, bw = self.eta_fl * self.attn_peak, self.eta_fl * self.vector_peak, self.eta_attn_bw * self.bandwidth
                dq = self.dequant_flops_per_value
                coefs = (self.attn_flops_full / fl + dq * self.kv_values_full / vec,
                         self.attn_flops_sliding / fl + dq * self.kv_values_sliding / vec, base,
                         self.kv_full_bytes / bw, self.kv_sliding_bytes / bw,
                         (self.kv_full_bytes + self.kv_sliding_bytes) * n / bw + base)
        self._decode_cache[n] = coefs
        return coefs

    def decode_seconds(self, n: int, ctx_full, ctx_sliding):
        """Step times of decode-only steps (scalars or numpy arrays of S and Ss; see above).
        decode_ends inlines the scalar expression in its loop: keep the two identical."""
        c1, c2, c0, m1, m2, m0 = self.decode_coefficients(n)
        if isinstance(ctx_full, np.ndarray):
            return np.maximum(c1 * ctx_full + c2 * ctx_sliding + c0, m1 * ctx_full + m2 * ctx_sliding + m0)
        return max(c1 * ctx_full + c2 * ctx_sliding + c0, m1 * ctx_full + m2 * ctx_sliding + m0)

    def decode_ends(self, n: int, k: int, now: float, ctx_full0: int, ctx_sliding0: int, below: int):
        """End times of k decode steps from `now`: step j (1..k) attends ctx_full0 + n*j positions
        (ctx_sliding0 + below*j in sliding layers); times summed in order from `now`."""
        if k >= _VECTOR_FROM:
            j = np.arange(1, k + 1, dtype=np.int64)
            seconds = self.decode_seconds(n, (ctx_full0 + n * j).astype(np.float64),
                                          (ctx_sliding0 + below * j).astype(np.float64))
            seconds[0] = now + seconds[0]
            return np.cumsum(seconds)
        c1, c2, c0, m1, m2, m0 = self.decode_coefficients(n)
        ends, t = [], now
        full, sliding = ctx_full0, ctx_sliding0
        for _ in range(k):  # decode_seconds inlined: this loop is the simulator's hottest code
            full += n
            sliding += below
            t = t + max(c1 * full + c2 * sliding + c0, m1 * full + m2 * sliding + m0)
            ends.append(t)
        return ends

    def decode_detail(self, n: np.ndarray, ctx_full: np.ndarray, ctx_sliding: np.ndarray) -> DecodeSteps:
        """FLOPs, bytes and bound of decode-only steps (vectorised over many steps at once, for
        the step records; the times come from decode_seconds)."""
        rows = len(n)
        if self.mode == "unit":
            zeros = np.zeros(rows)
            return DecodeSteps(None, zeros, zeros, np.full(rows, 2, dtype=np.int8))
        sizes, which = np.unique(n, return_inverse=True)
        gemm = np.array([self.gemm_part(int(m), int(m), int(m)) for m in sizes])
        gc, gm, gf, gb = gemm[which].T
        ac, am, af, ab = self.attention_part(ctx_full, ctx_sliding, ctx_full, ctx_sliding, n)
        compute_t = np.where(gc >= gm, gc, 0.0) + np.where(ac >= am, ac, 0.0)
        memory_t = np.where(gm > gc, gm, 0.0) + np.where(am > ac, am, 0.0)
        bound = np.where(compute_t >= memory_t, 0, 1).astype(np.int8)
        over = self.overhead_s
        bound[(over > compute_t) & (over > memory_t)] = 2
        return DecodeSteps(None, gf + af, gb + ab, bound)


def _capped_pairs(c0: int, n: int, window: int) -> int:
    """Sum over new positions p = c0+1 .. c0+n of min(p, window)."""
    lo, hi = c0 + 1, c0 + n
    if hi <= window:
        return n * c0 + n * (n + 1) // 2
    if lo > window:
        return n * window
    below = window - c0  # positions lo..window count their own index
    return below * c0 + below * (below + 1) // 2 + (n - below) * window


def _combine(gc, gm, ac, am, flops, byts, overhead_s) -> StepCost:
    seconds = max(gc, gm) + max(ac, am) + overhead_s
    compute_t = (gc if gc >= gm else 0.0) + (ac if ac >= am else 0.0)
    memory_t = (gm if gm > gc else 0.0) + (am if am > ac else 0.0)
    if overhead_s > compute_t and overhead_s > memory_t:
        bound = "overhead"
    else:
        bound = "compute" if compute_t >= memory_t else "memory"
    return StepCost(seconds, gc + ac, gm + am, overhead_s, flops, byts, bound)
