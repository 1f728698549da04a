"""The planner's bounds by hand (unit mode: every step 10 ms; the round-number GPU for memory), and
the property that pruning never removes a candidate the simulation would accept."""

from dataclasses import replace

import pytest
from capsim.cost.memory import block_layout
from capsim.planning.capacity import probe_requests
from capsim.planning.plan_bounds import best_rate, candidate_bounds, grid, traffic
from capsim.planning.plan_space import Candidate, SearchSpace, disaggregated_link, enumerate_candidates
from capsim.planning.tasks import Task, evaluate
from capsim.results.slo import parse_objectives
from capsim.spec import architecture as arch
from capsim.spec.catalog import load_model
from helpers import TINY_MODEL, unit_workload, workload


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


# The new shapes by hand, unit mode (every stage or rank step 10 ms). A link of 1e15 B/s moves the tiny
# model's 2,000-byte hidden state (or 4,000 bytes of KV per token) in picoseconds: the figures below are
# the 10 ms steps to 1e-6.
FAST = {"bandwidth_bytes_per_s": 1e15}
TWO_LAYERS = dict(TINY_MODEL, num_layers=2)
TINY_MOE = dict(TINY_MODEL, moe={"num_experts": 4, "experts_per_token": 1, "expert_intermediate_size": 1000})


def shaped_bounds(w, goals, c, budget=8, rate=None):
    load = rate or w.arrivals.rate_per_s
    return candidate_bounds(w, c, traffic(w, "rate_per_s", load, load), goals, budget, None, {})


def test_pipeline_bounds_by_hand():
    # PP 2: a virtual engine's step is 2 x 10 ms (both stages; unit mode has no host time to take back). Two
    # virtual engines of 8 slots each decode 8 tokens per 20 ms: 2 x 8 / 0.02 / 9 = 800 / 9 requests/s, as
    # one TP1 replica does, on twice the GPUs. A token gap and a 10-token prefill each take 20 ms.
    w = unit_workload("l40s", model=TWO_LAYERS, pp_link=FAST)
    c = Candidate("pp", "l40s", 1, "fp16", "fp16", "vllm", 8, 4096, pp=2)
    b = shaped_bounds(w, parse_objectives(["ttft_p99_ms=15"]), c)
    assert c.gpus_per_replica == 2 and b.max_replicas == 4
    assert b.max_rate_per_replica == pytest.approx(800 / 9, rel=1e-6)
    assert b.tpot_floor_ms == pytest.approx(20.0, rel=1e-6) and b.pruned_by == "ttft"
    assert shaped_bounds(w, parse_objectives(["ttft_p99_ms=25"]), c).pruned_by is None


def test_expert_parallel_bounds_by_hand():
    # EP 2 with a 1 ms link latency: a rank's step is 10 ms + a dispatch and a combine all-to-all of the one
    # MoE layer, 2 x 1 ms = 12 ms. Two ranks of 8 slots: 2 x 8 / 0.012 / 9 = 148.1 requests/s.
    w = unit_workload("l40s", model=TINY_MOE, ep_link=FAST | {"latency_s": 1e-3})
    c = Candidate("ep", "l40s", 1, "fp16", "fp16", "vllm", 8, 4096, ep=2)
    b = shaped_bounds(w, parse_objectives(["tpot_p99_ms=11"]), c)
    assert c.gpus_per_replica == 2
    assert b.tpot_floor_ms == pytest.approx(12.0, rel=1e-6) and b.pruned_by == "tpot"
    b = shaped_bounds(w, parse_objectives(["tpot_p99_ms=13"]), c)
    assert b.pruned_by is None and b.max_rate_per_replica == pytest.approx(2 * 8 / 0.012 / 9, rel=1e-6)


def test_disaggregated_bounds_by_hand():
    # 1P2D over nvlink4 (450 GB/s, no fixed costs): the decode pool's two instances decode 2 x 800 / 9 = 177.8
    # requests/s; the prefill instance reads 4,096 prompt tokens per 10 ms step, 40,960 10-token prompts/s.
    # TTFT: the 10 ms prefill, 10 tokens x 4,000 bytes / 450 GB/s = 88.9 ns of transfer, and a 10 ms first
    # decode step: 20.0000889 ms.
    w = unit_workload("l40s")
    c = Candidate("disaggregated", "l40s", 1, "fp16", "fp16", "vllm", 8, 4096, prefill=1, decode=2, link="nvlink4")
    assert c.gpus_per_replica == 3 and c.overrides()["serving"]["disaggregated"]["decode"] == {"replicas": 2}
    b = shaped_bounds(w, parse_objectives(["ttft_p99_ms=20"]), c, budget=9)
    assert b.max_replicas == 3 and b.max_rate_per_replica == pytest.approx(1600 / 9)
    assert b.ttft_floor_ms == pytest.approx(20.0 + 40_000 / 450e9 * 1e3) and b.pruned_by == "ttft"
    assert "KV transfer" in b.reason
    # The same TTFT limit leaves the aggregated replica (a 10 ms prefill) in.
    assert bounds_of(w, parse_objectives(["ttft_p99_ms=20"])).pruned_by is None


def test_shapes_enumerate_only_what_the_model_allows():
    dense, moe = load_model("llama-3.1-8b"), load_model("qwen3-30b-a3b")
    space = SearchSpace(("h100-sxm",), 8, tp=(1, 2, 4), weights=("bf16",), kv_cache=("fp16",), max_num_seqs=(64,),
                        max_num_batched_tokens=(2048,), shapes=("aggregated", "pp", "ep", "disaggregated"),
                        pp=(2, 4), ep=(2, 4, 8, 16), splits=((1, 1), (1, 3), (4, 4)), model=dense)
    shapes = [(c.shape, c.tp, c.pp, c.ep, c.prefill, c.decode, c.link) for c in enumerate_candidates(space)]
    assert [s for s in shapes if s[0] == "pp"] == [("pp", 1, 2, 1, 0, 0, ""), ("pp", 1, 4, 1, 0, 0, ""),
                                                     ("pp", 2, 2, 1, 0, 0, ""), ("pp", 2, 4, 1, 0, 0, ""),
                                                     ("pp", 4, 2, 1, 0, 0, "")]
    assert not [s for s in shapes if s[0] == "ep"]  # a dense model has no experts to spread
    # NVLink inside one 8-GPU node, RDMA once a unit spans more; the budget caps (P + D) x TP.
    assert [s[1:] for s in shapes if s[0] == "disaggregated"] == [
        (1, 1, 1, 1, 1, "nvlink4"), (1, 1, 1, 1, 3, "nvlink4"), (1, 1, 1, 4, 4, "nvlink4"),
        (2, 1, 1, 1, 1, "nvlink4"), (2, 1, 1, 1, 3, "nvlink4"), (4, 1, 1, 1, 1, "nvlink4")]
    ep = [c.ep for c in enumerate_candidates(replace(space, model=moe, shapes=("ep",)))]
    assert ep == [2, 4, 8]  # 128 experts split into 16 ranks too, but 16 GPUs are over the budget
    assert disaggregated_link("l40s", 2) == "pcie-gen4-x16" and disaggregated_link("h100-sxm", 16) == "rdma-400g"
    assert {c.shape for c in enumerate_candidates(replace(space, model=load_model("gemma-3-27b"), shapes=("pp",)))} \
        == set()  # sliding-window layers: no pipeline stages


NEW_SHAPE_TRAFFIC = dict(engine="vllm", weights="bf16", max_model_len=16384,
                         scheduler={"kind": "chunked", "max_num_seqs": 64, "max_num_batched_tokens": 2048},
                         prompt_tokens={"dist": "lognormal", "mean": 1500, "sigma": 0.6, "max": 12000},
                         output_tokens={"dist": "lognormal", "mean": 120, "sigma": 0.6, "max": 600},
                         arrivals={"kind": "poisson", "rate_per_s": 20.0})


@pytest.mark.parametrize("model, shapes, gpus", [("llama-3.1-8b", ("pp", "disaggregated"), ("l4", "h100-sxm")),
                                                 ("qwen3-30b-a3b", ("ep",), ("l40s", "h100-sxm"))])
def test_new_shapes_bounds_hold_in_simulation(model, shapes, gpus):
    """The property test above for pipeline, expert-parallel and disaggregated candidates: every one a
    latency or throughput bound prunes misses the SLOs simulated at the most replicas the budget allows;
    every one it keeps, simulated there, has p99 TTFT and TPOT at or above the bound's floors."""
    w = workload("h100-sxm", model=model, **NEW_SHAPE_TRAFFIC)
    goals = parse_objectives(["ttft_p99_ms=150", "tpot_p99_ms=12"])
    space = SearchSpace(gpus, 4, tp=(1, 2), weights=("bf16",), kv_cache=("fp16",), max_num_seqs=(64,),
                        max_num_batched_tokens=(2048,), shapes=shapes, pp=(2,), ep=(2, 4), splits=((1, 1), (1, 2)),
                        model=load_model(model))
    rate, n = 20.0, probe_requests("rate_per_s", 20.0)
    w = w.model_copy(update={"requests": n})
    demand = traffic(w, "rate_per_s", rate, rate)
    pruned, kept = set(), set()
    for c in enumerate_candidates(space):
        b = candidate_bounds(w, c, demand, goals, space.budget_gpus, None, {})
        if b.pruned_by in (None, "tpot", "ttft", "throughput", "goodput"):
            load = float(f"{rate / b.max_replicas:.4g}")
            rec = evaluate(Task(w, c.overrides() | {"rate": load, "requests": n}, objectives=goals))
            if b.pruned_by is None:
                assert rec["p99_ttft_ms"] >= b.ttft_floor_ms and rec["p99_tpot_ms"] >= b.tpot_floor_ms, c
                kept.add(c.shape)
            else:
                assert goals.failures(rec), (c, b.reason)
                pruned.add(c.shape)
    assert set(shapes) <= pruned and set(shapes) <= kept, (pruned, kept)
