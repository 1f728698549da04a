"""A run as a Chrome/Perfetto trace-event file (`capsim run --trace FILE`): open it in
ui.perfetto.dev or chrome://tracing and scroll through the passes and the requests.

Built from the run's records alone (the step table, the request table and the engine's
PhaseLog: each request's prompt chunks and preemptions), in the JSON object
format: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}. Times are in
whole microseconds of simulated time. Each replica is a process (pid = replica + 1) holding:
- tid 0 "forward passes": one complete event ("X") per pass (or per macro-step, for runs that
  record those), args batch, tokens, prefill_tokens, decode_tokens, bound; an instant event
  ("i") "preempted" at the start of a pass whose planning preempted requests, args count;
- tid 1 "rejected" (where there are any): an instant event per request refused at arrival, args
  its reason;
- tid 2 + k "slot k": lanes reused by the requests routed to the replica, each request holding
  its lane from arrival to finish (or to the end of the run when unfinished) as one complete
  event "r<id>" with its phases nested inside: "queued" (arrival to first scheduled), "prefill"
  (first scheduled to first token; args: the replica's passes in between), "decode" (first
  token to finish); inside those, a "prefill chunk" slice per pass that computed some of its
  prompt (args: tokens; a chunk after the first token recomputes a preempted request's tokens),
  and a "preempted" instant at the start of each pass whose planning preempted it; a preempted
  request's slices also carry its preemption count and recomputed tokens;
- counters ("C"): "KV used" (blocks, or tokens for contiguous reservations) and "waiting"
  (requests queued), as the step log records them after each pass, at its end; a sample only
  when the value changes (a viewer holds the last value until the next).
Large runs are cut at a time: every event that starts before it is written, none after. The
time is the earlier of `until_s` and the time at which `max_events` would be exceeded;
`otherData.cut` says which and what was left out.
"""

from __future__ import annotations

import heapq
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capsim.results.csv_out import Column, Labels
from capsim.results.trace_steps import StepRows, read_steps

DEFAULT_MAX_EVENTS = 200_000
# The engine's PhaseLog columns (api.RunResult._phase_columns): prompt chunks (request_id,
# start_s, end_s, tokens) and preemptions (request_id, at_s).
Phases = tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class TraceLimits:
    """How much of a run a trace holds."""

    max_events: int = DEFAULT_MAX_EVENTS  # events at most (the track-naming metadata besides)
    until_s: float | None = None  # simulated seconds the trace stops at (None: the whole run)


def write_trace(path: Path, summary: dict, requests: Mapping[str, Column],
                step_parts: Iterable[Mapping[str, Column]], limits: TraceLimits = TraceLimits(),
                horizon_s: float | None = None, phases: Phases | None = None) -> dict:
    """Write the trace of a run to `path` whole (through a temporary file beside it, renamed into
    place); return its `otherData` (what it holds and what was cut). horizon_s: the run's
    horizon, if it had one (where requests still queued or running end); phases: the requests'
    prompt chunks and preemptions (None: the lanes show neither)."""
    events, other = trace_events(summary, requests, step_parts, limits, horizon_s, phases)
    path = Path(path)
    tmp = path.parent / f".{path.name}.partial-{secrets.token_hex(4)}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write('{"traceEvents":[\n')
            fh.write(",\n".join(events))
            fh.write('\n],"displayTimeUnit":"ms","otherData":' + json.dumps(other, allow_nan=False) + "}\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return other


def trace_events(summary: dict, requests: Mapping[str, Column], step_parts: Iterable[Mapping[str, Column]],
                 limits: TraceLimits = TraceLimits(), horizon_s: float | None = None,
                 phases: Phases | None = None) -> tuple[list[str], dict]:
    """The trace's events, each as JSON text (the track names first), and its `otherData` (see
    the module docstring)."""
    setup = summary.get("setup", {})
    steps = read_steps(step_parts, limits.max_events, limits.until_s, int(summary.get("replicas") or 1))
    req = _Requests(requests, steps, horizon_s * 1e6 if horizon_s else 0.0, phases)
    starts = np.concatenate([steps.event_starts_us(), req.event_starts_us()])
    cut_us, why = _cut(np.sort(starts), steps, limits)
    # Grouped by kind, not sorted by time: the viewers sort; a request's slice comes before the
    # phases it holds, so a viewer that keeps the order of equal times nests them right.
    events = steps.events(cut_us, _kv_name(setup)) + [_json(e) for e in req.events(cut_us)]
    meta = [_json(e) for e in _metadata(steps, req, cut_us, _pool_names(summary))]
    other = {"capsim": "run trace", "workload": setup.get("workload"), "time_unit": "whole microseconds of simulated time",
             "events": len(events), "passes": steps.count_before(cut_us), "passes_in_run": summary.get("num_steps"),
             "requests": req.count_before(cut_us), "requests_in_run": summary.get("arrived"),
             "cut": None if cut_us is None else {"at_s": cut_us / 1e6, "why": why,
                                                  "note": "events that start at or after at_s are left out"}}
    return meta + events, other


def _json(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"), allow_nan=False)


def _cut(starts_us: np.ndarray, steps: StepRows, limits: TraceLimits) -> tuple[float | None, str | None]:
    """The time the trace stops at (None: nothing cut) and why: the earliest of the event limit's
    time, the time the step rows were read to (when some were left unread), and until_s."""
    events_why = f"at most {limits.max_events:,} events (--trace-events)"
    cuts = []
    if len(starts_us) > limits.max_events:
        cuts.append((float(starts_us[limits.max_events]), events_why))
    if steps.truncated:
        cuts.append((steps.horizon_us, events_why))
    if limits.until_s is not None:
        until_us = limits.until_s * 1e6
        if steps.truncated or (len(starts_us) and starts_us[-1] >= until_us):
            cuts.append((until_us, f"the first {limits.until_s:g} s of simulated time (--trace-seconds)"))
    return min(cuts) if cuts else (None, None)


def _kv_name(setup: dict) -> str:
    if setup.get("allocator") == "contiguous":
        return f"KV used (tokens of {setup.get('kv_capacity_tokens', '?')})"
    return f"KV used (blocks of {setup.get('num_gpu_blocks', '?')})"


def _pool_names(summary: dict) -> dict[int, str]:
    """A disaggregated run's replicas by pool (the prefill pool's come first in the engine):
    replica -> "prefill replica k" or "decode replica k"; empty for any other run."""
    pools = summary.get("disaggregated")
    if not pools:
        return {}
    prefill = len(pools["prefill"]["busy_share_per_replica"])
    decode = len(pools["decode"]["busy_share_per_replica"])
    names = {r: f"prefill replica {r}" for r in range(prefill)}
    return names | {prefill + k: f"decode replica {k}" for k in range(decode)}


def _metadata(steps: StepRows, req: _Requests, cut_us: float | None, names: dict[int, str]) -> list[dict]:
    """Names and order of the processes (replicas, named by pool when disaggregated) and threads
    (passes, rejected, slots)."""
    meta = []
    for replica in sorted(set(steps.replicas()) | set(req.replicas())):
        pid = replica + 1
        name = names.get(replica, f"replica {replica}")
        meta += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                 {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": replica}},
                 {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "forward passes"}}]
        if req.rejections(replica, cut_us):
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "rejected"}})
        for lane in range(req.lanes_used(replica, cut_us)):
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 2 + lane, "args": {"name": f"slot {lane}"}})
    return meta


def _us(seconds: np.ndarray) -> np.ndarray:
    """Seconds to whole microseconds (as floats, NaN kept). Whole numbers make every edge exact:
    a request's phases end where the next begins and inside its slice, also after a viewer
    converts them to nanoseconds, which fractions of a microsecond do not guarantee."""
    return np.round(np.asarray(seconds, dtype=np.float64) * 1e6)


class _Requests:
    """The request table's rows as lanes and slices."""

    def __init__(self, cols: Mapping[str, Column], steps: StepRows, end_us: float, phases: Phases | None = None) -> None:
        """end_us: the run's end, if known (0: its last pass or arrival), where a request still
        queued or running then ends; phases: the requests' prompt chunks and preemptions."""
        outcome = cols["outcome"]
        assert isinstance(outcome, Labels)
        self.ids = np.asarray(cols["request_id"])
        self.replica = np.asarray(cols["replica"]).astype(np.int64)
        self.arrival = _us(cols["arrival_s"])
        run_end = max(end_us, steps.end_us, float(self.arrival.max()) if len(self.arrival) else 0.0)
        self.rejected = np.asarray(outcome.codes) == list(outcome.names).index("rejected") \
            if "rejected" in outcome.names else np.zeros(len(self.ids), bool)
        fill = lambda name: np.where(np.isnan(np.asarray(cols[name])), run_end, _us(cols[name]))  # noqa: E731
        self.scheduled, self.first_token, self.finish = fill("first_scheduled_s"), fill("first_token_s"), fill("finish_s")
        self.scheduled = np.minimum(self.scheduled, self.finish)
        self.first_token = np.clip(self.first_token, self.scheduled, self.finish)
        self.cols, self.steps = cols, steps
        self.lane = _lanes(self.replica, self.arrival, self.finish, self.rejected)
        self.prefill_passes = steps.passes_between(self.replica, self.scheduled, self.first_token)
        none = np.zeros(0)
        chunks, preemptions = phases if phases is not None else (
            {"request_id": none, "start_s": none, "end_s": none, "tokens": none}, {"request_id": none, "at_s": none})
        self.chunk_row, keep = self._rows_of(chunks["request_id"])
        self.chunk_start, self.chunk_end = _us(chunks["start_s"])[keep], _us(chunks["end_s"])[keep]
        self.chunk_tokens = np.asarray(chunks["tokens"], dtype=np.int64)[keep]
        self.preempt_row, keep = self._rows_of(preemptions["request_id"])
        self.preempt_at = _us(preemptions["at_s"])[keep]

    def _rows_of(self, request_ids) -> tuple[np.ndarray, np.ndarray]:
        """The table rows of the served requests these ids name, and which ids name one (forked
        samples have no row of their own: their chunks and preemptions are left out)."""
        ids = np.asarray(request_ids, dtype=np.int64)
        order = np.argsort(self.ids, kind="stable")
        at = np.minimum(np.searchsorted(self.ids[order], ids), max(len(order) - 1, 0))
        rows = order[at] if len(order) else np.zeros(len(ids), dtype=np.int64)
        keep = (self.ids[rows] == ids) & ~self.rejected[rows] if len(order) else np.zeros(len(ids), bool)
        return rows[keep], keep

    def replicas(self) -> list[int]:
        return np.unique(self.replica).tolist()

    def event_starts_us(self) -> np.ndarray:
        """The start of every event the requests give (slices of zero length are left out)."""
        served = ~self.rejected
        parts = [self.arrival, self.arrival[served & (self.scheduled > self.arrival)],
                 self.scheduled[served & (self.first_token > self.scheduled)],
                 self.first_token[served & (self.finish > self.first_token)], self.chunk_start, self.preempt_at]
        return np.concatenate(parts)

    def count_before(self, cut_us: float | None) -> int:
        return int(len(self.arrival) if cut_us is None else (self.arrival < cut_us).sum())

    def rejections(self, replica: int, cut_us: float | None) -> int:
        return int(((self.replica == replica) & self.rejected & (self.arrival < (np.inf if cut_us is None else cut_us))).sum())

    def lanes_used(self, replica: int, cut_us: float | None) -> int:
        keep = (self.replica == replica) & ~self.rejected & (self.arrival < (np.inf if cut_us is None else cut_us))
        return int(self.lane[keep].max()) + 1 if keep.any() else 0

    def events(self, cut_us: float | None) -> list[dict]:
        """Every request that arrived before the cut: its lane's slices, or a rejection instant."""
        c = self.cols
        limit = np.inf if cut_us is None else cut_us
        prompt, output, generated = (np.asarray(c[n]).tolist() for n in ("prompt_tokens", "output_tokens",
                                                                         "generated_tokens"))
        preempted, recomputed = np.asarray(c["preemptions"]).tolist(), np.asarray(c["recomputed_tokens"]).tolist()
        label, passes, reason = _labels(c["request_class"]), self.prefill_passes.tolist(), _labels(c["reject_reason"])
        out: list[dict] = []
        for i in np.flatnonzero(self.arrival < limit).tolist():
            pid, rid, arrive = int(self.replica[i]) + 1, int(self.ids[i]), int(self.arrival[i])
            args = {"class": label[i], "prompt_tokens": prompt[i], "output_tokens": output[i]}
            if self.rejected[i]:
                out.append({"ph": "i", "s": "t", "name": f"rejected r{rid}", "pid": pid, "tid": 1, "ts": arrive,
                            "args": args | {"reason": reason[i]}})
                continue
            args |= {"generated_tokens": generated[i], "preemptions": preempted[i], "recomputed_tokens": recomputed[i]}
            tid = 2 + int(self.lane[i])
            edges = (arrive, int(self.scheduled[i]), int(self.first_token[i]), int(self.finish[i]))
            out.append({"ph": "X", "name": f"r{rid}", "pid": pid, "tid": tid, "ts": arrive,
                        "dur": edges[3] - arrive, "args": args})
            phases = (("queued", {}), ("prefill", {"passes": passes[i]}),
                      ("decode", {"generated_tokens": generated[i]}))
            for k, (name, extra) in enumerate(phases):
                if edges[k + 1] > edges[k] and edges[k] < limit:
                    if preempted[i] and name != "queued":
                        extra = extra | {"preemptions": preempted[i], "recomputed_tokens": recomputed[i]}
                    out.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": edges[k],
                                "dur": edges[k + 1] - edges[k], "args": extra})
        return out + self._phase_events(limit)

    def _phase_events(self, limit: float) -> list[dict]:
        """The prompt chunks and preemption instants on their requests' lanes that start before
        the cut; after the phase slices, so a viewer that keeps the order of equal times nests a
        chunk as long as its prefill slice inside it."""
        pid, tid = self.replica + 1, 2 + self.lane
        out: list[dict] = []
        for row, start, end, tokens in zip(self.chunk_row.tolist(), self.chunk_start.tolist(),
                                           self.chunk_end.tolist(), self.chunk_tokens.tolist()):
            if start < limit:
                out.append({"ph": "X", "name": "prefill chunk", "pid": int(pid[row]), "tid": int(tid[row]),
                            "ts": int(start), "dur": int(end - start), "args": {"tokens": tokens}})
        for row, at in zip(self.preempt_row.tolist(), self.preempt_at.tolist()):
            if at < limit:
                out.append({"ph": "i", "s": "t", "name": "preempted", "pid": int(pid[row]), "tid": int(tid[row]),
                            "ts": int(at), "args": {"request": f"r{int(self.ids[row])}"}})
        return out


def _labels(col: Column) -> list[str]:
    if isinstance(col, Labels):
        names = [str(n) for n in col.names] + [""]
        return [names[code] for code in np.asarray(col.codes).tolist()]
    return [str(v) for v in np.asarray(col).tolist()]


def _lanes(replica: np.ndarray, start: np.ndarray, end: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """A lane for each request within its replica: the lowest lane free at its arrival, taken
    until its finish (requests in arrival order; `skip`ped ones get -1)."""
    lane = np.full(len(start), -1, dtype=np.int64)
    order = np.lexsort((np.arange(len(start)), start))
    busy: dict[int, list[tuple[float, int]]] = {}  # replica -> heap of (busy until, lane)
    free: dict[int, list[int]] = {}  # replica -> heap of free lanes
    for i in order.tolist():
        if skip[i]:
            continue
        r = int(replica[i])
        held, idle = busy.setdefault(r, []), free.setdefault(r, [])
        while held and held[0][0] <= start[i]:
            heapq.heappush(idle, heapq.heappop(held)[1])
        k = heapq.heappop(idle) if idle else len(held) + len(idle)
        heapq.heappush(held, (float(end[i]), k))
        lane[i] = k
    return lane
