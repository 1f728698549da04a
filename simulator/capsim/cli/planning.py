"""The planning commands: `capsim compare` (which set-up serves this traffic best), `sweep`
(latency against load) and `capsim capacity` (the highest load that meets every SLO). Each runs
its simulations through capsim.planning, in parallel or on Dask."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import (DaskOpt, FormatOpt, OutOpt, PlotsOpt, PriceOpt, ShareOpt, SloOpt, TableFormat, WorkersOpt,
                               _dask_warning, _emit, _figures, _goals, _outputs, _prices, _progress, _wrote,
                               finite_float, out)
from capsim.cli.report_option import ReportOpt, check_report, write_report
from capsim.errors import CapsimError


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
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
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
    check_report(report)
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
    _wrote(write_report(report, res))


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
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
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
    check_report(report)
    _dask_warning(dask_scheduler)
    with _progress("sweep") as tick:
        res = run_sweep(workload, rates=rates, users=counts, think_time_s=think_time, seeds=seeds, objectives=goals,
                        price=prices, workers=workers, dask_scheduler=dask_scheduler, progress=tick, gpu=gpu,
                        kv_cache=kv_cache, weights=weights, scheduler=scheduler, requests=requests, seed=seed)
    _emit(res.frame, title("Sweep", res.frame), sweep_view(res.frame, res.over), fmt,
          {"over": res.over, "objectives": goals.as_dict()})
    _wrote(outputs.save(res.write, _figures(res)))
    _wrote(write_report(report, res))


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
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
    show_points: Annotated[bool, typer.Option(help="also print every searched point")] = False,
) -> None:
    """The highest request rate (or users) meeting every SLO, by a bracketing search, with the
    goodput and $ per 1M tokens there; --target-rate R: how many replicas for R requests/s."""
    from capsim.planning.capacity import capacity as run_capacity
    from capsim.report.planning_tables import capacity_view, points_view, rich

    grid = {k: v for k, v in dict(gpu=gpu, kv_cache=kv_cache, weights=weights).items() if v}
    goals, prices = _goals(workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("capacity", out_dir, plots)
    check_report(report)
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
    _wrote(write_report(report, res))
