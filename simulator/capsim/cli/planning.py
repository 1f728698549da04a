"""The planning commands: `capsim compare` (which set-up serves this traffic best), `sweep`
(latency against load) and `capsim capacity` (the highest load that meets every SLO). Each runs
its simulations through capsim.planning, in parallel or on Dask."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import (CAPACITY_GRID, COMPARE_GRID, DaskOpt, FormatOpt, OutOpt, PlotsOpt, PriceOpt, ShareOpt,
                               SloOpt, TableFormat, WorkersOpt, _dask_warning, _emit, _figures, _goals, _outputs,
                               _prices, _progress, _wrote, finite_float, out, setup_options, workload_for)
from capsim.cli.report_option import ReportOpt, check_report, write_report
from capsim.errors import CapsimError

# The load `sweep` and `capacity` vary themselves: their --rate and --users are the sweep's range
# and the search's kind, in place of the set-up options of those names.
LOAD_AXES = ("rate", "users")


@setup_options(grid=COMPARE_GRID)
def compare(
    workload: Annotated[Optional[Path], typer.Argument(help="workload YAML (optional: the set-up flags can say it "
                                                        "all)")] = None,
    slo: SloOpt = None, goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    seeds: Annotated[int, typer.Option(help="repeat each combination with N seeds: mean ± 95% interval")] = 1,
    at_capacity: Annotated[bool, typer.Option("--at-capacity", help="each row at its own capacity under the SLOs "
                                              "(a capacity search each) instead of at the workload's load")] = False,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
    setup: Optional[dict] = None,
) -> None:
    """Which set-up serves this traffic best: one row per combination of the repeated options,
    each at the same offered load (or with --at-capacity at its own capacity within the SLOs):
    KV sequences that fit, throughput, TTFT and TPOT p50/p99, KV utilisation, GPUs, $/hour and $
    per 1M output tokens; a saturated row says so."""
    from capsim.planning.sweep import compare as run_compare
    from capsim.report.planning_tables import compare_view, title

    # --at-capacity searches each row's rate: a file-less workload needs no load of its own then.
    job = workload_for(workload, setup or {}, slo, goodput_share, grid=COMPARE_GRID,
                       load={"rate": 1.0} if at_capacity else None)
    rate = (setup or {}).get("rate")
    goals, prices = _goals(job.workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("compare", out_dir, plots)
    check_report(report, out_dir, plots)
    _dask_warning(dask_scheduler)
    with _progress("compare") as tick:
        if at_capacity:
            from capsim.planning.capacity import compare_at_capacity

            if seeds != 1 or rate is not None:
                raise CapsimError("compare --at-capacity: each row's load is its capacity, found with one seed; "
                                  "leave out --rate and --seeds.")
            res = compare_at_capacity(job.workload, goals, price=prices, workers=workers, dask_scheduler=dask_scheduler,
                                      progress=tick, **job.overrides, **job.grid)
        else:
            res = run_compare(job.workload, seeds=seeds, objectives=goals, price=prices, workers=workers,
                              dask_scheduler=dask_scheduler, progress=tick, **job.overrides, **job.grid)
    _emit(res.frame, title("Compare", res.frame), compare_view(res.frame, res.axes), fmt, {"axes": res.axes})
    _wrote(outputs.save(res.write, _figures(res)))
    _wrote(write_report(report, res))


@setup_options(axes=LOAD_AXES)
def sweep(
    workload: Annotated[Optional[Path], typer.Argument(help="workload YAML (optional: the set-up flags can say it "
                                                        "all)")] = None,
    rate: Annotated[Optional[str], typer.Option(help="request rates START:STOP:STEP (e.g. 0.5:20:0.5), START:STOP:xF, or a,b,c")] = None,
    users: Annotated[Optional[str], typer.Option(help="closed-loop users START:STOP (e.g. 1:64), START:STOP:x2, or a,b,c")] = None,
    slo: SloOpt = None, goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    seeds: Annotated[int, typer.Option(help="repeat each point with N seeds: mean ± 95% interval")] = 1,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
    setup: Optional[dict] = None,
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
    job = workload_for(workload, setup or {}, slo, goodput_share,
                       load={"rate": rates[0]} if rates is not None else {"users": counts[0]})
    goals, prices = _goals(job.workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("sweep", out_dir, plots or out_dir)
    check_report(report, out_dir, plots)
    _dask_warning(dask_scheduler)
    with _progress("sweep") as tick:
        res = run_sweep(job.workload, rates=rates, users=counts, think_time_s=(setup or {}).get("think_time_s"),
                        seeds=seeds, objectives=goals, price=prices, workers=workers, dask_scheduler=dask_scheduler,
                        progress=tick, **job.overrides)
    _emit(res.frame, title("Sweep", res.frame), sweep_view(res.frame, res.over), fmt,
          {"over": res.over, "objectives": goals.as_dict()})
    _wrote(outputs.save(res.write, _figures(res)))
    _wrote(write_report(report, res))


@setup_options(grid=CAPACITY_GRID, axes=LOAD_AXES)
def capacity(
    workload: Annotated[Optional[Path], typer.Argument(help="workload YAML (optional: the set-up flags can say it "
                                                        "all)")] = None,
    slo: SloOpt = None,
    users: Annotated[bool, typer.Option("--users", help="search closed-loop users instead of the request rate")] = False,
    start: Annotated[Optional[float], typer.Option(help="first load tried (default: the workload's rate or users)",
                                                   parser=finite_float)] = None,
    tolerance: Annotated[float, typer.Option(help="stop when the bracket is this tight (0.02 = 2%)", parser=finite_float)] = 0.02,
    points_per_round: Annotated[int, typer.Option(help="simulations per search round (run in parallel)")] = 3,
    target_rate: Annotated[Optional[float], typer.Option(help="how many replicas for this many requests/s",
                                                         parser=finite_float)] = None,
    goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
    show_points: Annotated[bool, typer.Option(help="also print every searched point")] = False,
    setup: Optional[dict] = None,
) -> None:
    """The highest request rate (or users) meeting every SLO, by a bracketing search, with the
    goodput and $ per 1M tokens there; --target-rate R: how many replicas for R requests/s."""
    from capsim.planning.capacity import capacity as run_capacity
    from capsim.report.planning_tables import capacity_view, points_view, rich

    _check_capacity_load(workload, users, setup or {})
    job = workload_for(workload, setup or {}, slo, goodput_share, grid=CAPACITY_GRID,
                       load={"users": int(start or 1)} if users else {"rate": start or 1.0})
    grid = job.grid
    goals, prices = _goals(job.workload, slo, goodput_share), _prices(price_per_hour)
    outputs = _outputs("capacity", out_dir, plots)
    check_report(report, out_dir, plots)
    _dask_warning(dask_scheduler)
    with _progress("capacity search") as tick:
        res = run_capacity(job.workload, goals, users=users, start=start, tolerance=tolerance,
                           points_per_round=points_per_round, target_rate=target_rate,
                           think_time_s=(setup or {}).get("think_time_s"), price=prices, workers=workers,
                           dask_scheduler=dask_scheduler, progress=tick, **job.overrides, **grid)
    axes = [k for k, v in grid.items() if len(v) > 1] or ["gpu"]
    title = "Capacity under " + "; ".join(goals.describe())
    _emit(res.frame, title, capacity_view(res.frame, res.over, axes), fmt, {"over": res.over, "objectives": goals.as_dict()})
    if show_points and fmt is TableFormat.table:
        out.print(rich("Searched points", points_view(res.points, res.over)))
    _wrote(outputs.save(res.write, _figures(res)))
    _wrote(write_report(report, res))


def _check_capacity_load(workload: Optional[Path], users: bool, setup: dict) -> None:
    """capacity's --users is a switch: `--users 64` would read 64 as the workload file, and a
    think time without --users would go unused; both are errors that say so."""
    if users and workload is not None and str(workload).isdigit() and not workload.exists():
        raise CapsimError(f"--users {workload}: capacity's --users is a switch (search closed-loop users, not the "
                          f"rate) and takes no number; give the first number tried with --start {workload}.")
    if setup.get("think_time_s") is not None and not users:
        raise CapsimError("--think-time-s: the search varies the request rate, which has no think time; add --users "
                          "to search closed-loop users with it.")
