"""The note's batch table as a dense curve (every batch size, not six), for the batch figure.

Same arithmetic and assumptions as `capsim.reference.tables.batch_table` (document mode: weights-only
traffic, eta_bw = 1, eta_fl = 0.5, no overheads; the note's own figures unless a GPU, model or
weights are given), and, given a context, each sequence's KV reads and attention FLOPs at that
context. The crossover is the tables' own: the batch at which each sequence's work (its FLOPs or
its KV reads, whichever takes longer) adds up to the shared weight read.
"""

from __future__ import annotations

import math

import pandas as pd

from capsim.errors import CapsimError
from capsim.reference.tables import TableSetup
from capsim.spec.formats import get_format
from capsim.reference.tables import NOTE_WEIGHTS, _cost_model, _crossover, _per_sequence_context_costs


def batch_curves(setup: TableSetup = TableSetup(), context_tokens: int | None = None,
                 max_batch: int | None = None) -> pd.DataFrame:
    """One row per (traffic, batch): pass time (ms, with its compute and memory parts), total
    tokens/s, the bound and the crossover batch, for weights-only traffic and, given a context,
    with each sequence's KV traffic at that context. Batches run 1..max_batch (default: 64, or
    twice the larger crossover)."""
    # The tables' own cost set-up, reused so the curve passes through the table's rows exactly
    # (tests/reference/test_curves.py checks it); a public per-batch entry point in tables would
    # replace this.

    if context_tokens is not None and context_tokens <= 0:
        raise CapsimError(f"--context: must be a positive number of tokens (got {context_tokens}).")
    cm, _ = _cost_model(TableSetup(setup.gpu, setup.model, setup.weights))
    cases = [("weights only", None)]
    if context_tokens:
        cases.append((f"weights + KV at {context_tokens:,} tokens of context", context_tokens))
    costs = {traffic: _per_sequence_context_costs(cm, ctx or 0) for traffic, ctx in cases}
    crossings = {traffic: _crossover(cm, kv_s, attn_s) for traffic, (kv_s, attn_s) in costs.items()}
    top = max_batch or max(64, math.ceil(2 * max(crossings.values())))
    gpu = cm.hardware.name if setup.gpu else f"{cm.hardware.name} (the note's figures)"
    weights = get_format(setup.weights or NOTE_WEIGHTS, where="--weights").name
    rows = []
    for traffic, ctx in cases:
        kv_s, attn_s = costs[traffic]
        for b in range(1, top + 1):
            compute_s, weights_s, _, _ = cm.gemm_part(b, b, b)
            compute_s += b * attn_s
            memory_s = weights_s + b * kv_s
            pass_s = max(compute_s, memory_s)
            rows.append({
                "traffic": traffic, "context_tokens": ctx, "batch": b, "pass_time_ms": pass_s * 1e3,
                "compute_ms": compute_s * 1e3, "memory_ms": memory_s * 1e3, "total_tokens_per_s": b / pass_s,
                "bound": "compute" if compute_s > memory_s else "memory", "crossover_batch": crossings[traffic],
                "model": cm.model.name, "gpu": gpu, "weights": weights, "kv_cache": "fp16",
                "mode": "document",
            })
    return pd.DataFrame(rows)
