"""`capsim run`'s file options (--steps, --format, --trace and its limits), checked before the
run starts so that a missing extra or a bad path costs no simulation."""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from capsim.cli.common import err
from capsim.errors import CapsimError, short_path


# --trace-events' default: a trace of this many events opens quickly in ui.perfetto.dev.
TRACE_EVENTS = 200_000


@dataclass(frozen=True)
class RunFiles:
    """What `capsim run` writes besides its --out folder's summary and requests table."""

    table_format: str  # "csv" or "parquet": the --out tables' format
    steps: bool  # write the step table (one row per forward pass) into --out
    trace: Optional[Path]  # the Chrome/Perfetto trace file, or None
    trace_events: int  # the trace's event limit
    trace_seconds: Optional[float]  # the trace's simulated-time limit, or None
    trace_in_out: bool = False  # the trace goes into the --out folder (listed in its manifest)

    @classmethod
    def checked(cls, table_format: str, steps: bool, trace: Optional[Path], trace_events: int,
                trace_seconds: Optional[float], out_dir: Optional[Path]) -> "RunFiles":
        from capsim.results.table_files import check_format

        check_format(table_format)
        if out_dir is None and (steps or table_format != "csv"):
            raise CapsimError(f"{'--steps' if steps else '--format'} says what --out writes, and no --out folder was "
                              "given; add --out DIR.")
        if trace is None and (trace_seconds is not None or trace_events != TRACE_EVENTS):
            raise CapsimError(f"{'--trace-seconds' if trace_seconds is not None else '--trace-events'} limits the "
                              "--trace file, and no --trace was given; add --trace FILE (e.g. trace.json).")
        if trace is not None and trace.is_dir():
            raise CapsimError(f"--trace {short_path(trace)}: is a folder; give the trace file's name, e.g. trace.json.")
        if trace_seconds is not None and trace_seconds <= 0:
            raise CapsimError(f"--trace-seconds {trace_seconds:g}: give a positive number of simulated seconds.")
        in_out = trace is not None and out_dir is not None and _inside(trace, out_dir)
        return cls(table_format, steps, trace, trace_events, trace_seconds, in_out)

    def write(self, result, folder: Path) -> list:
        """The run's --out files (RunResult.write) in the chosen format, and the trace when it
        goes into the --out folder (written with it, so the folder's manifest lists it)."""
        paths = result.write(folder, table_format=self.table_format, steps=self.steps)
        if self.trace_in_out:
            self._write_trace(result, folder / self.trace.name, self.trace)
            paths.append(folder / self.trace.name)
        return paths

    def write_trace(self, result) -> None:
        """The trace file, if asked for and not inside the --out folder, and a line on stderr
        saying what it holds."""
        if self.trace is not None and not self.trace_in_out:
            try:
                self.trace.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CapsimError(f"--trace {short_path(self.trace)}: cannot make its folder ({exc.strerror or exc})."
                                  ) from None
            self._write_trace(result, self.trace, self.trace)

    def _write_trace(self, result, path: Path, shown: Path) -> None:
        from capsim.results.trace import TraceLimits

        try:
            info = result.write_trace(path, TraceLimits(self.trace_events, self.trace_seconds))
        except OSError as exc:
            raise CapsimError(f"--trace {short_path(shown)}: cannot write it ({exc.strerror or exc}).") from None
        cut = info["cut"]
        held = f"{info['events']:,} events, {info['passes']:,} passes, {info['requests']:,} requests"
        err.print(f"trace {shown}: {held}" + (f"; stops at {cut['at_s']:.3f} s: {cut['why']}" if cut else ""),
                  highlight=False, soft_wrap=True)


# What a run's --out folder holds besides a trace, so a trace put there must be named otherwise.
_OUT_NAMES = ("summary.json", "requests.csv", "steps.csv", "requests.parquet", "steps.parquet", "seeds.csv",
              "confidence.csv", "capsim-output.json", "plots")


def _inside(trace: Path, out_dir: Path) -> bool:
    """Whether the trace goes into the --out folder: only at its top and under a name of its own."""
    trace, out_dir = trace.absolute(), out_dir.absolute()
    if trace == out_dir:
        raise CapsimError(f"--trace {short_path(trace)}: the --out folder itself; give the trace a file name, at the "
                          "folder's top (DIR/trace.json) or outside it.")
    if trace.parent == out_dir:
        if trace.name in _OUT_NAMES:
            raise CapsimError(f"--trace {short_path(trace)}: the --out folder's own {trace.name} has that name; "
                              "name the trace otherwise, e.g. trace.json.")
        return True
    if out_dir in trace.parents:
        raise CapsimError(f"--trace {short_path(trace)}: inside a folder of --out {short_path(out_dir)}, which is "
                          "written whole; put the trace at its top (DIR/trace.json) or outside it.")
    return False
