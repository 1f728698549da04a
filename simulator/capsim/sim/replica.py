"""One copy of the server: its scheduler, KV cache, cost model and running set, and the memory
moves its requests make (preemption with swap or recompute, admission with prefix-cache hits or
swap-in, forking parallel samples, release). No clock here: the engine decides when."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from simpy.events import Event

from capsim.cost.roofline import CostModel
from capsim.sim.kv_cache import Allocator, PagedAllocator, blocks_for
from capsim.core.request import Request
from capsim.sim.running import RunningSet
from capsim.sim.schedulers import Scheduler


@dataclass
class SwapSpace:
    """Host memory a replica swaps preempted requests' KV into, over its PCIe link."""

    capacity_bytes: float
    bytes_per_block: float
    link_bytes_per_s: float
    used_bytes: float = 0.0
    held: dict = field(default_factory=dict)  # request id -> bytes it has in host memory
    total_bytes: float = 0.0  # swapped out + in over the run


@dataclass
class Replica:
    index: int
    scheduler: Scheduler
    kv: Allocator
    cost: CostModel
    running: RunningSet
    waiting: deque = field(default_factory=deque)
    stored_tokens: int = 0  # KV tokens held by requests (the computed tokens of the running ones)
    stale: dict = field(default_factory=dict)  # decoders skipped by the last step: id -> last token time
    wake: Event | None = None  # the event an idle replica waits on
    swap: SwapSpace | None = None  # preemption by swapping to host memory (None: recompute)
    swap_bytes_this_step: float = 0.0
    prompt_tokens_admitted: int = 0  # prefix caching: prompt tokens looked up in the cache...
    prefill_tokens_saved: int = 0  # ...and those found there
    # Disaggregated serving: "prefill" instances hand prompts off once prefilled, "decode" ones take
    # them in with their KV; "both" is an ordinary server.
    role: str = "both"
    landed: set = field(default_factory=set)  # decode role: ids of waiting requests whose KV came over the link

    def preempt(self, victims: list[Request]) -> None:
        """Take victims off the GPU: swap their KV to host memory if there is room (they keep
        their tokens), otherwise drop it (they recompute everything later)."""
        self.running.remove(victims)
        swap = self.swap
        for req in victims:
            size = blocks_for(req.computed_tokens, self.kv.block_size) * swap.bytes_per_block if swap else 0.0
            self.kv.release(req)
            self.stored_tokens -= req.computed_tokens
            req.preemptions += 1
            if swap is not None and swap.used_bytes + size <= swap.capacity_bytes:
                swap.held[req.id] = size
                swap.used_bytes += size
                swap.total_bytes += size
                self.swap_bytes_this_step += size
            else:
                req.recomputed_tokens += req.computed_tokens
                req.computed_tokens = 0
        self.waiting.extendleft(victims)  # newest-first list -> oldest at the front

    def admit(self, reqs: list[Request], hits: list[int]) -> None:
        """Waiting requests join, in this order (reqs[i] found hits[i] blocks in the prefix
        cache), before the step allocates the rest: their cached prefixes are mapped in first,
        then swapped-out KV comes back from host memory. Fresh blocks may evict cached ones, and
        the plan counted on the hits it found."""
        kv, swap = self.kv, self.swap
        if swap is not None or kv.caching or self.landed:
            self._map_memory(reqs, hits)
        for req in reqs:
            self.running.admit(req)

    def _map_memory(self, reqs: list[Request], hits: list[int]) -> None:
        """Admit's memory moves: cached prefixes mapped in, then swapped-out KV brought back
        (and KV that came over the link from a prefill instance taken in, the same way)."""
        kv, swap = self.kv, self.swap
        swapped_in = []
        for req, n in zip(reqs, hits):
            if swap is not None and req.id in swap.held:
                swapped_in.append(req)
            elif req.id in self.landed:
                self.landed.discard(req.id)
                kv.restore(req)
                self.stored_tokens += req.computed_tokens
            elif kv.caching and not req.computed_tokens:
                self.prompt_tokens_admitted += req.known_tokens
                if n:
                    kv.use_hits(req, n)
                    req.computed_tokens = n * kv.block_size
                    self.stored_tokens += req.computed_tokens
                    self.prefill_tokens_saved += req.computed_tokens
        for req in swapped_in:
            assert swap is not None  # only a swapping replica holds requests in host memory
            size = swap.held.pop(req.id)
            swap.used_bytes -= size
            swap.total_bytes += size
            self.swap_bytes_this_step += size
            kv.restore(req)
            self.stored_tokens += req.computed_tokens

    def fork(self, parent: Request, first_id: int) -> list[Request]:
        """Parallel sampling: the other n - 1 answers start from the parent's prompt, sharing its
        blocks, each with its own first token sampled in the same step; ids from first_id on."""
        kv = self.kv
        assert isinstance(kv, PagedAllocator)  # resolve() refuses samples without paged blocks
        children = []
        for i in range(parent.samples - 1):
            child = Request(first_id + i, parent.arrival_s, parent.prompt_tokens, parent.output_tokens,
                            computed_tokens=parent.computed_tokens, generated_tokens=1,
                            first_scheduled_s=parent.first_scheduled_s, first_token_s=parent.first_token_s,
                            last_token_s=parent.last_token_s, user=parent.user, replica=parent.replica,
                            class_index=parent.class_index, shared_prefix_tokens=parent.shared_prefix_tokens,
                            session=parent.session, parent=parent.id, prompt_id=parent.prompt_id)
            kv.fork(parent, child)
            self.stored_tokens += child.computed_tokens
            self.running.admit(child)  # decoding from here on (done at once if it wanted one token)
            children.append(child)
        return children

    def release(self, done: list[Request], end_s: float) -> None:
        """Finished requests leave: their blocks go back (or into the prefix cache), with those
        promised for speculative tokens they did not want."""
        unwanted = 0 if self.running.single or self.kv.kind != "paged" else self.running.overshoot_blocks(done)
        self.running.remove(done)
        for req in done:
            req.finish_s = end_s
            self.kv.release(req)
            self.stored_tokens -= req.computed_tokens
        if unwanted:
            self.kv.promise(-unwanted)
