"""SLO parsing (both forms, errors that name the option) and judging a record against them."""

import pytest
from capsim.errors import CapsimError
from capsim.results.slo import Objectives, from_dict, objectives_for, parse_objectives
from capsim.spec.metric_names import parse_percentiles, summary_key


@pytest.mark.parametrize("name, key", [
    ("ttft_p99_ms", "p99_ttft_ms"), ("tpot_p50_ms", "median_tpot_ms"), ("itl_p90_ms", "p90_itl_ms"),
    ("e2el_mean_ms", "mean_e2el_ms"), ("p99_ttft_ms", "p99_ttft_ms"), ("ttft_median", "median_ttft_ms"),
    ("foo_p99_ms", None), ("ttft_p95_ms", "p95_ttft_ms"), ("ttft_p99.9_ms", "p99.9_ttft_ms"), ("ttft", None),
    ("ttft_p100_ms", None), ("ttft_p0_ms", None), ("ttft_max_ms", None),
])
def test_summary_key(name, key):
    assert summary_key(name) == key


def test_both_forms_in_one_list():
    o = parse_objectives(["ttft_p99_ms=2000", "tpot_p99_ms=50", "ttft:1500 tpot:40", "e2el:9000"], goodput_share=0.95)
    assert o.limits_ms == {"p99_ttft_ms": 2000.0, "p99_tpot_ms": 50.0}
    assert o.goodput_ms == {"ttft": 1500.0, "tpot": 40.0, "e2el": 9000.0}
    assert o.goodput_share == 0.95
    assert from_dict(o.as_dict()) == o


@pytest.mark.parametrize("text, fragment", [
    ("foo=1", "unknown objective 'foo'"), ("ttft_p99_ms=-5", "positive number of milliseconds"),
    ("ttft_p99_ms=abc", "positive number"), ("itl:30", "unknown goodput metric 'itl'"), ("ttft_p99_ms", "unknown objective"),
])
def test_bad_slo_names_the_option_and_what_is_allowed(text, fragment):
    with pytest.raises(CapsimError) as exc:
        parse_objectives([text])
    message = str(exc.value)
    assert message.startswith(f"--slo {text!r}") and fragment in message
    assert "ttft_p99_ms=2000" in message and "ttft:2000 tpot:50" in message


def test_goodput_share_must_be_a_share():
    with pytest.raises(CapsimError, match="--goodput-share"):
        parse_objectives(["ttft:1"], goodput_share=1.5)


def test_workload_slo_block_is_the_default(round_gpu_file):
    from helpers import workload

    w = workload(round_gpu_file, slo={"goodput": {"ttft_ms": 1000, "tpot_ms": 60, "min_share": 0.95},
                                      "limits": {"ttft_p95_ms": 800}})
    goals = objectives_for(w, None)
    assert goals.goodput_ms == {"ttft": 1000.0, "tpot": 60.0} and goals.goodput_share == 0.95
    assert goals.limits_ms == {"p95_ttft_ms": 800.0} and goals.percentiles() == (95.0,)
    assert objectives_for(w, ["ttft_p99_ms=5"]).goodput_ms == {}


def test_an_slo_block_must_name_its_kind(round_gpu_file):
    from helpers import workload

    with pytest.raises(CapsimError, match="names its kind.*goodput.*limits"):
        workload(round_gpu_file, slo={"ttft_ms": 1000, "tpot_ms": 60})
    with pytest.raises(CapsimError, match="names no statistic"):
        workload(round_gpu_file, slo={"limits": {"ttft_p101_ms": 5}})


RECORD = {"completed": 100, "p99_ttft_ms": 1500.0, "p99_tpot_ms": 55.0, "good_share": 0.85}


@pytest.mark.parametrize("objectives, failures", [
    (Objectives({"p99_ttft_ms": 2000}), []),
    (Objectives({"p99_ttft_ms": 1000}), ["TTFT p99 1,500.0 ms > 1,000.0 ms"]),
    (Objectives({"p99_tpot_ms": 50}, {"ttft": 1}), ["TPOT p99 55.0 ms > 50.0 ms",
                                                     "goodput 85.0% < 90% of requests with TTFT <= 1 ms"]),
    (Objectives({}, {"ttft": 1}, goodput_share=0.8), []),
])
def test_failures(objectives, failures):
    assert objectives.failures(RECORD) == failures


def test_nothing_completed_never_meets():
    assert Objectives({"p99_ttft_ms": 1e9}).failures(RECORD | {"completed": 0}) == ["no request completed"]


def test_saturated_or_too_short_never_meets():
    goals = Objectives({"p99_ttft_ms": 1e9})
    assert goals.failures(RECORD | {"saturated": True, "saturation_evidence": "queue grows"}) == [
        "saturated: queue grows"]
    assert goals.failures(RECORD | {"too_short": True, "window_latencies": 4.2})[0].startswith(
        "too short to judge: the steady window spans 4.2 mean end-to-end latencies")
    summary = RECORD | {"saturated": True, "saturation": {"evidence": "from the summary"}}  # nested, as summarize
    assert goals.failures(summary) == ["saturated: from the summary"]


def test_percentile_limits_need_their_percentiles_reported():
    goals = parse_objectives(["ttft_p95_ms=900", "e2el_p99.9_ms=9000", "tpot_median_ms=20", "itl_mean_ms=30"])
    assert goals.percentiles() == (95.0, 99.9)
    assert parse_percentiles("50,90, 95,99.9,p99") == (50.0, 90.0, 95.0, 99.0, 99.9)
    with pytest.raises(CapsimError, match="--percentiles: '100' is not a percentile"):
        parse_percentiles("90,100")


def test_lines_for_plots():
    lines = Objectives({"p99_ttft_ms": 2000}, {"tpot": 50}).lines()
    assert lines == [("ttft", 2000, "limit: TTFT p99 <= 2,000 ms"), ("tpot", 50, "goodput: TPOT <= 50 ms")]
