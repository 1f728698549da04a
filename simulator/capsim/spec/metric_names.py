"""The names of latency statistics, as vLLM spells them in its summary: `ttft_p99_ms` in a limit,
`p99_ttft_ms` in the summary, `median_` for the 50th percentile. Plain naming rules, shared by the
workload schema (which checks an `slo:` block) and the results (which judge a run against it)."""

from __future__ import annotations

import math
import re

from capsim.errors import CapsimError

METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # vLLM's --goodput accepts these three


def percentile_word(q: float) -> str:
    """99 -> '99', 99.9 -> '99.9' (vLLM's spelling of a percentile in its summary keys)."""
    return str(int(q)) if q == int(q) else f"{q:g}"


def percentile_key(q: float, metric: str) -> str:
    """The summary key of a percentile: 50 -> 'median_ttft_ms' (the same number), 99.9 -> 'p99.9_ttft_ms'."""
    return f"median_{metric}_ms" if q == 50 else f"p{percentile_word(q)}_{metric}_ms"


def parse_percentile(text: str, where: str) -> float:
    """'p99.9' or '99.9' -> 99.9; a number strictly between 0 and 100."""
    try:
        q = float(text.strip().lower().removeprefix("p"))
    except ValueError:
        q = math.nan
    if not 0 < q < 100:
        raise CapsimError(f"{where}: {text!r} is not a percentile; give a number between 0 and 100 exclusive, "
                          "e.g. 50, 90, 95, 99, 99.9.")
    return q


def parse_percentiles(text: str | None) -> tuple[float, ...] | None:
    """`--percentiles 50,90,95,99,99.9` (as `vllm bench serve --metric-percentiles`) -> sorted unique values."""
    if text is None:
        return None
    values = [parse_percentile(t, "--percentiles") for t in re.split(r"[\s,]+", text.strip()) if t]
    if not values:
        raise CapsimError("--percentiles: give at least one percentile, e.g. 50,90,99.")
    return tuple(sorted(set(values)))


def summary_key(name: str) -> str | None:
    """'ttft_p99_ms' (or 'p99_ttft_ms', vLLM's key order) -> 'p99_ttft_ms'; 'tpot_p50_ms' ->
    'median_tpot_ms'; None if it names no statistic of a known metric."""
    name = name.strip().lower().removesuffix("_ms")
    parts = name.split("_")
    if len(parts) != 2:
        return None
    a, b = parts
    metric, stat = (a, b) if a in METRICS else (b, a)
    if metric not in METRICS:
        return None
    if stat in ("mean", "median"):
        return f"{stat}_{metric}_ms"
    if not re.fullmatch(r"p\d+(\.\d+)?", stat):
        return None
    q = float(stat[1:])
    return percentile_key(q, metric) if 0 < q < 100 else None


def key_percentile(key: str) -> float | None:
    """The percentile a summary key reports: 'p99.9_ttft_ms' -> 99.9, 'median_ttft_ms' -> 50, 'mean_...' -> None."""
    stat = key.split("_")[0]
    if stat == "median":
        return 50.0
    return float(stat[1:]) if stat.startswith("p") else None


def label(key: str) -> str:
    """'p99_ttft_ms' -> 'TTFT p99'; 'median_ttft_ms' -> 'TTFT p50'."""
    stat, metric, _ = key.split("_")
    return f"{metric.upper()} {'p50' if stat == 'median' else stat}"
