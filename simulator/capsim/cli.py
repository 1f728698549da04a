"""The `capsim` command: thin Typer wrappers over the public API (parse, call, print)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from capsim.errors import CapsimError

app = typer.Typer(
    name="capsim",
    help="Capacity simulator for LLM serving: how many users can this GPU serve with this model, "
    "at what latency, and what does each token cost?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


class TableFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


def _rich_table(title: str, columns: list[str], rows: list[list], caption: str | None = None) -> Table:
    t = Table(title=title, caption=caption, caption_justify="left")
    for c in columns:
        t.add_column(c, justify="left" if c in ("model", "name", "format", "allocator", "scheduler", "bound", "gpu") else "right")
    for row in rows:
        t.add_row(*["" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in row])
    return t


@app.command()
def run(
    workload: Annotated[Path, typer.Argument(help="workload YAML (see workloads/)")],
    gpu: Annotated[Optional[str], typer.Option(help="GPU name or profile YAML (overrides the workload's)")] = None,
    model: Annotated[Optional[str], typer.Option(help="model name (see `capsim models`)")] = None,
    weights: Annotated[Optional[str], typer.Option(help="weight format, e.g. bf16, fp8, q4_k_m")] = None,
    kv_cache: Annotated[Optional[str], typer.Option("--kv-cache", help="KV-cache format, e.g. fp16, fp8, q8_0, tbq4")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="static | continuous | chunked")] = None,
    allocator: Annotated[Optional[str], typer.Option(help="paged | contiguous")] = None,
    rate: Annotated[Optional[float], typer.Option(help="arrival rate, requests/s (poisson, gamma, constant)")] = None,
    requests: Annotated[Optional[int], typer.Option(help="number of requests")] = None,
    seed: Annotated[Optional[int], typer.Option(help="random seed")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(help="batch cap (sequences per step)")] = None,
    max_num_batched_tokens: Annotated[Optional[int], typer.Option(help="token budget per step")] = None,
    num_gpu_blocks: Annotated[Optional[int], typer.Option(help="override the computed KV capacity, in blocks")] = None,
    mode: Annotated[Optional[str], typer.Option(help="realistic | document | unit")] = None,
    horizon: Annotated[Optional[float], typer.Option(help="stop the clock at this many seconds")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="write summary.json, requests.csv, steps.csv here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the result block")] = False,
    step_by_step: Annotated[bool, typer.Option(help="no macro-steps (slower; same results)")] = False,
) -> None:
    """Simulate a workload on a GPU and print vLLM's benchmark result block plus capsim's lines."""
    from capsim.console import result_block
    from capsim.simulate import simulate

    result = simulate(
        workload, macro_steps=not step_by_step, gpu=gpu, model=model, weights=weights, kv_cache=kv_cache,
        scheduler=scheduler, allocator=allocator, rate=rate, requests=requests, seed=seed, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, num_gpu_blocks=num_gpu_blocks, mode=mode, horizon_s=horizon,
    )
    if as_json:
        sys.stdout.write(result.summary_json())
    else:
        st = result.summary["setup"]
        out.print(f"[bold]{st['workload']}[/]: {st['model']} ({st['weights']} weights, {st['kv_cache']} KV) on "
                  f"{st['gpu']}, {st['scheduler']} scheduler, {st['allocator']} KV cache, {st['mode']} cost model",
                  highlight=False)
        print(result_block(result.summary))
    if out_dir is not None:
        paths = result.write(out_dir)
        err.print("wrote " + ", ".join(str(p) for p in paths), highlight=False)


@app.command()
def tables(
    gpu: Annotated[Optional[str], typer.Option(help="redo the tables for this GPU")] = None,
    model: Annotated[Optional[str], typer.Option(help="redo them for this model")] = None,
    weights: Annotated[Optional[str], typer.Option(help="weight format (e.g. q4_k_m, fp8, bf16)")] = None,
    kv_cache: Annotated[Optional[list[str]], typer.Option("--kv-cache", help="KV formats to compare (repeatable)")] = None,
    context: Annotated[Optional[int], typer.Option(help="add each sequence's KV reads at this context to the pass time")] = None,
    free_memory_gib: Annotated[Optional[float], typer.Option(help="memory left for the KV cache, GiB")] = None,
    fmt: Annotated[TableFormat, typer.Option("--format", help="table | markdown | csv | json")] = TableFormat.table,
) -> None:
    """Regenerate the source documents' tables (batch vs throughput, KV capacity, KV bytes per
    token, paged waste, slot utilisation). With no options they reproduce the documents."""
    from capsim.tables import TableSetup, all_tables, render

    if context is not None and context <= 0:
        raise CapsimError(f"--context: must be a positive number of tokens (got {context}).")
    if free_memory_gib is not None and free_memory_gib <= 0:
        raise CapsimError(f"--free-memory-gib: must be positive (got {free_memory_gib}).")
    setup = TableSetup(gpu, model, weights, kv_cache, context, None if free_memory_gib is None else free_memory_gib * 2**30)
    result = all_tables(setup)
    if fmt is not TableFormat.table:
        sys.stdout.write(render(result, fmt.value))
        return
    for t in result:
        caption = "\n".join([f"• {a}" for a in t.assumptions] + [f"• note: {n}" for n in t.notes])
        out.print(_rich_table(t.title, t.columns, t.rows, caption))
        out.print()


@app.command()
def gpus(fmt: Annotated[TableFormat, typer.Option("--format", help="table | markdown | csv | json")] = TableFormat.table) -> None:
    """List the GPU catalogue: memory, bandwidth, dense peaks, price."""
    from capsim.catalog import hardware_catalog

    cat = hardware_catalog()
    if fmt is TableFormat.json:
        sys.stdout.write(json.dumps({k: v.model_dump() for k, v in cat.items()}, indent=2) + "\n")
        return
    columns = ["name", "aliases", "memory_gib", "bandwidth_gb_s", "fp16_tflops", "fp8_tflops", "price_usd_per_h"]
    rows = [[p.name, ", ".join(p.aliases), round(p.memory_bytes / 2**30, 1), round(p.memory_bandwidth_bytes_per_s / 1e9),
             round(p.peak_flops["fp16"] / 1e12, 1), round(p.peak_flops["fp8"] / 1e12, 1) if "fp8" in p.peak_flops else None,
             p.price_per_hour_usd] for p in cat.values()]
    _print_rows("GPUs (dense tensor peaks; GeForce at FP32 accumulate)", columns, rows, fmt)


@app.command()
def models(fmt: Annotated[TableFormat, typer.Option("--format", help="table | markdown | csv | json")] = TableFormat.table) -> None:
    """List the model catalogue with derived sizes (parameters, KV bytes per token, state)."""
    from capsim import architecture as arch
    from capsim.catalog import model_catalog

    cat = model_catalog()
    if fmt is TableFormat.json:
        data = {}
        for name, spec in cat.items():
            p = arch.param_counts(spec)
            data[name] = spec.model_dump() | {"derived": {
                "total_params": p.total, "active_params": p.active,
                "flops_per_token": 2 * p.active, "kv_bytes_per_token_fp16": arch.kv_bytes_per_token(spec, 2),
                "state_bytes_per_sequence": arch.state_bytes_per_sequence(spec)}}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    columns = ["name", "params_b", "active_b", "layers", "kv_heads", "head_dim", "kv_kib_per_token_fp16", "state_mib_per_seq", "context"]
    rows = []
    for spec in cat.values():
        p = arch.param_counts(spec)
        rows.append([spec.name, round(p.total / 1e9, 2), round(p.active / 1e9, 2), spec.num_layers, spec.num_kv_heads,
                     spec.head_dim, round(arch.kv_bytes_per_token(spec, 2) / 1024, 1),
                     round(arch.state_bytes_per_sequence(spec) / 2**20, 1), spec.max_context_tokens])
    _print_rows("Models (from their published configs)", columns, rows, fmt)


def _print_rows(title: str, columns: list[str], rows: list[list], fmt: TableFormat) -> None:
    from capsim.console import csv_table, markdown_table

    if fmt is TableFormat.markdown:
        sys.stdout.write(markdown_table(columns, rows) + "\n")
    elif fmt is TableFormat.csv:
        sys.stdout.write(csv_table(columns, rows))
    else:
        out.print(_rich_table(title, columns, rows))


@app.command()
def schema() -> None:
    """Print the JSON Schema of workload files (for editor completion and validation)."""
    from capsim.workload_schema import WorkloadConfig

    sys.stdout.write(json.dumps(WorkloadConfig.model_json_schema(), indent=2) + "\n")


def main() -> None:
    """Entry point: user errors print one paragraph and exit 2, never a traceback."""
    try:
        app(standalone_mode=False)
    except CapsimError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    except typer.Abort:
        err.print("aborted")
        raise SystemExit(130) from None
    except (typer.BadParameter, typer.Exit) as exc:
        raise exc
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        raise
