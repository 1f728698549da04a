"""The step record: macro-step segments expand into exactly the per-step rows; large runs are
summarised in chunks and tabulated one row per macro-step."""

import numpy as np
import pytest
from capsim.sim import step_log
from capsim.cost.decode_runs import DecodeSteps
from capsim.api import simulate
from capsim.sim.step_log import StepLog, step_totals
from capsim.sim.step_records import SegmentRecord, StepRecord
from helpers import workload


def _pricer(n, full, sliding):
    return DecodeSteps(None, full * 0 + 7.0, full, np.zeros(len(n), dtype=np.int8))


def test_a_macro_segment_expands_into_its_steps():
    log = StepLog(block_size=4)
    log.add(StepRecord(1.0, 1.0, 0, 2, 8, 10, 0, 0, 1.0, 1.0, 3, 12, 10, 0, 0, 0))
    # 5 decode steps of 2 sequences; residues: one of them needs a block at steps 1 and 5, the
    # other at step 3
    log.add_segment(SegmentRecord([2.0, 3.0, 4.0, 5.0, 6.0], 1.0, 0, 2, 8, 3, (1, 0, 1, 0), 10, 0, 10, 0, 0))
    df = log.frame(_pricer)
    assert list(df["end_s"]) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and list(df["duration_s"]) == [1.0] * 6
    assert list(df["kv_used_units"]) == [3, 4, 4, 5, 5, 6]
    assert list(df["kv_stored_tokens"]) == [10, 12, 14, 16, 18, 20]
    assert list(df["bytes"])[1:] == [12.0, 14.0, 16.0, 18.0, 20.0]  # the context each step attends


def test_block_size_one_grows_every_token_and_contiguous_never():
    paged, contiguous = StepLog(block_size=1), StepLog(block_size=1, paged=False)
    for log in (paged, contiguous):  # 3 steps of 2 sequences; the last step gives one of them a token too many
        log.add_segment(SegmentRecord([2.0, 3.0, 4.0], 1.0, 0, 2, 8, 10, (2,), 10, 0, 10, 0, 0, cut_last=1))
    assert list(paged.frame(_pricer)["kv_used_units"]) == [12, 14, 16]
    assert list(contiguous.frame(_pricer)["kv_used_units"]) == [10, 10, 10]
    df = paged.frame(_pricer)
    assert list(df["kv_stored_tokens"]) == [12, 14, 15] and list(df["decode_tokens"]) == [2, 2, 1]


def test_large_runs_are_summarised_in_chunks_and_tabled_per_macro_step(round_gpu_file, monkeypatch):
    w = workload(round_gpu_file, requests=200)
    small = simulate(w)
    monkeypatch.setattr(step_log, "LARGE_RUN_STEPS", 10)
    monkeypatch.setattr(step_log, "CHUNK_SEGMENTS", 7)
    large = simulate(w)
    assert small.summary["num_steps"] == large.summary["num_steps"] > 10
    for key in ("mfu", "mbu", "kv_utilisation", "slot_utilisation", "mean_batch_size", "gpu_busy_fraction"):
        assert large.summary[key] == pytest.approx(small.summary[key], rel=1e-12)
    assert large.summary["p99_itl_ms"] == small.summary["p99_itl_ms"]
    per_macro = large.steps
    assert large.steps_per_row and per_macro["steps"].sum() == small.summary["num_steps"]
    assert len(per_macro) < len(small.steps)
    assert per_macro["flops"].sum() == pytest.approx(small.steps["flops"].sum(), rel=1e-12)
    assert per_macro["duration_s"].sum() == pytest.approx(small.steps["duration_s"].sum(), rel=1e-12)


@pytest.mark.parametrize("replicas", [1, 3])
def test_the_table_is_the_same_whatever_the_expansion_chunk(round_gpu_file, monkeypatch, replicas):
    """columns() expands decode segments a chunk at a time into rows placed in time order
    (replica breaking ties); any chunk size gives the same table, in order."""
    w = workload(round_gpu_file, requests=150, replicas=replicas, arrivals={"kind": "poisson", "rate_per_s": 40.0})
    whole = simulate(w).steps
    assert whole["kv_used_units"].dtype == np.int32 and (np.diff(whole["end_s"]) >= 0).all()
    if replicas > 1:
        assert whole["replica"].nunique() == replicas
    for steps in (1, 5, 64):
        monkeypatch.setattr(step_log, "_EXPAND_STEPS", steps)
        pd_testing = pytest.importorskip("pandas.testing")
        pd_testing.assert_frame_equal(simulate(w).steps, whole)


@pytest.mark.parametrize("replicas", [1, 3])
def test_the_per_macro_step_table_is_the_same_in_any_number_of_parts(round_gpu_file, monkeypatch, replicas):
    """A large run's table comes a chunk of macro-steps at a time, merged with the single steps
    among them (steps.csv is written part by part); any chunk size gives the same rows, in time
    order with replica breaking ties."""
    pd_testing = pytest.importorskip("pandas.testing")
    monkeypatch.setattr(step_log, "LARGE_RUN_STEPS", 10)
    w = workload(round_gpu_file, requests=150, replicas=replicas, arrivals={"kind": "poisson", "rate_per_s": 40.0})
    r = simulate(w)
    whole = r.steps
    assert r.steps_per_row and whole["steps"].sum() == r.summary["num_steps"] and (whole["steps"] == 1).any()
    end, rep = whole["end_s"].to_numpy(), whole["replica"].to_numpy()
    assert ((end[1:] > end[:-1]) | ((end[1:] == end[:-1]) & (rep[1:] >= rep[:-1]))).all()
    for size in (1, 7, 10**6):
        monkeypatch.setattr(step_log, "CHUNK_SEGMENTS", size)
        again = simulate(w)
        pd_testing.assert_frame_equal(again.steps, whole)
        parts = list(again._step_parts())
        assert len(parts) >= min(len(whole), 2 if size == 1 else 1)
        assert sum(len(p["end_s"]) for p in parts) == len(whole)


def test_parts_put_single_steps_first_among_rows_that_end_together(monkeypatch):
    log = StepLog(block_size=4)
    for end, replica in ((1.0, 1), (1.0, 0), (2.0, 0)):  # single steps, replica 1 recorded first
        log.add(StepRecord(end, 0.5, replica, 1, 8, 4, 0, 0, 1.0, 1.0, 1, 4, 4, 0, 0, 0))
    for ends, replica in (([0.75, 1.0], 1), ([0.8, 1.0], 0), ([1.5, 2.0], 0)):
        log.add_segment(SegmentRecord(ends, ends[0] - 0.25, replica, 2, 8, 3, (0, 0, 0, 0), 10, 0, 10, 0, 0))
    for size in (1, 2, 10):
        monkeypatch.setattr(step_log, "CHUNK_SEGMENTS", size)
        table = log.segment_columns(_pricer)
        rows = list(zip(table["end_s"].tolist(), table["replica"].tolist(), table["steps"].tolist()))
        assert rows == [(1.0, 0, 1), (1.0, 0, 2), (1.0, 1, 1), (1.0, 1, 2), (2.0, 0, 1), (2.0, 0, 2)]


def test_step_totals_of_a_frame():
    cols = {"duration_s": np.array([1.0, 3.0]), "num_seqs": np.array([2, 4]), "slots": np.array([8, 8]),
            "kv_held_tokens": np.array([10, 20]), "kv_stored_tokens": np.array([5, 10]), "flops": np.array([1.0, 2.0]),
            "bytes": np.array([3.0, 4.0]), "bound": np.array([0, 1]), "kv_shared_units": np.array([0, 2])}
    t = step_totals(cols)
    assert (t["busy_s"], t["held_time"], t["stored_time"], t["seqs_time"]) == (4.0, 70.0, 35.0, 14.0)
    assert t["bound_s"] == [1.0, 3.0, 0.0] and t["max_seqs"] == 4 and t["max_shared"] == 2


def test_large_runs_summarise_the_same_bits_with_and_without_macro_steps(round_gpu_file, monkeypatch):
    # The chunked sums of a large run must not depend on how steps were grouped into macro-steps.
    monkeypatch.setattr(step_log, "LARGE_RUN_STEPS", 10)
    monkeypatch.setattr(step_log, "CHUNK_SEGMENTS", 7)
    monkeypatch.setattr(step_log, "_TOTALS_ROWS", 50)
    w = workload(round_gpu_file, requests=200, arrivals={"kind": "poisson", "rate_per_s": 300.0})
    macro, step = simulate(w), simulate(w, macro_steps=False)
    assert macro.summary["num_steps"] > 500
    assert macro.summary_json() == step.summary_json()
