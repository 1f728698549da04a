"""The grid: coarse-to-fine ordering, families interleaved, memory caps, and the deadline-aware
runner that writes each row as it is measured. No timing values are asserted."""

from __future__ import annotations

import json

from capsim.harness import grid
from capsim.harness.grid import (
    coarse_to_fine,
    decode_bytes,
    grid_for,
    interleave,
    ordered_product,
    plan_points,
    run_points,
)


def test_coarse_to_fine_puts_the_ends_then_the_middle_first():
    assert coarse_to_fine(1) == [0]
    assert coarse_to_fine(2) == [0, 1]
    ranks = coarse_to_fine(7)
    order = sorted(range(7), key=lambda i: ranks[i])
    assert order[:3] == [0, 6, 3]
    assert sorted(ranks) == list(range(7))


def test_ordered_product_starts_with_the_corners_of_the_grid():
    points = ordered_product({"batch": (1, 4, 16, 64, 256), "ctx": (256, 2048, 32768)})
    assert len(points) == 15
    first = {(p["batch"], p["ctx"]) for p in points[:4]}
    assert first == {(1, 256), (1, 32768), (256, 256), (256, 32768)}


def test_interleave_alternates_families_and_keeps_everything():
    out = interleave([1, 2, 3], ["a"], [])
    assert out == [1, "a", 2, 3]


def test_plan_points_leaves_out_decode_points_over_the_memory_cap():
    spec = grid_for("cuda")
    cap = 4 * 2**30
    points = plan_points(spec, "triton", max_kv_bytes=cap)
    decode = [p for p in points if p["family"] == "decode"]
    assert decode and all(decode_bytes(p) <= cap for p in decode)
    assert [p["kind"] for p in points[:3]] == ["launch", "copy", "matmul"]
    families = [p["family"] for p in points[3:9]]
    assert set(families) == {"decode", "gemm", "prefill"}  # all families early
    cross = {p["backend"] for p in decode if p["backend"] != "triton"}
    assert cross == {"sdpa", "flex", "flash"}


def test_gpu_grid_spans_the_issue_axes():
    spec = grid_for("cuda")
    assert spec.gemm_ms[0] == 1 and spec.gemm_ms[-1] == 8192
    assert {"bf16", "fp8"} <= set(spec.kv_dtypes) and {"bf16", "fp8"} <= set(spec.gemm_dtypes)
    assert len(spec.block_sizes) > 1 and len(spec.head_configs) > 1


def test_run_points_flushes_rows_and_stops_at_the_deadline(tmp_path, monkeypatch):
    clock = iter(range(1000))
    monkeypatch.setattr(grid.time, "monotonic", lambda: float(next(clock)))  # one "second" per read
    seen = []
    out = tmp_path / "raw.jsonl"

    def measure(point):
        lines = out.read_text().splitlines() if out.exists() else []
        seen.append(len(lines))  # every earlier row is already on disk
        return {**point, "time_s": 1.0}

    points = [{"family": "micro", "kind": str(i)} for i in range(10)]
    progress = []
    log = run_points(points, measure, out, deadline_s=4.5, progress=lambda d, n, label: progress.append((d, n)))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert log.stopped_at_deadline and 0 < len(log.rows) < 10
    assert rows == log.rows and seen == list(range(len(rows)))
    assert progress[-1] == (len(rows), 10)


def test_run_points_without_deadline_measures_everything(tmp_path):
    log = run_points([{"family": "micro", "kind": "x"}] * 3, lambda p: {**p, "time_s": 1.0}, tmp_path / "r.jsonl")
    assert len(log.rows) == 3 and not log.stopped_at_deadline
