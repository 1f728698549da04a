"""$ per 1M tokens and where the GPU-hour price comes from."""

import pytest
from capsim.results.cost import parse_prices, price_for, usd_per_million_tokens
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


def test_a_deployment_pays_for_every_gpu(priced_gpu_file):
    # unit mode: every step takes 10 ms whatever the tensor parallelism, so TP 2 serves the same
    # tokens/s as TP 1 on twice the GPUs: twice the $/hour and twice the $ per token
    from capsim.api import simulate
    from helpers import unit_workload

    w = unit_workload(priced_gpu_file, requests=200)
    one, two, four = (simulate(w, **kw).summary for kw in ({}, {"tp": 2}, {"replicas": 4}))
    assert (one["gpus"], two["gpus"], four["gpus"]) == (1, 2, 4)
    assert (one["usd_per_hour"], two["usd_per_hour"], four["usd_per_hour"]) == (2.0, 4.0, 8.0)
    assert two["usd_per_m_output_tokens"] == pytest.approx(2 * one["usd_per_m_output_tokens"])
    # by hand: $2 per GPU-hour / (output tokens/s x 3600) x 1e6 over the run's steady window
    assert one["usd_per_m_output_tokens"] == pytest.approx(2.0 / (one["output_throughput"] * 3600) * 1e6)
    assert one["cost"]["load"] == "20 req/s offered (poisson)" and one["cost"]["price_source"] == "profile"
    # four replicas at the same offered load: four times the $/hour for the same tokens/s
    assert four["usd_per_m_output_tokens"] == pytest.approx(
        8.0 / (four["output_throughput"] * 3600) * 1e6)


def test_the_cost_counts_tp_for_a_real_model():
    # Llama-3.1-8B on H100s: TP 2 holds two GPUs, so its hour costs twice TP 1's (the per-token
    # figure is that, over whatever throughput TP 2 reaches at the same offered load)
    from capsim.api import simulate

    one, two = (simulate("workloads/chat.yaml", gpu="h100-sxm", requests=200, tp=tp).summary for tp in (1, 2))
    assert two["usd_per_hour"] == pytest.approx(2 * one["usd_per_hour"])
    assert two["usd_per_m_output_tokens"] / one["usd_per_m_output_tokens"] == pytest.approx(
        2 * one["output_throughput"] / two["output_throughput"])
