"""The steady-state measurement window, the saturation test and the tokens served in a window."""

import numpy as np
import pytest
from capsim.api import simulate
from capsim.results.steady import choose_window, emitted_in
from helpers import unit_workload, workload


def _requests(arrivals, users=None):
    n = len(arrivals)
    return {"arrival_s": np.asarray(arrivals, dtype=float),
            "user": np.full(n, -1) if users is None else np.asarray(users)}


def test_default_window_leaves_out_a_tenth_at_each_end():
    w = choose_window(_requests(np.arange(1000) * 0.5))
    assert w.steady and (w.warmup_requests, w.cooldown_requests, w.requests) == (100, 100, 800)
    assert (w.start_s, w.end_s) == (50.0, 449.5) and w.span_s == 399.5
    assert w.mask[100:900].all() and not w.mask[:100].any() and not w.mask[900:].any()


def test_the_workloads_measure_block_overrides_the_defaults(round_gpu_file):
    times = np.arange(1000) * 0.5
    w = workload(round_gpu_file, measure={"warmup_s": 100, "cooldown_requests": 10})
    win = choose_window(_requests(times), w.measure)
    assert (win.warmup_requests, win.cooldown_requests) == (200, 10) and win.start_s == 100.0
    whole = choose_window(_requests(times), workload(round_gpu_file, measure={"whole_run": True}).measure)
    assert not whole.steady and whole.mask.all() and "whole run" in whole.reason


def test_closed_loop_leaves_out_the_first_and_last_wave():
    # 300 users take turns: each one's first request falls in the first 300 arrivals, its last in the last 300
    users = np.concatenate([np.arange(300), np.random.default_rng(0).integers(0, 300, 400), np.arange(300)])
    w = choose_window(_requests(np.arange(1000) * 0.1, users), users=300)
    assert w.warmup_requests == 300 and w.cooldown_requests == 300 and "first wave" in w.reason


@pytest.mark.parametrize("times, why", [(np.arange(50.0), "too few"), (np.zeros(500), "at once")])
def test_no_steady_window_without_enough_requests_or_time(times, why):
    w = choose_window(_requests(times))
    assert not w.steady and w.mask.all() and why in w.reason


def test_tokens_served_in_a_window_by_hand():
    # one request: first token at t = 10 s, its 11 tokens evenly to t = 20 s (one a second)
    req = {"first_token_s": np.array([10.0]), "finish_s": np.array([20.0]), "generated_tokens": np.array([11]),
           "samples": np.array([1]), "prompt_tokens": np.array([100])}
    assert emitted_in(req, 12.0, 15.5) == (4.0, 0.0)  # tokens at 12, 13, 14, 15
    assert emitted_in(req, 0.0, 10.0) == (1.0, 100.0)  # the first token, and the prompt with it
    assert emitted_in(req, 20.5, 30.0) == (0.0, 0.0)


def test_a_server_far_below_capacity_is_steady_and_not_saturated(priced_gpu_file):
    s = simulate(unit_workload(priced_gpu_file, requests=1000)).summary  # 20 req/s; it serves up to 80
    assert s["measurement"]["steady"] and s["measurement"]["requests"] == 800
    assert not s["saturated"] and not s["saturation"]["too_short"]
    assert s["request_throughput"] == pytest.approx(20.0, rel=0.1)  # it keeps up with the arrivals
    assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"] == 1000  # the accounting stays whole-run
    assert s["whole_run"]["request_throughput"] == pytest.approx(1000 / s["duration"])


def test_an_overloaded_server_is_saturated_whatever_the_run_length(priced_gpu_file):
    for requests in (500, 5000):
        s = simulate(unit_workload(priced_gpu_file, requests=requests, arrivals={"kind": "poisson",
                                                                                   "rate_per_s": 160.0})).summary
        sat = s["saturation"]
        assert s["saturated"] and sat["wait_growth"] == pytest.approx(1.0, abs=0.2)  # 160 arrive, 80 leave
        assert sat["departure_rate_per_s"] == pytest.approx(80.0, rel=0.05) and "grew" in sat["evidence"]


def test_closed_loop_users_are_never_saturated(priced_gpu_file):
    s = simulate(unit_workload(priced_gpu_file, arrivals={"kind": "closed_loop", "users": 64}, requests=2000)).summary
    assert not s["saturated"] and "closed-loop" in s["saturation"]["evidence"]


def test_a_window_shorter_than_ten_request_lifetimes_is_too_short(priced_gpu_file):
    # each request lives 0.1 s (10 steps of 10 ms); 120 requests at 20 req/s put 96 in a window of
    # 4.8 s: 48 lifetimes. With 256 slots the server keeps up with 1,000 req/s, whose 96 window
    # requests arrive within 0.1 s: one lifetime, too short to say anything about a steady state.
    calm = simulate(unit_workload(priced_gpu_file, requests=120)).summary
    wide = {"kind": "continuous", "max_num_seqs": 256, "block_size": 4}
    rushed = simulate(unit_workload(priced_gpu_file, requests=120, scheduler=wide,
                                    arrivals={"kind": "constant", "rate_per_s": 1000.0})).summary
    assert not calm["saturation"]["too_short"] and calm["saturation"]["window_latencies"] > 10
    assert rushed["saturation"]["too_short"] and not rushed["saturated"]
    assert rushed["saturation"]["window_latencies"] < 2
