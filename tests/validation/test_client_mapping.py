"""How a benchmark client's runs map onto a workload (validation/README.md, "How points map onto
simulations"): listed prompts and their chat template, answers spread up to the client's cap, a prompt
set replayed against the prefix cache, runs skipped for what capsim cannot represent (re-sent prompts,
an engine's start-up), and the window a source's figures are measured over."""

import math

import numpy as np
import pytest
from capsim.api import simulate
from capsim.validation.lengths import clipped_lognormal_mean
from capsim.validation.mapping import Skip, workload_for
from capsim.validation.runner import load_points, run_point
from capsim.workload.streams import sample_lengths
from helpers import REPO, script_module


@pytest.fixture(scope="module")
def points() -> dict:
    return {p["id"]: p for p in load_points(REPO / "validation")}


def test_the_closed_loop_start_script_splits_a_run_at_each_users_first_request(points):
    script = script_module("validation_closed_loop_start")
    c5 = points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c5-ttft"]  # 5 users, 100 requests, mean TTFT
    r = script.by_phase(c5)
    assert r["measured"] == pytest.approx(run_point(c5).predicted)  # the validated figure: NIM's steady window
    assert (r["users"], r["requests"]) == (5, 100)
    assert r["whole run"] == pytest.approx((5 * r["opening wave"] + 95 * r["after it"]) / 100)
    assert r["opening wave"] > r["after it"]  # five 5,000-token prompts at once wait for each other
    gpustack = points["gpustack-vllm0110-h100sxm-qwen3-8b-bf16-sharegpt-c8-ttft"]  # measured over its whole run
    assert script.by_phase(gpustack)["measured"] == pytest.approx(run_point(gpustack).predicted)
    with pytest.raises(SystemExit, match="not a closed loop"):
        script.by_phase(points["trtllm014-h100sxm-llama31-8b-bf16-467-256-qps2-ttft"])

def test_a_listed_prompt_set_is_drawn_from_its_first_prompts_plus_the_template(points):
    """AccelMark sends the first N prompts of its data set in order, each wrapped in the chat template."""
    point = {**points["accelmark-a100sxm80-vllm0201-llama3-8b-bf16-sharegpt-interactive-c1-ttft-p50"]}
    del point["prompt_replay"]  # one run from a cold cache
    w = workload_for(point)
    prompts = w.prompt_tokens
    assert prompts.dist == "sequence" and len(prompts.values) == 150  # the first 150 of the 500 listed
    assert prompts.values[0] == 395 + 10  # request 0: its 395 listed tokens and the template
    assert abs(sum(prompts.values) / 150 - (236.15 + 10)) < 0.01  # the listed mean plus the template
    assert (w.arrivals.kind, w.arrivals.users, w.requests) == ("closed_loop", 1, 150)
    assert (w.engine, w.gpu, w.max_model_len, w.gpu_memory_utilization) == ("vllm", "a100-80g", 4096, 0.9)
    # vLLM's in-process AsyncLLMEngine takes SchedulerConfig's fallbacks, not the API server's 256
    assert (w.scheduler.max_num_seqs, w.scheduler.max_num_batched_tokens) == (128, 2048)
    # answers: ShareGPT's log-normal shape clipped at the client's 512-token cap, averaging the stated mean
    out = w.output_tokens
    assert (out.dist, out.sigma, out.min, out.max) == ("lognormal", 1.0, 1, 512)
    assert out.mean == clipped_lognormal_mean(345.66, 512, 1.0)

def test_a_clipped_log_normal_mean_is_solved_so_the_clipped_answers_average_the_target():
    """E[min(X, c)] by direct numerical integration of the log-normal density, against the solver."""
    def clipped_mean(m: float, cap: float, sigma: float) -> float:
        mu, total, steps = math.log(m) - sigma**2 / 2, 0.0, 200_000
        lo, hi = mu - 12 * sigma, mu + 12 * sigma  # integrate over y = ln x
        dy = (hi - lo) / steps
        for i in range(steps):
            y = lo + (i + 0.5) * dy
            density = math.exp(-((y - mu) / sigma) ** 2 / 2) / (sigma * math.sqrt(2 * math.pi))
            total += min(math.exp(y), cap) * density * dy
        return total
    for target, cap in ((345.66, 512.0), (187.72, 224.0)):
        m = clipped_lognormal_mean(target, cap, 1.0)
        assert m > cap > target  # many answers reach the cap, so the unclipped mean lies above it
        assert abs(clipped_mean(m, cap, 1.0) - target) < 0.05
    assert abs(clipped_lognormal_mean(100.0, 1e9, 1.0) - 100.0) < 0.01  # a cap never reached changes nothing

def test_capped_answers_as_sampled_keep_the_stated_mean_and_pile_up_at_the_cap(points):
    """What the simulation draws: capsim's sampler clips (rounds, then clips to [1, cap]), so the
    drawn answers average the stated mean and the share at the cap is the log-normal's tail there."""
    for pid, mean, cap, at_cap in (("accelmark-a100sxm80-vllm0201-llama3-8b-bf16-sharegpt-online-qps25-ttft-p50", 345.66, 512, 0.38),
                                   ("accelmark-a100sxm40-sglang056-llama3-8b-bf16-sharegpt-online-qps25-ttft-p50", 187.72, 224, 0.63)):
        spec = workload_for(points[pid]).output_tokens
        assert (spec.dist, spec.max) == ("lognormal", cap)
        drawn = sample_lengths(spec, 400_000, np.random.default_rng(7))
        assert abs(drawn.mean() - mean) < 1.0 and drawn.max() == cap and drawn.min() >= 1
        assert abs((drawn == cap).mean() - at_cap) < 0.01

def test_answers_without_a_stated_cap_or_at_it_are_all_the_mean_and_a_cap_below_the_mean_is_refused(points):
    capped = {**points["accelmark-a100sxm40-sglang056-llama3-8b-bf16-sharegpt-online-qps25-ttft-p50"]}
    del capped["max_output_tokens"]
    assert (workload_for(capped).output_tokens.dist, workload_for(capped).output_tokens.value) == ("fixed", 188)
    at_cap = {**capped, "output_tokens": 224, "max_output_tokens": 224}
    assert (workload_for(at_cap).output_tokens.dist, workload_for(at_cap).output_tokens.value) == ("fixed", 224)
    for bad in (100, 224.5, "512", True):
        with pytest.raises(Skip, match="max_output_tokens"):
            workload_for({**capped, "max_output_tokens": bad})
    for target, cap, sigma in ((224, 224, 1.0), (300, 224, 1.0), (0, 224, 1.0), (100, 224, 0.0)):
        with pytest.raises(ValueError, match="0 < target < cap"):
            clipped_lognormal_mean(target, cap, sigma)

def test_a_run_that_includes_the_engines_start_up_is_skipped_with_the_evidence(points):
    point = points["accelmark-rtx5090-vllm0191-llama3-8b-bf16-sharegpt-online-qps5-ttft-p99"]
    with pytest.raises(Skip, match="start-up .*30,310.5 ms.*warm engine"):
        workload_for(point)
    later = {**points["accelmark-rtx5090-vllm0191-llama3-8b-bf16-sharegpt-online-qps25-ttft-p99"]}
    assert "startup_transient" not in later and workload_for(later).arrivals.rate_per_s == 25.0

def test_a_client_that_replays_its_prompt_set_runs_with_the_prefix_cache(points):
    """AccelMark re-sends its prompts in every run: its 3 interactive runs back to back, the first
    pass cold; its 25 requests/s runs after the 5 requests/s ones sent the set, so cached."""
    alone = workload_for(points["accelmark-a100sxm80-vllm0201-llama3-8b-bf16-sharegpt-interactive-c1-ttft-p50"])
    assert (alone.prefix_caching, alone.prompt_set, alone.prompt_set_cached, alone.requests) == (True, 150, False, 450)
    loaded = workload_for(points["accelmark-a100sxm40-sglang056-llama3-8b-bf16-sharegpt-online-qps25-ttft-p50"])
    assert (loaded.prompt_set, loaded.prompt_set_cached, loaded.requests, loaded.arrivals.rate_per_s) == (300, True, 300, 25.0)

def test_a_client_that_resends_its_prompts_unknowably_is_skipped(points):
    with pytest.raises(Skip, match="re-sent its prompts"):  # its durations show cache hits the data cannot place
        workload_for(points["accelmark-a100sxm40-sglang056-llama31-8b-bf16-longctx28k-online-qps2-ttft-p99"])
    alone = workload_for(points["accelmark-a100sxm40-sglang056-llama31-8b-bf16-longctx28k-interactive-c1-ttft-p99"])
    assert (alone.engine, alone.arrivals.kind, alone.arrivals.users, alone.requests) == ("sglang@0.4", "closed_loop", 1, 100)
    assert (alone.prompt_tokens.value, alone.output_tokens.value) == (28650, 224)  # SGLang's 224 cap
    assert not alone.prefix_caching  # 28K-token prompts outgrow the cache long before they come round again

def test_nims_closed_loops_are_measured_over_the_steady_window_and_other_clients_over_the_run(points):
    nim = workload_for(points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c50-ttft"])
    assert not nim.measure.whole_run and nim.measure.warmup_requests is None  # capsim's default window
    assert (nim.arrivals.kind, nim.arrivals.users) == ("closed_loop", 50)
    result = simulate(workload_for(points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c5-ttft"]))
    window, rows = result.window, result.requests.sort_values("request_id")
    assert window.steady and 0 < window.requests < len(rows)  # a steady window, not a fall-back to every request
    assert not (window.mask & rows.first_of_user.astype(bool).to_numpy()).any()  # no user's first request in it
    other = workload_for(points["gpustack-vllm0110-h100sxm-qwen3-8b-bf16-sharegpt-c8-ttft"])
    assert other.arrivals.kind == "closed_loop" and other.measure.whole_run
