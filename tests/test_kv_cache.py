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
    from conftest import decoding, running_set

    reqs = [decoding(c, 100, rid=i) for i, c in enumerate(contexts)]  # computed = c
    for r in reqs:
        r.computed_tokens, c = 0, r.computed_tokens
        kv.allocate(r, c)
        r.computed_tokens = c
    assert kv.max_decode_steps(running_set(*reqs), k_max) == expect


def test_promised_decode_blocks_match_step_by_step_allocation():
    """Decoders grow in bulk through the running set's residues; naming the blocks later gives
    the same tables as allocating one step at a time."""
    from conftest import decoding, running_set

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
                tokens[i] = req.computed_tokens = target
        elif op == "release":
            kv.release(req)
            tokens[i] = req.computed_tokens = 0
        elif req.id not in kv.tables:
            j = (i + n) % 10
            if j in kv.tables and tokens[j] > 0:
                kv.fork(reqs[j], req)
                req.computed_tokens = tokens[j]
                tokens[i] = -1  # a forked table is frozen in this test
        assert 0 <= kv.used_units <= kv.num_blocks
        kv.check()
    for req in reqs.values():
        kv.release(req)
        req.computed_tokens = 0
    assert kv.used_units == 0 and kv.free_units == kv.num_blocks
    kv.check()


def _shared(kv, req):
    """Requests whose last block is shared (growing them would need copy-on-write)."""
    table = kv.tables.get(req.id, [])
    return {req.id} if table and kv.refcount(table[-1]) > 1 else set()
