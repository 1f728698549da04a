"""What the command modules share: the two consoles, the option types several commands take, and
the small steps every command repeats (objectives, prices, output folders, progress bars, the
'wrote ...' line).

Everything heavier than Typer and rich is imported inside the helper that needs it: `capsim run`
loads this module, and its start-up time counts. No `from __future__ import annotations` in cli/:
Typer reads every command's parameters at each start, and string annotations made it eval about
500 of them (40-50 ms of every `capsim run`).
"""

import contextlib
import functools
import inspect
import math
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from capsim.errors import CapsimError

# Off a terminal Rich would wrap everything at 80 columns, splitting a table's names and numbers
# over lines; piped or redirected, a table prints at its natural width instead, one row a line.
_PIPE_WIDTH = 10_000


def _console(stream, **kw) -> Console:
    # No console markup: every message capsim prints is plain text (an install hint's '[dask]', a
    # workload named '[x]' print as written); the few styled words are Text objects.
    width = None if stream.isatty() else _PIPE_WIDTH
    return Console(markup=False, width=width, **kw)


out = _console(sys.stdout)
err = _console(sys.stderr, stderr=True)


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


def _figures(res):
    """Draws a planning result's figures into a folder; matplotlib loads only when one is asked for."""
    def draw(folder: Path) -> list[Path]:
        from capsim.report.planning_figures import plot_result

        return plot_result(res, folder)

    return draw


def _goals(workload, slo: list[str] | None, share: float | None):
    """The objectives a run is judged against: --slo, else the workload's slo: block (the workload
    a file path or a composed config)."""
    from capsim.api import load_workload
    from capsim.results.slo import objectives_for

    w = load_workload(workload) if isinstance(workload, (str, Path)) else workload
    return objectives_for(w, slo, share)


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


# --------------------------------------------------------------------------------------------
# The set-up options: one definition that `run`, `compare`, `sweep` and `capacity` all take
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SetupOption:
    """One set-up option: a workload field (or a way of saying one) as a flag."""

    name: str  # the parameter's and the workload override's name
    kind: type  # the value's type (int, float, str, bool)
    decls: tuple[str, ...]  # the flag names ('--kv-cache'; a bool as '--x/--no-x')
    help: str  # the --help text
    new: bool = False  # only a composed workload carries it (not one of capsim.api's run overrides)


_ARRIVALS_HELP = "poisson | gamma | constant | all_at_once | closed_loop (default: closed_loop with --users, " \
    "poisson with --rate, gamma with --burstiness)"
_LENGTHS_HELP = ("length distribution: 2000 (fixed), uniform:LO:HI, normal:MEAN:STD, lognormal:MEAN:SIGMA (both "
                 "may add :MIN:MAX), empirical:V1,V2,... or V1=W1,..., sequence:V1,V2,...")
SETUP_OPTIONS = (
    SetupOption("model", str, ("--model",), "model: a catalogue name (see `capsim models`) or a Hugging Face "
                "config.json path"),
    SetupOption("gpu", str, ("--gpu",), "GPU name or profile YAML (see `capsim gpus`)"),
    SetupOption("weights", str, ("--weights",), "weight format, e.g. bf16, fp8, q4_k_m"),
    SetupOption("kv_cache", str, ("--kv-cache",), "KV-cache format, e.g. fp16, fp8, q8_0, tbq4"),
    SetupOption("engine", str, ("--engine",), "serving-engine profile: vllm, sglang, trt-llm, llama.cpp (see "
                "`capsim engines`)"),
    SetupOption("tp", int, ("--tp",), "tensor-parallel GPUs per replica"),
    SetupOption("pp", int, ("--pp",), "pipeline stages per replica (docs/shapes.md)"),
    SetupOption("ep", int, ("--ep",), "expert-parallel ranks per replica of a MoE model (docs/shapes.md)"),
    SetupOption("replicas", int, ("--replicas",), "copies of the server behind a router"),
    SetupOption("router", str, ("--router",), "round_robin | least_outstanding | least_kv"),
    SetupOption("scheduler", str, ("--scheduler",), "static | continuous | chunked | prefill_first"),
    SetupOption("allocator", str, ("--allocator",), "paged | contiguous"),
    SetupOption("max_num_seqs", int, ("--max-num-seqs",), "batch cap (sequences per step)"),
    SetupOption("max_num_batched_tokens", int, ("--max-num-batched-tokens",), "token budget per step"),
    SetupOption("num_gpu_blocks", int, ("--num-gpu-blocks",), "override the computed KV capacity, in blocks"),
    SetupOption("max_model_len", int, ("--max-model-len",), "longest request, tokens (default: the model's "
                "context length)", new=True),
    SetupOption("gpu_memory_utilization", float, ("--gpu-memory-utilization",), "share of GPU memory the server "
                "uses (default 0.9, or the engine's)", new=True),
    SetupOption("preemption", str, ("--preemption",), "recompute | swap"),
    SetupOption("prefix_caching", bool, ("--prefix-caching/--no-prefix-caching",), "reuse cached KV of shared "
                "prefixes"),
    SetupOption("mode", str, ("--mode",), "cost model: realistic | document | unit"),
    SetupOption("rate", float, ("--rate",), "arrival rate, requests/s"),
    SetupOption("users", int, ("--users",), "closed-loop users (each sends, waits for the answer, thinks, sends again)",
                new=True),
    SetupOption("think_time_s", float, ("--think-time-s", "--think-time"), "users' mean think time between "
                "requests, s", new=True),
    SetupOption("arrivals", str, ("--arrivals",), _ARRIVALS_HELP, new=True),
    SetupOption("burstiness", float, ("--burstiness",), "gamma arrivals' shape, vLLM's --burstiness (< 1: burstier "
                "than Poisson)", new=True),
    SetupOption("prompt_tokens", str, ("--prompt-tokens",), "prompt " + _LENGTHS_HELP, new=True),
    SetupOption("output_tokens", str, ("--output-tokens",), "output " + _LENGTHS_HELP, new=True),
    SetupOption("shared_prefix_tokens", int, ("--shared-prefix-tokens",), "a system prompt of this many tokens in "
                "front of every prompt", new=True),
    SetupOption("samples", int, ("--samples",), "parallel sampling (n): answers per request", new=True),
    SetupOption("requests", int, ("--requests",), "number of requests (replaces the workload's requests and "
                "duration_s; without a file the default is 1000, or 10 per user if more)"),
    SetupOption("duration_s", float, ("--duration-s",), "or: send requests for this many seconds", new=True),
    SetupOption("horizon_s", float, ("--horizon",), "stop the clock at this many seconds"),
    SetupOption("seed", int, ("--seed",), "random seed"),
    SetupOption("name", str, ("--name",), "the workload's name in results (default: the file's, or "
                "'command-line')", new=True),
    SetupOption("set", str, ("--set",), "any other workload field, KEY=VALUE with the key dotted as in the file "
                "(repeatable): --set scheduler.watermark=0.02 --set measure.whole_run=true", new=True),
)
# Options every command takes more than once (--set), and those the planning commands may repeat
# to compare set-ups (one row, or one capacity search, per combination).
_ALWAYS_LISTS = ("set",)
COMPARE_GRID = ("gpu", "model", "weights", "kv_cache", "scheduler", "allocator")
CAPACITY_GRID = ("gpu", "kv_cache", "weights")


def _annotation(option: SetupOption, repeatable: bool):
    kind = list[option.kind] if repeatable else option.kind  # type: ignore[valid-type]
    help_text = option.help + (" (repeatable)" if repeatable and option.name not in _ALWAYS_LISTS else "")
    parser = finite_float if option.kind is float else None
    return Annotated[Optional[kind], typer.Option(*option.decls, help=help_text, parser=parser,
                                                  rich_help_panel="Set-up (instead of or over the workload file)")]


def setup_options(grid: tuple[str, ...] = (), axes: tuple[str, ...] = ()):
    """Decorator: the command takes every set-up option (SETUP_OPTIONS) as a flag, the names in
    `grid` repeatable, those in `axes` left out (the command varies that load itself and has its
    own option of that name), and receives them gathered as one dict, `setup` (None: not given).

    One definition keeps `run` and the planning commands in step: a new workload field becomes a
    flag of every command at once (tests/cli/test_setup_options.py checks they agree)."""
    def wrap(command):
        options = [o for o in SETUP_OPTIONS if o.name not in axes]
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != "setup"]
        added = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=_annotation(o, o.name in grid or o.name in _ALWAYS_LISTS))
                 for o in options]

        @functools.wraps(command)
        def with_setup(**kwargs):
            setup = {o.name: kwargs.pop(o.name, None) for o in options}
            return command(setup=setup, **kwargs)

        with_setup.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
        with_setup.__annotations__ = {p.name: p.annotation for p in own + added}
        return with_setup

    return wrap


@dataclass
class Workload:
    """What a command runs: the workload (a file path, or a config composed from the flags) and
    the run overrides that go with it (capsim.api.simulate's keyword arguments)."""

    workload: object  # a Path (the file as given) or a WorkloadConfig
    overrides: dict  # run overrides (capsim.api.OVERRIDABLE names), the given ones only
    label: str  # how progress bars name it
    grid: dict  # the repeated options a planning command varies, name -> values
    command: str = ""  # the file and set-up flags as a next command repeats them (next_command_source)


def workload_for(path: Path | None, setup: dict, slo: list[str] | None = None, share: float | None = None,
                 load: dict | None = None, grid: tuple[str, ...] = ()) -> Workload:
    """The workload a command runs, from its file (or none) and its set-up flags (capsim.workload.flags.
    compose). A file with only the classic run overrides runs as before; anything else composes a
    config with every flag written in (and the --slo objectives as its slo: block). A repeated
    `grid` option is left to the command (its first value stands in the composed config)."""
    from capsim.api import OVERRIDABLE
    from capsim.workload.flags import compose
    from capsim.workload.names import check_names

    given = {k: v for k, v in setup.items() if v is not None and v != []}
    if load is not None:  # a command that varies the load applies the think time to each point itself
        given.pop("think_time_s", None)
    single = {k: (v[0] if k in grid else v) for k, v in given.items()}
    new = [o.name for o in SETUP_OPTIONS if o.new and o.name in given]
    overrides = {k: v for k, v in single.items() if k in OVERRIDABLE and k not in grid}
    axes = {k: v for k, v in given.items() if k in grid}
    hf_model = str(single.get("model", "")).endswith(".json") and len(axes.get("model", ())) < 2
    # Several compared models stay as given (a config.json as its path, which capsim.spec.catalog.
    # load_model reads in each task); one config.json is read here and written into the config.
    command = next_command_source(path, given)
    if path is not None and not new and not hf_model:
        _check_names(path, overrides, tuple(axes))
        return Workload(path, overrides, path.name, axes, command)
    base, source = None, "the command-line workload"
    if path is not None:
        from capsim.api import load_workload

        w = load_workload(path)
        base = w.model_dump(exclude_unset=True)
        base.setdefault("name", w.name or path.stem)
        source = f"{path} (with command-line options)"
    elif "name" not in single:
        single["name"] = "command-line"
    if hf_model:
        single["model"] = _model(single["model"])
    slo_block = _slo_block(slo, share, base)
    w = compose(base, single, source, load, slo_block)
    check_names(w, source, tuple(axes))
    # Everything is in the config now; only --requests stays an override, as the planning commands
    # read a given request count as "keep this length" (capacity probes otherwise size their own).
    # A composed config holds each option given once, so only options repeated are varied.
    return Workload(w, {k: v for k, v in overrides.items() if k == "requests"}, w.name or "command-line",
                    {k: v for k, v in axes.items() if len(v) > 1}, command)


def next_command_source(path: Path | None, given: dict) -> str:
    """The workload as a next-step command (`capsim capacity ...`) names it: the file, then every
    set-up flag given, shell-quoted, less --rate and --users (the load a capacity search varies);
    without a file the flags alone say it all, so the command runs as printed."""
    import shlex

    from capsim.errors import short_path

    words = [short_path(path)] if path is not None else []
    for option in SETUP_OPTIONS:
        value = given.get(option.name)
        if value is None or option.name in ("rate", "users"):
            continue
        if option.kind is bool:
            on, _, off = option.decls[0].partition("/")
            words.append(on if value else off)
            continue
        for item in value if isinstance(value, list) else [value]:
            words += [option.decls[0], f"{item:g}" if isinstance(item, float) else str(item)]
    return " ".join(shlex.quote(w) for w in words)


def _model(name: str):
    """A --model value: a catalogue name as given, or the spec a Hugging Face config.json describes."""
    if not str(name).endswith(".json"):
        return name
    from capsim.spec.hf_config import model_from_hf_config

    return model_from_hf_config(Path(name))


def _check_names(path: Path, overrides: dict, skip: tuple[str, ...]) -> None:
    """Every unknown name in a file (with its overrides) reported at once, before anything runs."""
    from capsim.api import apply_overrides, load_workload
    from capsim.errors import short_path
    from capsim.workload.names import check_names

    w = load_workload(path)
    source = short_path(path)
    check_names(apply_overrides(w, source, **overrides) if overrides else w, source, skip)


def _slo_block(slo: list[str] | None, share: float | None, base: dict | None) -> dict | None:
    """The --slo objectives (and --goodput-share) as a workload slo: block (None: keep the file's)."""
    if not slo and share is None:
        return None
    from capsim.results.slo import parse_objectives

    if not slo:  # only a share: it changes the file's goodput block, if it has one
        old = dict((base or {}).get("slo") or {})
        if "goodput" not in old:
            return None
        return old | {"goodput": {**old["goodput"], "min_share": share}}
    goals = parse_objectives(slo, goodput_share=share)
    block: dict = {}
    if goals.limits_ms:
        block["limits"] = dict(goals.limits_ms)
    if goals.goodput_ms:
        block["goodput"] = {f"{m}_ms": v for m, v in goals.goodput_ms.items()} | {"min_share": goals.goodput_share}
    return block
