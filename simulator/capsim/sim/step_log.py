"""The per-step record (one row per forward pass), kept compact and expanded on demand.

A single step is one row of numbers. A macro-step is one segment: its step end times and the few
numbers every per-step value follows from (batch, context, blocks, tokens). `columns()` expands
all rows at once, vectorised, in time order (`frame()`: the same as a DataFrame). A run with more
than LARGE_RUN_STEPS forward passes is summarised chunk by chunk instead (`totals`), and its steps
table has one row per macro-step (`segment_columns`, column `steps`; `segment_parts` gives it a
chunk at a time, for steps.csv), so a million-request run stays within memory.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from capsim.sim.buffers import Records, Rows
from capsim.sim.step_records import SegmentRecord, StepRecord
from capsim.sim.step_table import (joined, merged, per_segment, rows_at_or_before, rows_in_time_order, step_chunks,
                                   tie_chunks, time_sorted)

if TYPE_CHECKING:
    import pandas as pd

LARGE_RUN_STEPS = 3_000_000
CHUNK_SEGMENTS = 25_000  # decode segments read at a time (step totals, gap statistics)
_TOTALS_ROWS = 100_000  # a large run's sums are taken over this many steps at a time
# Decode steps expanded at a time by columns(): 15,000 float64 values are 120 KB, below glibc's
# 128 KiB threshold for giving an allocation its own fresh pages.
_EXPAND_STEPS = 15_000


# The steps table's columns (a per-macro-step table adds `steps`). Module-level so that plain
# Python can read them: compiled, StepLog's class attributes are descriptors on the class.
STEP_COLUMNS = ("end_s", "duration_s", "replica", "num_seqs", "slots", "prefill_tokens", "decode_tokens", "bound",
                "flops", "bytes", "kv_used_units", "kv_held_tokens", "kv_stored_tokens", "waiting", "preempted",
                "kv_shared_units")


class StepLog:
    COLUMNS = STEP_COLUMNS
    DTYPES = (np.float64, np.float64, np.int16, np.int32, np.int32, np.int32, np.int32, np.int8, np.float64,
              np.float64, np.int32, np.int64, np.int64, np.int32, np.int16, np.int32)
    _FLOATS = ("end_s", "duration_s", "flops", "bytes")
    # segment row: k, start_s, replica, num_seqs, slots, used0, stored0, waiting, ctx_full0,
    # ctx_sliding0, below_window, shared, step0, state_units, waiting_last, cut_last
    _SEG = ("k", "start", "replica", "n", "slots", "used0", "stored0", "waiting", "ctx_full0", "ctx_sliding0",
            "below", "shared", "step0", "state", "waiting_last", "cut_last")

    def __init__(self, block_size: int = 16, schedule=None, paged: bool = True) -> None:
        self.block_size = block_size  # tokens per unit of kv_used_units (contiguous: 1)
        self.paged = paged  # blocks grow with the tokens (contiguous reservations do not)
        self.schedule = schedule  # tokens a decoder gains per step (None: one; see capsim.sim.speculative)
        self.rows = 0
        # Single steps also carry `emitters`: decoders whose shared inter-token gap is the step's
        # duration (the engine leaves it out of the GapLog then; decoder_gaps() hands it over).
        self._single = Records(self.COLUMNS + ("emitters",), self._FLOATS)
        self._segments = Records(self._SEG, ("start",))
        self._first: np.ndarray | None = None  # each segment's first index into _ends (see _seg)
        self._ends = bytearray()  # every segment's step end times, flat (float64)
        self._end_packers: dict[int, struct.Struct] = {}
        self._residues = Rows(block_size, "h")  # decoders per block residue (int16 until one needs more)
        self._no_residues = (0,) * block_size
        self._waiting_steps: dict[int, np.ndarray] = {}  # segments whose queue changed mid-way

    def __len__(self) -> int:
        return self.rows

    @property
    def large(self) -> bool:
        return self.rows > LARGE_RUN_STEPS

    @property
    def segment_ends(self) -> np.ndarray:
        return np.frombuffer(self._ends, dtype=np.float64)

    def spans_by_replica(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """(start times, end times) of every forward pass per replica, in time order (where a
        token emitted at a step's end waits for the replica's next step: RequestLog.columns)."""
        single = self._single.columns()
        seg = self._seg()
        seg_ends = self.segment_ends
        seg_starts = np.empty_like(seg_ends)  # a macro-step's steps run back to back from its start
        seg_starts[1:] = seg_ends[:-1]
        seg_starts[seg["first"]] = seg["start"]
        ends = np.concatenate([single["end_s"], seg_ends])
        starts = np.concatenate([single["end_s"] - single["duration_s"], seg_starts])
        replica = np.concatenate([single["replica"].astype(np.int64), np.repeat(seg["replica"].astype(np.int64),
                                                                               seg["k"].astype(np.int64))])
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for r in np.unique(replica):
            mine = np.flatnonzero(replica == r)
            order = mine[np.argsort(ends[mine], kind="stable")]
            out[int(r)] = (starts[order], ends[order])
        return out

    def add(self, r: StepRecord) -> None:
        """One general step."""
        self._single.add((r.end_s, r.duration_s, r.flops, r.bytes_),
                         (r.replica, r.num_seqs, r.slots, r.prefill_tokens, r.decode_tokens, r.bound, r.kv_used_units,
                          r.kv_held_tokens, r.kv_stored_tokens, r.waiting, r.preempted, r.kv_shared_units, r.emitters))
        self.rows += 1

    def add_segment(self, r: SegmentRecord) -> None:
        """r.ends: r.num_seqs sequences decoding one step each from r.start_s (see SegmentRecord)."""
        ends, waiting, waiting_last = r.ends, r.waiting, r.waiting_last
        k = len(ends)
        if isinstance(ends, np.ndarray):
            self._ends += ends.astype(np.float64, copy=False).tobytes()
        else:
            packer = self._end_packers.get(k)
            if packer is None:  # PERF: one struct per run length (struct.pack parses its format per call)
                packer = self._end_packers[k] = struct.Struct(f"={k}d")
            self._ends += packer.pack(*ends)
        if not isinstance(waiting, int):
            self._waiting_steps[len(self._segments)] = waiting
            waiting = waiting_last = 0
        elif waiting_last is None:
            waiting_last = waiting
        self._segments.add((r.start_s,), (k, r.replica, r.num_seqs, r.slots, r.used0, r.stored0, waiting, r.ctx_full0,
                                           r.ctx_sliding0, r.below_window, r.shared, r.step0, r.state_units,
                                           waiting_last, r.cut_last))
        self._residues.add(r.residues or self._no_residues)
        self.rows += k

    def decoder_gaps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gap_s, count, end_s) of the inter-token gaps single steps carry: each step's duration,
        shared by its `emitters`, ending with the step (GapLog.parts takes them with the rest)."""
        single = self._single.columns()
        carried = single["emitters"] > 0
        return single["duration_s"][carried], single["emitters"][carried], single["end_s"][carried]

    @property
    def segment_starts(self) -> np.ndarray:
        """Each decode segment's start time (its first step's gap begins there)."""
        return self._seg()["start"].copy()

    def _seg(self) -> dict[str, np.ndarray]:
        """The segments' columns (views: not kept, or the buffers could not grow), plus `first`:
        each segment's first index into the flat end times."""
        cols = self._segments.columns()
        if self._first is None or len(self._first) != len(cols["k"]):
            ks = cols["k"].astype(np.int64)
            self._first = np.cumsum(ks) - ks
        return cols | {"first": self._first}

    # ------------------------------------------------------------------ expansion

    def columns(self, pricer) -> dict[str, np.ndarray]:
        """Every forward pass, in time order, as numpy columns (COLUMNS). `pricer(n, ctx_full,
        ctx_sliding)` gives the FLOPs, bytes and bound of decode steps (CostModel.decode_detail).

        Each column is allocated once, in its final type, and the decode segments are expanded
        a few thousand steps at a time straight into their rows: the intermediate arrays stay
        small (cache-sized, and reused from the heap instead of fresh pages from the kernel)."""
        out = {name: np.empty(self.rows, dtype=dt) for name, dt in zip(self.COLUMNS, self.DTYPES)}
        if not self.rows:
            return out
        single = self._single_columns() if len(self._single) else None
        seg = self._seg()
        ks = seg["k"]
        ends = self.segment_ends
        row = rows_in_time_order(single, ends, seg["replica"], ks)  # each step's row: singles, then segment steps
        if single is not None:
            for name in self.COLUMNS:
                out[name][row[:len(single["end_s"])]] = single[name]
        into = row[len(row) - len(ends):]
        first = seg["first"]
        for a, b in step_chunks(ks, _EXPAND_STEPS):
            part = self._expand(pricer, a, b)
            where = into[first[a]:first[b - 1] + int(ks[b - 1])]
            for name in self.COLUMNS:
                out[name][where] = part[name]
        return out

    def frame(self, pricer) -> pd.DataFrame:
        """columns() as a DataFrame (the steps table)."""
        return as_frame(self.columns(pricer))

    def segment_columns(self, pricer) -> dict[str, np.ndarray]:
        """One row per single step and one per macro-step (its last step's state; duration,
        tokens, FLOPs and bytes summed; `steps` forward passes in the row): segment_parts joined."""
        return joined(list(self.segment_parts(pricer)), self.COLUMNS + ("steps",), self.DTYPES + (np.int64,))

    def segment_parts(self, pricer) -> Iterator[dict[str, np.ndarray]]:
        """segment_columns' rows in time order (replica breaking ties, single steps before
        macro-steps), a chunk of macro-steps at a time with the single steps that fall among
        them, so the whole table never exists at once: steps.csv of a million requests is
        written from these. Both kinds of record are appended as their steps end, so each is in
        time order already; the parts are a merge of the two."""
        columns, dtypes = self.COLUMNS + ("steps",), self.DTYPES + (np.int64,)
        single: dict[str, np.ndarray] = {}
        if len(self._single):
            single = time_sorted(self._single_columns() | {"steps": np.ones(len(self._single), dtype=np.int64)})
        n_single = len(self._single)
        seg = self._seg()
        ks = seg["k"].astype(np.int64)
        last_end = self.segment_ends[seg["first"] + ks - 1] if len(ks) else np.zeros(0)
        if (np.diff(last_end) < 0).any():
            raise RuntimeError("macro-steps were recorded out of time order (a capsim bug)")
        taken = 0  # single steps already in a part
        for a, b in tie_chunks(last_end, CHUNK_SEGMENTS):
            part = per_segment(self._expand(pricer, a, b), ks[a:b])
            part = time_sorted({name: part[name].astype(dt, copy=False) for name, dt in zip(columns, dtypes)})
            before = rows_at_or_before(single, part) if n_single else np.zeros(b - a, dtype=np.int64)
            upto = n_single if b == len(ks) else int(before[-1])
            yield merged(single, taken, upto, part, before - taken)
            taken = upto
        if not len(ks) and n_single:
            yield single

    def totals(self, pricer) -> dict:
        """The sums the summary needs (step_totals), over every forward pass; large runs in chunks."""
        if not self.large:
            return step_totals(self.columns(pricer))
        total: dict | None = step_totals(self._single_columns()) if len(self._single) else None
        # Sums over fixed windows of _TOTALS_ROWS steps, whatever the segments: the same bits
        # whether the steps came as macro-steps or one by one.
        pending: list[dict] = []
        rows = 0
        for a, b in self._chunks():
            pending.append(self._expand(pricer, a, b))
            rows += len(pending[-1]["end_s"])
            while rows >= _TOTALS_ROWS or (b == len(self._segments) and rows):
                cols = {name: np.concatenate([p[name] for p in pending]) for name in pending[0]}
                window = min(rows, _TOTALS_ROWS)
                part = step_totals({name: col[:window] for name, col in cols.items()})
                total = part if total is None else _add_totals(total, part)
                pending = [{name: col[window:] for name, col in cols.items()}]
                rows -= window
        assert total is not None  # a large run has steps
        return total

    def _chunks(self):
        n = len(self._segments)
        return [(a, min(a + CHUNK_SEGMENTS, n)) for a in range(0, n, CHUNK_SEGMENTS)]

    def _single_columns(self) -> dict:
        single = self._single.columns()
        return {name: single[name].astype(dt) for name, dt in zip(self.COLUMNS, self.DTYPES)}

    def _expand(self, pricer, a: int, b: int) -> dict:
        """Per-step columns of segments a..b-1."""
        seg = {name: col[a:b] for name, col in self._seg().items()}
        ks = seg["k"].astype(np.int64)
        first = np.cumsum(ks) - ks
        which = np.repeat(np.arange(len(ks)), ks)
        j = np.arange(int(ks.sum())) - np.repeat(first, ks) + 1  # 1..k within each segment
        start = int(seg["first"][0]) if len(ks) else 0  # this chunk's first end time

        def per_step(name, dtype=np.int64):  # a segment's value on each of its steps
            return np.repeat(seg[name].astype(dtype), ks)

        ends = np.frombuffer(self._ends, dtype=np.float64)[start:start + int(ks.sum())]
        before = np.roll(ends, 1)
        before[first] = seg["start"]
        n = per_step("n")
        gained, offset = j, j  # tokens gained by step j, and where its first new token sits
        if self.schedule is not None and not self.schedule.single:
            step0 = per_step("step0")
            gained = self.schedule.total(step0 + j) - self.schedule.total(step0)
            offset = self.schedule.total(step0 + j - 1) - self.schedule.total(step0) + 1
        detail = pricer(n, (per_step("ctx_full0") + n * offset).astype(np.float64),
                        (per_step("ctx_sliding0") + per_step("below") * offset).astype(np.float64))
        used = per_step("used0") + self._growth(a, b, which, gained, n)
        waiting = per_step("waiting")
        waiting[first + ks - 1] = seg["waiting_last"]
        for index, steps in self._waiting_steps.items():
            if a <= index < b:
                waiting[first[index - a]:first[index - a] + ks[index - a]] = steps
        zeros = np.zeros(len(j), dtype=np.int32)
        decode_tokens = n * _per_step_gain(gained, j)
        stored = per_step("stored0") + n * gained
        last, cut = first + ks - 1, seg["cut_last"].astype(np.int64)
        decode_tokens[last] -= cut
        stored[last] -= cut
        return {
            "end_s": ends, "duration_s": ends - before, "replica": per_step("replica"), "num_seqs": n,
            "slots": per_step("slots"), "prefill_tokens": zeros, "decode_tokens": decode_tokens,
            "bound": detail.bound, "flops": detail.flops, "bytes": detail.bytes, "kv_used_units": used,
            "kv_held_tokens": (used - per_step("state")) * self.block_size,
            "kv_stored_tokens": stored, "waiting": waiting, "preempted": zeros,
            "kv_shared_units": per_step("shared"),
        }

    def _growth(self, a: int, b: int, which: np.ndarray, tokens: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Blocks added once each sequence has gained `tokens` more: a block per sequence per
        block_size tokens, the partial cycle read from the segment's residue histogram."""
        bs = self.block_size
        if not self.paged:
            return np.zeros(len(tokens), dtype=np.int64)
        residues = self._residues.matrix()[a:b].astype(np.int64)
        prefix = np.concatenate((np.zeros((len(residues), 1), dtype=np.int64), np.cumsum(residues, axis=1)), axis=1)
        return (tokens // bs) * n + prefix[which, tokens % bs]


def _per_step_gain(gained: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Tokens gained in each step from the running totals (a segment's first step: its total)."""
    step = np.diff(gained, prepend=0)
    first = j == 1
    step[first] = gained[first]
    return step


def as_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """A steps table from its columns (pandas is imported here, when a table is wanted)."""
    import pandas as pd

    return pd.DataFrame(columns)


def step_totals(cols: dict) -> dict:
    """The per-step sums the summary is made of. The products and casts go through one scratch
    array (the same bits as `(x.astype(float64) * dt).sum()`: the ufunc casts each value as astype
    does, and the sum runs over a contiguous float64 array either way); a fresh temporary per
    figure cost a fresh process a page fault per 4 KiB of each."""
    dt = cols["duration_s"]
    scratch = np.empty(len(dt))

    def total(values, weighted: bool = False) -> float:
        if weighted:
            np.multiply(values, dt, out=scratch)
        else:
            np.copyto(scratch, values)
        return float(scratch.sum())

    seqs, bound = cols["num_seqs"], cols["bound"]
    return {
        "steps": int(len(dt)), "busy_s": float(dt.sum()), "seqs": total(seqs), "slots": total(cols["slots"]),
        "held_time": total(cols["kv_held_tokens"], True), "stored_time": total(cols["kv_stored_tokens"], True),
        "flops": float(cols["flops"].sum()), "bytes": float(cols["bytes"].sum()),
        "seqs_time": total(seqs, True), "max_seqs": int(seqs.max()) if len(seqs) else 0,
        "bound_s": [float(dt[bound == i].sum()) for i in range(3)],
        "shared_time": total(cols["kv_shared_units"], True),
        "max_shared": int(cols["kv_shared_units"].max()) if len(dt) else 0,
    }


def _add_totals(a: dict, b: dict) -> dict:
    out = {}
    for key, value in a.items():
        if key.startswith("max_"):
            out[key] = max(value, b[key])
        elif isinstance(value, list):
            out[key] = [x + y for x, y in zip(value, b[key])]
        else:
            out[key] = value + b[key]
    return out
