"""Flat records -> DataFrames -> summary (DESIGN §4, vLLM's metric definitions).

The engine writes compact flat buffers: one row per arrived request (`RequestLog`), one row per
forward pass (`StepLog`, a macro-step as one segment), and inter-token gaps as (gap, count) pairs
(`GapLog`): every sequence in a decode step that also emitted in the previous step has the same
gap, the step's duration, so a step contributes one pair instead of one value per sequence.
Percentiles over the pairs are exactly numpy's default (linear) percentiles over the expanded list.
"""

from __future__ import annotations

import math
from array import array

import numpy as np
import pandas as pd

from capsim.step_log import Rows as _Rows

OUTCOMES = ("completed", "rejected", "unfinished")
BOUND_NAMES = ("compute", "memory", "overhead")
NAN = float("nan")


class RequestLog:
    """One row per arrived request, written when its outcome is final."""

    FIELDS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "outcome", "reject_reason",
              "first_scheduled_s", "first_token_s", "finish_s", "generated_tokens", "preemptions",
              "recomputed_tokens", "replica", "user", "class_index", "samples")

    def __init__(self, reject_reasons: tuple[str, ...], class_names: tuple[str, ...] = ("all",)) -> None:
        self.reject_reasons, self.class_names = reject_reasons, class_names
        self._rows = _Rows(len(self.FIELDS))

    def __len__(self) -> int:
        return len(self._rows)

    def write(self, req, outcome: str, reason: str | None = None) -> None:
        """Record a request's final state (outcome: completed, rejected or unfinished)."""
        self._rows.add((req.id, req.arrival_s, req.prompt_tokens, req.output_tokens, OUTCOMES.index(outcome),
                        -1 if reason is None else self.reject_reasons.index(reason),
                        NAN if req.first_scheduled_s is None else req.first_scheduled_s,
                        NAN if req.first_token_s is None else req.first_token_s,
                        NAN if req.finish_s is None else req.finish_s, req.generated_tokens, req.preemptions,
                        req.recomputed_tokens, req.replica, -1 if req.user is None else req.user, req.class_index,
                        req.samples))

    def frame(self) -> pd.DataFrame:
        rows = self._rows.matrix()
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        col = dict(zip(self.FIELDS, rows.T))
        user = col["user"].astype(np.int64)
        df = pd.DataFrame({
            "request_id": col["id"].astype(np.int64),
            "request_class": pd.Categorical.from_codes(col["class_index"].astype(np.int16), self.class_names),
            "arrival_s": col["arrival_s"],
            "prompt_tokens": col["prompt_tokens"].astype(np.int32),
            "output_tokens": col["output_tokens"].astype(np.int32),
            "outcome": pd.Categorical.from_codes(col["outcome"].astype(np.int8), OUTCOMES),
            "reject_reason": np.array(("",) + self.reject_reasons, dtype=object)[col["reject_reason"].astype(np.int64) + 1],
            "first_scheduled_s": col["first_scheduled_s"], "first_token_s": col["first_token_s"],
            "finish_s": col["finish_s"],
            "generated_tokens": col["generated_tokens"].astype(np.int32),
            "samples": col["samples"].astype(np.int32),
            "preemptions": col["preemptions"].astype(np.int32),
            "recomputed_tokens": col["recomputed_tokens"].astype(np.int64),
            "replica": col["replica"].astype(np.int16),
            "user": pd.array(np.where(user >= 0, user, 0), dtype="Int32"),
        })
        df.loc[user < 0, "user"] = pd.NA
        ms = 1e3
        df["ttft_ms"] = (df["first_token_s"] - df["arrival_s"]) * ms
        df["e2el_ms"] = (df["finish_s"] - df["arrival_s"]) * ms
        df["queueing_ms"] = (df["first_scheduled_s"] - df["arrival_s"]) * ms
        many = df["generated_tokens"] > 1
        df["tpot_ms"] = ((df["finish_s"] - df["first_token_s"]) * ms / (df["generated_tokens"] - 1)).where(many)
        return df


class GapLog:
    """Inter-token latencies as (gap_s, count, request class) entries. A macro-step adds one
    segment: its step end times, every gap between them shared by `counts[c]` sequences of each
    class. Entry order does not matter: statistics over them are order-independent."""

    def __init__(self) -> None:
        self._single = _Rows(3)
        self._lengths = array("q")  # steps of each decode segment; their end times are the StepLog's
        self._counts: _Rows | None = None

    def add(self, gap_s: float, count: int = 1, cls: int = 0) -> None:
        if count:
            self._single.add((gap_s, count, cls))

    def add_segment(self, k: int, counts: tuple[int, ...]) -> None:
        """The gaps between the ends of a k-step decode segment (recorded in the StepLog, in the
        same order), each shared by counts[c] sequences of class c."""
        self._lengths.append(k)
        if self._counts is None:
            self._counts = _Rows(len(counts))
        self._counts.add(counts)

    def arrays(self, segment_ends: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gaps_s, counts, classes); segment_ends: the StepLog's flat segment end times."""
        parts = []
        if len(self._single):
            m = self._single.matrix()
            parts.append((m[:, 0].copy(), m[:, 1].astype(np.int64), m[:, 2].astype(np.int16)))
        if len(self._lengths):
            parts += self._expand(segment_ends)
        if not parts:
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int16)
        return tuple(np.concatenate(p) for p in zip(*parts))

    def _expand(self, ends: np.ndarray) -> list[tuple]:
        ks = np.frombuffer(self._lengths, dtype=np.int64)
        keep = np.ones(len(ends) - 1, dtype=bool)
        keep[(np.cumsum(ks) - 1)[:-1]] = False  # the jump from one segment to the next is no gap
        gaps = np.diff(ends)[keep]
        counts = self._counts.matrix().astype(np.int64)  # segments x classes
        out = []
        for cls in range(counts.shape[1]):
            per_gap = np.repeat(counts[:, cls], ks - 1)
            mask = per_gap > 0
            out.append((gaps[mask], per_gap[mask], np.full(int(mask.sum()), cls, dtype=np.int16)))
        return out


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """np.percentile(expanded, q) (linear method) without expanding the (value, count) pairs."""
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[order]
    ends = np.cumsum(c)  # expanded index range of each value: [ends - c, ends)
    n = int(ends[-1])
    h = (n - 1) * q / 100.0
    lo = int(np.floor(h))
    hi = min(lo + 1, n - 1)
    v_lo = v[np.searchsorted(ends, lo, side="right")]
    v_hi = v[np.searchsorted(ends, hi, side="right")]
    return float(v_lo + (h - lo) * (v_hi - v_lo))


def distribution(values_ms: np.ndarray, name: str, counts: np.ndarray | None = None) -> dict[str, float]:
    """vLLM's mean/median/std/p90/p99 keys for one metric, in ms (0.0 when there are no values)."""
    keys = ("mean", "median", "std", "p90", "p99")
    if len(values_ms) == 0:
        return {f"{k}_{name}_ms": 0.0 for k in keys}
    if counts is None:
        stats = (values_ms.mean(), np.median(values_ms), values_ms.std(),
                 np.percentile(values_ms, 90), np.percentile(values_ms, 99))
    else:  # exactly rounded sums: the entries' order (macro-steps or single steps) cannot matter
        total = int(counts.sum())
        mean = math.fsum((values_ms * counts).tolist()) / total
        std = math.sqrt(math.fsum((counts * (values_ms - mean) ** 2).tolist()) / total)
        stats = (mean, weighted_percentile(values_ms, counts, 50), std,
                 weighted_percentile(values_ms, counts, 90), weighted_percentile(values_ms, counts, 99))
    return {f"{k}_{name}_ms": float(v) for k, v in zip(keys, stats)}


def summarize(requests: pd.DataFrame, steps: dict, gaps: tuple[np.ndarray, ...], *,
              duration_s: float, peak_flops: float, bandwidth_bytes_per_s: float, kv_capacity_tokens: int,
              slo=None, replicas: int = 1) -> dict:
    """The run's summary: vLLM's benchmark keys first, then capsim's (DESIGN §4). `steps` is
    StepLog.totals(): the per-step sums."""
    done = requests[requests["outcome"] == "completed"]
    outcome_counts = requests["outcome"].value_counts()
    duration = duration_s if duration_s > 0 else float("nan")
    out_tokens = int((done["generated_tokens"] * done["samples"]).sum())
    in_tokens = int(done["prompt_tokens"].sum())
    s: dict = {
        "completed": int(len(done)),
        "duration": float(duration_s),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
    }
    if slo is not None:
        s["request_goodput"] = int(_meets_slo(done, slo).sum()) / duration
    s.update(latencies(done, gaps))
    rejected = requests[requests["outcome"] == "rejected"]
    s.update({
        "arrived": int(len(requests)),
        "rejected": int(outcome_counts.get("rejected", 0)),
        "rejected_reasons": {k: int(v) for k, v in rejected["reject_reason"].value_counts().sort_index().items()},
        "unfinished": int(outcome_counts.get("unfinished", 0)),
        "preemptions": int(requests["preemptions"].sum()),
        "recomputed_tokens": int(requests["recomputed_tokens"].sum()),
    })
    s.update(_step_stats(steps, duration_s, peak_flops, bandwidth_bytes_per_s, kv_capacity_tokens, replicas))
    return s


def latencies(done: pd.DataFrame, gaps: tuple[np.ndarray, ...], cls: int | None = None) -> dict:
    """TTFT, TPOT, ITL, E2EL and queueing distributions of completed requests (one class or all)."""
    gap_s, gap_n, gap_cls = gaps
    if cls is not None:
        keep = gap_cls == cls
        gap_s, gap_n = gap_s[keep], gap_n[keep]
    out = distribution(done["ttft_ms"].to_numpy(), "ttft")
    out.update(distribution(done["tpot_ms"].dropna().to_numpy(), "tpot"))
    out.update(distribution(gap_s * 1e3, "itl", gap_n))
    out.update(distribution(done["e2el_ms"].to_numpy(), "e2el"))
    out.update(distribution(done["queueing_ms"].to_numpy(), "queueing"))
    return out


def per_class(requests: pd.DataFrame, gaps: tuple[np.ndarray, ...]) -> dict:
    """The latency keys per request class (mixed workloads), with counts."""
    out = {}
    for i, name in enumerate(requests["request_class"].cat.categories):
        mine = requests[requests["request_class"] == name]
        done = mine[mine["outcome"] == "completed"]
        out[name] = {"arrived": int(len(mine)), "completed": int(len(done))} | latencies(done, gaps, i)
    return out


def _meets_slo(done: pd.DataFrame, slo) -> pd.Series:
    ok = pd.Series(True, index=done.index)
    if slo.ttft_ms is not None:
        ok &= done["ttft_ms"] <= slo.ttft_ms
    if slo.tpot_ms is not None:
        ok &= done["tpot_ms"].fillna(0.0) <= slo.tpot_ms
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
