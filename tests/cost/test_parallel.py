"""Pipeline parallelism (capsim.cost.parallel): stages, imbalance and bubbles by hand, a pipelined
step time against the stage's own CostModel, and a pp run end to end (memory, GPUs, virtual
engines, config errors). Macro-steps against step-by-step with pp are in
tests/sim/test_engine_equivalence.py."""

import pytest
from capsim.api import simulate
from capsim.api.setup import resolve
from capsim.core.plan import StepPlan
from capsim.cost.parallel import PipelineCost, activation_bytes, bubble_fraction, imbalance, stage_layers
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
