"""The verdict after every run: SLOs met or missed, cost, the binding limit and next steps."""

import json

import pytest
from capsim.report.console import verdict_block
from capsim.api import simulate
from capsim.results.slo import Objectives
from helpers import unit_workload, write_workload

BIG = {"name": "big", "model": "llama-3.1-70b", "weights": "bf16", "gpu": "h100-sxm", "tp": 2, "engine": "vllm",
       "arrivals": {"kind": "closed_loop", "users": 200, "think_time_s": 5},
       "prompt_tokens": {"dist": "fixed", "value": 2000},
       "output_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.8}, "requests": 600,
       "slo": {"limits": {"ttft_p99_ms": 2000}}}


def test_70b_in_bf16_on_two_h100s_is_kv_bound_and_says_what_to_try():
    from capsim.spec.config import validate
    from capsim.workload.schema import WorkloadConfig

    run = simulate(validate(WorkloadConfig, BIG, "big"))
    v = run.summary["verdict"]
    assert v["slo_met"] is False and v["binding"] == "kv_capacity"
    assert "the KV cache holds 5 sequences" in v["evidence"] and "preemptions" in v["evidence"]
    kv_step = next(step for step in v["next_steps"] if step.startswith("the KV cache holds 5 sequences"))
    fits = dict(item.split(" holds ") for item in kv_step.split(": ", 1)[1].split(", "))
    assert int(fits["fp8 KV"]) == 10 and int(fits["TP 4"].replace(",", "")) > 100  # halves per GPU: weights and KV
    assert "$6.98/hour for 2 GPU(s)" in v["cost"] and "200 closed-loop users" in v["cost"]
    text = verdict_block(v)
    assert "SLO: MISSED" in text and "MISS TTFT p99" in text and "Binding limit: KV-cache capacity" in text


def test_a_light_load_has_no_binding_limit_and_points_at_capacity(priced_gpu_file):
    run = simulate(unit_workload(priced_gpu_file, requests=400), objectives=Objectives({"p99_ttft_ms": 500.0}))
    v = run.summary["verdict"]
    assert v["slo_met"] is True and v["binding"] == "none" and "had room" in v["evidence"]
    assert any("capsim capacity" in step and "ttft_p99_ms=500" in step for step in v["next_steps"])
    assert [c["kind"] for c in v["checks"]] == ["limit"] and v["checks"][0]["text"].endswith(" ms <= 500.0 ms")


def test_an_overloaded_run_is_saturated_and_never_meets_its_slo(priced_gpu_file):
    w = unit_workload(priced_gpu_file, requests=1000, arrivals={"kind": "poisson", "rate_per_s": 160.0})
    v = simulate(w, objectives=Objectives({"p99_ttft_ms": 1e9})).summary["verdict"]
    assert v["slo_met"] is False and v["checks"][0]["kind"] == "saturation"
    assert v["next_steps"][0].startswith("saturated at 160 req/s offered (poisson)")


def test_no_objectives_no_slo_verdict_but_still_cost_and_limit(priced_gpu_file):
    v = simulate(unit_workload(priced_gpu_file)).summary["verdict"]
    assert v["slo_met"] is None and v["checks"] == [] and v["cost"].startswith("$2.00/hour for 1 GPU(s)")


def test_summary_json_carries_provenance(priced_gpu_file, tmp_path):
    run = simulate(unit_workload(priced_gpu_file), objectives=Objectives({"p99_ttft_ms": 500.0}))
    saved = json.loads(run.summary_json(provenance=True))
    p = saved["provenance"]
    assert p["capsim_version"] and p["date_utc"].endswith("+00:00") and len(p["workload"]["sha256"]) == 64
    assert p["workload"]["content"]["arrivals"]["rate_per_s"] == 20.0 and p["hardware_profile"] == "round-gpu"
    assert p["slo"]["limits_ms"] == {"p99_ttft_ms": 500.0} and p["load"] == "20 req/s offered (poisson)"
    assert p["price_per_gpu_hour_usd"] == 2.0 and p["saturated"] is False
    assert "provenance" not in json.loads(run.summary_json())  # the figures alone are the same on every rerun
    again = simulate(unit_workload(priced_gpu_file), objectives=Objectives({"p99_ttft_ms": 500.0}))
    assert again.summary_json() == run.summary_json() and again.provenance["workload"] == p["workload"]


@pytest.mark.parametrize("args, fragment", [
    (["--percentiles", "50,95,99.9"], "P99.9 TTFT (ms):"),
    (["--slo", "ttft_p95_ms=1"], "MISS TTFT p95"),
])
def test_run_prints_chosen_percentiles_and_the_verdict(run_cli, tmp_path, priced_gpu_file, args, fragment):
    wfile = write_workload(tmp_path / "w.yaml", unit_workload(priced_gpu_file))
    code, out, err = run_cli("run", wfile, *args)
    assert code == 0, err
    assert fragment in out and "capsim: verdict" in out and "Cost: $2.00/hour for 1 GPU(s)" in out
