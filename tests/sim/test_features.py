"""Serving features beyond the basics, each against a hand calculation (issue: prefix sharing,
parallel sampling, swap preemption, replicas behind a router)."""

import pytest
from capsim.cost.roofline import CostModel
from capsim.spec.formats import get_format
from capsim.core.plan import StepPlan
from capsim.core.request import Request
from capsim.api import simulate
from helpers import workload


def _trace(tmp_path, rows):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    return {"kind": "trace", "file": str(path)}


def test_ten_users_share_a_2k_system_prompt_once(round_gpu_file, tmp_path, tiny_model, round_gpu):
    # One user warms the cache; at t=1 s nine more arrive together. Each prompt is a 2,048-token
    # system prompt + 100 tokens of its own. Blocks of 16: the prefix is 128 full blocks.
    rows = [(0.0, 100, 1)] + [(1.0, 100, 5)] * 9
    base = dict(arrivals=_trace(tmp_path, rows), requests=None, prompt_tokens={"dist": "trace"},
                output_tokens={"dist": "trace"}, shared_prefix_tokens=2048,
                scheduler={"kind": "continuous", "max_num_seqs": 16, "block_size": 16, "max_num_batched_tokens": 100_000})
    cached = simulate(workload(round_gpu_file, prefix_caching=True, **base))
    plain = simulate(workload(round_gpu_file, **base))
    s = cached.summary
    assert s["prefill_tokens_saved"] == 9 * 2048
    assert s["prefix_cache_hit_rate"] == pytest.approx(9 * 2048 / (10 * 2148))
    block_bytes = 16 * 4000  # 16 tokens x 4,000 B of KV per token (tiny model, fp16)
    assert s["kv_memory_saved_peak_bytes"] == 8 * 128 * block_bytes  # 9 holders of 128 blocks: 8 copies saved
    # TTFT of the nine: one prefill step. With the cache each computes 100 tokens attending to
    # 2,148; without, all 2,148 tokens. The cost model prices both plans.
    cm = CostModel(tiny_model, round_gpu, get_format("fp16"), get_format("fp16"))
    hit = [Request(i, 1.0, 2148, 5, computed_tokens=2048) for i in range(9)]
    miss = [Request(i, 1.0, 2148, 5) for i in range(9)]
    ttft_hit = cm.step_cost(StepPlan(scheduled=hit, new_tokens=[100] * 9)).seconds * 1e3
    ttft_miss = cm.step_cost(StepPlan(scheduled=miss, new_tokens=[2148] * 9)).seconds * 1e3
    late = lambda r: r.requests[r.requests["arrival_s"] == 1.0]["ttft_ms"]  # noqa: E731
    assert late(cached).to_numpy() == pytest.approx([ttft_hit] * 9, rel=1e-9)
    assert late(plain).to_numpy() == pytest.approx([ttft_miss] * 9, rel=1e-9)
    assert ttft_hit * 10 < ttft_miss


def test_multi_turn_sessions_hit_their_own_history(round_gpu_file):
    w = workload(round_gpu_file, prefix_caching=True, requests=40, prompt_tokens={"dist": "fixed", "value": 64},
                 output_tokens={"dist": "fixed", "value": 32},
                 arrivals={"kind": "closed_loop", "users": 2, "think_time_s": 0.01, "turns_per_session": 4})
    s = simulate(w).summary
    # turn t of a session resends (t-1) x (64 + 32) tokens of history. The previous turn's last
    # answer token never had its KV computed, so the cache holds history - 1 tokens, of which the
    # full blocks of 4 hit: 92, 188 and 284 tokens in turns 2-4; 10 sessions of 4 turns.
    assert s["prefill_tokens_saved"] == 10 * (92 + 188 + 284)
    assert s["completed"] == 40


def test_parallel_samples_share_the_prompt(round_gpu_file):
    # n = 4 answers of 50 tokens to one 1,000-token prompt, blocks of 16: 62 full prompt blocks
    # are shared; each sample copies the partial block (8 tokens) and grows its own.
    w = workload(round_gpu_file, samples=4, requests=1, arrivals={"kind": "all_at_once"},
                 prompt_tokens={"dist": "fixed", "value": 1000}, output_tokens={"dist": "fixed", "value": 50},
                 scheduler={"kind": "continuous", "max_num_seqs": 8, "block_size": 16})
    r = simulate(w)
    s = r.summary
    assert s["completed"] == 1 and s["total_output_tokens"] == 4 * 50
    # at the end each sample holds 1,049 tokens = 66 blocks; physically 62 + 4 x 4 = 78
    assert r.steps["kv_used_units"].max() == 62 + 4 * (66 - 62)
    assert s["kv_memory_saved_peak_bytes"] == 3 * 62 * 16 * 4000
    assert r.requests.loc[0, "samples"] == 4 and r.requests.loc[0, "generated_tokens"] == 50
    assert s["num_steps"] == 50  # one prefill step (all four first tokens) + 49 decode steps


def test_swap_preemption_moves_bytes_instead_of_recomputing(round_gpu_file, tmp_path):
    # 10 blocks of 4 tokens; two requests of 12 prompt + 20 output tokens. Each needs 8 blocks at
    # the end, so they cannot both finish together. At token 21 both need a 6th block with 0
    # free: the newer one is preempted holding 20 tokens = 5 blocks = 5 x 4 x 4,000 B.
    base = dict(num_gpu_blocks=10, requests=2, arrivals={"kind": "all_at_once"},
                prompt_tokens={"dist": "fixed", "value": 12}, output_tokens={"dist": "fixed", "value": 20})
    swap = simulate(workload(round_gpu_file, scheduler={"kind": "continuous", "block_size": 4, "preemption": "swap"},
                             **base)).summary
    recompute = simulate(workload(round_gpu_file, scheduler={"kind": "continuous", "block_size": 4}, **base)).summary
    assert swap["preemptions"] == recompute["preemptions"] == 1
    assert swap["swapped_bytes"] == 2 * 5 * 4 * 4000  # out, then back in
    assert swap["recomputed_tokens"] == 0 and recompute["recomputed_tokens"] == 20
    assert recompute["swapped_bytes"] == 0
    assert swap["completed"] == recompute["completed"] == 2


def test_swap_space_full_falls_back_to_recompute(round_gpu_file):
    w = workload(round_gpu_file, scheduler={"kind": "continuous", "block_size": 4, "preemption": "swap"},
                 swap_space_gib=1e-9, num_gpu_blocks=10, requests=2, arrivals={"kind": "all_at_once"},
                 prompt_tokens={"dist": "fixed", "value": 12}, output_tokens={"dist": "fixed", "value": 20})
    s = simulate(w).summary
    assert s["swapped_bytes"] == 0 and s["recomputed_tokens"] == 20


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv"])
def test_replicas_split_the_load(round_gpu_file, router):
    fixed = dict(arrivals={"kind": "all_at_once"}, prompt_tokens={"dist": "fixed", "value": 100},
                 output_tokens={"dist": "fixed", "value": 20})
    three = simulate(workload(round_gpu_file, replicas=3, router=router, requests=30, **fixed)).summary
    one = simulate(workload(round_gpu_file, requests=10, **fixed)).summary
    assert three["completed_per_replica"] == [10, 10, 10]
    # identical requests split evenly: each replica does exactly what one does with 10
    assert three["duration"] == pytest.approx(one["duration"], rel=1e-12)
    assert three["output_throughput"] == pytest.approx(3 * one["output_throughput"], rel=1e-9)


def test_least_outstanding_avoids_the_busy_replica(round_gpu_file, tmp_path):
    rows = [(0.0, 100, 400), (0.0, 100, 2), (0.001, 100, 2), (0.002, 100, 2), (0.003, 100, 2)]
    base = dict(replicas=2, arrivals=_trace(tmp_path, rows), requests=None, prompt_tokens={"dist": "trace"},
                output_tokens={"dist": "trace"})
    rr = simulate(workload(round_gpu_file, router="round_robin", **base)).requests
    lo = simulate(workload(round_gpu_file, router="least_outstanding", **base)).requests
    assert list(rr["replica"]) == [0, 1, 0, 1, 0]
    assert list(lo["replica"]) == [0, 1, 1, 1, 1]  # replica 0 is busy with the long answer


def test_prefix_hits_survive_swapped_requests_coming_back(round_gpu_file):
    """Prefix caching with swapping, 9 requests at once on 500 one-token blocks: a step that
    admits a swapped-out request and one whose prefix is cached maps the cached blocks before
    the swapped KV takes fresh blocks, which can evict cached ones (the other order evicted
    the very blocks the plan had counted as hits, and the run failed)."""
    w = workload(round_gpu_file, prefix_caching=True, shared_prefix_tokens=8, num_gpu_blocks=500, requests=9,
                 scheduler={"kind": "continuous", "max_num_seqs": 4, "block_size": 1, "preemption": "swap"},
                 arrivals={"kind": "all_at_once"}, prompt_tokens={"dist": "uniform", "min": 1, "max": 120},
                 output_tokens={"dist": "uniform", "min": 1, "max": 250}, seed=0)
    macro, step = simulate(w), simulate(w, macro_steps=False)
    s = macro.summary
    assert s["completed"] == 9 and s["swapped_bytes"] > 0 and s["prefill_tokens_saved"] > 0
    assert macro.summary_json() == step.summary_json()


@pytest.mark.parametrize("case", ["prefix", "samples", "swap", "replicas"])
def test_features_keep_macro_steps_exact(round_gpu_file, case):
    fields = {
        "prefix": dict(prefix_caching=True, shared_prefix_tokens=64,
                       arrivals={"kind": "closed_loop", "users": 4, "think_time_s": 0.0005, "turns_per_session": 3}),
        "samples": dict(samples=3, num_gpu_blocks=300),
        "swap": dict(num_gpu_blocks=60, scheduler={"kind": "continuous", "max_num_seqs": 16, "block_size": 4,
                                                   "preemption": "swap"}),
        "replicas": dict(replicas=3, router="least_kv"),
    }[case]
    w = workload(round_gpu_file, **fields)
    macro, step = simulate(w), simulate(w, macro_steps=False)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests) and macro.steps.equals(step.steps)


def test_a_replayed_prompt_set_hits_the_cache_from_its_second_pass(round_gpu_file):
    """prompt_set 10, 30 requests one after another (one closed-loop user): request i re-sends
    prompt i mod 10 with its lengths, so the first 10 compute their prompts and the other 20 map
    every full block but the last token's (vLLM leaves one token to compute). Block size 4:
    a prompt of p tokens saves 4 * ((p - 1) // 4) tokens each time it comes round again."""
    w = workload(round_gpu_file, prefix_caching=True, prompt_set=10, requests=30,
                 arrivals={"kind": "closed_loop", "users": 1, "think_time_s": 0.0})
    run = simulate(w)
    r = run.requests.sort_values("request_id")
    prompts = list(r["prompt_tokens"])
    assert prompts[10:] == prompts[:10] * 2 and list(r["output_tokens"])[10:20] == list(r["output_tokens"])[:10]
    assert run.summary["prefill_tokens_saved"] == 2 * sum(4 * ((p - 1) // 4) for p in prompts[:10])
    cold = simulate(workload(round_gpu_file, prefix_caching=True, prompt_set=10, requests=10,
                             arrivals={"kind": "closed_loop", "users": 1, "think_time_s": 0.0}))
    assert cold.summary["prefill_tokens_saved"] == 0  # one pass: nothing sent twice
    warm = simulate(workload(round_gpu_file, prefix_caching=True, prompt_set=10, prompt_set_cached=True, requests=10,
                             arrivals={"kind": "closed_loop", "users": 1, "think_time_s": 0.0}))
    assert warm.summary["prefill_tokens_saved"] == sum(4 * ((p - 1) // 4) for p in prompts[:10])  # sent before


def test_a_cached_prompt_set_larger_than_the_cache_keeps_its_newest_prompts(round_gpu_file):
    """Warming more prompt blocks than the KV cache holds evicts the oldest first, as a
    least-recently-used cache would have after the earlier pass. 41-token prompts fill 10 blocks
    of 4 (each request takes 11). With 150 blocks all 10 prompts stay cached and every request
    maps its 10 blocks. With 60 only prompts 4-9 are left when the run begins, and sending 0-3
    again evicts 4-8 before their turn: a set sent in order that the cache cannot hold finds
    nothing (had the oldest prompts been kept, requests 0-5 would have hit)."""
    fixed = dict(prompt_tokens={"dist": "fixed", "value": 41}, output_tokens={"dist": "fixed", "value": 1})

    def saved(blocks: int) -> int:
        w = workload(round_gpu_file, prefix_caching=True, prompt_set=10, prompt_set_cached=True, requests=10,
                     num_gpu_blocks=blocks, arrivals={"kind": "closed_loop", "users": 1, "think_time_s": 0.0}, **fixed)
        return simulate(w).summary["prefill_tokens_saved"]

    assert saved(150) == 10 * 40
    assert saved(60) == 0


@pytest.mark.parametrize("arrivals", [{"kind": "poisson", "rate_per_s": 1000.0},
                                      {"kind": "closed_loop", "users": 3, "think_time_s": 0.0}])
def test_a_replayed_prompt_set_keeps_macro_steps_exact(round_gpu_file, arrivals):
    w = workload(round_gpu_file, prefix_caching=True, prompt_set=7, prompt_set_cached=True, arrivals=arrivals)
    macro, step = simulate(w), simulate(w, macro_steps=False)
    assert macro.summary["prefill_tokens_saved"] > 0
    assert macro.summary_json() == step.summary_json() and macro.requests.equals(step.requests)


def test_a_cached_prompt_set_starts_the_same_however_the_run_ends(round_gpu_file):
    """The earlier pass sent the whole set, so the cache holds its newest prompts that fit whether
    this run stops after a count of requests or after a duration (a 10-prompt set of 10 blocks
    each in 60 blocks: prompts 4-9, which sending 0-3 first evicts, so neither run finds any)."""
    fixed = dict(prompt_tokens={"dist": "fixed", "value": 41}, output_tokens={"dist": "fixed", "value": 1},
                 prefix_caching=True, prompt_set=10, prompt_set_cached=True, num_gpu_blocks=60)
    loop = {"kind": "closed_loop", "users": 1, "think_time_s": 0.0}
    counted = simulate(workload(round_gpu_file, requests=10, arrivals=loop, **fixed)).summary
    timed = simulate(workload(round_gpu_file, requests=None, duration_s=0.05, arrivals=loop, **fixed)).summary
    assert counted["prefill_tokens_saved"] == timed["prefill_tokens_saved"] == 0
    fits = fixed | {"num_gpu_blocks": 150}  # the whole set fits: every request finds its 40 tokens
    counted = simulate(workload(round_gpu_file, requests=10, arrivals=loop, **fits)).summary
    timed = simulate(workload(round_gpu_file, requests=None, duration_s=0.05, arrivals=loop, **fits)).summary
    assert counted["prefill_tokens_saved"] == 10 * 40 and timed["prefill_tokens_saved"] == 40 * timed["completed"]


def test_a_cached_prompt_set_too_big_to_simulate_is_refused_with_the_reason(round_gpu_file, monkeypatch):
    from capsim.errors import CapsimError
    from capsim.spec import limits

    monkeypatch.setattr(limits, "MAX_CACHED_BLOCKS_AT_START", 50)  # the set leaves 100 blocks (10 x 10)
    w = workload(round_gpu_file, prompt_tokens={"dist": "fixed", "value": 41}, output_tokens={"dist": "fixed", "value": 1},
                 prefix_caching=True, prompt_set=10, prompt_set_cached=True, num_gpu_blocks=200, requests=10)
    with pytest.raises(CapsimError, match=r"field 'prompt_set_cached'.*more than 50 KV blocks.*fewer replicas"):
        simulate(w)
