"""Multi-seed confidence: Student-t quantiles, intervals, aggregation and the few-samples flag."""

import math

import numpy as np
import pandas as pd
import pytest
from capsim.planning.seeds import aggregate, interval, run_seeds, t_quantile_975
from capsim.errors import CapsimError
from helpers import workload


@pytest.mark.parametrize("df, t", [(1, 12.7062047), (2, 4.3026527), (3, 3.1824463), (4, 2.7764451), (9, 2.2621572),
                                   (10, 2.2281389), (29, 2.0452296), (30, 2.0422725), (120, 1.9799304)])
def test_t_quantile_matches_the_tables(df, t):
    assert t_quantile_975(df) == pytest.approx(t, abs=1e-6)


def test_t_quantile_one_df_is_the_cauchy_quantile():
    assert t_quantile_975(1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-12)


def test_interval():
    mean, half = interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert half == pytest.approx(3.1824463 * np.std([1, 2, 3, 4], ddof=1) / 2)
    assert interval([5.0]) == (5.0, None)
    assert interval([1.0, None])[1] is None
    assert interval([0.74, 0.74, 0.74]) == (0.74, 0.0)  # equal values: exactly no spread, not float noise


def test_aggregate_keeps_setup_takes_means_and_unions_flags():
    runs = pd.DataFrame({"rate_per_s": [1, 1, 2, 2], "gpu": ["g"] * 4, "seed": [0, 1, 0, 1],
                         "p99_ttft_ms": [10.0, 12.0, 20.0, 20.0], "completed": [90, 120, 150, 150],
                         "samples_ttft": [90, 120, 150, 150], "saturated": [False, False, False, True],
                         "low_sample_percentiles": ["p99_ttft_ms;median_ttft_ms", "", "", ""]})
    out = aggregate(runs, ["rate_per_s"])
    assert list(out["rate_per_s"]) == [1, 2] and "seed" not in out and list(out["seeds"]) == [2, 2]
    assert list(out["p99_ttft_ms"]) == [11.0, 20.0]
    assert out["p99_ttft_ms_ci95"][0] == pytest.approx(12.7062047 * math.sqrt(2) / math.sqrt(2))
    assert out["p99_ttft_ms_ci95"][1] == 0.0
    assert list(out["samples_ttft"]) == [90, 150]
    assert list(out["low_sample_percentiles"]) == ["median_ttft_ms;p99_ttft_ms", ""]
    assert list(out["saturated"]) == [False, True]  # a point is saturated if any of its seeds is


def test_run_seeds_flags_percentiles_on_few_samples(round_gpu_file):
    # 40 requests per run: TTFT/TPOT/E2EL percentiles rest on 40 samples (flagged); ITL on
    # every inter-token gap (hundreds: not flagged); means are never flagged.
    res = run_seeds(workload(round_gpu_file), 3, workers=1)
    assert list(res.runs["seed"]) == [1, 2, 3]
    assert res.runs["p99_ttft_ms"].nunique() == 3  # the seeds differ
    table = res.table.set_index("metric")
    assert table.loc["p99_ttft_ms", "few_samples"] and table.loc["median_tpot_ms", "few_samples"]
    assert not table.loc["mean_ttft_ms", "few_samples"] and not table.loc["p99_itl_ms", "few_samples"]
    assert table.loc["p99_itl_ms", "samples_min"] >= 100
    row = table.loc["p99_ttft_ms"]
    assert row["low"] < row["mean"] < row["high"] and row["min"] <= row["mean"] <= row["max"]
    assert res.first.summary["setup"]["seed"] == 1 and len(res.first.requests) == 40


def test_seeds_need_two():
    with pytest.raises(CapsimError, match="--seeds"):
        run_seeds("workloads/chat.yaml", 1)
