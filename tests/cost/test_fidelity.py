"""The cost model's fidelity mechanisms (issue 21) against hand arithmetic on the round-number GPU
(1 TB/s, 100 TFLOPS) and the tiny model (one layer, hidden 1,000, MLP 4,000, tied 1,000-token
vocabulary: 12 M body parameters + 1 M head = 26 MB of fp16 weights, 24 MFLOP per token + 2 MFLOP
per logit)."""

import pytest
from capsim.cost.roofline import CostModel
from capsim.spec import architecture as arch
from capsim.spec.catalog import load_hardware, load_model
from capsim.spec.formats import get_format
from capsim.spec.serving import load_engine

FP16 = get_format("fp16")
WEIGHT_BYTES = 26e6
FLOPS_ONE_TOKEN = 24e6 + 2e6  # body + one logit


def _gpu(round_gpu, **efficiency):
    return round_gpu.model_copy(update={"efficiency": round_gpu.efficiency.model_copy(update=efficiency)})


def _cm(model, gpu, weights=FP16, **kw):
    return CostModel(model, gpu, weights, FP16, **kw)


def test_small_m_gemms_keep_the_ramp_value_of_its_measured_range(tiny_model, round_gpu):
    ramped = _cm(tiny_model, _gpu(round_gpu, compute_half_tokens=64))
    held = _cm(tiny_model, _gpu(round_gpu, compute_half_tokens=64, compute_ramp_from_tokens=128))
    # M = 1: the bare ramp gives 1/65 of the peak, held at M = 128 it gives 128/192
    assert ramped.gemm_part(1, 1, 1)[0] == pytest.approx(FLOPS_ONE_TOKEN / (100e12 / 65))
    assert held.gemm_part(1, 1, 1)[0] == pytest.approx(FLOPS_ONE_TOKEN / (100e12 * 128 / 192))
    # at and above the held point the ramp is the same
    assert held.gemm_part(128, 1, 1)[0] == ramped.gemm_part(128, 1, 1)[0]
    assert held.gemm_part(4096, 1, 1)[0] == ramped.gemm_part(4096, 1, 1)[0]


def test_gemv_bandwidth_prices_weight_reads_and_bandwidth_the_elementwise_traffic(tiny_model, round_gpu):
    from capsim.spec.serving import load_engine

    gpu = _gpu(round_gpu, bandwidth=1.0, gemv_bandwidth=0.5)
    cm = _cm(tiny_model, gpu, engine=load_engine("vllm"))
    factor = load_engine("vllm").kernel_efficiency.bandwidth
    # 26 MB of weights at 0.5 x 1 TB/s x the engine's kernel factor
    assert cm.gemm_part(1, 1, 1)[1] == pytest.approx(WEIGHT_BYTES / (0.5 * factor * 1e12))
    seconds, byts = cm.elementwise_part(10)
    assert seconds == pytest.approx(byts / (1.0 * factor * 1e12))
    # without gemv_bandwidth weight reads take the streaming share, as before
    plain = _cm(tiny_model, _gpu(round_gpu, bandwidth=1.0), engine=load_engine("vllm"))
    assert plain.gemm_part(1, 1, 1)[1] == pytest.approx(WEIGHT_BYTES / (factor * 1e12))


def test_batch_one_q4_decode_on_an_a100_is_weight_read_bound_with_the_held_ramp():
    """The modelling error of issue 21: the bare ramp makes batch-1 GEMMs compute-bound."""
    from capsim.spec.catalog import load_hardware, load_model

    gpu, model, q4 = load_hardware("a100-80g"), load_model("llama-2-7b"), get_format("q4_0")
    bare = _gpu(gpu, compute_ramp_from_tokens=0.0)
    held = _gpu(gpu, compute_ramp_from_tokens=128.0)
    compute_s, memory_s = _cm(model, bare, q4).gemm_part(1, 1, 1)[:2]
    assert compute_s > memory_s
    compute_s, memory_s = _cm(model, held, q4).gemm_part(1, 1, 1)[:2]
    assert compute_s < memory_s / 10


def test_gemm_share_per_compute_dtype(tiny_model, round_gpu):
    from capsim.errors import CapsimError
    from capsim.spec.config import HardwareProfile, validate

    peaks = {**round_gpu.peak_flops, "fp8": 200e12}
    gpu = _gpu(round_gpu, compute=1.0, compute_by_dtype={"fp8": 0.5}).model_copy(update={"peak_flops": peaks})
    fp16 = _cm(tiny_model, gpu).gemm_part(4096, 1, 1)[0]
    fp8 = _cm(tiny_model, gpu, get_format("fp8")).gemm_part(4096, 1, 1)[0]
    # fp8 at 0.5 x 200 TFLOPS runs at the same 100 TFLOPS as fp16 at 1.0 x 100
    assert fp16 == pytest.approx((24e6 * 4096 + 2e6) / 100e12)
    assert fp8 == pytest.approx(fp16)
    data = round_gpu.model_dump()
    data["efficiency"]["compute_by_dtype"] = {"fp8": 1.5}
    with pytest.raises(CapsimError, match="compute_by_dtype"):
        validate(HardwareProfile, data, "gpu.yaml")


def test_tensorrt_llm_profiles_run_their_gemms_at_their_calibrated_shares():
    """trt-llm (0.15-1.0) runs GEMMs at 0.93 of the GPU's share and trt-llm@0.13 (0.11-0.14) at 0.77
    (calibration set: trtllm-bench's tables and the MLPerf partners' Offline runs); the two differ in
    nothing else: a compute-bound GEMM takes 0.93 / 0.77 as long in the 2024 builds, a weight-read-bound
    one and attention take the same time."""
    model, gpu = load_model("llama-3.1-70b"), load_hardware("h200")
    fp8 = get_format("fp8_e4m3")
    now, then = (CostModel(model, gpu, fp8, get_format("fp8_e4m3", for_kv=True), engine=load_engine(e))
                 for e in ("trt-llm", "trt-llm@0.13"))
    assert now.eta_fl == pytest.approx(0.93 * 0.745) and then.eta_fl == pytest.approx(0.77 * 0.745)  # H200 fp8 share
    big_c, big_m, _, _ = then.gemm_part(4096, 4096, 4096)
    assert big_c == pytest.approx(now.gemm_part(4096, 4096, 4096)[0] * 0.93 / 0.77) and big_c > big_m  # compute-bound
    assert then.gemm_part(1, 1, 1)[1] == now.gemm_part(1, 1, 1)[1]  # weight reads: unchanged
    # by hand: 4,096 tokens x (2 x 68.45e9 body parameters + 2 x 128,256 x 8,192 head) / (0.77 x 0.745 x 1,979 TF x 4096 / 4160)
    body = 2 * arch.param_counts(model).body_active
    assert big_c == pytest.approx((4096 * body + 4096 * 2 * 128256 * 8192) / (0.77 * 0.745 * 1979e12 * 4096 / 4160), rel=1e-9)
    assert then.attention_part(10**6, 0, 10**6, 0, 4096) == now.attention_part(10**6, 0, 10**6, 0, 4096)


def test_attention_without_gqa_reuse_reads_each_kv_head_once_per_query_head(round_gpu):
    from capsim.spec.config import ModelSpec
    from capsim.spec.serving import load_engine
    from helpers import TINY_MODEL

    gqa = ModelSpec.model_validate({**TINY_MODEL, "num_kv_heads": 2})  # 5 query heads per KV head
    full = load_engine("vllm")
    per_head = full.model_copy(update={"attention_kv_reuse": "per_query_head"})
    # K and V of 2 heads x 100 dims x 2 bytes = 800 bytes per position; 1,000 positions read, 1 written
    _, memory_s, _, byts = _cm(gqa, round_gpu, engine=full).attention_part(1000.0, 0.0, 1000.0, 0.0, 1, 1)
    assert byts == pytest.approx(800 * 1000 + 800)
    _, memory_s, _, byts = _cm(gqa, round_gpu, engine=per_head).attention_part(1000.0, 0.0, 1000.0, 0.0, 1, 1)
    assert byts == pytest.approx(800 * 1000 * 5 + 800)
    assert memory_s == pytest.approx(byts / 1e12)
    # the decode-step coefficients read the same bytes per position
    cm = _cm(gqa, round_gpu, engine=per_head)
    assert cm.decode_coefficients(1)[3] == pytest.approx(800 * 5 / 1e12)


def test_front_end_time_is_per_request_and_shown_by_explain(tiny_model, round_gpu):
    from capsim.report.explain import decode_step, render
    from capsim.spec.serving import load_engine

    vllm = load_engine("vllm")
    engine = vllm.model_copy(update={"overhead": vllm.overhead.model_copy(update={"request_s": 4e-3,
                                                                                    "prompt_token_s": 2e-6})})
    cm = _cm(tiny_model, round_gpu, engine=engine)
    assert cm.front_end() == (4e-3, 2e-6)
    # never part of a step: the same step time with and without it
    plain = _cm(tiny_model, round_gpu, engine=vllm)
    assert cm.decode_seconds(1, 100.0, 0.0) == plain.decode_seconds(1, 100.0, 0.0)
    text = render([decode_step(cm, 1, 100)], cm, 1000.0)
    # 4 ms + 1,000 x 2 us = 6 ms
    assert "front end (HTTP, tokenising, hand-off, detokenising) 6.000 ms" in text
    assert _cm(tiny_model, round_gpu, engine=engine, mode="document").front_end() == (0.0, 0.0)


def test_moe_layers_add_the_engines_extra_kernels(round_gpu):
    from capsim.spec.config import ModelSpec
    from capsim.spec.serving import load_engine
    from helpers import TINY_MODEL

    moe = ModelSpec.model_validate({**TINY_MODEL, "num_layers": 2, "mlp": "gated", "moe": {
        "num_experts": 4, "experts_per_token": 2, "expert_intermediate_size": 1000, "dense_layers": 1}})
    gpu = round_gpu.model_copy(update={"overhead": round_gpu.overhead.model_copy(update={"kernel_s": 1e-6})})
    base = load_engine("vllm").model_copy(update={"kernels_per_layer": 10.0, "overhead": load_engine("vllm").overhead
                                                  .model_copy(update={"step_s": 0.0, "seq_s": 0.0})})
    extra = base.model_copy(update={"extra_kernels_moe": 20.0})
    # 2 layers x 10 kernels x 1 us, plus 1 MoE layer x 20 kernels x 1 us (a CUDA-graph decode step)
    assert CostModel(moe, gpu, FP16, FP16, engine=base).fixed_seconds(1, 1, True)[0] == pytest.approx(20e-6)
    assert CostModel(moe, gpu, FP16, FP16, engine=extra).fixed_seconds(1, 1, True)[0] == pytest.approx(40e-6)


@pytest.mark.parametrize("engine, model, weights, context, measured_tokens_per_s", [
    # llama.cpp PR #15131: RTX 4090, Llama-3-8B BF16, one-token steps (pp512 at micro-batch 1)
    ("llama.cpp", "llama-3.1-8b", "bf16", 256, 65.21),
    # llama.cpp discussion #17621: RTX 4090, Qwen3-30B-A3B Q4_K_M tg128, December 2025 defaults / fusion off
    ("llama.cpp", "qwen3-30b-a3b", "q4_k_m", 64, 271.04),
    ("llama.cpp@2025-08", "qwen3-30b-a3b", "q4_k_m", 64, 198.39),
])
def test_llama_cpp_2025_eras_reproduce_the_measurements_they_come_from(engine, model, weights, context,
                                                                        measured_tokens_per_s):
    from capsim.spec.catalog import load_hardware, load_model
    from capsim.spec.serving import load_engine

    cm = CostModel(load_model(model), load_hardware("rtx4090"), get_format(weights), FP16, engine=load_engine(engine))
    assert 1.0 / cm.decode_seconds(1, float(context), 0.0) == pytest.approx(measured_tokens_per_s, rel=0.03)
