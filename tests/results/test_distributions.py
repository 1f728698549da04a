"""Distributions of latencies (vLLM's mean/median/std/percentiles) and the weighted percentile trick."""

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
