"""The running set (capsim.sim.running): its decode clock and the aggregates a step is priced from
(context sums, sliding-window sums, block residues, first completion), against hand arithmetic
and, for random sequences of admissions, steps, completions and preemptions, against brute-force
sums over the live decoders.

A decoder with c computed tokens writes position c in its next step and attends to c + 1 tokens.
"""

from __future__ import annotations

from capsim.sim.running import RunningSet
from capsim.sim.speculative import DENOMINATOR, TokenSchedule
from helpers import decoding, make_request, running_set
from hypothesis import given, settings
from hypothesis import strategies as st

NEVER = 1 << 62  # what steps_to_first_finish / steps_to_window answer when nothing is coming


def test_context_sums_count_each_decoder_once_and_move_by_one_token_per_step():
    a, b, c = decoding(10, 20), decoding(20, 20), decoding(30, 20)  # contexts 10, 20, 30
    prefill = make_request(50, 5)  # still prefilling: running, but not a decoder
    rs = running_set(a, prefill, b, c)
    assert len(rs) == 4 and rs.num_decoding == 3 and rs.partial() == [prefill]
    assert not rs.is_decoder(prefill) and rs.get(prefill.id) is None and rs.get(b.id) is b
    assert (rs.context_sum(0), rs.context_sum(1), rs.context_sum(2)) == (60, 63, 66)
    assert rs.tokens_ahead(7) == 7

    rs.advance(5, 1.25)
    assert rs.tick == 5 and rs.steps == 5
    assert rs.context_sum(1) == 63 + 3 * 5
    assert a.computed_tokens == 10  # the fields are written only when someone looks
    assert rs.decoders() == [a, prefill, b, c]
    assert [r.computed_tokens for r in (a, b, c)] == [15, 25, 35]
    assert [r.generated_tokens for r in (a, b, c)] == [6, 6, 6]
    assert a.last_token_s == 1.25 and prefill.computed_tokens == 0 and prefill.last_token_s is None
    assert rs.context_sum(1) == 78  # syncing changes the representation, not the sums


def test_a_sliding_window_caps_each_context_and_says_when_the_next_one_reaches_it():
    rs = running_set(decoding(10, 40), decoding(14, 40), decoding(20, 40), window=16)  # contexts 10, 14, 20
    assert rs.sliding_context_sum(1) == 11 + 15 + 16
    assert rs.sliding_context_sum(0) == 10 + 14 + 16
    assert rs.num_above_window() == 1
    assert rs.steps_to_window() == 2  # the context-14 decoder attends 16 tokens in two steps, 17 in three
    assert rs.sliding_context_sum(2) == 12 + 16 + 16
    assert rs.decode_context(1) == (11 + 15 + 21, 11 + 15 + 16)

    rs.advance(2, 0.5)  # contexts 12, 16, 22
    assert rs.sliding_context_sum(1) == 13 + 16 + 16
    assert rs.num_above_window() == 2
    assert rs.steps_to_window() == 4
    assert rs.context_sum(1) == 13 + 17 + 23

    no_window = running_set(decoding(10, 40))
    assert no_window.decode_context(1) == (11, 0) and no_window.steps_to_window() == NEVER


def test_a_decoder_preempted_below_the_window_comes_back_below_it():
    y = decoding(5, 40)
    rs = running_set(decoding(10, 40), y, window=16)  # y reaches the window in 11 steps
    rs.remove([y])
    rs.admit(y)  # back at once: the window entry of its first admission is stale
    rs.advance(6, 0.6)  # contexts 16 and 11: the first is past the window, y is not
    assert rs.num_above_window() == 1
    assert rs.sliding_context_sum(1) == 16 + 12
    assert rs.steps_to_window() == 5


def test_new_blocks_residues_and_the_steps_that_fit_in_free_blocks():
    # Block size 4: a decoder needs a new block in the step that writes position 0 mod 4.
    rs = running_set(decoding(8, 40), decoding(9, 40), decoding(11, 40), block_size=4)
    # Steps from now (0-based) at which each needs a block: 8 -> 0, 4, 8; 9 -> 3, 7; 11 -> 1, 5.
    assert rs.residues() == (1, 1, 0, 1)
    assert [rs.new_blocks(k) for k in (1, 2, 3, 4, 5, 8)] == [1, 2, 2, 3, 4, 6]
    assert rs.max_steps_within(2, 10) == 3  # the fourth step needs a third block
    assert rs.max_steps_within(0, 10) == 0
    assert rs.max_steps_within(6, 8) == 8 and rs.max_steps_within(5, 10) == 7

    rs.advance(1, 0.1)  # contexts 9, 10, 12: the histogram turns with the clock
    assert rs.residues() == (1, 0, 1, 1)
    assert rs.new_blocks(1) == 1 and rs.new_blocks(4) == 3


def test_completions_come_out_once_and_a_restarted_request_drops_its_old_finish():
    a = decoding(10, 3)   # 2 tokens to go
    b = decoding(10, 6)   # 5 tokens to go
    c = decoding(10, 20)  # 19 tokens to go
    rs = running_set(a, b, c)
    assert rs.steps_to_first_finish() == 2
    rs.advance(1, 0.1)
    assert rs.finishing() == []
    rs.advance(1, 0.2)
    assert rs.finishing() == [a] and rs.finishing() == []  # popped once
    rs.remove([a])
    assert (a.generated_tokens, a.computed_tokens, a.finished) == (3, 12, True)
    assert rs.steps_to_first_finish() == 3

    rs.remove([b])  # preempted at tick 2 with 3 of its 6 tokens: it would have finished at tick 5
    assert (b.generated_tokens, b.computed_tokens) == (3, 12) and rs.num_decoding == 1
    rs.advance(2, 0.4)  # tick 4, c alone
    rs.admit(b)  # back (its KV recomputed): 3 tokens to go from tick 4, so done at tick 7
    assert rs.order == [c, b]
    rs.advance(1, 0.5)
    assert rs.finishing() == []  # tick 5: its first admission's finish is stale
    assert rs.steps_to_first_finish() == 2
    rs.advance(2, 0.7)
    assert rs.finishing() == [b]
    rs.remove([b, c])
    assert not rs and rs.steps_to_first_finish() == NEVER and rs.context_sum(1) == 0


def test_class_counts_follow_decoders_in_and_out():
    rs = RunningSet(4, num_classes=3)
    reqs = [decoding(10, 9, class_index=k) for k in (0, 2, 2)]
    for r in reqs:
        rs.admit(r)
    rs.admit(make_request(10, 9, class_index=1))  # prefilling: not counted
    assert rs.class_counts == [1, 0, 2]
    rs.stop_decoding(reqs[1])  # (the engine does this for decoders a plan schedules explicitly)
    assert rs.class_counts == [1, 0, 1] and rs.num_decoding == 2 and len(rs) == 4
    rs.start_decoding(reqs[1])
    rs.remove([reqs[0]])
    assert rs.class_counts == [0, 0, 2]


def test_speculative_steps_gain_the_schedules_tokens_and_drop_the_overshoot():
    three = TokenSchedule(3 * DENOMINATOR)  # every step gains three tokens
    rs = RunningSet(4, schedule=three)
    r = decoding(11, 5, generated=4)  # context 14, wants one more token
    long = decoding(20, 50)           # context 20
    rs.admit(r)
    rs.admit(long)
    assert rs.tokens_ahead(2) == 6
    assert rs.context_sum(1) == 15 + 21 and rs.context_sum(2) == 18 + 24
    assert rs.steps_to_first_finish() == 1
    rs.advance(1, 0.1)
    assert rs.tick == 3 and rs.steps == 1
    assert rs.finishing() == [r]
    assert rs.overshoot([r]) == 2  # three tokens came, one was wanted
    # The step wrote positions 14, 15 and 16; only 14 was wanted, and 16 opened a block of its own.
    assert rs.overshoot_blocks([r]) == 1
    rs.remove([r])
    assert (r.generated_tokens, r.computed_tokens) == (5, 15)
    assert rs.steps_to_first_finish() == 16  # 46 tokens to go at three a step

    two_and_a_half = RunningSet(4, schedule=TokenSchedule(5 * DENOMINATOR // 2))  # 2, 3, 2, 3, ...
    two_and_a_half.admit(decoding(10, 50))
    assert [two_and_a_half.tokens_ahead(k) for k in (1, 2, 3)] == [2, 5, 7]
    assert two_and_a_half.context_sum(3) == 10 + 5 + 1  # two steps' tokens, then the one it computes
    two_and_a_half.advance(1, 0.1)
    assert two_and_a_half.tokens_ahead(1) == 3


# ---- property: the incremental aggregates equal sums over the live decoders

def _check(rs: RunningSet, live: dict, bs: int, window: int) -> None:
    """Every aggregate against a brute-force recount over the model's live decoders."""
    contexts = [c for c, _, _, _ in live.values()]
    for j in range(4):
        assert rs.context_sum(j) == sum(c + j for c in contexts)
    assert rs.num_decoding == len(live)
    assert rs.class_counts == [sum(1 for *_, k in live.values() if k == cls) for cls in range(2)]
    for i, count in enumerate(rs.residues()):
        assert count == sum(1 for c in contexts if (c + i) % bs == 0)
    need = [sum(sum(1 for i in range(k) if (c + i) % bs == 0) for c in contexts) for k in range(13)]
    assert [rs.new_blocks(k) for k in range(1, 13)] == need[1:]
    for free in (0, 1, 3, 7):
        assert rs.max_steps_within(free, 12) == max(k for k in range(13) if need[k] <= free)
    to_go = [out - gen for _, gen, out, _ in live.values()]
    assert rs.steps_to_first_finish() == (min(to_go) if to_go else NEVER)
    if window:
        below = [window - c for c in contexts if c + 1 <= window]
        to_window = min(below) if below else NEVER
        assert rs.steps_to_window() == to_window
        assert rs.num_above_window() == len(contexts) - len(below)
        for j in range(min(3, to_window) + 1):
            assert rs.sliding_context_sum(j) == sum(min(c + j, window) for c in contexts)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from([1, 2, 4, 16]), st.sampled_from([0, 5, 12, 40]))
def test_aggregates_equal_brute_force_sums_over_random_histories(data, bs, window):
    rs = RunningSet(bs, window, num_classes=2)
    live: dict[int, tuple[int, int, int, int]] = {}  # id -> (context, generated, output, class): the model
    reqs: dict[int, object] = {}
    out: list = []  # preempted requests that may come back
    now = 0.0
    for _ in range(data.draw(st.integers(1, 25), label="operations")):
        op = data.draw(st.sampled_from(["start", "start", "advance", "advance", "preempt", "readmit"]))
        if op == "start":
            output = data.draw(st.integers(2, 30))
            r = decoding(data.draw(st.integers(1, 50)), output, generated=data.draw(st.integers(1, output - 1)),
                         class_index=data.draw(st.integers(0, 1)))
            rs.admit(r)
            reqs[r.id], live[r.id] = r, (r.computed_tokens, r.generated_tokens, output, r.class_index)
        elif op == "advance" and live:
            k = data.draw(st.integers(1, min(6, rs.steps_to_first_finish())))
            now += k
            rs.advance(k, now)
            live = {i: (c + k, g + k, o, cls) for i, (c, g, o, cls) in live.items()}
            done = rs.finishing()
            assert sorted(r.id for r in done) == sorted(i for i, (_, g, o, _) in live.items() if g >= o)
            rs.remove(done)
            for r in done:
                c, g, o, _ = live.pop(r.id)
                assert (r.computed_tokens, r.generated_tokens, r.last_token_s) == (c, g, now)
        elif op == "preempt" and live:
            r = reqs[data.draw(st.sampled_from(sorted(live)))]
            rs.remove([r])
            c, g, _, _ = live.pop(r.id)
            assert (r.computed_tokens, r.generated_tokens) == (c, g)
            out.append(r)
        elif op == "readmit" and out:
            r = out.pop(data.draw(st.integers(0, len(out) - 1)))
            rs.admit(r)
            live[r.id] = (r.computed_tokens, r.generated_tokens, r.output_tokens, r.class_index)
        _check(rs, live, bs, window)
    for r in rs.decoders():
        assert (r.computed_tokens, r.generated_tokens) == live[r.id][:2]
