"""The load share of an open-loop run (capsim.results.load_share): the part of the GPU's time the
requests' own work takes at the run's operating point, and how steep latency is there."""

import pytest
from capsim.api import simulate
from capsim.report.console import verdict_block
from capsim.results.load_share import NEAR_LOAD, load_share, near_saturation_text
from capsim.results.verdict import Verdict
from helpers import workload


class LinearCost:
    """A step of a + c per decoding sequence + p per prompt token; records what it was asked."""

    mode, window, queries = "realistic", 0, 1

    def __init__(self, a: float, c: float, p: float):
        self.a, self.c, self.p, self.calls = a, c, p, []

    def step_cost(self, plan, context_tokens, sliding_tokens):
        self.calls.append((plan.num_decodes, sum(plan.new_tokens), context_tokens, sliding_tokens))
        seconds = self.a + self.c * plan.num_decodes + self.p * sum(plan.new_tokens)

        class Cost:
            pass

        cost = Cost()
        cost.seconds = seconds
        return cost


def summary(**kw) -> dict:
    """A run summary's figures load_share reads: 100 requests of 200 prompt and 50 output tokens
    done at 40 req/s over 2 engines, a mean batch of 10 holding 3,000 of 10,000 KV tokens."""
    s = {"completed": 100, "num_steps": 500, "mean_batch_size": 10.0, "kv_capacity_utilisation": 0.3,
         "total_input_tokens": 20_000, "total_output_tokens": 5_000, "request_throughput": 40.0, "replicas": 2,
         "saturated": False}
    return s | kw


def test_the_share_is_the_rate_per_engine_times_one_more_requests_gpu_time():
    cost = LinearCost(a=0.010, c=0.0002, p=0.00001)  # 10 ms + 0.2 ms per sequence + 10 us per prompt token
    share = load_share(cost, summary(), kv_tokens=10_000, arrivals_kind="poisson")
    per_request = 50 * 0.0002 + 200 * 0.00001  # 50 decode steps' worth of one more sequence + its prompt
    assert share.per_request_s == pytest.approx(per_request)
    assert share.share == pytest.approx(20.0 * per_request)  # 40 req/s over 2 engines
    assert share.latency_per_pct == pytest.approx(share.share / (1 - share.share))
    assert share.at_batch == 10 and share.at_context_tokens == pytest.approx(300.0)  # 3,000 KV tokens over 10
    assert (10, 0, 3000, 0) in cost.calls and (11, 0, 3300, 0) in cost.calls and (10, 200, 3000, 0) in cost.calls


def test_at_or_past_the_whole_gpu_there_is_no_slope():
    share = load_share(LinearCost(0.010, 0.002, 0.0), summary(), 10_000, "poisson")  # 50 x 2 ms x 20/s = 2.0
    assert share.share == pytest.approx(2.0) and share.latency_per_pct is None
    assert "as much as it has" in near_saturation_text(share.as_dict())


@pytest.mark.parametrize("kind, fields", [("closed_loop", {}), ("all_at_once", {}), ("poisson", {"saturated": True}),
                                          ("poisson", {"completed": 0}), ("poisson", {"num_steps": 0})])
def test_no_share_where_the_rate_is_not_an_offered_one(kind, fields):
    assert load_share(LinearCost(0.01, 0.0002, 0.0), summary(**fields), 10_000, kind) is None


@pytest.mark.parametrize("field, value", [("mode", "unit"), ("queries", 3)])
def test_unit_mode_and_speculative_decoding_have_no_share(field, value):
    cost = LinearCost(0.01, 0.0, 0.0)
    setattr(cost, field, value)
    assert load_share(cost, summary(), 10_000, "poisson") is None


def test_the_verdict_line_starts_at_near_load():
    below = {"share": NEAR_LOAD - 0.01, "latency_per_pct": 2.8}
    at = {"share": 0.8, "latency_per_pct": 4.0}
    assert near_saturation_text(below) == "" and near_saturation_text(None) == ""
    text = near_saturation_text(at)
    assert "takes 80% of the GPU's time" in text and "by 4.0% or more per 1%" in text
    v = Verdict(None, [], "none", "room", [], "$1/hour", text)
    assert "Near saturation: the requests' own work takes 80%" in verdict_block(v.as_dict())


def chunked(gpu: str, rate: float, requests: int = 3000):
    """The tiny model on the round GPU, 100-token prompts and 50-token answers, Poisson arrivals."""
    return workload(gpu, scheduler={"kind": "chunked", "max_num_seqs": 1024, "block_size": 4,
                                    "max_num_batched_tokens": 4096},
                    arrivals={"kind": "poisson", "rate_per_s": rate}, prompt_tokens={"dist": "fixed", "value": 100},
                    output_tokens={"dist": "fixed", "value": 50}, requests=requests)


def test_a_run_near_saturation_says_so_and_a_light_one_does_not(round_gpu_file):
    light = simulate(chunked(round_gpu_file, 5000.0)).summary
    near = simulate(chunked(round_gpu_file, 16000.0)).summary
    assert light["load_share"]["share"] < 0.3 and light["verdict"]["near_saturation"] == ""
    assert not near["saturated"] and near["load_share"]["share"] > NEAR_LOAD
    assert near["verdict"]["near_saturation"].startswith("the requests' own work takes")


def test_the_slope_is_a_lower_bound_of_what_the_simulation_shows(round_gpu_file):
    """2% more rate moves the simulated mean TPOT by at least the local slope says (the batch
    fluctuates, and per-request cost grows with the batch, so the real curve is steeper)."""
    base = simulate(chunked(round_gpu_file, 14000.0, 6000)).summary
    more = simulate(chunked(round_gpu_file, 14000.0 * 1.02, 6000)).summary
    slope = (more["mean_tpot_ms"] / base["mean_tpot_ms"] - 1.0) / 0.02
    assert 0.5 < base["load_share"]["share"] < NEAR_LOAD
    assert slope >= base["load_share"]["latency_per_pct"] > 0.5
