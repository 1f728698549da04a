"""The engine's request records and inter-token gap log (capsim.sim.request_log)."""

import numpy as np
import pytest
from capsim.results.summary import Gaps, request_frame
from capsim.sim.request_log import GapLog, RequestLog
from helpers import make_request


def test_request_records_derive_vllm_latencies():
    log = RequestLog(("too_long",))
    r = make_request(10, 5, rid=0, arrival_s=1.0)
    r.first_scheduled_s, r.first_token_s, r.finish_s, r.generated_tokens = 1.5, 2.0, 4.0, 5
    log.write(r, "completed")
    df = request_frame(log.columns(), log.class_names, log.reject_reasons)
    row = df.iloc[0]
    assert row["ttft_ms"] == 1000.0 and row["e2el_ms"] == 3000.0 and row["queueing_ms"] == 500.0
    assert row["tpot_ms"] == pytest.approx(2000.0 / 4)  # (E2EL - TTFT) / (n - 1)
    assert row["outcome"] == "completed" and row["reject_reason"] == ""


def test_front_end_time_adds_to_ttft_and_e2el_but_not_to_tpot():
    log = RequestLog(("too_long",), front_end=(0.010, 1e-5))  # 10 ms + 10 us per prompt token
    r = make_request(1000, 5, rid=0, arrival_s=1.0)
    r.first_scheduled_s, r.first_token_s, r.finish_s, r.generated_tokens = 1.5, 2.0, 4.0, 5
    log.write(r, "completed")
    row = request_frame(log.columns(), log.class_names, log.reject_reasons).iloc[0]
    assert row["ttft_ms"] == pytest.approx(1000.0 + 10.0 + 10.0)  # 1 s + 10 ms + 1,000 x 10 us
    assert row["e2el_ms"] == pytest.approx(3000.0 + 20.0)
    assert row["queueing_ms"] == 500.0 and row["tpot_ms"] == pytest.approx(2000.0 / 4)


def test_gap_log_expands_segments():
    g = GapLog()
    g.add(1.0, 2)
    g.add_segment(3, (5, 0))  # ends 10, 13, 17: two gaps, 3 and 4, shared by 5 sequences of class 0
    g.add_segment(2, (2, 1))  # ends 20, 21
    g.add(2.0, 1, cls=1)
    view = Gaps(*g.parts(np.array([10.0, 13.0, 17.0, 20.0, 21.0])))  # the StepLog's segment ends
    gaps, counts, classes = view.arrays()
    entries = sorted(zip(gaps.tolist(), counts.tolist(), classes.tolist()))
    assert entries == [(1.0, 1, 1), (1.0, 2, 0), (1.0, 2, 0), (2.0, 1, 1), (3.0, 5, 0), (4.0, 5, 0)]
    view.CHUNK_SEGMENTS = view.CHUNK_SINGLE = 1  # chunk by chunk: the same entries
    pieces = sorted((g, n) for part in view.pieces() for g, n in zip(*(a.tolist() for a in part)))
    assert pieces == sorted((g, n) for g, n, _ in entries)
    class_one = sorted((g, n) for part in view.pieces(1) for g, n in zip(*(a.tolist() for a in part)))
    assert class_one == [(1.0, 1), (2.0, 1)]


def test_gap_log_takes_first_gaps_from_segment_starts_and_step_gaps_from_the_step_log():
    """A segment added with `first` also has the gap from its start to its first end, and the
    (gap_s, count) pairs single steps carry join the one-off gaps as class 0: the same entries
    as recording each of them in the GapLog."""
    g = GapLog()
    g.add_segment(2, (3, 1), first=True)  # start 8: gaps 10 - 8 = 2 (3 of class 0, 1 of class 1), then 3
    g.add_segment(2, (4, 0))  # its first gap recorded elsewhere
    view = Gaps(*g.parts(np.array([10.0, 13.0, 20.0, 25.0]), np.array([8.0, 19.0]),
                  (np.array([0.5]), np.array([6]), np.array([14.0]))))
    entries = sorted(zip(*(a.tolist() for a in view.arrays())))
    assert entries == [(0.5, 6, 0), (2.0, 1, 1), (2.0, 3, 0), (3.0, 1, 1), (3.0, 3, 0), (5.0, 4, 0)]
    view.CHUNK_SEGMENTS = view.CHUNK_SINGLE = 1
    assert sorted((g, n) for part in view.pieces(1) for g, n in zip(*(a.tolist() for a in part))) == [(2.0, 1), (3.0, 1)]
    with pytest.raises(ValueError):
        Gaps(*g.parts(np.array([10.0, 13.0, 20.0, 25.0])))  # first gaps without the start times


def test_gaps_in_a_time_window_are_those_that_end_inside_it():
    # one-off gaps ending at 5 and 12; a segment with ends 10, 13, 17 (gaps ending at 13 and 17)
    g = GapLog()
    g.add(1.0, 2, end_s=5.0)
    g.add(4.0, 1, end_s=12.0)
    g.add_segment(3, (5,))
    view = Gaps(*g.parts(np.array([10.0, 13.0, 17.0])))
    inside = sorted((x, n) for part in view.pieces(window=(11.0, 16.0)) for x, n in zip(*(a.tolist() for a in part)))
    assert inside == [(3.0, 5), (4.0, 1)]

