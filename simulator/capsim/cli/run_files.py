"""`capsim run`'s file options (--steps, --format, --trace and its limits), checked before the
run starts so that a missing extra or a bad path costs no simulation."""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from capsim.cli.common import err
from capsim.errors import CapsimError, short_path


@dataclass(frozen=True)
class RunFiles:
    """What `capsim run` writes besides its --out folder's summary and requests table."""

    table_format: str  # "csv" or "parquet": the --out tables' format
    steps: bool  # write the step table (one row per forward pass) into --out
    trace: Optional[Path]  # the Chrome/Perfetto trace file, or None
    trace_events: int  # the trace's event limit
    trace_seconds: Optional[float]  # the trace's simulated-time limit, or None

    @classmethod
    def checked(cls, table_format: str, steps: bool, trace: Optional[Path], trace_events: int,
                trace_seconds: Optional[float], has_out: bool) -> "RunFiles":
        from capsim.results.table_files import check_format

        check_format(table_format)
        if not has_out and (steps or table_format != "csv"):
            raise CapsimError(f"{'--steps' if steps else '--format'} says what --out writes, and no --out folder was "
                              "given; add --out DIR.")
        if trace is not None and trace.is_dir():
            raise CapsimError(f"--trace {short_path(trace)}: is a folder; give the trace file's name, e.g. trace.json.")
        if trace_seconds is not None and trace_seconds <= 0:
            raise CapsimError(f"--trace-seconds {trace_seconds:g}: give a positive number of simulated seconds.")
        return cls(table_format, steps, trace, trace_events, trace_seconds)

    def write(self, result, folder: Path) -> list:
        """The run's --out files (RunResult.write) in the chosen format."""
        return result.write(folder, table_format=self.table_format, steps=self.steps)

    def write_trace(self, result) -> None:
        """The trace file, if asked for, and a line on stderr saying what it holds."""
        if self.trace is None:
            return
        from capsim.results.trace import TraceLimits

        self.trace.parent.mkdir(parents=True, exist_ok=True)
        info = result.write_trace(self.trace, TraceLimits(self.trace_events, self.trace_seconds))
        cut = info["cut"]
        held = f"{info['events']:,} events, {info['passes']:,} passes, {info['requests']:,} requests"
        err.print(f"wrote {self.trace} ({held}" + (f"; stops at {cut['at_s']:.3f} s: {cut['why']})" if cut else ")"),
                  highlight=False, soft_wrap=True)
