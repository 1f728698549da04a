"""A Llama-style decoder's layers in torch with random weights, run one step at a time over a
paged KV cache: RMSNorm, fused QKV projection, rotary embedding, the new K/V written into the
cache, paged attention (capsim.harness.kernels.forward_attention), output projection, residual, RMSNorm,
fused gate/up projection, SiLU x up, down projection, residual; then the final norm and the LM head
on the rows that produce logits. Shapes are the model's own; nothing is downloaded.

Each measured layer has its own weights and its own K/V cache (as in a real model, so no layer
finds another's data in the GPU's L2); all layers share the step's block tables, as vLLM's do.
The embedding lookup (a gather of one row per token) is left out: the step starts from random
hidden states.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capsim.harness.deps import require_torch
from capsim.harness.kernels.forward_attention import positions_of, slot_mapping, step_meta
from capsim.harness.forward_shapes import ModelShape, StepShape
from capsim.harness.kernels.torch_ref import random_block_tables, torch_dtype

ROPE_THETA = 500000.0  # Llama 3's rope_theta (the values do not change any kernel's time)
RMS_EPS = 1e-5


@dataclass
class LayerWeights:
    """One decoder layer's weights in nn.Linear layout ([out, in])."""

    norm_attn: Any  # [hidden]
    qkv: Any  # [(q_heads + 2 kv_heads) x head_dim, hidden]
    o: Any  # [hidden, q_heads x head_dim]
    norm_mlp: Any  # [hidden]
    gate_up: Any  # [2 x intermediate, hidden]
    down: Any  # [hidden, intermediate]


def _rms_norm(x, weight):
    torch = require_torch()
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, RMS_EPS)
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + RMS_EPS).to(x.dtype) * weight


def _rope(x, cos, sin):
    """Rotate-half rotary embedding of x [tokens, heads, head_dim] by per-token cos/sin [tokens, 1, head_dim/2]."""
    torch = require_torch()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class ForwardModel:
    """`layers` decoder layers of `shape`, a final norm and an LM head, with K/V caches of
    `pool_blocks` blocks of `block_size` tokens per layer, on `device` in `dtype`."""

    def __init__(self, shape: ModelShape, layers: int, device: str, dtype: str, block_size: int, pool_blocks: int,
                 max_position: int, seed: int = 0):
        torch = require_torch()
        self.shape, self.layers, self.device, self.block_size = shape, layers, device, block_size
        self.dtype = torch_dtype(dtype)
        self.pool_blocks = pool_blocks
        self._gen = torch.Generator(device=device).manual_seed(seed)
        s = shape
        q_width, kv_width = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        self.weights = [LayerWeights(self._ones(s.hidden_size), self._linear(q_width + 2 * kv_width, s.hidden_size),
                                     self._linear(s.hidden_size, q_width), self._ones(s.hidden_size),
                                     self._linear(2 * s.intermediate_size, s.hidden_size),
                                     self._linear(s.hidden_size, s.intermediate_size)) for _ in range(layers)]
        self.final_norm = self._ones(s.hidden_size)
        self.lm_head = self._linear(s.vocab_size, s.hidden_size)
        cache_shape = (pool_blocks, block_size, s.num_kv_heads, s.head_dim)
        self.caches = [(self._randn(cache_shape), self._randn(cache_shape)) for _ in range(layers)]
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, s.head_dim, 2, device=device, dtype=torch.float32) / s.head_dim)
        angles = torch.arange(max_position, device=device, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos, self.sin = angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def _randn(self, shape):
        torch = require_torch()
        return torch.randn(shape, generator=self._gen, device=self.device, dtype=self.dtype)

    def _linear(self, out_features: int, in_features: int):
        """Random weights scaled by 1/sqrt(fan-in), so activations stay finite through the layers."""
        return self._randn((out_features, in_features)).mul_(1.0 / math.sqrt(in_features))

    def _ones(self, n: int):
        torch = require_torch()
        return torch.ones(n, device=self.device, dtype=self.dtype)

    @staticmethod
    def kv_bytes_per_token(shape: ModelShape, layers: int, itemsize: int) -> int:
        """K and V bytes one token takes in the caches of `layers` layers."""
        return layers * 2 * shape.num_kv_heads * shape.head_dim * itemsize

    def prepare(self, step: StepShape, attention, seed: int = 1) -> Callable[[], Any]:
        """Inputs of `step` (random hidden states, block tables drawn at random from the pool,
        positions, cache slots, logit rows) and the closure that runs the whole forward pass on
        them, returning the logits. The closure allocates nothing on the host side, reads no
        device value back, and can be captured as a CUDA graph."""
        torch = require_torch()
        s, dev = self.shape, self.device
        lens = step.seq_lengths()
        tables = random_block_tables(lens, self.block_size, self.pool_blocks,
                                     torch.Generator().manual_seed(seed)).to(dev)
        meta = step_meta(step, tables, dev)
        attention.plan(meta)
        gen = torch.Generator(device=dev).manual_seed(seed)
        x0 = torch.randn((step.num_tokens, s.hidden_size), generator=gen, device=dev, dtype=self.dtype)
        positions = torch.tensor(positions_of(step), dtype=torch.long, device=dev)
        slots = slot_mapping(step, tables, self.block_size)
        ends = list(range(step.num_decodes)) + [c.start + c.new - 1 for c in meta.chunks]
        logit_rows = torch.tensor(ends, dtype=torch.long, device=dev)

        def run():
            return self.forward(x0, positions, slots, logit_rows, meta, attention)

        return run

    def forward(self, x, positions, slots, logit_rows, meta, attention):
        """The step itself: every layer, then the final norm and LM head on `logit_rows`."""
        import torch.nn.functional as F

        s = self.shape
        tokens = x.shape[0]
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        q_width, kv_width = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        for w, (k_cache, v_cache) in zip(self.weights, self.caches):
            q, k, v = F.linear(_rms_norm(x, w.norm_attn), w.qkv).split([q_width, kv_width, kv_width], dim=-1)
            q = _rope(q.view(tokens, s.num_heads, s.head_dim), cos, sin)
            k = _rope(k.view(tokens, s.num_kv_heads, s.head_dim), cos, sin)
            v = v.view(tokens, s.num_kv_heads, s.head_dim)
            k_cache.view(-1, s.num_kv_heads, s.head_dim).index_copy_(0, slots, k)
            v_cache.view(-1, s.num_kv_heads, s.head_dim).index_copy_(0, slots, v)
            a = attention(meta, q, k, v, k_cache, v_cache)
            x = x + F.linear(a.reshape(tokens, q_width), w.o)
            gate, up = F.linear(_rms_norm(x, w.norm_mlp), w.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w.down)
        return F.linear(_rms_norm(x.index_select(0, logit_rows), self.final_norm), self.lm_head)
