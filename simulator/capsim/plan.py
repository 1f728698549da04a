"""StepPlan: what one forward pass does. Schedulers produce it; the engine carries it out."""

from __future__ import annotations

from dataclasses import dataclass, field

from capsim.request import Request


@dataclass(slots=True)
class StepPlan:
    """One forward pass: `scheduled[i]` computes `new_tokens[i]` tokens.

    `repeat_steps` > 1 promises that the same decode-only batch runs that many identical steps with
    nothing else able to change (no admission, completion before the last one, or preemption):
    the engine may then advance them in one go (a macro-step).
    """

    scheduled: list[Request] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    rejected: list[tuple[Request, str]] = field(default_factory=list)
    repeat_steps: int = 1
    # Every running request decodes exactly one token: priced by CostModel.decode_steps (also when
    # repeat_steps is 1), so macro-steps and single steps share one code path.
    decode_only: bool = False
    # Slot count for slot-step utilisation (static batches keep finished members' slots idle).
    slots: int = 0
    # Whether a request arriving during this step could join the next one. False when admission
    # is blocked (no seat, budget or memory): a newcomer would only queue, so it cannot end a
    # macro-step early.
    wake_on_arrival: bool = True

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def num_tokens(self) -> int:
        return sum(self.new_tokens)

