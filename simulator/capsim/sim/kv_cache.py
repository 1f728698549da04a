"""The paged KV-cache allocator (the contiguous one, for pre-paging servers, is in
capsim.sim.kv_contiguous). Both count memory in "units": blocks here, tokens there. Schedulers
query (`units_needed`, `free_units`, `max_decode_steps`); only the engine changes state
(`allocate`, `release`).
"""

from __future__ import annotations

from collections import OrderedDict

from capsim.core.request import Request
from capsim.sim.kv_contiguous import ContiguousAllocator
from capsim.sim.running import RunningSet


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class PagedAllocator:
    """vLLM-style paging: fixed-size blocks handed out on demand through per-request block tables.

    A running request holds blocks_for(computed tokens) blocks; a waiting one holds none. Blocks
    are refcounted so one physical block can sit in several tables (forked samples share their
    prompt; prefix caching shares identical prefixes). Decoding requests grow in bulk:
    `promise(n)` takes n blocks from the free pool without naming them, and a request's table is
    filled in with real block ids when it is next touched (`allocate`, `release`, `fork`), so a
    macro-step of k decode steps costs O(1) here.

    Prefix caching (vLLM's automatic prefix caching): every full block gets a key — the shared
    system prompt of its class, its session's history, or its own request — and keyed blocks stay
    cached after their last user lets go, as free-but-evictable, until the least recently used is
    reclaimed. A new request maps the cached blocks of its leading full blocks instead of
    computing them. Shared blocks are always full: a fork copies the partial last block, so
    appends never touch a shared block (copy-on-write done eagerly, one step early).
    """

    kind = "paged"

    def __init__(self, num_blocks: int, block_size: int = 16, watermark_blocks: int = 0, caching: bool = False,
                 seq_units: int = 0) -> None:
        self.num_blocks, self.block_size, self.watermark_units = num_blocks, block_size, watermark_blocks
        self.caching = caching
        # Per-sequence memory outside the token blocks (sliding windows, recurrent state), in
        # blocks' worth: taken when a sequence first gets blocks, returned when it lets go.
        self.seq_units = seq_units
        self._with_state: set[int] = set()
        # Free ids: returned ones (reused last-in first-out) plus the never-used range
        # [_fresh, num_blocks): construction is O(1) however many blocks a big GPU has.
        self._returned: list[int] = []
        self._fresh = 0
        self._owed = 0  # promised to decoding requests, not yet in their tables
        self._refs: dict[int, int] = {}  # refcount of blocks mapped by more than one table
        self._sharing: set[int] = set()  # request ids whose tables hold shared blocks
        self.tables: dict[int, list[int]] = {}
        self._cached: dict[tuple, int] = {}  # key -> block holding that prefix
        self._key_of: dict[int, tuple] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced, LRU first
        self.shared_units = 0  # sum over blocks of (refcount - 1): memory sharing saves

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def used_units(self) -> int:
        """Blocks some request holds (cached-but-unreferenced blocks count as free), per-sequence
        state included."""
        return (self._fresh - len(self._returned) - len(self._evictable) + self._owed
                + len(self._with_state) * self.seq_units)

    @property
    def state_units(self) -> int:
        """Blocks' worth held as per-sequence state (sliding windows, recurrent state)."""
        return len(self._with_state) * self.seq_units

    @property
    def free_units(self) -> int:
        return self.num_blocks - (self._fresh - len(self._returned) - len(self._evictable) + self._owed
                                  + len(self._with_state) * self.seq_units)  # used_units, inlined: hot

    @property
    def held_tokens(self) -> int:
        """Token slots in blocks that some request holds (per-sequence state not counted)."""
        return (self._fresh - len(self._returned) - len(self._evictable) + self._owed) * self.block_size

    def _take(self, n: int) -> list[int]:
        """n block ids: free ones while physical memory lasts (per-sequence state and promised
        blocks take some of it), then the least recently used cached prefixes, evicted."""
        room = self.num_blocks - self.state_units - self._owed - (self._fresh - len(self._returned))
        direct = max(0, min(n, room))
        ids = self._returned[-direct:][::-1] if direct and self._returned else []
        if ids:
            del self._returned[-len(ids):]
        rest = direct - len(ids)
        if rest:
            ids += range(self._fresh, self._fresh + rest)
            self._fresh += rest
        while len(ids) < n:
            if not self._evictable:
                raise RuntimeError("out of KV blocks: the scheduler over-committed (a capsim bug)")
            block, _ = self._evictable.popitem(last=False)
            del self._cached[self._key_of.pop(block)]
            ids.append(block)
        return ids

    def units_for_request(self, req: Request) -> int:
        """Blocks a request needs to run to completion (its last token's KV is never stored);
        parallel samples share the prompt's full blocks."""
        alone = blocks_for(req.max_tokens - 1, self.block_size)
        return alone + (req.samples - 1) * (alone - req.prompt_tokens // self.block_size) + req.samples * self.seq_units

    def fork_units(self, req: Request, tokens_after: int) -> int:
        """Blocks the samples' copies of the partial last prompt block take when this step
        completes a multi-sample request's prompt."""
        if req.samples > 1 and req.parent is None and not req.generated_tokens and tokens_after == req.known_tokens:
            return (req.samples - 1) * ((1 if tokens_after % self.block_size else 0) + self.seq_units)
        return 0

    def restore(self, req: Request) -> None:
        """A swapped-out request's KV comes back: blocks for all its computed tokens, promised now
        and named when the step allocates. Naming them here could evict a cached prefix that a
        request admitted later in the same step was planned to map."""
        self._with_state.add(req.id)
        self.tables[req.id] = []
        self._owed += blocks_for(req.computed_tokens, self.block_size)

    def units_needed(self, req: Request, tokens_after: int) -> int:
        """More blocks a running request needs to hold tokens_after tokens."""
        return max(0, blocks_for(tokens_after, self.block_size) - blocks_for(req.computed_tokens, self.block_size))

    def admission_units(self, req: Request, tokens_after: int, hit_blocks: int = 0, revived: int = 0) -> int:
        """Free blocks a waiting request (which holds none) takes to hold tokens_after tokens, the
        first hit_blocks of them found in the prefix cache (`revived` of those were evictable),
        plus its per-sequence state."""
        return blocks_for(tokens_after, self.block_size) - hit_blocks + revived + self.seq_units

    def prefix_hits(self, req: Request) -> tuple[int, int]:
        """(leading prompt blocks found in the cache, how many of them are evictable). At least
        one prompt token is always left to compute, as vLLM does."""
        if not self.caching:
            return 0, 0
        hits = revived = 0
        limit = (req.known_tokens - 1) // self.block_size
        while hits < limit:
            block = self._cached.get(self.block_key(req, hits))
            if block is None:
                break
            revived += block in self._evictable
            hits += 1
        return hits, revived

    def block_key(self, req: Request, index: int) -> tuple:
        """Identity of the tokens of a request's full block `index` (the prefix hash, abstractly)."""
        if (index + 1) * self.block_size <= req.shared_prefix_tokens:
            return ("prefix", req.class_index, index)
        if req.prompt_id is not None and (index + 1) * self.block_size <= req.prompt_tokens:
            return ("prompt", req.prompt_id, index)  # a replayed prompt: the same tokens each time it is sent
        if req.session is not None:
            return ("session", req.session, index)
        return ("request", req.id, index)

    def warm(self, keys: list[tuple]) -> None:
        """Enter cached, unreferenced blocks with these keys, oldest first (a key already cached
        becomes the most recently used): what an earlier pass over a replayed prompt set left in
        the cache (warm_keys, workload prompt_set_cached)."""
        if not self.caching:
            return
        for key in keys:
            block = self._cached.get(key)
            if block is not None:
                self._evictable.move_to_end(block)
                continue
            [block] = self._take(1)
            self._cached[key], self._key_of[block] = block, key
            self._evictable[block] = None

    def units_held(self, req: Request) -> int:
        """Blocks that return to the free pool if this request lets go of its table."""
        shared = sum(1 for b in self.tables.get(req.id, ()) if b in self._refs) if req.id in self._sharing else 0
        return blocks_for(req.computed_tokens, self.block_size) - shared + self.seq_units

    def decode_need(self, running: RunningSet, k: int) -> int:
        """Blocks the running set's decoders need over k more steps."""
        return running.new_blocks(k)

    def max_decode_steps(self, running: RunningSet, k_max: int) -> int:
        return running.max_steps_within(self.free_units, k_max)

    def promise(self, n: int) -> None:
        """Take n blocks from the free pool for decoding requests (named when touched); n < 0
        gives back blocks promised for tokens that are not computed after all."""
        if n > self.free_units:
            raise RuntimeError("out of KV blocks: the scheduler over-committed (a capsim bug)")
        self._owed += n

    def _fill(self, req: Request, table: list[int]) -> None:
        """Name the blocks promised to this request (it holds blocks_for(computed) in all)."""
        owed = blocks_for(req.computed_tokens, self.block_size) - len(table)
        if owed > 0:
            self._owed -= owed
            table += self._take(owed)

    def use_hits(self, req: Request, hit_blocks: int) -> None:
        """Map a waiting request's cached leading blocks into its (new) table."""
        self._with_state.add(req.id)
        table = self.tables.setdefault(req.id, [])
        for index in range(hit_blocks):
            block = self._cached[self.block_key(req, index)]
            if block in self._evictable:
                del self._evictable[block]
            else:
                self._refs[block] = self._refs.get(block, 1) + 1
                self.shared_units += 1
                self._sharing.add(req.id)
            table.append(block)

    def allocate(self, req: Request, tokens_after: int) -> None:
        """Make the request's table hold tokens_after tokens (at the start of the step computing
        them). The request already holds the blocks of its computed tokens (named or promised)."""
        self._with_state.add(req.id)
        table = self.tables.setdefault(req.id, [])
        self._fill(req, table)
        extra = blocks_for(tokens_after, self.block_size) - len(table)
        if extra > 0:
            table += self._take(extra)

    def register(self, req: Request, upto_tokens: int | None = None) -> None:
        """Enter the request's full blocks (below upto_tokens) into the prefix cache."""
        if not self.caching:
            return
        table = self.tables.get(req.id, [])
        self._fill(req, table)
        full = min(len(table), (req.computed_tokens if upto_tokens is None else upto_tokens) // self.block_size)
        for index in range(full):
            block = table[index]
            if block in self._key_of:
                continue
            key = self.block_key(req, index)
            if key not in self._cached:
                self._cached[key] = block
                self._key_of[block] = key

    def release(self, req: Request) -> None:
        """Let go of the request's blocks: unshared ones return to the pool, cached ones become
        evictable, shared ones lose one reference."""
        if self.caching:
            self.register(req)
        self._with_state.discard(req.id)
        table = self.tables.pop(req.id, [])
        self._owed -= blocks_for(req.computed_tokens, self.block_size) - len(table)
        if req.id not in self._sharing and not self._key_of:
            self._returned += table[::-1]
            return
        self._sharing.discard(req.id)
        for block in reversed(table):
            count = self._refs.get(block)
            if count is not None:
                self.shared_units -= 1
                if count == 2:
                    del self._refs[block]
                else:
                    self._refs[block] = count - 1
            elif block in self._key_of:
                self._evictable[block] = None
            else:
                self._returned.append(block)

    def fork(self, parent: Request, child: Request) -> None:
        """The child (a parallel sample) shares the parent's full blocks and gets its own copy of
        the partial last one (copy-on-write, done at once)."""
        table = self.tables.setdefault(parent.id, [])
        self._fill(parent, table)
        full = parent.computed_tokens // self.block_size
        for block in table[:full]:
            self._refs[block] = self._refs.get(block, 1) + 1
            self.shared_units += 1
        self._with_state.add(child.id)
        self.tables[child.id] = table[:full] + self._take(len(table) - full)
        if full:
            self._sharing.update((parent.id, child.id))

    def refcount(self, block: int) -> int:
        if block in self._refs:
            return self._refs[block]
        return 1 if any(block in t for t in self.tables.values()) else 0

    def check(self) -> None:
        """Invariant check for tests: refcounts match the tables, free and used never overlap,
        every block is free, cached-evictable, promised or in a table."""
        counts: dict[int, int] = {}
        for table in self.tables.values():
            for block in table:
                counts[block] = counts.get(block, 0) + 1
        free = set(self._returned) | set(range(self._fresh, self.num_blocks))
        evictable = set(self._evictable)
        assert len(set(self._returned)) == len(self._returned), "a block is on the free list twice"
        assert all(b < self._fresh for b in self._returned), "a never-used block was returned"
        assert not (free & set(counts)), "a block is both free and in a table"
        assert not (evictable & set(counts)) and not (evictable & free), "an evictable block is also used or free"
        assert len(counts) == self._fresh - len(self._returned) - len(evictable), "a block is lost"
        assert self.used_units <= self.num_blocks, "more blocks in use than exist"
        assert self._with_state >= set(self.tables) - {r for r, t in self.tables.items() if not t}, "state missing"
        assert self._owed >= 0, "more blocks named than promised"
        assert all(self._cached[k] == b for b, k in self._key_of.items()), "cache index out of step"
        assert self.shared_units == sum(c - 1 for c in counts.values()), "shared count out of step"
        for block, count in counts.items():
            assert (count > 1) == (block in self._refs), f"block {block}: shared flag wrong"
            assert count == self._refs.get(block, 1), f"block {block}: refcount mismatch"


Allocator = PagedAllocator | ContiguousAllocator  # what a replica holds


def warm_keys(prompt_tokens: list[int], output_tokens: list[int], shared_prefix_tokens: int, kv: PagedAllocator,
              max_model_len: int, most: int | None = None) -> list[tuple] | None:
    """The block keys a client's earlier pass over a replayed prompt set (prompt i of the lists,
    shared prefix included, sent in order) leaves in kv's least-recently-used prefix cache, oldest
    first: each request's full blocks, prompt and answer, in the order release() frees them (the
    answer's last block first); only the newest requests that fit; requests the server rejects
    (over max_model_len or the whole cache) skipped; a shared system prompt counted once. None
    as soon as there would be more than `most` keys."""
    room = kv.num_blocks
    chosen: list[list[tuple]] = []
    counted: set[tuple] = set()
    for slot in range(len(prompt_tokens) - 1, -1, -1):
        req = Request(-1 - slot, 0.0, prompt_tokens[slot], output_tokens[slot],
                      shared_prefix_tokens=shared_prefix_tokens, prompt_id=slot)
        if req.max_tokens > max_model_len or kv.units_for_request(req) > kv.num_blocks - kv.watermark_units:
            continue  # rejected (schedulers' reject_reason): never ran, never cached
        keys = [kv.block_key(req, index) for index in range((req.max_tokens - 1) // kv.block_size)]
        new = [key for key in keys if key not in counted]
        if len(new) > room:
            break
        room -= len(new)
        counted.update(new)
        if most is not None and len(counted) > most:
            return None
        chosen.append(keys[::-1])
    ordered: list[tuple] = []
    for i in range(len(chosen) - 1, -1, -1):  # oldest request first
        ordered.extend(chosen[i])
    return ordered
