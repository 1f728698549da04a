"""The running requests of one replica, with the aggregates that make a decode step O(1).

Between events, every decoding request gains exactly one token per step. So instead of touching
each request every step, the set keeps a decode clock `tick` and, per decoding request, the tick
at which its counters were last written (`sync`). Its live counters are the written ones plus
(tick - that tick). Sums over the decoding requests (contexts, sliding-window contexts), the
block-boundary residues and the completion order are kept incrementally, so the cost of a step,
the blocks k steps need, and the first completion are all O(1) or O(block_size).

Requests are synced (their Request fields brought up to date) whenever anyone looks at them
one by one: `decoders()`, completion, preemption. Syncing changes representation, not state.
"""

from __future__ import annotations

import heapq

from capsim.core.request import Request
from capsim.sim.speculative import TokenSchedule


class RunningSet:
    def __init__(self, block_size: int, window: int = 0, num_classes: int = 1,
                 schedule: TokenSchedule | None = None) -> None:
        self.order: list[Request] = []  # admission order, oldest first (all running requests)
        # `tick` counts the tokens every decoder has gained, `steps` the decode steps: the same
        # unless speculative decoding gains several tokens a step (capsim.sim.speculative).
        self.schedule = schedule or TokenSchedule()
        self.single = self.schedule.single
        self.tick = 0
        self.steps = 0
        self.last_decode_end_s = 0.0  # when the decoding requests last emitted together
        self.bs, self.window = block_size, window
        self._tick0: dict[int, int] = {}  # decoding request id -> tick its counters were written
        self._base: dict[int, int] = {}  # decoding request id -> computed - tick0 (constant)
        self.num_decoding = 0
        self.base_sum = 0
        self.hist = [0] * block_size  # decoders by the tick residue at which they need a block
        self.class_counts = [0] * num_classes
        # Heaps hold (tick, entry number); an entry is live while _entry[id] is its number (a
        # request that stops and later starts decoding again gets a new one).
        self._finish: list[tuple[int, int, int]] = []  # (tick at which it has all its tokens, entry, id)
        self._entry: dict[int, int] = {}
        self._entries = 0
        self._by_id: dict[int, Request] = {}
        # sliding windows: decoders whose next attended context is still within the window
        self._below: set[int] = set()
        self.below_sum = 0
        self._cross: list[tuple[int, int, int]] = []  # (tick after which it reaches the window, entry, id)

    # ------------------------------------------------------------------ membership

    def __len__(self) -> int:
        return len(self.order)

    def __bool__(self) -> bool:
        return bool(self.order)

    def admit(self, req: Request) -> None:
        self.order.append(req)
        if req.is_decoding:
            self.start_decoding(req)

    def remove(self, reqs: list[Request]) -> None:
        for req in reqs:
            if req.id in self._tick0:
                self.stop_decoding(req)
        if len(reqs) < 8:
            for req in reqs:
                self.order.remove(req)
        else:
            gone = {id(r) for r in reqs}
            self.order = [r for r in self.order if id(r) not in gone]

    def get(self, rid: int) -> Request | None:
        """A decoding request by id (None if it is not decoding)."""
        return self._by_id.get(rid)

    def is_decoder(self, req: Request) -> bool:
        return req.id in self._tick0

    def partial(self) -> list[Request]:
        """Running requests that are not decoding (prefill chunks still to go), oldest first.
        They are few and usually the newest, so the scan starts at the newest end and stops once
        it has them all."""
        order, tick0 = self.order, self._tick0
        missing = len(order) - self.num_decoding
        found: list[Request] = []
        i = len(order) - 1
        while missing:
            req = order[i]
            if req.id not in tick0:
                found.append(req)
                missing -= 1
            i -= 1
        found.reverse()
        return found

    # ------------------------------------------------------------------ decoding aggregates

    def start_decoding(self, req: Request) -> None:
        """The request has caught up with its prompt and will now gain one token per step."""
        rid, tick = req.id, self.tick
        base = req.computed_tokens - tick
        self._tick0[rid], self._base[rid], self._by_id[rid] = tick, base, req
        self.num_decoding += 1
        self.base_sum += base
        self.hist[(-base) % self.bs] += 1
        self.class_counts[req.class_index] += 1
        self._entries += 1
        entry = self._entry[rid] = self._entries
        heapq.heappush(self._finish, (tick + req.output_tokens - req.generated_tokens, entry, rid))
        if self.window and base + tick + 1 <= self.window:
            self._below.add(rid)
            self.below_sum += base
            heapq.heappush(self._cross, (self.window - base, entry, rid))

    def stop_decoding(self, req: Request) -> None:
        self.sync(req)
        rid = req.id
        base = self._base.pop(rid)
        del self._tick0[rid], self._by_id[rid], self._entry[rid]
        self.num_decoding -= 1
        self.base_sum -= base
        self.hist[(-base) % self.bs] -= 1
        self.class_counts[req.class_index] -= 1
        if rid in self._below:
            self._below.discard(rid)
            self.below_sum -= base

    def sync(self, req: Request) -> None:
        """Write a decoding request's live counters into its fields (a speculative step that
        gains more tokens than it still wants keeps only those)."""
        rid = req.id
        delta = self.tick - self._tick0[rid]
        if delta:
            req.computed_tokens += delta
            req.generated_tokens += delta
            extra = req.generated_tokens - req.output_tokens
            if extra > 0:
                req.generated_tokens -= extra
                req.computed_tokens -= extra
            req.last_token_s = self.last_decode_end_s
            self._tick0[rid] = self.tick

    def overshoot(self, done: list[Request]) -> int:
        """Tokens the last speculative step gave these finished decoders beyond what they wanted
        (sync drops them; whoever counted the step's tokens must too). 0 at one token a step."""
        if self.single:
            return 0
        tick, tick0 = self.tick, self._tick0
        return sum(max(0, r.generated_tokens + tick - tick0[r.id] - r.output_tokens) for r in done)

    def overshoot_blocks(self, done: list[Request]) -> int:
        """Blocks promised to these finished decoders for the tokens overshoot() drops: the
        blocks a step promises cover every token it gives, wanted or not (0 at one token a step)."""
        if self.single:
            return 0
        bs, tick, tick0 = self.bs, self.tick, self._tick0
        total = 0
        for r in done:
            if r.id not in tick0:
                continue
            gained = tick - tick0[r.id]
            extra = r.generated_tokens + gained - r.output_tokens
            if extra > 0:
                live = r.computed_tokens + gained
                total += -(-live // bs) - -(-(live - extra) // bs)  # blocks_for(live) - blocks_for(live - extra)
        return total

    def tokens_ahead(self, k: int) -> int:
        """Tokens each decoder gains over the next k decode steps."""
        return k if self.single else self.schedule.ahead(self.steps, k)

    def decoders(self) -> list[Request]:
        """All running requests in admission order, decoding ones synced."""
        for req in self._by_id.values():
            self.sync(req)
        return self.order

    def context_sum(self, steps_ahead: int = 1) -> int:
        """Sum over decoders of the context each attends to `steps_ahead` steps from now (the
        first token it computes in that step)."""
        return self.base_sum + self.num_decoding * (self.tick + self._offset(steps_ahead))

    def _offset(self, steps_ahead: int) -> int:
        return steps_ahead if self.single or steps_ahead == 0 else self.tokens_ahead(steps_ahead - 1) + 1

    def sliding_context_sum(self, steps_ahead: int = 1) -> int:
        """As context_sum, each capped at the sliding window (valid for steps before steps_to_window)."""
        self._move_crossed()
        above = self.num_decoding - len(self._below)
        return self.below_sum + len(self._below) * (self.tick + self._offset(steps_ahead)) + self.window * above

    def decode_context(self, steps_ahead: int = 1) -> tuple[int, int]:
        """(context_sum, sliding_context_sum) as CostModel.step_cost takes them; 0 for the
        sliding part without a window."""
        return self.context_sum(steps_ahead), self.sliding_context_sum(steps_ahead) if self.window else 0

    def num_above_window(self) -> int:
        self._move_crossed()
        return self.num_decoding - len(self._below)

    def _live(self, entry: int, rid: int) -> bool:
        return self._entry.get(rid) == entry

    def steps_to_first_finish(self) -> int:
        heap = self._finish
        while heap and not self._live(heap[0][1], heap[0][2]):
            heapq.heappop(heap)
        if not heap:
            return 1 << 62
        tokens = heap[0][0] - self.tick
        return tokens if self.single else self.schedule.steps_for(self.steps, tokens)

    def finishing(self) -> list[Request]:
        """Decoders that have all their tokens at the current tick (popped from the heap)."""
        done = []
        heap = self._finish
        while heap and heap[0][0] <= self.tick:
            _, entry, rid = heapq.heappop(heap)
            if self._live(entry, rid):
                done.append(self._by_id[rid])
        return done

    def steps_to_window(self) -> int:
        """Decode steps before some decoder's context passes its sliding window (then the
        per-step sliding sum changes slope, so a macro-step stops there)."""
        if not self.window:
            return 1 << 62
        self._move_crossed()
        if not self._cross:
            return 1 << 62
        tokens = self._cross[0][0] - self.tick
        return tokens if self.single else max(1, self.schedule.steps_for(self.steps, tokens) - 1)

    def _move_crossed(self) -> None:
        """Decoders whose next step would attend past the window now count as `window`."""
        cross = self._cross
        while cross and (not self._live(cross[0][1], cross[0][2]) or cross[0][0] <= self.tick):
            _, entry, rid = heapq.heappop(cross)
            if self._live(entry, rid) and rid in self._below:
                self._below.discard(rid)
                self.below_sum -= self._base[rid]

    def new_blocks(self, k: int) -> int:
        """Blocks the decoders need over the next k steps (one each time a block fills)."""
        if not self.single:
            return self._blocks_over(self.tokens_ahead(k))
        if k == 1:
            return self.hist[self.tick % self.bs]
        return self._blocks_over(k)

    def _blocks_over(self, k: int) -> int:
        """Blocks the decoders need while each gains k more tokens: one each per block_size
        tokens, plus the histogram's counts over the partial cycle (at most block_size terms)."""
        # PERF: a loop, cheaper compiled than keeping prefix sums current as decoders come and go.
        bs, hist = self.bs, self.hist
        full, part = divmod(k, bs)
        start = self.tick % bs
        total = full * self.num_decoding
        for i in range(start, start + part):
            total += hist[i - bs] if i >= bs else hist[i]
        return total

    def max_steps_within(self, free_blocks: int, k_max: int) -> int:
        """Largest k <= k_max whose new blocks fit in free_blocks."""
        n = self.num_decoding
        if self.new_blocks(k_max) <= free_blocks:
            return k_max
        if not self.single:  # several tokens a step: search over steps
            lo, hi = 0, k_max
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if self.new_blocks(mid) <= free_blocks else (lo, mid)
            return lo
        cycles = free_blocks // n if n else 0
        left = free_blocks - cycles * n
        k = cycles * self.bs
        start = (self.tick + k) % self.bs
        for i in range(self.bs):
            need = self.hist[(start + i) % self.bs]
            if need > left:
                break
            left -= need
            k += 1
        return min(k, k_max)

    def advance(self, k: int, end_s: float) -> None:
        """Every decoder went through k more decode steps, the last ending at end_s."""
        self.tick += self.tokens_ahead(k)
        self.steps += k
        self.last_decode_end_s = end_s

    def residues(self) -> tuple[int, ...]:
        """The block-boundary histogram rotated to start at the current tick."""
        start = self.tick % self.bs
        return tuple(self.hist[start:] + self.hist[:start])
