"""The source documents' tables (DESIGN §6), regenerated from the cost model and the allocators.

With no options every table reproduces its document exactly, under the document's own stated
assumptions; `--gpu/--model/--weights/--kv-cache/--context` redo the same arithmetic for another
set-up, and each table lists the assumptions that produced it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from capsim.spec import architecture as arch
from capsim.spec.catalog import load_hardware, load_model
from capsim.cost.roofline import CostModel, DocumentAssumptions
from capsim.errors import CapsimError
from capsim.spec.formats import get_format
from capsim.sim.kv_cache import PagedAllocator
from capsim.sim.kv_contiguous import ContiguousAllocator
from capsim.core.request import Request
from capsim.spec.config import validate
from capsim.api import simulate
from capsim.workload.schema import WorkloadConfig
from capsim.results.text_tables import csv_table, markdown_table

GiB = 2**30

# The practitioner's note (seeds/000): "54 GFLOP per token, 50% of ~165 TFLOPS, 1,008 GB/s,
# weights-only traffic", 17 GB of weights, "roughly 7 GiB left for cache".
NOTE_WEIGHT_BYTES = 17e9
NOTE_FLOPS_PER_TOKEN = 54e9
NOTE_PEAK_FLOPS = 165e12
NOTE_BANDWIDTH = 1008e9
NOTE_FREE_KV_BYTES = 7 * GiB
NOTE_BATCHES = (1, 8, 16, 26, 32, 64)
NOTE_GPU, NOTE_MODEL, NOTE_WEIGHTS = "rtx4090", "qwen3.5-27b", "q4_k_m"


@dataclass
class DocTable:
    key: str
    title: str
    columns: list[str]
    rows: list[list]
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dicts(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]


@dataclass(frozen=True)
class TableSetup:
    """What the user asked for; None means 'the document's own figure'."""

    gpu: str | None = None
    model: str | None = None
    weights: str | None = None
    kv_cache: list[str] | None = None
    context_tokens: int | None = None
    free_kv_bytes: float | None = None


def _cost_model(setup: TableSetup) -> tuple[CostModel, list[str]]:
    hw = load_hardware(setup.gpu or NOTE_GPU)
    model = load_model(setup.model or NOTE_MODEL)
    weights = get_format(setup.weights or NOTE_WEIGHTS, where="--weights")
    derive_model = setup.model is not None or setup.weights is not None
    doc = DocumentAssumptions(
        weight_bytes=None if derive_model else NOTE_WEIGHT_BYTES,
        flops_per_token=None if derive_model else NOTE_FLOPS_PER_TOKEN,
        peak_flops=None if setup.gpu else NOTE_PEAK_FLOPS,
        bandwidth_bytes_per_s=None if setup.gpu else NOTE_BANDWIDTH,
    )
    cm = CostModel(model, hw, weights, get_format("fp16"), mode="document", document=doc)
    src = "catalogue" if derive_model else "the note"
    gpu_src = f"{hw.name} profile" if setup.gpu else "the note"
    notes = [
        f"model {model.name}, weights {weights.name}: {cm.total_weight_bytes / 1e9:.1f} GB read per pass ({src})",
        f"{cm.doc_flops_per_token / 1e9:.1f} GFLOP per token ({src}: 2 x parameters)",
        f"peak {cm.peak / 1e12:.1f} TFLOPS x {cm.eta_fl:.0%} usable, {cm.bandwidth / 1e9:,.0f} GB/s x {cm.eta_bw:.0%} ({gpu_src})",
        "document mode: weights-only traffic, no overheads"
        + ("" if setup.context_tokens is None else f", plus each sequence's KV reads and attention FLOPs at {setup.context_tokens:,} tokens of context"),
    ]
    return cm, notes


def batch_table(setup: TableSetup = TableSetup()) -> DocTable:
    """Batch size vs pass time vs total tokens/s (the note's first table).

    With a context, each sequence also reads its KV cache and spends attention FLOPs on it
    (the note's "the real crossover comes earlier").
    """
    cm, notes = _cost_model(setup)
    ctx = setup.context_tokens or 0
    kv_s, attn_s = _per_sequence_context_costs(cm, ctx)
    crossover = _crossover(cm, kv_s, attn_s)
    batches = sorted(set(NOTE_BATCHES) | ({math.ceil(crossover)} if ctx else set()))
    rows = []
    for b in batches:
        compute_s, weights_s, _, _ = cm.gemm_part(b, b, b)
        compute_s += b * attn_s
        memory_s = weights_s + b * kv_s
        pass_s = max(compute_s, memory_s)
        bound = "compute" if compute_s > memory_s else "memory"
        rows.append([b, round(pass_s * 1e3, 3), round(b / pass_s, 1), round(1 / pass_s, 1), bound])
    table = DocTable(
        "batch",
        "Batch vs pass time vs throughput",
        ["batch", "pass_time_ms", "total_tokens_per_s", "tokens_per_s_per_user", "bound"],
        rows,
        notes,
        [f"crossover at batch {crossover:.1f}: there each sequence's own work (its FLOPs or its KV reads, "
         "whichever takes longer) adds up to the shared weight read; beyond it batching stops being free"],
    )
    if setup == TableSetup():
        table.notes.append(
            "the note prints 21.0 ms at batch 32; the model gives 20.945 ms (the note's rounding, kept as is)"
        )
    return table


def _per_sequence_context_costs(cm: CostModel, ctx: int) -> tuple[float, float]:
    """(KV read seconds, attention FLOP seconds) one sequence at `ctx` tokens adds to a decode pass."""
    if not ctx:
        return 0.0, 0.0
    kv_bytes = arch.kv_bytes_for_context(cm.model, ctx, cm.kv_format.bytes_per_value)
    counts = cm.model.layer_counts
    window = cm.model.sliding_window_tokens or 0
    per_layer = arch.attention_flops_per_context_token(cm.model)
    attn_flops = per_layer * (counts.full * ctx + counts.sliding * min(ctx, window))
    return kv_bytes / (cm.eta_bw * cm.bandwidth), attn_flops / (cm.eta_fl * cm.peak)


def _crossover(cm: CostModel, kv_s: float, attn_s: float) -> float:
    """Batch at which per-sequence work equals the shared weight read (not rounded)."""
    per_seq = max(cm.doc_flops_per_token / (cm.eta_fl * cm.peak) + attn_s, kv_s)
    return (cm.total_weight_bytes / (cm.eta_bw * cm.bandwidth)) / per_seq


def kv_capacity_table(setup: TableSetup = TableSetup()) -> DocTable:
    """Tokens and sequences that fit in the free memory, by KV-cache format (the note's second table)."""
    model = load_model(setup.model or NOTE_MODEL)
    formats = setup.kv_cache or ["fp16", "q8_0", "tbq4"]
    if setup.free_kv_bytes is not None:
        free, how = setup.free_kv_bytes, "given"
    elif setup.gpu or setup.model or setup.weights:
        cm, _ = _cost_model(setup)
        free = cm.hardware.memory_bytes - cm.total_weight_bytes
        how = f"{cm.hardware.name} memory {cm.hardware.memory_bytes / GiB:.0f} GiB - weights {cm.total_weight_bytes / 1e9:.1f} GB"
    else:
        free, how = NOTE_FREE_KV_BYTES, "the note's 'roughly 7 GiB left for cache'"
    if free <= 0:
        raise CapsimError(f"the weights do not fit: no memory is left for the KV cache ({how}).")
    state = arch.state_bytes_per_sequence(model)
    rows = []
    for name in formats:
        fmt = get_format(name, for_kv=True, where="--kv-cache")
        per_token = arch.kv_bytes_per_token(model, fmt.bytes_per_value)
        tokens = int(free // per_token)
        row = [fmt.name, round(per_token, 1), tokens]
        for ctx in (8192, 32768):
            row.append(int(free // arch.kv_bytes_for_context(model, ctx, fmt.bytes_per_value)))
        rows.append(row)
    notes = []
    if state:
        notes.append(
            f"{model.name} also keeps {state / 2**20:.1f} MiB of recurrent state per sequence in its linear-attention "
            "layers; the note leaves it out, the simulator counts it"
        )
    return DocTable(
        "kv_capacity",
        "KV-cache capacity by cache format",
        ["format", "kv_bytes_per_token", "tokens_that_fit", "sequences_at_8k", "sequences_at_32k"],
        rows,
        [f"model {model.name}", f"free memory for the cache: {free / GiB:.2f} GiB ({how})"],
        notes,
    )


def kv_per_token_table(setup: TableSetup = TableSetup()) -> DocTable:
    """KV bytes per token and per request (the explainer's OPT-13B example)."""
    model = load_model(setup.model or "opt-13b")
    fmt = get_format((setup.kv_cache or ["fp16"])[0], for_kv=True, where="--kv-cache")
    per_token = arch.kv_bytes_per_token(model, fmt.bytes_per_value)
    ctx = setup.context_tokens or 2048
    per_request = arch.kv_bytes_for_context(model, ctx, fmt.bytes_per_value)
    full, sliding = arch.kv_values_per_token(model)
    formula = (f"2 x {model.hidden_size:,} hidden x {model.num_layers} layers x {fmt.bytes_per_value:g} bytes"
               if not model.mla and not sliding and model.num_kv_heads * model.head_dim == model.hidden_size
               and model.layer_counts.full == model.num_layers else f"{full + sliding:,} values x {fmt.bytes_per_value:g} bytes")
    return DocTable(
        "kv_per_token",
        "KV bytes per token and per request",
        ["model", "kv_format", "kv_bytes_per_token", "kib_per_token", "context_tokens", "request_bytes", "request_gib", "request_gb"],
        [[model.name, fmt.name, round(per_token, 1), round(per_token / 1024, 1), ctx, round(per_request),
          round(per_request / GiB, 2), round(per_request / 1e9, 2)]],
        [f"KV bytes per token = {formula}"],
        ["the explainer's '800 KB' and 'about 1.6 GB' are binary units (KiB, GiB)"] if setup == TableSetup() else [],
    )


def paged_waste_table(block_size: int = 16, request_tokens: int = 100, reserved_tokens: int = 2048) -> DocTable:
    """One request's memory under paging vs a contiguous max-length reservation, by the allocators."""

    req = Request(0, 0.0, request_tokens, 1)
    paged = PagedAllocator(num_blocks=blocks_needed(reserved_tokens, block_size), block_size=block_size)
    paged.allocate(req, request_tokens)
    contiguous = ContiguousAllocator(capacity_tokens=reserved_tokens, max_model_len=reserved_tokens)
    contiguous.allocate(req, request_tokens)
    rows = [
        ["paged", paged.used_units, paged.held_tokens, paged.held_tokens - request_tokens],
        ["contiguous", None, contiguous.held_tokens, contiguous.held_tokens - request_tokens],
    ]
    return DocTable(
        "paged_waste",
        f"Memory for one {request_tokens}-token request",
        ["allocator", "blocks", "token_slots", "empty_slots"],
        rows,
        [f"paged: blocks of {block_size} tokens; contiguous: {reserved_tokens:,} slots reserved up front"],
        ["paged waste is always less than one block per request"],
    )


def blocks_needed(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


SEED_UTILISATION = {
    "name": "seed-utilisation",
    "description": "The explainer's 8 requests on 4 slots, unit step time (seeds/002).",
    "model": "opt-13b", "gpu": "a100-40g", "mode": "unit", "unit_step_s": 1.0,
    "scheduler": {"kind": "continuous", "max_num_seqs": 4},
    "arrivals": {"kind": "all_at_once"},
    "prompt_tokens": {"dist": "fixed", "value": 16},
    "output_tokens": {"dist": "sequence", "values": [9, 3, 4, 2, 8, 3, 5, 6]},
    "requests": 8,
}


def utilisation_table() -> DocTable:
    """The explainer's slot-step example run through the real schedulers (static vs continuous)."""

    workload = validate(WorkloadConfig, SEED_UTILISATION, "seed-utilisation")
    rows = []
    for kind in ("static", "continuous"):
        s = simulate(workload, scheduler=kind).summary
        busy = round(s["slot_utilisation"] * s["num_steps"] * 4)
        rows.append([kind, s["num_steps"], busy, 4 * s["num_steps"], round(100 * s["slot_utilisation"], 1)])
    return DocTable(
        "utilisation",
        "Slot-step utilisation: 8 requests on 4 slots",
        ["scheduler", "steps", "busy_slot_steps", "slot_steps", "utilisation_pct"],
        rows,
        ["decode lengths 9, 3, 4, 2, 8, 3, 5, 6, all arriving at step 0, first come first served",
         "each step takes one time unit; a request holds its slot for its decode length",
         "utilisation = busy slot-steps / (slots x steps)"],
    )


def all_tables(setup: TableSetup = TableSetup()) -> list[DocTable]:
    """Every table of DESIGN §6 for this set-up (the utilisation example does not depend on it)."""
    tables = [batch_table(setup), kv_capacity_table(setup), kv_per_token_table(setup), paged_waste_table()]
    tables.append(utilisation_table())
    return tables


def render(tables: list[DocTable], fmt: str) -> str:
    """markdown, csv or json text of the tables (the Rich form is drawn by the CLI)."""
    if fmt == "json":
        return json.dumps([{"key": t.key, "title": t.title, "assumptions": t.assumptions, "notes": t.notes,
                            "rows": t.as_dicts()} for t in tables], indent=2) + "\n"
    parts = []
    for t in tables:
        if fmt == "csv":
            parts.append(f"# {t.title}\n" + csv_table(t.columns, t.rows))
        else:
            lines = [f"### {t.title}", "", markdown_table(t.columns, t.rows), ""]
            lines += [f"- {a}" for a in t.assumptions] + [f"- note: {n}" for n in t.notes]
            parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
