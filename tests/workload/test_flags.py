"""A workload said with flags (capsim.workload.flags): the compact length strings, the arrival
process the load implies, --set, what is missing listed at once, and the YAML that loads back."""

from __future__ import annotations

import pytest

from capsim.errors import CapsimError
from capsim.spec.config import read_yaml, validate
from capsim.workload.flags import compose, parse_lengths, workload_yaml
from capsim.workload.schema import WorkloadConfig

FLAGS = {"model": "llama-3.1-8b", "gpu": "h100", "prompt_tokens": "2000", "output_tokens": "lognormal:300:0.8"}


@pytest.mark.parametrize("text, expected", [
    ("2000", {"dist": "fixed", "value": 2000}),
    ("fixed:7", {"dist": "fixed", "value": 7}),
    ("uniform:10:20", {"dist": "uniform", "min": 10, "max": 20}),
    ("normal:500:100", {"dist": "normal", "mean": 500.0, "std": 100.0}),
    ("lognormal:300:0.8", {"dist": "lognormal", "mean": 300.0, "sigma": 0.8}),
    ("lognormal:300:0.8:5:4000", {"dist": "lognormal", "mean": 300.0, "sigma": 0.8, "min": 5, "max": 4000}),
    ("empirical:100,200", {"dist": "empirical", "values": [100, 200]}),
    ("empirical:100=3,200=1", {"dist": "empirical", "values": [100, 200], "weights": [3.0, 1.0]}),
    ("sequence:5,6,7", {"dist": "sequence", "values": [5, 6, 7]}),
    ("trace", {"dist": "trace"}),
])
def test_length_strings_mirror_the_schema(text, expected):
    assert parse_lengths(text, "--prompt-tokens") == expected


@pytest.mark.parametrize("text, fragment", [
    ("lots", "not a length distribution"),
    ("uniform:10", "not a length distribution"),
    ("gauss:1:2", "not a length distribution"),
    ("uniform:20:10", "max must be >= min"),
    ("0", "greater than 0"),
    ("lognormal:300:-1", "sigma"),
])
def test_bad_length_strings_name_the_flag_and_the_forms(text, fragment):
    with pytest.raises(CapsimError) as info:
        parse_lengths(text, "--output-tokens")
    message = str(info.value)
    assert message.startswith("--output-tokens") and fragment in message and "lognormal:MEAN:SIGMA" in message


def test_the_load_chooses_the_arrival_process():
    users = compose(None, FLAGS | {"users": 200, "think_time_s": 5}, "flags")
    assert users.arrivals.kind == "closed_loop" and users.arrivals.users == 200 and users.arrivals.think_time_s == 5
    assert users.requests == 2000  # ten per user, above the default of 1000
    rate = compose(None, FLAGS | {"rate": 4.0}, "flags")
    assert rate.arrivals.kind == "poisson" and rate.arrivals.rate_per_s == 4.0 and rate.requests == 1000
    bursty = compose(None, FLAGS | {"rate": 4.0, "burstiness": 0.5}, "flags")
    assert bursty.arrivals.kind == "gamma" and bursty.arrivals.burstiness == 0.5
    fixed = compose(None, FLAGS | {"rate": 4.0, "arrivals": "constant", "duration_s": 60}, "flags")
    assert fixed.arrivals.kind == "constant" and fixed.duration_s == 60 and fixed.requests is None


def test_missing_choices_are_listed_together_not_guessed():
    with pytest.raises(CapsimError) as info:
        compose(None, {"model": "llama-3.1-8b"}, "flags")
    message = str(info.value)
    for fragment in ("--gpu", "--rate REQ_PER_S", "--users N", "--prompt-tokens", "--output-tokens"):
        assert fragment in message
    assert "--model" not in message.split("needs:")[1]


def test_flags_change_a_files_fields(tmp_path):
    base = {"name": "chat", "model": "llama-3.1-8b", "gpu": "rtx4090", "arrivals": {"kind": "poisson", "rate_per_s": 2},
            "prompt_tokens": {"dist": "fixed", "value": 100}, "output_tokens": {"dist": "fixed", "value": 20},
            "duration_s": 30, "scheduler": {"kind": "chunked", "max_num_seqs": 64}}
    w = compose(base, {"users": 8, "max_num_seqs": 32, "requests": 50, "set": ["scheduler.watermark=0.02",
                                                                             "measure.whole_run=true"]}, "w.yaml")
    assert w.arrivals.kind == "closed_loop" and w.arrivals.users == 8
    assert w.scheduler.kind == "chunked" and w.scheduler.max_num_seqs == 32 and w.scheduler.watermark == 0.02
    assert w.requests == 50 and w.duration_s is None and w.measure.whole_run
    with pytest.raises(CapsimError, match="--think-time-s: the arrivals are 'poisson', which do not take it"):
        compose(base, {"think_time_s": 3}, "w.yaml")


def test_set_names_the_field_it_cannot_take():
    with pytest.raises(CapsimError, match=r"field 'scheduler.watermrk': unknown key. Did you mean: watermark"):
        compose(None, FLAGS | {"rate": 1.0, "set": ["scheduler.watermrk=0.1"]}, "flags")
    with pytest.raises(CapsimError, match="give KEY=VALUE"):
        compose(None, FLAGS | {"rate": 1.0, "set": ["watermark"]}, "flags")


def test_yaml_loads_back_to_the_same_config(tmp_path):
    w = compose(None, FLAGS | {"users": 16, "name": "mine", "set": ["measure.warmup_requests=10"]}, "flags",
                slo={"limits": {"p99_ttft_ms": 2000.0}})
    path = tmp_path / "saved.yaml"
    path.write_text(workload_yaml(w))
    assert validate(WorkloadConfig, read_yaml(path), str(path)) == w
