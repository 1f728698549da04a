"""Allocators: block accounting, reservation, capacity sizing, and property-based invariants."""

import numpy as np
import pytest
from conftest import make_paged, make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.kv_cache import ContiguousAllocator, PagedAllocator, blocks_for, memory_budget


def test_paged_hands_out_blocks_on_demand_and_frees_them():
    kv = make_paged(num_blocks=10, block_size=16)
    req = make_request(100, 10)
    assert kv.units_needed(req, 100) == 7
    kv.allocate(req, 100)
    assert kv.used_units == 7 and kv.held_tokens == 112 and kv.free_units == 3
    assert kv.units_needed(req, 112) == 0 and kv.units_needed(req, 113) == 1
    kv.release(req)
    assert kv.free_units == 10
    kv.check()


def test_fork_shares_blocks_until_both_release():
    kv = make_paged(num_blocks=10, block_size=4)
    parent, child = make_request(8, 1), make_request(8, 1)
    kv.allocate(parent, 8)
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
    for i, c in enumerate(contexts):
        kv.allocate(make_request(c, 1, rid=i), c)
    assert kv.max_decode_steps(np.array(contexts), k_max) == expect


def test_growth_matches_step_by_step_allocation():
    kv = make_paged(num_blocks=1000, block_size=4)
    contexts = np.array([1, 4, 7, 10])
    reqs = [make_request(int(c), 100, rid=i) for i, c in enumerate(contexts)]
    for r, c in zip(reqs, contexts):
        kv.allocate(r, int(c))
    base = kv.used_units
    growth = kv.growth(contexts, 9)
    for k in range(1, 10):
        for r, c in zip(reqs, contexts):
            kv.allocate(r, int(c) + k)
        assert kv.used_units - base == growth[k - 1]


def test_memory_budget_follows_vllm(tiny_model, round_gpu):
    fp16 = __import__("capsim.formats", fromlist=["get_format"]).get_format("fp16")
    m = memory_budget(tiny_model, round_gpu, fp16, fp16, block_size=16, gpu_memory_utilization=0.9,
                      max_num_batched_tokens=2048, max_num_seqs=4, realistic=True)
    # 100 GB x 0.9 - 26e6 B of weights (13e6 params x 2) - activations - 0.5 GiB reserve
    activation = 2048 * 2 * (2 * 4000 + 4 * 1000) + 4 * 1000 * 4
    kv = 90e9 - 26e6 - activation - 0.5 * 2**30
    assert m.kv_bytes == pytest.approx(kv)
    assert m.num_blocks == int(kv // (16 * 4000))
    forced = memory_budget(tiny_model, round_gpu, fp16, fp16, block_size=16, gpu_memory_utilization=0.9,
                           max_num_batched_tokens=2048, max_num_seqs=4, num_gpu_blocks=123)
    assert forced.num_blocks == 123 and forced.overridden


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grow", "release", "fork"]), st.integers(0, 9), st.integers(1, 40)),
                max_size=80))
def test_paged_allocator_invariants(ops):
    """Whatever happens, no more blocks than exist are handed out, refcounts match the tables, and
    every block comes back once everyone lets go."""
    kv = PagedAllocator(num_blocks=30, block_size=4)
    reqs = {i: make_request(1, 1, rid=i) for i in range(10)}
    tokens = {i: 0 for i in range(10)}
    for op, i, n in ops:
        req = reqs[i]
        if op == "grow":
            target = tokens[i] + n
            if kv.units_needed(req, target) <= kv.free_units and req.id not in _shared(kv, req):
                kv.allocate(req, target)
                tokens[i] = target
        elif op == "release":
            kv.release(req)
            tokens[i] = 0
        elif req.id not in kv.tables:
            j = (i + n) % 10
            if j in kv.tables:
                kv.fork(reqs[j], req)
                tokens[i] = -1  # a forked table is frozen in this test
        assert 0 <= kv.used_units <= kv.num_blocks
        kv.check()
    for req in reqs.values():
        kv.release(req)
    assert kv.used_units == 0 and kv.free_units == kv.num_blocks
    kv.check()


def _shared(kv, req):
    """Requests whose last block is shared (growing them would need copy-on-write)."""
    table = kv.tables.get(req.id, [])
    return {req.id} if table and kv.refcount(table[-1]) > 1 else set()
