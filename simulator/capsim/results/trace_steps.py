"""The step table's side of a run trace (results.trace): the passes read up to the trace's
limits, and their events (passes, preemption instants, KV and queue counters) per replica."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import numpy as np

from capsim.core.names import BOUNDS
from capsim.results.csv_out import Column, Labels

_COLUMNS = ("replica", "num_seqs", "prefill_tokens", "decode_tokens", "kv_used_units", "waiting", "preempted")


class StepRows:
    """The step rows a trace may show, as arrays; `truncated` when rows were left unread, and
    then `horizon_us`, the time before which every pass was read."""

    def __init__(self, cols: dict[str, np.ndarray], bound_names: tuple[str, ...], truncated: bool) -> None:
        self.cols, self.bound_names, self.truncated = cols, bound_names, truncated
        end = np.round(cols["end_s"] * 1e6)  # whole microseconds, as results.trace._us
        self.start_us = np.round((cols["end_s"] - cols["duration_s"]) * 1e6)
        self.end_us_ = end
        self.dur_us = end - self.start_us
        self.replica = cols["replica"].astype(np.int64)
        self.passes = cols.get("steps", np.ones(len(end), dtype=np.int64)).astype(np.int64)
        self._by_replica = {r: np.flatnonzero(self.replica == r) for r in np.unique(self.replica).tolist()}
        # Passes on one replica follow one another, so a replica's unread passes start after its last read one.
        self.horizon_us = min((float(end[rows[-1]]) for rows in self._by_replica.values()), default=0.0)
        self._masks = self._event_masks()

    @property
    def end_us(self) -> float:
        return float(self.end_us_.max()) if len(self.end_us_) else 0.0

    def replicas(self) -> list[int]:
        return list(self._by_replica)

    def _event_masks(self) -> dict[str, np.ndarray]:
        """Which rows give which events: every row a pass; a preemption instant where it preempted;
        a counter sample where the value differs from the replica's previous pass."""
        masks = {"pass": np.ones(len(self.replica), bool), "preempted": self.cols["preempted"] > 0}
        for name in ("kv_used_units", "waiting"):
            changed = np.zeros(len(self.replica), bool)
            for rows in self._by_replica.values():
                values = self.cols[name][rows]
                changed[rows] = np.concatenate(([True], values[1:] != values[:-1]))
            masks[name] = changed
        return masks

    def event_starts_us(self) -> np.ndarray:
        m = self._masks
        return np.concatenate([self.start_us, self.start_us[m["preempted"]], self.end_us_[m["kv_used_units"]],
                               self.end_us_[m["waiting"]]])

    def count_before(self, cut_us: float | None) -> int:
        """Forward passes in the rows that start before the cut (a macro-step counts its passes)."""
        return int(self.passes.sum() if cut_us is None else self.passes[self.start_us < cut_us].sum())

    def passes_between(self, replica: np.ndarray, after_us: np.ndarray, until_us: np.ndarray) -> np.ndarray:
        """For each (replica, after, until): the replica's passes that end after `after_us` and by
        `until_us` (a macro-step counts its passes)."""
        out = np.zeros(len(replica), dtype=np.int64)
        for r, rows in self._by_replica.items():
            mine = replica == r
            ends, total = self.end_us_[rows], np.concatenate(([0], np.cumsum(self.passes[rows])))
            a = np.searchsorted(ends, after_us[mine], side="right")
            b = np.searchsorted(ends, until_us[mine], side="right")
            out[mine] = total[np.maximum(a, b)] - total[a]
        return out

    def events(self, cut_us: float | None, kv_name: str) -> list[str]:
        """The passes, preemption instants and counter samples that start before the cut, as JSON
        texts. A preemption is at its pass's start (the scheduler preempts while planning the
        pass); the counters at its end (the step log records the KV in use and the queue after
        the pass)."""
        c, m, limit = self.cols, self._masks, np.inf if cut_us is None else cut_us
        # PERF: a format string a kind of event instead of a dict each and json.dumps: the
        # events are numbers and fixed names only, and this is most of a trace's writing time.
        keep = np.flatnonzero(self.start_us < limit)
        pre, dec = c["prefill_tokens"][keep], c["decode_tokens"][keep]
        kinds = np.array(["mixed pass", "decode pass", "prefill pass"])[np.where(pre == 0, 1, np.where(dec == 0, 2, 0))]
        bound = np.array(self.bound_names, dtype=object)[c["bound"][keep]]
        columns = [kinds.tolist(), (self.replica[keep] + 1).tolist(), self.start_us[keep].tolist(),
                   self.dur_us[keep].tolist(), c["num_seqs"][keep].tolist(), (pre + dec).tolist(), pre.tolist(),
                   dec.tolist(), bound.tolist()]
        form = ('{"ph":"X","name":"%s","pid":%d,"tid":0,"ts":%d,"dur":%d,"args":{"batch":%d,"tokens":%d,'
                '"prefill_tokens":%d,"decode_tokens":%d,"bound":"%s"')
        if "steps" in c:
            form, columns = form + ',"passes":%d', columns + [self.passes[keep].tolist()]
        out = [form % row + "}}" for row in zip(*columns)]
        rows = np.flatnonzero(m["preempted"] & (self.start_us < limit))
        out += ['{"ph":"i","s":"t","name":"preempted","pid":%d,"tid":0,"ts":%d,"args":{"count":%d}}' % row
                for row in zip((self.replica[rows] + 1).tolist(), self.start_us[rows].tolist(),
                               c["preempted"][rows].tolist())]
        for col, name, key in (("kv_used_units", kv_name, "used"), ("waiting", "waiting", "requests")):
            rows = np.flatnonzero(m[col] & (self.end_us_ < limit))
            form = '{"ph":"C","name":%s,"pid":%%d,"tid":0,"ts":%%d,"args":{"%s":%%d}}' % (json.dumps(name), key)
            out += [form % row for row in zip((self.replica[rows] + 1).tolist(), self.end_us_[rows].tolist(),
                                               c[col][rows].tolist())]
        return out


def read_steps(parts: Iterable[Mapping[str, Column]], max_rows: int, until_s: float | None,
               replicas: int) -> StepRows:
    """The first `max_rows` step rows (parts are in time order), and of those only the passes
    that start before `until_s`; parts are read no further than needed."""
    chunks: dict[str, list[np.ndarray]] = {}
    names: tuple[str, ...] = BOUNDS
    rows, truncated, past = 0, False, set()  # past: replicas with a pass starting at or after until_s
    it = iter(parts)
    for part in it:
        if rows >= max_rows or (until_s is not None and len(past) >= replicas):
            truncated = rows >= max_rows
            break
        bound = part["bound"]
        names = bound.names if isinstance(bound, Labels) else names
        cols = {k: np.asarray(v.codes if isinstance(v, Labels) else v) for k, v in part.items()
                if k in _COLUMNS + ("end_s", "duration_s", "bound", "steps")}
        keep = np.ones(len(cols["end_s"]), bool)
        if until_s is not None:
            late = cols["end_s"] - cols["duration_s"] >= until_s
            past |= set(np.unique(cols["replica"][late]).tolist())
            keep &= ~late
        take = np.flatnonzero(keep)[: max_rows - rows]
        truncated |= len(take) < int(keep.sum())
        for k, v in cols.items():
            chunks.setdefault(k, []).append(v[take])
        rows += len(take)
    cols = {k: np.concatenate(v) for k, v in chunks.items()}
    if not cols:
        cols = {k: np.zeros(0, dtype=np.float64 if k in ("end_s", "duration_s") else np.int64)
                for k in _COLUMNS + ("end_s", "duration_s", "bound")}
    return StepRows(cols, tuple(str(n) for n in names), truncated)
