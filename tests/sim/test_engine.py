"""The SimPy engine end to end: the documents' examples, hand-computed timings, macro-steps equal
to step-by-step, accounting, determinism."""


import numpy as np
import pytest
from capsim.api import simulate
from helpers import workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def test_seed_example_static_17_steps_continuous_12(round_gpu_file):
    lengths = {"dist": "sequence", "values": [9, 3, 4, 2, 8, 3, 5, 6]}
    w = workload(round_gpu_file, mode="unit", arrivals={"kind": "all_at_once"}, requests=8,
                 prompt_tokens={"dist": "fixed", "value": 16}, output_tokens=lengths,
                 scheduler={"kind": "continuous", "max_num_seqs": 4})
    static = simulate(w, scheduler="static").summary
    continuous = simulate(w).summary
    assert static["num_steps"] == 17 and static["slot_utilisation"] == pytest.approx(40 / 68)
    assert continuous["num_steps"] == 12 and continuous["slot_utilisation"] == pytest.approx(40 / 48)
    assert round(100 * static["slot_utilisation"]) == 59 and round(100 * continuous["slot_utilisation"]) == 83


def test_lone_request_timing_by_hand(round_gpu_file):
    # Tiny model on the round GPU (1 TB/s, 100 TFLOPS, efficiency 1, no overheads), one request of
    # 1000 prompt tokens and 5 output tokens. Weights: 13e6 params x 2 bytes = 26e6 bytes, of
    # which the embedding lookup is not read: (4e6 attention + 8e6 MLP + 1e6 LM head) x 2 = 26 us.
    # Prefill: 2 x 12e6 x 1000 + 2 x 1e6 FLOPs = 24.002 GFLOP -> 240.02 us (compute-bound; with the 26 us
    #   of weight reads, their 4-norm: 240.028 us);
    #   attention 4000 FLOPs per (token, position) x 500,500 pairs = 20.02 us vs 8e6 KV bytes = 8 us.
    # Decode at context c: 26 us of weights + (c + 2) x 4000 KV bytes (read c+1, write 1).
    w = workload(round_gpu_file, arrivals={"kind": "all_at_once"}, requests=1,
                 prompt_tokens={"dist": "fixed", "value": 1000}, output_tokens={"dist": "fixed", "value": 5})
    r = simulate(w)
    prefill_s = ((240.02e-6) ** 4 + (26e-6) ** 4) ** 0.25 + 20.02e-6
    decodes_s = sum(26e-6 + (c + 2) * 4000 / 1e12 for c in range(1000, 1004))
    row = r.requests.iloc[0]
    assert row["ttft_ms"] == pytest.approx(prefill_s * 1e3, rel=1e-9)
    assert row["e2el_ms"] == pytest.approx((prefill_s + decodes_s) * 1e3, rel=1e-9)
    assert row["queueing_ms"] == 0.0
    assert r.summary["num_steps"] == 5


def _both(w, **kw):
    return simulate(w, macro_steps=True, **kw), simulate(w, macro_steps=False, **kw)


CASES = {
    "continuous-paged": {},
    "chunked-paged": {"scheduler": {"kind": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 64, "block_size": 4}},
    "static-contiguous": {"scheduler": {"kind": "static", "max_num_seqs": 6, "block_size": 4}},
    "continuous-contiguous": {"allocator": "contiguous", "max_model_len": 300},
    "preempting": {"num_gpu_blocks": 60, "scheduler": {"kind": "chunked", "max_num_seqs": 16, "block_size": 4}},
    "bursty": {"arrivals": {"kind": "gamma", "rate_per_s": 400.0, "burstiness": 0.2}},
    "slow-arrivals": {"arrivals": {"kind": "poisson", "rate_per_s": 50.0}},
    "closed-loop": {"arrivals": {"kind": "closed_loop", "users": 5, "think_time_s": 0.001}},
    "closed-loop-no-think": {"arrivals": {"kind": "closed_loop", "users": 3, "think_time_s": 0.0}},
    "horizon": {"horizon_s": 0.01},
    "classes": {"prompt_tokens": None, "output_tokens": None, "classes": [
        {"name": "a", "weight": 3, "prompt_tokens": {"dist": "fixed", "value": 50}, "output_tokens": {"dist": "fixed", "value": 30}},
        {"name": "b", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 900}, "output_tokens": {"dist": "uniform", "min": 1, "max": 9}}]},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_macro_steps_equal_step_by_step(round_gpu_file, case):
    w = workload(round_gpu_file, **CASES[case])
    macro, step = _both(w)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests)
    assert macro.steps.equals(step.steps)
    assert macro.summary["num_steps"] > 0


@pytest.mark.parametrize("horizon_s", [None, 6.0, 7.0, 12.0])
def test_ties_of_arrivals_step_ends_and_horizon_resolve_as_step_by_step(round_gpu_file, horizon_s):
    """Unit mode: every step takes 1 s and a request arrives every second, so arrivals, step ends
    and the horizon fall on the same instants. Pulled arrivals with the clock moved by the step
    loop order them as SimPy does step by step: arrivals first, the horizon before anything at it."""
    w = workload(round_gpu_file, mode="unit", arrivals={"kind": "constant", "rate_per_s": 1.0}, requests=8,
                 prompt_tokens={"dist": "fixed", "value": 16}, output_tokens={"dist": "sequence", "values": [3, 1, 4, 2]},
                 scheduler={"kind": "continuous", "max_num_seqs": 2}, horizon_s=horizon_s)
    macro, step = _both(w)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests) and macro.steps.equals(step.steps)
    if horizon_s is not None:
        assert macro.summary["duration"] == horizon_s and (macro.steps["end_s"] < horizon_s).all()


def test_closed_loop_replicas_see_sends_made_during_their_macro_steps(round_gpu_file):
    """Issue 19's scenario on the tiny model: four replicas, 12 users thinking 2 ms. A request
    finishing on one replica makes its user's next send while the others are in macro-steps
    planned without it; each of those ends with the step the send can join, as single steps do.
    (Macro-steps that ran on to their planned end left the newcomer waiting: mean TTFT 0.44 ms
    against the reference's 0.24.)"""
    w = workload(round_gpu_file, replicas=4, router="round_robin", num_gpu_blocks=100_000, max_model_len=16384,
                 scheduler={"kind": "chunked", "max_num_seqs": 256, "max_num_batched_tokens": 2048},
                 arrivals={"kind": "closed_loop", "users": 12, "think_time_s": 0.002},
                 prompt_tokens={"dist": "lognormal", "mean": 600, "sigma": 0.9, "max": 6000},
                 output_tokens={"dist": "lognormal", "mean": 250, "sigma": 0.8, "max": 1500}, requests=40, seed=3)
    macro, step = _both(w)
    assert macro.summary["mean_ttft_ms"] == step.summary["mean_ttft_ms"]
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests) and macro.steps.equals(step.steps)
    assert macro.events < step.events  # still in macro-steps


def test_queue_lengths_count_only_sends_that_arrive(round_gpu_file):
    """Two requests in all: when request 0 ends, its user's next send stops the user instead of
    arriving, so the static batch of request 1 runs with an empty queue (a macro-step counted
    the pending send as a queued request)."""
    w = workload(round_gpu_file, requests=2, scheduler={"kind": "static", "max_num_seqs": 1, "block_size": 4},
                 arrivals={"kind": "closed_loop", "users": 2, "think_time_s": 0.0001, "think_time_dist": "fixed"},
                 prompt_tokens={"dist": "fixed", "value": 10}, output_tokens={"dist": "sequence", "values": [2, 50]})
    macro, step = _both(w)
    assert macro.steps.equals(step.steps)
    # user 1 starts 50 us in (the ramp: one think time over two users), during request 0's first step
    assert macro.steps["waiting"].tolist() == [0, 1] + [0] * 50


def test_one_order_for_what_happens_at_one_instant(round_gpu_file):
    """Unit mode, three replicas in lockstep, users without think time: at 2 ms replica 1's
    request finishes and its user's next request goes to replica 0, whose step ends at the same
    instant. Sends made at an instant arrive after every step ending then, whichever replica's
    step SimPy happens to run first (that order followed when each wait was made, which differs
    between a macro-step and single steps), so replica 0's step records an empty queue."""
    w = workload(round_gpu_file, mode="unit", unit_step_s=0.001, replicas=3, allocator="contiguous",
                 num_gpu_blocks=4096, max_model_len=2048, requests=None, duration_s=0.01,
                 scheduler={"kind": "static", "max_num_seqs": 1, "block_size": 1},
                 arrivals={"kind": "closed_loop", "users": 3, "think_time_s": 0.0},
                 prompt_tokens={"dist": "uniform", "min": 1, "max": 60}, output_tokens={"dist": "uniform", "min": 1, "max": 20},
                 seed=0)
    macro, step = _both(w)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests) and macro.steps.equals(step.steps)
    at_2ms = macro.steps[macro.steps["end_s"] == 0.002]
    assert at_2ms["replica"].tolist() == [0, 1, 2] and at_2ms["waiting"].tolist() == [0, 0, 0]
    assert macro.requests.loc[3, ["arrival_s", "replica"]].tolist() == [0.002, 0]


def test_a_send_made_at_a_plan_reaches_replicas_that_planned_earlier_at_their_next_step(round_gpu_file):
    """Unit mode, two replicas, users without think time. Replica 1 prefills a 48-token prompt
    in 16-token chunks, and at 3 ms, its budget free again, reaches the 204-token request behind
    it and rejects it (max_model_len 150). The user's next request goes to replica 0, which
    planned at 3 ms before replica 1 (the order of an instant), so it joins replica 0's batch at
    4 ms, also when replica 0 is in a macro-step whose steps end at 3 and 4 ms."""
    w = workload(round_gpu_file, mode="unit", unit_step_s=0.001, replicas=2, max_model_len=150, requests=7,
                 scheduler={"kind": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 16, "block_size": 4},
                 arrivals={"kind": "closed_loop", "users": 6, "think_time_s": 0.0},
                 prompt_tokens={"dist": "sequence", "values": [4, 48, 4, 4, 4, 200, 4]},
                 output_tokens={"dist": "sequence", "values": [100, 100, 100, 100, 100, 5, 5]})
    macro, step = _both(w)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests) and macro.steps.equals(step.steps)
    r = macro.requests
    assert r.loc[5, "outcome"] == "rejected" and r.loc[5, "replica"] == 1
    assert r.loc[6, ["arrival_s", "replica", "first_scheduled_s"]].tolist() == [0.003, 0, 0.004]


def test_closed_loop_users_ramp_in_and_their_first_requests_are_marked(round_gpu_file):
    # 4 users thinking 4 ms start 1 ms apart (a ramp of one think time); each user's first
    # request is marked, for measurement windows that leave the first wave out
    w = workload(round_gpu_file, requests=12,
                 arrivals={"kind": "closed_loop", "users": 4, "think_time_s": 0.004, "think_time_dist": "fixed"})
    r = simulate(w).requests
    first = r[r["first_of_user"]]
    assert first["request_id"].tolist() == first["user"].tolist() == [0, 1, 2, 3]
    assert first["arrival_s"].tolist() == [0.0, 0.001, 0.002, 0.003]
    later = r[~r["first_of_user"]]
    assert len(later) == 8 and (later["arrival_s"] >= 0.004).all()
    assert not simulate(workload(round_gpu_file, requests=5)).requests["first_of_user"].any()  # open loop


def test_events_count_the_engines_waits(round_gpu_file):
    """RunResult.events: step by step, an event per forward pass and per arrival; with macro-steps
    (one replica, arrivals pulled by the step loop), one per wait of the step loop: a step with a
    prefill, a decode macro-step or an idle wait."""
    w = workload(round_gpu_file, **CASES["slow-arrivals"])
    macro, step = _both(w)
    passes, arrived = step.summary["num_steps"], step.summary["arrived"]
    assert step.events >= passes + arrived
    prefills = int((macro.steps["prefill_tokens"] > 0).sum())
    assert prefills < macro.events < passes // 2


# Random small workloads: every scheduler and allocator, block sizes 1/4/16, memory from tight
# (preemption) to plenty, Poisson or bursty arrivals, with and without a horizon.
RANDOM = dict(
    kind=st.sampled_from(["static", "continuous", "chunked"]),
    allocator=st.sampled_from(["paged", "contiguous"]),
    block_size=st.sampled_from([1, 4, 16]),
    blocks=st.integers(20, 400),
    rate=st.floats(10, 5000),
    burstiness=st.sampled_from([None, 0.2, 4.0]),
    seed=st.integers(0, 1000),
    horizon=st.one_of(st.none(), st.floats(0.001, 0.05)),
)


def _random_workload(gpu_file, kind, allocator, block_size, blocks, rate, burstiness, seed, horizon):
    arrivals = {"kind": "poisson", "rate_per_s": rate} if burstiness is None else \
        {"kind": "gamma", "rate_per_s": rate, "burstiness": burstiness}
    return workload(gpu_file, scheduler={"kind": kind, "max_num_seqs": 8, "block_size": block_size,
                                         "max_num_batched_tokens": 4096 if kind != "chunked" else 48},
                    allocator=allocator, num_gpu_blocks=blocks * 4 // block_size if allocator == "paged" else blocks * 4,
                    arrivals=arrivals, seed=seed, horizon_s=horizon, max_model_len=4096)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**RANDOM)
def test_random_workloads_macro_steps_equal_step_by_step(round_gpu_file, **params):
    # Macro-steps (arrivals taken by the step loop) against the plain reference (one event per
    # step and per arrival): every record identical.
    macro, step = _both(_random_workload(round_gpu_file, **params))
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests)
    assert macro.steps.equals(step.steps)


def test_preempting_case_really_preempts(round_gpu_file):
    w = workload(round_gpu_file, **CASES["preempting"])
    s = simulate(w).summary
    assert s["preemptions"] > 0 and s["recomputed_tokens"] > 0
    assert s["completed"] + s["rejected"] + s["unfinished"] == s["arrived"] == 40


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**RANDOM)
def test_accounting_and_time_properties(round_gpu_file, **params):
    w = _random_workload(round_gpu_file, **params)
    blocks, block_size, allocator, horizon = params["blocks"], params["block_size"], params["allocator"], params["horizon"]
    r = simulate(w)
    s = r.summary
    assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"]
    assert s["arrived"] == len(r.requests)
    if horizon is None:
        assert s["unfinished"] == 0  # everything drains without a horizon
    ends = r.steps["end_s"].to_numpy()
    assert np.all(np.diff(ends) >= 0) and np.all(r.steps["duration_s"] > 0)
    capacity = blocks * 4 // block_size if allocator == "paged" else blocks * 4
    assert (r.steps["kv_used_units"] <= capacity).all()  # (no steps at all when everything is rejected)
    assert (r.steps["kv_stored_tokens"] <= r.steps["kv_held_tokens"]).all()  # a stored token holds a slot
    done = r.requests[r.requests["outcome"] == "completed"]
    assert np.all(done["first_token_s"] >= done["arrival_s"]) and np.all(done["finish_s"] >= done["first_token_s"])
    assert np.all(done["generated_tokens"] == done["output_tokens"])


def test_far_below_capacity_no_queueing_far_above_queue_grows(round_gpu_file):
    light = simulate(workload(round_gpu_file, arrivals={"kind": "poisson", "rate_per_s": 5.0})).summary
    assert light["mean_queueing_ms"] == 0.0
    heavy = simulate(workload(round_gpu_file, arrivals={"kind": "poisson", "rate_per_s": 1e6}, requests=200,
                              scheduler={"kind": "continuous", "max_num_seqs": 4})).summary
    assert heavy["mean_queueing_ms"] > 100 * heavy["mean_ttft_ms"] / 200  # requests wait for seats
    assert heavy["p99_ttft_ms"] > 20 * light["p99_ttft_ms"]
    assert heavy["completed"] + heavy["rejected"] + heavy["unfinished"] == heavy["arrived"] == 200


def test_requests_that_can_never_fit_are_rejected_with_reasons(round_gpu_file):
    w = workload(round_gpu_file, max_model_len=300, num_gpu_blocks=40,
                 prompt_tokens={"dist": "sequence", "values": [100, 400, 100, 250]},
                 output_tokens={"dist": "fixed", "value": 10}, requests=4)
    s = simulate(w).summary
    # 400 + 10 > max_model_len 300; 250 + 10 tokens need 65 blocks of 4 > 40 - watermark.
    assert s["rejected_reasons"] == {"exceeds_kv_capacity": 1, "exceeds_max_model_len": 1}
    assert s["completed"] == 2 and s["arrived"] == 4


def test_same_workload_and_seed_give_identical_summary_bytes(round_gpu_file):
    w = workload(round_gpu_file, arrivals={"kind": "gamma", "rate_per_s": 300.0, "burstiness": 0.5})
    assert simulate(w).summary_json() == simulate(w).summary_json()
    assert simulate(w).summary_json() != simulate(w, seed=2).summary_json()


def test_chunked_prefill_protects_chatters_from_a_100k_prompt(tmp_path):
    # 40 chatters stream 40-token answers; a 100K-token prompt arrives among them. Without chunking
    # its prefill is one multi-second step that stalls every chatter once (several % of their
    # gaps); chunked prefill spreads it over ~50 steps of ~0.1 s.
    rows = [(0.01 * i, 200, 40) for i in range(40)] + [(0.2, 100_000, 10)]
    rows.sort()
    (tmp_path / "trace.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    from capsim.spec.config import validate
    from capsim.workload.schema import WorkloadConfig

    w = validate(WorkloadConfig, {
        "model": "llama-3.1-8b", "gpu": "h100-sxm", "weights": "bf16", "max_model_len": 131072,
        "scheduler": {"kind": "chunked", "max_num_batched_tokens": 2048},
        "arrivals": {"kind": "trace", "file": str(tmp_path / "trace.csv")},
        "prompt_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}, "test")
    chunked = simulate(w).summary
    continuous = simulate(w, scheduler="continuous", max_num_batched_tokens=131072).summary
    assert chunked["completed"] == continuous["completed"] == 41
    assert chunked["p99_itl_ms"] * 5 < continuous["p99_itl_ms"]
    assert continuous["p99_itl_ms"] > 1000  # the whole prefill, seen as one gap


def test_progress_reports_finished_requests_and_changes_nothing(round_gpu_file, monkeypatch):
    import capsim.sim.engine

    monkeypatch.setattr(capsim.sim.engine, "PROGRESS_EVERY", 7)
    w = workload(round_gpu_file, requests=300)
    calls = []
    with_progress = simulate(w, progress=lambda done, total: calls.append((done, total)))
    assert len(calls) >= 10 and {total for _, total in calls} == {300}
    finished = [done for done, _ in calls]
    assert finished == sorted(finished) and 0 <= finished[0] and finished[-1] <= 300 and finished[-1] > finished[0]
    assert with_progress.summary_json() == simulate(w).summary_json()
    closed = workload(round_gpu_file, arrivals={"kind": "closed_loop", "users": 4, "think_time_s": 0.01},
                      requests=None, duration_s=5.0)
    calls.clear()
    simulate(closed, progress=lambda done, total: calls.append((done, total)))
    assert calls and {total for _, total in calls} == {None}
