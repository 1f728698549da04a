"""Request: token counts and timestamps, nothing else.

Token catch-up model (DESIGN §2): a request knows `prompt_tokens + generated_tokens` tokens and has
computed the KV of `computed_tokens` of them. Each step gives it some new tokens to compute; when
it catches up with everything it knows, the model samples one more output token.
"""

from __future__ import annotations


class Request:
    """One request's counts and times."""

    # PERF: a plain class, not a dataclass: mypyc compiles this __init__ (one per arrival).

    def __init__(self, id: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 computed_tokens: int = 0, generated_tokens: int = 0, first_scheduled_s: float | None = None,
                 first_token_s: float | None = None, last_token_s: float | None = None,
                 finish_s: float | None = None, preemptions: int = 0, recomputed_tokens: int = 0,
                 user: int | None = None, replica: int = 0, class_index: int = 0, shared_prefix_tokens: int = 0,
                 session: int | None = None, samples: int = 1, parent: int | None = None,
                 first_of_user: bool = False, prompt_id: int | None = None) -> None:
        self.id = id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens  # tokens it will generate (benchmarks' ignore_eos / max_tokens)
        self.computed_tokens = computed_tokens
        self.generated_tokens = generated_tokens
        self.first_scheduled_s = first_scheduled_s
        self.first_token_s = first_token_s
        self.last_token_s = last_token_s
        self.finish_s = finish_s
        self.preemptions = preemptions
        self.recomputed_tokens = recomputed_tokens
        self.user = user  # closed-loop user that sent it
        self.replica = replica
        self.class_index = class_index  # which of the workload's request classes it was drawn from
        self.shared_prefix_tokens = shared_prefix_tokens  # leading prompt tokens identical across its class
        self.session = session  # multi-turn session whose history its prompt resends
        self.samples = samples  # parallel samples (n): the prompt is prefilled once and n answers decode
        self.parent = parent  # for a sample forked off another request: that request's id
        self.first_of_user = first_of_user  # its closed-loop user's first request (the ramp's wave)
        self.prompt_id = prompt_id  # which prompt of a replayed set it re-sends (workload prompt_set)

    def __repr__(self) -> str:
        return (f"Request(id={self.id}, arrival_s={self.arrival_s}, prompt_tokens={self.prompt_tokens}, "
                f"output_tokens={self.output_tokens}, computed_tokens={self.computed_tokens}, "
                f"generated_tokens={self.generated_tokens})")

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
