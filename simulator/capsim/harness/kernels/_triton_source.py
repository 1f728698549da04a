"""The project's split-KV paged-decode attention kernel, in Triton (imported only on demand).

This module imports triton at the top, so nothing imports it at package import time: only
`kernels_triton` does, inside a function. Set TRITON_INTERPRET=1 before that first import to run the
kernels on CPU under Triton's interpreter.

Layout: K and V caches are [num_blocks, block_size, kv_heads, head_dim]; block_tables[b, j] is the
physical block that holds tokens j*block_size ... of sequence b; context_lens[b] tokens are valid.

Stage 1 (one program per sequence x KV head x split) reads one split's tokens once for all the
query heads that share that KV head (grouped-query packing), keeps an online softmax, and writes an
unnormalised partial output plus its running max and sum. Stage 2 (one program per sequence x query
head) merges the splits. Loop bounds are compile-time constants and lengths are handled by masks,
so the kernels never turn a loaded value into a Python int (which Triton's interpreter cannot do
under numpy >= 2.4).
"""

from __future__ import annotations

import triton
import triton.language as tl


# block_size and group_size only enter index arithmetic: not specialising on them (Triton would
# compile a variant per value, e.g. for 1 or multiples of 16) keeps the grid's compile count small.
@triton.jit(do_not_specialize=["block_size", "group_size"])
def paged_decode_split_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr,
    acc_ptr, max_ptr, sum_ptr,
    sm_scale, k_scale, v_scale,
    block_size, group_size,
    stride_qb, stride_qh,
    stride_kn, stride_kt, stride_kh,
    stride_vn, stride_vt, stride_vh,
    stride_tb,
    stride_ab, stride_ah, stride_as,
    stride_mb, stride_mh,
    HEAD_DIM: tl.constexpr, GROUP_PAD: tl.constexpr, TILE_N: tl.constexpr,
    PARTITION_TOKENS: tl.constexpr, KV_IS_FP8: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    ctx_len = tl.load(lens_ptr + seq)
    start = split * PARTITION_TOKENS
    if start < ctx_len:
        rows = tl.arange(0, GROUP_PAD)
        dims = tl.arange(0, HEAD_DIM)
        row_ok = rows < group_size
        q_heads = kv_head * group_size + rows
        q = tl.load(q_ptr + seq * stride_qb + q_heads[:, None] * stride_qh + dims[None, :],
                    mask=row_ok[:, None], other=0.0)
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
        for offset in range(0, PARTITION_TOKENS, TILE_N):
            tok = start + offset + tl.arange(0, TILE_N)
            tok_ok = tok < ctx_len
            phys = tl.load(tables_ptr + seq * stride_tb + tok // block_size, mask=tok_ok, other=0)
            slot = tok % block_size
            k_off = phys[:, None].to(tl.int64) * stride_kn + slot[:, None] * stride_kt + kv_head * stride_kh
            k = tl.load(k_ptr + k_off + dims[None, :], mask=tok_ok[:, None], other=0.0)
            v_off = phys[:, None].to(tl.int64) * stride_vn + slot[:, None] * stride_vt + kv_head * stride_vh
            v = tl.load(v_ptr + v_off + dims[None, :], mask=tok_ok[:, None], other=0.0)
            if KV_IS_FP8:
                k = (k.to(tl.float32) * k_scale).to(q.dtype)
                v = (v.to(tl.float32) * v_scale).to(q.dtype)
            else:
                k = k.to(q.dtype)
                v = v.to(q.dtype)
            scores = tl.dot(q, tl.trans(k)) * sm_scale
            scores = tl.where(tok_ok[None, :], scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        out_rows = seq * stride_ab + q_heads * stride_ah + split * stride_as
        tl.store(acc_ptr + out_rows[:, None] + dims[None, :], acc, mask=row_ok[:, None])
        stat = seq * stride_mb + q_heads * stride_mh + split
        tl.store(max_ptr + stat, m_i, mask=row_ok)
        tl.store(sum_ptr + stat, l_i, mask=row_ok)


@triton.jit
def paged_decode_reduce_kernel(
    acc_ptr, max_ptr, sum_ptr, lens_ptr, out_ptr,
    stride_ab, stride_ah, stride_as,
    stride_mb, stride_mh,
    stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, SPLITS_PAD: tl.constexpr, PARTITION_TOKENS: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    ctx_len = tl.load(lens_ptr + seq)
    n_splits = (ctx_len + PARTITION_TOKENS - 1) // PARTITION_TOKENS
    splits = tl.arange(0, SPLITS_PAD)
    ok = splits < n_splits
    dims = tl.arange(0, HEAD_DIM)
    stat = seq * stride_mb + head * stride_mh + splits
    m = tl.load(max_ptr + stat, mask=ok, other=float("-inf"))
    l = tl.load(sum_ptr + stat, mask=ok, other=0.0)
    m_all = tl.max(m, 0)
    w = tl.where(ok, tl.exp(m - m_all), 0.0)
    acc = tl.load(acc_ptr + seq * stride_ab + head * stride_ah + splits[:, None] * stride_as + dims[None, :],
                  mask=ok[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))
