"""The roofline cost model against hand arithmetic on the round-number GPU (1 TB/s, 100 TFLOPS)."""

import numpy as np
import pytest
from capsim.spec.config import ModelSpec
from capsim.cost.roofline import CostModel, DocumentAssumptions
from capsim.spec.formats import get_format
from capsim.core.plan import StepPlan
from helpers import TINY_MODEL, decoding, make_request

FP16 = get_format("fp16")


def _cm(model, gpu, mode="realistic", kv="fp16", **kw):
    return CostModel(model, gpu, FP16, get_format(kv), mode=mode, **kw)


def _plan(*pairs):
    return StepPlan(scheduled=[r for r, _ in pairs], new_tokens=[n for _, n in pairs])


def test_decode_step_is_weights_plus_kv_bytes(tiny_model, round_gpu):
    # Weights read: (4e6 attention + 8e6 MLP + 1e6 tied LM head) x 2 bytes = 26e6 B -> 26 us.
    # KV per token: 2 x 10 heads x 100 dims x 2 bytes = 4000 B. Context 999 -> 1000 read + 1 written.
    cost = _cm(tiny_model, round_gpu).step_cost(_plan((decoding(999, 5), 1)))  # 999 cached
    assert cost.seconds == pytest.approx(26e-6 + 1001 * 4000 / 1e12, rel=1e-12)
    assert cost.bound == "memory"
    assert cost.bytes == pytest.approx(26e6 + 1001 * 4000)


def test_prefill_is_compute_bound(tiny_model, round_gpu):
    # 1000 tokens: 2 x 12e6 x 1000 + 2 x 1e6 (one logit) FLOPs = 24.002e9 -> 240.02 us, with 26 us of
    # weight reads: the GEMMs take the 4-norm of the two (decode_runs.GEMM_OVERLAP_NORM), 240.028 us;
    # attention: 4000 FLOPs per pair x 500,500 pairs -> 20.02 us (vs 8 us of KV bytes).
    cost = _cm(tiny_model, round_gpu).step_cost(_plan((make_request(1000, 5), 1000)))
    gemm_s = ((240.02e-6) ** 4 + (26e-6) ** 4) ** 0.25
    assert gemm_s == pytest.approx(240.028e-6, abs=0.001e-6)
    assert cost.seconds == pytest.approx(gemm_s + 20.02e-6, rel=1e-12)
    assert _cm(tiny_model, round_gpu, mode="document").gemm_seconds(240.02e-6, 26e-6) == 240.02e-6  # the note's max
    assert cost.bound == "compute"
    assert cost.flops == pytest.approx(24.002e9 + 2.002e9)


def test_decode_seconds_agree_with_step_cost_and_grow_with_context(tiny_model, round_gpu):
    cm = _cm(tiny_model, round_gpu)
    reqs = [decoding(500, 50), decoding(2000, 50)]
    attended = sum(r.computed_tokens + 1 for r in reqs)
    one = cm.step_cost(_plan(*[(r, 1) for r in reqs]))
    assert cm.decode_seconds(2, attended, 0) == pytest.approx(one.seconds, rel=1e-12)
    # each later step reads one more token per sequence: 2 x 4000 B = 8 ns more
    later = cm.decode_seconds(2, np.array([attended + 2.0, attended + 4.0]), np.zeros(2))
    assert later - one.seconds == pytest.approx([8e-9, 16e-9], rel=1e-6)
    detail = cm.decode_detail(np.array([2]), np.array([float(attended)]), np.zeros(1))
    assert detail.bytes[0] == pytest.approx(one.bytes) and detail.flops[0] == pytest.approx(one.flops)


def test_scalar_and_vector_decode_times_are_bit_identical(tiny_model, round_gpu):
    cm = _cm(tiny_model, round_gpu, kv="q8_0")
    rng = np.random.default_rng(0)
    full = rng.integers(1, 10**7, size=200).astype(np.float64)
    sliding = rng.integers(0, 10**5, size=200).astype(np.float64)
    vector = cm.decode_seconds(7, full, sliding)
    assert all(cm.decode_seconds(7, int(f), int(s)) == v for f, s, v in zip(full, sliding, vector))


def test_document_mode_reproduces_the_note():
    from capsim.spec.catalog import load_hardware, load_model

    doc = DocumentAssumptions(weight_bytes=17e9, flops_per_token=54e9, peak_flops=165e12, bandwidth_bytes_per_s=1008e9)
    cm = CostModel(load_model("qwen3.5-27b"), load_hardware("rtx4090"), get_format("q4_k_m"), FP16,
                   mode="document", document=doc)
    times = {b: max(cm.gemm_part(b, b, b)[:2]) for b in (1, 26, 32, 64)}
    assert times[1] == pytest.approx(17e9 / 1008e9)
    assert times[32] == pytest.approx(32 * 54e9 / (0.5 * 165e12))
    assert round(times[32] * 1e3, 3) == 20.945
    assert cm.decode_seconds(2, 202, 0) == pytest.approx(17e9 / 1008e9)  # no KV traffic in document mode


def test_unit_mode_is_one_unit_per_step(tiny_model, round_gpu):
    cm = _cm(tiny_model, round_gpu, mode="unit", unit_step_s=1.0)
    assert cm.step_cost(_plan((make_request(100, 5), 100))).seconds == 1.0
    assert list(cm.decode_seconds(2, np.array([5.0, 6.0, 7.0]), np.zeros(3))) == [1.0, 1.0, 1.0]


def test_quantised_kv_reads_fewer_bytes_and_adds_dequant_work(tiny_model, round_gpu):
    req = decoding(10_000, 5)
    fp16 = _cm(tiny_model, round_gpu).step_cost(_plan((req, 1)))
    q4 = _cm(tiny_model, round_gpu, kv="q4_0").step_cost(_plan((req, 1)))
    kv16, kvq4 = fp16.bytes - 26e6, q4.bytes - 26e6
    assert kvq4 == pytest.approx(kv16 * (18 / 32) / 2)  # 18 bytes per 32 values vs 2 bytes each
    assert q4.flops > fp16.flops  # dequantisation


def test_sliding_window_caps_attended_context(round_gpu):
    spec = dict(TINY_MODEL, num_layers=2, layers={"full": 1, "sliding": 1}, sliding_window_tokens=100)
    model = ModelSpec.model_validate(spec)
    cm = _cm(model, round_gpu)
    short, long = cm.step_cost(_plan((decoding(50, 5), 1))), cm.step_cost(_plan((decoding(5000, 5), 1)))
    # full layer reads every token; the sliding layer at most 100
    per_layer_token = 2000 * 2
    weights = long.bytes - (5001 * per_layer_token + 100 * per_layer_token)
    assert weights == pytest.approx(short.bytes - (51 + 51) * per_layer_token)


def test_moe_reads_only_the_experts_touched(round_gpu):
    spec = dict(TINY_MODEL, mlp="gated", moe={"num_experts": 8, "experts_per_token": 2, "expert_intermediate_size": 1000})
    cm = _cm(ModelSpec.model_validate(spec), round_gpu)
    assert cm.experts_touched(1) == pytest.approx(2.0)
    assert cm.experts_touched(1000) == pytest.approx(8.0)
    one, many = cm.gemm_part(1, 1, 1)[3], cm.gemm_part(64, 64, 64)[3]
    assert many > one  # more tokens touch more experts


def test_efficiency_and_overheads_from_the_profile(tiny_model, round_gpu):
    gpu = round_gpu.model_copy(update={"efficiency": round_gpu.efficiency.model_copy(update={"bandwidth": 0.5}),
                                       "overhead": round_gpu.overhead.model_copy(update={"step_s": 1e-3, "layer_s": 1e-4})})
    base = _cm(tiny_model, round_gpu).step_cost(_plan((decoding(10, 5), 1)))
    slow = CostModel(tiny_model, gpu, FP16, FP16).step_cost(_plan((decoding(10, 5), 1)))
    assert slow.overhead_s == pytest.approx(1e-3 + 1e-4)
    # attention reads fall back to the same bandwidth efficiency, so the whole memory time doubles
    assert slow.seconds == pytest.approx(base.seconds / 0.5 + 1.1e-3, rel=1e-9)


def _linked(gpu, **link):
    ic = gpu.interconnect.model_copy(update={"gpu_link_bytes_per_s": 100e9, "link_efficiency": 1.0,
                                             "allreduce_latency_s": 10e-6, **link})
    return gpu.model_copy(update={"interconnect": ic})


def test_tensor_parallelism_splits_the_work_and_adds_two_allreduces_per_layer(tiny_model, round_gpu):
    gpu = _linked(round_gpu)
    one, two = _cm(tiny_model, gpu), _cm(tiny_model, gpu, tp=2)
    assert two.gemm_part(1, 1, 1)[3] == pytest.approx(one.gemm_part(1, 1, 1)[3] / 2)  # 13e6 B of 26e6
    assert two.kv_full_bytes == one.kv_full_bytes / 2  # 5 of 10 KV heads per rank
    assert two.gemm_part(1000, 1, 1)[2] == pytest.approx(one.gemm_part(1000, 1, 1)[2] / 2)
    # 1 layer, 1 token: 2 x (10 us + 2(2-1)/2 x 1,000 hidden x 2 bytes / 100 GB/s)
    assert two.fixed_seconds(1, 1, decode_only=True)[1] == pytest.approx(2 * (10e-6 + 2000 / 100e9))
    assert one.fixed_seconds(1, 1, decode_only=True)[1] == 0.0
    step = two.step_cost(_plan((decoding(999, 5), 1)))
    assert step.seconds == pytest.approx(13e-6 + 1001 * 2000 / 1e12 + 2 * (10e-6 + 2000 / 100e9), rel=1e-9)
    pcie = _cm(tiny_model, _linked(round_gpu, gpu_link_bytes_per_s=None), tp=2)
    # no GPU link: the all-reduce goes over PCIe (10 GB/s on the round GPU)
    assert pcie.fixed_seconds(1000, 1, decode_only=False)[1] == pytest.approx(2 * (10e-6 + 1000 * 2000 / 10e9))


def test_gemm_efficiency_ramps_with_the_token_count(tiny_model, round_gpu):
    gpu = round_gpu.model_copy(update={"efficiency": round_gpu.efficiency.model_copy(update={"compute_half_tokens": 64})})
    cm = _cm(tiny_model, gpu)
    flat = _cm(tiny_model, round_gpu)
    # at M = 64 the GEMMs run at half their large-M efficiency, at M = 6,400 at 99%
    assert cm.gemm_part(64, 1, 1)[0] == pytest.approx(2 * flat.gemm_part(64, 1, 1)[0])
    assert cm.gemm_part(6400, 1, 1)[0] == pytest.approx(flat.gemm_part(6400, 1, 1)[0] * 6464 / 6400)


def _half_keys(gpu, keys):
    return gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(update={"attention_half_keys": keys})})


def test_prefill_attention_ramps_with_the_keys_each_new_token_attends(tiny_model, round_gpu):
    # 4000 attention FLOPs per pair at 100 TFLOPS; a row worth 500 keys costs 500 x 4000 / 100e12 = 20 ns.
    cm, flat = _cm(tiny_model, _half_keys(round_gpu, 500)), _cm(tiny_model, round_gpu)
    assert cm.attention_token_s == pytest.approx(20e-9)
    # 1000 fresh prompt tokens attend 500.5 keys each on average: 20.02 us of pairs + 1000 rows x
    # 20 ns (about half the long-context rate); the flat profile prices the pairs alone.
    assert cm.attention_part(1000.0, 0.0, 500_500.0, 0.0, 1000, 1, 1000)[0] == pytest.approx(40.02e-6, rel=1e-12)
    assert flat.attention_part(1000.0, 0.0, 500_500.0, 0.0, 1000, 1, 1000)[0] == pytest.approx(20.02e-6, rel=1e-12)
    # a 1000-token chunk after 99,000 cached attends ~99,500 keys each: the rows add 0.5%
    pairs = 1000 * 99_000 + 500_500.0
    assert cm.attention_part(100_000.0, 0.0, pairs, 0.0, 1000, 1, 1000)[0] == pytest.approx(3980.02e-6 + 20e-6)
    # a whole step: its prompt tokens' rows join the attention compute side
    step = cm.step_cost(_plan((make_request(1000, 5), 1000)))
    assert step.seconds == pytest.approx(flat.step_cost(_plan((make_request(1000, 5), 1000))).seconds + 20e-6, rel=1e-12)
    # decoding tokens pay none (their rows are in the decode kernel's per-sequence cost): a decode
    # step, a mixed step's decode and the per-batch decode coefficients price as the flat profile
    reqs = [decoding(500, 50), decoding(2000, 50)]
    one = cm.step_cost(_plan(*[(r, 1) for r in reqs]))
    assert one.seconds == flat.step_cost(_plan(*[(r, 1) for r in reqs])).seconds
    assert cm.decode_seconds(2, sum(r.computed_tokens + 1 for r in reqs), 0) == pytest.approx(one.seconds, rel=1e-12)
    mixed = _plan((decoding(500, 50), 1), (make_request(1000, 5), 1000))
    assert cm.step_cost(mixed).seconds == pytest.approx(flat.step_cost(mixed).seconds + 20e-6, rel=1e-12)


def test_attention_for_one_step_and_for_many_steps_is_bit_identical(tiny_model, round_gpu):
    """step_cost prices attention with attention_part (C doubles once compiled), the step records
    with attention_arrays (numpy): each entry of the arrays has attention_part's bits, with
    sliding layers, quantised KV and per-sequence kernel costs in play."""
    gpu = _half_keys(round_gpu.model_copy(update={"overhead": round_gpu.overhead.model_copy(
        update={"attention_seq_s": 3e-8})}), 220.0)
    model = ModelSpec(**dict(TINY_MODEL, num_layers=4, layers={"full": 1, "sliding": 3}, sliding_window_tokens=300))
    cm = CostModel(model, gpu, FP16, get_format("q8_0"))
    assert cm.window and cm.kv_sliding_bytes and cm.attention_seq_s and cm.dequant_flops_per_value
    assert cm.attention_token_s
    rng = np.random.default_rng(2)
    cols = [rng.integers(0, 10**7, size=300) for _ in range(4)] + [rng.integers(1, 4096, size=300),
                                                                   rng.integers(1, 256, size=300)]
    arrays = cm.attention_arrays(*[c.astype(np.float64) for c in cols])
    for i in range(300):
        one = cm.attention_part(*[int(c[i]) for c in cols])
        assert one == tuple(float(a[i]) for a in arrays)


def test_engine_and_tp_keep_scalar_and_vector_decode_times_bit_identical(tiny_model, round_gpu):
    from capsim.spec.serving import load_engine

    gpu = _linked(round_gpu).model_copy(update={"overhead": round_gpu.overhead.model_copy(
        update={"kernel_s": 2e-6, "launch_gap_s": 1e-6, "attention_seq_s": 3e-8})})
    cm = CostModel(tiny_model, gpu, get_format("q4_0"), get_format("q8_0"), engine=load_engine("llama.cpp"), tp=2)
    rng = np.random.default_rng(1)
    full = rng.integers(1, 10**6, size=100).astype(np.float64)
    for n in (1, 3, 40):
        vector = cm.decode_seconds(n, full, full * 0)
        assert all(cm.decode_seconds(n, int(f), 0) == v for f, v in zip(full, vector))
    ends = cm.decode_ends(3, 60, 1.0, 500, 0, 0)  # long: priced with numpy
    assert list(ends[:5]) == cm.decode_ends(3, 5, 1.0, 500, 0, 0)  # short: in a loop


@pytest.mark.parametrize("ctx_sliding0, below, offsets", [(0, 0, None), (700, 2, None), (0, 0, [1, 3, 4, 6, 7, 9])])
def test_decode_ends_sum_each_steps_decode_seconds_in_order(tiny_model, round_gpu, ctx_sliding0, below, offsets):
    """Every path of decode_ends (the loops with and without sliding layers, given offsets, numpy
    for long runs) ends where adding up decode_seconds one step at a time does, to the bit, and
    stops after the first step ending at or after `until`."""
    import capsim.cost.decode_runs as decode_runs

    cm = _cm(tiny_model, round_gpu)
    n, ctx_full0, now = 3, 500, 1.0
    steps = offsets or range(1, decode_runs._VECTOR_FROM + 6)
    t, expected = now, []
    for o in steps:
        t = t + cm.decode_seconds(n, ctx_full0 + n * o, ctx_sliding0 + below * o)
        expected.append(t)
    k = len(expected)
    assert list(cm.decode_ends(n, k, now, ctx_full0, ctx_sliding0, below, offsets)) == expected
    if offsets is None:
        short = decode_runs._VECTOR_FROM - 1
        assert cm.decode_ends(n, short, now, ctx_full0, ctx_sliding0, below) == expected[:short]
    until = (expected[2] + expected[3]) / 2
    assert list(cm.decode_ends(n, k, now, ctx_full0, ctx_sliding0, below, offsets, until=until)) == expected[:4]


def test_explain_shows_the_terms_of_the_priced_step(tiny_model, round_gpu):
    from capsim.report import explain
    from capsim.spec.serving import load_engine

    cm = CostModel(tiny_model, _linked(round_gpu), FP16, FP16, engine=load_engine("vllm"), tp=2)
    dec = explain.decode_step(cm, 8, 100)
    assert dec.seconds == pytest.approx(cm.decode_seconds(8, 800, 0), rel=1e-9)
    assert {t.name for t in dec.terms} >= {"GEMM weight reads", "attention KV traffic", "fixed: host + kernels",
                                          "all-reduce (TP)"}
    pre = explain.prefill_chunk(cm, 500)
    priced = cm.step_cost(_plan((make_request(500, 5), 500)))
    assert pre.seconds == pytest.approx(priced.seconds, rel=1e-9)
    assert pre.bound == priced.bound == "overhead"  # a 13M-parameter model: vLLM's 0.5 ms host time dominates
    text = explain.render([dec, pre], cm)
    assert "engine.overhead" in text and "gpu.efficiency" in text and "ms" in text
    assert "(GEMM reads^4 + GEMM FLOPs^4)^(1/4)" in text  # realistic mode's GEMM 4-norm, named as it is priced
