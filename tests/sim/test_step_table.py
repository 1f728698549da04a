"""The steps table's row order and chunking (capsim.sim.step_table), on small hand-made tables."""

import numpy as np
from capsim.sim.step_table import per_segment, rows_in_time_order, step_chunks, tie_chunks, time_sorted


def test_rows_go_in_time_order_single_steps_before_decode_steps_that_end_together():
    single = {"end_s": np.array([2.0]), "replica": np.array([0])}
    row = rows_in_time_order(single, np.array([1.0, 2.0, 3.0]), np.array([0]), np.array([3]))
    assert row.tolist() == [1, 0, 2, 3]  # the single step (ends at 2.0) before the decode step at 2.0
    # Two replicas: a tie in time goes to the lower replica.
    row = rows_in_time_order(None, np.array([1.0, 2.0, 2.0]), np.array([1, 0]), np.array([1, 2]))
    assert row.tolist() == [0, 1, 2]
    row = rows_in_time_order(None, np.array([2.0, 1.0, 2.0]), np.array([1, 0]), np.array([1, 2]))
    assert row.tolist() == [2, 0, 1]


def test_step_chunks_take_about_n_steps_and_a_long_segment_alone():
    assert step_chunks(np.array([3, 1, 5, 2]), 4) == [(0, 2), (2, 3), (3, 4)]
    assert step_chunks(np.array([1, 1, 1]), 100) == [(0, 3)]
    assert step_chunks(np.array([], dtype=np.int64), 4) == []


def test_tie_chunks_never_split_segments_that_end_together():
    assert tie_chunks(np.array([1.0, 2.0, 2.0, 2.0, 3.0, 4.0]), 2) == [(0, 4), (4, 6)]
    assert tie_chunks(np.array([1.0, 2.0, 3.0]), 2) == [(0, 2), (2, 3)]


def test_time_sorted_orders_by_end_then_replica_and_keeps_a_sorted_table():
    table = {"end_s": np.array([1.0, 2.0, 2.0, 3.0]), "replica": np.array([0, 1, 0, 0]), "k": np.array([10, 11, 12, 13])}
    out = time_sorted(table)
    assert out["k"].tolist() == [10, 12, 11, 13] and out["replica"].tolist() == [0, 0, 1, 0]
    assert time_sorted(out) is out


def test_a_segment_collapses_to_its_last_state_the_sums_of_its_flows_and_its_main_bound():
    cols = {"duration_s": np.array([2.0, 1.0, 4.0]), "decode_tokens": np.array([3, 3, 5]),
            "flops": np.array([1.0, 1.0, 1.0]), "bytes": np.array([10.0, 10.0, 10.0]),
            "bound": np.array([0, 1, 1], dtype=np.int8), "batch": np.array([3, 3, 5])}
    out = per_segment(cols, np.array([2, 1]))
    assert out["duration_s"].tolist() == [3.0, 4.0] and out["decode_tokens"].tolist() == [6, 5]
    assert out["flops"].tolist() == [2.0, 1.0] and out["bytes"].tolist() == [20.0, 10.0]
    assert out["bound"].tolist() == [0, 1]  # 2 s of the first segment under bound 0, 1 s under 1
    assert out["batch"].tolist() == [3, 5] and out["steps"].tolist() == [2, 1]
