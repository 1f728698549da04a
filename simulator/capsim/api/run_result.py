"""One run's result: its summary, the requests and step tables (built when first used) and the
files `capsim run --out` writes, plus a fingerprint of everything it produced."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from capsim.api.setup import Setup
from capsim.results.csv_out import Column, Labels, as_dataframe
from capsim.results.steady import Window
from capsim.results.summary import BOUND_NAMES, REQUEST_TEXT_COLUMNS, Gaps
from capsim.results.table_files import SUFFIX, check_format, write_table_file
from capsim.results.trace import TraceLimits, write_trace
from capsim.sim.step_log import STEP_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RunResult:
    """One run: its summary, one row per request, and the step table (one row per forward pass;
    for runs of more than step_log.LARGE_RUN_STEPS passes one row per macro-step, with a `steps`
    column). The two tables are built when first used, and `write` writes them from the records'
    columns: a run that only reports its summary or writes its files never imports pandas."""

    setup: Setup
    summary: dict
    gaps: Gaps = field(repr=False)  # inter-token gaps, read in chunks (Gaps.pieces, Gaps.arrays)
    _request_table: Callable[[], dict[str, Column]] = field(repr=False)  # csv_out columns
    _step_table: Callable[[], dict[str, Column]] = field(repr=False)
    _step_parts: Callable[[], Iterable[dict[str, Column]]] = field(repr=False)  # the same rows, a part at a time
    steps_per_row: bool = False  # True when the step table has one row per macro-step (column `steps`)
    _requests: pd.DataFrame | None = field(default=None, repr=False)
    _steps: pd.DataFrame | None = field(default=None, repr=False)
    events: int = 0  # events the engine took (steps or macro-steps, waits, arrival events): its work
    provenance: dict = field(default_factory=dict, repr=False)  # capsim.results.provenance: version, date, inputs
    window: Window | None = field(default=None, repr=False)  # the requests the figures are measured over
    # The engine's PhaseLog columns: a row per prompt chunk (request_id, start_s, end_s, tokens)
    # and per preemption (request_id, at_s); the run trace nests them in each request's lane.
    _chunk_table: Callable[[], dict[str, np.ndarray]] | None = field(default=None, repr=False)
    _preemption_table: Callable[[], dict[str, np.ndarray]] | None = field(default=None, repr=False)

    @property
    def requests(self) -> pd.DataFrame:
        """One row per arrived request (metrics.request_frame's table)."""
        if self._requests is None:
            self._requests = as_dataframe(self._request_table(), text=REQUEST_TEXT_COLUMNS)
        return self._requests

    @property
    def steps(self) -> pd.DataFrame:
        """One row per forward pass (or per macro-step); `bound` as its code into BOUND_NAMES."""
        if self._steps is None:
            self._steps = as_dataframe(self._step_table(), codes=("bound",))
        return self._steps

    @property
    def prefill_chunks(self) -> pd.DataFrame:
        """One row per prompt chunk a pass computed (tokens recomputed after a preemption count):
        request_id, start_s and end_s of the pass, tokens; in the order the passes ended."""
        import pandas as pd

        return pd.DataFrame(self._phase_columns()[0])

    @property
    def preemptions(self) -> pd.DataFrame:
        """One row per preemption: request_id, at_s (the start of the pass whose planning preempted it)."""
        import pandas as pd

        return pd.DataFrame(self._phase_columns()[1])

    def _phase_columns(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        chunks = self._chunk_table() if self._chunk_table else {
            "request_id": np.zeros(0, np.int64), "start_s": np.zeros(0), "end_s": np.zeros(0),
            "tokens": np.zeros(0, np.int64)}
        preemptions = self._preemption_table() if self._preemption_table else {
            "request_id": np.zeros(0, np.int64), "at_s": np.zeros(0)}
        return chunks, preemptions

    def summary_json(self, provenance: bool = False, files: dict | None = None) -> str:
        """The summary as JSON; with `provenance` (summary.json, --json) also where it came from
        (capsim.results.provenance: version, date, inputs), which differs between reruns; with
        `files` (summary.json) which tables the folder holds, in which format."""
        data = self.summary | {"provenance": self.provenance} if provenance else self.summary
        data = data | {"files": files} if files is not None else data
        return json.dumps(data, indent=2, sort_keys=False, allow_nan=True) + "\n"

    def fingerprint(self) -> str:
        """16 hex digits that change when anything the run produced changes: the summary and every
        request and step record. Same inputs and seed give the same fingerprint, compiled or not,
        macro-steps or step by step (tests/test_golden.py pins a few)."""
        import pandas as pd

        digest = hashlib.sha256(json.dumps(self.summary, sort_keys=True, default=str).encode())
        for frame in (self.requests, self.steps):
            digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
        return digest.hexdigest()[:16]

    def write(self, out_dir: Path, table_format: str = "csv", steps: bool = True) -> list[Path]:
        """summary.json, requests.csv and (with `steps`) steps.csv under out_dir, or .parquet
        tables with table_format "parquet" (results.table_files); summary.json's `files` says
        which. The step table has one row per forward pass, or per macro-step for very large runs
        (then its note says so, and it is written a chunk of macro-steps at a time, never held
        whole). The CSVs are the text pandas' to_csv writes for these tables (results.csv_out)."""
        check_format(table_format)
        out_dir.mkdir(parents=True, exist_ok=True)
        suffix = SUFFIX[table_format]
        files = {"format": table_format, "requests": f"requests{suffix}", "steps": f"steps{suffix}" if steps else None}
        summary = out_dir / "summary.json"
        summary.write_text(self.summary_json(provenance=True, files=files))
        requests = self._request_table()
        paths = [summary, write_table_file(out_dir, "requests", [requests], tuple(requests), table_format)]
        if steps:
            note = ("capsim: one row per macro-step (its last pass's state; duration, tokens, FLOPs and bytes summed "
                    "over the `steps` forward passes it holds)") if self.steps_per_row else None
            paths.append(write_table_file(out_dir, "steps", self._step_parts(),
                                          STEP_COLUMNS + (("steps",) if self.steps_per_row else ()), table_format, note))
        return paths

    def write_trace(self, path: Path, limits: TraceLimits = TraceLimits()) -> dict:
        """The run as a Chrome/Perfetto trace (results.trace), written whole to `path`; returns
        what it holds and what was cut (the file's `otherData`)."""
        return write_trace(path, self.summary, self._request_table(), self._step_parts(), limits,
                           self.setup.workload.horizon_s, self._phase_columns())


def step_table(columns: Callable[[], dict[str, np.ndarray]]) -> dict[str, Column]:
    """The step log's columns with `bound` as names (steps.csv)."""
    return _bound_named(columns())

def step_parts(parts: Callable[[], Iterable[dict[str, np.ndarray]]]) -> Iterator[dict[str, Column]]:
    """The same rows a part at a time (a large run's steps.csv is written as it is made)."""
    return map(_bound_named, parts())

def _bound_named(table: dict[str, np.ndarray]) -> dict[str, Column]:
    return {**table, "bound": Labels(table["bound"], BOUND_NAMES)}
