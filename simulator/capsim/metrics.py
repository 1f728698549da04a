"""Flat records -> DataFrames -> summary (DESIGN §4, vLLM's metric definitions).

The engine writes compact numpy columns: one row per arrived request (`RequestLog`), one row per
forward pass (`StepLog`), and inter-token gaps as (gap, count) pairs (`GapLog`): every sequence in
a decode step that also emitted in the previous step has the same gap, the step's duration, so a
step contributes one pair instead of one value per sequence. Percentiles over the pairs are
exactly numpy's default (linear) percentiles over the expanded list.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

OUTCOMES = ("completed", "rejected", "unfinished")
BOUND_NAMES = ("compute", "memory", "overhead")


class _Columns:
    """Growable numpy columns with a fixed schema."""

    def __init__(self, schema: dict[str, type], capacity: int = 1024) -> None:
        self.schema = schema
        self.size = 0
        self.cols = {name: np.zeros(capacity, dtype=dt) for name, dt in schema.items()}

    def _reserve(self, n: int) -> None:
        cap = len(next(iter(self.cols.values())))
        if self.size + n > cap:
            new_cap = max(2 * cap, self.size + n)
            for name, col in self.cols.items():
                grown = np.zeros(new_cap, dtype=col.dtype)
                grown[: self.size] = col[: self.size]
                self.cols[name] = grown

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({name: col[: self.size] for name, col in self.cols.items()})

    def column(self, name: str) -> np.ndarray:
        return self.cols[name][: self.size]


class StepLog(_Columns):
    """One row per forward pass, in time order. Rows from a macro-step are added in one call."""

    SCHEMA = {
        "end_s": np.float64, "duration_s": np.float64, "replica": np.int16, "num_seqs": np.int32,
        "slots": np.int32, "prefill_tokens": np.int32, "decode_tokens": np.int32, "bound": np.int8,
        "flops": np.float64, "bytes": np.float64, "kv_used_units": np.int32, "kv_held_tokens": np.int64,
        "kv_stored_tokens": np.int64, "waiting": np.int32, "preempted": np.int16,
    }

    def __init__(self) -> None:
        super().__init__(self.SCHEMA)

    def add(self, **values) -> None:
        """Append `n` rows; each value is a scalar (broadcast) or an array of length n."""
        n = max((len(v) for v in values.values() if isinstance(v, np.ndarray)), default=1)
        self._reserve(n)
        start, self.size = self.size, self.size + n
        for name, value in values.items():
            self.cols[name][start : self.size] = value


class RequestLog(_Columns):
    """One row per arrived request, indexed by request id."""

    SCHEMA = {
        "arrival_s": np.float64, "prompt_tokens": np.int32, "output_tokens": np.int32,
        "outcome": np.int8, "reject_reason": np.int8, "first_scheduled_s": np.float64,
        "first_token_s": np.float64, "finish_s": np.float64, "generated_tokens": np.int32,
        "preemptions": np.int32, "recomputed_tokens": np.int64, "replica": np.int16, "user": np.int32,
        "class_index": np.int16,
    }

    def __init__(self, reject_reasons: tuple[str, ...], class_names: tuple[str, ...] = ("all",)) -> None:
        super().__init__(self.SCHEMA)
        self.reject_reasons, self.class_names = reject_reasons, class_names

    def write(self, req, outcome: str, reason: str | None = None) -> None:
        """Record a request's final state (outcome: completed, rejected or unfinished)."""
        i = req.id
        self._reserve(max(0, i + 1 - self.size))
        self.size = max(self.size, i + 1)
        c = self.cols
        c["arrival_s"][i], c["prompt_tokens"][i], c["output_tokens"][i] = req.arrival_s, req.prompt_tokens, req.output_tokens
        c["outcome"][i] = OUTCOMES.index(outcome)
        c["reject_reason"][i] = -1 if reason is None else self.reject_reasons.index(reason)
        nan = np.nan
        c["first_scheduled_s"][i] = nan if req.first_scheduled_s is None else req.first_scheduled_s
        c["first_token_s"][i] = nan if req.first_token_s is None else req.first_token_s
        c["finish_s"][i] = nan if req.finish_s is None else req.finish_s
        c["generated_tokens"][i], c["preemptions"][i] = req.generated_tokens, req.preemptions
        c["recomputed_tokens"][i], c["replica"][i] = req.recomputed_tokens, req.replica
        c["user"][i] = -1 if req.user is None else req.user
        c["class_index"][i] = req.class_index

    def frame(self) -> pd.DataFrame:
        df = super().frame()
        df.insert(0, "request_id", np.arange(self.size))
        df["outcome"] = pd.Categorical.from_codes(df["outcome"], OUTCOMES)
        reasons = np.array(("",) + self.reject_reasons, dtype=object)
        df["reject_reason"] = reasons[df["reject_reason"].to_numpy() + 1]
        df["user"] = df["user"].where(df["user"] >= 0, pd.NA).astype("Int32")
        df.insert(1, "request_class", pd.Categorical.from_codes(df.pop("class_index"), self.class_names))
        ms = 1e3
        df["ttft_ms"] = (df["first_token_s"] - df["arrival_s"]) * ms
        df["e2el_ms"] = (df["finish_s"] - df["arrival_s"]) * ms
        df["queueing_ms"] = (df["first_scheduled_s"] - df["arrival_s"]) * ms
        many = df["generated_tokens"] > 1
        df["tpot_ms"] = ((df["finish_s"] - df["first_token_s"]) * ms / (df["generated_tokens"] - 1)).where(many)
        return df


class GapLog:
    """Inter-token latencies as (gap_s, count, request class) triples, in emission order."""

    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending: list[tuple[float, int, int]] = []

    def add(self, gap_s: float, count: int = 1, cls: int = 0) -> None:
        if count:
            self._pending.append((gap_s, count, cls))

    def add_many(self, gaps_s: np.ndarray, count: int, cls: int = 0) -> None:
        """The same count (and class) for every gap in gaps_s."""
        self._flush()
        n = len(gaps_s)
        self._chunks.append((np.asarray(gaps_s, dtype=np.float64), np.full(n, count, dtype=np.int64),
                             np.full(n, cls, dtype=np.int16)))

    def _flush(self) -> None:
        if self._pending:
            g, c, k = zip(*self._pending)
            self._chunks.append((np.array(g, dtype=np.float64), np.array(c, dtype=np.int64), np.array(k, dtype=np.int16)))
            self._pending = []

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gaps_s, counts, classes)."""
        self._flush()
        if not self._chunks:
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int16)
        return tuple(np.concatenate(parts) for parts in zip(*self._chunks))


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
    else:
        total = counts.sum()
        mean = float((values_ms * counts).sum() / total)
        std = float(np.sqrt((counts * (values_ms - mean) ** 2).sum() / total))
        stats = (mean, weighted_percentile(values_ms, counts, 50), std,
                 weighted_percentile(values_ms, counts, 90), weighted_percentile(values_ms, counts, 99))
    return {f"{k}_{name}_ms": float(v) for k, v in zip(keys, stats)}


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, gaps: tuple[np.ndarray, ...], *,
              duration_s: float, peak_flops: float, bandwidth_bytes_per_s: float, kv_capacity_tokens: int,
              slo=None, replicas: int = 1) -> dict:
    """The run's summary: vLLM's benchmark keys first, then capsim's (DESIGN §4)."""
    done = requests[requests["outcome"] == "completed"]
    outcome_counts = requests["outcome"].value_counts()
    duration = duration_s if duration_s > 0 else float("nan")
    out_tokens = int(done["generated_tokens"].sum())
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


def _step_stats(steps: pd.DataFrame, duration_s: float, peak: float, bandwidth: float, capacity: int,
                replicas: int) -> dict:
    n = len(steps)
    if n == 0:
        return {"num_steps": 0, "slot_utilisation": 0.0, "kv_utilisation": 0.0, "kv_internal_waste": 0.0,
                "kv_capacity_utilisation": 0.0, "mfu": 0.0, "mbu": 0.0, "gpu_busy_fraction": 0.0,
                "mean_batch_size": 0.0, "max_batch_size": 0, "bound_fraction": {b: 0.0 for b in BOUND_NAMES}}
    dt = steps["duration_s"].to_numpy()
    busy = float(dt.sum())
    held = steps["kv_held_tokens"].to_numpy(dtype=np.float64)
    stored = steps["kv_stored_tokens"].to_numpy(dtype=np.float64)
    held_time = float((held * dt).sum())
    stored_time = float((stored * dt).sum())
    kv_util = stored_time / held_time if held_time > 0 else 0.0
    bound = steps["bound"].to_numpy()
    return {
        "num_steps": int(n),
        "slot_utilisation": float(steps["num_seqs"].sum() / steps["slots"].sum()),
        "kv_utilisation": kv_util,
        "kv_internal_waste": 1.0 - kv_util if held_time > 0 else 0.0,
        "kv_capacity_utilisation": stored_time / (capacity * busy) if capacity and busy else 0.0,
        "mfu": float(steps["flops"].sum() / (peak * busy)) if busy else 0.0,
        "mbu": float(steps["bytes"].sum() / (bandwidth * busy)) if busy else 0.0,
        "gpu_busy_fraction": busy / (duration_s * replicas) if duration_s > 0 else 0.0,
        "mean_batch_size": float((steps["num_seqs"].to_numpy() * dt).sum() / busy) if busy else 0.0,
        "max_batch_size": int(steps["num_seqs"].max()),
        "bound_fraction": {b: float(dt[bound == i].sum() / busy) if busy else 0.0 for i, b in enumerate(BOUND_NAMES)},
    }
