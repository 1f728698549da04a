"""`capsim plan`: the cheapest deployment (GPU, TP, replicas, formats, engine, batch limits) that
meets every SLO at a target load, with the Pareto front and ready launch commands."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import (DaskOpt, FormatOpt, OutOpt, PlotsOpt, PriceOpt, ShareOpt, SloOpt, TableFormat, WorkersOpt,
                               _dask_warning, _goals, _outputs, _prices, _progress, _wrote, finite_float, out)


def plan(
    workload: Annotated[Path, typer.Argument(help="workload YAML")],
    rate: Annotated[Optional[float], typer.Option(help="target load, requests/s (default: the workload's rate)",
                                                  parser=finite_float)] = None,
    users: Annotated[Optional[int], typer.Option(help="target load as closed-loop users instead of a rate")] = None,
    think_time: Annotated[Optional[float], typer.Option(help="users' think time, s (with --users)", parser=finite_float)] = None,
    slo: SloOpt = None,
    gpu: Annotated[Optional[list[str]], typer.Option(help="GPU to choose from (repeatable; default: the workload's)")] = None,
    budget_gpus: Annotated[int, typer.Option(help="at most this many GPUs in the whole deployment")] = 8,
    tp: Annotated[Optional[list[int]], typer.Option(help="tensor-parallel degrees to try (repeatable; default 1 2 4 8)")] = None,
    weights: Annotated[Optional[list[str]], typer.Option(help="weight formats to try (repeatable; default bf16 fp8)")] = None,
    kv_cache: Annotated[Optional[list[str]], typer.Option("--kv-cache", help="KV-cache formats to try (repeatable; "
                                                          "default fp16 fp8)")] = None,
    engine: Annotated[Optional[list[str]], typer.Option(help="serving engines to try (repeatable; default vllm; "
                                                        "see `capsim engines`)")] = None,
    max_num_seqs: Annotated[Optional[list[int]], typer.Option(help="max_num_seqs values to try (repeatable; "
                                                              "default 64 256)")] = None,
    max_num_batched_tokens: Annotated[Optional[list[int]], typer.Option(help="token budgets per step to try (repeatable; "
                                                                        "default 2048 8192)")] = None,
    front_within: Annotated[float, typer.Option(help="also search candidates that could cost up to this many times the "
                                                "cheapest found (a fuller Pareto front; 1: stop at the cheapest)",
                                                parser=finite_float)] = 1.0,
    requests: Annotated[Optional[int], typer.Option(help="requests per simulation (default: enough for a steady "
                                                         "window of 2,000)")] = None,
    seed: Annotated[Optional[int], typer.Option(help="random seed")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="why the winner wins and what the runner-up would need")] = False,
    goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    workers: WorkersOpt = None, dask_scheduler: DaskOpt = None,
    fmt: FormatOpt = TableFormat.table, out_dir: OutOpt = None, plots: PlotsOpt = None,
) -> None:
    """The cheapest deployment meeting every SLO at --rate (or --users): candidates pruned by
    memory, throughput and latency bounds, the survivors simulated for their fewest replicas.
    Prints the winner with its launch commands, and the Pareto front. No candidate meeting the
    SLOs is a verdict (exit 0), with the closest one and what binds."""
    from capsim.planning.plan import plan as run_plan
    from capsim.planning.plan_space import (DEFAULT_ENGINES, DEFAULT_KV, DEFAULT_MAX_NUM_BATCHED_TOKENS,
                                            DEFAULT_MAX_NUM_SEQS, DEFAULT_TP, DEFAULT_WEIGHTS, SearchSpace)
    from capsim.report.planning_tables import plan_report

    goals, prices = _goals(workload, slo, goodput_share), _prices(price_per_hour)
    gpus = tuple(gpu) if gpu else _workload_gpu(workload)
    space = SearchSpace(gpus, budget_gpus, tuple(tp or DEFAULT_TP), tuple(weights or DEFAULT_WEIGHTS),
                        tuple(kv_cache or DEFAULT_KV), tuple(engine or DEFAULT_ENGINES),
                        tuple(max_num_seqs or DEFAULT_MAX_NUM_SEQS),
                        tuple(max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS))
    outputs = _outputs("plan", out_dir, plots)
    _dask_warning(dask_scheduler)
    with _progress("plan search") as tick:
        res = run_plan(workload, goals, space, rate=rate, users=users, think_time_s=think_time, price=prices,
                       workers=workers, dask_scheduler=dask_scheduler, progress=tick, front_within=front_within,
                       requests=requests, seed=seed)
    plan_report(out, res, fmt.value, explain)
    _wrote(outputs.save(res.write, _plan_figures(res)))


def _workload_gpu(workload: Path) -> tuple[str, ...]:
    from capsim.api import load_workload

    gpu = load_workload(workload).gpu
    return (gpu,) if gpu else ()


def _plan_figures(res):
    def draw(folder: Path) -> list[Path]:
        from capsim.report.planning_figures import plot_plan

        return plot_plan(res, folder)

    return draw
