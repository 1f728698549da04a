"""Flat records -> DataFrames -> summary (DESIGN §4, vLLM's metric definitions).

The engine writes compact flat buffers: one row per arrived request (`request_log.RequestLog`), one
row per forward pass (`step_log.StepLog`, a macro-step as one segment), and inter-token gaps as
(gap, count) pairs (`request_log.GapLog`): every sequence in a decode step that also emitted in
the previous step has the same gap, the step's duration, so a step contributes one pair instead
of one value per sequence.
Percentiles over the pairs are exactly numpy's default (linear) percentiles over the expanded list
(capsim.results.distributions); a large run's pairs are read chunk by chunk (`Gaps.pieces`), never
all at once. Integer fields are stored as int32 until a value needs int64 (`capsim.sim.buffers.Rows`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from capsim.core.names import BOUNDS, OUTCOMES
from capsim.results.csv_out import Column, Labels, MaybeInts, as_dataframe
from capsim.results.distributions import distribution, weighted_distribution
from capsim.results.slo import DEFAULT_PERCENTILES
from capsim.spec.metric_names import percentile_word
from capsim.results.steady import Saturation, Window, emitted_in
from capsim.sim.step_log import CHUNK_SEGMENTS

if TYPE_CHECKING:
    import pandas as pd

BOUND_NAMES = BOUNDS  # the bound column's names (core.names)
REQUEST_TEXT_COLUMNS = ("reject_reason",)  # plain text in the requests DataFrame, not categorical
# vLLM's counts over the whole run, also with a steady window (arrived = completed + rejected + unfinished)
ACCOUNTING = ("completed", "duration", "total_input_tokens", "total_output_tokens")


def request_table(columns: dict[str, np.ndarray], class_names: tuple[str, ...],
                  reject_reasons: tuple[str, ...]) -> dict[str, Column]:
    """The requests table from RequestLog.columns() as csv_out columns (requests.csv): class,
    outcome and reject reason as names, a missing user (open-loop traffic) empty; first_of_user:
    its closed-loop user's first request (the wave a ramp starts; False for open-loop traffic)."""
    c = columns
    user = c["user"]
    return {
        "request_id": c["request_id"], "request_class": Labels(c["class_index"], class_names),
        "arrival_s": c["arrival_s"], "prompt_tokens": c["prompt_tokens"], "output_tokens": c["output_tokens"],
        "outcome": Labels(c["outcome"], OUTCOMES), "reject_reason": Labels(c["reject_reason"], reject_reasons),
        "first_scheduled_s": c["first_scheduled_s"], "first_token_s": c["first_token_s"], "finish_s": c["finish_s"],
        "generated_tokens": c["generated_tokens"], "samples": c["samples"], "preemptions": c["preemptions"],
        "recomputed_tokens": c["recomputed_tokens"], "replica": c["replica"],
        "user": MaybeInts(np.maximum(user, 0).astype(np.int32), user < 0), "first_of_user": c["first_of_user"],
        "ttft_ms": c["ttft_ms"], "e2el_ms": c["e2el_ms"], "queueing_ms": c["queueing_ms"], "tpot_ms": c["tpot_ms"],
    }


def request_frame(columns: dict[str, np.ndarray], class_names: tuple[str, ...],
                  reject_reasons: tuple[str, ...]) -> pd.DataFrame:
    """request_table() as a DataFrame: class and outcome categorical, the reject reason as text
    ("" for none), the user a nullable integer."""
    return as_dataframe(request_table(columns, class_names, reject_reasons), text=REQUEST_TEXT_COLUMNS)


class Gaps:
    """A run's inter-token gaps, produced in chunks of (gap_s, count) pairs from the compact log, so
    a run with tens of millions of gaps never holds them all at once."""

    CHUNK_SEGMENTS = CHUNK_SEGMENTS  # decode segments a chunk, as the step log's (about 150K gaps)
    CHUNK_SINGLE = 250_000  # one-off gaps a chunk

    def __init__(self, single: dict[str, np.ndarray], lengths: np.ndarray, counts: np.ndarray, ends: np.ndarray,
                 firsts: np.ndarray | None = None, starts: np.ndarray | None = None) -> None:
        """single: gap_s, count, cls, end_s of one-off gaps; lengths: steps of each decode segment;
        counts: its sequences of each class (segments x classes); ends: the segments' end times;
        firsts: segments whose first step's gap (from `starts`, their start times) is theirs too."""
        self._single, self._lengths, self._counts, self._ends = single, lengths, counts, ends
        self._firsts = firsts if firsts is not None and firsts.any() else None
        self._starts = starts
        self._offsets = np.concatenate(([0], np.cumsum(lengths)))  # first end of each segment

    @property
    def num_classes(self) -> int:
        cls = self._single["cls"]
        return max(self._counts.shape[1], int(cls.max()) + 1 if len(cls) else 1)

    def pieces(self, cls: int | None = None, window: tuple[float, float] | None = None):
        """(gap_s, count) arrays, chunk by chunk, of one class or all; zero counts left out; with
        `window` (start_s, end_s) only the gaps that end inside it."""
        gap_s, count, single_cls = self._single["gap_s"], self._single["count"], self._single["cls"]
        end_s = self._single["end_s"]
        for a in range(0, len(gap_s), self.CHUNK_SINGLE):
            part = slice(a, a + self.CHUNK_SINGLE)
            keep = count[part] > 0 if cls is None else single_cls[part] == cls
            if window is not None:
                keep &= (end_s[part] >= window[0]) & (end_s[part] <= window[1])
            yield gap_s[part][keep], count[part][keep].astype(np.int64)
        classes = range(self._counts.shape[1]) if cls is None else [cls]
        n = len(self._lengths)
        for a in range(0, n, self.CHUNK_SEGMENTS):
            b = min(a + self.CHUNK_SEGMENTS, n)
            ks = self._lengths[a:b]
            ends = self._ends[self._offsets[a]:self._offsets[b]]
            keep = np.ones(max(len(ends) - 1, 0), dtype=bool)
            keep[(np.cumsum(ks) - 1)[:-1]] = False  # the jump from one segment to the next is no gap
            gaps = np.diff(ends)[keep]
            inside = _within(ends[1:][keep], window)
            # segments whose first gap (start to first end) is theirs: that gap, per segment
            flagged = np.zeros(b - a, dtype=bool) if self._firsts is None else self._firsts[a:b]
            first_ends = ends[(self._offsets[a:b] - self._offsets[a])[flagged]]
            first_gaps = first_ends - self._starts[a:b][flagged] if flagged.any() else np.zeros(0)
            first_inside = _within(first_ends, window)
            for c in classes:
                if c >= self._counts.shape[1]:
                    continue
                per_gap = np.repeat(self._counts[a:b, c].astype(np.int64), ks - 1)
                mask = (per_gap > 0) & inside
                yield gaps[mask], per_gap[mask]
                if len(first_gaps):
                    per_first = self._counts[a:b, c][flagged].astype(np.int64)
                    mask = (per_first > 0) & first_inside
                    yield first_gaps[mask], per_first[mask]

    def arrays(self, cls: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (gap_s, count, class) entry at once (small runs and tests)."""
        parts = []
        for c in range(self.num_classes) if cls is None else [cls]:
            for gaps, counts in self.pieces(c):
                parts.append((gaps, counts, np.full(len(gaps), c, dtype=np.int16)))
        if not parts:
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int16)
        values, counts, classes = (np.concatenate(p) for p in zip(*parts))
        return values, counts, classes


def _within(ends: np.ndarray, window: tuple[float, float] | None) -> np.ndarray | bool:
    """Which of these end times fall inside the window (every one without a window)."""
    if window is None:
        return True
    return (ends >= window[0]) & (ends <= window[1])


def summarize(requests: dict[str, np.ndarray], steps: dict, gaps: Gaps, *,
              duration_s: float, peak_flops: float, bandwidth_bytes_per_s: float, kv_capacity_tokens: int,
              reject_reasons: tuple[str, ...], window: Window | None = None, saturation: Saturation | None = None,
              percentiles: tuple[float, ...] = DEFAULT_PERCENTILES, goodput_ms: dict | None = None,
              replicas: int = 1) -> dict:
    """The run's summary: vLLM's benchmark keys first, then capsim's (DESIGN §4, §8). `requests` is
    RequestLog.columns(), `steps` StepLog.totals(): the per-step sums. With a steady `window`
    (capsim.results.steady) the throughput, goodput and latency keys describe the window, and their
    whole-run values move under `whole_run`; the counts (ACCOUNTING) stay whole-run, and the
    window's own count and span are under `measurement`."""
    whole = headline(requests, gaps, duration_s, percentiles, goodput_ms)
    if window is not None and window.steady:  # the accounting stays whole-run; rates and latencies are the window's
        steady = window_headline(requests, window, gaps, percentiles, goodput_ms)
        s = whole | {k: v for k, v in steady.items() if k not in ACCOUNTING}
        s["whole_run"] = {k: v for k, v in whole.items() if k not in ACCOUNTING}
        window_counts = {k: steady[k] for k in ("completed", "duration")}
    else:
        s, window_counts = whole, {"completed": whole["completed"], "duration": whole["duration"]}
    outcome = requests["outcome"]
    outcome_counts = np.bincount(outcome, minlength=len(OUTCOMES))
    codes = requests["reject_reason"][outcome == OUTCOMES.index("rejected")]
    counts = np.bincount(codes[codes >= 0], minlength=len(reject_reasons))
    s.update({
        "arrived": int(len(outcome)),
        "rejected": int(outcome_counts[OUTCOMES.index("rejected")]),
        "rejected_reasons": {name: int(n) for name, n in sorted(zip(reject_reasons, counts)) if n},
        "unfinished": int(outcome_counts[OUTCOMES.index("unfinished")]),
        "preemptions": int(requests["preemptions"].sum()),
        "recomputed_tokens": int(requests["recomputed_tokens"].sum()),
        "percentiles": [percentile_word(q) for q in percentiles],
    })
    if window is not None:
        s["measurement"] = window.as_dict() | window_counts
    if saturation is not None:
        s["saturated"], s["saturation"] = saturation.saturated, saturation.as_dict()
    s.update(_step_stats(steps, duration_s, peak_flops, bandwidth_bytes_per_s, kv_capacity_tokens, replicas))
    return s


def headline(requests: dict[str, np.ndarray], gaps: Gaps, duration_s: float,
             percentiles: tuple[float, ...], goodput_ms: dict | None) -> dict:
    """vLLM's benchmark keys over every request of the run (vLLM's own definitions: throughput is
    what completed over the whole duration)."""
    done = _rows(requests, requests["outcome"] == OUTCOMES.index("completed"))
    # A run that never stepped (every request rejected at once) lasted 0 s and completed nothing:
    # its throughputs are 0, not 0/0 (the summary holds finite numbers only).
    duration = duration_s if duration_s > 0 else float("inf")
    out_tokens = int((done["generated_tokens"] * done["samples"]).sum())
    in_tokens = int(done["prompt_tokens"].sum())
    s: dict = {
        "completed": int(len(done["ttft_ms"])),
        "duration": float(duration_s),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done["ttft_ms"]) / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
    }
    s.update(_goodput(done, len(requests["outcome"]), duration, goodput_ms))
    s.update(latencies(done, gaps, percentiles=percentiles))
    return s


def window_headline(requests: dict[str, np.ndarray], window: Window, gaps: Gaps,
                    percentiles: tuple[float, ...], goodput_ms: dict | None) -> dict:
    """vLLM's keys over a steady window: latencies of the requests that arrived in it, throughput of
    what the server delivered during its span (completions and tokens served between its first and
    last arrival; capsim.results.steady.emitted_in)."""
    mine = _rows(requests, window.mask)
    done = _rows(mine, mine["outcome"] == OUTCOMES.index("completed"))
    span = window.span_s
    finish = requests["finish_s"]
    delivered = int(((finish > window.start_s) & (finish <= window.end_s)).sum())
    out_served, in_served = emitted_in(requests, window.start_s, window.end_s)
    s: dict = {
        "completed": int(len(done["ttft_ms"])),
        "duration": float(span),
        "total_input_tokens": int(done["prompt_tokens"].sum()),
        "total_output_tokens": int((done["generated_tokens"] * done["samples"]).sum()),
        "request_throughput": delivered / span,
        "output_throughput": out_served / span,
        "total_token_throughput": (out_served + in_served) / span,
    }
    s.update(_goodput(done, len(mine["outcome"]), span, goodput_ms))
    s.update(latencies(done, gaps, percentiles=percentiles, window=(window.start_s, window.end_s)))
    return s


def _goodput(done: dict[str, np.ndarray], arrived: int, duration_s: float, goodput_ms: dict | None) -> dict:
    """vLLM's goodput: completed requests meeting every threshold, per second, and as a share of
    the requests that arrived (so rejected and unfinished ones count against it)."""
    if not goodput_ms:
        return {}
    ok = np.ones(len(done["ttft_ms"]), dtype=bool)
    for metric, limit in goodput_ms.items():
        values = done[f"{metric}_ms"]
        ok &= (np.nan_to_num(values, nan=0.0) if metric == "tpot" else values) <= limit
    good = int(ok.sum())
    return {"request_goodput": good / duration_s if duration_s > 0 else 0.0, "good_requests": good,
            "good_share": good / arrived if arrived else 0.0}


def _rows(columns: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The columns at the rows where mask is true (the columns themselves when it is true everywhere)."""
    return columns if mask.all() else {name: col[mask] for name, col in columns.items()}


def latencies(done: dict[str, np.ndarray], gaps: Gaps, cls: int | None = None,
              percentiles: tuple[float, ...] = DEFAULT_PERCENTILES, window: tuple[float, float] | None = None) -> dict:
    """TTFT, TPOT, ITL, E2EL and queueing distributions of completed requests (one class or all);
    ITL over every inter-token gap, or with `window` (start_s, end_s) over the gaps ending in it."""
    tpot = done["tpot_ms"]
    out = distribution(done["ttft_ms"], "ttft", percentiles=percentiles)
    out.update(distribution(tpot[~np.isnan(tpot)], "tpot", percentiles=percentiles))
    out.update(weighted_distribution(lambda: ((g * 1e3, n) for g, n in gaps.pieces(cls, window)), "itl", percentiles))
    out.update(distribution(done["e2el_ms"], "e2el", percentiles=percentiles))
    out.update(distribution(done["queueing_ms"], "queueing", percentiles=percentiles))
    return out


def per_class(requests: dict[str, np.ndarray], class_names: tuple[str, ...], gaps: Gaps,
              window: Window | None = None, percentiles: tuple[float, ...] = DEFAULT_PERCENTILES) -> dict:
    """The latency keys per request class (mixed workloads), with counts, over the window's requests."""
    out = {}
    inside = window.mask if window is not None and window.steady else np.ones(len(requests["outcome"]), dtype=bool)
    completed = (requests["outcome"] == OUTCOMES.index("completed")) & inside
    for i, name in enumerate(class_names):
        mine = (requests["class_index"] == i) & inside
        done = _rows(requests, mine & completed)
        span = (window.start_s, window.end_s) if window is not None and window.steady else None
        out[name] = {"arrived": int(mine.sum()), "completed": int(len(done["ttft_ms"]))} | latencies(
            done, gaps, i, percentiles, span)
    return out


def _step_stats(t: dict, duration_s: float, peak: float, bandwidth: float, capacity: int, replicas: int) -> dict:
    """Utilisation figures from the per-step sums (step_log.step_totals)."""
    busy = t["busy_s"]
    if t["steps"] == 0 or busy <= 0:
        return {"num_steps": t["steps"], "slot_utilisation": 0.0, "kv_utilisation": 0.0, "kv_internal_waste": 0.0,
                "kv_capacity_utilisation": 0.0, "mfu": 0.0, "mbu": 0.0, "gpu_busy_fraction": 0.0,
                "mean_batch_size": 0.0, "max_batch_size": t["max_seqs"], "bound_fraction": {b: 0.0 for b in BOUND_NAMES}}
    held, stored = t["held_time"], t["stored_time"]
    kv_util = stored / held if held > 0 else 0.0
    return {
        "num_steps": t["steps"],
        "slot_utilisation": t["seqs"] / t["slots"] if t["slots"] else 0.0,
        "kv_utilisation": kv_util,
        "kv_internal_waste": 1.0 - kv_util if held > 0 else 0.0,
        "kv_capacity_utilisation": stored / (capacity * busy) if capacity else 0.0,
        "mfu": t["flops"] / (peak * busy),
        "mbu": t["bytes"] / (bandwidth * busy),
        "gpu_busy_fraction": busy / (duration_s * replicas) if duration_s > 0 else 0.0,
        "mean_batch_size": t["seqs_time"] / busy,
        "max_batch_size": t["max_seqs"],
        "bound_fraction": {b: t["bound_s"][i] / busy for i, b in enumerate(BOUND_NAMES)},
    }
