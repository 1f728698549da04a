"""A run of decode steps: pricing decode-only steps from per-batch-size coefficients (DESIGN §2, §3).

Decode-only steps (every running request computes one token) are priced by `decode_seconds`, a
function of the batch size n and the summed contexts S (full attention) and Ss (sliding window)
only, and summed into end times by `decode_ends`: a numpy path for long runs and a scalar loop
for short ones, using the same float operations in the same order. That is what makes a
macro-step of k steps and k single steps land on the same bits (tests/sim/test_engine.py). Anything
that refines decode pricing must stay a function of (n, S, Ss) built from + - * / and max/min,
identical in both paths (tests/cost/test_roofline.py checks bit-identity).

`DecodeRuns` holds this pricing as a base class of capsim.cost.roofline.CostModel, which sets the
numbers declared here and provides the per-step parts the coefficients are built from. Decode-only
fixed times depend on n only (host time, kernels, all-reduces, elementwise traffic, per-sequence
attention cost) and are folded into the per-n coefficients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Decode runs this long or longer are priced with numpy, shorter ones in a loop: both give the same bits.
# PERF: numpy's fixed cost per call pays from about 40 steps in plain Python, from 1,024 compiled.
_VECTOR_FROM = 40 if __file__.endswith(".py") else 1024


@dataclass(frozen=True, slots=True)
class DecodeSteps:
    """k consecutive pure-decode steps, one entry per step (numpy arrays, or lists for a few)."""

    seconds: np.ndarray | list | None  # None where only FLOPs, bytes and bound are wanted
    flops: np.ndarray | list
    bytes: np.ndarray | list
    bound: np.ndarray | list  # index into core.names.BOUNDS


# A GEMM streams its weights while its tensor cores work, but not perfectly: where the two times are
# close (the ridge, about 100-300 tokens per step on Hopper) measured GEMMs take longer than the larger
# of them. Realistic mode prices the GEMM part as the p-norm of its two rooflines, at most 2^(1/p) times
# the larger. p = 4,
# from measured GEMMs at M = 1..32,768 (docs/cost-model.md, "GEMM overlap"): NVIDIA's aiconfigurator
# TensorRT-LLM database (H100 SXM and H200, bf16 and fp8) and capsim's own H200 calibration run.
GEMM_OVERLAP_NORM = 4.0


class DecodeRuns:
    """Prices decode-only steps, one or a run of them; the base of CostModel (capsim.cost.roofline),
    whose constructor sets every number declared here."""

    # PERF: declared so that compiled they are C doubles and ints.
    mode: str  # "realistic", "document" or "unit" (roofline.Mode)
    unit_step_s: float
    queries: int  # tokens a decoder computes per step: 1, or the verified drafts + 1
    draft: DecodeRuns | None  # the draft model's pricing (speculative decoding), if one is priced
    draft_passes: int  # the draft model's passes per step
    _decode_cache: dict[int, tuple]  # decode_coefficients by batch size
    bandwidth: float
    attn_peak: float
    vector_peak: float
    eta_attn_fl: float
    eta_attn_bw: float
    kv_values_full: float
    kv_values_sliding: float
    kv_full_bytes: float
    kv_sliding_bytes: float
    kv_read_full_bytes: float  # KV bytes read per context position (x query heads / KV heads without GQA reuse)
    kv_read_sliding_bytes: float
    attn_flops_full: float
    attn_flops_sliding: float
    score_bytes_full: float
    score_bytes_sliding: float
    dequant_flops_per_value: float
    attention_seq_s: float
    attention_token_s: float

    def gemm_seconds(self, compute_s: float, memory_s: float) -> float:
        """The GEMM part's time from its two rooflines: their GEMM_OVERLAP_NORM-norm (their max in
        document mode, the source note's model)."""
        if self.mode != "realistic" or compute_s <= 0.0 or memory_s <= 0.0:
            return max(compute_s, memory_s)
        p = GEMM_OVERLAP_NORM
        return (compute_s ** p + memory_s ** p) ** (1.0 / p)

    # The per-step parts the coefficients and the step details are built from (CostModel's).

    def gemm_part(self, num_tokens: int, num_logits: int, num_seqs: int) -> tuple[float, float, float, float]:
        raise NotImplementedError

    def elementwise_part(self, num_tokens: int) -> tuple[float, float]:
        raise NotImplementedError

    def fixed_seconds(self, num_tokens: int, num_seqs: int, decode_only: bool) -> tuple[float, float]:
        raise NotImplementedError

    def attention_arrays(self, ctx_full: np.ndarray, ctx_sliding: np.ndarray, pairs_full: np.ndarray,
                         pairs_sliding: np.ndarray, num_tokens: np.ndarray, num_seqs: np.ndarray) -> tuple:
        raise NotImplementedError

    def decode_coefficients(self, n: int) -> tuple[float, ...]:
        """(c1, c2, c0, m1, m2, m0, d1, d0, e1, e0): a step in which n sequences decode (each
        computing `queries` tokens: 1, or the verified drafts + 1) and attend S full-attention and
        Ss sliding-window positions in total (from each one's first new token) takes
            max(c1*S + c2*Ss + c0, m1*S + m2*Ss + m0) + passes * max(d1*S + d0, e1*S + e0)
        seconds: the compute and memory sides of attention, each with the GEMM roofline and the
        overheads folded in, then the draft model's passes. Every decode-only step, single or in
        a macro-step, is priced by this one expression, so they round identically."""
        cached = self._decode_cache.get(n)
        if cached is not None:
            return cached
        coefs: tuple[float, ...]
        if self.mode == "unit":
            coefs = (0.0, 0.0, self.unit_step_s, 0.0, 0.0, self.unit_step_s, 0.0, 0.0, 0.0, 0.0)
        else:
            q = self.queries
            tokens = n * q
            gc, gm, _, _ = self.gemm_part(tokens, tokens, n)
            overhead, comm = self.fixed_seconds(tokens, n, decode_only=True)
            base = self.gemm_seconds(gc, gm) + (overhead + comm) + self.elementwise_part(tokens)[0]
            draft = (0.0, 0.0, 0.0, 0.0)
            if self.draft is not None:
                d = self.draft.decode_coefficients(n)
                draft = (d[0], d[2], d[3], d[5])
            if self.mode == "document":
                coefs = (0.0, 0.0, base, 0.0, 0.0, base) + draft
            else:
                coefs = self._attention_coefficients(n, q, base) + draft
        self._decode_cache[n] = coefs
        return coefs

    def _attention_coefficients(self, n: int, q: int, base: float) -> tuple[float, ...]:
        fl, bw = self.eta_attn_fl * self.attn_peak, self.eta_attn_bw * self.bandwidth
        vec = self.eta_attn_fl * self.vector_peak
        dq = self.dequant_flops_per_value
        later = n * q * (q - 1) // 2  # verified drafts attend 1, 2, ... positions more than the first
        return (q * self.attn_flops_full / fl + dq * self.kv_values_full / vec,
                q * self.attn_flops_sliding / fl + dq * self.kv_values_sliding / vec,
                base + self.attention_seq_s * n + later * (self.attn_flops_full + self.attn_flops_sliding) / fl,
                (self.kv_read_full_bytes + q * self.score_bytes_full) / bw,
                (self.kv_read_sliding_bytes + q * self.score_bytes_sliding) / bw,
                (self.kv_full_bytes + self.kv_sliding_bytes) * n * q / bw + base)

    def decode_seconds(self, n: int, ctx_full, ctx_sliding):
        """Step times of decode-only steps (scalars or numpy arrays of S and Ss; see above).
        decode_ends inlines the scalar expression in its loop: keep the two identical."""
        c1, c2, c0, m1, m2, m0, d1, d0, e1, e0 = self.decode_coefficients(n)
        passes = self.draft_passes
        if isinstance(ctx_full, np.ndarray):
            t = np.maximum(c1 * ctx_full + c2 * ctx_sliding + c0, m1 * ctx_full + m2 * ctx_sliding + m0)
            return t + passes * np.maximum(d1 * ctx_full + d0, e1 * ctx_full + e0) if passes else t
        t = max(c1 * ctx_full + c2 * ctx_sliding + c0, m1 * ctx_full + m2 * ctx_sliding + m0)
        return t + passes * max(d1 * ctx_full + d0, e1 * ctx_full + e0) if passes else t

    def decode_ends(self, n: int, k: int, now: float, ctx_full0: int, ctx_sliding0: int, below: int,
                    offsets: list[int] | None = None, until: float = math.inf):
        """End times of up to k decode steps from `now`: step j (1..k) attends ctx_full0 + n*o_j
        positions (ctx_sliding0 + below*o_j in sliding layers), o_j = j or offsets[j-1]; times
        summed in order from `now`. Stops after the first step ending at or after `until` (the
        engine would stop the macro-step there anyway; the steps beyond are not priced)."""
        c1, c2, c0, m1, m2, m0 = self.decode_coefficients(n)[:6]
        passes = self.draft_passes
        if until < math.inf and k > 1 and offsets is None:  # steps only get longer: bound k
            full, sliding = ctx_full0 + n, ctx_sliding0 + below
            first = (self.decode_seconds(n, full, sliding) if passes
                     else max(c1 * full + c2 * sliding + c0, m1 * full + m2 * sliding + m0))
            k = min(k, max(1, int((until - now) / first) + 2))
        if k >= _VECTOR_FROM or passes:
            j = np.arange(1, k + 1, dtype=np.int64) if offsets is None else np.asarray(offsets, dtype=np.int64)
            seconds = self.decode_seconds(n, (ctx_full0 + n * j).astype(np.float64),
                                          (ctx_sliding0 + below * j).astype(np.float64))
            seconds[0] = now + seconds[0]
            return np.cumsum(seconds)
        ends, t = [], now
        if offsets is None and not below and not ctx_sliding0:  # no sliding layers: the same sums, fewer terms
            full = ctx_full0
            for _ in range(k):
                full += n
                compute, memory = c1 * full + c0, m1 * full + m0  # c2 * 0 adds an exact 0.0
                t = t + (compute if compute >= memory else memory)
                ends.append(t)
                if t >= until:
                    break
            return ends
        for o in (range(1, k + 1) if offsets is None else offsets):
            full, sliding = ctx_full0 + n * o, ctx_sliding0 + below * o
            # decode_seconds inlined: this loop is the simulator's hottest code
            t = t + max(c1 * full + c2 * sliding + c0, m1 * full + m2 * sliding + m0)
            ends.append(t)
            if t >= until:
                break
        return ends

    def decode_detail(self, n: np.ndarray, ctx_full: np.ndarray, ctx_sliding: np.ndarray) -> DecodeSteps:
        """FLOPs, bytes and bound of decode-only steps (vectorised over many steps at once, for
        the step records; the times come from decode_seconds)."""
        rows = len(n)
        if self.mode == "unit":
            zeros = np.zeros(rows)
            return DecodeSteps(None, zeros, zeros, np.full(rows, 2, dtype=np.int8))
        q = self.queries
        # The parts that depend on the batch size alone, once per size present, looked up per step
        # (batch sizes are small integers: a table row per size, not a sort of the steps).
        present = np.bincount(n, minlength=1)
        by_size = np.zeros((len(present), 7))
        for m in np.flatnonzero(present).tolist():
            by_size[m, 0:4] = self.gemm_part(m * q, m * q, m)
            by_size[m, 4:6] = self.elementwise_part(m * q)
            by_size[m, 6] = sum(self.fixed_seconds(m * q, m, decode_only=True))
        gc, gm, gf, gb, es, eb, over = np.ascontiguousarray(by_size.T)[:, n]  # each one contiguous
        later = n * (q * (q - 1) // 2)
        ac, am, af, ab = self.attention_arrays(ctx_full, ctx_sliding, q * ctx_full + later, q * ctx_sliding, n * q, n)
        compute_t = np.where(gc >= gm, gc, 0.0) + np.where(ac >= am, ac, 0.0)
        memory_t = np.where(gm > gc, gm, 0.0) + np.where(am > ac, am, 0.0) + es
        bound = np.where(compute_t >= memory_t, 0, 1).astype(np.int8)
        bound[(over > compute_t) & (over > memory_t)] = 2
        flops, byts = gf + af, gb + ab + eb
        if self.draft is not None:
            drafted = self.draft.decode_detail(n, ctx_full, np.zeros_like(ctx_full))
            flops, byts = flops + self.draft_passes * drafted.flops, byts + self.draft_passes * drafted.bytes
        return DecodeSteps(None, flops, byts, bound)
