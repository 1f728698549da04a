"""KV capacity the way the engines size it (vLLM: total x utilisation - weights - activation peak
- reserve; TensorRT-LLM: a fraction of what is left), per GPU under tensor parallelism."""

import pytest
from capsim.spec.catalog import load_hardware, load_model
from capsim.spec.serving import EngineProfile, load_engine
from capsim.spec.formats import get_format
from capsim.cost.memory import GiB, activation_peak_bytes, kv_bytes_per_token_per_gpu, memory_budget

FP16 = get_format("fp16")


def _budget(model, gpu, **kw):
    args = dict(block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=2048, max_num_seqs=4)
    return memory_budget(model, gpu, FP16, FP16, **(args | kw))


def test_without_an_engine_the_budget_follows_vllm_with_a_flat_reserve(tiny_model, round_gpu):
    m = _budget(tiny_model, round_gpu)
    # 100 GB x 0.9 - 26e6 B of weights (13e6 params x 2) - activations - 0.5 GiB reserve
    activation = 2048 * 2 * (3 * 4000 + 4 * 1000) + 4 * 1000 * 4 * 3
    kv = 90e9 - 26e6 - activation - 0.5 * GiB
    assert m.activation_bytes == activation and m.kv_bytes == pytest.approx(kv)
    assert m.num_blocks == int(kv // (16 * 4000)) and m.kv_tokens == m.num_blocks * 16
    forced = _budget(tiny_model, round_gpu, num_gpu_blocks=123)
    assert forced.num_blocks == 123 and forced.overridden
    assert forced.log_line().startswith("# GPU blocks: 123 (given;")


def test_activation_peak_matches_vllms_logged_profile():
    # vLLM PR #10511: Meta-Llama-3-8B, max_num_batched_tokens 8192, max_num_seqs 256:
    # "PyTorch activation peak memory 1.26GiB"
    peak = activation_peak_bytes(load_model("llama-3.1-8b"), 8192, 256)
    assert peak / GiB == pytest.approx(1.26, rel=0.02)


def test_vllm_log_line_for_llama3_8b_on_h100():
    """PR #10511 logs total 79.22 GiB x 0.90 = 71.29 GiB, weights 14.96 GiB, activation 1.26 GiB,
    non-torch 1.79 GiB -> 53.29 GiB of KV. capsim's reserve is the median non-torch figure of
    published logs (0.25 GiB), so its KV is 1.54 GiB larger than that one log's."""
    engine = load_engine("vllm").model_copy(update={"scheduler_large_gpu": None})
    m = memory_budget(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), get_format("bf16"), get_format("bf16"),
                      block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256,
                      engine=engine)
    assert m.total_bytes / GiB == pytest.approx(79.22, abs=0.01)
    assert m.usable_bytes / GiB == pytest.approx(71.29, abs=0.01)
    assert m.weight_bytes / GiB == pytest.approx(14.96, abs=0.01)
    assert m.kv_bytes / GiB == pytest.approx(53.29 + 1.79 - 0.25, abs=0.03)
    assert m.num_blocks == int(m.kv_bytes // (16 * 131072))  # 128 KiB per token, blocks of 16


def test_tensor_parallelism_splits_weights_and_kv_heads(tiny_model, round_gpu):
    one, two = _budget(tiny_model, round_gpu), _budget(tiny_model, round_gpu, tp=2)
    assert two.weight_bytes == one.weight_bytes / 2
    assert two.bytes_per_block == one.bytes_per_block / 2
    assert two.activation_bytes == one.activation_bytes  # the sampler's buffers are not split
    llama70 = load_model("llama-3.1-70b")  # 8 KV heads: at TP 16 every rank still holds one head
    assert kv_bytes_per_token_per_gpu(llama70, 2, 16) == kv_bytes_per_token_per_gpu(llama70, 2, 8)


def test_tensorrt_llm_takes_a_fraction_of_the_free_memory(tiny_model, round_gpu):
    engine = EngineProfile.model_validate({
        "name": "t", "version": "test", "scheduler": {"kind": "chunked", "max_num_seqs": 8, "block_size": 64},
        "gpu_memory_utilization": 0.9, "kv_memory": "free_fraction", "kernels_per_layer": 7,
        "memory": {"reserve_bytes": 1e9, "activation_peak": False}, "sources": {"all": "test"}})
    m = _budget(tiny_model, round_gpu, engine=engine, block_size=64)
    assert m.kv_bytes == pytest.approx((100e9 - 26e6 - 1e9) * 0.9)
    assert m.rule == "free_fraction"


def test_document_mode_leaves_out_activations_and_reserve(tiny_model, round_gpu):
    m = _budget(tiny_model, round_gpu, realistic=False)
    assert m.activation_bytes == 0 and m.reserve_bytes == 0 and m.kv_bytes == pytest.approx(90e9 - 26e6)


def test_sliding_windows_and_recurrent_state_are_per_sequence_memory():
    """Blocks hold the full-attention layers' tokens; a sliding-window layer keeps at most its
    window (+ the block being filled) and a linear-attention layer a fixed state, per sequence."""
    from capsim.spec import architecture as arch
    from capsim.spec.catalog import load_model
    from capsim.cost.memory import block_layout

    gemma = load_model("gemma-3-27b")  # 10 full + 52 sliding layers, window 1,024, 16 KV heads x 128
    per_block, per_seq = block_layout(gemma, 2.0, 16)
    assert per_block == 16 * 10 * (2 * 16 * 128 * 2)
    assert per_seq == (1024 // 16 + 1) * 16 * 52 * (2 * 16 * 128 * 2)
    qwen = load_model("qwen3.5-27b")  # 16 full-attention layers + 48 linear-attention layers
    per_block, per_seq = block_layout(qwen, 2.0, 16)
    assert per_block == 16 * 65536 and per_seq == arch.state_bytes_per_sequence(qwen)
    llama = load_model("llama-3.1-8b")
    assert block_layout(llama, 2.0, 16) == (16 * 131072, 0.0)


def test_a_memory_budget_pickles_whole():
    # A run's Setup crosses processes (run --seeds, sweeps); compiled, the frozen dataclass
    # pickles through its own __reduce__, which must carry every field.
    import dataclasses
    import pickle

    from capsim.cost.memory import MemoryBudget
    values = {f.name: (i + 2 if f.type in (int, "int") else float(i) + 0.5 if f.type in (float, "float")
                       else True if f.type in (bool, "bool") else f"rule{i}")
              for i, f in enumerate(dataclasses.fields(MemoryBudget))}
    budget = MemoryBudget(**values)
    assert pickle.loads(pickle.dumps(budget)) == budget
