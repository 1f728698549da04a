"""One simulation as one flat record: sample counts, KV fit, goodput, cost, saturation, margins."""

import pytest
from capsim.planning.tasks import Task, evaluate, latency_keys, record
from capsim.api import simulate
from capsim.results.slo import Objectives
from helpers import unit_workload, workload


def test_record_by_hand(priced_gpu_file):
    # 4 requests of 10 + 10 tokens, all at t = 0, 8 slots, 10 ms steps: they run together; the
    # prefill step emits token 1 at 10 ms and 9 decode steps follow: E2EL 100 ms, TPOT 10 ms.
    w = unit_workload(priced_gpu_file, arrivals={"kind": "all_at_once"}, requests=4)
    rec = record(simulate(w, objectives=Objectives(goodput_ms={"ttft": 10.0, "tpot": 10.0})),
                 labels={"rate_per_s": 1.0})
    assert list(rec)[0] == "rate_per_s"
    assert rec["completed"] == 4 and rec["p99_ttft_ms"] == pytest.approx(10.0) and rec["p99_e2el_ms"] == pytest.approx(100.0)
    assert rec["samples_ttft"] == 4 and rec["samples_tpot"] == 4 and rec["samples_itl"] == 4 * 9
    assert rec["low_sample_percentiles"].split(";")[0] == "median_ttft_ms"
    assert rec["mean_request_tokens"] == 20.0
    assert rec["max_seqs_at_mean_request"] == rec["kv_capacity_tokens"] // 20
    assert rec["max_seqs_at_max_model_len"] == rec["kv_capacity_tokens"] // 4096
    assert rec["good_requests"] == 4 and rec["good_share"] == 1.0
    # 40 output tokens in 0.1 s = 400 tokens/s at $2/h on one GPU: 2 / (400 x 3600) x 1e6 = $1.389 per 1M
    assert rec["output_throughput"] == pytest.approx(400.0)
    assert rec["usd_per_m_output_tokens"] == pytest.approx(2 / (400 * 3600) * 1e6)
    assert rec["gpus"] == 1 and rec["usd_per_hour"] == 2.0
    assert rec["price_usd_per_gpu_hour"] == 2.0 and rec["price_source"] == "profile"
    assert rec["cost_at_load"] == "4 requests at once" and rec["measured_over"] == "whole run"
    assert rec["drain_share"] == pytest.approx(1.0) and not rec["saturated"]


def test_goodput_counts_requests_meeting_every_threshold(priced_gpu_file):
    w = unit_workload(priced_gpu_file, arrivals={"kind": "all_at_once"}, requests=12)  # 8 slots: 4 wait
    rec = record(simulate(w, objectives=Objectives(goodput_ms={"ttft": 15.0})))
    assert rec["good_requests"] == 8 and rec["good_share"] == pytest.approx(8 / 12)


def test_no_price_means_no_cost(round_gpu_file):
    rec = evaluate(Task(workload(round_gpu_file, requests=5)))
    assert rec["usd_per_hour"] is None and rec["usd_per_m_output_tokens"] is None
    rec = evaluate(Task(workload(round_gpu_file, requests=5), price=1.0))
    assert rec["price_source"] == "user" and rec["usd_per_m_output_tokens"] > 0


def test_keep_run_returns_the_frames(round_gpu_file):
    rec, run = evaluate(Task(workload(round_gpu_file, requests=5), keep_run=True))
    assert len(run.requests) == 5 and rec["completed"] == 5


def test_latency_keys_follow_the_reported_percentiles(priced_gpu_file):
    run = simulate(unit_workload(priced_gpu_file), percentiles=(95.0, 99.9))
    assert latency_keys(run.summary)[:4] == ["mean_ttft_ms", "median_ttft_ms", "p95_ttft_ms", "p99.9_ttft_ms"]
    assert "p99_ttft_ms" not in run.summary and run.summary["percentiles"] == ["95", "99.9"]


def test_a_limit_close_to_its_statistic_is_uncertain(priced_gpu_file):
    w = unit_workload(priced_gpu_file, requests=400)
    p99 = simulate(w).summary["p99_ttft_ms"]
    near = evaluate(Task(w, objectives=Objectives({"p99_ttft_ms": p99 * 1.0001})))
    far = evaluate(Task(w, objectives=Objectives({"p99_ttft_ms": p99 * 100})))
    assert near["uncertain"] and "p99_ttft_ms" in near["uncertainty"]
    assert not far["uncertain"] and far["uncertainty"] == ""
