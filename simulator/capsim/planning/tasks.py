"""One simulation as one flat record: the unit of work that sweeps, compares, capacity searches
and multi-seed runs send to worker processes (or a Dask cluster) and collect.

A `Task` carries a validated workload and its overrides (no file reads on the worker, except a
GPU profile or trace given by path); `evaluate` runs it and returns a dict of plain numbers and
strings: the set-up, vLLM's summary keys over the steady window, how many samples each latency
statistic rests on, the KV capacity in concurrent sequences, the load share (how near saturation an
open-loop run is), goodput, saturation, the deployment's cost at the load, and the SLO verdict. Records are deterministic given the seed, so results do not
depend on where they ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capsim.errors import short_path
from capsim.results.slo import Objectives
from capsim.api import simulate
from capsim.api import apply_overrides, load_workload, resolve

SETUP_KEYS = ("workload", "model", "gpu", "weights", "kv_cache", "mode", "scheduler", "allocator",
              "max_num_seqs", "max_model_len", "kv_capacity_tokens", "tp", "replicas", "seed")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el", "queueing")
LOAD_KEYS = ("request_throughput", "output_throughput", "total_token_throughput")
UTILISATION_KEYS = ("slot_utilisation", "mean_batch_size", "max_batch_size", "gpu_busy_fraction", "mfu", "mbu",
                    "kv_utilisation", "kv_internal_waste", "kv_reserved_unused", "kv_capacity_utilisation",
                    "preemptions")
COST_KEYS = ("gpus", "usd_per_hour", "usd_per_m_output_tokens", "usd_per_m_total_tokens")
# A percentile resting on fewer samples than this is flagged (a p99 needs 100 to mean anything).
MIN_PERCENTILE_SAMPLES = 100


@dataclass(frozen=True)
class Task:
    """One simulation to run: workload config + overrides, plus what the record should compute."""

    workload: object  # a validated WorkloadConfig (picklable)
    overrides: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)  # columns put first in the record (e.g. rate_per_s)
    objectives: Objectives | None = None  # what the run is judged against (None: the workload's slo: block)
    price: float | dict | None = None  # --price-per-hour (one price, or per GPU name)
    percentiles: tuple[float, ...] | None = None  # reported besides mean and median (None: 90 and 99)
    keep_run: bool = False  # also return the RunResult (frames) for plots or files
    macro_steps: bool = True  # False: step by step (slower, same results)
    command_source: str | None = None  # how the verdict's next-step command names the workload (simulate)


def evaluate(task: Task):
    """Run the task's simulation -> its record (and the RunResult when task.keep_run)."""
    result = simulate(task.workload, macro_steps=task.macro_steps, objectives=task.objectives,
                      percentiles=task.percentiles, price=task.price, command_source=task.command_source,
                      **task.overrides)
    rec = record(result, task.labels)
    if task.objectives is not None and not task.objectives.empty:
        rec.update(margins(result, task.objectives))
    return (rec, result) if task.keep_run else rec


def latency_keys(summary) -> list[str]:
    """The summary's (or a record's) latency statistics (mean, median, p{q}; not std), metric by
    metric, each metric's in the order mean, median, ascending percentiles."""
    keys = [k for k in summary if k.count("_") == 2 and k.endswith("_ms") and k.split("_")[1] in LATENCY_METRICS
            and not k.startswith("std_")]
    return sorted(keys, key=latency_order)


def latency_order(key: str) -> tuple[int, float]:
    """Sort key of a latency statistic: by metric, then mean, median, p1 ... p99.9."""
    stat, metric, _ = key.split("_")
    rank = {"mean": -1.0, "median": 50.0}.get(stat)
    return LATENCY_METRICS.index(metric), float(stat[1:]) if rank is None else rank


def record(result, labels: dict | None = None) -> dict:
    """A RunResult as one flat row (see the module docstring for the columns)."""
    s, setup = result.summary, result.summary["setup"]
    rec = dict(labels or {})
    rec.update({k: setup.get(k) for k in SETUP_KEYS})
    rec["replicas"] = s["replicas"]
    cost = s["cost"]
    rec.update({"price_usd_per_gpu_hour": cost["price_per_gpu_hour_usd"], "price_source": cost["price_source"],
                "cost_at_load": cost["load"]})
    rec.update({k: s[k] for k in COST_KEYS})
    rec.update({k: int(s[k]) for k in ("arrived", "completed", "rejected", "unfinished")})
    rec["duration_s"] = float(s["duration"])
    measured = s.get("measurement") or {}
    rec["window_s"] = float(measured.get("duration", s["duration"]))
    rec["measured_over"] = "steady window" if measured.get("steady") else "whole run"
    rec["drain_share"] = drain_share(result.requests["arrival_s"].to_numpy(), rec["duration_s"])
    rec.update({k: float(s[k]) for k in LOAD_KEYS})
    rec.update({k: float(s[k]) for k in latency_keys(s)})
    rec.update(sample_counts(result))
    rec.update({k: s[k] for k in ("mean_request_tokens", "max_seqs_at_mean_request", "max_seqs_at_max_model_len")})
    rec.update({k: s[k] for k in UTILISATION_KEYS})
    rec["load_share"] = (s.get("load_share") or {}).get("share")  # open-loop runs only (results.load_share)
    rec.update({k: s.get(k) for k in ("request_goodput", "good_requests", "good_share")})
    sat = s.get("saturation") or {}
    rec.update({"saturated": bool(s.get("saturated", False)), "too_short": bool(sat.get("too_short", False)),
                "window_latencies": sat.get("window_latencies"), "wait_growth": sat.get("wait_growth"),
                "saturation_evidence": sat.get("evidence", ""),
                "departure_ratio": _ratio(sat.get("departure_rate_per_s"), sat.get("arrival_rate_per_s"))})
    rec["low_sample_percentiles"] = low_sample_percentiles(rec)
    return rec


BATCHES = 5  # the window's requests in arrival order, cut into this many batches for margins()
MARGIN_SE = 2.0  # a limit closer than this many standard errors to its statistic is uncertain


def margins(result, objectives) -> dict:
    """Whether each per-request objective is decided with confidence: the statistic taken over
    BATCHES consecutive batches of the window's requests gives a standard error (batch means, the
    textbook remedy for autocorrelated simulation output); a limit within MARGIN_SE standard errors
    of the window's own statistic is `uncertain` (a capacity search simulates such a point longer).
    Inter-token latency limits are judged on gaps, not requests, and are not checked here."""
    s, req = result.summary, result.requests
    inside = result.window.mask if result.window is not None and result.window.steady else np.ones(len(req), bool)
    rows = req[inside].sort_values("arrival_s", kind="stable")
    batches = np.array_split(np.arange(len(rows)), BATCHES)
    if len(rows) < 10 * BATCHES:
        return {"uncertain": False, "uncertainty": ""}
    doubtful = []
    for key, limit in objectives.limits_ms.items():
        stat, metric = key.split("_")[0], key.split("_")[1]
        if metric == "itl" or key not in s:
            continue
        values = [_batch_stat(rows.iloc[b], metric, stat) for b in batches]
        if _close(s[key], limit, values):
            doubtful.append(f"{key} {s[key]:,.1f} vs {limit:,.1f}")
    if objectives.goodput_ms and s.get("good_share") is not None:
        shares = [_good_share(rows.iloc[b], objectives.goodput_ms) for b in batches]
        if _close(s["good_share"], objectives.goodput_share, shares):
            doubtful.append(f"good share {s['good_share']:.3f} vs {objectives.goodput_share:g}")
    return {"uncertain": bool(doubtful), "uncertainty": "; ".join(doubtful)}


def _close(value: float, limit: float, batch_values: list[float]) -> bool:
    finite = [v for v in batch_values if np.isfinite(v)]
    if len(finite) < 2:
        return False
    se = float(np.std(finite, ddof=1)) / np.sqrt(len(finite))
    return abs(value - limit) < MARGIN_SE * se


def _batch_stat(rows, metric: str, stat: str) -> float:
    done = rows[rows["outcome"] == "completed"][f"{metric}_ms"].dropna().to_numpy()
    if not len(done):
        return float("nan")
    if stat == "mean":
        return float(done.mean())
    return float(np.percentile(done, 50.0 if stat == "median" else float(stat[1:])))


def _good_share(rows, goodput_ms: dict) -> float:
    ok = (rows["outcome"] == "completed").to_numpy().copy()
    for metric, limit in goodput_ms.items():
        values = rows[f"{metric}_ms"].to_numpy()
        ok &= (np.nan_to_num(values, nan=0.0) if metric == "tpot" else values) <= limit
    return float(ok.mean()) if len(ok) else float("nan")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def drain_share(arrival_s: np.ndarray, duration_s: float) -> float:
    """Share of the whole run after the last arrival (the queue draining)."""
    if not len(arrival_s) or not duration_s > 0:
        return 0.0
    return max(0.0, 1.0 - float(arrival_s.max()) / duration_s)


def sample_counts(result) -> dict:
    """How many values each latency distribution rests on, over the measured requests: completed
    requests (TTFT, E2EL, queueing), completed requests with 2+ tokens (TPOT), and inter-token gaps
    of the run (ITL)."""
    req = result.requests
    inside = result.window.mask if result.window is not None and result.window.steady else np.ones(len(req), bool)
    done = req[(req["outcome"] == "completed").to_numpy() & inside]
    gaps = int(np.maximum(req["generated_tokens"].to_numpy(np.int64) - 1, 0).sum())
    return {"samples_ttft": int(len(done)), "samples_tpot": int(done["tpot_ms"].notna().sum()),
            "samples_itl": gaps, "samples_e2el": int(len(done)), "samples_queueing": int(len(done))}


def low_sample_percentiles(rec: dict) -> str:
    """Percentile keys (median and p{q}) whose distribution has < 100 samples, ';'-joined."""
    flagged = [k for k in latency_keys(rec) if not k.startswith("mean_")
               and rec[f"samples_{k.split('_')[1]}"] < MIN_PERCENTILE_SAMPLES]
    return ";".join(flagged)


def prepare(workload, overrides: dict, check: bool = True):
    """Load a workload once (its file's paths come back absolute, so workers may run in another
    directory), make a --gpu profile path absolute too, and check the overrides resolve (errors
    surface before anything is sent out). Returns (WorkloadConfig, the overrides that were given)."""
    if isinstance(workload, (str, Path)):
        source = short_path(workload)
        w = load_workload(workload)
        if not w.name:
            w = w.model_copy(update={"name": Path(workload).stem})
    else:
        source, w = "workload", workload
    given = {k: v for k, v in overrides.items() if v is not None}
    if isinstance(given.get("gpu"), str) and Path(given["gpu"]).is_file():
        given["gpu"] = str(Path(given["gpu"]).resolve())
    if check:
        resolve(apply_overrides(w, source, **given), source)
    return w, given
