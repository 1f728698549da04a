"""Host side of the project's Triton split-KV paged-decode kernel (see `_triton_source`).

`paged_decode_triton` has the same contract as the torch backends in `kernels_torch`: query
[batch, q_heads, head_dim], caches [num_blocks, block_size, kv_heads, head_dim] (fp16, bf16, fp32 or
fp8 e4m3/e5m2 with per-tensor scales), int32 block tables and context lengths; returns
[batch, q_heads, head_dim] in the query's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capsim.errors import CapsimError
from capsim.harness.deps import require_triton, triton_interpreted

# Split sizes are powers of two so that the compiled variants stay few.
_MIN_PARTITION_TOKENS = 256
_MAX_PARTITION_TOKENS = 8192


@dataclass(frozen=True)
class SplitPlan:
    """How stage 1 is cut: tokens per split, splits per sequence, and the tile size."""

    partition_tokens: int
    num_splits: int
    tile_tokens: int


def _next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def plan_splits(batch: int, kv_heads: int, max_context_tokens: int, *, target_programs: int = 264) -> SplitPlan:
    """Pick the split size so that batch x kv_heads x splits fills about `target_programs` programs
    (two waves on a 132-SM H200) without splitting short contexts into slivers."""
    wanted_splits = max(1, math.ceil(target_programs / max(1, batch * kv_heads)))
    partition = _next_pow2(math.ceil(max_context_tokens / wanted_splits))
    partition = min(max(partition, _MIN_PARTITION_TOKENS), _MAX_PARTITION_TOKENS)
    tile = 16 if triton_interpreted() else 64
    return SplitPlan(partition, math.ceil(max_context_tokens / partition), min(tile, partition))


def _check_inputs(query, k_cache, v_cache) -> int:
    """Validate shapes; return the query-heads-per-KV-head group size."""
    batch, q_heads, head_dim = query.shape
    kv_heads = k_cache.shape[2]
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != head_dim:
        raise CapsimError(f"triton paged decode: cache shapes {tuple(k_cache.shape)} / {tuple(v_cache.shape)} "
                          f"do not match head_dim {head_dim}.")
    if q_heads % kv_heads:
        raise CapsimError(f"triton paged decode: {q_heads} query heads is not a multiple of {kv_heads} KV heads.")
    if head_dim & (head_dim - 1) or head_dim < 16:
        raise CapsimError(f"triton paged decode: head_dim must be a power of two >= 16, got {head_dim}.")
    return q_heads // kv_heads


def paged_decode_triton(query, k_cache, v_cache, block_tables, context_lens, *, max_context_tokens: int,
                        k_scale: float = 1.0, v_scale: float = 1.0, plan: SplitPlan | None = None):
    """Decode attention for one new token per sequence through the paged KV cache.

    `max_context_tokens` (a host int, the longest context in the batch) sizes the split grid, so the
    call never reads a device value back to the host.
    """
    require_triton()
    import torch

    from capsim.harness.kernels import _triton_source as tk

    group = _check_inputs(query, k_cache, v_cache)
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise CapsimError("triton paged decode: the caches' head_dim axis must be contiguous.")
    query = query.contiguous()
    batch, q_heads, head_dim = query.shape
    kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    plan = plan or plan_splits(batch, kv_heads, max_context_tokens)
    dev = query.device
    acc = torch.empty((batch, q_heads, plan.num_splits, head_dim), dtype=torch.float32, device=dev)
    stats_max = torch.empty((batch, q_heads, plan.num_splits), dtype=torch.float32, device=dev)
    stats_sum = torch.empty_like(stats_max)
    out = torch.empty_like(query)
    fp8 = k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    tk.paged_decode_split_kernel[(batch, kv_heads, plan.num_splits)](
        query, k_cache, v_cache, block_tables, context_lens, acc, stats_max, stats_sum,
        1.0 / math.sqrt(head_dim), float(k_scale), float(v_scale), block_size, group,
        query.stride(0), query.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        acc.stride(0), acc.stride(1), acc.stride(2),
        stats_max.stride(0), stats_max.stride(1),
        HEAD_DIM=head_dim, GROUP_PAD=max(16, _next_pow2(group)), TILE_N=plan.tile_tokens,
        PARTITION_TOKENS=plan.partition_tokens, KV_IS_FP8=fp8,
    )
    tk.paged_decode_reduce_kernel[(batch, q_heads)](
        acc, stats_max, stats_sum, context_lens, out,
        acc.stride(0), acc.stride(1), acc.stride(2),
        stats_max.stride(0), stats_max.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, SPLITS_PAD=max(2, _next_pow2(plan.num_splits)), PARTITION_TOKENS=plan.partition_tokens,
    )
    return out
