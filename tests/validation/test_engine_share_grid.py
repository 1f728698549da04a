"""scripts/engine_share_grid.py, which chose the TensorRT-LLM profiles' GEMM shares on the calibration set."""

from __future__ import annotations

import pytest
from capsim.spec.serving import load_engine
from helpers import script_module


def test_it_scores_calibration_points_only_and_leaves_mlperf_server_runs_out():
    grid = script_module("engine_share_grid")
    ids = grid.calibration_ids("trt-llm", ["max_throughput", "ttft", "concurrency"], with_server=False)
    assert ids and all(not i.startswith(("mlperf51-nebius", "mlperf51-nvidia", "mlperf41-nvidia", "nim")) for i in ids)
    assert any(i.startswith("mlperf51-") for i in ids) and any(i.startswith("trtllm017-") for i in ids)
    assert not any("-server-" in i or "-interactive-" in i for i in ids)
    assert grid.family("mlperf51-dell-xe9680lb200x8-offline-tokens") == "mlperf51-b200"
    assert grid.family("trtllm017-h100sxm-llama31-8b-fp8-128-128") == "trtllm017"


def test_a_lower_share_slows_a_compute_bound_point_and_the_profile_is_restored():
    grid = script_module("engine_share_grid")
    point = ["trtllm017-h100sxm-llama31-70b-fp8-tp2-1000-1000"]
    before = load_engine("trt-llm").kernel_efficiency.compute
    (low, err_low, fam_low), (high, err_high, fam_high) = grid.scan("trt-llm", [0.5, 1.0], point)
    assert (low, high) == (0.5, 1.0) and fam_low["trtllm017"][2] == fam_high["trtllm017"][2] == 1
    assert fam_low["trtllm017"][1] < fam_high["trtllm017"][1]  # fewer tokens/s at half the GEMM share
    assert load_engine("trt-llm").kernel_efficiency.compute == before


@pytest.mark.parametrize("argv, message", [(["nope", "--values", "0.9"], "unknown engine 'nope'"),
                                           (["trt-llm", "--values", "1.5"], "at most 1"),
                                           (["trt-llm", "--values", "x"], "give GEMM shares as numbers")])
def test_bad_arguments_say_what_is_allowed(argv, message, capsys):
    grid = script_module("engine_share_grid")
    assert grid.main(argv) == 2 and message in capsys.readouterr().err
