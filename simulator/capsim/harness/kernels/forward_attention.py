"""Attention inside a whole forward pass, over the paged KV cache, by backend.

`harness` backends use the harness's own kernels: decoding sequences go through the paged-decode
kernel of `capsim.harness.measure.decode_backend` (`triton`: the project's split-KV kernel;
`sdpa`: gather + scaled_dot_product_attention, the CPU path), prompt chunks through torch's
scaled_dot_product_attention (causal; a chunk with cached context reads it through its block
table). `flashinfer` runs FlashInfer's paged decode and paged prefill kernels over the same cache
(the kernels SGLang and vLLM run); it is optional and reports why when it cannot run.

A backend is planned once per step (host side: block tables, masks, FlashInfer's schedule) and
then called once per layer with that layer's cache, so a step can be captured as a CUDA graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from capsim.errors import CapsimError
from capsim.harness.deps import require_torch
from capsim.harness.forward_shapes import StepShape

ATTENTION_BACKENDS = ("triton", "sdpa", "flashinfer")
_WORKSPACE_BYTES = 128 * 2**20  # FlashInfer's float workspace, one per wrapper (its examples use 128 MB)


@dataclass
class Chunk:
    """One prompt chunk of a step: where its tokens sit in the step and how it reads the cache."""

    start: int  # first row of the chunk in the step's token axis
    prior: int  # tokens of its prompt already cached
    new: int  # its new tokens
    table: Any  # int32 [1, blocks] block table (device)
    mask: Any = None  # bool [new, prior + new]: lower-right causal, for chunks with prior context


@dataclass
class StepMeta:
    """Per-step attention inputs shared by every layer."""

    num_decodes: int
    decode_tables: Any  # int32 [decodes, blocks]
    decode_lens: Any  # int32 [decodes]
    decode_max: int  # longest decode context (host int: sizes the kernel's grid)
    chunks: list[Chunk] = field(default_factory=list)
    tables: Any = None  # int32 [seqs, blocks], decodes first: every sequence's block table
    lens: list[int] = field(default_factory=list)  # every sequence's cached length after the step


def step_meta(step: StepShape, tables, device: str) -> StepMeta:
    """Attention inputs of `step` given its block tables (int32 [seqs, blocks], decodes first)."""
    torch = require_torch()
    d = step.num_decodes
    lens = step.seq_lengths()
    chunks, start = [], d
    for i, (prior, new) in enumerate(step.prefill):
        mask = None
        if prior:
            rows = torch.arange(new, device=device)[:, None] + prior
            mask = torch.arange(prior + new, device=device)[None, :] <= rows
        chunks.append(Chunk(start, prior, new, tables[d + i:d + i + 1], mask))
        start += new
    return StepMeta(d, tables[:d], torch.tensor(lens[:d], dtype=torch.int32, device=device),
                    max(lens[:d], default=0), chunks, tables, lens)


class HarnessAttention:
    """Decodes through the harness's paged-decode kernel, prompt chunks through causal SDPA."""

    def __init__(self, decode_kernel: str):
        from capsim.harness.measure import decode_backend

        self.name = decode_kernel
        self._decode = decode_backend(decode_kernel)

    def plan(self, meta: StepMeta) -> None:
        """Nothing to schedule on the host: the kernels take the block tables as they are."""

    def __call__(self, meta: StepMeta, q, k, v, k_cache, v_cache):
        """Attention output [tokens, q_heads, head_dim] of one layer (its new K/V already cached)."""
        torch = require_torch()
        import torch.nn.functional as F

        from capsim.harness.kernels.torch_ref import gather_kv

        out = torch.empty_like(q)
        d = meta.num_decodes
        if d:
            out[:d] = self._decode(q[:d], k_cache, v_cache, meta.decode_tables, meta.decode_lens,
                                   max_context_tokens=meta.decode_max)
        group = q.shape[1] // k.shape[1]
        for c in meta.chunks:
            qs = q[c.start:c.start + c.new].transpose(0, 1).unsqueeze(0)
            if not c.prior:  # the whole prompt is in this chunk: its own K/V, causal
                ks = k[c.start:c.start + c.new].transpose(0, 1).unsqueeze(0)
                vs = v[c.start:c.start + c.new].transpose(0, 1).unsqueeze(0)
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
            else:  # cached context + the chunk, read through the block table; KV heads repeated
                # because the masked SDPA paths do not all take grouped heads
                ctx = c.prior + c.new
                ks = gather_kv(k_cache, c.table, ctx, 1.0, q.dtype).repeat_interleave(group, dim=1)
                vs = gather_kv(v_cache, c.table, ctx, 1.0, q.dtype).repeat_interleave(group, dim=1)
                o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=c.mask)
            out[c.start:c.start + c.new] = o[0].transpose(0, 1)
        return out


def _csr(tables, lens: list[int], block_size: int, device: str):
    """FlashInfer's page table of some sequences: (indptr, indices, last_page_len), int32 on device."""
    torch = require_torch()
    pages = [math.ceil(n / block_size) for n in lens]
    indices = torch.cat([tables[i, :p] for i, p in enumerate(pages)]).to(torch.int32)
    indptr = torch.tensor([0, *accumulate(pages)], dtype=torch.int32, device=device)
    last = torch.tensor([(n - 1) % block_size + 1 for n in lens], dtype=torch.int32, device=device)
    return indptr, indices, last


class FlashInferAttention:
    """FlashInfer's BatchDecode/BatchPrefill paged wrappers over the harness's NHD cache layout
    ([pages, page_size, kv_heads, head_dim]); tensor-core decode when the query group is over 4,
    as vLLM chooses."""

    def __init__(self, q_heads: int, kv_heads: int, head_dim: int, block_size: int, dtype, device: str):
        torch = require_torch()
        import flashinfer

        self.name = "flashinfer"
        self.dims = (q_heads, kv_heads, head_dim, block_size)
        self.dtype, self.device = dtype, device
        ws = [torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=device) for _ in range(2)]
        self.tensor_cores = q_heads // kv_heads > 4
        self._decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws[0], "NHD", use_tensor_cores=self.tensor_cores)
        self._prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws[1], "NHD")

    def plan(self, meta: StepMeta) -> None:
        hq, hkv, dim, bs = self.dims
        d = meta.num_decodes
        if d:
            indptr, indices, last = _csr(meta.tables[:d], meta.lens[:d], bs, self.device)
            self._decode.plan(indptr, indices, last, hq, hkv, dim, bs, q_data_type=self.dtype, kv_data_type=self.dtype)
        if meta.chunks:
            torch = require_torch()
            indptr, indices, last = _csr(meta.tables[d:], meta.lens[d:], bs, self.device)
            qo = torch.tensor([0, *accumulate([c.new for c in meta.chunks])], dtype=torch.int32,
                              device=self.device)
            self._prefill.plan(qo, indptr, indices, last, hq, hkv, dim, bs, causal=True, q_data_type=self.dtype,
                               kv_data_type=self.dtype)

    def __call__(self, meta: StepMeta, q, k, v, k_cache, v_cache):
        torch = require_torch()
        d = meta.num_decodes
        if not meta.chunks:
            return self._decode.run(q, (k_cache, v_cache))
        if not d:
            return self._prefill.run(q, (k_cache, v_cache))
        out = torch.empty_like(q)
        out[:d] = self._decode.run(q[:d], (k_cache, v_cache))
        out[d:] = self._prefill.run(q[d:], (k_cache, v_cache))
        return out


def flashinfer_version() -> str | None:
    try:
        import flashinfer
    except Exception:  # noqa: BLE001  any import failure means "not there"
        return None
    return str(getattr(flashinfer, "__version__", "unknown"))


def probe_flashinfer(device: str, q_heads: int, kv_heads: int, head_dim: int, block_size: int, dtype) -> str | None:
    """None when FlashInfer runs here and agrees with the harness's attention on a small mixed step;
    else the reason it is skipped (not installed, no CUDA, a failure, a wrong result)."""
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # noqa: BLE001  ImportError, or a broken install failing on import
        return f"import flashinfer failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"
    if device != "cuda":
        return "FlashInfer's kernels need CUDA"
    try:
        err = _compare_on_small_step(q_heads, kv_heads, head_dim, block_size, dtype)
    except Exception as exc:  # noqa: BLE001  any failure means "not usable here", with the reason
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return None if err < 5e-2 else f"wrong result (max abs error {err:.3g} against the harness's attention)"


def _compare_on_small_step(q_heads: int, kv_heads: int, head_dim: int, block_size: int, dtype) -> float:
    torch = require_torch()
    from capsim.harness.kernels.torch_ref import random_block_tables

    step = StepShape("mixed", (block_size + 3, 3 * block_size), ((0, 20), (2 * block_size + 5, 37)))
    lens = step.seq_lengths()
    pool = sum(math.ceil(n / block_size) for n in lens) + 2
    gen = torch.Generator(device="cuda").manual_seed(3)
    kc = torch.randn((pool, block_size, kv_heads, head_dim), generator=gen, device="cuda").to(dtype)
    vc = torch.randn_like(kc)
    tables = random_block_tables(lens, block_size, pool, torch.Generator().manual_seed(3)).to("cuda")
    meta = step_meta(step, tables, "cuda")
    q = torch.randn((step.num_tokens, q_heads, head_dim), generator=gen, device="cuda").to(dtype)
    k = torch.randn((step.num_tokens, kv_heads, head_dim), generator=gen, device="cuda").to(dtype)
    v = torch.randn_like(k)
    write_kv(meta, step, k, v, kc, vc, block_size)
    fi = FlashInferAttention(q_heads, kv_heads, head_dim, block_size, dtype, "cuda")
    fi.plan(meta)
    ref = HarnessAttention("sdpa")(meta, q, k, v, kc, vc)
    return float((fi(meta, q, k, v, kc, vc).float() - ref.float()).abs().max())


def slot_mapping(step: StepShape, tables, block_size: int):
    """Cache slot (block x block_size + offset) of each new token of the step, int64 on the tables' device."""
    torch = require_torch()
    positions = positions_of(step)
    seq = list(range(step.num_decodes))
    for j, (_, new) in enumerate(step.prefill):
        seq += [step.num_decodes + j] * new
    pos = torch.tensor(positions, dtype=torch.long, device=tables.device)
    rows = torch.tensor(seq, dtype=torch.long, device=tables.device)
    return tables[rows, pos // block_size].long() * block_size + pos % block_size


def positions_of(step: StepShape) -> list[int]:
    """Position of each new token of the step (decodes first, then each chunk's tokens)."""
    out = [c - 1 for c in step.decode_contexts]
    for prior, new in step.prefill:
        out.extend(range(prior, prior + new))
    return out


def write_kv(meta: StepMeta, step: StepShape, k, v, k_cache, v_cache, block_size: int) -> None:
    """Write the step's new K/V rows into the paged cache (outside a forward pass: tests, probes)."""
    slots = slot_mapping(step, meta.tables, block_size)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)


def make_attention(backend: str, *, q_heads: int, kv_heads: int, head_dim: int, block_size: int, dtype, device: str):
    """The attention backend by name; a clear error for an unknown one or one that cannot run here."""
    if backend not in ATTENTION_BACKENDS:
        raise CapsimError(f"--attention {backend!r}: allowed: {', '.join(ATTENTION_BACKENDS)}.")
    if backend == "flashinfer":
        reason = probe_flashinfer(device, q_heads, kv_heads, head_dim, block_size, dtype)
        if reason:
            raise CapsimError(f"--attention flashinfer: not usable here: {reason}.")
        return FlashInferAttention(q_heads, kv_heads, head_dim, block_size, dtype, device)
    return HarnessAttention(backend)
