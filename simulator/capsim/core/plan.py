"""StepPlan: what one forward pass does. Schedulers produce it; the engine carries it out."""

from __future__ import annotations

from capsim.core.request import Request


class StepPlan:
    """One forward pass: `scheduled[i]` computes `new_tokens[i]` tokens, and when `decode_all`
    is set every decoding request of the running set also computes one token (not listed:
    that is what keeps a decode step O(1)).

    `repeat_steps` > 1 promises that the same decode-only batch runs that many identical steps with
    nothing else able to change (no admission, completion before the last one, or preemption):
    the engine may then advance them in one go (a macro-step).
    """

    # PERF: a plain class, not a dataclass: mypyc compiles this __init__ (one plan per step).

    def __init__(self, scheduled: list[Request] | None = None, new_tokens: list[int] | None = None, *,
                 slots: int = 0, wake_on_arrival: bool = True) -> None:
        self.scheduled: list[Request] = [] if scheduled is None else scheduled
        self.new_tokens: list[int] = [] if new_tokens is None else new_tokens
        self.decode_all = False
        self.num_decodes = 0  # how many requests decode_all covers
        self.admitted: list[Request] = []
        self.cached_blocks: list[int] = []  # per admitted request: prefix-cache hits
        self.preempted: list[Request] = []
        self.rejected: list[tuple[Request, str]] = []
        self.repeat_steps = 1
        # decode_all and nothing else: priced by CostModel.decode_steps (also when repeat_steps is
        # 1), so macro-steps and single steps share one code path.
        self.decode_only = False
        # Slot count for slot-step utilisation (static batches keep finished members' slots idle).
        self.slots = slots
        # Whether a request arriving during this step could join the next one. False when
        # admission is blocked (no seat, budget or memory): a newcomer would only queue, so it
        # cannot end a macro-step early.
        self.wake_on_arrival = wake_on_arrival

    def __repr__(self) -> str:
        return (f"StepPlan(scheduled={[r.id for r in self.scheduled]}, new_tokens={self.new_tokens}, "
                f"decode_all={self.decode_all}, num_decodes={self.num_decodes}, "
                f"preempted={[r.id for r in self.preempted]}, repeat_steps={self.repeat_steps})")

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.num_decodes

    @property
    def num_tokens(self) -> int:
        total = self.num_decodes
        for n in self.new_tokens:  # PERF: a loop; compiled, builtins.sum is a Python call
            total += n
        return total

    @property
    def num_seqs(self) -> int:
        return len(self.scheduled) + self.num_decodes

