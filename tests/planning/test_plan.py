"""capsim plan: the replica search on its own, the candidate space, the Pareto front and launch
commands on hand sets, and end to end in unit mode (every step 10 ms, so every GPU performs alike
and only the price separates them)."""

import math

import pytest
from capsim.errors import CapsimError
from capsim.planning.plan import ReplicaSearch, plan, replica_load
from capsim.planning.plan_bounds import Bounds
from capsim.planning.plan_output import hf_id, launch_commands, pareto_mask
from capsim.planning.plan_space import Candidate, SearchSpace, enumerate_candidates
from capsim.results.slo import parse_objectives
from capsim.spec.catalog import load_model
from helpers import TINY_MODEL, unit_workload

CANDIDATE = Candidate("aggregated", "l40s", 2, "fp8", "fp8", "vllm", 128, 4096)


def fake_bounds(low: int, high: int) -> Bounds:
    return Bounds(CANDIDATE, None, "", 1000, 10.0, low, high, None, None, 1.0)


@pytest.mark.parametrize("low, high, needed, tried", [
    (2, 16, 5, [2, 4, 8, 6, 5]),
    (3, 16, 3, [3]),
    (1, 6, None, [1, 2, 4, 6]),
    (1, 16, 16, [1, 2, 4, 8, 16, 12, 14, 15]),
])
def test_replica_search_finds_the_fewest(low, high, needed, tried):
    s = ReplicaSearch(0, fake_bounds(low, high))
    seen = []
    while not s.done:
        n = s.propose()
        seen.append(n)
        s.observe(n, {"slo_met": needed is not None and n >= needed})
    assert seen == tried and s.passing == needed


def test_replica_load_shares_the_target():
    assert replica_load("rate_per_s", 40.0, 3) == 13.33
    assert replica_load("users", 100, 3) == 34


def test_space_enumerates_every_combination_within_the_budget():
    space = SearchSpace(("l40s", "h100-sxm"), 4, tp=(1, 2, 8), weights=("bf16",), kv_cache=("fp16", "fp8"),
                        engines=("vllm", "sglang"), max_num_seqs=(64,), max_num_batched_tokens=(2048, 8192))
    cands = enumerate_candidates(space)
    assert len(cands) == 2 * 2 * 2 * 2 * 2 and {c.tp for c in cands} == {1, 2} and len(set(cands)) == len(cands)
    assert all(c.shape == "aggregated" and c.gpus_per_replica == c.tp for c in cands)


@pytest.mark.parametrize("space, message", [
    (SearchSpace(("l40s", "h1000"), 8), "h1000"),
    (SearchSpace(("l40s",), 0), "--budget-gpus"),
    (SearchSpace((), 8), "--gpu"),
    (SearchSpace(("l40s",), 8, tp=(0,)), "--tp"),
    (SearchSpace(("l40s",), 8, weights=("fp7",)), "fp7"),
])
def test_bad_space_is_a_clear_error(space, message):
    with pytest.raises(CapsimError, match=message):
        enumerate_candidates(space)


def test_pareto_front_on_a_hand_set():
    points = [(1, 5), (2, 4), (2, 3), (0, 6), (1, 4), (2, 4)]
    # (2, 3) is beaten by (2, 4); (1, 4) by (1, 5); the two (2, 4) tie and both stay.
    assert pareto_mask(points) == [True, True, False, True, False, True]


def test_launch_commands_carry_the_deployment():
    row = {"tp": 2, "max_num_seqs": 128, "max_num_batched_tokens": 4096, "kv_cache": "fp8", "weights": "fp8"}
    cmds = launch_commands(row, load_model("llama-3.1-8b"), 8192, None)
    assert hf_id(load_model("llama-3.1-8b")) == "meta-llama/Llama-3.1-8B-Instruct"
    assert cmds["vllm"] == ("vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --max-num-seqs 128 "
                            "--max-num-batched-tokens 4096 --kv-cache-dtype fp8 --gpu-memory-utilization 0.9 "
                            "--max-model-len 8192 --quantization fp8")
    assert cmds["sglang"] == ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2 "
                              "--max-running-requests 128 --chunked-prefill-size 4096 --kv-cache-dtype fp8 "
                              "--mem-fraction-static 0.88 --context-length 8192 --quantization fp8")
    plain = launch_commands(row | {"kv_cache": "fp16", "weights": "bf16"}, load_model("llama-3.1-8b"), 4096, 0.8)
    assert "--kv-cache-dtype auto --gpu-memory-utilization 0.8" in plain["vllm"] and "quantization" not in plain["vllm"]
    assert "--mem-fraction-static 0.8 " in plain["sglang"]


GOALS = parse_objectives(["ttft_p99_ms=100"])
# 16 candidates: more than a round (ROUND_SIZE 8), so the cost bound has some to leave out.
UNIT_SPACE = SearchSpace(("h100-sxm", "l40s"), 8, tp=(1, 2), weights=("fp16",), kv_cache=("fp16", "fp8"),
                         engines=("vllm", "sglang"), max_num_seqs=(8,), max_num_batched_tokens=(4096,))


def unit_plan(front_within=1.0, goals=GOALS, rate=150.0, space=UNIT_SPACE):
    # One replica of 8 slots completes at most 80 requests/s of 10-step requests (helpers.unit_workload).
    # 400 requests a simulation keep the test quick (the planner's own default is a 2,000-request window).
    return plan(unit_workload("l40s"), goals, space, rate=rate, workers=1, front_within=front_within, requests=400)


def test_launch_commands_of_the_new_shapes():
    row = {"tp": 4, "max_num_seqs": 64, "max_num_batched_tokens": 2048, "kv_cache": "fp16", "weights": "bf16"}
    model = load_model("llama-3.1-8b")
    pp = launch_commands(row | {"shape": "pp", "pp": 2, "ep": 1}, model, 8192, None)
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 4 --pipeline-parallel-size 2 " \
           "--max-num-seqs 64" in pp["vllm"]
    assert "--model-path meta-llama/Llama-3.1-8B-Instruct --tp 4 --pp-size 2 --max-running-requests 64" in pp["sglang"]
    ep = launch_commands(row | {"shape": "ep", "tp": 1, "pp": 1, "ep": 8}, model, 8192, None)
    assert "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel --max-num-seqs 64" in ep["vllm"]
    assert "--tp 8 --dp 8 --enable-dp-attention --ep-size 8 --max-running-requests 64" in ep["sglang"]
    pd = launch_commands(row | {"shape": "disaggregated", "pp": 1, "ep": 1, "prefill": 1, "decode": 2,
                                "link": "nvlink4"}, model, 8192, None)
    assert sorted(pd) == ["sglang decode", "sglang prefill", "sglang router", "vllm decode", "vllm prefill"]
    assert pd["vllm prefill"].endswith("""--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'""")
    assert pd["sglang prefill"].endswith("--disaggregation-mode prefill")
    assert pd["sglang decode"].endswith("--disaggregation-mode decode")
    assert pd["sglang router"].startswith("python -m sglang_router.launch_router --pd-disaggregation --prefill ")


def test_plan_searches_the_new_shapes_and_sizes_disaggregated_units():
    """A disaggregated 1P1D unit of 2 GPUs at 150 requests/s of 10-token requests (unit mode): one unit's
    decode pool carries at most 800 / 9 = 88.9/s (x 1.25 slack: 111), so the search starts at 2 units."""
    w = unit_workload("l40s", model=dict(TINY_MODEL, num_layers=2))
    space = SearchSpace(("l40s",), 8, tp=(1,), weights=("fp16",), kv_cache=("fp16",), max_num_seqs=(8,),
                        max_num_batched_tokens=(4096,), shapes=("aggregated", "pp", "disaggregated"), pp=(2,),
                        splits=((1, 1),))
    res = plan(w, parse_objectives(["ttft_p99_ms=100"]), space, rate=150.0, workers=1, front_within=math.inf,
               requests=400)
    rows = {r["shape"]: r for r in res.frame.to_dict("records")}
    assert sorted(rows) == ["aggregated", "disaggregated", "pp"]
    d = rows["disaggregated"]
    assert d["min_replicas"] == 2 and d["status"] == "meets SLOs" and d["gpus"] == 2 * d["replicas"]
    assert res.winner["shape"] == "aggregated"  # one GPU per replica beats two per unit at the same decode rate


def test_winner_is_the_cheapest_feasible_and_the_cost_bound_keeps_it():
    full = unit_plan(front_within=math.inf)
    rows = full.frame.to_dict("records")
    feasible = [r for r in rows if r["status"] == "meets SLOs"]
    assert len(feasible) == 16 and full.pruned["cost"] == 0  # every survivor searched to its fewest replicas
    assert full.winner["usd_per_hour"] == min(r["usd_per_hour"] for r in feasible)
    assert (full.winner["gpu"], full.winner["tp"]) == ("l40s", 1) and full.winner["replicas"] >= 2
    quick = unit_plan()
    assert quick.winner["candidate"] == full.winner["candidate"] and quick.winner["replicas"] == full.winner["replicas"]
    assert quick.pruned["cost"] >= 1 and len(quick.points) < len(full.points)
    assert quick.launch["vllm"].startswith("vllm serve tiny --tensor-parallel-size 1 --max-num-seqs 8 ")
    assert not quick.front.empty and quick.front["on_gpu_front"].any()
    # the same tp-1 l40s deployment at one replica fewer misses
    fewer = [p for p in full.points.to_dict("records") if p["combination"] == full.winner["candidate"]
             and p["role"] == f"{full.winner['replicas'] - 1} replicas"]
    assert all(not p["slo_met"] for p in fewer)


def test_no_candidate_meets_is_a_verdict_with_the_closest():
    # E2E latency has no bound: every survivor is simulated, and a 10-step request cannot finish in 50 ms.
    calls = []
    res = plan(unit_workload("l40s"), parse_objectives(["e2el_p99_ms=50"]), SearchSpace(("l40s",), 2, tp=(1,)),
               rate=40.0, workers=1, requests=400, progress=lambda done, total: calls.append((done, total)))
    assert calls and all(d <= t for d, t in calls) and calls[-1][0] == len(res.points)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert res.winner is None and res.launch is None and res.front.empty
    assert res.closest is not None and res.closest["binding"] == "p99_e2el_ms" and res.closest["binding_ratio"] > 1
    assert "No deployment meets every SLO" in " ".join(res.explain)


def test_plan_refuses_bad_targets():
    with pytest.raises(CapsimError, match="--rate"):
        unit_plan(rate=-1.0)
    with pytest.raises(CapsimError, match="no objective"):
        plan(unit_workload("l40s"), parse_objectives([]), UNIT_SPACE, rate=10.0)
    with pytest.raises(CapsimError, match="--front-within"):
        unit_plan(front_within=0.5)
