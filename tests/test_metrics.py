"""Metric definitions (vLLM's) and the weighted percentile trick."""

import numpy as np
import pytest
from capsim.results import distributions
from capsim.results.distributions import (
    distribution,
    median,
    quantiles,
    values_at_ranks,
    weighted_distribution,
    weighted_percentile,
)
from capsim.results.summary import Gaps, summarize
from capsim.sim.request_log import GapLog, RequestLog
from capsim.sim.step_log import StepLog, step_totals
from capsim.sim.step_records import StepRecord
from conftest import make_request
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.integers(1, 5)), min_size=1, max_size=30),
       st.sampled_from([0, 1, 37.5, 50, 90, 99, 100]))
def test_weighted_percentile_equals_numpy_on_the_expanded_list(pairs, q):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    expanded = np.repeat(values, counts)
    assert weighted_percentile(values, counts, q) == pytest.approx(np.percentile(expanded, q), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=True), st.integers(0, 4)),
                min_size=1, max_size=40), st.integers(1, 7))
def test_radix_select_finds_every_rank_of_the_expanded_list(pairs, chunk):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs], dtype=np.int64)
    expanded = np.sort(np.repeat(values, counts))
    if not len(expanded):
        return
    pieces = lambda: ((values[i:i + chunk], counts[i:i + chunk]) for i in range(0, len(values), chunk))
    found = values_at_ranks(pieces, list(range(len(expanded))))
    assert [found[r] for r in range(len(expanded))] == expanded.tolist()


def test_chunked_distribution_equals_the_in_memory_one(monkeypatch):
    rng = np.random.default_rng(3)
    values = np.round(rng.lognormal(3, 1, 5000), 3)  # ties included
    counts = rng.integers(1, 9, 5000)
    pieces = lambda: ((values[i:i + 700], counts[i:i + 700]) for i in range(0, 5000, 700))
    in_memory = weighted_distribution(pieces, "itl")
    assert in_memory == distribution(values, "itl", counts)
    monkeypatch.setattr(distributions, "_IN_MEMORY_PAIRS", 10)
    assert weighted_distribution(pieces, "itl") == in_memory
    assert in_memory["p99_itl_ms"] == pytest.approx(np.percentile(np.repeat(values, counts), 99), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40), st.booleans())
def test_median_is_numpys_to_the_bit(values, with_nan):
    a = np.array(values + [float("nan")] if with_nan else values)
    expected = np.median(a)
    got = median(a)
    assert (np.isnan(got) and np.isnan(expected)) if with_nan else got == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([0.5, 2.0, 1e300, -1e300]), min_size=1,
                max_size=40),
       st.lists(st.sampled_from([0, 1, 10, 37.5, 50, 90, 99, 99.9, 100]), min_size=1, max_size=4),
       st.sampled_from([None, float("nan"), float("inf"), -float("inf")]))
def test_percentiles_are_numpys_to_the_bit(values, qs, extra):
    a = np.array(values + ([] if extra is None else [extra]))
    got = quantiles(a.copy(), tuple(qs))
    with np.errstate(invalid="ignore"):  # inf - inf in numpy's interpolation: NaN, as ours
        expected = [float(np.percentile(a, q)) for q in qs]
    assert np.array_equal(got, expected, equal_nan=True)


def test_distribution_keys_and_empty():
    d = distribution(np.array([1.0, 2.0, 3.0, 4.0]), "ttft")
    assert d == {"mean_ttft_ms": 2.5, "median_ttft_ms": 2.5, "std_ttft_ms": pytest.approx(np.std([1, 2, 3, 4])),
                 "p90_ttft_ms": pytest.approx(3.7), "p99_ttft_ms": pytest.approx(3.97)}
    assert distribution(np.array([]), "itl")["p99_itl_ms"] == 0.0
    assert np.isnan(median(np.zeros(0)))  # as np.median of nothing, without its warning


def test_summary_counts_throughput_and_kv_utilisation():
    log = RequestLog(("too_long",))
    done = make_request(100, 11, rid=0, arrival_s=0.0)
    done.first_scheduled_s, done.first_token_s, done.finish_s, done.generated_tokens = 0.0, 1.0, 2.0, 11
    log.write(done, "completed")
    log.write(make_request(5000, 1, rid=1, arrival_s=0.5), "rejected", "too_long")
    steps = StepLog(block_size=16)
    for end, stored in ((1.0, 16), (2.0, 32)):  # columns in StepLog.COLUMNS order
        steps.add(StepRecord(end, 1.0, 0, 1, 4, 0, 1, 1, 1e12, 1e9, 2, 32, stored, 0, 0, 0))
    gaps = GapLog()
    gaps.add(0.1, 10)
    s = summarize(log.columns(), step_totals(steps._single_columns()), Gaps(*gaps.parts()), duration_s=4.0, peak_flops=1e12,
                  bandwidth_bytes_per_s=1e9, kv_capacity_tokens=64, reject_reasons=("too_long",))
    assert s["completed"] == 1 and s["rejected"] == 1 and s["arrived"] == 2 and s["unfinished"] == 0
    assert s["rejected_reasons"] == {"too_long": 1}
    assert s["output_throughput"] == 11 / 4.0 and s["total_token_throughput"] == 111 / 4.0
    assert s["mean_itl_ms"] == pytest.approx(100.0) and s["p99_itl_ms"] == pytest.approx(100.0)
    assert s["kv_utilisation"] == pytest.approx(48 / 64)       # time-averaged stored / held
    assert s["kv_capacity_utilisation"] == pytest.approx(48 / (64 * 2))
    assert s["slot_utilisation"] == pytest.approx(2 / 8) and s["mfu"] == pytest.approx(1.0)
    assert s["gpu_busy_fraction"] == pytest.approx(0.5)
