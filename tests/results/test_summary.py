"""The run summary (vLLM's metric names): counts, throughputs and utilisations by hand."""

import pytest
from capsim.results.summary import Gaps, summarize
from capsim.sim.request_log import GapLog, RequestLog
from capsim.sim.step_log import StepLog, step_totals
from capsim.sim.step_records import StepRecord
from helpers import make_request


def test_summary_counts_throughput_and_kv_utilisation():
    log = RequestLog(("too_long",))
    done = make_request(100, 11, rid=0, arrival_s=0.0)
    done.first_scheduled_s, done.first_token_s, done.finish_s, done.generated_tokens = 0.0, 1.0, 2.0, 11
    log.write(done, "completed")
    log.write(make_request(5000, 1, rid=1, arrival_s=0.5), "rejected", "too_long")
    steps = StepLog(block_size=16)
    for end, stored in ((1.0, 16), (2.0, 32)):  # columns in StepLog.COLUMNS order
        steps.add(StepRecord(end, 1.0, 0, 1, 4, 0, 1, 1, 1e12, 1e9, 2, 32, stored, 0, 0, 0))
    gaps = GapLog()
    gaps.add(0.1, 10)
    s = summarize(log.columns(), step_totals(steps._single_columns()), Gaps(*gaps.parts()), duration_s=4.0, peak_flops=1e12,
                  bandwidth_bytes_per_s=1e9, kv_capacity_tokens=64, reject_reasons=("too_long",))
    assert s["completed"] == 1 and s["rejected"] == 1 and s["arrived"] == 2 and s["unfinished"] == 0
    assert s["rejected_reasons"] == {"too_long": 1}
    assert s["output_throughput"] == 11 / 4.0 and s["total_token_throughput"] == 111 / 4.0
    assert s["mean_itl_ms"] == pytest.approx(100.0) and s["p99_itl_ms"] == pytest.approx(100.0)
    assert s["kv_utilisation"] == pytest.approx(48 / 64)       # time-averaged stored / held
    assert s["kv_capacity_utilisation"] == pytest.approx(48 / (64 * 2))
    assert s["slot_utilisation"] == pytest.approx(2 / 8) and s["mfu"] == pytest.approx(1.0)
    assert s["gpu_busy_fraction"] == pytest.approx(0.5)
