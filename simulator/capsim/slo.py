"""Service-level objectives for sweeps and capacity searches, and how a run is judged against them.

Two forms, both in milliseconds:

- **Percentile objectives**, `METRIC_STAT_MS=LIMIT`: `ttft_p99_ms=2000`, `tpot_p50_ms=40`, ...
  (metric ttft, tpot, itl, e2el; statistic p50 or median, p90, p99, mean). Met when the run's
  statistic over its completed requests (ITL: over every inter-token gap) is at most the limit.
- **vLLM's goodput form**, `ttft:2000 tpot:50 e2el:10000`: a request is *good* when it completed
  and met every one of these thresholds (vLLM's `--goodput`). Met when good requests are at least
  `goodput_share` (default 90%) of the requests that arrived, so rejected and unfinished requests
  count against it.

A run meets its objectives when every percentile objective and the goodput objective hold and at
least one request completed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from capsim.errors import CapsimError, quote

METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # vLLM's --goodput accepts these three
STATS = {"p50": "median", "median": "median", "p90": "p90", "p99": "p99", "mean": "mean"}
DEFAULT_GOODPUT_SHARE = 0.9

_ALLOWED = (
    "allowed: METRIC_STAT_ms=LIMIT with METRIC one of ttft, tpot, itl, e2el and STAT one of p50, p90, "
    "p99, mean (e.g. ttft_p99_ms=2000 tpot_p99_ms=50), or vLLM's goodput form METRIC:LIMIT with METRIC "
    "one of ttft, tpot, e2el (e.g. 'ttft:2000 tpot:50'); limits are positive milliseconds"
)


@dataclass(frozen=True)
class Objectives:
    """What a point must meet: summary-key limits (e.g. p99_ttft_ms <= 2000) and goodput thresholds."""

    limits_ms: dict[str, float] = field(default_factory=dict)
    goodput_ms: dict[str, float] = field(default_factory=dict)
    goodput_share: float = DEFAULT_GOODPUT_SHARE

    @property
    def empty(self) -> bool:
        return not self.limits_ms and not self.goodput_ms

    def failures(self, record: dict) -> list[str]:
        """Why a run misses its objectives (empty when it meets them)."""
        if record["completed"] == 0:
            return ["no request completed"]
        out = [f"{key} {record[key]:,.1f} > {limit:,.1f}" for key, limit in self.limits_ms.items()
               if not record[key] <= limit]
        if self.goodput_ms and not record["good_share"] >= self.goodput_share:
            out.append(f"goodput {100 * record['good_share']:.1f}% < {100 * self.goodput_share:.0f}% of requests")
        return out

    def describe(self) -> list[str]:
        """One phrase per objective, for captions and plot legends."""
        out = [f"{label(key)} <= {limit:,.0f} ms" for key, limit in self.limits_ms.items()]
        if self.goodput_ms:
            each = " and ".join(f"{m.upper()} <= {v:,.0f} ms" for m, v in self.goodput_ms.items())
            out.append(f">= {100 * self.goodput_share:.0f}% of requests with {each} (goodput)")
        return out

    def goodput_thresholds(self) -> dict[str, float]:
        """Per-request thresholds that goodput is measured with: the goodput form's when given,
        else the percentile limits read per request (TTFT, TPOT, E2EL; the most lenient limit per
        metric), so a search under percentile SLOs still reports a goodput. Only the goodput form
        is judged (against goodput_share)."""
        if self.goodput_ms:
            return dict(self.goodput_ms)
        out: dict[str, float] = {}
        for key, limit in self.limits_ms.items():
            metric = key.split("_")[1]
            if metric in GOODPUT_METRICS:
                out[metric] = max(limit, out.get(metric, 0.0))
        return out

    def lines(self) -> list[tuple[str, float, str]]:
        """(metric, limit in ms, label) per objective, for SLO lines on latency plots."""
        out = [(key.split("_")[1], limit, f"SLO {label(key)} <= {limit:,.0f} ms") for key, limit in self.limits_ms.items()]
        out += [(m, v, f"goodput SLO: {m.upper()} <= {v:,.0f} ms") for m, v in self.goodput_ms.items()]
        return out

    def as_dict(self) -> dict:
        return {"limits_ms": dict(self.limits_ms), "goodput_ms": dict(self.goodput_ms),
                "goodput_share": self.goodput_share}


def from_dict(data: dict | None) -> Objectives:
    """The inverse of Objectives.as_dict (for plots redrawn from saved JSON)."""
    data = data or {}
    return Objectives(dict(data.get("limits_ms", {})), dict(data.get("goodput_ms", {})),
                      data.get("goodput_share", DEFAULT_GOODPUT_SHARE))


def label(key: str) -> str:
    """'p99_ttft_ms' -> 'TTFT p99'."""
    stat, metric, _ = key.split("_")
    return f"{metric.upper()} {'p50' if stat == 'median' else stat}"


def parse_objectives(texts: list[str] | None, *, goodput_share: float = DEFAULT_GOODPUT_SHARE,
                     workload_slo=None) -> Objectives:
    """`--slo` values -> Objectives. With none given, the workload's `slo:` block (vLLM's goodput
    thresholds) is used; with neither, the result is empty."""
    if not 0 < goodput_share <= 1:
        raise CapsimError(f"--goodput-share: must be in (0, 1] (got {goodput_share}); 0.9 means 90% of requests.")
    limits: dict[str, float] = {}
    goodput: dict[str, float] = {}
    for text in texts or []:
        for item in re.split(r"[\s,]+", text.strip()):
            if item:
                _parse_one(item, limits, goodput)
    if not texts and workload_slo is not None:
        goodput = {m: getattr(workload_slo, f"{m}_ms") for m in GOODPUT_METRICS
                   if getattr(workload_slo, f"{m}_ms") is not None}
    return Objectives(limits, goodput, goodput_share)


def objectives_for(workload, texts: list[str] | None, goodput_share: float = DEFAULT_GOODPUT_SHARE) -> Objectives:
    """parse_objectives for a workload file or config: its slo: block applies when no --slo is given."""
    from pathlib import Path

    slo = None
    if not texts:
        if isinstance(workload, (str, Path)):
            from capsim.simulation import load_workload

            workload = load_workload(workload)
        slo = workload.slo
    return parse_objectives(texts, goodput_share=goodput_share, workload_slo=slo)


def _parse_one(item: str, limits: dict, goodput: dict) -> None:
    if ":" in item and "=" not in item:
        metric, _, value = item.partition(":")
        metric = metric.strip().lower()
        if metric not in GOODPUT_METRICS:
            raise CapsimError(f"--slo {quote(item)}: unknown goodput metric {quote(metric)}; {_ALLOWED}.")
        goodput[metric] = _limit(value, item)
        return
    name, sep, value = item.partition("=")
    key = summary_key(name.strip().lower())
    if not sep or key is None:
        raise CapsimError(f"--slo {quote(item)}: unknown objective {quote(name)}; {_ALLOWED}.")
    limits[key] = _limit(value, item)


def summary_key(name: str) -> str | None:
    """'ttft_p99_ms' (or 'p99_ttft_ms', vLLM's summary key order) -> 'p99_ttft_ms'; None if unknown."""
    parts = name.removesuffix("_ms").split("_")
    if len(parts) != 2:
        return None
    a, b = parts
    metric, stat = (a, b) if a in METRICS else (b, a)
    if metric not in METRICS or stat not in STATS:
        return None
    return f"{STATS[stat]}_{metric}_ms"


def _limit(value: str, item: str) -> float:
    try:
        limit = float(value)
    except ValueError:
        limit = float("nan")
    if not 0 < limit < float("inf"):
        raise CapsimError(f"--slo {quote(item)}: the limit must be a positive number of milliseconds; {_ALLOWED}.")
    return limit
