"""Flat records -> DataFrames -> summary (DESIGN §4, vLLM's metric definitions).

The engine writes compact flat buffers: one row per arrived request (`request_log.RequestLog`), one
row per forward pass (`step_log.StepLog`, a macro-step as one segment), and inter-token gaps as
(gap, count) pairs (`request_log.GapLog`): every sequence in a decode step that also emitted in
the previous step has the same gap, the step's duration, so a step contributes one pair instead
of one value per sequence.
Percentiles over the pairs are exactly numpy's default (linear) percentiles over the expanded list;
a large run's pairs are read chunk by chunk (`Gaps.pieces`, `weighted_distribution`), never all at
once. Integer fields are stored as int32 until a value needs int64 (`step_log.Rows`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from capsim.csv_out import Column, Labels, MaybeInts, as_dataframe
from capsim.exact_sum import ExactSum, exact_sum
from capsim.step_log import CHUNK_SEGMENTS

if TYPE_CHECKING:
    import pandas as pd

OUTCOMES = ("completed", "rejected", "unfinished")
BOUND_NAMES = ("compute", "memory", "overhead")
REQUEST_TEXT_COLUMNS = ("reject_reason",)  # plain text in the requests DataFrame, not categorical
NAN = float("nan")


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
        """single: gap_s, count, cls of one-off gaps; lengths: steps of each decode segment;
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

    def pieces(self, cls: int | None = None):
        """(gap_s, count) arrays, chunk by chunk, of one class or all; zero counts left out."""
        gap_s, count, single_cls = self._single["gap_s"], self._single["count"], self._single["cls"]
        for a in range(0, len(gap_s), self.CHUNK_SINGLE):
            part = slice(a, a + self.CHUNK_SINGLE)
            keep = count[part] > 0 if cls is None else single_cls[part] == cls
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
            # segments whose first gap (start to first end) is theirs: that gap, per segment
            flagged = np.zeros(b - a, dtype=bool) if self._firsts is None else self._firsts[a:b]
            first_gaps = ends[(self._offsets[a:b] - self._offsets[a])[flagged]] - self._starts[a:b][flagged] \
                if flagged.any() else np.zeros(0)
            for c in classes:
                if c >= self._counts.shape[1]:
                    continue
                per_gap = np.repeat(self._counts[a:b, c].astype(np.int64), ks - 1)
                mask = per_gap > 0
                yield gaps[mask], per_gap[mask]
                if len(first_gaps):
                    per_first = self._counts[a:b, c][flagged].astype(np.int64)
                    yield first_gaps[per_first > 0], per_first[per_first > 0]

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


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """np.percentile(expanded, q) (linear method) without expanding the (value, count) pairs."""
    return weighted_percentiles(values, counts, (q,))[0]


def weighted_percentiles(values: np.ndarray, counts: np.ndarray, qs) -> list[float]:
    """weighted_percentile for several q at once (one sort)."""
    # Any sort will do: tied values are equal, so whichever of them a rank lands on, it reads the
    # same value (numpy's default sort took a third of the stable one's time on 240K gaps).
    order = np.argsort(values)
    v = values[order]
    ends = np.cumsum(counts[order])  # expanded index range of each value: [ends - c, ends)
    n = int(ends[-1])
    out = []
    for q in qs:
        h = (n - 1) * q / 100.0
        lo = int(np.floor(h))
        hi = min(lo + 1, n - 1)
        v_lo = v[np.searchsorted(ends, lo, side="right")]
        v_hi = v[np.searchsorted(ends, hi, side="right")]
        out.append(float(v_lo + (h - lo) * (v_hi - v_lo)))
    return out


_KEY_DIGIT_BITS = 16
_SIGN = np.uint64(1 << 63)


def _order_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys that sort as the float64 values do (the IEEE bits, sign-adjusted)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _key_value(key: int) -> float:
    bits = key ^ (1 << 63) if key >> 63 else ~key & (2**64 - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def values_at_ranks(pieces, ranks: list[int]) -> dict[int, float]:
    """The values at these 0-based ranks of the expanded, sorted (value, count) list, reading
    `pieces()` (a fresh iterator of (values, counts) chunks per call) four times and holding only
    one chunk: a radix select over the values' order-preserving 64-bit keys, 16 bits a pass.
    Exact, and independent of the chunks' order."""
    radix = 1 << _KEY_DIGIT_BITS
    todo = {r: (0, 0) for r in ranks}  # rank -> (key prefix found so far, pairs below that prefix)
    for level in range(64 // _KEY_DIGIT_BITS):
        prefix_shift = np.uint64(64 - _KEY_DIGIT_BITS * level)
        digit_shift = np.uint64(64 - _KEY_DIGIT_BITS * (level + 1))
        hist = {p: np.zeros(radix, dtype=np.int64) for p, _ in todo.values()}
        for values, counts in pieces():
            keys = _order_keys(values)
            digits = ((keys >> digit_shift) & np.uint64(radix - 1)).astype(np.intp)
            weights = counts.astype(np.float64)  # bincount sums in float64: exact below 2**53
            for p, h in hist.items():
                if level == 0:
                    h += np.bincount(digits, weights, minlength=radix).astype(np.int64)
                else:
                    mine = (keys >> prefix_shift) == np.uint64(p)
                    h += np.bincount(digits[mine], weights[mine], minlength=radix).astype(np.int64)
        for r, (p, below) in todo.items():
            cum = np.cumsum(hist[p])
            d = int(np.searchsorted(cum, r - below, side="right"))
            todo[r] = ((p << _KEY_DIGIT_BITS) | d, below + (int(cum[d - 1]) if d else 0))
    return {r: _key_value(p) for r, (p, _) in todo.items()}


_IN_MEMORY_PAIRS = 2_000_000  # up to this many (value, count) pairs are sorted at once


def weighted_distribution(pieces, name: str) -> dict[str, float]:
    """distribution(values, name, counts) over (values, counts) chunks: `pieces()` gives a fresh
    iterator each call. Small inputs are joined and sorted; large ones are read a few times, a
    chunk at a time. Both give the same figures: the sums are exactly rounded and the percentiles
    exact."""
    parts: list = []
    size = 0
    for part in pieces():
        parts.append(part)
        size += len(part[0])
        if size > _IN_MEMORY_PAIRS:
            parts.clear()  # too many to sort at once: let these go, and read the chunks again below
            break
    if size <= _IN_MEMORY_PAIRS:
        values = np.concatenate([v for v, _ in parts]) if parts else np.zeros(0)
        counts = np.concatenate([c for _, c in parts]) if parts else np.zeros(0, dtype=np.int64)
        return distribution(values, name, counts)
    total = sum(int(c.sum()) for _, c in pieces())
    if total == 0:
        return distribution(np.zeros(0), name)
    weighted, spread = ExactSum(), ExactSum()
    for v, c in pieces():
        weighted.add(v * c)
    mean = weighted.value / total
    for v, c in pieces():
        spread.add(c * (v - mean) ** 2)
    std = math.sqrt(spread.value / total)
    ranks = {}
    for q in (50, 90, 99):
        h = (total - 1) * q / 100.0
        lo = int(np.floor(h))
        ranks[q] = (h, lo, min(lo + 1, total - 1))
    found = values_at_ranks(pieces, sorted({r for _, lo, hi in ranks.values() for r in (lo, hi)}))
    p = {q: found[lo] + (h - lo) * (found[hi] - found[lo]) for q, (h, lo, hi) in ranks.items()}
    stats = (mean, p[50], std, p[90], p[99])
    return {f"{k}_{name}_ms": float(v) for k, v in zip(("mean", "median", "std", "p90", "p99"), stats)}


def distribution(values_ms: np.ndarray, name: str, counts: np.ndarray | None = None) -> dict[str, float]:
    """vLLM's mean/median/std/p90/p99 keys for one metric, in ms (0.0 when there are no values)."""
    keys = ("mean", "median", "std", "p90", "p99")
    if len(values_ms) == 0 or (counts is not None and not counts.sum()):
        return {f"{k}_{name}_ms": 0.0 for k in keys}
    if counts is None:
        stats = (values_ms.mean(), median(values_ms), values_ms.std(), *percentiles(values_ms, (90, 99)))
    else:  # exactly rounded sums: the entries' order (macro-steps or single steps) cannot matter
        total = int(counts.sum())
        mean = exact_sum(values_ms * counts) / total
        std = math.sqrt(exact_sum(counts * (values_ms - mean) ** 2) / total)
        p50, p90, p99 = weighted_percentiles(values_ms, counts, (50, 90, 99))
        stats = (mean, p50, std, p90, p99)
    return {f"{k}_{name}_ms": float(v) for k, v in zip(keys, stats)}


def percentiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """np.percentile(values, q) (its default, linear method) of a 1-D array for each q, to the
    bit: the same virtual index, neighbours and interpolation (numpy's _lerp, whose second form
    serves t >= 0.5), NaN if any value is NaN; one partition for all q. np.percentile itself
    calls np.unique, which imports numpy.ma on first use: a cost every fresh `capsim run` paid."""
    n = len(values)
    if n == 0:
        return [NAN] * len(qs)
    spots = []  # (t, lower index, upper index); numpy's index past the end is -1, and t counts from it
    for q in qs:
        h = (n - 1) * (q / 100)
        lo = -1 if h >= n - 1 else math.floor(h)  # q in 0..100, so h >= 0
        hi = -1 if lo == -1 else lo + 1
        spots.append((h - lo, lo, hi))
    part = np.partition(values, sorted({0, n - 1} | {i % n for _, lo, hi in spots for i in (lo, hi)}))
    if np.isnan(part[-1]):
        return [NAN] * len(qs)
    out = []
    for t, lo, hi in spots:
        a, b = float(part[lo]), float(part[hi])
        diff = b - a
        out.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
    return out


def median(values: np.ndarray) -> float:
    """np.median of a 1-D array, to the bit (the middle value, or the mean of the two middle
    ones; NaN if any value is NaN), without np.median's NaN check, which imports numpy.ma: 30 to
    40 ms of every `capsim run`."""
    n = len(values)
    if n == 0:
        return NAN
    mid = n // 2
    part = np.partition(values, sorted({max(mid - 1, 0), mid, n - 1}))
    if np.isnan(part[-1]):
        return NAN
    return float(part[mid] if n % 2 else (part[mid - 1] + part[mid]) / 2.0)


def summarize(requests: dict[str, np.ndarray], steps: dict, gaps: Gaps, *,
              duration_s: float, peak_flops: float, bandwidth_bytes_per_s: float, kv_capacity_tokens: int,
              reject_reasons: tuple[str, ...], slo=None, replicas: int = 1) -> dict:
    """The run's summary: vLLM's benchmark keys first, then capsim's (DESIGN §4). `requests` is
    RequestLog.columns(), `steps` StepLog.totals(): the per-step sums."""
    outcome = requests["outcome"]
    completed = outcome == OUTCOMES.index("completed")
    done = _rows(requests, completed)
    outcome_counts = np.bincount(outcome, minlength=len(OUTCOMES))
    duration = duration_s if duration_s > 0 else float("nan")
    out_tokens = int((done["generated_tokens"] * done["samples"]).sum())
    in_tokens = int(done["prompt_tokens"].sum())
    n_done = int(completed.sum())
    s: dict = {
        "completed": n_done,
        "duration": float(duration_s),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": n_done / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
    }
    if slo is not None:
        s["request_goodput"] = int(_meets_slo(done, slo).sum()) / duration
    s.update(latencies(done, gaps))
    codes = requests["reject_reason"][outcome == OUTCOMES.index("rejected")]
    counts = np.bincount(codes[codes >= 0], minlength=len(reject_reasons))
    s.update({
        "arrived": int(len(outcome)),
        "rejected": int(outcome_counts[OUTCOMES.index("rejected")]),
        "rejected_reasons": {name: int(n) for name, n in sorted(zip(reject_reasons, counts)) if n},
        "unfinished": int(outcome_counts[OUTCOMES.index("unfinished")]),
        "preemptions": int(requests["preemptions"].sum()),
        "recomputed_tokens": int(requests["recomputed_tokens"].sum()),
    })
    s.update(_step_stats(steps, duration_s, peak_flops, bandwidth_bytes_per_s, kv_capacity_tokens, replicas))
    return s


def _rows(columns: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The columns at the rows where mask is true (the columns themselves when it is true everywhere)."""
    return columns if mask.all() else {name: col[mask] for name, col in columns.items()}


def latencies(done: dict[str, np.ndarray], gaps: Gaps, cls: int | None = None) -> dict:
    """TTFT, TPOT, ITL, E2EL and queueing distributions of completed requests (one class or all)."""
    tpot = done["tpot_ms"]
    out = distribution(done["ttft_ms"], "ttft")
    out.update(distribution(tpot[~np.isnan(tpot)], "tpot"))
    out.update(weighted_distribution(lambda: ((g * 1e3, n) for g, n in gaps.pieces(cls)), "itl"))
    out.update(distribution(done["e2el_ms"], "e2el"))
    out.update(distribution(done["queueing_ms"], "queueing"))
    return out


def per_class(requests: dict[str, np.ndarray], class_names: tuple[str, ...], gaps: Gaps) -> dict:
    """The latency keys per request class (mixed workloads), with counts."""
    out = {}
    completed = requests["outcome"] == OUTCOMES.index("completed")
    for i, name in enumerate(class_names):
        mine = requests["class_index"] == i
        done = _rows(requests, mine & completed)
        out[name] = {"arrived": int(mine.sum()), "completed": int(len(done["ttft_ms"]))} | latencies(done, gaps, i)
    return out


def _meets_slo(done: dict[str, np.ndarray], slo) -> np.ndarray:
    ok = np.ones(len(done["ttft_ms"]), dtype=bool)
    if slo.ttft_ms is not None:
        ok &= done["ttft_ms"] <= slo.ttft_ms
    if slo.tpot_ms is not None:
        ok &= np.nan_to_num(done["tpot_ms"], nan=0.0) <= slo.tpot_ms
    if slo.e2el_ms is not None:
        ok &= done["e2el_ms"] <= slo.e2el_ms
    return ok


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
