"""Multi-seed confidence: repeat a simulation with N seeds and report each metric as the mean
with a 95% Student-t interval over the seeds (mean ± t(0.975, N-1) x s / sqrt(N)).

Seeds are the workload's seed, seed + 1, ..., seed + N - 1. A percentile (median, p90, p99) whose
distribution rests on fewer than 100 samples in any of the seeds' runs is flagged: p99 of TTFT
needs at least 100 completed requests; ITL counts inter-token gaps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.errors import CapsimError, short_path
from capsim.planning.tasks import (
    LOAD_KEYS,
    MIN_PERCENTILE_SAMPLES,
    UTILISATION_KEYS,
    Task,
    evaluate,
    latency_keys,
    latency_order,
)
from capsim.planning.parallel import run_tasks
from capsim.planning.tasks import prepare

# Metrics summarised over seeds, in display order (the latency statistics go between these two).
LEADING_METRICS = LOAD_KEYS + ("request_goodput", "good_share")
TRAILING_METRICS = UTILISATION_KEYS + ("usd_per_hour", "usd_per_m_output_tokens", "usd_per_m_total_tokens")


def metrics_of(columns) -> list[str]:
    """The metrics summarised over seeds among these record columns, in display order."""
    return [m for m in LEADING_METRICS if m in columns] + latency_keys(columns) + \
        [m for m in TRAILING_METRICS if m in columns]


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (two-sided 95%)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    lo, hi = 0.0, 64.0
    for _ in range(200):  # bisection on the exact CDF; 200 halvings reach float resolution
        mid = (lo + hi) / 2
        if _t_central_mass(mid, df) < 0.95:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t_central_mass(t: float, df: int) -> float:
    """P(|T| <= t) for integer df, by the finite series of Abramowitz & Stegun 26.7.3."""
    theta = math.atan(t / math.sqrt(df))
    c, s = math.cos(theta), math.sin(theta)
    if df % 2 == 1:
        total, term = 0.0, c
        for k in range(1, (df - 1) // 2 + 1):  # c + (2/3)c^3 + (2*4)/(3*5)c^5 + ...
            total += term
            term *= c * c * (2 * k) / (2 * k + 1)
        return 2 / math.pi * (theta + s * total)
    total, term = 0.0, 1.0
    for k in range(1, df // 2 + 1):  # 1 + (1/2)c^2 + (1*3)/(2*4)c^4 + ...
        total += term
        term *= c * c * (2 * k - 1) / (2 * k)
    return s * total


def interval(values) -> tuple[float, float | None]:
    """(mean, 95% half-width) of the values; the half-width is None for fewer than 2 values or
    when any value is missing (e.g. no price)."""
    x = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    if len(x) == 0 or np.isnan(x).any():
        return (float("nan") if len(x) == 0 or np.isnan(x).all() else float(np.nanmean(x))), None
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None
    if np.all(x == x[0]):  # equal values: no spread (std would give float noise such as 3e-16)
        return float(x[0]), 0.0
    return mean, float(t_quantile_975(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def aggregate(runs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per group of seeds: set-up columns kept, each metric as its mean plus a
    `<metric>_ci95` half-width column, samples as the minimum over seeds, and the flags."""
    rows = []
    metrics = metrics_of(runs.columns)
    for _, group in runs.groupby(by, sort=False, dropna=False):
        first = group.iloc[0].to_dict()
        row = {k: v for k, v in first.items() if k not in metrics and k != "seed"}
        row["seeds"] = len(group)
        for col in [c for c in group.columns if c.startswith("samples_") or c in ("completed", "arrived")]:
            row[col] = int(group[col].min())
        for metric in metrics:
            row[metric], row[f"{metric}_ci95"] = interval(group[metric].tolist())
        flagged = {f for flags in group["low_sample_percentiles"] for f in flags.split(";") if f}
        row["low_sample_percentiles"] = ";".join(sorted(flagged, key=latency_order))
        for flag in ("saturated", "too_short"):  # a point is saturated (too short) if any seed's run is
            if flag in group:
                row[flag] = bool(group[flag].any())
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class SeedsResult:
    """N runs of one set-up: `runs` (one record per seed), `table` (one row per metric), and the
    base seed's RunResult (frames for files and plots)."""

    runs: pd.DataFrame
    table: pd.DataFrame
    first: object = field(repr=False, default=None)

    def write(self, out_dir) -> list:
        from pathlib import Path

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / "seeds.csv", out_dir / "confidence.csv"]
        self.runs.to_csv(paths[0], index=False)
        self.table.to_csv(paths[1], index=False)
        return paths


def run_seeds(workload, seeds: int, *, workers: int | None = None, dask_scheduler: str | None = None,
              progress=None, objectives=None, price=None, percentiles: tuple[float, ...] | None = None,
              macro_steps: bool = True, command_source: str | None = None, **overrides) -> SeedsResult:
    """Run `seeds` copies of the workload with consecutive seeds, in parallel; summarise each
    metric as mean ± 95% interval (see the module docstring). `command_source`: how the runs'
    next-step command names the workload (default: its file, as a single run's does)."""

    if seeds < 2:
        raise CapsimError(f"--seeds: needs at least 2 seeds for an interval (got {seeds}).")
    if command_source is None and isinstance(workload, (str, Path)):
        command_source = short_path(workload)  # the tasks carry the loaded config, which names no file
    w, overrides = prepare(workload, overrides)
    base = overrides.pop("seed", None)
    base = w.seed if base is None else base
    tasks = [Task(w, overrides | {"seed": base + i}, objectives=objectives, price=price, percentiles=percentiles,
                  keep_run=i == 0, macro_steps=macro_steps, command_source=command_source) for i in range(seeds)]
    results = run_tasks(evaluate, tasks, workers=workers, dask_scheduler=dask_scheduler, progress=progress)
    first_record, first_run = results[0]
    runs = pd.DataFrame([first_record] + results[1:])
    return SeedsResult(runs, metric_table(runs), first_run)


def metric_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per metric: mean, 95% interval, min, max, the fewest samples, and the flag."""
    rows = []
    latency = set(latency_keys(runs.columns))
    for metric in [m for m in metrics_of(runs.columns) if runs[m].notna().any()]:
        mean, half = interval(runs[metric].tolist())
        parts = metric.split("_")
        samples = int(runs[f"samples_{parts[1]}"].min()) if metric in latency else None
        percentile = metric in latency and parts[0] != "mean"
        rows.append({
            "metric": metric, "mean": mean, "ci95": half,
            "low": None if half is None else mean - half, "high": None if half is None else mean + half,
            "min": float(runs[metric].min()), "max": float(runs[metric].max()), "seeds": int(runs[metric].count()),
            "samples_min": samples,
            "few_samples": bool(percentile and samples < MIN_PERCENTILE_SAMPLES),
        })
    return pd.DataFrame(rows)
