"""The planner's bounds by hand (unit mode: every step 10 ms; the round-number GPU for memory), and
the property that pruning never removes a candidate the simulation would accept."""

import pytest
from capsim.cost.memory import block_layout
from capsim.planning.capacity import probe_requests
from capsim.planning.plan_bounds import best_rate, candidate_bounds, grid, traffic
from capsim.planning.plan_space import Candidate, SearchSpace, enumerate_candidates
from capsim.planning.tasks import Task, evaluate
from capsim.results.slo import parse_objectives
from capsim.spec import architecture as arch
from capsim.spec.catalog import load_model
from helpers import unit_workload, workload


def bounds_of(w, goals, budget=8, gpu="l40s", tp=1, seqs=8, batch=4096, rate=None):
    c = Candidate("aggregated", gpu, tp, "fp16", "fp16", "vllm", seqs, batch)
    over, load = "rate_per_s", rate or w.arrivals.rate_per_s
    return candidate_bounds(w, c, traffic(w, over, load, load), goals, budget, None, {})


def test_grid_reaches_the_top_in_small_steps():
    g = grid(1000)
    assert g[0] == 1 and g[-1] == 1000 and all(b > a and b <= max(a + 1, 1.1 * a) for a, b in zip(g, g[1:]))


def test_best_rate_bounds_the_true_best_for_a_non_decreasing_time():
    def seconds(n):  # a step: 1 ms fixed plus 0.1 ms per token up to 64, then 0.5 ms per token
        return 1e-3 + 1e-4 * min(n, 64) + 5e-4 * max(0, n - 64)
    true_best = max(n / seconds(n) for n in range(1, 301))
    assert true_best <= best_rate(grid(300), seconds) <= 1.1 * true_best


def test_memory_fit_by_hand(round_gpu_file):
    # The tiny model keeps 2 (K, V) x 10 heads x 100 dims x 2 bytes x 1 layer = 4,000 bytes per token. In
    # document mode the KV cache is memory x gpu_memory_utilization - weights (no activations, no reserve).
    weights = arch.param_counts(workload(round_gpu_file).model).total * 2
    goals = parse_objectives(["ttft_p99_ms=1e6"])
    small = workload(round_gpu_file, mode="document", gpu_memory_utilization=0.001, max_model_len=65536)
    b = bounds_of(small, goals, gpu=round_gpu_file, batch=65536)
    assert b.pruned_by == "memory" and b.kv_tokens < 65536
    assert block_layout(small.model, 2, 4)[0] == 4 * 4000
    big = workload(round_gpu_file, mode="document", gpu_memory_utilization=0.01, max_model_len=65536)
    b = bounds_of(big, goals, gpu=round_gpu_file, batch=65536)
    assert b.pruned_by is None and b.kv_tokens == int((1e9 - weights) // 16_000) * 4


def test_memory_fit_of_a_70b_model_on_one_l40s():
    w = workload("l40s", model="llama-3.1-70b", engine="vllm", max_model_len=8192)
    b = bounds_of(w, parse_objectives(["ttft_p99_ms=1e6"]), gpu="l40s", batch=8192, seqs=64)
    assert b.pruned_by == "memory" and b.kv_tokens is None
    assert arch.param_counts(load_model("llama-3.1-70b")).total * 2 > 48e9  # 141 GB of bf16 weights


def test_throughput_bound_by_hand():
    # Unit mode: a step takes 10 ms whatever it holds, and attention costs nothing extra. 8 sequences decode at
    # most 8 tokens a step, and a request's 10-token answer takes 9 decode steps (the first token comes with
    # the prefill): 800 / 9 = 88.9 requests/s (prefill: 4,096 tokens a step is far more). At 1,100/s the
    # fewest replicas are ceil(1100 / (1.25 x 88.9)) = 10: over a budget of 8 GPUs, within one of 10.
    w = unit_workload("l40s", arrivals={"kind": "poisson", "rate_per_s": 1100.0})
    goals = parse_objectives(["ttft_p99_ms=1e6"])
    b = bounds_of(w, goals, budget=8, rate=1100.0)
    assert b.max_rate_per_replica == pytest.approx(800 / 9) and b.min_replicas == 10 and b.pruned_by == "throughput"
    b = bounds_of(w, goals, budget=10, rate=1100.0)
    assert b.pruned_by is None and b.min_replicas == 10 and b.max_replicas == 10


def test_decode_context_bound_by_hand():
    # A request with prompt p and o outputs decodes o - 1 tokens attending p + 0, p + 1, ... positions.
    w = unit_workload("l40s", prompt_tokens={"dist": "fixed", "value": 100}, output_tokens={"dist": "fixed", "value": 5})
    demand = traffic(w, "rate_per_s", 10.0, 10.0)
    assert demand.mean_decodes == 4 and demand.mean_decode_context == 4 * 100 + 4 * 3 / 2


@pytest.mark.parametrize("slo, pruned", [("tpot_p99_ms=5", "tpot"), ("tpot_p99_ms=20", None),
                                         ("itl_p99_ms=9", "tpot"), ("ttft_p99_ms=5", "ttft"),
                                         ("ttft_p99_ms=20", None), ("ttft:5", "goodput"), ("ttft:20 tpot:20", None)])
def test_latency_floors_by_hand(slo, pruned):
    # Unit mode: a decode step at batch 1 and a 10-token prompt's prefill alone each take one 10 ms step.
    b = bounds_of(unit_workload("l40s"), parse_objectives([slo]))
    assert b.pruned_by == pruned
    assert b.tpot_floor_ms == pytest.approx(10.0)


def test_pruning_never_removes_a_candidate_the_simulation_accepts():
    """Every candidate a latency or throughput bound prunes is simulated at the most replicas the budget
    allows (its lightest load): none meets the SLOs. Memory-pruned ones cannot start."""
    w = workload("h100-sxm", model="llama-3.1-8b", engine="vllm", weights="bf16", max_model_len=65536,
                 scheduler={"kind": "chunked", "max_num_seqs": 256, "max_num_batched_tokens": 2048},
                 prompt_tokens={"dist": "lognormal", "mean": 600, "sigma": 0.9, "max": 6000},
                 output_tokens={"dist": "lognormal", "mean": 250, "sigma": 0.8, "max": 1500},
                 arrivals={"kind": "poisson", "rate_per_s": 30.0})
    goals = parse_objectives(["ttft_p99_ms=50", "tpot_p99_ms=14"])
    space = SearchSpace(("l4", "rtx3090", "a100-40g", "h100-sxm"), 2, tp=(1, 2), weights=("bf16", "fp8"),
                        kv_cache=("fp16",), max_num_seqs=(256,), max_num_batched_tokens=(2048,))
    n = probe_requests("rate_per_s", 30.0)
    w = w.model_copy(update={"requests": n})
    demand = traffic(w, "rate_per_s", 30.0, 30.0)
    bounds = [candidate_bounds(w, c, demand, goals, 2, None, {}) for c in enumerate_candidates(space)]
    reasons = {b.pruned_by for b in bounds}
    assert {"memory", "throughput", "tpot", "ttft", None} <= reasons, reasons
    checked = 0
    for b in bounds:
        if b.pruned_by in ("tpot", "ttft", "throughput", "goodput"):
            rate = 30.0 / b.max_replicas
            rec = evaluate(Task(w, b.candidate.overrides() | {"rate": float(f"{rate:.4g}"), "requests": n}, objectives=goals))
            assert goals.failures(rec), (b.candidate, b.reason)
            checked += 1
        elif b.pruned_by == "memory":
            assert b.kv_tokens is None or b.kv_tokens < 65536
    assert checked >= 3
