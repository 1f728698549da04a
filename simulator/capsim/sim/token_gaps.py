"""When tokens are sampled: a request's first token (its TTFT) and the inter-token gaps its
decoding sequences see, written into the run's GapLog. The engine calls these after each pass."""

from __future__ import annotations

from capsim.core.request import Request
from capsim.sim.replica import Replica
from capsim.sim.request_log import GapLog


class TokenGaps:
    """The token-time side of a run's records (see the module docstring)."""

    def __init__(self, gaps: GapLog, num_classes: int) -> None:
        self.gaps = gaps
        self.num_classes = num_classes

    def step(self, rep: Replica, start: float, end: float) -> int:
        """The decoders' tokens of a general step, as `decoders` records them, except that with
        one request class the gap they share is returned for the step's record to carry (its
        duration is that gap): one record instead of two."""
        if self.num_classes != 1:
            self.decoders(rep, start, end)
            return 0
        counts = rep.running.class_counts
        if rep.stale:
            counts = self._stale(rep, end, list(counts))
        return counts[0]

    def decoders(self, rep: Replica, start: float, end: float) -> None:
        """The decoders' tokens of one step ending at `end`: one gap for all that emitted at
        `start`, their own gap for those a previous step skipped."""
        counts = rep.running.class_counts
        if rep.stale:
            counts = self._stale(rep, end, list(counts))
        for cls, count in enumerate(counts):
            if count:
                self.gaps.add(end - start, count, cls, end)

    def _stale(self, rep: Replica, end: float, counts: list[int]) -> list[int]:
        """Decoders a slow-path step skipped: their own gap since their last token."""
        for rid, last in rep.stale.items():
            req = rep.running.get(rid)
            if req is not None and last is not None:
                counts[req.class_index] -= 1
                self.gaps.add(end - last, 1, req.class_index, end)
        rep.stale.clear()
        return counts

    def emit(self, emitting: list[Request], start: float, end: float) -> None:
        """Each request in `emitting` samples one token at `end`; record TTFT or the gap."""
        group = [0] * self.num_classes
        for req in emitting:
            if req.first_token_s is None:
                req.first_token_s = end
            elif req.last_token_s == start:
                group[req.class_index] += 1
            else:
                assert req.last_token_s is not None  # it has its first token
                self.gaps.add(end - req.last_token_s, 1, req.class_index, end)
            req.last_token_s = end
            req.generated_tokens += 1
        for cls, count in enumerate(group):
            if count:
                self.gaps.add(end - start, count, cls, end)
