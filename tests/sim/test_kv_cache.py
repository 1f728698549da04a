"""Allocators: block accounting, reservation, capacity sizing, and property-based invariants."""

import pytest
from capsim.core.request import Request
from capsim.sim.kv_cache import PagedAllocator, blocks_for, warm_keys
from capsim.sim.kv_contiguous import ContiguousAllocator
from helpers import make_paged, make_request
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule


def test_paged_hands_out_blocks_on_demand_and_frees_them():
    kv = make_paged(num_blocks=10, block_size=16)
    req = make_request(100, 10)
    assert kv.units_needed(req, 100) == 7
    kv.allocate(req, 100)
    req.computed_tokens = 100  # the step that computes them ends
    assert kv.used_units == 7 and kv.held_tokens == 112 and kv.free_units == 3
    assert kv.units_needed(req, 112) == 0 and kv.units_needed(req, 113) == 1
    kv.release(req)
    assert kv.free_units == 10
    kv.check()


def test_fork_shares_blocks_until_both_release():
    kv = make_paged(num_blocks=10, block_size=4)
    parent, child = make_request(8, 1), make_request(8, 1)
    kv.allocate(parent, 8)
    parent.computed_tokens = child.computed_tokens = 8
    kv.fork(parent, child)
    assert kv.used_units == 2 and all(kv.refcount(b) == 2 for b in kv.tables[parent.id])
    assert kv.units_held(parent) == 0  # releasing it alone frees nothing
    kv.release(parent)
    assert kv.used_units == 2
    kv.release(child)
    assert kv.used_units == 0
    kv.check()


def test_contiguous_reserves_max_model_len_or_the_request():
    kv = ContiguousAllocator(capacity_tokens=5000, max_model_len=2048)
    req = make_request(100, 50)
    assert kv.units_needed(req, 100) == 2048
    kv.allocate(req, 100)
    assert kv.held_tokens == 2048 and kv.units_needed(req, 150) == 0
    own = ContiguousAllocator(capacity_tokens=5000, max_model_len=2048, reserve="request")
    assert own.units_needed(req, 100) == 150


@pytest.mark.parametrize("contexts, k_max, free, expect", [
    ([4, 4], 10, 100, 10),
    ([4, 4], 10, 3, 4),        # step 1 takes 2 blocks; step 5 needs 2 more with 1 left
    ([3, 7], 10, 0, 1),        # both fill their current block at step 1; step 2 needs new blocks
])
def test_max_decode_steps(contexts, k_max, free, expect):
    kv = make_paged(num_blocks=free + sum(blocks_for(c, 4) for c in contexts), block_size=4)
    from helpers import decoding, running_set

    reqs = [decoding(c, 100, rid=i) for i, c in enumerate(contexts)]  # computed = c
    for r in reqs:
        r.computed_tokens, c = 0, r.computed_tokens
        kv.allocate(r, c)
        r.computed_tokens = c
    assert kv.max_decode_steps(running_set(*reqs), k_max) == expect


def test_promised_decode_blocks_match_step_by_step_allocation():
    """Decoders grow in bulk through the running set's residues; naming the blocks later gives
    the same tables as allocating one step at a time."""
    from helpers import decoding, running_set

    bulk, single = make_paged(num_blocks=1000, block_size=4), make_paged(num_blocks=1000, block_size=4)
    reqs = [decoding(c, 100, rid=i) for i, c in enumerate([1, 4, 7, 10])]
    twins = [decoding(c, 100, rid=i) for i, c in enumerate([1, 4, 7, 10])]
    for kv, group in ((bulk, reqs), (single, twins)):
        for r in group:
            r.computed_tokens, c = 0, r.computed_tokens
            kv.allocate(r, c)
            r.computed_tokens = c
    rs = running_set(*reqs)
    need = rs.new_blocks(9)
    bulk.promise(need)
    rs.advance(9, 1.0)
    for step in range(9):
        for r in twins:
            single.allocate(r, r.computed_tokens + 1)
            r.computed_tokens += 1
    assert bulk.used_units == single.used_units
    for r in reqs:
        rs.sync(r)
        bulk.release(r)
    bulk.check()
    assert bulk.used_units == 0


class AllocatorMachine(RuleBasedStateMachine):
    """Random admissions (with prefix-cache hits), growth, forks (copy-on-write of the partial
    block), preemptions and completions, with LRU eviction of cached blocks under pressure.
    After every step: refcounts match the tables, no block is both free and used, counts add
    up; at the end every block comes back."""

    def __init__(self) -> None:
        super().__init__()
        # two blocks' worth of per-sequence state (a sliding window, a recurrent state) each
        self.kv = PagedAllocator(num_blocks=40, block_size=4, caching=True, seq_units=2)
        self.live: dict[int, object] = {}
        self.next_id = 0

    def _new(self, prompt: int, prefix: int, session: int | None):
        from capsim.core.request import Request

        self.next_id += 1
        return Request(self.next_id, 0.0, prompt, 8, shared_prefix_tokens=prefix, session=session)

    @rule(prompt=st.integers(1, 30), prefix=st.sampled_from([0, 8, 12]), session=st.sampled_from([None, 1, 2]))
    def admit(self, prompt, prefix, session):
        req = self._new(max(prompt, prefix + 1), prefix, session)
        hits, revived = self.kv.prefix_hits(req)
        if self.kv.admission_units(req, req.prompt_tokens, hits, revived) > self.kv.free_units:
            return
        self.kv.use_hits(req, hits)
        req.computed_tokens = hits * 4
        self.kv.allocate(req, req.prompt_tokens)
        req.computed_tokens = req.prompt_tokens
        self.kv.register(req)
        self.live[req.id] = req

    @rule(data=st.data(), n=st.integers(1, 9))
    def grow(self, data, n):
        if self.live:
            req = self.live[data.draw(st.sampled_from(sorted(self.live)))]
            if self.kv.units_needed(req, req.computed_tokens + n) <= self.kv.free_units:
                self.kv.allocate(req, req.computed_tokens + n)
                req.computed_tokens += n

    @rule(data=st.data())
    def fork(self, data):
        if self.live:
            parent = self.live[data.draw(st.sampled_from(sorted(self.live)))]
            if (1 if parent.computed_tokens % 4 else 0) + self.kv.seq_units <= self.kv.free_units:
                child = self._new(parent.prompt_tokens, parent.shared_prefix_tokens, parent.session)
                self.kv.fork(parent, child)
                child.computed_tokens = parent.computed_tokens
                self.live[child.id] = child

    @rule(data=st.data())
    def release(self, data):  # completion or preemption: the same for the allocator
        if self.live:
            req = self.live.pop(data.draw(st.sampled_from(sorted(self.live))))
            self.kv.release(req)
            req.computed_tokens = 0

    @invariant()
    def consistent(self):
        self.kv.check()
        assert 0 <= self.kv.used_units <= self.kv.num_blocks
        held = sum(-(-r.computed_tokens // 4) for r in self.live.values()) - self.kv.shared_units
        state = 2 * sum(1 for r in self.live.values() if r.computed_tokens)
        assert self.kv.used_units == held + state  # physical = logical blocks - sharing + per-sequence state

    def teardown(self):
        for req in list(self.live.values()):
            self.kv.release(req)
        assert self.kv.used_units == 0 and self.kv.free_units == self.kv.num_blocks
        self.kv.check()


AllocatorMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
TestAllocatorMachine = AllocatorMachine.TestCase


def test_prefix_cache_hits_and_lru_eviction():
    from capsim.core.request import Request

    kv = PagedAllocator(num_blocks=6, block_size=4, caching=True)
    a = Request(1, 0.0, 10, 1, shared_prefix_tokens=8)
    kv.allocate(a, 10)
    a.computed_tokens = 10
    kv.register(a)
    b = Request(2, 0.0, 12, 1, shared_prefix_tokens=8)
    assert kv.prefix_hits(b) == (2, 0)  # both full prefix blocks, in use: shared, not revived
    kv.use_hits(b, 2)
    b.computed_tokens = 8
    assert kv.shared_units == 2 and kv.used_units == 3
    kv.release(a)
    a.computed_tokens = 0
    assert kv.used_units == 2  # a's prefix blocks are still b's; its own partial block is free
    kv.release(b)
    assert kv.used_units == 0 and len(kv._evictable) == 2  # cached, evictable
    c = Request(3, 0.0, 9, 1, shared_prefix_tokens=8)
    assert kv.prefix_hits(c) == (2, 2)  # found again, revived from the evictable pool
    d = Request(4, 0.0, 24, 1)  # needs all 6 blocks: evicts the cached prefix
    kv.allocate(d, 24)
    assert kv.prefix_hits(c) == (0, 0)
    kv.check()


def test_a_swapped_in_request_does_not_evict_prefix_blocks_a_later_admission_maps():
    """The step restoring a swapped-out request also maps a newcomer's cached prefix: the restore
    takes its blocks from the other evictable ones, not from the prefix the plan counted on
    (this was KeyError ('prefix', 0, 0) with prefix caching and swap preemption)."""
    from capsim.core.request import Request

    kv = PagedAllocator(num_blocks=5, block_size=4, caching=True)
    prefix = Request(1, 0.0, 9, 1, shared_prefix_tokens=8)  # caches the class's 2 prefix blocks first (LRU)
    other = Request(2, 0.0, 8, 1)  # then 2 blocks of its own
    for req in (prefix, other):
        kv.allocate(req, 8)
        req.computed_tokens = 8
        kv.release(req)
    assert len(kv._evictable) == 4
    swapped = Request(3, 0.0, 7, 4, computed_tokens=7)  # its KV is in host memory
    newcomer = Request(4, 0.0, 9, 1, shared_prefix_tokens=8)
    hits, revived = kv.prefix_hits(newcomer)  # planned before the step starts
    assert (hits, revived) == (2, 2)
    kv.restore(swapped)
    kv.use_hits(newcomer, hits)
    newcomer.computed_tokens = 8
    kv.allocate(swapped, 8)
    kv.allocate(newcomer, 9)
    kv.check()
    assert kv.tables[newcomer.id][:2] == [0, 1]  # the prefix's blocks, mapped, not recomputed
    assert not set(kv.tables[swapped.id]) & {0, 1}
    assert kv.used_units == 5 and not kv._evictable


def test_warming_a_prompt_set_keeps_only_the_newest_prompts_that_fit():
    """A replayed set the client sent before (workload prompt_set_cached): each request's full
    blocks enter the cache as unreferenced; of a set larger than the cache only the newest
    prompts, so a million-prompt set costs no more than the cache holds."""
    kv = PagedAllocator(num_blocks=60, block_size=4, caching=True)
    kv.warm(warm_keys([41] * 10, [1] * 10, 0, kv, max_model_len=4096))  # 10 full blocks each: prompts 4-9 fit
    assert kv.free_units == 60 and len(kv._cached) == 60  # cached but unreferenced: free to take
    kv.check()
    assert {key[1] for key in kv._cached} == set(range(4, 10))
    assert kv.prefix_hits(Request(9, 0.0, 41, 1, prompt_id=9)) == (10, 10)  # the 41st token is computed
    big = warm_keys([41] * 1_000_000, [1] * 1_000_000, 0, kv, max_model_len=4096)
    assert {key[1] for key in big} == set(range(999_994, 1_000_000))


def test_warming_counts_answers_skips_rejected_prompts_and_shares_a_system_prompt():
    """What a finished request leaves is its full blocks of prompt and answer (the answer's freed
    first, so oldest); a request the server rejects left nothing; a shared system prompt is
    cached once, and every request touched it, so it is the most recently used."""
    kv = PagedAllocator(num_blocks=30, block_size=4, caching=True)
    keys = warm_keys([20, 20, 20], [9, 9, 9], 0, kv, max_model_len=4096)  # 28 tokens kept: 7 blocks each
    assert len(keys) == 21 and keys[0] == ("request", -1, 6) and keys[-1] == ("prompt", 2, 0)
    assert keys[:7] == [("request", -1, 6), ("request", -1, 5), ("prompt", 0, 4), ("prompt", 0, 3),
                        ("prompt", 0, 2), ("prompt", 0, 1), ("prompt", 0, 0)]
    assert len(warm_keys([20, 20, 20], [9, 9, 9], 0, kv, max_model_len=28)) == 0  # 29 tokens each: all rejected
    rejected_newest = warm_keys([20, 20, 200], [9, 9, 9], 0, kv, max_model_len=100)
    assert {key[1] for key in rejected_newest} == {-2, -1, 0, 1}  # slot 2 never ran; 0 and 1 still cached
    shared = warm_keys([40, 40, 40], [1, 1, 1], 32, kv, max_model_len=4096)  # 8 prefix blocks + 2 own each
    assert len(set(shared)) == 8 + 3 * 2
    kv.warm(shared)
    assert next(reversed(kv._evictable)) == kv._cached[("prefix", 0, 0)]  # touched by every request: newest
    kv.check()
