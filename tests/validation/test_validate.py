"""`capsim validate`: the suite loads, points map onto simulations as validation/README.md says,
a few fast points run end to end, the report has its MAPE table per split and group, and every
file says its split. The full suite (about 5 minutes on 2 cores) is run by hand: `capsim validate`."""

import math

import pytest
from capsim.cli.app import app
from capsim.errors import CapsimError
from capsim.validation.runner import (GROUPS, SLO_TOLERANCE, Outcome, _shared_runs, find_suite, group_rows, highest_passing,
                                      load_points, mape, render, run_point, run_points, run_suite, write)
from capsim.validation.mapping import Skip, at_rate, engine_for, kv_format_for, predicted_value, slo_limits_ms, workload_for
from typer.testing import CliRunner
from helpers import REPO, script_module

SUITE = REPO / "validation"
FAST = ["llamacpp-pr4766-rtx4090-codellama7b-f16-tg128", "llamacpp-pr4766-rtx4090-codellama7b-f16-pp512",
        "trtllm014-h100sxm-llama31-8b-bf16-467-256-qps2-ttft", "lambda-vllm054-h100sxm-mistral7b-sharegpt-n10-output-tput"]


@pytest.fixture(scope="module")
def points() -> dict:
    return {p["id"]: p for p in load_points(SUITE)}


def test_the_suite_has_its_points_from_independent_sources(points):
    assert len(points) >= 30
    sources = {p["_file"] for p in points.values()}
    assert len(sources) >= 4
    groups = {p["group"] for p in points.values()}
    assert {"decode", "prefill", "ttft", "max_throughput", "concurrency"} <= groups <= set(GROUPS)


def test_a_decode_point_is_one_request_with_n_decode_steps(points):
    p = points["xdai-rtx4090-llama3-8b-q4_k_m-tg4096"]
    w = workload_for(p)
    assert (w.engine, w.gpu, w.model, w.weights, w.kv_cache) == ("llama.cpp@2024-05", "rtx4090", "llama-3.1-8b", "q4_k_m", "fp16")
    assert w.requests == 1 and w.arrivals.kind == "all_at_once"
    assert w.prompt_tokens.value == 1 and w.output_tokens.value == 4097  # first token + 4,096 decode steps


def test_engine_versions_and_unstated_formats_follow_the_documented_rules(points):
    assert engine_for(points["xdai-rtx4090-llama2-7b-q4_0-tg1024"]) == "llama.cpp@2024-01"  # b1671, no CUDA graphs
    assert engine_for(points["xdai-rtx4090-llama3-8b-q4_k_m-tg4096"]) == "llama.cpp@2024-05"  # build 2834-2843
    assert engine_for(points["lambda-vllm054-h100sxm-mistral7b-sharegpt-n320-itl"]) == "vllm@0.5"
    assert engine_for(points["vllm060-a100-llama31-8b-sharegpt-rps4-tpot"]) == "vllm@0.6-ms10"
    v0110 = points["gpustack-vllm0110-h100sxm-qwen3-8b-bf16-sharegpt-c1-ttft"]
    assert engine_for(v0110) == "vllm@0.11.0"  # its chat endpoint templates every request
    assert engine_for({**v0110, "engine_version": "v0.11.1"}) == "vllm"  # cached again from 0.11.1
    # TensorRT-LLM by release: the 2024 builds (0.11-0.14, MLPerf v4.1's harness) and 0.15 on
    assert engine_for(points["trtllm013-h200-llama31-70b-fp8-tp1-1000-1000"]) == "trt-llm@0.13"
    assert engine_for(points["trtllm014-h100sxm-llama31-8b-bf16-467-256-qps2-ttft"]) == "trt-llm@0.13"
    assert engine_for(points["mlperf41-nvidia-h200x8-server-ttft-mean"]) == "trt-llm@0.13"
    assert engine_for(points["trtllm017-h200-llama31-70b-fp8-tp1-1000-1000"]) == "trt-llm"
    assert engine_for(points["mlperf51-nvidia-dgxb200x8-server-ttft-mean"]) == "trt-llm"
    assert engine_for(points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c1-ttft"]) == "trt-llm"
    assert kv_format_for(points["trtllm10-h100sxm-llama31-8b-fp8-1000-1000"]) == "fp8_e4m3"  # TRT-LLM FP8 build
    assert kv_format_for(points["lambda-vllm054-h100sxm-llama31-8b-fp8-sharegpt-n320-output-tput"]) == "bf16"  # auto
    tp8 = workload_for(points["trtllm017-h100sxm-llama31-70b-fp8-tp8-1000-1000"])
    assert tp8.tp == 8 and tp8.requests == 3000 and tp8.gpu_memory_utilization == 0.95  # the page's flag
    sharegpt = workload_for(points["sglang030-a100-llama31-8b-sharegpt-rps4-ttft"])
    assert sharegpt.arrivals.kind == "poisson" and sharegpt.prompt_tokens.dist == "empirical"


def test_points_that_cannot_be_represented_are_skipped_with_a_reason(points):
    with pytest.raises(Skip, match="longest answer"):
        workload_for(points["lambda-vllm054-h100sxm-mistral7b-sharegpt-n10-output-tput"])


def test_sglang_random_lengths_are_uniform_up_to_the_stated_length(points):
    w = workload_for(points["dc-sglang-h200x4-llama33-70b-rand1024-rps1-ttft"])  # random_range_ratio 0.0
    assert (w.prompt_tokens.dist, w.prompt_tokens.min, w.prompt_tokens.max) == ("uniform", 1, 1024)
    assert (w.output_tokens.min, w.output_tokens.max) == (1, 1024)
    assert w.arrivals.kind == "poisson" and w.arrivals.rate_per_s == 1.0 and w.requests == 300
    assert (w.engine, w.tp, w.gpu) == ("sglang@0.4", 4, "h200")  # its December 2024 image: overlap scheduler


def test_mlperf_prompts_follow_the_published_openorca_histogram(points):
    w = workload_for(points["mlperf41-nvidia-h200x8-offline-tokens"])
    prompts = w.prompt_tokens
    assert prompts.dist == "empirical" and sum(prompts.weights) == 24576  # every sample of the set, once
    mean = sum(v * c for v, c in zip(prompts.values, prompts.weights)) / 24576
    assert abs(mean - 222.33) < 0.01 and max(prompts.values) == 1021 < 1024  # processorca.py keeps < 1024
    assert w.output_tokens.value == 291  # the point's mean from its two printed rates (291.3)


def test_mlperf_systems_run_their_stated_copies_and_settings(points):
    offline = workload_for(points["mlperf41-nvidia-h200x8-offline-tokens"])  # 8 x TP1, gpu_batch_size 806
    assert (offline.tp, offline.replicas, offline.scheduler.max_num_seqs, offline.scheduler.max_num_batched_tokens,
            offline.gpu_memory_utilization) == (1, 8, 806, 4096, 0.9)
    assert offline.arrivals.kind == "all_at_once" and offline.requests == 4 * 806 * 8 and offline.measure.whole_run
    h100 = workload_for(points["mlperf41-nvidia-dgxh100x8-server-ttft-p99"])  # 4 copies of TP2
    assert (h100.tp, h100.replicas, h100.scheduler.max_num_seqs) == (2, 4, 1024)
    assert h100.arrivals.kind == "poisson" and h100.arrivals.rate_per_s == 75.1
    assert h100.requests == int(75.1 * 240) and not h100.measure.whole_run  # a steady window of a long run
    nebius = workload_for(points["mlperf51-nebius-h200x8-interactive-ttft-mean"])
    assert (nebius.replicas, nebius.scheduler.max_num_batched_tokens, nebius.scheduler.block_size) == (8, 256, 32)


def test_mlperf_points_that_cannot_be_mapped_say_why(points):
    with pytest.raises(Skip, match="Llama 2 tokens"):  # Krai serves Llama 3.1 (another tokenizer)
        workload_for(points["mlperf51-krai-h200x8-vllm092-offline-tokens"])
    with pytest.raises(Skip, match="vLLM 0.4.3"):  # no profile for AMD's vLLM 0.4 fork
        engine_for(points["mlperf41-amd-mi300x8-offline-tokens"])
    with pytest.raises(Skip, match="V0 engine with multi-step"):  # AMD v5.1: vLLM 0.9 V0, num_scheduler_steps 11
        engine_for(points["mlperf51-amd-mi300x8-offline-tokens"])
    with pytest.raises(Skip, match="server_flags swap_space not understood"):
        workload_for({**points["mlperf41-nvidia-h200x8-offline-tokens"], "server_flags": {"swap_space": 4}})
    assert engine_for(points["mlperf51-krai-h200x8-vllm092-server-ttft-mean"]) == "vllm"  # V1


def test_loadgen_latencies_in_ns_compare_with_the_run_in_ms(points):
    summary = {"mean_ttft_ms": 250.0, "p99_tpot_ms": 40.0}
    assert predicted_value(points["mlperf41-nvidia-h200x8-server-ttft-mean"], summary) == 250.0e6
    assert predicted_value({"metric": "tpot_ns", "statistic": "p99"}, summary) == 40.0e6


def test_a_concurrency_sweep_without_a_rate_is_a_closed_loop(points):
    w = workload_for(points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c25-ttft"])
    assert (w.arrivals.kind, w.arrivals.users, w.arrivals.think_time_s) == ("closed_loop", 25, 0.0)
    assert w.requests == 250 and w.engine == "trt-llm" and w.kv_cache == "fp8_e4m3"  # NIM FP8 profile
    alone = workload_for(points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c1-ttft"])  # TTFT of one request
    assert alone.requests == 1 and alone.prompt_tokens.value == 5000


def test_a_max_concurrency_run_on_sharegpt_is_a_closed_loop_with_the_stated_means(points):
    w = workload_for(points["gpustack-vllm0110-h100sxm-qwen3-8b-bf16-sharegpt-c2-ttft"])  # vllm bench serve
    assert w.engine == "vllm@0.11.0" and w.endpoint == "chat"  # "v0.11.0", `--backend openai-chat`
    assert (w.arrivals.kind, w.arrivals.users, w.requests) == ("closed_loop", 2, 100)
    assert (w.prompt_tokens.dist, w.output_tokens.dist, w.output_tokens.mean) == ("empirical", "lognormal", 220.61)


def test_sharegpt_prompts_take_the_measured_shape_at_the_stated_mean(points):
    """The 320 prompt lengths vLLM's client sent (Lambda's raw result: mean 204.9, median 77 tokens),
    each scaled by the point's mean over the sample's: the long tail of short prompts is kept, so
    the median prompt is well under half the mean (a log-normal of sigma 1 put it at 61%)."""
    w = workload_for(points["gpustack-vllm0110-h100sxm-qwen3-8b-bf16-sharegpt-c2-ttft"])  # mean 232.6 stated
    values, weights = w.prompt_tokens.values, w.prompt_tokens.weights
    assert sum(weights) == 320 and min(values) >= 4 and max(values) <= 1024  # the clients' filter
    mean = sum(v * c for v, c in zip(values, weights)) / 320
    assert abs(mean - 232.6) < 0.01 * 232.6  # scaled to the stated mean (rounding and the 1,024 cap aside)
    below, median = 0.0, None
    for v, c in zip(values, weights):
        below += c
        if median is None and below >= 160:
            median = v
    assert median == round(77 * 232.6 / (65578 / 320))  # the sample's median, 77, scaled


def test_disaggregated_points_map_onto_pools_or_say_why_not(points):
    """Mooncake's 1P1D A10 runs become a prefill and a decode pool over the link class of their
    transport; SGLang's pools measured alone with expert parallelism are skipped with the reason."""
    disaggregated = [p for p in points.values() if p["group"] == "disaggregated"]
    assert len(disaggregated) == 24
    mapped = 0
    for p in disaggregated:
        if p["_file"] == "sglang-pd-disagg-deepseek-h100.yaml":
            with pytest.raises(Skip, match="expert parallelism"):
                workload_for(p)
            continue
        w = workload_for(p)
        d = w.serving.disaggregated
        assert (d.prefill.replicas, d.decode.replicas, w.tp, w.gpu) == (1, 1, 1, "a10")
        assert d.link == ("tcp-25gbe" if "-tcp-" in p["id"] else "rdma-100g")
        assert (w.engine, w.max_model_len, w.gpu_memory_utilization) == ("vllm@0.5", 10000, 0.95)
        mapped += 1
    assert mapped == 20


def test_a_disaggregated_point_runs_end_to_end():
    outcomes = run_suite(SUITE, only=["mooncake-vllm062-a10-1p1d-rdma-in256-qps2-ttft"], workers=1)
    assert [o.status for o in outcomes] == ["ok"] and outcomes[0].predicted > 0


def test_points_read_off_one_run_share_one_simulation(points):
    server = [p for i, p in points.items() if i.startswith("mlperf41-nvidia-dgxh100x8-server-") and not i.endswith("slo-rate")]
    offline = points["mlperf41-nvidia-dgxh100x8-offline-tokens"]
    runs = _shared_runs([*server, offline, points["mlperf51-krai-h200x8-vllm092-offline-tokens"]])
    assert [len(r) for r in runs] == [3, 1, 1]  # mean and p99 TTFT and mean TPOT of the Server run; a skipped point alone
    ttft = points["trtllm014-h100sxm-llama31-8b-bf16-467-256-qps2-ttft"]
    tpot = {**ttft, "id": "same-run-tpot", "metric": "tpot_ms"}
    a, b = run_points([ttft, tpot])
    assert (a.status, b.status) == ("ok", "ok") and a.predicted != b.predicted
    assert run_point(ttft).predicted == a.predicted  # the same simulation as the point's own


def test_the_load_sensitivity_script_reruns_a_point_at_scaled_rates(points):
    script = script_module("validation_load_sensitivity")
    ttft = points["trtllm014-h100sxm-llama31-8b-bf16-467-256-qps2-ttft"]  # Poisson at 2 req/s
    rows = script.sensitivity(ttft, [1.0, 4.0])
    assert rows[0] == (1.0, run_point(ttft).predicted)  # factor 1 is the point's own simulation
    assert rows[1][1] > rows[0][1]  # four times the load waits longer for its first token
    with pytest.raises(SystemExit, match="no request rate"):
        script.sensitivity(points["nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c25-ttft"], [1.0])  # closed loop


def test_the_operating_point_script_applies_littles_law_and_prices_one_step_there(points):
    script = script_module("validation_operating_point")
    ttft, tpot = points["mlperf51-nvidia-dgxb200x8-interactive-ttft-mean"], points["mlperf51-nvidia-dgxb200x8-interactive-tpot-mean"]
    o = script.operating_point(ttft, tpot)
    rate = 220.11 / 8  # the run's scheduled samples per second over its 8 copies of the model
    ttft_s, tpot_s, out = ttft["measured"] * 1e-9, tpot["measured"] * 1e-9, ttft["output_tokens"]
    assert o["rate_per_replica"] == pytest.approx(rate) and o["measured_step_s"] == pytest.approx(tpot_s)
    assert o["in_flight"] == pytest.approx(rate * (ttft_s + (out - 1) * tpot_s)) == pytest.approx(257.1, abs=0.1)
    assert o["decoding"] == pytest.approx(rate * (out - 1) * tpot_s)
    assert o["prompt_tokens_per_step"] == round(rate * tpot_s * (o["mean_context"] - out / 2))
    # capsim's step there: longer than the same batch decoding alone, shorter than that plus the prompt's own step
    cost = script.cost_model_for(script.resolve(workload_for(ttft)), None)
    n, ctx = round(o["decoding"]), round(o["decoding"] * o["mean_context"])
    decode_only = cost.decode_seconds(n, ctx, 0)
    prompt = script.StepPlan([script.Request(0, 0.0, o["prompt_tokens_per_step"], 1)], [o["prompt_tokens_per_step"]])
    assert decode_only < o["capsim_step_s"] < decode_only + cost.step_cost(prompt).seconds


def test_a_steady_window_too_short_is_simulated_again_with_twice_the_requests(points, monkeypatch):
    import capsim.validation.runner as runner

    seen = []

    class Run:
        def __init__(self, w):
            seen.append(w.requests)
            self.summary = {"saturation": {"too_short": len(seen) == 1}, "mean_ttft_ms": 1.0}

    monkeypatch.setattr(runner, "simulate", Run)
    w = workload_for(points["mlperf51-nebius-h200x8-server-ttft-mean"])  # a long MLPerf run: steady window
    assert runner.steady_summary(w)["mean_ttft_ms"] == 1.0 and seen == [w.requests, 2 * w.requests]
    seen.clear()
    runner.steady_summary(workload_for(points["mlperf51-nebius-h200x8-offline-tokens"]))  # measured whole: once
    assert len(seen) == 1


def test_the_slo_search_brackets_by_doubling_then_bisects_to_the_tolerance():
    tried = []

    def meets(x):
        tried.append(x)
        return x <= 13.7

    best = highest_passing(meets, 1.0, 0.02)
    assert tried[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]  # doubling until a rate fails, then bisection
    assert best <= 13.7 and min(x for x in tried if x > 13.7) - best <= 0.02 * best
    assert highest_passing(lambda x: x <= 0.3, 1.0, 0.02) == pytest.approx(0.3, rel=0.02)  # halving from the start
    assert highest_passing(lambda x: False, 1.0, 0.02) is None  # nothing passes down to start / 1024
    assert highest_passing(lambda x: True, 1.0, 0.02) == math.inf  # nothing fails: the limits never bind
    with pytest.raises(CapsimError, match="positive rate"):
        highest_passing(lambda x: True, 0.0, 0.02)


def test_mlperf_slo_points_carry_the_limits_their_logs_print(points):
    slo = {k: p for k, p in points.items() if p["group"] == "slo_capacity"}
    assert len(slo) >= 10  # every Server and Interactive run of the MLPerf files
    for p in slo.values():
        scenario = "interactive" if "-interactive-" in p["id"] else "server"
        assert slo_limits_ms(p) == ({"p99_ttft_ms": 450.0, "p99_tpot_ms": 40.0} if scenario == "interactive"
                                    else {"p99_ttft_ms": 2000.0, "p99_tpot_ms": 200.0})
        ttft = points[p["id"].replace("-slo-rate", "-ttft-mean")]  # the same run's TTFT point
        assert p["measured"] == ttft["request_rate_per_s"] and p["request_rate_per_s"] is None
        try:  # each probe is the run the TTFT point maps onto, at the probe's rate
            probe = workload_for(at_rate(p, ttft["request_rate_per_s"]))
        except Skip:
            continue
        assert probe == workload_for(ttft).model_copy(update={"name": p["id"]})
    runs = _shared_runs(list(slo.values()))
    assert all(len(run) == 1 for run in runs)  # each point is a search of its own, never a shared run
    for bad in (None, {}, {"p50_ttft_ms": 100}, {"p99_ttft_ms": 0}, {"p99_tpot_ms": True}, {"p99_ttft_ms": math.inf}):
        with pytest.raises(CapsimError, match="slo_ms"):
            slo_limits_ms({**next(iter(slo.values())), "slo_ms": bad})


def test_a_bad_slo_field_is_an_error_naming_the_file_before_any_simulation(tmp_path):
    text = (SUITE / "mlperf-nebius-llama2-70b.yaml").read_text()
    bad = text.replace("slo_ms: {p99_ttft_ms: 2000.0, p99_tpot_ms: 200.0}", "slo_ms: {p99_ttft: 2000}", 1)
    assert bad != text
    (tmp_path / "mlperf-nebius-llama2-70b.yaml").write_text(bad)
    with pytest.raises(CapsimError, match="mlperf-nebius-llama2-70b.yaml: point mlperf51-nebius-h200x8-server-slo-rate: "
                                          "field 'slo_ms'"):
        load_points(tmp_path)


def test_a_slo_point_reports_the_highest_rate_within_its_limits(points, monkeypatch):
    import capsim.validation.runner as runner

    point = points["mlperf51-nebius-h200x8-server-slo-rate"]

    class Run:  # p99 TPOT grows with the rate and crosses 200 ms at 150 requests/s; saturated above 180
        def __init__(self, w):
            rate = w.arrivals.rate_per_s
            self.summary = {"completed": w.requests, "saturated": rate > 180, "saturation": {"too_short": False},
                            "p99_ttft_ms": 10.0, "p99_tpot_ms": 200.0 * rate / 150}

    monkeypatch.setattr(runner, "simulate", Run)
    [o] = run_points([point])
    assert o.status == "ok" and o.group == "slo_capacity" and o.measured == 116.59
    assert 150 * (1 - SLO_TOLERANCE) <= o.predicted <= 150
    assert o.error_pct == pytest.approx(100 * (o.predicted - 116.59) / 116.59)
    [skipped] = run_points([points["mlperf51-krai-h200x8-vllm092-server-slo-rate"]])
    assert skipped.status == "skipped" and "Llama 2 tokens" in skipped.reason
    [other] = run_points([{**point, "length_distribution": "sharegpt"}])  # only MLPerf's run rules are mapped
    assert other.status == "skipped" and "MLPerf's run rules" in other.reason
    monkeypatch.setattr(runner, "simulate", lambda w: type("R", (), {"summary": {"completed": 1, "saturated": False,
                                                                                 "p99_ttft_ms": 1.0, "p99_tpot_ms": 1.0}}))
    [never] = run_points([point])  # limits that never bind: reported as failed, not as a huge rate
    assert never.status == "failed" and "never bind" in never.reason


def test_fast_points_run_end_to_end():
    outcomes = run_suite(SUITE, only=FAST, workers=1)
    by_id = {o.id: o for o in outcomes}
    assert set(by_id) == set(FAST)
    ok = [o for o in outcomes if o.status == "ok"]
    assert len(ok) == 3
    for o in ok:
        assert o.predicted > 0 and o.error_pct == pytest.approx(100 * (o.predicted - o.measured) / o.measured)
    assert by_id[FAST[3]].status == "skipped" and by_id[FAST[3]].predicted is None
    table = {(r[0], r[1]): r[2:] for r in group_rows(outcomes)}
    assert {o.split for o in outcomes} == {"test", "calibration"}  # PR #4766 is held out; TensorRT-LLM, Lambda are not
    assert table["test", "decode"][0] == 1
    assert table["test", "decode"][2] == pytest.approx(abs(by_id[FAST[0]].error_pct), abs=0.05)
    assert table["calibration", "all"][1] == 1  # the skipped Lambda point is counted, not scored


def _outcome(group, err, status="ok", split="test"):
    pred = None if status != "ok" else 100 + err
    return Outcome("x", "f.yaml", split, group, "vllm", "h100-sxm", 1, "m", "ttft_ms", "mean", 100.0, pred,
                   None if pred is None else err, status, "" if status == "ok" else "why")


def test_mape_per_group_and_the_markdown_table(tmp_path):
    outcomes = [_outcome("decode", 10.0), _outcome("decode", -20.0), _outcome("ttft", 30.0),
                _outcome("prefill", 10.0), _outcome("concurrency", 0.0, status="skipped"),
                _outcome("decode", 50.0, split="calibration")]
    assert mape(outcomes[:2]) == 15.0
    rows = {(r[0], r[1]): r[2:] for r in group_rows(outcomes)}
    assert [r[0] for r in group_rows(outcomes)][0] == "test"  # the accuracy comes first
    test = {g: r for (s, g), r in rows.items() if s == "test"}
    assert test["prefill+ttft"][2] == 20.0 and test["decode"][4] == 15.0 and test["concurrency"][0:2] == [0, 1]
    assert test["max_throughput"][2] is None
    assert rows["calibration", "decode"][:3] == [1, 0, 50.0]  # never pooled with the test set
    assert not math.isnan(test["all"][2])
    md = render(outcomes, "markdown")
    assert "| split | group | points | skipped | mape_pct |" in md and "skipped: why" in md
    paths = write(outcomes, tmp_path)
    assert [p.name for p in paths] == ["validation.csv", "validation_groups.csv", "validation.json"]
    assert "calibration,decode,1,0,50.0" in paths[1].read_text()
    import json
    groups = json.loads(paths[2].read_text())["groups"]
    assert {(g["split"], g["group"]) for g in groups} >= {("test", "decode"), ("calibration", "decode")}


def test_a_missing_suite_says_where_it_looked(tmp_path):
    with pytest.raises(CapsimError, match="no validation suite found.*--suite DIR"):
        find_suite(tmp_path / "nowhere")
    (tmp_path / "bad.yaml").write_text("source: {split: test}\npoints: [{id: a}]\n")
    with pytest.raises(CapsimError, match=r"bad.yaml: point \[0\]: required field\(s\) missing"):
        load_points(tmp_path)


def test_every_file_says_its_split_and_the_test_set_is_the_agreed_publishers(points, tmp_path):
    test_files = {p["_file"] for p in points.values() if p["_split"] == "test"}
    held_out = ("nim-benchmarking-", "datacrunch-", "llamacpp-pr4766-", "llamacpp-pr16834-", "llamacpp-pr27341-",
                "mlperf-nvidia-", "mlperf-nebius-", "mlperf-krai-", "mooncake-", "gpustack-", "accelmark-")
    assert test_files == {f for f in {p["_file"] for p in points.values()} if f.startswith(held_out)}
    tested = [p for p in points.values() if p["_split"] == "test"]
    assert len(tested) >= len(points) / 3  # the issue: at least a third of the points
    (tmp_path / "nosplit.yaml").write_text("source: {title: t}\npoints: []\n")
    with pytest.raises(CapsimError, match=r"nosplit.yaml: field 'source.split' is None.*'test'.*'calibration'"):
        load_points(tmp_path)
    with pytest.raises(CapsimError, match="--split 'train': no such set"):
        run_suite(SUITE, split="train")


def test_cli_validate_prints_markdown():
    result = CliRunner().invoke(app, ["validate", "--suite", str(SUITE), "--only", FAST[0], "--format", "markdown",
                                      "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "MAPE per split and group" in result.output and FAST[0] in result.output
    assert "| test | decode | 1 |" in result.output and "| calibration |" not in result.output
    with pytest.raises(CapsimError, match="no point id in the chosen split contains it"):  # PR #4766 is in the test set
        run_suite(SUITE, only=[FAST[0]], split="calibration")


def test_run_point_reports_failures_instead_of_raising(points):
    broken = dict(points[FAST[0]], gpu="no-such-gpu")
    o = run_point(broken)
    assert o.status == "failed" and "unknown GPU" in o.reason


def test_a_stated_router_reaches_the_simulation(points):
    server, interactive = points["mlperf51-nvidia-dgxb200x8-server-ttft-mean"], points["mlperf51-nvidia-dgxb200x8-interactive-ttft-mean"]
    assert (workload_for(server).router, workload_for(interactive).router) == ("least_outstanding", "round_robin")
    assert workload_for(points["mlperf41-nvidia-h200x8-server-ttft-mean"]).router == "round_robin"  # none stated
    with pytest.raises(Skip, match="router 'random' not understood"):
        workload_for(dict(server, router="random"))


def test_a_run_that_completes_no_request_is_a_failure_not_a_zero(points):
    # 100,000-token prompts of Llama-3.1-8B bf16 on a 24 GB L4: the KV cache holds far fewer tokens,
    # so every request is rejected; the point must say so rather than compare a 0 with the measurement
    p = dict(points["trtllm014-h100sxm-llama31-8b-bf16-467-256-qps2-ttft"], gpu="l4", prompt_tokens=100_000, num_requests=5)
    o = run_point(p)
    assert (o.status, o.predicted, o.error_pct) == ("failed", None, None)
    assert "completed none of the point's requests: 5 rejected (5 exceeds_kv_capacity)" in o.reason


def test_vllm_v1_releases_from_0_9_on_take_the_newest_v1_profile(points):
    assert engine_for({"engine": "vllm", "engine_version": "0.20.1+transformers-5.8.1"}) == "vllm"
    assert engine_for({"engine": "vllm", "engine_version": "v0.19.1rc1.dev339+gedc364896"}) == "vllm"
    assert engine_for({"engine": "vllm", "engine_version": "0.11.0"}) == "vllm@0.11.0"  # its chat template parse
    with pytest.raises(Skip, match="vLLM 0.4.3"):
        engine_for({"engine": "vllm", "engine_version": "0.4.3"})
