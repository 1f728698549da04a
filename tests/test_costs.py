"""$ per 1M tokens and where the GPU-hour price comes from."""

import pytest
from capsim.costs import parse_prices, price_for, usd_per_million_tokens
from capsim.errors import CapsimError


def test_formula():
    # $0.74 per hour at 1,000 output tokens/s: 3.6M tokens an hour -> $0.2056 per 1M
    assert usd_per_million_tokens(0.74, 1000.0) == pytest.approx(0.74 / 3.6)
    assert usd_per_million_tokens(3.6, 1e6 / 3600) == pytest.approx(3.6)


def test_no_price_or_no_tokens_is_none_never_a_number():
    assert usd_per_million_tokens(None, 1000.0) is None
    assert usd_per_million_tokens(1.0, 0.0) is None


def test_price_sources():
    assert price_for("rtx4090", 0.74, None) == (0.74, "profile")
    assert price_for("rtx5090", None, None) == (None, None)
    assert price_for("rtx5090", None, 0.89) == (0.89, "user")
    assert price_for("rtx4090", 0.74, {"rtx5090": 0.89}) == (0.74, "profile")
    assert price_for("rtx5090", None, {"rtx5090": 0.89}) == (0.89, "user")


def test_parse_prices():
    assert parse_prices(None) is None
    assert parse_prices(["1.5"]) == 1.5
    assert parse_prices(["4090=0.5", "rtx5090=0.89"]) == {"rtx4090": 0.5, "rtx5090": 0.89}


@pytest.mark.parametrize("texts, fragment", [
    (["-1"], "positive number"), (["abc"], "positive number"), (["1", "rtx4090=2"], "not both"),
    (["rtx4080=1"], "unknown GPU"),
])
def test_bad_prices(texts, fragment):
    with pytest.raises(CapsimError, match=fragment):
        parse_prices(texts)
