"""Service-level objectives and how a run is judged against them (DESIGN §8: two kinds, named apart).

- **Percentile limits**, `METRIC_STAT_ms=LIMIT`: `ttft_p99_ms=2000`, `tpot_p95_ms=40`, `e2el_p99.9_ms=9000`,
  `itl_mean_ms=30` (metric ttft, tpot, itl, e2el; statistic mean, median / p50, or any percentile
  pNN). Met when the run's reported statistic (over the steady window) is at most the limit.
- **Goodput thresholds** (vLLM's `--goodput ttft:2000 tpot:50 e2el:10000`): a request is *good* when
  it completed and met every threshold. Met when good requests are at least `goodput_share` (default
  90%) of the requests that arrived in the window, so rejected and unfinished requests count against it.

A run meets its objectives when it is not saturated, at least one request completed, and every
percentile limit and the goodput threshold hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from capsim.errors import CapsimError, quote
from capsim.spec.metric_names import GOODPUT_METRICS, key_percentile, label, summary_key

DEFAULT_GOODPUT_SHARE = 0.9
DEFAULT_PERCENTILES = (90.0, 99.0)  # reported besides the mean and median unless --percentiles says otherwise

_ALLOWED = (
    "allowed: a percentile limit METRIC_STAT_ms=LIMIT with METRIC one of ttft, tpot, itl, e2el and STAT one of "
    "mean, median, or a percentile such as p50, p90, p95, p99, p99.9 (e.g. ttft_p99_ms=2000 tpot_p99_ms=50), or "
    "vLLM's goodput thresholds METRIC:LIMIT with METRIC one of ttft, tpot, e2el (e.g. 'ttft:2000 tpot:50'); "
    "limits are positive milliseconds"
)


@dataclass(frozen=True)
class Objectives:
    """What a point must meet: percentile limits (summary key -> ms) and goodput thresholds (metric -> ms)."""

    limits_ms: dict[str, float] = field(default_factory=dict)
    goodput_ms: dict[str, float] = field(default_factory=dict)
    goodput_share: float = DEFAULT_GOODPUT_SHARE

    @property
    def empty(self) -> bool:
        return not self.limits_ms and not self.goodput_ms

    def percentiles(self) -> tuple[float, ...]:
        """Percentiles the limits need reported (50 is the median, always reported)."""
        qs = {key_percentile(k) for k in self.limits_ms}
        return tuple(sorted(q for q in qs if q is not None and q != 50))

    def checks(self, record: dict) -> list[tuple[str, bool, str]]:
        """(kind, met, sentence) per objective: kind 'limit', 'goodput', 'saturation', 'steadiness' or
        'completion'. `record`: a summary or a planning record (keys saturated, too_short, ...)."""
        out: list[tuple[str, bool, str]] = []
        sat = record.get("saturation") or {}  # a summary nests these; a planning record has them flat
        if record.get("saturated"):
            evidence = record.get("saturation_evidence") or sat.get("evidence") or "the queue grows"
            out.append(("saturation", False, f"saturated: {evidence}"))
        if record.get("too_short", sat.get("too_short")):
            spans = record.get("window_latencies", sat.get("window_latencies")) or 0.0
            out.append(("steadiness", False, f"too short to judge: the steady window spans {spans:.1f} mean "
                                             "end-to-end latencies (at least 10 needed); simulate more requests"))
        if not record.get("completed"):
            out.append(("completion", False, "no request completed"))
            return out
        for key, limit in self.limits_ms.items():
            value = record.get(key)
            met = value is not None and value <= limit
            shown = "not reported" if value is None else f"{value:,.1f} ms"
            out.append(("limit", met, f"{label(key)} {shown} {'<=' if met else '>'} {limit:,.1f} ms"))
        if self.goodput_ms:
            share = record.get("good_share")
            met = share is not None and share >= self.goodput_share
            each = ", ".join(f"{m.upper()} <= {v:,.0f} ms" for m, v in self.goodput_ms.items())
            shown = "n/a" if share is None else f"{100 * share:.1f}%"
            out.append(("goodput", met, f"goodput {shown} {'>=' if met else '<'} {100 * self.goodput_share:.0f}% "
                                         f"of requests with {each}"))
        return out

    def failures(self, record: dict) -> list[str]:
        """Why a run misses its objectives (empty when it meets them)."""
        return [text for _, met, text in self.checks(record) if not met]

    def describe(self) -> list[str]:
        """One phrase per objective, for captions and plot legends, each naming its kind."""
        out = [f"{label(key)} <= {limit:,.0f} ms (percentile limit)" for key, limit in self.limits_ms.items()]
        if self.goodput_ms:
            each = " and ".join(f"{m.upper()} <= {v:,.0f} ms" for m, v in self.goodput_ms.items())
            out.append(f">= {100 * self.goodput_share:.0f}% of requests with {each} (goodput)")
        return out

    def lines(self) -> list[tuple[str, float, str]]:
        """(metric, limit in ms, label) per objective, for SLO lines on latency plots."""
        out = [(key.split("_")[1], limit, f"limit: {label(key)} <= {limit:,.0f} ms") for key, limit in self.limits_ms.items()]
        out += [(m, v, f"goodput: {m.upper()} <= {v:,.0f} ms") for m, v in self.goodput_ms.items()]
        return out

    def as_dict(self) -> dict:
        return {"limits_ms": dict(self.limits_ms), "goodput_ms": dict(self.goodput_ms),
                "goodput_share": self.goodput_share}


def from_dict(data: dict | None) -> Objectives:
    """The inverse of Objectives.as_dict (for plots redrawn from saved JSON)."""
    data = data or {}
    return Objectives(dict(data.get("limits_ms", {})), dict(data.get("goodput_ms", {})),
                      data.get("goodput_share", DEFAULT_GOODPUT_SHARE))


def from_workload(slo) -> Objectives:
    """A workload's `slo:` block (workload_schema.SLO, or None) as Objectives."""
    if slo is None:
        return Objectives()
    limits = {summary_key(name) or name: value for name, value in (slo.limits or {}).items()}
    goodput, share = {}, DEFAULT_GOODPUT_SHARE
    if slo.goodput is not None:
        goodput = {m: getattr(slo.goodput, f"{m}_ms") for m in GOODPUT_METRICS
                   if getattr(slo.goodput, f"{m}_ms") is not None}
        share = slo.goodput.min_share
    return Objectives(limits, goodput, share)


def parse_objectives(texts: list[str] | None, *, goodput_share: float | None = None,
                     workload_slo=None) -> Objectives:
    """`--slo` values -> Objectives. With none given, the workload's `slo:` block is used (its goodput
    share unless --goodput-share is given); with neither, the result is empty."""
    if goodput_share is not None and not 0 < goodput_share <= 1:
        raise CapsimError(f"--goodput-share: must be in (0, 1] (got {goodput_share}); 0.9 means 90% of requests.")
    if not texts:
        base = from_workload(workload_slo)
        if goodput_share is None:
            return base
        return Objectives(base.limits_ms, base.goodput_ms, goodput_share)
    limits: dict[str, float] = {}
    goodput: dict[str, float] = {}
    for text in texts:
        for item in re.split(r"[\s,]+", text.strip()):
            if item:
                _parse_one(item, limits, goodput)
    return Objectives(limits, goodput, DEFAULT_GOODPUT_SHARE if goodput_share is None else goodput_share)


def objectives_for(workload, texts: list[str] | None, goodput_share: float | None = None) -> Objectives:
    """parse_objectives for a workload config (capsim.api.load_workload): its slo: block applies
    when no --slo is given."""
    return parse_objectives(texts, goodput_share=goodput_share, workload_slo=None if texts else workload.slo)


def _parse_one(item: str, limits: dict, goodput: dict) -> None:
    if ":" in item and "=" not in item:
        metric, _, value = item.partition(":")
        metric = metric.strip().lower()
        if metric not in GOODPUT_METRICS:
            raise CapsimError(f"--slo {quote(item)}: unknown goodput metric {quote(metric)}; {_ALLOWED}.")
        goodput[metric] = _limit(value, item)
        return
    name, sep, value = item.partition("=")
    key = summary_key(name)
    if not sep or key is None:
        raise CapsimError(f"--slo {quote(item)}: unknown objective {quote(name)}; {_ALLOWED}.")
    limits[key] = _limit(value, item)


def _limit(value: str, item: str) -> float:
    try:
        limit = float(value)
    except ValueError:
        limit = float("nan")
    if not 0 < limit < float("inf"):
        raise CapsimError(f"--slo {quote(item)}: the limit must be a positive number of milliseconds; {_ALLOWED}.")
    return limit
