"""`--report FILE.html`, which run, sweep, compare and capacity share: the option, the check made
before any simulation (plotly installed, the path a file outside the output folders; the same
check serves --save-workload), and the writing of the report once the result is in
(capsim.report.html_report)."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.errors import CapsimError, short_path

ReportOpt = Annotated[Optional[Path], typer.Option(
    "--report", help="also write a self-contained HTML report here (set-up, verdict, tables, interactive charts; "
    "opens offline; needs the 'report' extra: pip install 'capsim[report]')")]


def check_report(path: Optional[Path], out_dir: Optional[Path] = None, plots: Optional[Path] = None) -> None:
    """Refuse a --report that could not be written, before the work starts."""
    if path is None:
        return
    from capsim.report.html_charts import require_plotly

    require_plotly()
    check_output_file("--report", path, "report.html", out_dir, plots)


def check_output_file(option: str, path: Optional[Path], example: str, *folders: Optional[Path]) -> None:
    """Refuse, before the work starts, a file option (--report, --save-workload) whose path is a
    folder, lies below a file, or is (or lies inside) one of the command's output `folders`
    (--out, --plots): those are written whole, replacing what is there, so a file put there
    would be lost or would overwrite one of theirs."""
    if path is None:
        return
    target = Path(path).absolute()
    if target.is_dir():
        raise CapsimError(f"{option} {short_path(path)}: is a folder; give a file name such as {example}.")
    blocker = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise CapsimError(f"{option} {short_path(path)}: {short_path(blocker)} is a file, not a folder; give a path "
                          "in a folder that exists or can be created.")
    from capsim.results.out_folder import check_writable

    check_writable(target, option, "a path that can be created and written")
    for folder in folders:
        if folder is not None and Path(folder).absolute() == target:
            raise CapsimError(f"{option} {short_path(path)}: the same path as another of the command's outputs; give "
                              f"each its own name (e.g. {example}).")
        if folder is not None and Path(folder).absolute() in target.parents:
            raise CapsimError(f"{option} {short_path(path)}: inside the output folder {short_path(folder)}, which is "
                              f"written whole; put the file outside it (e.g. {example} beside it).")


def check_files_apart(files: dict[str, Optional[Path]]) -> None:
    """Refuse two file options on one path, or one inside the other: the first written would be
    overwritten, or would create (or be) the folder the other is then refused at."""
    given = [(option, path, Path(path).absolute()) for option, path in files.items() if path is not None]
    for i, (option_a, a, abs_a) in enumerate(given):
        for option_b, b, abs_b in given[i + 1:]:
            if abs_a == abs_b:
                raise CapsimError(f"{option_b} {short_path(b)}: the same file as {option_a}; give each its own name.")
            if abs_a in abs_b.parents or abs_b in abs_a.parents:
                raise CapsimError(f"{option_a} {short_path(a)} and {option_b} {short_path(b)}: one lies inside the "
                                  "other, but both are files; give each its own name.")


def write_report(path: Optional[Path], result, goals=None) -> list[Path]:
    """Write the report when --report was given; the paths written (for the 'wrote' line)."""
    if path is None:
        return []
    from capsim.report.html_report import write_report as write

    return [write(path, result, goals)]
