"""What the command modules share: the two consoles, the option types several commands take, and
the small steps every command repeats (objectives, prices, output folders, progress bars, the
'wrote ...' line).

Everything heavier than Typer and rich is imported inside the helper that needs it: `capsim run`
loads this module, and its start-up time counts. No `from __future__ import annotations` in cli/:
Typer reads every command's parameters at each start, and string annotations made it eval about
500 of them (40-50 ms of every `capsim run`).
"""

import contextlib
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

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
