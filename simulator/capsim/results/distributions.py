"""Distributions of a metric: vLLM's mean / median / std / p{q} keys over plain values or over
(value, count) pairs, to the bit of numpy's default (linear) percentiles over the expanded list.

Pairs are never expanded: a few are sorted once (`weighted_percentiles`); many, read chunk by chunk
(`weighted_distribution`), are reduced with exactly rounded sums and a radix select over
order-preserving keys (`values_at_ranks`), so a run with tens of millions of inter-token gaps
never holds them all at once. `quantiles` and `median` are numpy's, to the bit, without the
import of numpy.ma that np.percentile and np.median bring.
"""

from __future__ import annotations

import math

import numpy as np

from capsim.results.exact_sum import ExactSum, exact_sum
from capsim.results.slo import DEFAULT_PERCENTILES
from capsim.spec.metric_names import percentile_key

NAN = float("nan")


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


def weighted_distribution(pieces, name: str, percentiles: tuple[float, ...] = DEFAULT_PERCENTILES) -> dict[str, float]:
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
        return distribution(values, name, counts, percentiles)
    total = sum(int(c.sum()) for _, c in pieces())
    if total == 0:
        return distribution(np.zeros(0), name, percentiles=percentiles)
    weighted, spread = ExactSum(), ExactSum()
    for v, c in pieces():
        weighted.add(v * c)
    mean = weighted.value / total
    for v, c in pieces():
        spread.add(c * (v - mean) ** 2)
    std = math.sqrt(spread.value / total)
    qs = (50.0, *percentiles)
    ranks = {}
    for q in qs:
        h = (total - 1) * q / 100.0
        lo = int(np.floor(h))
        ranks[q] = (h, lo, min(lo + 1, total - 1))
    found = values_at_ranks(pieces, sorted({r for _, lo, hi in ranks.values() for r in (lo, hi)}))
    p = [found[lo] + (h - lo) * (found[hi] - found[lo]) for h, lo, hi in ranks.values()]
    return _stat_keys(name, mean, std, p[0], percentiles, p[1:])


def _stat_keys(name: str, mean: float, std: float, median_value: float, percentiles, values) -> dict[str, float]:
    """vLLM's keys for one metric: mean, median, std, then p{q} for each percentile (q = 50 is
    reported once, as the median)."""
    out = {f"mean_{name}_ms": float(mean), f"median_{name}_ms": float(median_value), f"std_{name}_ms": float(std)}
    for q, v in zip(percentiles, values):
        out.setdefault(percentile_key(q, name), float(v))
    return out


def distribution(values_ms: np.ndarray, name: str, counts: np.ndarray | None = None,
                 percentiles: tuple[float, ...] = DEFAULT_PERCENTILES) -> dict[str, float]:
    """vLLM's mean/median/std/p{q} keys for one metric, in ms (0.0 when there are no values)."""
    if len(values_ms) == 0 or (counts is not None and not counts.sum()):
        return _stat_keys(name, 0.0, 0.0, 0.0, percentiles, [0.0] * len(percentiles))
    if counts is None:
        mean, std, p50 = values_ms.mean(), values_ms.std(), median(values_ms)
        ps = quantiles(values_ms, tuple(percentiles))
    else:  # exactly rounded sums: the entries' order (macro-steps or single steps) cannot matter
        total = int(counts.sum())
        mean = exact_sum(values_ms * counts) / total
        std = math.sqrt(exact_sum(counts * (values_ms - mean) ** 2) / total)
        p50, *ps = weighted_percentiles(values_ms, counts, (50, *percentiles))
    return _stat_keys(name, mean, std, p50, percentiles, ps)


def quantiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
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
