"""`capsim plan`: the cheapest deployment (GPU, TP, replicas, formats, engine, batch limits) that
meets every SLO at a target load, with the Pareto front and ready launch commands."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import (DaskOpt, FormatOpt, OutOpt, PlotsOpt, PriceOpt, ShareOpt, SloOpt, TableFormat, WorkersOpt,
                               _dask_warning, _goals, _outputs, _prices, _progress, _wrote, finite_float, out,
                               setup_options, workload_for)
from capsim.cli.report_option import ReportOpt, check_report, write_report
from capsim.errors import CapsimError

# The search axes: repeatable set-up options, each value a candidate dimension (default: the
# planning.plan_space defaults). The target load is plan's own --rate / --users.
PLAN_GRID = ("gpu", "tp", "pp", "ep", "weights", "kv_cache", "engine", "max_num_seqs", "max_num_batched_tokens")
LOAD_AXES = ("rate", "users")


@setup_options(grid=PLAN_GRID, axes=LOAD_AXES)
def plan(
    workload: Annotated[Optional[Path], typer.Argument(help="workload YAML (optional: the set-up flags can say it "
                                                        "all)")] = None,
    rate: Annotated[Optional[float], typer.Option(help="target load, requests/s (default: the workload's rate)",
                                                  parser=finite_float)] = None,
    users: Annotated[Optional[int], typer.Option(help="target load as closed-loop users instead of a rate")] = None,
    slo: SloOpt = None,
    budget_gpus: Annotated[int, typer.Option(help="at most this many GPUs in the whole deployment")] = 8,
    front_within: Annotated[float, typer.Option(help="also search candidates that could cost up to this many times the "
                                                "cheapest found (a fuller Pareto front; 1: stop at the cheapest)",
                                                parser=finite_float)] = 1.0,
    shapes: Annotated[Optional[str], typer.Option(help="deployment shapes to search, comma-separated: aggregated, pp "
                                                  "(TP x PP per replica), ep (expert parallelism, MoE models), "
                                                  "disaggregated (prefill:decode pools) (default: aggregated, plus ep "
                                                  "for a MoE model)")] = None,
    splits: Annotated[Optional[str], typer.Option(help="prefill:decode instances per disaggregated unit, "
                                                  "comma-separated (default 1:1,1:2,2:1,1:3); without --shapes, "
                                                  "giving --pp, --ep or --splits adds its shape")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="why the winner wins and what the runner-up would need")] = False,
    goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None, report: ReportOpt = None,
    setup: Optional[dict] = None,
) -> None:
    """The cheapest deployment meeting every SLO at --rate (or --users): candidates pruned by
    memory, throughput and latency bounds, the survivors simulated for their fewest replicas.
    Prints the winner with its launch commands, and the Pareto front. No candidate meeting the
    SLOs is a verdict (exit 0), with the closest one and what binds. The search axes are the
    repeatable set-up flags --gpu, --tp, --pp, --ep, --weights, --kv-cache, --engine, --max-num-seqs
    and --max-num-batched-tokens (defaults: the workload's GPU, TP 1 2 4 8, PP 2 4, EP 2 4 8, bf16
    fp8, fp16 fp8, vllm, 64 256, 2048 8192), and --shapes / --splits (docs/planning.md)."""
    from capsim.planning.plan import plan as run_plan
    from capsim.planning.plan_space import (DEFAULT_ENGINES, DEFAULT_EP, DEFAULT_KV, DEFAULT_MAX_NUM_BATCHED_TOKENS,
                                            DEFAULT_MAX_NUM_SEQS, DEFAULT_PP, DEFAULT_SPLITS, DEFAULT_TP,
                                            DEFAULT_WEIGHTS, SearchSpace, parse_splits)
    from capsim.report.planning_tables import plan_report

    setup = setup or {}
    if workload is None and rate is None and users is None:
        raise CapsimError("plan: give the target load, --rate R (requests/s) or --users N (closed-loop users); without "
                          "a workload file there is no rate to default to.")
    job = workload_for(workload, setup, slo, goodput_share, grid=PLAN_GRID,
                       load={"users": users} if users is not None else {"rate": rate or 1.0})
    axis = {name: tuple(setup.get(name) or ()) for name in PLAN_GRID}
    goals, prices = _goals(job.workload, slo, goodput_share), _prices(price_per_hour)
    space = SearchSpace(axis["gpu"] or _workload_gpu(job.workload), budget_gpus, axis["tp"] or DEFAULT_TP,
                        axis["weights"] or DEFAULT_WEIGHTS, axis["kv_cache"] or DEFAULT_KV,
                        axis["engine"] or DEFAULT_ENGINES, axis["max_num_seqs"] or DEFAULT_MAX_NUM_SEQS,
                        axis["max_num_batched_tokens"] or DEFAULT_MAX_NUM_BATCHED_TOKENS,
                        shapes=_shapes(shapes, job.workload, axis, splits), pp=axis["pp"] or DEFAULT_PP,
                        ep=axis["ep"] or DEFAULT_EP, splits=parse_splits(splits) if splits else DEFAULT_SPLITS)
    outputs = _outputs("plan", out_dir, plots)
    check_report(report)
    _dask_warning(dask_scheduler)
    with _progress("plan search") as tick:
        res = run_plan(job.workload, goals, space, rate=rate, users=users, think_time_s=setup.get("think_time_s"),
                       price=prices, workers=workers, dask_scheduler=dask_scheduler, progress=tick,
                       front_within=front_within, **job.overrides)
    plan_report(out, res, fmt.value, explain)
    _wrote(outputs.save(res.write, _plan_figures(res)))
    _wrote(write_report(report, res, goals))


def _shapes(text, workload, axis: dict, splits) -> tuple[str, ...]:
    """--shapes as given; without it the model's default shapes, plus those that --pp, --ep or
    --splits ask for by being given."""
    from capsim.planning.plan_space import parse_shapes

    chosen = parse_shapes(text, workload)
    if text is not None:
        return chosen
    asked = [name for name, given in (("pp", axis["pp"]), ("ep", axis["ep"]), ("disaggregated", splits)) if given]
    return chosen + tuple(name for name in asked if name not in chosen)


def _workload_gpu(workload) -> tuple[str, ...]:
    """The workload's own GPU (a file's or a composed config's), the search's default."""
    from capsim.api import load_workload

    gpu = (load_workload(workload) if isinstance(workload, Path) else workload).gpu
    return (gpu,) if gpu else ()


def _plan_figures(res):
    def draw(folder: Path) -> list[Path]:
        from capsim.report.planning_figures import plot_plan

        return plot_plan(res, folder)

    return draw
