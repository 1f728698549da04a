"""Sweeps (latency against load) and compares (one row per GPU x format x ... combination).

Both fan their independent simulations out through `capsim.planning.parallel` (a local process pool by
default, or a Dask cluster) and collect one flat record per simulation (`capsim.planning.tasks`), in
task order: the same inputs give the same frames, byte for byte, wherever they ran. With
seeds > 1 each point is repeated with consecutive seeds and reported as mean ± 95% interval
(`capsim.planning.seeds`); SLO verdicts are then taken on the means.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from capsim.planning.seeds import aggregate
from capsim.errors import CapsimError, quote
from capsim.planning.parallel import run_tasks
from capsim.planning.tasks import Task, evaluate, prepare
from capsim.results.slo import Objectives
from capsim.spec.config import validate
from capsim.workload.schema import WorkloadConfig
from capsim.spec.catalog import load_hardware, load_model
from capsim.spec.formats import get_format

MAX_POINTS = 1000
# compare's axes: any of these given as a list becomes one dimension of the grid.
GRID_KEYS = ("gpu", "model", "weights", "kv_cache", "scheduler", "allocator", "max_num_seqs", "mode")


def parse_range(text: str, option: str, integer: bool = False) -> list:
    """'0.5:20:0.5' (start:stop:step, stop included), '1:64' (step 1), '1:64:x2' (x2 each
    step: 1, 2, 4, ... 64), or a list '1,2,4'. Values must be positive; `integer` for users."""
    kind = "whole numbers of users" if integer else "requests/s"
    allowed = (f"{option} {quote(text)}: expected START:STOP:STEP (e.g. 0.5:20:0.5), START:STOP (step 1), "
               f"START:STOP:xFACTOR (e.g. 1:64:x2) or a list (e.g. 1,2,4), with positive {kind}")
    try:
        values = _range_values(text.strip())
    except (ValueError, ZeroDivisionError, OverflowError):
        raise CapsimError(allowed + ".") from None
    except _TooMany as exc:
        raise CapsimError(f"{allowed}; that gives {exc.args[0]:,} points, more than {MAX_POINTS:,}: use a larger step.") from None
    if not values or any(not v > 0 or math.isinf(v) for v in values):
        raise CapsimError(allowed + "; START must not exceed STOP.")
    if integer and any(v != int(v) for v in values):
        raise CapsimError(allowed + f"; got a fraction of a user ({next(v for v in values if v != int(v))}).")
    return [int(v) for v in values] if integer else values


class _TooMany(Exception):
    """A range with more than MAX_POINTS points (args[0]: how many)."""


def _range_values(text: str) -> list[float]:
    if ":" not in text:
        values = [float(v) for v in text.split(",") if v.strip()]
        if len(values) > MAX_POINTS:
            raise _TooMany(len(values))
        return values
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(text)
    start, stop = float(parts[0]), float(parts[1])
    step = parts[2].strip() if len(parts) == 3 else "1"
    if start > stop:
        return []
    if step.lower().startswith("x"):
        factor = float(step[1:])
        if not factor > 1:
            raise ValueError(step)
        n = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
        if n > MAX_POINTS:
            raise _TooMany(n)
        return [float(f"{start * factor**i:.10g}") for i in range(n)]
    size = float(step)
    if not size > 0:
        raise ValueError(step)
    n = math.floor((stop - start) / size + 1e-9) + 1
    if n > MAX_POINTS:
        raise _TooMany(n)
    return [float(f"{start + i * size:.10g}") for i in range(n)]


def with_users(w, users: int, think_time_s: float | None = None):
    """The workload with its arrivals replaced by `users` closed-loop users (think time and
    ramp: the workload's own when it is closed-loop, else `think_time_s` or 0 s, exponential,
    and the default ramp)."""

    data = w.model_dump(exclude_unset=True)
    old = data["arrivals"]
    arrivals = {"kind": "closed_loop", "users": int(users)}
    if old.get("kind") == "closed_loop":
        arrivals.update({k: v for k, v in old.items() if k in ("think_time_s", "think_time_dist", "ramp_s")})
    if think_time_s is not None:
        arrivals["think_time_s"] = think_time_s
    data["arrivals"] = arrivals
    return validate(WorkloadConfig, data, f"{w.name or 'workload'} with {users} closed-loop users")


@dataclass
class SweepResult:
    """`frame`: one row per load point (means over seeds when seeds > 1); `runs`: one row per
    simulation; `over`: the load column ('rate_per_s' or 'users')."""

    frame: pd.DataFrame
    runs: pd.DataFrame
    over: str
    objectives: Objectives

    def write(self, out_dir: Path) -> list[Path]:
        """sweep.csv, sweep.json (with the objectives), and runs.csv when seeds > 1."""
        return write_frames(Path(out_dir), "sweep", self.frame, self.runs,
                            {"over": self.over, "objectives": self.objectives.as_dict()})


def sweep(workload, *, rates: list[float] | None = None, users: list[int] | None = None,
          think_time_s: float | None = None, seeds: int = 1, objectives: Objectives | None = None,
          price=None, workers: int | None = None, dask_scheduler: str | None = None, progress=None,
          **overrides) -> SweepResult:
    """Latency against load: one simulation per request rate (open loop) or per number of
    closed-loop users, each with the same seed(s), run in parallel."""
    if (rates is None) == (users is None):
        raise CapsimError("sweep: give --rate START:STOP:STEP or --users START:STOP, one of the two.")
    if seeds < 1:
        raise CapsimError(f"--seeds: must be at least 1 (got {seeds}).")
    objectives = objectives or Objectives()
    w, given = prepare(workload, overrides, check=False)
    base_seed = given.pop("seed", w.seed)
    over = "rate_per_s" if rates is not None else "users"
    tasks = []
    for x in rates if rates is not None else users:
        wx, ox = (w, given | {"rate": x}) if rates is not None else (with_users(w, x, think_time_s), dict(given))
        if not tasks:
            prepare(wx, ox)  # fail fast on a bad set-up, before anything runs
        tasks += [Task(wx, ox | {"seed": base_seed + i}, {over: x}, objectives, price) for i in range(seeds)]
    records = run_tasks(evaluate, tasks, workers=workers, dask_scheduler=dask_scheduler, progress=progress)
    runs = pd.DataFrame(records)
    frame = runs if seeds == 1 else aggregate(runs, [over])
    return SweepResult(judge(frame, objectives), runs, over, objectives)


def judge(frame: pd.DataFrame, objectives: Objectives) -> pd.DataFrame:
    """Add slo_met and slo_failures columns when there are objectives (a saturated row never meets
    them: capsim.results.slo.Objectives.checks)."""
    if objectives.empty or frame.empty:
        return frame
    failures = [objectives.failures(row) if pd.notna(row.get("completed")) else ["not run"]
                for row in frame.to_dict("records")]
    frame = frame.copy()
    frame["slo_met"] = [not f for f in failures]
    frame["slo_failures"] = ["; ".join(f) for f in failures]
    return frame


@dataclass
class CompareResult:
    """`frame`: one row per combination (means over seeds when seeds > 1), with a `problem`
    column for combinations that could not be set up; `runs`: one row per simulation."""

    frame: pd.DataFrame
    runs: pd.DataFrame
    axes: list[str]
    objectives: Objectives

    def write(self, out_dir: Path) -> list[Path]:
        """compare.csv, compare.json, and runs.csv when seeds > 1."""
        return write_frames(Path(out_dir), "compare", self.frame, self.runs,
                            {"axes": self.axes, "objectives": self.objectives.as_dict()})


COMPARE_FIRST = ("kv_capacity_tokens", "mean_request_tokens", "max_seqs_at_mean_request", "max_seqs_at_max_model_len",
                 "request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                 "p99_tpot_ms", "kv_utilisation", "kv_capacity_utilisation", "saturated", "gpus", "usd_per_hour",
                 "usd_per_m_output_tokens", "usd_per_m_total_tokens", "cost_at_load")


def compare(workload, *, seeds: int = 1, objectives: Objectives | None = None, price=None,
            workers: int | None = None, dask_scheduler: str | None = None, progress=None,
            **options) -> CompareResult:
    """One simulation per combination of the list-valued options (e.g. gpu=[...], kv_cache=[...]);
    scalar options apply to all. A combination that cannot be set up (weights do not fit) gets a
    row with the reason in `problem`; if none can, the first reason is raised."""
    if seeds < 1:
        raise CapsimError(f"--seeds: must be at least 1 (got {seeds}).")
    objectives = objectives or Objectives()
    axes = [k for k, v in options.items() if isinstance(v, (list, tuple))]
    bad = [k for k in axes if k not in GRID_KEYS]
    if bad:
        raise CapsimError(f"compare: {', '.join(bad)} cannot vary; the grid axes are {', '.join(GRID_KEYS)}.")
    fixed = {k: v for k, v in options.items() if k not in axes}
    w, given = prepare(workload, fixed, check=False)
    base_seed = given.pop("seed", w.seed)
    combos = [dict(zip(axes, values)) for values in itertools.product(*(options[k] for k in axes))]
    problems = [_problem(w, given | combo) for combo in combos]
    if combos and all(problems):
        raise CapsimError(problems[0])
    tasks = [Task(w, given | combo | {"seed": base_seed + i}, {"combination": n} | combo, objectives, price)
             for n, (combo, problem) in enumerate(zip(combos, problems)) if problem is None for i in range(seeds)]
    runs = pd.DataFrame(run_tasks(evaluate, tasks, workers=workers, dask_scheduler=dask_scheduler, progress=progress))
    frame = runs if seeds == 1 else aggregate(runs, ["combination"])
    frame = _with_problems(frame, combos, problems)
    return CompareResult(order_columns(judge(frame, objectives), ["combination"] + axes + list(COMPARE_FIRST)), runs, axes, objectives)


def _problem(w, overrides: dict) -> str | None:
    """Why this combination cannot run (unknown names raise: they are input errors), or None."""

    if "gpu" in overrides:
        load_hardware(overrides["gpu"])
    if isinstance(overrides.get("model"), str):
        try:
            load_model(overrides["model"])  # an unknown name or an unreadable config.json
        except CapsimError as exc:
            raise CapsimError(f"--model: {exc}") from None
    if "kv_cache" in overrides:
        get_format(overrides["kv_cache"], for_kv=True, where="--kv-cache")
    if "weights" in overrides:
        get_format(overrides["weights"], where="--weights")
    try:
        prepare(w, overrides)
    except CapsimError as exc:
        return str(exc)
    return None


def _with_problems(frame: pd.DataFrame, combos: list[dict], problems: list) -> pd.DataFrame:
    """Frame rows in combination order, with a row (axes + problem) for each one that did not run."""
    ok = iter(frame.to_dict("records"))
    rows = []
    for n, (combo, problem) in enumerate(zip(combos, problems)):
        rows.append(next(ok) | {"problem": None} if problem is None else {"combination": n, **combo, "problem": problem})
    return pd.DataFrame(rows)


def order_columns(frame: pd.DataFrame, first: list[str]) -> pd.DataFrame:
    cols = list(dict.fromkeys([c for c in first if c in frame.columns] + list(frame.columns)))
    return frame[cols]


def json_rows(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN -> null, numpy scalars -> Python (full float precision)."""
    rows = []
    for row in frame.to_dict("records"):
        rows.append({k: _plain(v) for k, v in row.items()})
    return rows


def _plain(v):
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
        return None if isinstance(v, float) and math.isnan(v) else v
    return v


def write_frames(out_dir: Path, stem: str, frame: pd.DataFrame, runs: pd.DataFrame, meta: dict) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.csv", out_dir / f"{stem}.json"]
    frame.to_csv(paths[0], index=False)
    paths[1].write_text(json.dumps(meta | {"rows": json_rows(frame)}, indent=2) + "\n")
    if "seeds" in frame.columns:
        paths.append(out_dir / "runs.csv")
        runs.to_csv(paths[2], index=False)
    return paths
