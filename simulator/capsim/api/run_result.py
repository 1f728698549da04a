"""One run's result: its summary, the requests and step tables (built when first used) and the
files `capsim run --out` writes, plus a fingerprint of everything it produced."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from capsim.api.setup import Setup
from capsim.results.csv_out import Column, Labels, as_dataframe, write_parts, write_table
from capsim.results.steady import Window
from capsim.results.summary import BOUND_NAMES, REQUEST_TEXT_COLUMNS, Gaps
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

    def summary_json(self, provenance: bool = False) -> str:
        """The summary as JSON; with `provenance` (summary.json, --json) also where it came from
        (capsim.results.provenance: version, date, inputs), which differs between reruns."""
        data = self.summary | {"provenance": self.provenance} if provenance else self.summary
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

    def write(self, out_dir: Path) -> list[Path]:
        """summary.json, requests.csv, steps.csv (one row per forward pass, or per macro-step for
        very large runs: then the file starts with a '#' line saying so, and the table is written
        a chunk of macro-steps at a time, never held whole) under out_dir. The CSVs are the text
        pandas' to_csv writes for these tables (capsim.results.csv_out)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / "summary.json", out_dir / "requests.csv", out_dir / "steps.csv"]
        paths[0].write_text(self.summary_json(provenance=True))
        with open(paths[1], "w", newline="") as fh:
            write_table(self._request_table(), fh)
        with open(paths[2], "w", newline="") as fh:
            if self.steps_per_row:
                fh.write("# capsim: one row per macro-step (its last pass's state; duration, tokens, FLOPs and "
                         "bytes summed over the `steps` forward passes it holds)" + os.linesep)
            write_parts(self._step_parts(), fh, STEP_COLUMNS + (("steps",) if self.steps_per_row else ()))
        return paths

def step_table(columns: Callable[[], dict[str, np.ndarray]]) -> dict[str, Column]:
    """The step log's columns with `bound` as names (steps.csv)."""
    return _bound_named(columns())

def step_parts(parts: Callable[[], Iterable[dict[str, np.ndarray]]]) -> Iterator[dict[str, Column]]:
    """The same rows a part at a time (a large run's steps.csv is written as it is made)."""
    return map(_bound_named, parts())

def _bound_named(table: dict[str, np.ndarray]) -> dict[str, Column]:
    return {**table, "bound": Labels(table["bound"], BOUND_NAMES)}
