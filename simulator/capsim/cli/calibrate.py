"""`capsim calibrate`: time kernels (or whole forward passes) on this machine through
capsim.harness, fit or check the cost model, and write a calibrated hardware profile. torch loads
only inside the harness, when the command runs."""

import contextlib
from pathlib import Path
from typing import Annotated, Optional

import typer

from capsim.cli.common import _wrote, err, finite_float, out
from capsim.errors import CapsimError
from capsim.report.console import dict_table


def calibrate(
    device: Annotated[str, typer.Option(help="cpu | cuda")] = "cuda",
    backend: Annotated[Optional[str], typer.Option(help="attention kernel: triton | flex | sdpa | flash (kernel grid; default triton); triton | sdpa | flashinfer (--forward; default triton on cuda, sdpa on cpu)")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="where the profile and its raw data go (a new or empty folder, "
                                          "or an earlier calibration's, replaced whole)")] = Path("calibration"),
    quick: Annotated[bool, typer.Option(help="a smaller grid (a few minutes on a GPU)")] = False,
    deadline_s: Annotated[Optional[float], typer.Option(help="stop measuring after this many seconds and fit what is there",
                                                        parser=finite_float)] = None,
    tiny: Annotated[bool, typer.Option(help="a seconds-long grid (smoke test)")] = False,
    base_gpu: Annotated[Optional[str], typer.Option(help="catalogue GPU whose datasheet the profile starts from")] = None,
    check_profile: Annotated[Optional[Path], typer.Option("--check", help="reprint a calibrated profile's held-out errors")] = None,
    forward: Annotated[Optional[str], typer.Option(help="time whole forward passes of this model (catalogue name or model YAML) and compare them with capsim's step times")] = None,
    layers: Annotated[Optional[int], typer.Option(help="--forward: measure the first N layers (default: all)")] = None,
    flashinfer: Annotated[bool, typer.Option(help="--forward: also time FlashInfer's paged attention beside the harness's kernels (skipped, with the reason, where it cannot run)")] = False,
    forward_check: Annotated[Optional[list[Path]], typer.Option("--forward-check", help="compare raw forward rows (forward-*.jsonl) with capsim's step times (repeatable)")] = None,
    gpu: Annotated[Optional[list[str]], typer.Option(help="--forward/--forward-check: hardware profile(s) to price the steps with (repeatable; default: the measured GPU's)")] = None,
    engine: Annotated[Optional[str], typer.Option(help="--forward/--forward-check: engine profile whose kernels price the steps, host time removed (default: none, the bare GPU roofline)")] = None,
) -> None:
    """Time real paged-attention kernels and GEMMs on this machine, fit the cost model, and write
    `<gpu>.calibrated.yaml` (use it with `capsim run --gpu FILE`). With --forward, time whole
    forward passes instead and compare each with capsim's predicted step time. Needs `pip install '.\\[calibrate]'`."""
    import capsim.harness as harness

    if deadline_s is not None and deadline_s <= 0:
        raise CapsimError(f"--deadline-s: must be positive (got {deadline_s}).")
    if forward_check:
        from capsim.results.out_folder import OutputFolder

        folder = OutputFolder(out_dir, "calibrate")
        with folder.writing() as tmp:
            paths = _print_forward_check(forward_check, gpu, engine, tmp)
        _wrote(folder.final(paths, tmp))
        return
    if forward is not None:
        _calibrate_forward(forward, device, backend, out_dir, quick, tiny, deadline_s, layers, flashinfer, gpu, engine)
        return
    if check_profile is not None:
        report = harness.check(check_profile)
        title = f"Held-out errors of {report.profile_path.name} (raw data hash {'matches' if report.sha256_matches else 'DIFFERS'})"
        out.print(dict_table(title, report.table_rows()))
        return
    _calibrate_kernels(device, backend, out_dir, quick, deadline_s, tiny, base_gpu)


def _calibrate_kernels(device: str, backend: Optional[str], out_dir: Path, quick: bool, deadline_s: Optional[float],
                       tiny: bool, base_gpu: Optional[str]) -> None:
    """The kernel grid: measure, fit the cost model, write the calibrated profile and its raw data
    (the points measured before a failure stay in the folder, and the user is told where)."""
    import capsim.harness as harness
    from capsim.results.out_folder import OutputFolder

    folder = OutputFolder(out_dir, "calibrate")
    with _bar() as progress, folder.writing(keep_partial=True) as tmp:
        try:
            result = harness.calibrate(device, backend or "triton", tmp, quick=quick, deadline_s=deadline_s, tiny=tiny,
                                       base_gpu=base_gpu, progress=progress)
        except BaseException:
            if any(f.stat().st_size for f in tmp.glob("*.jsonl")):
                err.print(f"note: the points measured so far are kept in {tmp}", highlight=False, soft_wrap=True)
            raise
    profile, raw = folder.final([result.profile_path, result.raw_data_path], tmp)
    out.print(dict_table("Fit (MAPE %: train, 5-fold, leave-one-group-out)", result.table_rows()))
    note = " (stopped at the deadline)" if result.stopped_at_deadline else ""
    out.print(f"{result.points_measured} of {result.points_planned} points measured in {result.elapsed_s:.0f} s{note}; "
              f"profile: {profile}; raw data: {raw}", highlight=False, soft_wrap=True)
    for name, why in result.skipped_backends.items():
        err.print(f"skipped backend {name}: {why}", highlight=False)


@contextlib.contextmanager
def _bar():
    """A transient progress bar on stderr; yields the harness's progress callback."""
    from rich.progress import Progress

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label[:40])

        yield progress


def _calibrate_forward(model: str, device: str, backend: Optional[str], out_dir: Path, quick: bool, tiny: bool,
                       deadline_s: Optional[float], layers: Optional[int], flashinfer: bool,
                       gpu: Optional[list[str]], engine: Optional[str]) -> None:
    from capsim.harness.forward_run import measure_forward
    from capsim.results.out_folder import OutputFolder

    folder = OutputFolder(out_dir, "calibrate")
    with _bar() as progress, folder.writing(keep_partial=True) as tmp:
        result = measure_forward(model, device, tmp, layers=layers, attention=backend, quick=quick, tiny=tiny,
                                 deadline_s=deadline_s, flashinfer=flashinfer, progress=progress)
        report_paths = _print_forward_check([result.raw_data_path], gpu, engine, tmp)
    raw, *_ = folder.final([result.raw_data_path, *report_paths], tmp)
    note = " (stopped at the deadline)" if result.stopped_at_deadline else ""
    out.print(f"{result.model}, {result.layers} layers: {result.points_measured} of {result.points_planned} steps "
              f"measured ({result.points_failed} failed) in {result.elapsed_s:.0f} s{note}; raw data: {raw}",
              highlight=False, soft_wrap=True)
    for name, why in result.skipped.items():
        err.print(f"skipped {name}: {why}", highlight=False)


def _default_gpu(raw: list[Path]) -> str:
    """The catalogue profile of the GPU the rows were measured on; for CPU rows, h200 (said on stderr)."""
    from capsim.validation.forward import read_rows
    from capsim.harness.profile import find_base

    rows = read_rows(raw[0])
    if rows and rows[0]["device"] == "cuda":
        name = rows[0]["device_name"]
        base = find_base(name, None)
        if base is None:
            raise CapsimError(f"no catalogue profile matches the GPU {name!r} of {raw[0]}: name one with --gpu.")
        return base["name"]
    err.print("measured on a CPU: the steps are priced as on an h200 (--gpu to choose); capsim models GPUs, so a "
              "CPU run checks the plumbing, not the accuracy", highlight=False)
    return "h200"


def _print_forward_check(raw: list[Path], gpus: Optional[list[str]], engine: Optional[str], out_dir: Path) -> list[Path]:
    """Print the forward check of these raw files and write its tables into out_dir (returns the paths)."""
    from capsim.validation.forward import check_forward

    report = check_forward(raw, gpus or [_default_gpu(raw)], engine)
    for title, rows in report.step_tables().items():
        out.print(dict_table(title, rows))
    out.print("err % = predicted / measured - 1; nothing is fitted to these rows.", highlight=False)
    if report.attention:
        out.print(dict_table("Attention alone, one layer (ms)", report.attention))
    out.print(dict_table(f"MAPE per kind (engine: {engine or 'none, the bare GPU roofline'})", report.mape_rows()))
    if report.failed_rows:
        err.print(f"{report.failed_rows} rows had no time (the harness's error is in the raw file)", highlight=False)
    return report.write(out_dir)

