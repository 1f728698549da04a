"""The engine's request-side records: one row per request (RequestLog) and the inter-token gaps
its sequences see (GapLog), and when its prompt chunks ran and it was preempted (PhaseLog), written into flat buffers (capsim.sim.buffers) as the run goes.

PERF: they are written once per request and once per step, so they live in sim/ (compiled); the
summary that reads them (capsim.results.summary) stays plain Python.
"""

from __future__ import annotations

import numpy as np

from capsim.core.names import OUTCOMES
from capsim.core.request import Request
from capsim.sim.buffers import Records, Rows

_NAN = float("nan")
# GapLog.parts(): single gaps (gap_s, count, cls, end_s columns), then per macro-step segment its
# step count, its sequences per class and whether its first gap is its own, the segments' flat
# end times and their start times.
GapParts = tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]

class RequestLog:
    """One row per arrived request, written when its outcome is final."""

    FIELDS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "outcome", "reject_reason",
              "first_scheduled_s", "first_token_s", "finish_s", "generated_tokens", "preemptions",
              "recomputed_tokens", "replica", "user", "first_of_user", "class_index", "samples")

    def __init__(self, reject_reasons: tuple[str, ...], class_names: tuple[str, ...] = ("all",),
                 front_end: tuple[float, float] = (0.0, 0.0)) -> None:
        self.reject_reasons, self.class_names = reject_reasons, class_names
        # The serving front end's time per request and per prompt token (CostModel.front_end): the
        # client sees the first and the last token that much later than the engine emits them.
        self.front_end = front_end
        self._rows = Records(self.FIELDS, ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s"))

    def __len__(self) -> int:
        return len(self._rows)

    def write(self, req: Request, outcome: str, reason: str | None = None) -> None:
        """Record a request's final state (outcome: completed, rejected or unfinished)."""
        self._rows.add(
            (req.arrival_s, _NAN if req.first_scheduled_s is None else req.first_scheduled_s,
             _NAN if req.first_token_s is None else req.first_token_s, _NAN if req.finish_s is None else req.finish_s),
            (req.id, req.prompt_tokens, req.output_tokens, OUTCOMES.index(outcome),
             -1 if reason is None else self.reject_reasons.index(reason), req.generated_tokens, req.preemptions,
             req.recomputed_tokens, req.replica, -1 if req.user is None else req.user, 1 if req.first_of_user else 0,
             req.class_index, req.samples))

    def columns(self, lag_spans: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> dict[str, np.ndarray]:
        """The requests table as numpy columns in request-id order: the categorical ones as codes
        (outcome: index into OUTCOMES; reject_reason: index into reject_reasons, -1 for none;
        class_index; user: -1 for none; first_of_user: its closed-loop user's first request), then the derived latencies in ms (tpot_ms: NaN below
        two tokens; TTFT and E2EL include the front end's time). summarize() reads these; frame() turns them into the DataFrame.
        lag_spans (StepLog.spans_by_replica, for an overlap scheduler): the first and last token
        reach the front end at the end of their replica's next step when that step starts at once
        (an idle scheduler hands a step's output on straight away)."""
        cols = self._rows.columns()
        order = np.argsort(cols["id"], kind="stable")

        def take(name: str, dtype) -> np.ndarray:  # one column at a time: a million rows stay small
            return cols[name].take(order).astype(dtype, copy=False)

        out = {
            "request_id": take("id", np.int64), "class_index": take("class_index", np.int16),
            "arrival_s": take("arrival_s", np.float64), "prompt_tokens": take("prompt_tokens", np.int32),
            "output_tokens": take("output_tokens", np.int32), "outcome": take("outcome", np.int8),
            "reject_reason": take("reject_reason", np.int64), "first_scheduled_s": take("first_scheduled_s", np.float64),
            "first_token_s": take("first_token_s", np.float64), "finish_s": take("finish_s", np.float64),
            "generated_tokens": take("generated_tokens", np.int32), "samples": take("samples", np.int32),
            "preemptions": take("preemptions", np.int32), "recomputed_tokens": take("recomputed_tokens", np.int64),
            "replica": take("replica", np.int16), "user": take("user", np.int64),
            "first_of_user": take("first_of_user", np.bool_),
        }
        if lag_spans is not None:
            for name in ("first_token_s", "finish_s"):
                out[name] = _after_next_step(out[name], out["replica"], lag_spans)
        ms = 1e3
        per_request, per_token = self.front_end
        if per_request or per_token:
            front = per_request + per_token * out["prompt_tokens"].astype(np.float64)
            out["ttft_ms"] = (out["first_token_s"] - out["arrival_s"] + front) * ms
            out["e2el_ms"] = (out["finish_s"] - out["arrival_s"] + front) * ms
        else:
            out["ttft_ms"] = (out["first_token_s"] - out["arrival_s"]) * ms
            out["e2el_ms"] = (out["finish_s"] - out["arrival_s"]) * ms
        out["queueing_ms"] = (out["first_scheduled_s"] - out["arrival_s"]) * ms
        tpot = np.full(len(order), _NAN)
        np.divide((out["finish_s"] - out["first_token_s"]) * ms, out["generated_tokens"] - 1, out=tpot,
                  where=out["generated_tokens"] > 1)
        out["tpot_ms"] = tpot
        return out


def _after_next_step(times: np.ndarray, replica: np.ndarray,
                     spans: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Each time (a step's end) moved to the end of its replica's next step if that step starts
    then; unchanged when the replica idles first or runs no later step, or the time is NaN."""
    out = times.copy()
    for r, (starts, ends) in spans.items():
        mine = np.flatnonzero((replica == r) & ~np.isnan(times))
        nxt = np.searchsorted(ends, times[mine], side="right")
        later = nxt < len(ends)
        mine, nxt = mine[later], nxt[later]
        at_once = starts[nxt] <= times[mine] + 1e-9  # back to back (1 ns: the float sums of step times)
        out[mine[at_once]] = ends[nxt[at_once]]
    return out


class GapLog:
    """Inter-token latencies as (gap_s, count, request class) entries. A macro-step adds one
    segment: its step end times, every gap between them shared by `counts[c]` sequences of each
    class. Gaps the StepLog already holds are not copied here (parts() takes them from it): a
    segment's first gap, and with one class the gap decoders share in a general step. Entry
    order does not matter: statistics over them are order-independent."""

    def __init__(self) -> None:
        self._single = Records(("gap_s", "count", "cls", "end_s"), ("gap_s", "end_s"))
        # Per decode segment, one row: its step count (its end times are the StepLog's), 1 if its
        # first gap (from its start, also the StepLog's) is its own, then its sequences per class.
        self._segments: Rows | None = None

    def add(self, gap_s: float, count: int = 1, cls: int = 0, end_s: float = 0.0) -> None:
        """`count` sequences of class `cls` each saw a gap of gap_s, ending at end_s."""
        if count:
            self._single.add((gap_s, end_s), (count, cls))

    def add_segment(self, k: int, counts: tuple[int, ...], first: bool = False) -> None:
        """The gaps between the ends of a k-step decode segment (recorded in the StepLog, in the
        same order), each shared by counts[c] sequences of class c; with `first`, also the gap
        from the segment's start to its first end, shared the same way."""
        if self._segments is None:
            self._segments = Rows(2 + len(counts), "i")
        self._segments.add((k, 1 if first else 0, *counts))

    def parts(self, segment_ends: np.ndarray | None = None, segment_starts: np.ndarray | None = None,
             step_gaps: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> GapParts:
        """The gaps' arrays, for capsim.results.summary.Gaps to read chunk by chunk. From the StepLog: its flat segment end times, its
        segments' start times (for segments added with `first`) and the (gap_s, count, end_s)
        entries its single steps carry (class 0: the engine leaves them there with one class only)."""
        single = self._single.columns()
        if step_gaps is not None and len(step_gaps[0]):
            gap_s, count, end_s = step_gaps
            single = {"gap_s": np.concatenate((single["gap_s"], gap_s)),
                      "count": np.concatenate((single["count"], count)),
                      "cls": np.concatenate((single["cls"], np.zeros(len(gap_s), dtype=single["cls"].dtype))),
                      "end_s": np.concatenate((single["end_s"], end_s))}
        segments = self._segments.matrix() if self._segments is not None else np.zeros((0, 3), dtype=np.int32)
        lengths, firsts, counts = segments[:, 0].astype(np.int64), segments[:, 1].astype(bool), segments[:, 2:]
        if firsts.any() and segment_starts is None:
            raise ValueError("segments with a first gap need the StepLog's segment start times")
        ends = np.zeros(0) if segment_ends is None else segment_ends
        return single, lengths, counts, ends, firsts, segment_starts


class PhaseLog:
    """When each request's prompt chunks ran and when it was preempted (the run trace's
    per-request detail): a row per chunk a pass computed (prompt tokens, or tokens recomputed
    after a preemption) and a row per preemption, both by request id. Written per chunk and per preemption, never per
    decode token."""

    def __init__(self) -> None:
        self._chunks = Records(("id", "start_s", "end_s", "tokens"), ("start_s", "end_s"))
        self._preemptions = Records(("id", "at_s"), ("at_s",))

    def chunk(self, req: Request, start_s: float, end_s: float, tokens: int) -> None:
        """`req` computed `tokens` prompt tokens in the pass from start_s to end_s. A forked
        sample's rows name its parent, as its request row does (Outcomes folds it in)."""
        self._chunks.add((start_s, end_s), (req.id if req.parent is None else req.parent, tokens))

    def preempted(self, victims: list[Request], at_s: float) -> None:
        """The victims were preempted while the pass starting at at_s was planned."""
        for req in victims:
            self._preemptions.add((at_s,), (req.id if req.parent is None else req.parent,))

    def chunk_columns(self) -> dict[str, np.ndarray]:
        """request_id, start_s, end_s, tokens: one row per chunk, in the order the passes ended."""
        cols = self._chunks.columns()
        return {"request_id": cols["id"].astype(np.int64), "start_s": cols["start_s"].copy(),
                "end_s": cols["end_s"].copy(), "tokens": cols["tokens"].astype(np.int64)}

    def preemption_columns(self) -> dict[str, np.ndarray]:
        """request_id, at_s: one row per preemption, in time order."""
        cols = self._preemptions.columns()
        return {"request_id": cols["id"].astype(np.int64), "at_s": cols["at_s"].copy()}
