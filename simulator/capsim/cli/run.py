"""`capsim run`: one workload on one set-up, printed as vLLM's result block and a verdict (or,
with --seeds, repeated over seeds). Only Typer, rich and the shared helpers load with this module;
the simulator loads when the command runs."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from capsim.cli.common import (DaskOpt, PercentilesOpt, PlotsOpt, PriceOpt, ShareOpt, SloOpt, WorkersOpt, _dask_warning,
                               _goals, _outputs, _prices, _progress, _wrote, err, finite_float, out)


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
    pp: Annotated[Optional[int], typer.Option(help="pipeline stages per replica (docs/shapes.md)")] = None,
    ep: Annotated[Optional[int], typer.Option(help="expert-parallel ranks per replica of a MoE model (docs/shapes.md)")] = None,
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
    from capsim.api import simulate
    from capsim.spec.metric_names import parse_percentiles

    overrides = dict(gpu=gpu, model=model, weights=weights, kv_cache=kv_cache, scheduler=scheduler, allocator=allocator,
                     rate=rate, requests=requests, seed=seed, max_num_seqs=max_num_seqs, mode=mode, horizon_s=horizon,
                     max_num_batched_tokens=max_num_batched_tokens, num_gpu_blocks=num_gpu_blocks,
                     replicas=replicas, router=router, prefix_caching=prefix_caching, preemption=preemption,
                     engine=engine, tp=tp, pp=pp, ep=ep)
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
        _print_result(result)
    if explain:
        from capsim.report.explain import explain_run

        print(explain_run(result))
    _wrote(outputs.save(result.write, lambda folder: _run_figures(result, folder, goals)))


def _print_result(result) -> None:
    """The set-up in one line, vLLM's result block, the KV memory line and the verdict."""
    from capsim.report.console import result_block, verdict_block

    st = result.summary["setup"]
    out.print(Text.assemble((str(st["workload"]), "bold"),
                            f": {st['model']} ({st['weights']} weights, {st['kv_cache']} KV) on {st['gpu']}"
                            f"{' x' + str(st['tp']) if st.get('tp', 1) > 1 else ''}, {st['scheduler']} scheduler, "
                            f"{st['allocator']} KV cache, {st['mode']} cost model, engine {st.get('engine') or 'none'}"),
              highlight=False)
    print(result_block(result.summary))
    print(result.setup.memory.log_line())
    print(verdict_block(result.summary["verdict"]))


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



def _run_progress(workload: Path):
    """`capsim run`'s bar of requests finished, on a terminal only (elsewhere nothing is drawn
    and the engine is not called back)."""
    return _progress(f"{workload.name}, requests finished", auto_refresh=False)

