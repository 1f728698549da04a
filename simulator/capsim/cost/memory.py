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

from capsim.spec import architecture as arch
from capsim.spec.serving import EngineProfile

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
    state_bytes: float  # per-sequence memory outside the blocks: recurrent state + sliding window
    kv_bytes: float
    bytes_per_block: float
    num_blocks: int
    block_size: int
    overridden: bool  # num_blocks came from the workload / command line
    tp: int = 1
    rule: str = "total_fraction"
    seq_units: int = 0  # blocks' worth each running sequence holds besides its token blocks

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def __reduce__(self) -> tuple:
        """Pickled by its constructor: compiled, a frozen dataclass cannot be rebuilt field by
        field, and a run's Setup crosses processes (run --seeds, sweeps)."""
        return (MemoryBudget, (self.total_bytes, self.usable_bytes, self.weight_bytes, self.activation_bytes,
                               self.reserve_bytes, self.state_bytes, self.kv_bytes, self.bytes_per_block,
                               self.num_blocks, self.block_size, self.overridden, self.tp, self.rule, self.seq_units))

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
                  tp: int = 1, draft=None) -> MemoryBudget:
    """The KV capacity per GPU, in blocks of block_size tokens (see the module docstring). A
    speculative-decoding draft model adds its weights, and its own cache of every token."""
    weight_bytes = arch.param_counts(model).total * weights_fmt.bytes_per_value / tp
    if draft is not None:
        weight_bytes += arch.param_counts(draft).total * weights_fmt.bytes_per_value / tp
    total = float(hardware.memory_visible_bytes or hardware.memory_bytes)
    profiles_activation = engine is None or engine.memory.activation_peak
    activation = 0.0
    if realistic and profiles_activation:
        buffers = engine.memory.sampler_buffers if engine is not None else 3
        activation = activation_peak_bytes(model, max_num_batched_tokens, max_num_seqs, buffers)
    reserve = _reserve(engine, tp, realistic)
    rule = engine.kv_memory if engine is not None else "total_fraction"
    if rule == "free_fraction":
        usable = total - weight_bytes - activation - reserve
        kv = usable * gpu_memory_utilization
    else:
        usable = total * gpu_memory_utilization
        kv = usable - weight_bytes - activation - reserve
    per_block, per_seq_bytes = block_layout(model, kv_fmt.bytes_per_value, block_size, tp)
    if draft is not None:
        per_block += block_size * kv_bytes_per_token_per_gpu(draft, kv_fmt.bytes_per_value, tp)
    blocks = int(kv // per_block) if kv > 0 else 0
    if num_gpu_blocks is not None:
        blocks, kv = num_gpu_blocks, num_gpu_blocks * per_block
    seq_units = -int(-per_seq_bytes // per_block)
    return MemoryBudget(total, usable, weight_bytes, activation, reserve, per_seq_bytes, kv, per_block, blocks,
                        block_size, num_gpu_blocks is not None, tp, rule, seq_units)


def block_layout(model, bytes_per_value: float, block_size: int, tp: int = 1) -> tuple[float, float]:
    """(bytes per block, bytes each sequence holds besides its blocks), per GPU.

    A block holds block_size tokens of the full-attention layers. Sliding-window layers keep at
    most their window (plus the block being filled) of each sequence, and linear-attention layers
    a fixed recurrent state: both are per-sequence memory, taken when a sequence is admitted and
    returned when it leaves (vLLM V1's hybrid allocator frees out-of-window blocks likewise;
    capsim holds the whole window from the start, erring on the safe side for short contexts).
    A model with only sliding-window layers pages them like full ones (no window saving)."""
    full_v, sliding_v = arch.kv_values_per_token(model)
    share = 1.0 if model.mla else max(1.0, model.num_kv_heads / tp) / model.num_kv_heads
    full_t, sliding_t = full_v * share * bytes_per_value, sliding_v * share * bytes_per_value
    state = arch.state_bytes_per_sequence(model) / tp
    if full_t == 0:
        return block_size * sliding_t, state
    window = model.sliding_window_tokens or 0
    window_bytes = (-(-window // block_size) + 1) * block_size * sliding_t if sliding_t else 0.0
    return block_size * full_t, state + window_bytes


def kv_bytes_per_token_per_gpu(model, bytes_per_value: float, tp: int = 1) -> float:
    """KV bytes one token adds on one GPU: KV heads split over the TP ranks (a rank keeps at
    least one head; MLA's single latent is replicated on every rank)."""
    full = arch.kv_bytes_per_token(model, bytes_per_value)
    if model.mla:
        return full
    return full * max(1.0, model.num_kv_heads / tp) / model.num_kv_heads
