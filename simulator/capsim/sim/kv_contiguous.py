"""The contiguous KV-cache allocator: pre-paging servers, where each admitted request reserves its
maximum length up front (the paged one is capsim.sim.kv_cache). Memory is counted in tokens.
"""

from __future__ import annotations

from capsim.core.request import Request
from capsim.sim.running import RunningSet


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
        self.caching = False
        self.shared_units = 0
        self.state_units = 0

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

    def admission_units(self, req: Request, tokens_after: int, hit_blocks: int = 0, revived: int = 0) -> int:
        return self.reservation(req)

    def fork_units(self, req: Request, tokens_after: int) -> int:
        return 0

    def restore(self, req: Request) -> None:
        self.allocate(req, req.computed_tokens)

    def prefix_hits(self, req: Request) -> tuple[int, int]:
        return 0, 0  # no prefix caching without blocks

    def warm(self, keys: list[tuple]) -> None:
        pass  # no prefix caching without blocks

    def use_hits(self, req: Request, hit_blocks: int) -> None:
        pass

    def register(self, req: Request, upto_tokens: int | None = None) -> None:
        pass

    def decode_need(self, running: RunningSet, k: int) -> int:
        return 0  # everything was reserved at admission

    def max_decode_steps(self, running: RunningSet, k_max: int) -> int:
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
