"""Schedulers are pure planners: table-driven tests on (waiting, running, allocator) -> plan."""

from collections import deque

import pytest
from capsim.sim.kv_contiguous import ContiguousAllocator
from helpers import decoding, make_paged, make_request, make_scheduler, running_set


def _hold(kv, *reqs):
    """Give running requests the blocks their computed tokens occupy."""
    for r in reqs:
        computed, r.computed_tokens = r.computed_tokens, 0
        kv.allocate(r, computed)
        r.computed_tokens = computed


def _ids(reqs):
    return [r.id for r in reqs]


@pytest.mark.parametrize(
    "kind, prompts, seqs, budget, admitted",
    [
        ("continuous", [10, 10, 10], 4, 1000, 3),   # all fit
        ("continuous", [10, 10, 10], 2, 1000, 2),   # max_num_seqs caps the batch
        ("continuous", [400, 400, 400], 4, 1000, 2),  # whole prompts must fit the token budget
        ("chunked", [400, 400, 400], 4, 1000, 3),   # chunked: the third gets a 200-token chunk
        ("static", [10, 10, 10, 10, 10], 4, 1000, 4),  # a static batch of max_num_seqs
        ("prefill_first", [400, 400, 400], 4, 1000, 3),  # as chunked: the third gets a 200-token chunk
        ("prefill_first", [10, 10, 10], 2, 1000, 2),  # max_num_seqs caps the batch
    ],
)
def test_admission_limits(kind, prompts, seqs, budget, admitted):
    sched = make_scheduler(kind, max_num_seqs=seqs, max_num_batched_tokens=budget)
    waiting = deque(make_request(p, 5) for p in prompts)
    plan = sched.schedule(waiting, running_set(), make_paged(1000))
    assert len(plan.admitted) == admitted
    assert _ids(plan.admitted) == _ids(list(waiting)[:admitted])  # first come first served
    assert plan.num_tokens <= (budget if kind != "static" else 10**9)


def test_chunked_gives_decodes_first_then_chunks_the_prompt():
    sched = make_scheduler("chunked", max_num_batched_tokens=100)
    running = [decoding(10, 5), decoding(20, 5)]
    kv = make_paged(1000)
    _hold(kv, *running)
    long_prompt = make_request(500, 5)
    plan = sched.schedule(deque([long_prompt]), running_set(*running), kv)
    assert plan.decode_all and plan.num_decodes == 2  # the decoders, in O(1), not listed
    assert plan.scheduled == [long_prompt] and plan.new_tokens == [98]  # the rest of the budget


def test_chunked_continues_a_partial_prefill():
    sched = make_scheduler("chunked", max_num_batched_tokens=100)
    partial = make_request(500, 5, computed=98)
    kv = make_paged(1000)
    _hold(kv, partial)
    plan = sched.schedule(deque(), running_set(partial), kv)
    assert plan.new_tokens == [100] and not plan.decode_only


def test_continuous_prefills_a_whole_prompt_beside_decodes():
    sched = make_scheduler("continuous", max_num_batched_tokens=1000)
    running = [decoding(10, 5)]
    kv = make_paged(1000)
    _hold(kv, *running)
    plan = sched.schedule(deque([make_request(300, 5)]), running_set(*running), kv)
    assert plan.num_decodes == 1 and plan.new_tokens == [300] and plan.num_tokens == 301


def test_prefill_first_runs_prompt_chunks_in_a_step_without_the_decoders():
    sched = make_scheduler("prefill_first", max_num_batched_tokens=100)
    running = [decoding(10, 5), decoding(20, 5)]
    kv = make_paged(1000)
    _hold(kv, *running)
    long_prompt = make_request(500, 5)
    plan = sched.schedule(deque([long_prompt]), running_set(*running), kv)
    assert not plan.decode_all and plan.num_decodes == 0  # SGLang's default: no mixed batches
    assert plan.scheduled == [long_prompt] and plan.new_tokens == [100]  # the whole budget is the prompt's


def test_prefill_first_finishes_a_partial_prompt_before_admitting_and_before_decoding():
    sched = make_scheduler("prefill_first", max_num_batched_tokens=100)
    partial, decoder = make_request(150, 5, computed=98), decoding(10, 5)
    kv = make_paged(1000)
    _hold(kv, partial, decoder)
    newcomer = make_request(30, 5)
    plan = sched.schedule(deque([newcomer]), running_set(decoder, partial), kv)
    assert plan.scheduled == [partial, newcomer] and plan.new_tokens == [52, 30] and plan.num_decodes == 0


def test_prefill_first_decodes_everyone_when_no_prompt_work_is_left():
    sched = make_scheduler("prefill_first", max_num_batched_tokens=100)
    running = [decoding(10, 5), decoding(20, 5)]
    kv = make_paged(1000)
    _hold(kv, *running)
    plan = sched.schedule(deque(), running_set(*running), kv)
    assert plan.decode_all and plan.num_decodes == 2 and not plan.scheduled
    assert plan.decode_only and plan.repeat_steps >= 1


@pytest.mark.parametrize("kind, admitted", [("prefill_first", False), ("chunked", True)])
def test_prefill_first_admits_a_prompt_only_when_memory_holds_all_of_it(kind, admitted):
    # 100 blocks of 16 tokens; a running request holds 50 (800 tokens). A 1,000-token prompt's
    # first 100-token chunk needs 7 blocks, the whole prompt 63: SGLang's PrefillAdder checks the
    # whole input against its budget, so prefill_first waits; vLLM-style chunked takes the chunk.
    sched = make_scheduler(kind, max_num_batched_tokens=100, max_model_len=4096)
    kv = make_paged(num_blocks=100, block_size=16)
    holder = decoding(799, 500)
    _hold(kv, holder)
    assert kv.free_units == 50
    plan = sched.schedule(deque([make_request(1000, 5)]), running_set(holder), kv)
    assert bool(plan.admitted) is admitted
    if not admitted:  # the queue is blocked on memory: the running request decodes meanwhile
        assert plan.num_decodes == 1 and plan.wake_on_arrival is False
    # with 63 blocks free the whole prompt fits, and only its first chunk is taken this step
    small = make_paged(num_blocks=113, block_size=16)
    _hold(small, decoding(799, 500))
    plan = make_scheduler(kind, max_num_batched_tokens=100, max_model_len=4096).schedule(
        deque([make_request(1000, 5)]), running_set(), small)
    assert plan.new_tokens == [100]


def test_prefill_first_decodes_when_the_queue_is_blocked():
    sched = make_scheduler("prefill_first", max_num_seqs=1, max_num_batched_tokens=100)
    decoder = decoding(10, 5)
    kv = make_paged(1000)
    _hold(kv, decoder)
    plan = sched.schedule(deque([make_request(30, 5)]), running_set(decoder), kv)
    assert plan.num_decodes == 1 and not plan.admitted and plan.wake_on_arrival is False


def test_preempts_the_newest_when_blocks_run_out():
    # 3 blocks of 4 tokens; two decoding requests each hold one full block and need a second.
    kv = make_paged(num_blocks=3, block_size=4)
    old, new = decoding(4, 5, generated=1, arrival_s=0.0), decoding(4, 5, generated=1, arrival_s=1.0)
    _hold(kv, old, new)
    kv.allocate(make_request(4, 1, rid=999), 4)  # a third request holds the last block
    kv_free_before = kv.free_units
    assert kv_free_before == 0
    plan = make_scheduler("continuous").schedule(deque(), running_set(old, new), kv)
    assert plan.preempted == [new]
    assert plan.scheduled == [old] and plan.new_tokens == [1] and not plan.decode_all  # the slow path


def test_preempts_itself_when_it_is_the_newest():
    kv = make_paged(num_blocks=1, block_size=4)
    only = decoding(4, 5, generated=1)
    _hold(kv, only)
    plan = make_scheduler("chunked").schedule(deque(), running_set(only), kv)
    assert plan.preempted == [only] and plan.is_empty


@pytest.mark.parametrize(
    "prompt, output, max_model_len, blocks, reason",
    [
        (900, 200, 1000, 1000, "exceeds_max_model_len"),
        (300, 100, 1000, 50, "exceeds_kv_capacity"),   # needs 100 blocks of 4, only 50 exist
        (100, 50, 1000, 1000, None),
    ],
)
def test_rejects_what_can_never_fit(prompt, output, max_model_len, blocks, reason):
    sched = make_scheduler("chunked", max_model_len=max_model_len)
    req = make_request(prompt, output)
    plan = sched.schedule(deque([req]), running_set(), make_paged(blocks))
    if reason is None:
        assert plan.admitted == [req] and not plan.rejected
    else:
        assert plan.rejected == [(req, reason)] and not plan.admitted


def test_static_batch_runs_to_completion_before_newcomers():
    sched = make_scheduler("static", max_num_seqs=2)
    kv = ContiguousAllocator(capacity_tokens=10_000, max_model_len=1000)
    running = [decoding(10, 5)]
    _hold(kv, *running)
    plan = sched.schedule(deque([make_request(10, 5)]), running_set(*running, block_size=1), kv)
    assert plan.num_decodes == 1 and not plan.scheduled and not plan.admitted
    assert plan.slots == 2 and not plan.wake_on_arrival


@pytest.mark.parametrize(
    "outputs_left, blocks, expect",
    [
        ((5, 9), 1000, 5),  # runs until the first request finishes (inclusive)
        # two requests at 4 tokens, blocks of 4, 3 spare: step 1 takes 2 blocks, steps 2-4 fit in
        # them, step 5 would need 2 more with 1 left -> 4 steps
        ((50, 60), 3, 4),
    ],
)
def test_repeat_steps_stop_at_completion_or_memory(outputs_left, blocks, expect):
    kv = make_paged(num_blocks=1000, block_size=4)
    running = [decoding(4, 1 + left, generated=1, rid=100 + i) for i, left in enumerate(outputs_left)]
    _hold(kv, *running)
    spare = kv.free_units - blocks
    kv.allocate(make_request(spare * 4, 1, rid=999), spare * 4)
    plan = make_scheduler("continuous").schedule(deque(), running_set(*running), kv)
    assert plan.decode_only
    assert plan.repeat_steps == expect


def test_repeat_is_off_while_anyone_prefills():
    kv = make_paged(1000)
    running = [decoding(10, 50)]
    _hold(kv, *running)
    plan = make_scheduler("continuous").schedule(deque([make_request(10, 5)]), running_set(*running), kv)
    assert not plan.decode_only and plan.repeat_steps == 1


def test_blocked_queue_does_not_wake_on_arrival():
    kv = make_paged(1000)
    running = [decoding(10, 50, rid=1), decoding(10, 50, rid=2)]
    _hold(kv, *running)
    sched = make_scheduler("continuous", max_num_seqs=2)
    plan = sched.schedule(deque([make_request(10, 5)]), running_set(*running), kv)
    assert not plan.wake_on_arrival and plan.decode_only
    plan = make_scheduler("continuous", max_num_seqs=4).schedule(deque(), running_set(*running), kv)
    assert plan.wake_on_arrival


def test_fast_and_slow_paths_agree():
    """When everything fits, decode_all (O(1)) covers exactly the requests the slow path lists."""
    kv = make_paged(1000)
    running = [decoding(10 + i, 50, rid=300 + i) for i in range(5)]
    _hold(kv, *running)
    sched = make_scheduler("chunked", max_num_batched_tokens=3)  # budget below the 5 decoders
    slow = sched.schedule(deque(), running_set(*running), kv)
    assert not slow.decode_all and slow.scheduled == running[:3] and slow.new_tokens == [1, 1, 1]
    fast = make_scheduler("chunked").schedule(deque(), running_set(*running), kv)
    assert fast.decode_all and fast.num_decodes == 5 and fast.num_tokens == 5


def test_multi_step_scheduling_admits_only_at_window_boundaries():
    """vLLM 0.6's --num-scheduler-steps 10: while a batch decodes, newcomers join every 10 steps."""
    from capsim.sim.schedulers import ContinuousScheduler

    sched = ContinuousScheduler(8, 4096, 4096, steps_per_schedule=10)
    kv = make_paged(1000)
    running = [decoding(10, 500, rid=700)]
    _hold(kv, *running)
    rs = running_set(*running)
    rs.advance(3, 1.0)  # 3 steps into a window
    rs.sync(running[0])
    plan = sched.schedule(deque([make_request(10, 5)]), rs, kv)
    assert not plan.admitted and plan.decode_only and plan.repeat_steps == 7  # to the boundary
    assert not plan.wake_on_arrival
    rs.advance(7, 2.0)
    plan = sched.schedule(deque([make_request(10, 5)]), rs, kv)
    assert len(plan.admitted) == 1  # at the boundary the batch re-forms
