"""Two more paged-decode backends from torch itself: FlexAttention over a block mask built from the
block tables (a cross-check), and torch's built-in paged FlashAttention path where the installed
torch has one (`torch.nn.attention.varlen.varlen_attn(..., block_table=...)`, CUDA only).

Same contract as the backends in `kernels_torch`.
"""

from __future__ import annotations

import inspect
import math
import warnings
from functools import cache

from capsim.errors import CapsimError
from capsim.harness.deps import require_torch


def flex_block_mask(block_tables, context_lens, num_blocks: int, block_size: int, max_context_tokens: int):
    """A BlockMask whose KV blocks are exactly each sequence's physical cache blocks.

    The flat key axis is the whole cache (num_blocks x block_size tokens); sequence b may attend to
    the blocks in its table, the full ones without a mask and its last, partial one through a
    mask_mod on the token's logical position. One KV tile per cache block, so no tile is read that
    the sequence does not own.
    """
    torch = require_torch()
    from torch.nn.attention.flex_attention import BlockMask

    dev = block_tables.device
    batch = block_tables.shape[0]
    lens = context_lens.long()
    n_used = (lens + block_size - 1) // block_size
    n_full = lens // block_size
    n_cols = math.ceil(max_context_tokens / block_size)
    tables = block_tables[:, :n_cols].to(torch.int32).contiguous()
    logical = torch.zeros(num_blocks, dtype=torch.long, device=dev)
    cols = torch.arange(n_cols, device=dev).expand(batch, n_cols)
    used = cols < n_used[:, None]
    owner = torch.full((num_blocks,), -1, dtype=torch.long, device=dev)
    logical[tables.long()[used]] = cols[used]
    owner[tables.long()[used]] = torch.arange(batch, device=dev)[:, None].expand(batch, n_cols)[used]

    # Eager (CPU) flex applies mask_mod densely, so the mask alone must also say who owns a block.
    def mask_mod(b, h, q_idx, kv_idx):
        blk = kv_idx // block_size
        return (owner[blk] == b) & (logical[blk] * block_size + kv_idx % block_size < lens[b])

    # Index lists must span every KV tile of the key axis (BlockMask's layout); the partial last
    # block, if any, is the one entry of the masked list.
    full_idx = torch.zeros((batch, num_blocks), dtype=torch.int32, device=dev)
    full_idx[:, :n_cols] = tables
    partial_idx = torch.zeros_like(full_idx)
    partial_idx[:, 0] = torch.gather(tables, 1, n_full.clamp(max=n_cols - 1)[:, None])[:, 0]
    partial_num = (n_used - n_full).to(torch.int32)
    return BlockMask.from_kv_blocks(
        partial_num.view(batch, 1, 1), partial_idx.view(batch, 1, 1, num_blocks),
        n_full.to(torch.int32).view(batch, 1, 1), full_idx.view(batch, 1, 1, num_blocks),
        BLOCK_SIZE=(128, block_size), mask_mod=mask_mod, seq_lengths=(1, num_blocks * block_size),
    )


@cache
def _compiled_flex():
    """flex_attention compiled once with static shapes (CUDA); eager elsewhere."""
    torch = require_torch()
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def paged_decode_flex(query, k_cache, v_cache, block_tables, context_lens, *, max_context_tokens: int,
                      k_scale: float = 1.0, v_scale: float = 1.0, block_mask=None):
    """FlexAttention over the whole cache as one flat key axis, masked to each sequence's blocks.

    Build `block_mask` once with `flex_block_mask` to time the kernel alone; fp8 caches are
    dequantised to the query dtype first (FlexAttention has no fp8 KV path).
    """
    require_torch()  # a clear error when torch is missing
    from torch.nn.attention.flex_attention import flex_attention

    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    if block_mask is None:
        block_mask = flex_block_mask(block_tables, context_lens, num_blocks, block_size, max_context_tokens)

    def flat(cache, scale):
        tokens = cache.to(query.dtype) * scale if scale != 1.0 else cache.to(query.dtype)
        return tokens.permute(2, 0, 1, 3).reshape(1, kv_heads, num_blocks * block_size, head_dim)

    args = (query.unsqueeze(2), flat(k_cache, k_scale), flat(v_cache, v_scale))
    if query.is_cuda:
        return _compiled_flex()(*args, block_mask=block_mask, enable_gqa=True).squeeze(2)
    with warnings.catch_warnings():  # eager on CPU is deliberate (a correctness check, not a timing)
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        return flex_attention(*args, block_mask=block_mask, enable_gqa=True).squeeze(2)


def builtin_paged_flash_supported() -> bool:
    """Does the installed torch expose a paged FlashAttention entry (varlen_attn with block_table)?"""
    torch = require_torch()
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return False
    return torch.cuda.is_available() and "block_table" in inspect.signature(varlen_attn).parameters


def paged_decode_flash(query, k_cache, v_cache, block_tables, context_lens, *, max_context_tokens: int,
                       k_scale: float = 1.0, v_scale: float = 1.0):
    """torch's built-in FlashAttention over the paged cache (fp16/bf16 KV only)."""
    torch = require_torch()
    if not builtin_paged_flash_supported():
        raise CapsimError("backend 'flash': this torch has no paged FlashAttention path "
                          "(torch.nn.attention.varlen.varlen_attn with block_table, CUDA); use triton or sdpa.")
    if k_cache.dtype not in (torch.float16, torch.bfloat16):
        raise CapsimError("backend 'flash': only fp16/bf16 KV caches are supported.")
    from torch.nn.attention.varlen import varlen_attn

    batch = query.shape[0]
    cu_q = torch.arange(batch + 1, dtype=torch.int32, device=query.device)
    return varlen_attn(query, k_cache, v_cache, cu_q, None, 1, max_context_tokens, enable_gqa=True,
                       seqused_k=context_lens, block_table=block_tables)


def probe_flash(block_size: int, dtype: str, device: str) -> str | None:
    """Try the built-in paged path on a tiny problem; None when it works, else the reason it does not."""
    if device != "cuda":
        return "needs CUDA"
    from capsim.harness.kernels.torch_ref import make_paged_inputs, reference_decode

    try:
        inp = make_paged_inputs([block_size + 3, 2 * block_size], q_heads=8, kv_heads=2, head_dim=128,
                                block_size=block_size, q_dtype=dtype, kv_dtype=dtype, device=device)
        got = paged_decode_flash(*inp.backend_args(), **inp.backend_kwargs())
        err = float((got.double().cpu() - reference_decode(*inp.backend_args(), **inp.backend_kwargs())).abs().max())
    except Exception as exc:  # noqa: BLE001  any failure means "not usable here", with the reason
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None if err < 2e-2 else f"wrong result (max abs error {err:.3g})"
