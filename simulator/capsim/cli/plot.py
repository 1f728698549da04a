"""`capsim plot`: the figures of a saved run, sweep, compare or capacity search, redrawn from the
CSV or Parquet tables and JSON files its --out folder holds."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import SloOpt, _outputs, _wrote, err
from capsim.errors import CapsimError, quote


def plot(
    run_dir: Annotated[Path, typer.Argument(help="a directory written by run/sweep/compare/capacity --out")],
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="where to write the figures (default RUN_DIR/plots; "
                                                    "replaced whole)")] = None,
    slo: SloOpt = None,
) -> None:
    """Redraw the figures of a saved run (latency CDFs, KV memory with its waste band, batch size,
    and for runs of at most 200 requests the slot Gantt) or of a saved sweep, compare or capacity
    search, from its CSV/JSON files alone. SLO lines: --slo if given, else the objectives the run
    was judged by (saved in summary.json, sweep.json, capacity.json)."""
    from capsim.report.planning_figures import plot_saved
    from capsim.results.slo import parse_objectives

    goals = parse_objectives(slo)
    if not run_dir.is_dir():
        raise CapsimError(f"{quote(str(run_dir), 120)}: not a folder; give the folder a run, sweep, compare or capacity "
                          "search wrote with --out.")
    outputs = _outputs("plots", None, out_dir or run_dir / "plots", option="--out")
    _wrote(outputs.save(lambda folder: [], lambda folder: plot_saved(run_dir, folder, goals)))
    _no_steps_note(run_dir)


def _no_steps_note(run_dir: Path) -> None:
    """Say which figures a run folder without a step table could not give."""
    from capsim.results.table_files import find_table

    if (run_dir / "summary.json").is_file() and find_table(run_dir, "steps") is None:
        err.print(f"note: {run_dir} has no step table (the run was written without --steps): the KV memory, batch "
                  "size and slot figures need it; rerun with `capsim run ... --out DIR --steps`.",
                  highlight=False, soft_wrap=True)

