"""Exactly rounded sums (capsim.results.exact_sum) against math.fsum, to the bit."""

import math

import numpy as np
import pytest
from capsim.results import exact_sum as es
from capsim.results.exact_sum import ExactSum, exact_sum
from hypothesis import given, settings
from hypothesis import strategies as st

finite = st.floats(allow_nan=False, allow_infinity=False)


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@settings(max_examples=500, deadline=None)
@given(st.lists(finite, max_size=60))
def test_equals_fsum_over_any_finite_doubles(values):
    # Huge and tiny magnitudes, subnormals and signed zeros, with cancellations among them.
    # (fsum raises OverflowError where the exact total overflows; so does the integer division.)
    try:
        expected = math.fsum(values)
    except OverflowError:
        return
    assert exact_sum(np.array(values, dtype=np.float64)) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=40),
       st.integers(1, 7), st.randoms(use_true_random=False))
def test_chunks_blocks_and_order_do_not_matter(values, pieces, rnd):
    v = np.array(values)
    expected = math.fsum(values)
    shuffled = v[rnd.sample(range(len(v)), len(v))]
    total = ExactSum()
    for part in np.array_split(shuffled, pieces):
        total.add(part)
    assert total.value == expected


def test_blocks_of_many_values(monkeypatch):
    rng = np.random.default_rng(7)
    v = rng.random(50_000) * 10.0 ** rng.integers(-5, 6, 50_000)
    monkeypatch.setattr(es, "_BLOCK", 4096)
    assert exact_sum(v) == math.fsum(v.tolist())


def test_empty_infinite_and_nan():
    assert exact_sum(np.zeros(0)) == 0.0
    for values in ([math.inf, 1.0], [-math.inf, 2.5], [math.nan, 1.0]):
        assert same(exact_sum(np.array(values)), math.fsum(values))
    with pytest.raises(ValueError):  # as math.fsum: -inf + inf has no value
        exact_sum(np.array([math.inf, -math.inf]))
