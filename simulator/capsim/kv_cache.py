"""KV-cache allocators. Both count memory in "units": blocks for the paged allocator, tokens for
the contiguous one. Schedulers query (`units_needed`, `free_units`, `max_decode_steps`); only the
engine changes state (`allocate`, `release`).
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.request import Request


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class PagedAllocator:
    """vLLM-style paging: fixed-size blocks handed out on demand through per-request block tables.

    A request holds blocks_for(computed tokens) blocks. Blocks are refcounted so sharing (forked
    samples, prefix caching) can map one physical block into several tables. Decoding requests
    grow in bulk: `promise(n)` takes n blocks from the free pool for them without naming them, and
    a request's table is filled in with real block ids when it is next touched (`allocate`,
    `release`, `fork`), so a macro-step of k decode steps costs O(1) here.
    """

    kind = "paged"

    def __init__(self, num_blocks: int, block_size: int = 16, watermark_blocks: int = 0) -> None:
        self.num_blocks, self.block_size, self.watermark_units = num_blocks, block_size, watermark_blocks
        # Free ids: returned ones (reused last-in first-out) plus the never-used range
        # [_fresh, num_blocks): construction is O(1) however many blocks a big GPU has.
        self._returned: list[int] = []
        self._fresh = 0
        self._owed = 0  # promised to decoding requests, not yet in their tables
        self._refs: dict[int, int] = {}  # refcount of blocks mapped by more than one table
        self._sharing: set[int] = set()  # request ids whose tables hold shared blocks
        self.tables: dict[int, list[int]] = {}

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def used_units(self) -> int:
        return self._fresh - len(self._returned) + self._owed

    @property
    def free_units(self) -> int:
        return self.num_blocks - self.used_units

    @property
    def held_tokens(self) -> int:
        """Token slots in blocks that some request holds."""
        return self.used_units * self.block_size

    def _take(self, n: int) -> list[int]:
        ids: list[int] = []
        if n and self._returned:
            ids = self._returned[-n:][::-1]
            del self._returned[-len(ids):]
        rest = n - len(ids)
        if rest:
            if self._fresh + rest > self.num_blocks:
                raise RuntimeError("out of KV blocks: the scheduler over-committed (a capsim bug)")
            ids += range(self._fresh, self._fresh + rest)
            self._fresh += rest
        return ids

    def units_for_request(self, req: Request) -> int:
        """Blocks a request needs to run to completion (its last token's KV is never stored)."""
        return blocks_for(req.max_tokens - 1, self.block_size)

    def units_needed(self, req: Request, tokens_after: int) -> int:
        return max(0, blocks_for(tokens_after, self.block_size) - blocks_for(req.computed_tokens, self.block_size))

    def units_held(self, req: Request) -> int:
        """Blocks that return to the free pool if this request lets go of its table."""
        shared = sum(1 for b in self.tables.get(req.id, ()) if b in self._refs) if req.id in self._sharing else 0
        return blocks_for(req.computed_tokens, self.block_size) - shared

    def decode_need(self, running, k: int) -> int:
        """Blocks the running set's decoders need over k more steps."""
        return running.new_blocks(k)

    def max_decode_steps(self, running, k_max: int) -> int:
        return running.max_steps_within(self.free_units, k_max)

    def promise(self, n: int) -> None:
        """Take n blocks from the free pool for decoding requests (named when touched)."""
        if n > self.free_units:
            raise RuntimeError("out of KV blocks: the scheduler over-committed (a capsim bug)")
        self._owed += n

    def _fill(self, req: Request, table: list[int]) -> None:
        """Name the blocks promised to this request (it holds blocks_for(computed) in all)."""
        owed = blocks_for(req.computed_tokens, self.block_size) - len(table)
        if owed > 0:
            self._owed -= owed
            table += self._take(owed)

    def allocate(self, req: Request, tokens_after: int) -> None:
        """Make the request's table hold tokens_after tokens (at the start of the step computing
        them). The request already holds the blocks of its computed tokens (named or promised)."""
        table = self.tables.setdefault(req.id, [])
        self._fill(req, table)
        extra = blocks_for(tokens_after, self.block_size) - len(table)
        if extra > 0:
            table += self._take(extra)

    def release(self, req: Request) -> None:
        table = self.tables.pop(req.id, [])
        self._owed -= blocks_for(req.computed_tokens, self.block_size) - len(table)
        if req.id not in self._sharing:
            self._returned += table[::-1]
            return
        self._sharing.discard(req.id)
        for block in reversed(table):
            count = self._refs.get(block)
            if count is None:
                self._returned.append(block)
            elif count == 2:
                del self._refs[block]
            else:
                self._refs[block] = count - 1

    def fork(self, parent: Request, child: Request) -> None:
        """Map all of the parent's blocks into the child's table (parallel sampling, shared prefix)."""
        table = self.tables.setdefault(parent.id, [])
        self._fill(parent, table)
        for block in table:
            self._refs[block] = self._refs.get(block, 1) + 1
        self.tables[child.id] = list(table)
        if table:
            self._sharing.update((parent.id, child.id))

    def refcount(self, block: int) -> int:
        if block in self._refs:
            return self._refs[block]
        return 1 if any(block in t for t in self.tables.values()) else 0

    def check(self) -> None:
        """Invariant check for tests: refcounts match the tables, free and used never overlap."""
        counts: dict[int, int] = {}
        for table in self.tables.values():
            for block in table:
                counts[block] = counts.get(block, 0) + 1
        free = set(self._returned) | set(range(self._fresh, self.num_blocks))
        assert len(set(self._returned)) == len(self._returned), "a block is on the free list twice"
        assert all(b < self._fresh for b in self._returned), "a never-used block was returned"
        assert not (free & set(counts)), "a block is both free and in a table"
        assert len(counts) + self._owed + len(free) == self.num_blocks, "a block is lost"
        assert self._owed >= 0, "more blocks named than promised"
        for block, count in counts.items():
            assert (count > 1) == (block in self._refs), f"block {block}: shared flag wrong"
            assert count == self._refs.get(block, 1), f"block {block}: refcount mismatch"


class ContiguousAllocator:
    """Pre-paging servers: each admitted request reserves its maximum length up front.

    `reserve` is "max_model_len" (every request reserves the model's limit, as FasterTransformer-
    and Orca-era servers did) or "request" (prompt + its max output). Memory is counted in tokens;
    external fragmentation is not modelled (reservations may use any free tokens), so this is the
    optimistic case for contiguous allocation.
    """

    kind = "contiguous"

    def __init__(self, capacity_tokens: int, max_model_len: int, reserve: str = "max_model_len") -> None:
        self._capacity, self.max_model_len, self.reserve = capacity_tokens, max_model_len, reserve
        self.block_size = 1
        self.watermark_units = 0
        self.reserved: dict[int, int] = {}
        self._used = 0

    @property
    def capacity_tokens(self) -> int:
        return self._capacity

    @property
    def num_blocks(self) -> int:
        return self._capacity

    @property
    def free_units(self) -> int:
        return self._capacity - self._used

    @property
    def used_units(self) -> int:
        return self._used

    @property
    def held_tokens(self) -> int:
        return self._used

    def reservation(self, req: Request) -> int:
        return self.max_model_len if self.reserve == "max_model_len" else req.max_tokens

    def units_for_request(self, req: Request) -> int:
        return self.reservation(req)

    def units_held(self, req: Request) -> int:
        return self.reserved.get(req.id, 0)

    def units_needed(self, req: Request, tokens_after: int) -> int:
        return 0 if req.id in self.reserved else self.reservation(req)

    def decode_need(self, running, k: int) -> int:
        return 0  # everything was reserved at admission

    def max_decode_steps(self, running, k_max: int) -> int:
        return k_max

    def promise(self, n: int) -> None:
        assert n == 0

    def allocate(self, req: Request, tokens_after: int) -> None:
        if req.id not in self.reserved:
            size = self.reservation(req)
            self.reserved[req.id] = size
            self._used += size

    def release(self, req: Request) -> None:
        self._used -= self.reserved.pop(req.id, 0)

    def check(self) -> None:
        assert self._used == sum(self.reserved.values()), "reserved total mismatch"
        assert 0 <= self._used <= self._capacity, "over capacity"


Allocator = PagedAllocator | ContiguousAllocator


GiB = 2**30


@dataclass(frozen=True)
class MemoryBudget:
    """How the GPU's memory is split, the way vLLM sizes its KV cache (DESIGN §3)."""

    total_bytes: float
    usable_bytes: float  # total x gpu_memory_utilization
    weight_bytes: float
    activation_bytes: float  # peak activations of a max-size step
    reserve_bytes: float  # CUDA context, graphs, allocator slack
    state_bytes: float  # recurrent state of hybrid models, for max_num_seqs sequences
    kv_bytes: float
    bytes_per_block: float
    num_blocks: int
    block_size: int
    overridden: bool  # num_blocks came from the workload / command line

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size


def activation_peak_bytes(model, num_tokens: int, num_seqs: int) -> float:
    """Peak activation memory of a forward pass over num_tokens tokens (fp16 activations):
    the widest MLP intermediate (gate + up) and a few hidden-size buffers per token, plus fp32
    logits for the sequences that sample."""
    width = model.intermediate_size
    if model.moe:
        width = max(model.moe.expert_intermediate_size * model.moe.experts_per_token,
                    model.intermediate_size if model.moe.dense_layers else 0)
    per_token = 2 * (2 * width + 4 * model.hidden_size)
    return float(num_tokens * per_token + num_seqs * model.vocab_size * 4)


def memory_budget(model, hardware, weights_fmt, kv_fmt, *, block_size: int, gpu_memory_utilization: float,
                  max_num_batched_tokens: int, max_num_seqs: int, realistic: bool = True,
                  num_gpu_blocks: int | None = None, reserve_bytes: float = 0.5 * GiB) -> MemoryBudget:
    from capsim import architecture as arch

    weight_bytes = arch.param_counts(model).total * weights_fmt.bytes_per_value
    total = float(hardware.memory_bytes)
    usable = total * gpu_memory_utilization
    activation = activation_peak_bytes(model, max_num_batched_tokens, max_num_seqs) if realistic else 0.0
    reserve = reserve_bytes if realistic else 0.0
    state = arch.state_bytes_per_sequence(model) * max_num_seqs
    kv = usable - weight_bytes - activation - reserve - state
    per_block = block_size * arch.kv_bytes_per_token(model, kv_fmt.bytes_per_value)
    blocks = int(kv // per_block) if kv > 0 else 0
    if num_gpu_blocks is not None:
        blocks, kv = num_gpu_blocks, num_gpu_blocks * per_block
    return MemoryBudget(total, usable, weight_bytes, activation, reserve, state, kv, per_block, blocks,
                        block_size, num_gpu_blocks is not None)
