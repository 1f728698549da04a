"""StepPlan: what one forward pass does. Schedulers produce it; the engine carries it out."""

from __future__ import annotations

from dataclasses import dataclass, field

from capsim.request import Request


@dataclass(slots=True)
class StepPlan:
    """One forward pass: `scheduled[i]` computes `new_tokens[i]` tokens, and when `decode_all`
    is set every decoding request of the running set also computes one token (not listed:
    that is what keeps a decode step O(1)).

    `repeat_steps` > 1 promises that the same decode-only batch runs that many identical steps with
    nothing else able to change (no admission, completion before the last one, or preemption):
    the engine may then advance them in one go (a macro-step).
    """

    scheduled: list[Request] = field(default_factory=list)
    decode_all: bool = False
    num_decodes: int = 0  # how many requests decode_all covers
    new_tokens: list[int] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    cached_blocks: list[int] = field(default_factory=list)  # per admitted request: prefix-cache hits
    preempted: list[Request] = field(default_factory=list)
    rejected: list[tuple[Request, str]] = field(default_factory=list)
    repeat_steps: int = 1
    # decode_all and nothing else: priced by CostModel.decode_steps (also when repeat_steps is 1),
    # so macro-steps and single steps share one code path.
    decode_only: bool = False
    # Slot count for slot-step utilisation (static batches keep finished members' slots idle).
    slots: int = 0
    # Whether a request arriving during this step could join the next one. False when admission
    # is blocked (no seat, budget or memory): a newcomer would only queue, so it cannot end a
    # macro-step early.
    wake_on_arrival: bool = True

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.num_decodes

    @property
    def num_tokens(self) -> int:
        return sum(self.new_tokens) + self.num_decodes

    @property
    def num_seqs(self) -> int:
        return len(self.scheduled) + self.num_decodes

