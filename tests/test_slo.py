"""SLO parsing (both forms, errors that name the option) and judging a record against them."""

import pytest
from capsim.errors import CapsimError
from capsim.slo import Objectives, from_dict, objectives_for, parse_objectives, summary_key


@pytest.mark.parametrize("name, key", [
    ("ttft_p99_ms", "p99_ttft_ms"), ("tpot_p50_ms", "median_tpot_ms"), ("itl_p90_ms", "p90_itl_ms"),
    ("e2el_mean_ms", "mean_e2el_ms"), ("p99_ttft_ms", "p99_ttft_ms"), ("ttft_median", "median_ttft_ms"),
    ("foo_p99_ms", None), ("ttft_p95_ms", None), ("ttft", None),
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
    from conftest import workload

    w = workload(round_gpu_file, slo={"ttft_ms": 1000, "tpot_ms": 60})
    assert objectives_for(w, None).goodput_ms == {"ttft": 1000.0, "tpot": 60.0}
    assert objectives_for(w, ["ttft_p99_ms=5"]).goodput_ms == {}


RECORD = {"completed": 100, "p99_ttft_ms": 1500.0, "p99_tpot_ms": 55.0, "good_share": 0.85}


@pytest.mark.parametrize("objectives, failures", [
    (Objectives({"p99_ttft_ms": 2000}), []),
    (Objectives({"p99_ttft_ms": 1000}), ["p99_ttft_ms 1,500.0 > 1,000.0"]),
    (Objectives({"p99_tpot_ms": 50}, {"ttft": 1}), ["p99_tpot_ms 55.0 > 50.0", "goodput 85.0% < 90% of requests"]),
    (Objectives({}, {"ttft": 1}, goodput_share=0.8), []),
])
def test_failures(objectives, failures):
    assert objectives.failures(RECORD) == failures


def test_nothing_completed_never_meets():
    assert Objectives({"p99_ttft_ms": 1e9}).failures(RECORD | {"completed": 0}) == ["no request completed"]


def test_goodput_is_measured_even_under_percentile_slos():
    # the goodput form wins; otherwise the percentile limits are read per request (most lenient)
    assert Objectives({"p50_ttft_ms": 200, "p99_ttft_ms": 2000, "p99_itl_ms": 9}).goodput_thresholds() == {"ttft": 2000}
    assert Objectives({"p99_ttft_ms": 2000}, {"tpot": 50}).goodput_thresholds() == {"tpot": 50}


def test_lines_for_plots():
    lines = Objectives({"p99_ttft_ms": 2000}, {"tpot": 50}).lines()
    assert lines == [("ttft", 2000, "SLO TTFT p99 <= 2,000 ms"), ("tpot", 50, "goodput SLO: TPOT <= 50 ms")]
