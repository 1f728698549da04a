"""Request: token counts and timestamps, nothing else.

Token catch-up model (DESIGN §2): a request knows `prompt_tokens + generated_tokens` tokens and has
computed the KV of `computed_tokens` of them. Each step gives it some new tokens to compute; when
it catches up with everything it knows, the model samples one more output token.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Request:
    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # tokens it will generate (benchmarks' ignore_eos / max_tokens)
    computed_tokens: int = 0
    generated_tokens: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    recomputed_tokens: int = 0
    user: int | None = None  # closed-loop user that sent it
    replica: int = 0
    class_index: int = 0  # which of the workload's request classes it was drawn from
    shared_prefix_tokens: int = 0  # leading prompt tokens identical across its class (a system prompt)
    session: int | None = None  # multi-turn session whose history its prompt resends
    samples: int = 1  # parallel samples (n): the prompt is prefilled once and n answers decode
    parent: int | None = None  # for a sample forked off another request: that request's id

    @property
    def known_tokens(self) -> int:
        """Tokens that exist so far (prompt + outputs); the target `computed_tokens` chases."""
        return self.prompt_tokens + self.generated_tokens

    @property
    def pending_tokens(self) -> int:
        return self.prompt_tokens + self.generated_tokens - self.computed_tokens

    @property
    def max_tokens(self) -> int:
        """Length the request reaches if it runs to completion (the last token's KV is never written)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def is_decoding(self) -> bool:
        return self.generated_tokens > 0 and self.computed_tokens == self.known_tokens - 1

    @property
    def finished(self) -> bool:
        return self.generated_tokens >= self.output_tokens
