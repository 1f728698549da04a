"""The grid of whole forward passes: decode, prefill and mixed (chunked-prefill) steps.

Points are ordered as in `capsim.harness.grid` (both ends and the middle of every axis first, the
three kinds interleaved), so a run cut short by its deadline still spans the grid.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.harness.forward_shapes import StepShape
from capsim.harness.grid import interleave, ordered_product


@dataclass(frozen=True)
class ForwardGrid:
    """The axes of one forward run. Every sequence of a step has the same context (one value per axis)."""

    decode_batches: tuple[int, ...]  # decoding sequences in a decode step
    decode_contexts: tuple[int, ...]  # positions each attends
    prefill_batches: tuple[int, ...]  # prompts in a prefill step
    prefill_lengths: tuple[int, ...]  # tokens per prompt
    mixed_decodes: tuple[int, ...]  # decoding sequences beside the prompt chunk
    mixed_contexts: tuple[int, ...]  # their contexts
    chunk_tokens: tuple[int, ...]  # the prompt chunk's new tokens
    chunk_prior_tokens: tuple[int, ...]  # the chunk's prompt tokens already cached (earlier chunks)
    block_size: int = 16
    warmup: int = 3
    reps: int = 10
    max_step_tokens: int = 16384  # larger prefill steps are left out (activation memory)


def forward_grid(device: str, *, quick: bool = False, tiny: bool = False) -> ForwardGrid:
    """Built-in grids: GPU (full or quick), CPU (small) and tiny (a seconds-long CPU smoke test)."""
    if tiny:
        return ForwardGrid((1, 3), (16, 40), (1, 2), (8, 24), (2,), (24,), (8, 16), (0, 16), warmup=1, reps=2)
    if device == "cpu":
        return ForwardGrid((1, 4), (64, 256), (1,), (32, 128), (4,), (128,), (32, 64), (0, 64), warmup=1, reps=3)
    if quick:
        return ForwardGrid((1, 32, 128), (1024, 8192), (1,), (512, 4096), (32,), (2048,), (512, 2048), (0, 4096),
                           reps=5)
    return ForwardGrid(
        decode_batches=(1, 8, 32, 64, 128, 256), decode_contexts=(512, 2048, 8192),
        prefill_batches=(1, 4), prefill_lengths=(128, 512, 2048, 8192),
        mixed_decodes=(16, 64, 128), mixed_contexts=(1024, 4096),
        chunk_tokens=(256, 1024, 2048), chunk_prior_tokens=(0, 4096),
    )


def plan_steps(grid: ForwardGrid, *, kv_bytes_per_token: float, max_kv_bytes: float) -> list[StepShape]:
    """Every step of the grid, most useful first; steps whose KV cache (all measured layers,
    `kv_bytes_per_token` each) would pass `max_kv_bytes`, or with more than `max_step_tokens`
    tokens, are left out."""
    decode = [StepShape("decode", (p["ctx"],) * p["batch"], ())
              for p in ordered_product({"batch": grid.decode_batches, "ctx": grid.decode_contexts})]
    prefill = [StepShape("prefill", (), ((0, p["len"]),) * p["batch"])
               for p in ordered_product({"batch": grid.prefill_batches, "len": grid.prefill_lengths})]
    mixed = [StepShape("mixed", (p["ctx"],) * p["decodes"], ((p["prior"], p["chunk"]),))
             for p in ordered_product({"decodes": grid.mixed_decodes, "ctx": grid.mixed_contexts,
                                       "chunk": grid.chunk_tokens, "prior": grid.chunk_prior_tokens})]
    steps = interleave(decode, prefill, mixed)
    return [s for s in steps if s.kv_tokens() * kv_bytes_per_token <= max_kv_bytes
            and s.num_tokens <= grid.max_step_tokens]

