"""One simulation as one flat record: the unit of work that sweeps, compares, capacity searches
and multi-seed runs send to worker processes (or a Dask cluster) and collect.

A `Task` carries a validated workload and its overrides (no file reads on the worker, except a
GPU profile or trace given by path); `evaluate` runs it and returns a dict of plain numbers and
strings: the set-up, vLLM's summary keys, how many samples each latency statistic rests on, the
KV capacity in concurrent sequences, goodput under the task's thresholds, and $ per 1M tokens.
Records are deterministic given the seed, so results do not depend on where they ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from capsim.costs import price_for, usd_per_million_tokens

SETUP_KEYS = ("workload", "model", "gpu", "weights", "kv_cache", "mode", "scheduler", "allocator",
              "max_num_seqs", "max_model_len", "kv_capacity_tokens", "seed")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el", "queueing")
LATENCY_STATS = ("mean", "median", "p90", "p99")
LATENCY_KEYS = tuple(f"{s}_{m}_ms" for m in LATENCY_METRICS for s in LATENCY_STATS)
LOAD_KEYS = ("request_throughput", "output_throughput", "total_token_throughput")
UTILISATION_KEYS = ("slot_utilisation", "mean_batch_size", "max_batch_size", "gpu_busy_fraction", "mfu", "mbu",
                    "kv_utilisation", "kv_internal_waste", "kv_reserved_unused", "kv_capacity_utilisation",
                    "preemptions")
# A percentile resting on fewer samples than this is flagged (a p99 needs 100 to mean anything).
MIN_PERCENTILE_SAMPLES = 100


@dataclass(frozen=True)
class Task:
    """One simulation to run: workload config + overrides, plus what the record should compute."""

    workload: object  # a validated WorkloadConfig (picklable)
    overrides: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)  # columns put first in the record (e.g. rate_per_s)
    goodput_ms: dict = field(default_factory=dict)  # vLLM goodput thresholds, e.g. {"ttft": 2000}
    price: float | dict | None = None  # --price-per-hour (one price, or per GPU name)
    keep_run: bool = False  # also return the RunResult (frames) for plots or files
    macro_steps: bool = True  # False: step by step (slower, same results)


def evaluate(task: Task):
    """Run the task's simulation -> its record (and the RunResult when task.keep_run)."""
    from capsim.simulation import simulate

    result = simulate(task.workload, macro_steps=task.macro_steps, **task.overrides)
    rec = record(result, task.goodput_ms, task.price, task.labels)
    return (rec, result) if task.keep_run else rec


def record(result, goodput_ms: dict | None = None, price=None, labels: dict | None = None) -> dict:
    """A RunResult as one flat row (see the module docstring for the columns)."""
    s, setup = result.summary, result.summary["setup"]
    req = result.requests
    rec = dict(labels or {})
    rec.update({k: setup[k] for k in SETUP_KEYS})
    price_usd, source = price_for(result.setup.hardware.name, result.setup.hardware.price_per_hour_usd, price)
    rec.update({"price_usd_per_hour": price_usd, "price_source": source})
    rec.update({k: int(s[k]) for k in ("arrived", "completed", "rejected", "unfinished")})
    rec["duration_s"] = float(s["duration"])
    rec["drain_share"] = drain_share(req, rec["duration_s"])
    rec.update({k: float(s[k]) for k in LOAD_KEYS})
    rec.update({k: float(s[k]) for k in LATENCY_KEYS})
    rec.update(sample_counts(req))
    rec.update(_kv_fit(req, setup))
    rec.update({k: s[k] for k in UTILISATION_KEYS})
    rec.update(goodput(req, goodput_ms or {}, float(s["duration"])))
    rec["usd_per_m_output_tokens"] = usd_per_million_tokens(price_usd, rec["output_throughput"])
    rec["usd_per_m_total_tokens"] = usd_per_million_tokens(price_usd, rec["total_token_throughput"])
    rec["low_sample_percentiles"] = low_sample_percentiles(rec)
    return rec


def drain_share(requests: pd.DataFrame, duration_s: float) -> float:
    """Share of the run after the last arrival (the queue draining). Near 0 the figures describe
    the offered load in steady state; a large share means too few requests for the rate."""
    if not len(requests) or not duration_s > 0:
        return 0.0
    return max(0.0, 1.0 - float(requests["arrival_s"].max()) / duration_s)


def sample_counts(requests: pd.DataFrame) -> dict:
    """How many values each latency distribution rests on: completed requests (TTFT, E2EL,
    queueing), completed requests with 2+ tokens (TPOT), and inter-token gaps (ITL)."""
    done = requests[requests["outcome"] == "completed"]
    gaps = int(np.maximum(requests["generated_tokens"].to_numpy(np.int64) - 1, 0).sum())
    return {"samples_ttft": int(len(done)), "samples_tpot": int(done["tpot_ms"].notna().sum()),
            "samples_itl": gaps, "samples_e2el": int(len(done)), "samples_queueing": int(len(done))}


def low_sample_percentiles(rec: dict) -> str:
    """Percentile keys (median, p90, p99) whose distribution has < 100 samples, ';'-joined."""
    flagged = [f"{s}_{m}_ms" for m in LATENCY_METRICS for s in ("median", "p90", "p99")
               if rec[f"samples_{m}"] < MIN_PERCENTILE_SAMPLES]
    return ";".join(flagged)


def _kv_fit(requests: pd.DataFrame, setup: dict) -> dict:
    """Concurrent sequences the KV cache holds: at the workload's mean request length (prompt +
    output of the requests that arrived) and at max_model_len (the guaranteed worst case)."""
    capacity = int(setup["kv_capacity_tokens"])
    lengths = (requests["prompt_tokens"].to_numpy(np.int64) + requests["output_tokens"].to_numpy(np.int64))
    mean_tokens = float(lengths.mean()) if len(lengths) else None
    return {
        "mean_request_tokens": mean_tokens,
        "max_seqs_at_mean_request": int(capacity // mean_tokens) if mean_tokens else None,
        "max_seqs_at_max_model_len": int(capacity // setup["max_model_len"]),
    }


def goodput(requests: pd.DataFrame, goodput_ms: dict, duration_s: float) -> dict:
    """vLLM's goodput: completed requests meeting every threshold; share of arrived, and per second."""
    if not goodput_ms:
        return {"good_requests": None, "good_share": None, "request_goodput": None}
    done = requests[requests["outcome"] == "completed"]
    ok = pd.Series(True, index=done.index)
    for metric, limit in goodput_ms.items():
        column = done[f"{metric}_ms"].fillna(0.0) if metric == "tpot" else done[f"{metric}_ms"]
        ok &= column <= limit
    good = int(ok.sum())
    return {"good_requests": good, "good_share": good / len(requests) if len(requests) else 0.0,
            "request_goodput": good / duration_s if duration_s > 0 else 0.0}
