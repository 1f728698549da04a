"""Request: the token catch-up bookkeeping."""

from helpers import decoding, make_request


def test_catch_up_states():
    r = make_request(100, 3)
    assert r.pending_tokens == 100 and not r.is_decoding and r.max_tokens == 103
    r.computed_tokens, r.generated_tokens = 100, 1  # prefill done, first token sampled
    assert r.pending_tokens == 1 and r.is_decoding and not r.finished
    r.computed_tokens, r.generated_tokens = 102, 3
    assert r.finished
    assert decoding(50, 10, generated=4).computed_tokens == 53


def test_after_preemption_everything_known_is_recomputed():
    r = decoding(100, 10, generated=5)
    r.computed_tokens = 0
    assert r.pending_tokens == 105 and not r.is_decoding
