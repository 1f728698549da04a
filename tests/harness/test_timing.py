"""Timing: warm-up calls untimed, each repetition told its index, the flush run before each, the
median reported; on CUDA the host's launch latency kept outside the events unless asked for."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from capsim.harness import timing

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_warmups_are_untimed_and_each_rep_gets_its_index_after_a_flush():
    events = []
    result = timing.time_calls(lambda i: events.append(("call", i)), "cpu", warmup=2, reps=3,
                               flush=lambda: events.append(("flush", None)))
    assert events == [("call", -1), ("call", -2),
                      ("flush", None), ("call", 0), ("flush", None), ("call", 1), ("flush", None), ("call", 2)]
    assert result.reps == 3 and 0 <= result.min_s <= result.median_s <= result.max_s


def test_the_median_of_the_repetitions_is_reported(monkeypatch):
    """Against a fake clock that each call moves on by its own delay: the logic, not the machine's
    timer (a busy-wait measured 4 ms for 2 on a loaded machine)."""
    delays_s = [0.009, 0.0, 0.002]  # rep 0 slowest, rep 1 fastest; the mean (0.0037) is not the median
    now = [100.0]

    def call(i):
        now[0] += delays_s[i] if i >= 0 else 1.0  # warm-up calls take long and must not count

    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    result = timing.time_calls(call, "cpu", warmup=1, reps=3)
    assert (result.min_s, result.median_s, result.max_s) == pytest.approx((0.0, 0.002, 0.009), abs=1e-9)
    assert result.reps == 3


@pytest.mark.gpu
@cuda
def test_on_cuda_host_launch_latency_is_outside_the_events_unless_asked_for():
    x = torch.zeros(16, device="cuda")
    host_delay_s = 200e-6  # well under the ~0.5 ms the stream spins first

    def slow_launch(_):
        end = time.perf_counter() + host_delay_s
        while time.perf_counter() < end:
            pass
        x.add_(1.0)

    hidden = timing.time_calls(slow_launch, "cuda", reps=5)
    shown = timing.time_calls(slow_launch, "cuda", reps=5, hide_launch=False)
    assert hidden.median_s < host_delay_s / 4
    assert shown.median_s >= host_delay_s
