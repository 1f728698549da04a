"""The `capsim` command: thin Typer wrappers over the public API (parse, call, print).

No `from __future__ import annotations` here: Typer reads every command's parameters at each
start, and string annotations made it eval about 500 of them (40-50 ms of every `capsim run`).
"""

import contextlib
import gc
import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from capsim.report.console import dict_table, rich_table
from capsim.errors import CapsimError, quote

app = typer.Typer(
    name="capsim",
    help="Capacity simulator for LLM serving: how many users can this GPU serve with this model, "
    "at what latency, and what does each token cost?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# No console markup: every message capsim prints is plain text (an install hint's '[dask]', a
# workload named '[x]' print as written); the few styled words are Text objects.
out = Console(markup=False)
err = Console(stderr=True, markup=False)


def finite_float(value) -> float:
    """A float option's parser: refuses nan and inf, which pass Python's float() and then turn
    into meaningless figures or conversion errors deep inside."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise typer.BadParameter(f"{str(value)[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise typer.BadParameter(f"{str(value)[:40]!r}: give a finite number")
    return number


class TableFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


# Options shared by the planning commands.
PlotsOpt = Annotated[Optional[Path], typer.Option(help="write figures (PNG + SVG) into this directory (written whole, "
                                                   "as --out is)")]
WorkersOpt = Annotated[Optional[int], typer.Option(help="parallel simulations on this machine (default: one per core; 1: serial)")]
DaskOpt = Annotated[Optional[str], typer.Option(help="run the simulations on this Dask scheduler (e.g. tcp://10.0.0.5:8786)")]
SloOpt = Annotated[Optional[list[str]], typer.Option(
    "--slo", help="objective, repeatable. Percentile limit: ttft_p99_ms=2000, tpot_p95_ms=50 (ttft|tpot|itl|e2el x "
    "mean|median|pNN such as p50, p90, p95, p99, p99.9); goodput thresholds (vLLM's --goodput): 'ttft:2000 tpot:50'. "
    "Default: the workload's slo: block")]
ShareOpt = Annotated[Optional[float], typer.Option(
    help="goodput thresholds are met when at least this share of requests meets them all (default: the workload's "
    "min_share, else 0.9)", parser=finite_float)]
PercentilesOpt = Annotated[Optional[str], typer.Option(
    help="percentiles to report besides mean and median, as vllm bench serve: e.g. 50,90,95,99,99.9 (default 90,99)")]
PriceOpt = Annotated[Optional[list[str]], typer.Option(
    "--price-per-hour", help="US$ per GPU-hour: one price for all GPUs, or GPU=PRICE (repeatable); default: the profile's")]
FormatOpt = Annotated[TableFormat, typer.Option("--format", help="table | markdown | csv | json")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", help="write the results (CSV + JSON) into this directory: a new "
                                                "or empty one, or an earlier output of the same command (replaced whole)")]


@app.command()
def run(
    workload: Annotated[Path, typer.Argument(help="workload YAML (see workloads/)")],
    gpu: Annotated[Optional[str], typer.Option(help="GPU name or profile YAML (overrides the workload's)")] = None,
    model: Annotated[Optional[str], typer.Option(help="model name (see `capsim models`)")] = None,
    weights: Annotated[Optional[str], typer.Option(help="weight format, e.g. bf16, fp8, q4_k_m")] = None,
    kv_cache: Annotated[Optional[str], typer.Option("--kv-cache", help="KV-cache format, e.g. fp16, fp8, q8_0, tbq4")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="static | continuous | chunked")] = None,
    allocator: Annotated[Optional[str], typer.Option(help="paged | contiguous")] = None,
    rate: Annotated[Optional[float], typer.Option(help="arrival rate, requests/s (poisson, gamma, constant)",
                                                  parser=finite_float)] = None,
    requests: Annotated[Optional[int], typer.Option(help="number of requests (replaces the workload's requests and "
                                                         "duration_s)")] = None,
    seed: Annotated[Optional[int], typer.Option(help="random seed")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(help="batch cap (sequences per step)")] = None,
    max_num_batched_tokens: Annotated[Optional[int], typer.Option(help="token budget per step")] = None,
    num_gpu_blocks: Annotated[Optional[int], typer.Option(help="override the computed KV capacity, in blocks")] = None,
    mode: Annotated[Optional[str], typer.Option(help="realistic | document | unit")] = None,
    horizon: Annotated[Optional[float], typer.Option(help="stop the clock at this many seconds", parser=finite_float)] = None,
    replicas: Annotated[Optional[int], typer.Option(help="copies of the server behind a router")] = None,
    router: Annotated[Optional[str], typer.Option(help="round_robin | least_outstanding | least_kv")] = None,
    prefix_caching: Annotated[Optional[bool], typer.Option("--prefix-caching/--no-prefix-caching",
                                                           help="reuse cached KV of shared prefixes")] = None,
    preemption: Annotated[Optional[str], typer.Option(help="recompute | swap")] = None,
    engine: Annotated[Optional[str], typer.Option(help="serving-engine profile: vllm, sglang, trt-llm, llama.cpp (see `capsim engines`)")] = None,
    tp: Annotated[Optional[int], typer.Option(help="tensor-parallel GPUs per replica")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="also print the cost model's working for a typical step")] = False,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="write summary.json, requests.csv, steps.csv here: a new "
                                                    "or empty folder, or an earlier run's (replaced whole)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the result block")] = False,
    step_by_step: Annotated[bool, typer.Option(help="no macro-steps: one event per step and per arrival (slower; same results)")] = False,
    slo: SloOpt = None, goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    percentiles: PercentilesOpt = None,
    plots: PlotsOpt = None,
    seeds: Annotated[Optional[int], typer.Option(help="repeat with N seeds (seed, seed+1, ...): mean ± 95% interval")] = None,
    workers: WorkersOpt = None,
    dask_scheduler: DaskOpt = None,
) -> None:
    """Simulate a workload on a GPU and print vLLM's benchmark result block (over the steady
    window), capsim's lines, and a verdict: SLOs met or missed, cost, the binding limit, next
    steps. On a terminal, a progress bar of requests finished is drawn on stderr meanwhile."""
    from capsim.report.console import result_block, verdict_block
    from capsim.api import simulate
    from capsim.spec.metric_names import parse_percentiles

    overrides = dict(gpu=gpu, model=model, weights=weights, kv_cache=kv_cache, scheduler=scheduler, allocator=allocator,
                     rate=rate, requests=requests, seed=seed, max_num_seqs=max_num_seqs, mode=mode, horizon_s=horizon,
                     max_num_batched_tokens=max_num_batched_tokens, num_gpu_blocks=num_gpu_blocks,
                     replicas=replicas, router=router, prefix_caching=prefix_caching, preemption=preemption,
                     engine=engine, tp=tp)
    goals, prices, qs = _goals(workload, slo, goodput_share), _prices(price_per_hour), parse_percentiles(percentiles)
    outputs = _outputs("run", out_dir, plots)
    if seeds is not None:
        return _run_seeds(workload, seeds, overrides, workers, dask_scheduler, outputs, as_json, step_by_step,
                          goals, prices, qs)
    with _run_progress(workload) as tick:
        result = simulate(workload, macro_steps=not step_by_step, progress=tick, objectives=goals, percentiles=qs,
                          price=prices, **overrides)
    _notices(result.summary)
    if as_json:
        sys.stdout.write(result.summary_json(provenance=True))
    else:
        st = result.summary["setup"]
        out.print(Text.assemble((str(st["workload"]), "bold"),
                                f": {st['model']} ({st['weights']} weights, {st['kv_cache']} KV) on {st['gpu']}"
                                f"{' x' + str(st['tp']) if st.get('tp', 1) > 1 else ''}, {st['scheduler']} scheduler, "
                                f"{st['allocator']} KV cache, {st['mode']} cost model, engine {st.get('engine') or 'none'}"),
                  highlight=False)
        print(result_block(result.summary))
        print(result.setup.memory.log_line())
        print(verdict_block(result.summary["verdict"]))
    if explain:
        from capsim.report.explain import explain_run

        print(explain_run(result))
    _wrote(outputs.save(result.write, lambda folder: _run_figures(result, folder, goals)))


def _run_figures(result, folder: Path, goals) -> list[Path]:
    from capsim.report.run_figures import plot_run

    return plot_run(result.summary, result.requests, result.steps, folder, goals.lines())


def _notices(summary: dict) -> None:
    """One line on stderr for each thing a run did to the input that the user should know."""
    offset = summary.get("trace_time_offset_s") or 0.0
    if offset:
        err.print(f"note: the trace's first arrival is at {offset:,.3f} s; its times are taken from there "
                  "(trace_time_offset_s in the summary).", highlight=False, soft_wrap=True)


def _run_seeds(workload, seeds, overrides, workers, dask_scheduler, outputs, as_json, step_by_step,
               goals, prices, qs) -> None:
    from capsim.planning.seeds import run_seeds
    from capsim.report.planning_tables import frame_json, rich, seeds_view

    _dask_warning(dask_scheduler)
    with _progress(f"{seeds} seeds") as tick:
        res = run_seeds(workload, seeds, workers=workers, dask_scheduler=dask_scheduler, progress=tick,
                        objectives=goals, price=prices, percentiles=qs, macro_steps=not step_by_step, **overrides)
    _notices(res.first.summary)
    if as_json:
        sys.stdout.write(frame_json(res.table, {"seeds": res.runs["seed"].tolist()}))
    else:
        st = res.first.summary["setup"]
        out.print(rich(f"{st['workload']}: {st['model']} on {st['gpu']}, {seeds} seeds", seeds_view(res.table)))
    _wrote(outputs.save(lambda folder: res.first.write(folder) + res.write(folder),
                        lambda folder: _run_figures(res.first, folder, goals)))


@app.command()
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


@app.command()
def gpus(fmt: FormatOpt = TableFormat.table) -> None:
    """List the GPU catalogue: memory, bandwidth, dense peaks, price."""
    from capsim.report.listings import gpu_listing

    _listing(gpu_listing(), fmt)


@app.command()
def models(fmt: FormatOpt = TableFormat.table) -> None:
    """List the model catalogue with derived sizes (parameters, KV bytes per token, state)."""
    from capsim.report.listings import model_listing

    _listing(model_listing(), fmt)


def _print_rows(title: str, columns: list[str], rows: list[list], fmt: TableFormat) -> None:
    from capsim.results.text_tables import csv_table, markdown_table

    if fmt is TableFormat.markdown:
        sys.stdout.write(markdown_table(columns, rows) + "\n")
    elif fmt is TableFormat.csv:
        sys.stdout.write(csv_table(columns, rows))
    else:
        out.print(rich_table(title, columns, rows))


def _listing(listing: tuple, fmt: TableFormat) -> None:
    title, columns, rows, data = listing
    if fmt is TableFormat.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        _print_rows(title, columns, rows, fmt)


@app.command()
def schema() -> None:
    """Print the JSON Schema of workload files (for editor completion and validation)."""
    from capsim.workload.schema import WorkloadConfig

    sys.stdout.write(json.dumps(WorkloadConfig.model_json_schema(), indent=2) + "\n")


@app.command()
def compare(
    workload: Annotated[Path, typer.Argument(help="workload YAML")],
    gpu: Annotated[Optional[list[str]], typer.Option(help="GPU (repeatable)")] = None,
    kv_cache: Annotated[Optional[list[str]], typer.Option("--kv-cache", help="KV-cache format (repeatable)")] = None,
    weights: Annotated[Optional[list[str]], typer.Option(help="weight format (repeatable)")] = None,
    model: Annotated[Optional[list[str]], typer.Option(help="model (repeatable)")] = None,
    scheduler: Annotated[Optional[list[str]], typer.Option(help="static | continuous | chunked (repeatable)")] = None,
    allocator: Annotated[Optional[list[str]], typer.Option(help="paged | contiguous (repeatable)")] = None,
    rate: Annotated[Optional[float], typer.Option(help="arrival rate, requests/s", parser=finite_float)] = None,
    requests: Annotated[Optional[int], typer.Option(help="number of requests (replaces the workload's requests and "
                                                         "duration_s)")] = None,
    seed: Annotated[Optional[int], typer.Option(help="random seed")] = None,
    slo: SloOpt = None, goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    seeds: Annotated[int, typer.Option(help="repeat each combination with N seeds: mean ± 95% interval")] = 1,
    at_capacity: Annotated[bool, typer.Option("--at-capacity", help="each row at its own capacity under the SLOs "
                                              "(a capacity search each) instead of at the workload's load")] = False,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None,
) -> None:
    """Which set-up serves this traffic best: one row per combination of the repeated options,
    each at the same offered load (or with --at-capacity at its own capacity within the SLOs):
    KV sequences that fit, throughput, TTFT and TPOT p50/p99, KV utilisation, GPUs, $/hour and $
    per 1M output tokens; a saturated row says so."""
    from capsim.planning.sweep import compare as run_compare
    from capsim.report.planning_tables import compare_view, title

    grid = {k: v for k, v in dict(gpu=gpu, model=model, weights=weights, kv_cache=kv_cache, scheduler=scheduler,
                                  allocator=allocator).items() if v}
    goals, prices = _goals(workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("compare", out_dir, plots)
    _dask_warning(dask_scheduler)
    with _progress("compare") as tick:
        if at_capacity:
            from capsim.planning.capacity import compare_at_capacity

            if seeds != 1 or rate is not None:
                raise CapsimError("compare --at-capacity: each row's load is its capacity, found with one seed; "
                                  "leave out --rate and --seeds.")
            res = compare_at_capacity(workload, goals, price=prices, workers=workers, dask_scheduler=dask_scheduler,
                                      progress=tick, requests=requests, seed=seed,
                                      **grid)
        else:
            res = run_compare(workload, seeds=seeds, objectives=goals, price=prices, workers=workers,
                              dask_scheduler=dask_scheduler, progress=tick, rate=rate, requests=requests, seed=seed,
                              **grid)
    _emit(res.frame, title("Compare", res.frame), compare_view(res.frame, res.axes), fmt, {"axes": res.axes})
    _wrote(outputs.save(res.write, _figures(res)))


@app.command()
def sweep(
    workload: Annotated[Path, typer.Argument(help="workload YAML")],
    rate: Annotated[Optional[str], typer.Option(help="request rates START:STOP:STEP (e.g. 0.5:20:0.5), START:STOP:xF, or a,b,c")] = None,
    users: Annotated[Optional[str], typer.Option(help="closed-loop users START:STOP (e.g. 1:64), START:STOP:x2, or a,b,c")] = None,
    think_time: Annotated[Optional[float], typer.Option(help="users' think time between requests, s (with --users)",
                                                        parser=finite_float)] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU")] = None,
    kv_cache: Annotated[Optional[str], typer.Option("--kv-cache", help="KV-cache format")] = None,
    weights: Annotated[Optional[str], typer.Option(help="weight format")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="static | continuous | chunked")] = None,
    requests: Annotated[Optional[int], typer.Option(help="number of requests per point (replaces the workload's "
                                                         "requests and duration_s)")] = None,
    seed: Annotated[Optional[int], typer.Option(help="random seed")] = None,
    slo: SloOpt = None, goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    seeds: Annotated[int, typer.Option(help="repeat each point with N seeds: mean ± 95% interval")] = 1,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None,
) -> None:
    """Latency against load: one simulation per request rate (or number of closed-loop users)."""
    from capsim.planning.sweep import parse_range
    from capsim.planning.sweep import sweep as run_sweep
    from capsim.report.planning_tables import sweep_view, title

    if (rate is None) == (users is None):
        raise CapsimError("sweep: give --rate START:STOP:STEP (e.g. --rate 0.5:20:0.5) or --users START:STOP "
                          "(e.g. --users 1:64), one of the two.")
    rates = None if rate is None else parse_range(rate, "--rate")
    counts = None if users is None else parse_range(users, "--users", integer=True)
    goals, prices = _goals(workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("sweep", out_dir, plots or out_dir)
    _dask_warning(dask_scheduler)
    with _progress("sweep") as tick:
        res = run_sweep(workload, rates=rates, users=counts, think_time_s=think_time, seeds=seeds, objectives=goals,
                        price=prices, workers=workers, dask_scheduler=dask_scheduler, progress=tick, gpu=gpu,
                        kv_cache=kv_cache, weights=weights, scheduler=scheduler, requests=requests, seed=seed)
    _emit(res.frame, title("Sweep", res.frame), sweep_view(res.frame, res.over), fmt,
          {"over": res.over, "objectives": goals.as_dict()})
    _wrote(outputs.save(res.write, _figures(res)))


@app.command()
def capacity(
    workload: Annotated[Path, typer.Argument(help="workload YAML")],
    slo: SloOpt = None,
    gpu: Annotated[Optional[list[str]], typer.Option(help="GPU (repeatable: one search each)")] = None,
    kv_cache: Annotated[Optional[list[str]], typer.Option("--kv-cache", help="KV-cache format (repeatable)")] = None,
    weights: Annotated[Optional[list[str]], typer.Option(help="weight format (repeatable)")] = None,
    users: Annotated[bool, typer.Option("--users", help="search closed-loop users instead of the request rate")] = False,
    think_time: Annotated[Optional[float], typer.Option(help="users' think time, s (with --users)", parser=finite_float)] = None,
    start: Annotated[Optional[float], typer.Option(help="first load tried (default: the workload's rate or users)",
                                                   parser=finite_float)] = None,
    tolerance: Annotated[float, typer.Option(help="stop when the bracket is this tight (0.02 = 2%)", parser=finite_float)] = 0.02,
    points_per_round: Annotated[int, typer.Option(help="simulations per search round (run in parallel)")] = 3,
    target_rate: Annotated[Optional[float], typer.Option(help="how many replicas for this many requests/s",
                                                         parser=finite_float)] = None,
    requests: Annotated[Optional[int], typer.Option(help="number of requests per point (replaces the workload's "
                                                         "requests and duration_s)")] = None,
    seed: Annotated[Optional[int], typer.Option(help="random seed")] = None,
    goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None,
    show_points: Annotated[bool, typer.Option(help="also print every searched point")] = False,
) -> None:
    """The highest request rate (or users) meeting every SLO, by a bracketing search, with the
    goodput and $ per 1M tokens there; --target-rate R: how many replicas for R requests/s."""
    from capsim.planning.capacity import capacity as run_capacity
    from capsim.report.planning_tables import capacity_view, points_view, rich

    grid = {k: v for k, v in dict(gpu=gpu, kv_cache=kv_cache, weights=weights).items() if v}
    goals, prices = _goals(workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("capacity", out_dir, plots)
    _dask_warning(dask_scheduler)
    with _progress("capacity search") as tick:
        res = run_capacity(workload, goals, users=users, start=start, tolerance=tolerance, points_per_round=points_per_round,
                           target_rate=target_rate, think_time_s=think_time, price=prices, workers=workers,
                           dask_scheduler=dask_scheduler, progress=tick, requests=requests, seed=seed, **grid)
    axes = [k for k, v in grid.items() if len(v) > 1] or ["gpu"]
    title = "Capacity under " + "; ".join(goals.describe())
    _emit(res.frame, title, capacity_view(res.frame, res.over, axes), fmt, {"over": res.over, "objectives": goals.as_dict()})
    if show_points and fmt is TableFormat.table:
        out.print(rich("Searched points", points_view(res.points, res.over)))
    _wrote(outputs.save(res.write, _figures(res)))


@app.command()
def plot(
    run_dir: Annotated[Path, typer.Argument(help="a directory written by run/sweep/compare/capacity --out")],
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="where to write the figures (default RUN_DIR/plots; "
                                                    "replaced whole)")] = None,
    slo: SloOpt = None,
) -> None:
    """Redraw the figures of a saved run (latency CDFs, KV memory, batch size, slot Gantt) or of a
    saved sweep, compare or capacity search, from its CSV/JSON files alone."""
    from capsim.report.planning_figures import plot_saved
    from capsim.results.slo import parse_objectives

    goals = parse_objectives(slo)
    if not run_dir.is_dir():
        raise CapsimError(f"{quote(str(run_dir), 120)}: not a folder; give the folder a run, sweep, compare or capacity "
                          "search wrote with --out.")
    outputs = _outputs("plots", None, out_dir or run_dir / "plots", option="--out")
    _wrote(outputs.save(lambda folder: [], lambda folder: plot_saved(run_dir, folder, goals)))


def _figures(res):
    """Draws a planning result's figures into a folder; matplotlib loads only when one is asked for."""
    def draw(folder: Path) -> list[Path]:
        from capsim.report.planning_figures import plot_result

        return plot_result(res, folder)

    return draw


def _goals(workload: Path, slo: list[str] | None, share: float):
    from capsim.api import load_workload
    from capsim.results.slo import objectives_for

    return objectives_for(load_workload(workload), slo, share)


def _prices(texts: list[str] | None):
    from capsim.results.cost import parse_prices

    return parse_prices(texts)


def _emit(frame, title: str, view, fmt: TableFormat, meta: dict) -> None:
    from capsim.report.planning_tables import emit

    emit(out, frame, title, view, fmt.value, meta)


def _outputs(kind: str, out_dir: Path | None, plots: Path | None, option: str = "--plots"):
    """The command's output folders, checked before any work starts (capsim.results.out_folder)."""
    from capsim.results.out_folder import Outputs

    return Outputs(kind, out_dir, plots, plots_option=option)


def _dask_warning(dask_scheduler: str | None) -> None:
    if dask_scheduler is not None:
        from capsim.planning.parallel import DASK_WARNING

        err.print(DASK_WARNING, highlight=False, soft_wrap=True)


def _wrote(paths: list[Path]) -> None:
    if paths:
        err.print("wrote " + ", ".join(str(p) for p in paths), highlight=False, soft_wrap=True)


def _progress(label: str, auto_refresh: bool = True):
    """A progress bar on a terminal; elsewhere nothing is drawn (not even an empty line) and the
    work is not called back."""
    if not err.is_terminal:
        return contextlib.nullcontext()
    from capsim.report.planning_tables import progress

    return progress(err, label, auto_refresh=auto_refresh)


def _run_progress(workload: Path):
    """`capsim run`'s bar of requests finished, on a terminal only (elsewhere nothing is drawn
    and the engine is not called back)."""
    return _progress(f"{workload.name}, requests finished", auto_refresh=False)


@app.command()
def calibrate(
    device: Annotated[str, typer.Option(help="cpu | cuda")] = "cuda",
    backend: Annotated[Optional[str], typer.Option(help="attention kernel: triton | flex | sdpa | flash (kernel grid; default triton); triton | sdpa | flashinfer (--forward; default triton on cuda, sdpa on cpu)")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="where the profile and its raw data go (a new or empty folder, "
                                          "or an earlier calibration's, replaced whole)")] = Path("calibration"),
    quick: Annotated[bool, typer.Option(help="a smaller grid (a few minutes on a GPU)")] = False,
    deadline_s: Annotated[Optional[float], typer.Option(help="stop measuring after this many seconds and fit what is there",
                                                        parser=finite_float)] = None,
    tiny: Annotated[bool, typer.Option(help="a seconds-long grid (smoke test)")] = False,
    base_gpu: Annotated[Optional[str], typer.Option(help="catalogue GPU whose datasheet the profile starts from")] = None,
    check_profile: Annotated[Optional[Path], typer.Option("--check", help="reprint a calibrated profile's held-out errors")] = None,
    forward: Annotated[Optional[str], typer.Option(help="time whole forward passes of this model (catalogue name or model YAML) and compare them with capsim's step times")] = None,
    layers: Annotated[Optional[int], typer.Option(help="--forward: measure the first N layers (default: all)")] = None,
    flashinfer: Annotated[bool, typer.Option(help="--forward: also time FlashInfer's paged attention beside the harness's kernels (skipped, with the reason, where it cannot run)")] = False,
    forward_check: Annotated[Optional[list[Path]], typer.Option("--forward-check", help="compare raw forward rows (forward-*.jsonl) with capsim's step times (repeatable)")] = None,
    gpu: Annotated[Optional[list[str]], typer.Option(help="--forward/--forward-check: hardware profile(s) to price the steps with (repeatable; default: the measured GPU's)")] = None,
    engine: Annotated[Optional[str], typer.Option(help="--forward/--forward-check: engine profile whose kernels price the steps, host time removed (default: none, the bare GPU roofline)")] = None,
) -> None:
    """Time real paged-attention kernels and GEMMs on this machine, fit the cost model, and write
    `<gpu>.calibrated.yaml` (use it with `capsim run --gpu FILE`). With --forward, time whole
    forward passes instead and compare each with capsim's predicted step time. Needs `pip install '.\\[calibrate]'`."""
    import capsim.harness as harness

    if deadline_s is not None and deadline_s <= 0:
        raise CapsimError(f"--deadline-s: must be positive (got {deadline_s}).")
    if forward_check:
        from capsim.results.out_folder import OutputFolder

        folder = OutputFolder(out_dir, "calibrate")
        with folder.writing() as tmp:
            paths = _print_forward_check(forward_check, gpu, engine, tmp)
        _wrote(folder.final(paths, tmp))
        return
    if forward is not None:
        _calibrate_forward(forward, device, backend, out_dir, quick, tiny, deadline_s, layers, flashinfer, gpu, engine)
        return
    if check_profile is not None:
        report = harness.check(check_profile)
        title = f"Held-out errors of {report.profile_path.name} (raw data hash {'matches' if report.sha256_matches else 'DIFFERS'})"
        out.print(dict_table(title, report.table_rows()))
        return
    from capsim.results.out_folder import OutputFolder

    folder = OutputFolder(out_dir, "calibrate")
    with _bar() as progress, folder.writing(keep_partial=True) as tmp:
        try:
            result = harness.calibrate(device, backend or "triton", tmp, quick=quick, deadline_s=deadline_s, tiny=tiny,
                                       base_gpu=base_gpu, progress=progress)
        except BaseException:
            if any(f.stat().st_size for f in tmp.glob("*.jsonl")):
                err.print(f"note: the points measured so far are kept in {tmp}", highlight=False, soft_wrap=True)
            raise
    profile, raw = folder.final([result.profile_path, result.raw_data_path], tmp)
    out.print(dict_table("Fit (MAPE %: train, 5-fold, leave-one-group-out)", result.table_rows()))
    note = " (stopped at the deadline)" if result.stopped_at_deadline else ""
    out.print(f"{result.points_measured} of {result.points_planned} points measured in {result.elapsed_s:.0f} s{note}; "
              f"profile: {profile}; raw data: {raw}", highlight=False, soft_wrap=True)
    for name, why in result.skipped_backends.items():
        err.print(f"skipped backend {name}: {why}", highlight=False)


@contextlib.contextmanager
def _bar():
    """A transient progress bar on stderr; yields the harness's progress callback."""
    from rich.progress import Progress

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label[:40])

        yield progress


def _calibrate_forward(model: str, device: str, backend: Optional[str], out_dir: Path, quick: bool, tiny: bool,
                       deadline_s: Optional[float], layers: Optional[int], flashinfer: bool,
                       gpu: Optional[list[str]], engine: Optional[str]) -> None:
    from capsim.harness.forward_run import measure_forward
    from capsim.results.out_folder import OutputFolder

    folder = OutputFolder(out_dir, "calibrate")
    with _bar() as progress, folder.writing(keep_partial=True) as tmp:
        result = measure_forward(model, device, tmp, layers=layers, attention=backend, quick=quick, tiny=tiny,
                                 deadline_s=deadline_s, flashinfer=flashinfer, progress=progress)
        report_paths = _print_forward_check([result.raw_data_path], gpu, engine, tmp)
    raw, *_ = folder.final([result.raw_data_path, *report_paths], tmp)
    note = " (stopped at the deadline)" if result.stopped_at_deadline else ""
    out.print(f"{result.model}, {result.layers} layers: {result.points_measured} of {result.points_planned} steps "
              f"measured ({result.points_failed} failed) in {result.elapsed_s:.0f} s{note}; raw data: {raw}",
              highlight=False, soft_wrap=True)
    for name, why in result.skipped.items():
        err.print(f"skipped {name}: {why}", highlight=False)


def _default_gpu(raw: list[Path]) -> str:
    """The catalogue profile of the GPU the rows were measured on; for CPU rows, h200 (said on stderr)."""
    from capsim.validation.forward import read_rows
    from capsim.harness.profile import find_base

    rows = read_rows(raw[0])
    if rows and rows[0]["device"] == "cuda":
        name = rows[0]["device_name"]
        base = find_base(name, None)
        if base is None:
            raise CapsimError(f"no catalogue profile matches the GPU {name!r} of {raw[0]}: name one with --gpu.")
        return base["name"]
    err.print("measured on a CPU: the steps are priced as on an h200 (--gpu to choose); capsim models GPUs, so a "
              "CPU run checks the plumbing, not the accuracy", highlight=False)
    return "h200"


def _print_forward_check(raw: list[Path], gpus: Optional[list[str]], engine: Optional[str], out_dir: Path) -> list[Path]:
    """Print the forward check of these raw files and write its tables into out_dir (returns the paths)."""
    from capsim.validation.forward import check_forward

    report = check_forward(raw, gpus or [_default_gpu(raw)], engine)
    for title, rows in report.step_tables().items():
        out.print(dict_table(title, rows))
    out.print("err % = predicted / measured - 1; nothing is fitted to these rows.", highlight=False)
    if report.attention:
        out.print(dict_table("Attention alone, one layer (ms)", report.attention))
    out.print(dict_table(f"MAPE per kind (engine: {engine or 'none, the bare GPU roofline'})", report.mape_rows()))
    if report.failed_rows:
        err.print(f"{report.failed_rows} rows had no time (the harness's error is in the raw file)", highlight=False)
    return report.write(out_dir)


@app.command()
def validate(
    suite: Annotated[Optional[Path], typer.Option(help="folder of validation YAML files (default: ./validation or the checkout's)")] = None,
    only: Annotated[Optional[list[str]], typer.Option(help="run only points whose id contains this (repeatable)")] = None,
    group: Annotated[Optional[list[str]], typer.Option(help="decode | prefill | ttft | max_throughput | concurrency (repeatable)")] = None,
    workers: Annotated[Optional[int], typer.Option(help="parallel simulations (default: one per core)")] = None,
    fmt: FormatOpt = TableFormat.table,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="write validation.csv and validation.json here (a new "
                                                    "or empty folder, or an earlier validation's, replaced whole)")] = None,
) -> None:
    """Run the published measurements in validation/*.yaml through the simulator: measured vs
    predicted per point, and MAPE per group (decode, prefill, TTFT, max throughput, concurrency)."""
    from capsim.validation.runner import render, run_suite, write

    outputs = _outputs("validate", out_dir, None)
    with _progress("validation points") as tick:
        outcomes = run_suite(suite, only=only, groups=group, workers=workers, progress=tick)
    if fmt is TableFormat.table:
        from capsim.validation.runner import GROUP_COLUMNS, POINT_COLUMNS, group_rows, point_rows

        out.print(rich_table("Validation points (error = predicted / measured - 1)", POINT_COLUMNS, point_rows(outcomes)))
        out.print(rich_table("MAPE per group", GROUP_COLUMNS, group_rows(outcomes)))
    else:
        sys.stdout.write(render(outcomes, fmt.value))
    _wrote(outputs.save(lambda folder: write(outcomes, folder), lambda folder: []))


@app.command()
def engines(fmt: FormatOpt = TableFormat.table) -> None:
    """List the serving-engine profiles: scheduling defaults, host overheads, kernel counts."""
    from capsim.report.listings import engine_listing

    _listing(engine_listing(), fmt)


def main() -> None:
    """Entry point: user errors print one paragraph and exit 2, never a traceback."""
    try:
        # Not standalone, Typer returns an Exit's code instead of exiting, Ctrl-C included (130).
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        code = 130
    except CapsimError as exc:
        _error(str(exc))
        raise SystemExit(2) from None
    except typer.Abort:
        err.print("aborted")
        raise SystemExit(130) from None
    except OSError as exc:  # e.g. an --out folder that cannot be made or written; a full disk
        if isinstance(exc, BrokenPipeError):  # output piped into a reader that stopped (| head)
            raise SystemExit(1) from None
        where = f"{quote(str(exc.filename), 120).strip(chr(39))}: " if exc.filename else ""
        _error(f"{where}cannot read or write it ({exc.strerror or str(exc)[:120]}); check the path (an --out folder "
               "must be one that can be created and written).")
        raise SystemExit(2) from None
    except SystemExit:
        raise
    except Exception as exc:
        # Usage errors (unknown option, bad value) from Typer's click layer: show its message.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        if type(exc).__name__ == "Exit":
            raise SystemExit(getattr(exc, "exit_code", 0)) from None
        raise
    if code == 130:
        err.print("interrupted")
    if isinstance(code, int) and code:  # the commands themselves return None
        raise SystemExit(code)


def _error(message: str) -> None:
    """A user error as one paragraph on stderr: 'error:' in bold red, the message as written."""
    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)


def console_main() -> None:
    """The `capsim` command and `python -m capsim`: main(), then the process ends. Every object
    still alive is moved to the garbage collector's permanent generation first, so that the
    interpreter's shutdown does not walk them all once more: with numpy, pydantic and a finished
    run loaded that walk took 0.14 to 0.22 s of a 2 s `capsim run`. Nothing is left unwritten:
    output files are closed by then, and the exit flushes stdout and stderr as before."""
    try:
        main()
    finally:
        gc.freeze()
