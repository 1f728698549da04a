"""Paged-decode inputs, the float64 dense reference, and the torch attention backends.

Every backend takes the same arguments as `paged_decode_triton`: query [batch, q_heads, head_dim];
K/V caches [num_blocks, block_size, kv_heads, head_dim]; int32 block_tables [batch, max_blocks] and
context_lens [batch]; `max_context_tokens` (host int); fp8 caches come with per-tensor scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from capsim.errors import CapsimError
from capsim.harness.deps import require_torch

KV_DTYPES = ("fp32", "fp16", "bf16", "fp8")


def torch_dtype(name: str):
    """'fp16' -> torch.float16 etc. ('fp8' is e4m3, the KV-cache format vLLM uses by default)."""
    torch = require_torch()
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
    if name not in table:
        raise CapsimError(f"unknown dtype {name!r}; allowed: {', '.join(table)}.")
    return table[name]


@dataclass
class PagedInputs:
    """One decode batch over a paged KV cache (tensors live on `query.device`)."""

    query: Any
    k_cache: Any
    v_cache: Any
    block_tables: Any
    context_lens: Any
    max_context_tokens: int
    k_scale: float = 1.0
    v_scale: float = 1.0

    def backend_args(self) -> tuple:
        return (self.query, self.k_cache, self.v_cache, self.block_tables, self.context_lens)

    def backend_kwargs(self) -> dict:
        return {"max_context_tokens": self.max_context_tokens, "k_scale": self.k_scale, "v_scale": self.v_scale}


def random_block_tables(context_lens: list[int], block_size: int, num_blocks: int, generator):
    """int32 [batch, max_blocks] tables drawing distinct physical blocks at random (padding -> 0)."""
    torch = require_torch()
    need = [math.ceil(c / block_size) for c in context_lens]
    if sum(need) > num_blocks:
        raise CapsimError(f"paged inputs: {sum(need)} blocks needed but the cache holds {num_blocks}.")
    perm = torch.randperm(num_blocks, generator=generator)
    tables = torch.zeros((len(context_lens), max(need)), dtype=torch.int32)
    start = 0
    for row, n in enumerate(need):
        tables[row, :n] = perm[start:start + n].to(torch.int32)
        start += n
    return tables


def make_paged_inputs(context_lens: list[int], *, q_heads: int, kv_heads: int, head_dim: int, block_size: int,
                      q_dtype: str = "fp16", kv_dtype: str = "fp16", device: str = "cpu", seed: int = 0,
                      num_blocks: int | None = None) -> PagedInputs:
    """Random query and caches, random block tables, given (ragged) context lengths.

    fp8 caches hold values scaled into e4m3 range with a per-tensor scale, as an fp8 KV cache does.
    """
    torch = require_torch()
    gen = torch.Generator(device=device).manual_seed(seed)  # draw on the device: caches can be GBs
    need = sum(math.ceil(c / block_size) for c in context_lens)
    num_blocks = num_blocks or need + 3
    shape = (num_blocks, block_size, kv_heads, head_dim)
    caches, scales = [], []
    # Drawn in the cache's own dtype (bf16 for fp8, then scaled into e4m3's range): GPU caches can be
    # tens of GB, so no fp32 copy of them is ever made.
    draw_dtype = torch_dtype("bf16" if kv_dtype == "fp8" else kv_dtype)
    for _ in range(2):
        x = torch.randn(shape, generator=gen, device=device, dtype=draw_dtype)
        scale = float(x.abs().max()) / 448.0 if kv_dtype == "fp8" else 1.0
        caches.append((x / scale if kv_dtype == "fp8" else x).to(torch_dtype(kv_dtype)))
        scales.append(scale)
        del x
    q = torch.randn((len(context_lens), q_heads, head_dim), generator=gen, device=device)
    tables = random_block_tables(context_lens, block_size, num_blocks, torch.Generator().manual_seed(seed))
    return PagedInputs(
        query=q.to(torch_dtype(q_dtype)),
        k_cache=caches[0],
        v_cache=caches[1],
        block_tables=tables.to(device),
        context_lens=torch.tensor(context_lens, dtype=torch.int32, device=device),
        max_context_tokens=max(context_lens),
        k_scale=scales[0],
        v_scale=scales[1],
    )


def gather_kv(cache, block_tables, max_context_tokens: int, scale: float, dtype):
    """Gather each sequence's tokens through its block table: [batch, kv_heads, max_ctx, head_dim]."""
    batch = block_tables.shape[0]
    block_size = cache.shape[1]
    n_blocks = math.ceil(max_context_tokens / block_size)
    blocks = cache[block_tables[:, :n_blocks].long()]  # [batch, n_blocks, block_size, kv_heads, dim]
    tokens = blocks.reshape(batch, n_blocks * block_size, cache.shape[2], cache.shape[3])[:, :max_context_tokens]
    tokens = tokens.to(dtype)
    if scale != 1.0:
        tokens = tokens * scale
    return tokens.transpose(1, 2)


def reference_decode(query, k_cache, v_cache, block_tables, context_lens, *, max_context_tokens: int,
                     k_scale: float = 1.0, v_scale: float = 1.0):
    """Dense float64 attention, one sequence at a time: the ground truth every backend is checked against."""
    torch = require_torch()
    batch, q_heads, head_dim = query.shape
    group = q_heads // k_cache.shape[2]
    out = torch.empty((batch, q_heads, head_dim), dtype=torch.float64)
    keys = gather_kv(k_cache.cpu(), block_tables.cpu(), max_context_tokens, k_scale, torch.float64)
    values = gather_kv(v_cache.cpu(), block_tables.cpu(), max_context_tokens, v_scale, torch.float64)
    q64 = query.cpu().to(torch.float64)
    for b, n in enumerate(context_lens.cpu().tolist()):
        k = keys[b, :, :n].repeat_interleave(group, dim=0)  # [q_heads, n, dim]
        v = values[b, :, :n].repeat_interleave(group, dim=0)
        scores = (k @ q64[b].unsqueeze(-1)).squeeze(-1) / math.sqrt(head_dim)
        out[b] = (scores.softmax(-1).unsqueeze(1) @ v).squeeze(1)
    return out


def paged_decode_sdpa(query, k_cache, v_cache, block_tables, context_lens, *, max_context_tokens: int,
                      k_scale: float = 1.0, v_scale: float = 1.0):
    """Baseline: gather K/V through the block tables, then scaled_dot_product_attention with a length mask."""
    torch = require_torch()
    import torch.nn.functional as F

    dtype = query.dtype
    keys = gather_kv(k_cache, block_tables, max_context_tokens, k_scale, dtype)
    values = gather_kv(v_cache, block_tables, max_context_tokens, v_scale, dtype)
    positions = torch.arange(max_context_tokens, device=query.device)
    mask = (positions[None, :] < context_lens[:, None].long())[:, None, None, :]
    out = F.scaled_dot_product_attention(query.unsqueeze(2), keys, values, attn_mask=mask, enable_gqa=True)
    return out.squeeze(2)
