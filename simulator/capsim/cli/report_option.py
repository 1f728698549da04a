"""`--report FILE.html`, which run, sweep, compare and capacity share: the option, the check made
before any simulation (plotly installed, the path not a folder), and the writing of the report
once the result is in (capsim.report.html_report)."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.errors import CapsimError, short_path

ReportOpt = Annotated[Optional[Path], typer.Option(
    "--report", help="also write a self-contained HTML report here (set-up, verdict, tables, interactive charts; "
    "opens offline; needs the 'report' extra: pip install 'capsim[report]')")]


def check_report(path: Optional[Path]) -> None:
    """Refuse a --report that could not be written, before the work starts."""
    if path is None:
        return
    from capsim.report.html_charts import require_plotly

    require_plotly()
    if path.is_dir():
        raise CapsimError(f"--report {short_path(path)}: is a folder; give a file name such as report.html.")


def write_report(path: Optional[Path], result, goals=None) -> list[Path]:
    """Write the report when --report was given; the paths written (for the 'wrote' line)."""
    if path is None:
        return []
    from capsim.report.html_report import write_report as write

    return [write(path, result, goals)]
