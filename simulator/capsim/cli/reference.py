"""The reference commands: `capsim tables` (the source documents' tables, redone for any set-up)
and `capsim validate` (the published measurements through the simulator)."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import FormatOpt, TableFormat, _outputs, _progress, _wrote, finite_float, out
from capsim.errors import CapsimError
from capsim.report.console import rich_table


def tables(
    gpu: Annotated[Optional[str], typer.Option(help="redo the tables for this GPU")] = None,
    model: Annotated[Optional[str], typer.Option(help="redo them for this model")] = None,
    weights: Annotated[Optional[str], typer.Option(help="weight format (e.g. q4_k_m, fp8, bf16)")] = None,
    kv_cache: Annotated[Optional[list[str]], typer.Option("--kv-cache", help="KV formats to compare (repeatable)")] = None,
    context: Annotated[Optional[int], typer.Option(help="add each sequence's KV reads at this context to the pass time")] = None,
    free_memory_gib: Annotated[Optional[float], typer.Option(help="memory left for the KV cache, GiB",
                                                             parser=finite_float)] = None,
    fmt: Annotated[TableFormat, typer.Option("--format", help="table | markdown | csv | json")] = TableFormat.table,
    plots: Annotated[Optional[Path], typer.Option(help="also draw the batch table as curves (PNG + SVG) here, "
                                                       "with KV traffic at --context (default 8,192 tokens)")] = None,
) -> None:
    """Regenerate the source documents' tables (batch vs throughput, KV capacity, KV bytes per
    token, paged waste, slot utilisation). With no options they reproduce the documents."""
    from capsim.reference.tables import TableSetup, all_tables, render

    from capsim.spec.limits import MAX_MEMORY_BYTES, MAX_TOKENS

    if context is not None and not 0 < context <= MAX_TOKENS:
        raise CapsimError(f"--context: must be a number of tokens from 1 to {MAX_TOKENS:,} (got {context}).")
    if free_memory_gib is not None and not 0 < free_memory_gib <= MAX_MEMORY_BYTES / 2**30:
        raise CapsimError(f"--free-memory-gib: must be positive and at most {MAX_MEMORY_BYTES / 2**30:,.0f} "
                          f"(got {free_memory_gib}).")
    outputs = _outputs("plots", None, plots)
    setup = TableSetup(gpu, model, weights, kv_cache, context, None if free_memory_gib is None else free_memory_gib * 2**30)
    result = all_tables(setup)
    if plots is not None:
        from capsim.reference.curves import batch_curves
        from capsim.report.run_figures import save
        from capsim.report.planning_figures import batch_figure

        _wrote(outputs.save(lambda folder: [], lambda folder: save(batch_figure(batch_curves(setup, context or 8192)),
                                                                   folder, "batch_curves")))
    if fmt is not TableFormat.table:
        sys.stdout.write(render(result, fmt.value))
        return
    for t in result:
        caption = "\n".join([f"• {a}" for a in t.assumptions] + [f"• note: {n}" for n in t.notes])
        out.print(rich_table(t.title, t.columns, t.rows, caption))
        out.print()


def validate(
    suite: Annotated[Optional[Path], typer.Option(help="folder of validation YAML files (default: ./validation or the checkout's)")] = None,
    only: Annotated[Optional[list[str]], typer.Option(help="run only points whose id contains this (repeatable)")] = None,
    group: Annotated[Optional[list[str]], typer.Option(help="decode | prefill | ttft | max_throughput | concurrency | slo_capacity | disaggregated "
                                                               "(repeatable)")] = None,
    split: Annotated[Optional[str], typer.Option(help="calibration | test: run only that set's points (default: both, reported apart)")] = None,
    workers: Annotated[Optional[int], typer.Option(help="parallel simulations (default: one per core)")] = None,
    fmt: FormatOpt = TableFormat.table,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="write validation.csv, validation_groups.csv and validation.json here (a new "
                                                    "or empty folder, or an earlier validation's, replaced whole)")] = None,
) -> None:
    """Run the published measurements in validation/*.yaml through the simulator: measured vs
    predicted per point, and MAPE per group (decode, prefill, TTFT, max throughput, concurrency,
    the rate within latency limits, disaggregated) for the test set (held out: its figures are
    the accuracy) and the calibration set apart."""
    from capsim.validation.runner import render, run_suite, write

    outputs = _outputs("validate", out_dir, None)
    with _progress("validation points") as tick:
        outcomes = run_suite(suite, only=only, groups=group, split=split, workers=workers, progress=tick)
    if fmt is TableFormat.table:
        from capsim.validation.runner import GROUP_COLUMNS, POINT_COLUMNS, group_rows, point_rows

        out.print(rich_table("Validation points (error = predicted / measured - 1)", POINT_COLUMNS, point_rows(outcomes)))
        out.print(rich_table("MAPE per split and group (the test set's figures are the accuracy)", GROUP_COLUMNS,
                             group_rows(outcomes)))
    else:
        sys.stdout.write(render(outcomes, fmt.value))
    _wrote(outputs.save(lambda folder: write(outcomes, folder), lambda folder: []))
