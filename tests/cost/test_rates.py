"""Realistic-mode rates (capsim.cost.rates): the GPU's efficiencies times the engine's kernel
classes (capped at the datasheet), fixed times that add up, CUDA-graph replay and the all-reduce
of tensor parallelism, on round numbers."""

import pytest
from capsim.cost.rates import SCORE_BYTES_PER_PAIR, realistic_rates
from capsim.spec.config import HardwareProfile
from capsim.spec.formats import get_format
from capsim.spec.serving import EngineProfile
from helpers import ROUND_GPU

GPU = HardwareProfile.model_validate(dict(
    ROUND_GPU,
    efficiency={"bandwidth": 0.8, "compute": 0.5, "attention_bandwidth": 0.6},
    overhead={"step_s": 1e-3, "layer_s": 10e-6, "kernel_s": 2e-6, "launch_gap_s": 3e-6, "attention_seq_s": 1e-6},
    interconnect={"pcie_bytes_per_s": 10e9, "gpu_link_bytes_per_s": 100e9, "link_efficiency": 0.5,
                  "allreduce_latency_s": 20e-6},
))

ENGINE = EngineProfile.model_validate({
    "name": "round-engine", "version": "1", "sources": {"all": "round numbers for tests"},
    "scheduler": {"kind": "chunked", "max_num_seqs": 8, "block_size": 16}, "gpu_memory_utilization": 0.9,
    "kernels_per_layer": 10, "extra_kernels_quantized": 4, "cuda_graph_max_batch": 64,
    "overhead": {"step_s": 2e-3, "seq_s": 5e-6, "steps_per_schedule": 4},
    "kernel_efficiency": {"bandwidth": 1.3, "attention_bandwidth": 0.5, "compute": 0.8,
                          "weight_formats": {"int4_g128": 0.9}},
    "allreduce_latency_s": 5e-6,
})


def test_without_an_engine_the_rates_are_the_gpus_own():
    r = realistic_rates(GPU, None, get_format("fp16"))
    assert (r.eta_weights_bw, r.eta_attn_bw, r.eta_gemm, r.eta_attn_fl) == (0.8, 0.6, 0.5, 0.5)
    assert r.gemm_peak_flops == r.attn_peak_flops == 100e12 and r.vector_flops == 10e12
    assert (r.step_s, r.seq_s, r.steps_per_schedule) == (1e-3, 0.0, 1)
    assert r.layer_graph_s == r.layer_eager_s == 10e-6  # no engine, no kernels counted
    assert r.graphs and r.graph_max_tokens is None and r.score_bytes_per_pair == 0.0
    assert r.allreduce_latency_s == 20e-6 and r.link_bytes_per_s == 0.5 * 100e9
    assert r.sources["engine"].startswith("none")


def test_an_engine_scales_the_gpus_efficiencies_and_adds_its_fixed_times():
    r = realistic_rates(GPU, ENGINE, get_format("fp16"))
    assert r.eta_weights_bw == 1.0  # 0.8 x 1.3 = 1.04: capped at the datasheet
    assert r.eta_attn_bw == pytest.approx(0.6 * 0.5) and r.eta_gemm == pytest.approx(0.5 * 0.8)
    assert r.step_s == pytest.approx(1e-3 + 2e-3) and r.seq_s == 5e-6 and r.steps_per_schedule == 4
    assert r.layer_graph_s == pytest.approx(10e-6 + 10 * 2e-6)
    assert r.layer_eager_s == pytest.approx(10e-6 + 10 * 2e-6 + 10 * 3e-6)
    assert r.allreduce_latency_s == 5e-6  # the engine's own all-reduce kernel
    assert r.sources["engine.all"] == "round numbers for tests"


def test_weight_only_formats_use_their_bandwidth_class_and_launch_more_kernels():
    r = realistic_rates(GPU, ENGINE, get_format("int4_g128"))
    assert r.eta_weights_bw == pytest.approx(0.8 * 0.9)
    assert r.layer_graph_s == pytest.approx(10e-6 + (10 + 4) * 2e-6)


def test_without_flash_attention_scores_are_materialised():
    eager = ENGINE.model_copy(update={"flash_attention": False, "cuda_graphs": False})
    r = realistic_rates(GPU, eager, get_format("fp16"))
    assert r.score_bytes_per_pair == SCORE_BYTES_PER_PAIR and not r.uses_graph(1, True)


def test_graphs_replay_decode_only_steps_up_to_the_captured_batch():
    r = realistic_rates(GPU, ENGINE, get_format("fp16"))
    assert r.uses_graph(64, decode_only=True) and not r.uses_graph(65, decode_only=True)
    assert not r.uses_graph(8, decode_only=False)


def test_two_ring_allreduces_per_layer_under_tensor_parallelism():
    r = realistic_rates(GPU, ENGINE, get_format("fp16"), tp=4)
    # 100 tokens x hidden 1000 x 2 bytes = 200 kB; a ring moves 2 x 3/4 of it over 50 GB/s: 6 us.
    one = 5e-6 + 2 * 0.75 * 200_000 / 50e9
    assert r.allreduce_s(100, 1000, num_layers=3) == pytest.approx(2 * 3 * one)
    assert realistic_rates(GPU, ENGINE, get_format("fp16")).allreduce_s(100, 1000, 3) == 0.0


def test_h100_sxm_allreduce_matches_the_measured_trtllm_allreduce_at_serving_sizes():
    """The shipped H100 SXM profile prices a TP-4 all-reduce of 1,024 tokens of a 8,192-wide
    model (16 MiB) as 5 us + 2 x 3/4 x 16,777,216 B / (0.52 x 450 GB/s) = 112.5 us; TensorRT-LLM's
    all-reduce measured 113.0 us for that payload on H100 SXM (aiconfigurator h100_sxm trtllm
    1.2.0rc1 custom_allreduce_perf, 4 GPUs, 8,388,608 fp16 values); at TP 2, 76.7 us against 79.7 measured."""
    from capsim.spec.catalog import load_hardware
    from capsim.spec.serving import load_engine
    gpu, trt = load_hardware("h100-sxm"), load_engine("trt-llm")
    tp4 = realistic_rates(gpu, trt, get_format("fp16"), tp=4).allreduce_s(1024, 8192, num_layers=1) / 2
    assert tp4 == pytest.approx(5e-6 + 1.5 * 16_777_216 / (0.52 * 450e9))
    assert tp4 == pytest.approx(113.0e-6, rel=0.02)
    tp2 = realistic_rates(gpu, trt, get_format("fp16"), tp=2).allreduce_s(1024, 8192, num_layers=1) / 2
    assert tp2 == pytest.approx(5e-6 + 16_777_216 / (0.52 * 450e9))
    assert tp2 == pytest.approx(79.7e-6, rel=0.05)
