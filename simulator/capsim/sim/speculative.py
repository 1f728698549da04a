"""Speculative decoding: a draft proposes k tokens, the target model verifies them in one pass.

Per verification step a sequence gains on average E = (1 - a^(k+1)) / (1 - a) tokens (accepted
drafts plus the target's own next token; Leviathan et al., "Fast Inference from Transformers via
Speculative Decoding", ICML 2023, eq. 1), for a per-token acceptance rate a. capsim gives every
decoding sequence the same whole number of tokens per step, following a fixed schedule whose
running total after j steps is floor(j * E): deterministic, the right mean, and the same for a
macro-step as for single steps. (Real acceptance varies per sequence and step; the schedule
models its mean, not its spread.)
"""

from __future__ import annotations

from dataclasses import dataclass

DENOMINATOR = 1_000_000  # E is held as the fraction numerator / DENOMINATOR: integer arithmetic only


def expected_tokens(draft_tokens: int, acceptance_rate: float) -> float:
    """Mean tokens per verification step (accepted drafts + the bonus token)."""
    a, k = acceptance_rate, draft_tokens
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass(frozen=True)
class TokenSchedule:
    """Tokens each decoding sequence gains per step: total after j steps = j * numerator // DENOMINATOR."""

    numerator: int = DENOMINATOR  # one token per step

    @classmethod
    def for_speculation(cls, draft_tokens: int, acceptance_rate: float) -> TokenSchedule:
        return cls(round(expected_tokens(draft_tokens, acceptance_rate) * DENOMINATOR))

    @property
    def single(self) -> bool:
        return self.numerator == DENOMINATOR

    @property
    def mean(self) -> float:
        return self.numerator / DENOMINATOR

    def total(self, steps):
        """Tokens gained in the first `steps` steps (an int or a numpy integer array)."""
        return steps * self.numerator // DENOMINATOR

    def ahead(self, done: int, k: int) -> int:
        """Tokens gained in steps done+1 .. done+k."""
        return self.total(done + k) - self.total(done)

    def steps_for(self, done: int, tokens: int) -> int:
        """Fewest steps after `done` that gain at least `tokens` tokens."""
        if tokens <= 0:
            return 0
        target = self.total(done) + tokens
        steps = -(-target * DENOMINATOR // self.numerator) - done  # smallest s with total(done+s) >= target
        while self.total(done + steps) < target:
            steps += 1
        while steps > 1 and self.total(done + steps - 1) >= target:
            steps -= 1
        return max(1, steps)
