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

OUTCOMES = ("completed", "rejected", "unfinished")
BOUND_NAMES = ("compute", "memory", "overhead")
NAN = float("nan")


class _Rows:
    """Fixed-width numeric rows kept as one flat float64 buffer: 8 bytes a value (a million-
    request run stays small), one C call per row, one zero-copy matrix at the end. Integers are
    exact up to 2**53."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.data = array("d")

    def __len__(self) -> int:
        return len(self.data) // self.width

    def add(self, values) -> None:
        self.data.extend(values)

    def matrix(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.float64).reshape(-1, self.width)


class StepLog:
    """One row per forward pass, built lazily: a single step is one tuple; a macro-step is one
    segment (its step end times, and the few numbers every per-step value follows from).
    `frame()` expands everything at once, vectorised, and orders rows by time."""

    COLUMNS = ("end_s", "duration_s", "replica", "num_seqs", "slots", "prefill_tokens", "decode_tokens",
               "bound", "flops", "bytes", "kv_used_units", "kv_held_tokens", "kv_stored_tokens", "waiting",
               "preempted", "kv_shared_units")
    DTYPES = (np.float64, np.float64, np.int16, np.int32, np.int32, np.int32, np.int32, np.int8, np.float64,
              np.float64, np.int32, np.int64, np.int64, np.int32, np.int16, np.int32)

    def __init__(self, block_size: int = 1, schedule=None) -> None:
        self.block_size = block_size  # 1: contiguous (units are tokens, nothing grows in a segment)
        self.schedule = schedule  # tokens a decoder gains per step (None: one; see capsim.speculative)
        self.rows = 0
        self._single = _Rows(len(self.COLUMNS))
        self._segments = _Rows(13)
        self._ends = array("d")  # every segment's step end times, flat
        self._residues = _Rows(block_size)
        self._no_residues = (0,) * block_size
        self._waiting_steps: dict[int, np.ndarray] = {}  # segments whose queue changed mid-way

    def __len__(self) -> int:
        return self.rows

    @property
    def segment_ends(self) -> np.ndarray:
        return np.frombuffer(self._ends, dtype=np.float64)

    def add(self, *values) -> None:
        """One step, the values in COLUMNS order."""
        self._single.add(values)
        self.rows += 1

    def add_segment(self, ends, start_s: float, *, replica: int, num_seqs: int, slots: int, used0: int,
                    residues: tuple[int, ...] | None, stored0: int, waiting, ctx_full0: int,
                    ctx_sliding0: int, below_window: int, shared: int = 0, step0: int = 0) -> None:
        """len(ends) decode steps of num_seqs sequences from start_s. Step j (1..k) attends
        ctx_full0 + num_seqs*j positions (ctx_sliding0 + below_window*j in sliding layers),
        holds used0 + the blocks `residues` add over j steps and stored0 + num_seqs*j tokens;
        `waiting` is the queue length (a number, or one per step)."""
        k = len(ends)
        if isinstance(ends, np.ndarray):
            self._ends.frombytes(ends.astype(np.float64, copy=False).tobytes())
        else:
            self._ends.extend(ends)
        if not isinstance(waiting, int):
            self._waiting_steps[len(self._segments)] = waiting
            waiting = 0
        self._segments.add((k, start_s, replica, num_seqs, slots, used0, stored0, waiting, ctx_full0, ctx_sliding0,
                            below_window, shared, step0))
        self._residues.add(residues or self._no_residues)
        self.rows += k

    def frame(self, pricer=None) -> pd.DataFrame:
        """All rows in time order. `pricer(n, ctx_full, ctx_sliding)` gives the FLOPs, bytes and
        bound of decode steps (CostModel.decode_detail)."""
        parts = []
        if len(self._single):
            single = self._single.matrix()
            parts.append({name: single[:, i].astype(dt) for i, (name, dt) in enumerate(zip(self.COLUMNS, self.DTYPES))})
        if len(self._segments):
            parts.append(self._expand_segments(pricer))
        if not parts:
            return pd.DataFrame({name: np.zeros(0, dtype=dt) for name, dt in zip(self.COLUMNS, self.DTYPES)})
        cols = {name: np.concatenate([p[name] for p in parts]).astype(dt, copy=False)
                for name, dt in zip(self.COLUMNS, self.DTYPES)}
        order = np.lexsort((cols["replica"], cols["end_s"]))
        return pd.DataFrame({name: col[order] for name, col in cols.items()})

    def _expand_segments(self, pricer) -> dict:
        seg = self._segments.matrix()  # one row per segment, columns as stored
        ks = seg[:, 0].astype(np.int64)
        first = np.cumsum(ks) - ks
        which = np.repeat(np.arange(len(ks)), ks)
        j = np.arange(int(ks.sum())) - first[which] + 1  # 1..k within each segment

        def per_step(i, dtype=np.int64):
            return seg[which, i].astype(dtype)

        ends = np.frombuffer(self._ends, dtype=np.float64)
        before = np.roll(ends, 1)
        before[first] = seg[:, 1]
        n = per_step(3)
        gained, offset = j, j  # tokens gained by step j, and where its first new token sits
        if self.schedule is not None and not self.schedule.single:
            step0 = per_step(12)
            gained = self.schedule.total(step0 + j) - self.schedule.total(step0)
            offset = self.schedule.total(step0 + j - 1) - self.schedule.total(step0) + 1
        detail = pricer(n, (per_step(8) + n * offset).astype(np.float64),
                        (per_step(9) + per_step(10) * offset).astype(np.float64))
        used = per_step(5) + self._growth(which, gained, n)
        waiting = per_step(7)
        for index, steps in self._waiting_steps.items():
            waiting[first[index]:first[index] + ks[index]] = steps
        zeros = np.zeros(len(j), dtype=np.int32)
        return {
            "end_s": ends, "duration_s": ends - before, "replica": per_step(2), "num_seqs": n, "slots": per_step(4),
            "prefill_tokens": zeros, "decode_tokens": n * _per_step_gain(gained, j),
            "bound": detail.bound, "flops": detail.flops,
            "bytes": detail.bytes, "kv_used_units": used, "kv_held_tokens": used * self.block_size,
            "kv_stored_tokens": per_step(6) + n * gained, "waiting": waiting, "preempted": zeros,
            "kv_shared_units": per_step(11),
        }

    def _growth(self, which: np.ndarray, j: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Blocks added by step j of each segment: a block per sequence per block_size steps,
        the partial cycle read from the segment's residue histogram."""
        bs = self.block_size
        if bs == 1:
            return np.zeros(len(j), dtype=np.int64)
        residues = self._residues.matrix().astype(np.int64)
        prefix = np.concatenate((np.zeros((len(residues), 1), dtype=np.int64), np.cumsum(residues, axis=1)), axis=1)
        return (j // bs) * n + prefix[which, j % bs]


def _per_step_gain(gained: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Tokens gained in each step from the running totals (a segment's first step: its total)."""
    step = np.diff(gained, prepend=0)
    first = j == 1
    step[first] = gained[first]
    return step


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


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, gaps: tuple[np.ndarray, ...], *,
              duration_s: float, peak_flops: float, bandwidth_bytes_per_s: float, kv_capacity_tokens: int,
              slo=None, replicas: int = 1) -> dict:
    """The run's summary: vLLM's benchmark keys first, then capsim's (DESIGN §4)."""
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
