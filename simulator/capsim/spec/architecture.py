"""Derived quantities of a model architecture: parameters, FLOPs, KV and state bytes.

All counts follow the published configs' tensor shapes (biases and norms are left out: they are
well under 0.1% of any catalogued model). A test checks each total against the published size.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.spec.config import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts by where they live; `active` is what one token multiplies through."""

    embedding: int
    lm_head: int  # 0 when tied to the embedding (the same matrix is still read for logits)
    attention: int  # all token-mixer layers: full, sliding, MLA and linear-attention projections
    mlp_dense: int
    mlp_experts: int  # all routed experts
    mlp_experts_active: int  # the experts_per_token experts one token uses
    mlp_shared: int  # shared experts + routers

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.attention + self.mlp_dense + self.mlp_experts + self.mlp_shared

    @property
    def active(self) -> int:
        """Parameters touched per token, embedding lookup excluded, LM head included."""
        head = self.lm_head or self.embedding
        return head + self.attention + self.mlp_dense + self.mlp_experts_active + self.mlp_shared

    @property
    def body_active(self) -> int:
        """Per-token matmul parameters without the LM head (which runs only for logit tokens)."""
        return self.attention + self.mlp_dense + self.mlp_experts_active + self.mlp_shared


def _mlp_params(spec: ModelSpec, width: int) -> int:
    return (3 if spec.mlp == "gated" else 2) * spec.hidden_size * width


def _softmax_attention_params(spec: ModelSpec) -> int:
    h, q, kv = spec.hidden_size, spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    q_out = 2 * q if spec.attention_output_gate else q
    return h * q_out + 2 * h * kv + q * h


def _mla_params(spec: ModelSpec) -> int:
    m, h, n = spec.mla, spec.hidden_size, spec.num_heads
    assert m is not None
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = h * m.q_lora_rank + m.q_lora_rank * n * qk_head if m.q_lora_rank else h * n * qk_head
    kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim)
    kv_up = m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv_down + kv_up + n * m.v_head_dim * h


def _linear_attention_params(spec: ModelSpec) -> int:
    la, h = spec.linear_attention, spec.hidden_size
    assert la is not None
    key, value = la.num_key_heads * la.key_head_dim, la.num_value_heads * la.value_head_dim
    in_proj = h * (2 * key + 2 * value) + h * 2 * la.num_value_heads  # q, k, v, z gate; beta and a
    conv = (2 * key + value) * la.conv_kernel_tokens
    return in_proj + conv + value * h


def param_counts(spec: ModelSpec) -> ParamCounts:
    counts = spec.layer_counts
    softmax_layers = counts.full + counts.sliding
    per_softmax = _mla_params(spec) if spec.mla else _softmax_attention_params(spec)
    attention = softmax_layers * per_softmax
    if counts.linear:
        attention += counts.linear * _linear_attention_params(spec)
    dense_w = _mlp_params(spec, spec.intermediate_size)
    moe = spec.moe
    if moe is None:
        dense, experts, experts_active, shared = spec.num_layers * dense_w, 0, 0, 0
    else:
        moe_layers = spec.num_layers - moe.dense_layers
        expert_w = _mlp_params(spec, moe.expert_intermediate_size)
        shared_w = _mlp_params(spec, moe.shared_intermediate_size or moe.expert_intermediate_size)
        dense = moe.dense_layers * dense_w
        experts = moe_layers * moe.num_experts * expert_w
        experts_active = moe_layers * moe.experts_per_token * expert_w
        shared = moe_layers * (moe.num_shared_experts * shared_w + spec.hidden_size * moe.num_experts)
    embedding = spec.vocab_size * spec.hidden_size
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if spec.tie_embeddings else embedding,
        attention=attention,
        mlp_dense=dense,
        mlp_experts=experts,
        mlp_experts_active=experts_active,
        mlp_shared=shared,
    )


def kv_values_per_token(spec: ModelSpec) -> tuple[int, int]:
    """Cached values per token: (in full-attention layers, in sliding-window layers).

    Softmax layers cache K and V per KV head; MLA caches one latent (kv_lora_rank + rope dims).
    """
    counts = spec.layer_counts
    if spec.mla:
        per_layer = spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim
    else:
        per_layer = 2 * spec.num_kv_heads * spec.head_dim
    return counts.full * per_layer, counts.sliding * per_layer


def kv_bytes_per_token(spec: ModelSpec, bytes_per_value: float) -> float:
    """KV bytes one token adds while the context is within every sliding window."""
    full, sliding = kv_values_per_token(spec)
    return (full + sliding) * bytes_per_value


def kv_bytes_for_context(spec: ModelSpec, context_tokens: int, bytes_per_value: float) -> float:
    """KV bytes of one sequence of `context_tokens`; sliding layers keep at most their window."""
    full, sliding = kv_values_per_token(spec)
    window = spec.sliding_window_tokens or 0
    return (full * context_tokens + sliding * min(context_tokens, window)) * bytes_per_value


def state_bytes_per_sequence(spec: ModelSpec) -> float:
    """Fixed per-sequence state of linear-attention layers: recurrent matrix + conv window."""
    la = spec.linear_attention
    if la is None or not spec.layer_counts.linear:
        return 0.0
    recurrent = la.num_value_heads * la.key_head_dim * la.value_head_dim
    conv_dim = 2 * la.num_key_heads * la.key_head_dim + la.num_value_heads * la.value_head_dim
    conv = conv_dim * (la.conv_kernel_tokens - 1)
    return spec.layer_counts.linear * (recurrent + conv) * la.state_bytes_per_value


def attention_flops_per_context_token(spec: ModelSpec) -> float:
    """FLOPs one new token spends per attended context position, summed over softmax layers.

    QK^T and PV are each 2 * heads * dim per position (DESIGN §3: about 4 x heads x head_dim).
    MLA with absorbed projections attends over the latent: 2*heads*(latent+rope) + 2*heads*latent.
    """
    if spec.mla:
        m = spec.mla
        per_layer = 2 * spec.num_heads * (m.kv_lora_rank + m.qk_rope_head_dim) + 2 * spec.num_heads * m.kv_lora_rank
    else:
        per_layer = 4 * spec.num_heads * spec.head_dim
    return float(per_layer)


def linear_attention_flops_per_token(spec: ModelSpec) -> float:
    """Recurrent-state update and readout per token over the linear layers (a few ops per state value)."""
    la = spec.linear_attention
    if la is None or not spec.layer_counts.linear:
        return 0.0
    return 4.0 * spec.layer_counts.linear * la.num_value_heads * la.key_head_dim * la.value_head_dim
