"""`capsim run`: one workload on one set-up, printed as vLLM's result block and a verdict (or,
with --seeds, repeated over seeds). Only Typer, rich and the shared helpers load with this module;
the simulator loads when the command runs."""

import os
import secrets
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from capsim.cli.common import (DaskOpt, PercentilesOpt, PlotsOpt, PriceOpt, ShareOpt, SloOpt, WorkersOpt, _dask_warning,
                               Workload, _goals, _outputs, _prices, _progress, _wrote, err, finite_float, out,
                               setup_options, workload_for)
from capsim.cli.report_option import ReportOpt, check_files_apart, check_output_file, check_report, write_report
from capsim.cli.run_files import TRACE_EVENTS
from capsim.errors import CapsimError, short_path


@setup_options()
def run(
    workload: Annotated[Optional[Path], typer.Argument(help="workload YAML (see workloads/); optional: the set-up "
                                                        "flags can say it all (docs/recipes.md)")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="also print the cost model's working for a typical step")] = False,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="write summary.json and requests.csv (with --steps also "
                                                    "steps.csv) here: a new or empty folder, or an earlier run's "
                                                    "(replaced whole); summary.json's `files` lists them")] = None,
    steps: Annotated[bool, typer.Option("--steps", help="with --out, also write the step table (one row per forward "
                                                        "pass: 26 MB of CSV for bench-10k, most of the writing time)")] = False,
    table_format: Annotated[str, typer.Option("--format", help="--out's requests and steps tables as csv or "
                                                               "parquet (typed, compressed, fast; needs the `parquet` "
                                                               "extra)")] = "csv",
    trace: Annotated[Optional[Path], typer.Option("--trace", help="write the run as a Chrome/Perfetto trace (JSON) here: "
                                                  "open it in ui.perfetto.dev (docs/trace.md); with --seeds, the first "
                                                  "seed's run")] = None,
    trace_events: Annotated[int, typer.Option("--trace-events", min=1, help="--trace: at most this many events; "
                                              "the trace stops at the time they run out")] = TRACE_EVENTS,
    trace_seconds: Annotated[Optional[float], typer.Option("--trace-seconds", parser=finite_float,
                                                           help="--trace: only the first this many simulated seconds")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the result block")] = False,
    step_by_step: Annotated[bool, typer.Option(help="no macro-steps: one event per step and per arrival (slower; same results)")] = False,
    slo: SloOpt = None, goodput_share: ShareOpt = None, price_per_hour: PriceOpt = None,
    percentiles: PercentilesOpt = None,
    plots: PlotsOpt = None,
    report: ReportOpt = None,
    seeds: Annotated[Optional[int], typer.Option(help="repeat with N seeds (seed, seed+1, ...): mean ± 95% interval")] = None,
    workers: WorkersOpt = None,
    dask_scheduler: DaskOpt = None,
    save_workload: Annotated[Optional[Path], typer.Option(help="write the workload (the file and the flags together) "
                                                          "as YAML here, then run that file")] = None,
    setup: Optional[dict] = None,
) -> None:
    """Simulate a workload on a GPU and print vLLM's benchmark result block (over the steady
    window), capsim's lines, and a verdict: SLOs met or missed, cost, the binding limit, next
    steps. On a terminal, a progress bar of requests finished is drawn on stderr meanwhile.

    Without a workload file the set-up flags say it all (docs/recipes.md); with one, they change its fields:

    capsim run --model llama-3.1-8b --gpu h100 --users 64 --prompt-tokens 2000 --output-tokens lognormal:300:0.8"""
    from capsim.api import simulate
    from capsim.spec.metric_names import parse_percentiles

    job = workload_for(workload, setup or {}, slo, goodput_share)
    outputs = _outputs("run", out_dir, plots)
    check_report(report, out_dir, plots)
    check_files_apart({"--report": report, "--save-workload": save_workload, "--trace": trace})
    check_output_file("--save-workload", save_workload, "workload.yaml", out_dir, plots)
    files = _run_files(table_format, steps, trace, trace_events, trace_seconds, out_dir, plots)
    if save_workload is not None:
        job = _save_workload(job, save_workload)
    goals, prices, qs = _goals(job.workload, slo, goodput_share), _prices(price_per_hour), parse_percentiles(percentiles)
    if seeds is not None:
        return _run_seeds(job, seeds, workers, dask_scheduler, outputs, as_json, step_by_step, goals, prices, qs,
                          report, files)
    with _progress(f"{job.label}, requests finished", auto_refresh=False) as tick:
        result = simulate(job.workload, macro_steps=not step_by_step, progress=tick, objectives=goals, percentiles=qs,
                          price=prices, command_source=job.command, **job.overrides)
    _notices(result.summary)
    if as_json:
        sys.stdout.write(result.summary_json(provenance=True))
    else:
        _print_result(result)
    if explain:
        from capsim.report.explain import explain_run

        print(explain_run(result))
    _wrote(outputs.save(lambda folder: files.write(result, folder), lambda folder: _run_figures(result, folder, goals)))
    files.write_trace(result)
    _wrote(write_report(report, result, goals))


def _run_files(table_format, steps, trace, trace_events, trace_seconds, out_dir, plots):
    """The files options, checked before the run (format, pyarrow, the trace's path: not a folder,
    not --plots; apart from --report's and --save-workload's files: check_files_apart)."""
    from capsim.cli.run_files import RunFiles

    figures_in_out = plots is not None and out_dir is not None and Path(plots).absolute() == Path(out_dir).absolute()
    separate_plots = None if figures_in_out else plots  # a trace in the --out folder is run_files' to check
    check_output_file("--trace", trace, "trace.json", separate_plots)
    return RunFiles.checked(table_format, steps, trace, trace_events, trace_seconds, out_dir)


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


def _save_workload(job: Workload, path: Path) -> Workload:
    """Writes the workload a run would run (its file with every flag applied) as YAML at `path`,
    whole (a temporary file renamed into place) and only once it resolves; the run then runs that
    file, so that running it again later gives the same results, the next-step commands included."""
    from capsim.api import apply_overrides, load_workload, resolve
    from capsim.workload.flags import workload_yaml

    w = load_workload(job.workload) if isinstance(job.workload, Path) else job.workload
    w = apply_overrides(w, job.label, **job.overrides)
    if not w.name:
        w = w.model_copy(update={"name": job.label.removesuffix(".yaml").removesuffix(".yml")})
    resolve(w, job.label)
    text = "# Written by `capsim run --save-workload`: `capsim run THIS_FILE` runs the same simulation.\n"
    tmp = path.parent / f".{path.name}.partial-{secrets.token_hex(4)}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text + workload_yaml(w), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CapsimError(f"--save-workload {short_path(path)}: cannot write it ({exc.strerror or exc}).") from None
    _wrote([path])
    return Workload(path, {}, path.name, {}, short_path(path))


def _run_seeds(job, seeds, workers, dask_scheduler, outputs, as_json, step_by_step, goals, prices, qs,
               report, files) -> None:
    from capsim.planning.seeds import run_seeds
    from capsim.report.planning_tables import frame_json, rich, seeds_view

    _dask_warning(dask_scheduler)
    with _progress(f"{seeds} seeds") as tick:
        res = run_seeds(job.workload, seeds, workers=workers, dask_scheduler=dask_scheduler, progress=tick,
                        objectives=goals, price=prices, percentiles=qs, macro_steps=not step_by_step,
                        command_source=job.command, **job.overrides)
    _notices(res.first.summary)
    if as_json:
        sys.stdout.write(frame_json(res.table, {"seeds": res.runs["seed"].tolist()}))
    else:
        st = res.first.summary["setup"]
        out.print(rich(f"{st['workload']}: {st['model']} on {st['gpu']}, {seeds} seeds", seeds_view(res.table)))
    _wrote(outputs.save(lambda folder: files.write(res.first, folder) + res.write(folder),
                        lambda folder: _run_figures(res.first, folder, goals)))
    files.write_trace(res.first)
    _wrote(write_report(report, res, goals))

