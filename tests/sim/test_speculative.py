"""Speculative decoding: the token schedule, and its effect on steps, TPOT and step cost."""

import pytest
from capsim.api import simulate
from capsim.sim.speculative import TokenSchedule, expected_tokens
from helpers import workload


def test_expected_tokens_per_step():
    # Leviathan et al. 2023, eq. 1: (1 - a^(k+1)) / (1 - a)
    assert expected_tokens(3, 0.8) == pytest.approx((1 - 0.8**4) / 0.2)
    assert expected_tokens(4, 1.0) == 5.0
    assert expected_tokens(1, 0.5) == pytest.approx(1.5)


def test_schedule_is_whole_tokens_with_the_right_mean():
    s = TokenSchedule.for_speculation(1, 0.5)  # 1.5 tokens a step: 1, 2, 1, 2, ...
    assert [s.total(j) for j in range(7)] == [0, 1, 3, 4, 6, 7, 9]
    assert s.ahead(2, 3) == s.total(5) - s.total(2) == 4
    assert s.steps_for(0, 6) == 4 and s.steps_for(1, 1) == 1 and s.steps_for(0, 7) == 5
    assert TokenSchedule().single and s.total(1000) == 1500


def test_unit_steps_with_two_tokens_a_step(round_gpu_file):
    # one draft token always accepted: 2 tokens per verification step. 10 output tokens: the
    # prefill step gives the first, then 9 more in 5 steps (the last one keeps 1 of its 2).
    w = workload(round_gpu_file, mode="unit", requests=1, arrivals={"kind": "all_at_once"},
                 prompt_tokens={"dist": "fixed", "value": 16}, output_tokens={"dist": "fixed", "value": 10},
                 speculative={"draft_tokens": 1, "acceptance_rate": 1.0})
    r = simulate(w)
    row = r.requests.iloc[0]
    assert r.summary["num_steps"] == 6 and row["generated_tokens"] == 10
    assert row["ttft_ms"] == 1000.0 and row["e2el_ms"] == 6000.0
    assert row["tpot_ms"] == pytest.approx(5000.0 / 9)
    assert list(r.steps["decode_tokens"]) == [0, 2, 2, 2, 2, 1]  # tokens gained per step (the last keeps 1)


def test_speculation_cuts_tpot_and_the_draft_costs_time(round_gpu_file):
    base = dict(requests=1, arrivals={"kind": "all_at_once"}, prompt_tokens={"dist": "fixed", "value": 500},
                output_tokens={"dist": "fixed", "value": 200})
    plain = simulate(workload(round_gpu_file, **base)).summary
    spec = simulate(workload(round_gpu_file, speculative={"draft_tokens": 3, "acceptance_rate": 0.8}, **base)).summary
    assert spec["num_steps"] < plain["num_steps"] / 2.5  # ~2.95 tokens a step
    assert spec["mean_tpot_ms"] < plain["mean_tpot_ms"] / 2
    drafted = simulate(workload(round_gpu_file, speculative={"draft_tokens": 3, "acceptance_rate": 0.8,
                                                             "draft_model": "llama-2-7b"}, **base)).summary
    assert drafted["num_steps"] == spec["num_steps"] and drafted["mean_tpot_ms"] > spec["mean_tpot_ms"]


@pytest.mark.parametrize("draft", [None, "llama-2-7b"])
def test_speculative_macro_steps_are_exact(round_gpu_file, draft):
    w = workload(round_gpu_file, speculative={"draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": draft},
                 num_gpu_blocks=200)
    macro, step = simulate(w), simulate(w, macro_steps=False)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.equals(step.requests) and macro.steps.equals(step.steps)
    assert macro.summary["completed"] == 40


@pytest.mark.parametrize("block_size", [1, 16])
def test_tokens_a_finishing_sequence_does_not_want_are_neither_stored_nor_counted(round_gpu_file, block_size):
    # 2.77 tokens a step: most requests finish part-way through their last step's tokens
    w = workload(round_gpu_file, speculative={"draft_tokens": 4, "acceptance_rate": 0.7}, requests=60,
                 scheduler={"kind": "continuous", "max_num_seqs": 8, "block_size": block_size})
    r = simulate(w)
    steps, reqs = r.steps, r.requests
    assert (steps["kv_stored_tokens"] <= steps["kv_held_tokens"]).all()
    # the prefill step emits each request's first token without storing it
    produced = steps["prefill_tokens"].sum() + steps["decode_tokens"].sum()
    assert produced == reqs["prompt_tokens"].sum() + reqs["generated_tokens"].sum() - len(reqs)
    assert r.summary["kv_utilisation"] <= 1.0


def test_blocks_promised_for_unwanted_speculative_tokens_come_back(round_gpu_file):
    # 4 tokens a step (3 drafts, all accepted), blocks of 1 token. A request wanting 3 tokens gets
    # its first from the prefill and 4 more in one step, 2 of them unwanted: the 4 blocks promised
    # for that step are counted, and the 2 for the unwanted tokens come back when it finishes, so
    # the next request starts from an empty cache (they stayed promised: the KV shrank for good,
    # and a closed loop ran out of memory with nothing running and stalled).
    w = workload(round_gpu_file, requests=3, arrivals={"kind": "constant", "rate_per_s": 100.0},
                 prompt_tokens={"dist": "fixed", "value": 10}, output_tokens={"dist": "fixed", "value": 3},
                 scheduler={"kind": "continuous", "max_num_seqs": 8, "block_size": 1},
                 speculative={"draft_tokens": 3, "acceptance_rate": 1.0})
    steps = simulate(w).steps
    assert steps["kv_used_units"].tolist() == [10, 14] * 3
