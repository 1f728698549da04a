"""How a GPU's memory is split between weights, activations, runtime and the KV cache, the way
the serving engine sizes its cache (DESIGN §3), so that `num_gpu_blocks` can be compared with the
server's own log line (vLLM: `# GPU blocks: N`, V1: `GPU KV cache size: N tokens`).

vLLM (and SGLang):  KV = total x gpu_memory_utilization - weights - activation peak - reserve - state
TensorRT-LLM:       KV = (total - weights - activation peak - reserve) x kv_cache_free_gpu_mem_fraction
Per GPU under tensor parallelism: weights and KV heads are split over the ranks; the activation
peak is not (vLLM logs the same peak at TP 1 and 2: the sampler's vocabulary-sized buffers and
the gathered logits dominate). `total` is what the CUDA runtime reports (memory_visible_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim import architecture as arch
from capsim.engines import EngineProfile

GiB = 2**30
# Without an engine profile: a flat runtime reserve (CUDA context, library workspaces).
DEFAULT_RESERVE_BYTES = 0.5 * GiB


@dataclass(frozen=True)
class MemoryBudget:
    """How the GPU's memory is split (per GPU), the way the engine sizes its KV cache."""

    total_bytes: float
    usable_bytes: float  # total x gpu_memory_utilization (vLLM's "the current vLLM instance can use")
    weight_bytes: float
    activation_bytes: float  # peak activations of a max-size step
    reserve_bytes: float  # CUDA context, graphs, allocator slack, NCCL buffers
    state_bytes: float  # recurrent state of hybrid models, for max_num_seqs sequences
    kv_bytes: float
    bytes_per_block: float
    num_blocks: int
    block_size: int
    overridden: bool  # num_blocks came from the workload / command line
    tp: int = 1
    rule: str = "total_fraction"

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def log_line(self) -> str:
        """The line to compare with the server's log (vLLM V0: '# GPU blocks: N')."""
        how = "given" if self.overridden else "computed"
        return (f"# GPU blocks: {self.num_blocks} ({how}; {self.kv_tokens:,} tokens of {self.block_size}, "
                f"{self.kv_bytes / GiB:.2f} GiB of KV cache per GPU)")


def activation_peak_bytes(model, num_tokens: int, num_seqs: int, sampler_buffers: int = 3) -> float:
    """Peak activation memory of a forward pass over num_tokens tokens (16-bit activations):
    a few hidden-size buffers per token (residual, normalised input, attention output, MLP
    output) plus the MLP intermediates (gate+up output and the activated product), and fp32
    vocabulary-sized sampler buffers (logits, probabilities, log-probabilities) per sequence.
    Llama-3-8B at 8,192 tokens and 256 sequences gives 1.27 GiB; vLLM logs 1.26 GiB (PR #10511)."""
    width = model.intermediate_size
    if model.moe:
        width = max(model.moe.expert_intermediate_size * model.moe.experts_per_token,
                    model.intermediate_size if model.moe.dense_layers else 0)
    per_token = 2 * (3 * width + 4 * model.hidden_size)
    return float(num_tokens * per_token + num_seqs * model.vocab_size * 4 * sampler_buffers)


def _reserve(engine: EngineProfile | None, tp: int, realistic: bool) -> float:
    if not realistic:
        return 0.0
    if engine is None:
        return DEFAULT_RESERVE_BYTES
    return engine.memory.reserve_bytes + (tp - 1) * engine.memory.reserve_bytes_per_extra_gpu


def memory_budget(model, hardware, weights_fmt, kv_fmt, *, block_size: int, gpu_memory_utilization: float,
                  max_num_batched_tokens: int, max_num_seqs: int, realistic: bool = True,
                  num_gpu_blocks: int | None = None, engine: EngineProfile | None = None,
                  tp: int = 1) -> MemoryBudget:
    """The KV capacity per GPU, in blocks of block_size tokens (see the module docstring)."""
    weight_bytes = arch.param_counts(model).total * weights_fmt.bytes_per_value / tp
    total = float(hardware.memory_visible_bytes or hardware.memory_bytes)
    profiles_activation = engine is None or engine.memory.activation_peak
    activation = 0.0
    if realistic and profiles_activation:
        buffers = engine.memory.sampler_buffers if engine is not None else 3
        activation = activation_peak_bytes(model, max_num_batched_tokens, max_num_seqs, buffers)
    reserve = _reserve(engine, tp, realistic)
    state = arch.state_bytes_per_sequence(model) * max_num_seqs / tp
    rule = engine.kv_memory if engine is not None else "total_fraction"
    if rule == "free_fraction":
        usable = total - weight_bytes - activation - reserve
        kv = usable * gpu_memory_utilization - state
    else:
        usable = total * gpu_memory_utilization
        kv = usable - weight_bytes - activation - reserve - state
    per_block = block_size * kv_bytes_per_token_per_gpu(model, kv_fmt.bytes_per_value, tp)
    blocks = int(kv // per_block) if kv > 0 else 0
    if num_gpu_blocks is not None:
        blocks, kv = num_gpu_blocks, num_gpu_blocks * per_block
    return MemoryBudget(total, usable, weight_bytes, activation, reserve, state, kv, per_block, blocks,
                        block_size, num_gpu_blocks is not None, tp, rule)


def kv_bytes_per_token_per_gpu(model, bytes_per_value: float, tp: int = 1) -> float:
    """KV bytes one token adds on one GPU: KV heads split over the TP ranks (a rank keeps at
    least one head; MLA's single latent is replicated on every rank)."""
    full = arch.kv_bytes_per_token(model, bytes_per_value)
    if model.mla:
        return full
    return full * max(1.0, model.num_kv_heads / tp) / model.num_kv_heads
