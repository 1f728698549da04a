"""The steps table's rows in time order: where each single and decode step goes, runs of segments
to expand or write at a time, single steps merged among macro-steps, and a macro-step's steps
collapsed into one row. Plain numpy over column dicts, for capsim.sim.step_log.
"""

from __future__ import annotations

import numpy as np


def rows_in_time_order(single: dict | None, ends: np.ndarray, seg_replicas: np.ndarray,
                       ks: np.ndarray) -> np.ndarray:
    """The row of the table (time order, replica breaking ties, then single steps before decode
    steps) of each single step and then each decode step."""
    n_single = 0 if single is None else len(single["end_s"])
    times = ends if single is None else np.concatenate((single["end_s"], ends))
    one_replica = not seg_replicas.any() and (single is None or not single["replica"].any())
    if one_replica:  # two sorted runs: a stable merge (np.lexsort with equal replicas orders the same)
        order = np.argsort(times, kind="stable")
    else:
        replicas = np.repeat(seg_replicas, ks)
        if single is not None:
            replicas = np.concatenate((single["replica"], replicas))
        order = np.lexsort((replicas, times))
    row = np.empty(n_single + len(ends), dtype=np.intp)
    row[order] = np.arange(len(row))
    return row


def step_chunks(ks: np.ndarray, steps: int) -> list[tuple[int, int]]:
    """Runs of consecutive segments of about `steps` steps each (a longer segment on its own)."""
    ends = np.cumsum(ks, dtype=np.int64)
    chunks, a, n = [], 0, len(ks)
    while a < n:
        base = int(ends[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(ends, base + steps, side="right")))
        chunks.append((a, min(b, n)))
        a = b
    return chunks


def joined(parts: list[dict], columns: tuple, dtypes: tuple) -> dict[str, np.ndarray]:
    """The parts' rows as one table, built a column at a time, each part's copy of a column
    popped once it is joined (the parts end up empty), so a million-request run's table never
    exists twice over."""
    if not parts:
        return {name: np.zeros(0, dtype=dt) for name, dt in zip(columns, dtypes)}
    return {name: np.concatenate([p.pop(name) for p in parts]) for name in columns}


def time_sorted(table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows in time order, replica breaking ties (stable: equal keys keep their order)."""
    end, replica = table["end_s"], table["replica"]
    if ((end[1:] > end[:-1]) | ((end[1:] == end[:-1]) & (replica[1:] >= replica[:-1]))).all():
        return table
    order = np.lexsort((replica, end))
    return {name: col[order] for name, col in table.items()}


def tie_chunks(last_end: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Runs of about `size` segments, never splitting segments that end at the same time (their
    order, by replica, is settled within one run)."""
    chunks, a, n = [], 0, len(last_end)
    while a < n:
        b = min(a + size, n)
        while b < n and last_end[b] == last_end[b - 1]:
            b += 1
        chunks.append((a, b))
        a = b
    return chunks


def rows_at_or_before(single: dict[str, np.ndarray], part: dict[str, np.ndarray]) -> np.ndarray:
    """For each row of `part`, how many single steps come before it: those ending earlier, or
    at the same time on a replica numbered no higher (both tables sorted that way)."""
    s_end, end = single["end_s"], part["end_s"]
    low = np.searchsorted(s_end, end, side="left")
    high = np.searchsorted(s_end, end, side="right")
    count = low.astype(np.int64)
    s_replica, replica = single["replica"], part["replica"]
    for i in np.flatnonzero(high > low).tolist():  # same end time (with several replicas): by replica
        count[i] += int(np.searchsorted(s_replica[low[i]:high[i]], replica[i], side="right"))
    return count


def merged(single: dict[str, np.ndarray], taken: int, upto: int, part: dict[str, np.ndarray],
           before: np.ndarray) -> dict[str, np.ndarray]:
    """Single steps taken..upto-1 and the rows of `part` in one table; `before[i]`: how many of
    those single steps come before part's row i."""
    if upto == taken:
        return part
    rows = len(before)
    at = np.arange(rows) + before  # each part row's place in the merged table
    is_single = np.ones(rows + upto - taken, dtype=bool)
    is_single[at] = False
    out = {}
    for name, col in part.items():
        merged = np.empty(len(is_single), dtype=col.dtype)
        merged[at] = col
        merged[is_single] = single[name][taken:upto]
        out[name] = merged
    return out


def per_segment(cols: dict, ks: np.ndarray) -> dict:
    """Collapse each segment's per-step rows into one (last step's state, sums of the flows)."""
    starts = np.cumsum(ks) - ks
    last = starts + ks - 1
    out = {name: col[last] for name, col in cols.items()}
    for name in ("duration_s", "decode_tokens", "flops", "bytes"):
        out[name] = np.add.reduceat(cols[name], starts)
    time_in = {code: np.add.reduceat(np.where(cols["bound"] == code, cols["duration_s"], 0.0), starts) for code in range(3)}
    out["bound"] = np.argmax(np.stack([time_in[c] for c in range(3)]), axis=0).astype(np.int8)
    out["steps"] = ks
    return out
