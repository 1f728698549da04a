"""The catalogue commands: `capsim gpus`, `models` and `engines` list what a workload can name,
and `capsim schema` prints the workload files' JSON Schema."""

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import FormatOpt, TableFormat, out
from capsim.report.console import rich_table


def gpus(fmt: FormatOpt = TableFormat.table) -> None:
    """List the GPU catalogue: memory, bandwidth, dense peaks, price."""
    from capsim.report.listings import gpu_listing

    _listing(gpu_listing(), fmt)


def models(
    fmt: FormatOpt = TableFormat.table,
    from_config: Annotated[Optional[list[Path]], typer.Option(
        "--from", help="instead: the model a local Hugging Face config.json describes (repeatable), as `capsim run "
        "--model FILE` reads it")] = None,
) -> None:
    """List the model catalogue with derived sizes (parameters, KV bytes per token, state); with
    --from config.json, the model read from that file instead (--format json: every field)."""
    from capsim.report.listings import model_listing

    if not from_config:
        return _listing(model_listing(), fmt)
    from capsim.spec.hf_config import model_from_hf_config

    specs = {str(path): model_from_hf_config(path) for path in from_config}
    _listing(model_listing({s.name: s for s in specs.values()}, "Models read from Hugging Face configs"), fmt)
    if fmt is TableFormat.table:
        for path, spec in specs.items():
            out.print(f"{path}: {_features(spec)}", highlight=False, soft_wrap=True)


def _features(spec) -> str:
    """What the config's architecture came to, in words (the table holds the sizes)."""
    counts = spec.layer_counts
    parts = [f"{spec.num_layers} layers ({counts.full} full attention"
             + (f", {counts.sliding} sliding over {spec.sliding_window_tokens:,} tokens" if counts.sliding else "") + ")",
             f"{spec.num_heads} heads / {spec.num_kv_heads} KV heads of {spec.head_dim}"]
    if spec.mla:
        parts.append(f"MLA (KV latent {spec.mla.kv_lora_rank} + rope {spec.mla.qk_rope_head_dim})")
    if spec.moe:
        m = spec.moe
        parts.append(f"MoE {m.experts_per_token} of {m.num_experts} experts of {m.expert_intermediate_size}"
                     + (f", {m.num_shared_experts} shared" if m.num_shared_experts else "")
                     + (f", {m.dense_layers} dense layers first" if m.dense_layers else ""))
    else:
        parts.append(f"dense MLP {spec.intermediate_size}")
    parts.append(f"vocab {spec.vocab_size:,} ({'tied' if spec.tie_embeddings else 'untied'} embeddings), "
                 f"context {spec.max_context_tokens:,}")
    return "; ".join(parts)


def engines(fmt: FormatOpt = TableFormat.table) -> None:
    """List the serving-engine profiles: scheduling defaults, host overheads, kernel counts."""
    from capsim.report.listings import engine_listing

    _listing(engine_listing(), fmt)


def schema() -> None:
    """Print the JSON Schema of workload files (for editor completion and validation)."""
    from capsim.workload.schema import WorkloadConfig

    sys.stdout.write(json.dumps(WorkloadConfig.model_json_schema(), indent=2) + "\n")


def _listing(listing: tuple, fmt: TableFormat) -> None:
    title, columns, rows, data = listing
    if fmt is TableFormat.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        _print_rows(title, columns, rows, fmt)


def _print_rows(title: str, columns: list[str], rows: list[list], fmt: TableFormat) -> None:
    from capsim.results.text_tables import csv_table, markdown_table

    if fmt is TableFormat.markdown:
        sys.stdout.write(markdown_table(columns, rows) + "\n")
    elif fmt is TableFormat.csv:
        sys.stdout.write(csv_table(columns, rows))
    else:
        out.print(rich_table(title, columns, rows))
