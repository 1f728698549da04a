"""Pipeline and expert parallelism (capsim.cost.parallel): stages, imbalance, bubbles and an
all-to-all by hand, pipelined and expert-parallel step times against their parts, and pp and ep
runs end to end (memory, GPUs, virtual engines or ranks, config errors). Macro-steps against
step-by-step with pp and ep are in tests/sim/test_engine_equivalence.py."""

import pytest
from capsim.api import simulate
from capsim.api.setup import resolve
from capsim.core.plan import StepPlan
from capsim.cost.parallel import (ExpertParallelCost, PipelineCost, activation_bytes, all_to_all_s, bubble_fraction,
                                   distinct_experts_per_rank, imbalance, stage_layers)
from capsim.cost.roofline import CostModel
from capsim.errors import CapsimError
from capsim.spec.config import ModelSpec
from capsim.spec.formats import get_format
from helpers import TINY_MODEL, make_request, workload

FP16 = get_format("fp16")
TINY4 = dict(TINY_MODEL, name="tiny4", num_layers=4)  # 4 layers: 2 stages of 2


def test_stages_imbalance_and_bubbles_by_hand():
    assert stage_layers(5, 2) == [3, 2] and stage_layers(80, 3) == [27, 27, 26]
    assert imbalance(4, 2) == 1.0 and imbalance(5, 2) == pytest.approx(1.2)  # 3 layers vs a mean of 2.5
    assert bubble_fraction(4, 1) == pytest.approx(0.75)  # one micro-batch: 3 of 4 stages idle at a time
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert activation_bytes(100, 1000, tp=2) == 100_000  # 100 tokens x 1,000 x 2 bytes / 2 ranks


def _pipeline(model: dict, gpu, mode: str, pp: int = 2, **kw) -> PipelineCost:
    cost = PipelineCost(ModelSpec.model_validate(model), gpu, FP16, FP16, mode=mode, **kw)
    cost.set_pipeline(pp, 1e9, 1e-3)  # 1 GB/s, 1 ms between stages
    return cost


def test_a_unit_mode_stage_time_by_hand(round_gpu):
    """Unit steps of 10 ms: 2 stages take 20 ms, and 10 tokens' hidden states (10 x 1,000 x 2 bytes)
    cross one boundary in 1 ms + 20 kB / 1 GB/s = 1.02 ms."""
    cost = _pipeline(TINY4, round_gpu, "unit", unit_step_s=0.01)
    plan = StepPlan([make_request(10, 5)], [10])
    assert cost.step_cost(plan).seconds == pytest.approx(0.02102)
    assert cost.decode_seconds(3, 30.0, 0.0) == pytest.approx(0.02 + 1e-3 + 3 * 2000 / 1e9)


def test_a_pipelined_step_is_pp_stages_plus_the_transfers(round_gpu):
    """Document mode (no host time): a 2-stage step of the 4-layer model = 2 x the 2-layer model's
    step + one boundary crossing; decode steps too, through the decode coefficients."""
    stage_model = ModelSpec.model_validate(dict(TINY4, num_layers=2))
    stage = CostModel(stage_model, round_gpu, FP16, FP16, mode="document")
    cost = _pipeline(dict(TINY4, num_layers=2), round_gpu, "document")
    plan = StepPlan([make_request(100, 5)], [100])
    crossing = 1e-3 + 100 * 1000 * 2 / 1e9
    assert cost.step_cost(plan).seconds == pytest.approx(2 * stage.step_cost(plan).seconds + crossing)
    assert cost.decode_seconds(4, 400.0, 0.0) == pytest.approx(2 * stage.decode_seconds(4, 400.0, 0.0)
                                                               + 1e-3 + 4 * 2000 / 1e9)


def test_host_time_is_paid_once_per_step(round_gpu):
    gpu = round_gpu.model_copy(update={"overhead": round_gpu.overhead.model_copy(update={"step_s": 0.005})})
    stage = CostModel(ModelSpec.model_validate(dict(TINY4, num_layers=2)), gpu, FP16, FP16, mode="realistic")
    cost = _pipeline(dict(TINY4, num_layers=2), gpu, "realistic")
    plan = StepPlan([make_request(100, 5)], [100])
    crossing = 1e-3 + 100 * 1000 * 2 / 1e9
    assert cost.step_cost(plan).seconds == pytest.approx(2 * stage.step_cost(plan).seconds - 0.005 + crossing)


def test_a_pp_run_splits_memory_gpus_and_kv_over_virtual_engines(round_gpu_file):
    w = workload(round_gpu_file, model=TINY4, pp=2, replicas=2, num_gpu_blocks=1000, requests=30)
    setup = resolve(w)
    assert setup.stage_model is not None and setup.stage_model.num_layers == 2
    run = simulate(w, price=1.0)
    s = run.summary
    assert s["gpus"] == 4 and s["replicas"] == 4  # 2 replicas x 2 stages; 2 x 2 virtual engines
    assert s["setup"]["pp"] == 2 and s["completed"] == 30
    assert set(run.steps["replica"]) <= {0, 1, 2, 3}
    # weights of half the layers per GPU leave more room for KV than pp 1 (same GPU, no override)
    one = resolve(workload(round_gpu_file, model=TINY4)).memory
    two = resolve(workload(round_gpu_file, model=TINY4, pp=2)).memory
    assert two.kv_tokens > one.kv_tokens


def test_pp_config_errors_name_the_field(round_gpu_file):
    with pytest.raises(CapsimError, match="field 'pp' is 5, more than tiny4's 4 layers"):
        resolve(workload(round_gpu_file, model=TINY4, pp=5))
    hybrid = dict(TINY4, name="hyb", layers={"full": 2, "sliding": 2}, sliding_window_tokens=32)
    with pytest.raises(CapsimError, match="sliding-window or linear-attention"):
        resolve(workload(round_gpu_file, model=hybrid, pp=2))
    with pytest.raises(CapsimError, match="speculative"):
        workload(round_gpu_file, model=TINY4, pp=2, speculative={"draft_tokens": 2, "acceptance_rate": 0.5})


# Expert parallelism: 2 layers, 8 experts of which each token picks 2.
TINY_MOE = dict(TINY_MODEL, name="tiny-moe", num_layers=2,
                moe={"num_experts": 8, "experts_per_token": 2, "expert_intermediate_size": 1000})


def test_an_all_to_all_and_the_experts_a_rank_reads_by_hand():
    # 10 tokens x 2 experts x 1,000 x 2 bytes, 3/4 of them to the 3 other ranks: 30 kB at 1 GB/s + 1 ms
    assert all_to_all_s(10, 2, 1000, ep=4, bytes_per_s=1e9, latency_s=1e-3) == pytest.approx(1.03e-3)
    # one token per rank, 4 in all, each picking 2 of 8: each of a rank's 2 experts is missed with
    # probability (6/8)^4, so the rank reads 2 x (1 - 0.31640625) experts on average
    assert distinct_experts_per_rank(1, 8, 2, ep=4) == pytest.approx(1.3671875)
    assert distinct_experts_per_rank(10_000, 8, 2, ep=4) == pytest.approx(2.0)  # every expert, at most its own


def test_an_expert_parallel_step_adds_two_all_to_alls_per_moe_layer(round_gpu):
    rank = ModelSpec.model_validate(dict(TINY_MOE, moe=dict(TINY_MOE["moe"], num_experts=2)))
    cost = ExpertParallelCost(rank, round_gpu, FP16, FP16, mode="unit", unit_step_s=0.01)
    cost.set_experts(4, 8, 1e9, 1e-3)
    plan = StepPlan([make_request(10, 5)], [10])
    assert cost.step_cost(plan).seconds == pytest.approx(0.01 + 2 * 2 * 1.03e-3)
    assert cost.experts_touched(1) == pytest.approx(1.3671875)


def test_an_ep_run_has_a_rank_per_gpu_and_a_share_of_the_experts(round_gpu_file):
    w = workload(round_gpu_file, model=TINY_MOE, ep=4, requests=30)
    setup = resolve(w)
    assert setup.stage_model is not None and setup.stage_model.moe.num_experts == 2
    s = simulate(w, price=1.0).summary
    assert s["gpus"] == 4 and s["replicas"] == 4 and s["setup"]["ep"] == 4 and s["completed"] == 30
    whole = resolve(workload(round_gpu_file, model=TINY_MOE)).memory
    assert setup.memory.weight_bytes < whole.weight_bytes  # a quarter of the experts per GPU


def test_ep_config_errors_name_the_field(round_gpu_file):
    with pytest.raises(CapsimError, match="field 'ep' is 2, but tiny has no experts"):
        resolve(workload(round_gpu_file, ep=2))
    with pytest.raises(CapsimError, match="use an ep that divides 8 and is at most 4"):
        resolve(workload(round_gpu_file, model=TINY_MOE, ep=8))  # 1 expert per rank, 2 per token
    with pytest.raises(CapsimError, match="tp 1 and pp 1"):
        workload(round_gpu_file, model=TINY_MOE, ep=2, tp=2)
