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


def test_a_weight_format_factor_for_this_gpu_wins_and_leaves_the_activation_traffic_alone():
    factors = {"int4_g128": 0.9, "int4_g128@round-gpu": 0.5, "int4_g128@other-gpu": 0.7}
    engine = ENGINE.model_copy(update={"kernel_efficiency": ENGINE.kernel_efficiency.model_copy(
        update={"weight_formats": factors})})
    r = realistic_rates(GPU, engine, get_format("int4_g128"))
    assert r.eta_weights_bw == pytest.approx(0.8 * 0.5)  # FORMAT@GPU first
    assert r.eta_stream_bw == 1.0  # elementwise traffic is 16-bit whatever the weights: 0.8 x 1.3, capped
    other = realistic_rates(GPU.model_copy(update={"name": "third-gpu"}), engine, get_format("int4_g128"))
    assert other.eta_weights_bw == pytest.approx(0.8 * 0.9)  # then FORMAT
    assert realistic_rates(GPU, engine, get_format("fp16")).eta_weights_bw == 1.0  # then the engine's bandwidth


def test_weight_format_keys_name_a_known_format():
    bad = dict(ENGINE.model_dump(), kernel_efficiency={"weight_formats": {"fp9@h100-sxm": 0.5}})
    with pytest.raises(ValueError, match="weight_formats key 'fp9@h100-sxm': expected FORMAT or FORMAT@GPU"):
        EngineProfile.model_validate(bad)


def test_a_compute_dtype_factor_for_this_gpu_wins_over_the_dtype_and_the_engines_compute():
    factors = {"fp8": 0.9, "fp8@round-gpu": 0.6, "fp8@other-gpu": 0.7}
    engine = ENGINE.model_copy(update={"kernel_efficiency": ENGINE.kernel_efficiency.model_copy(
        update={"compute_dtypes": factors})})
    gpu = GPU.model_copy(update={"peak_flops": {**GPU.peak_flops, "fp8": 200e12}})
    assert realistic_rates(gpu, engine, get_format("fp8_e4m3")).eta_gemm == pytest.approx(0.5 * 0.6)  # DTYPE@GPU
    third = gpu.model_copy(update={"name": "third-gpu"})
    assert realistic_rates(third, engine, get_format("fp8_e4m3")).eta_gemm == pytest.approx(0.5 * 0.9)  # then DTYPE
    assert realistic_rates(gpu, engine, get_format("fp16")).eta_gemm == pytest.approx(0.5 * 0.8)  # then compute


def test_compute_dtype_keys_name_a_known_dtype():
    bad = dict(ENGINE.model_dump(), kernel_efficiency={"compute_dtypes": {"fp9@h100-sxm": 0.5}})
    with pytest.raises(ValueError, match="compute_dtypes key 'fp9@h100-sxm': expected DTYPE or DTYPE@GPU"):
        EngineProfile.model_validate(bad)


def test_vllm_fp8_gemms_on_hopper_take_its_measured_share():
    # aiconfigurator's vLLM FP8 GEMM fits (engines.yaml): medians 0.57 (H100 SXM) and 0.645 (H200) of the fp8 peak
    from capsim.spec.catalog import load_hardware
    from capsim.spec.serving import load_engine

    vllm = load_engine("vllm")
    for gpu, measured in (("h100-sxm", 0.57), ("h200", 0.645)):
        r = realistic_rates(load_hardware(gpu), vllm, get_format("fp8_e4m3"))
        assert r.eta_gemm == pytest.approx(measured, abs=0.005)
    assert realistic_rates(load_hardware("h100-sxm"), vllm, get_format("bf16")).eta_gemm == pytest.approx(0.72)


def test_sglang_block_fp8_decode_gemms_take_the_measured_share_of_bf16s_time_on_h100():
    # Hand calculation: a weight-read-bound GEMM takes bytes / (GEMV share x engine factor x bandwidth).
    # Block FP8 moves 8 + 32/16384 bits per weight against bf16's 16, at the factor 0.72 against 0.88, so
    # 0.5001 x 0.88 / 0.72 = 0.611 of the bf16 time; aiconfigurator's SGLang tables: median 0.615 (M = 1-16)
    from capsim.spec.catalog import load_hardware
    from capsim.spec.serving import load_engine
    gpu, sglang = load_hardware("h100-sxm"), load_engine("sglang@0.4")
    blk, bf16 = get_format("fp8_block"), get_format("bf16")
    ratio = (blk.bytes_per_value / realistic_rates(gpu, sglang, blk).eta_weights_bw) / (
        bf16.bytes_per_value / realistic_rates(gpu, sglang, bf16).eta_weights_bw)
    assert ratio == pytest.approx(0.5001 * 0.88 / 0.72, rel=1e-3) and ratio == pytest.approx(0.615, abs=0.01)
    a100 = load_hardware("a100-80g")  # not measured: FP8 weights stream at the bf16 factor there
    assert realistic_rates(a100, sglang, blk).eta_weights_bw == realistic_rates(a100, sglang, bf16).eta_weights_bw


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
