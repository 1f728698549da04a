"""Arrival processes, length distributions, classes, traces: seeded and checked."""

import numpy as np
import pytest
from capsim.errors import CapsimError
from capsim.workload.streams import build_stream, read_trace, sample_lengths
from capsim.workload.length_dists import LogNormal
from helpers import workload


def test_poisson_rate_and_first_arrival_at_zero(round_gpu_file):
    s = build_stream(workload(round_gpu_file, arrivals={"kind": "poisson", "rate_per_s": 4.0}, requests=20000))
    assert s.arrival_s[0] == 0.0 and np.all(np.diff(s.arrival_s) >= 0)
    assert len(s) / s.arrival_s[-1] == pytest.approx(4.0, rel=0.03)


def test_gamma_burstiness_raises_the_spread(round_gpu_file):
    def cv(burstiness):
        s = build_stream(workload(round_gpu_file, requests=20000,
                                  arrivals={"kind": "gamma", "rate_per_s": 4.0, "burstiness": burstiness}))
        gaps = np.diff(s.arrival_s)
        return gaps.std() / gaps.mean(), 1 / gaps.mean()

    (cv1, rate1), (cv4, rate4) = cv(1.0), cv(0.25)
    assert cv1 == pytest.approx(1.0, rel=0.05) and cv4 == pytest.approx(2.0, rel=0.08)  # cv = 1/sqrt(shape)
    assert rate1 == pytest.approx(4.0, rel=0.05) and rate4 == pytest.approx(4.0, rel=0.08)


def test_constant_all_at_once_and_duration(round_gpu_file):
    s = build_stream(workload(round_gpu_file, arrivals={"kind": "constant", "rate_per_s": 2.0}, requests=5))
    assert list(s.arrival_s) == [0.0, 0.5, 1.0, 1.5, 2.0]
    s = build_stream(workload(round_gpu_file, arrivals={"kind": "all_at_once", "at_s": 3.0}, requests=4))
    assert list(s.arrival_s) == [3.0] * 4
    s = build_stream(workload(round_gpu_file, arrivals={"kind": "poisson", "rate_per_s": 50.0}, requests=None,
                              duration_s=20.0))
    assert s.arrival_s.max() < 20.0 and len(s) == pytest.approx(1000, rel=0.1)


@pytest.mark.parametrize("spec, mean, lo, hi", [
    ({"dist": "fixed", "value": 7}, 7, 7, 7),
    ({"dist": "uniform", "min": 10, "max": 20}, 15, 10, 20),
    ({"dist": "normal", "mean": 300, "std": 50, "min": 1}, 300, 1, None),
    ({"dist": "lognormal", "mean": 400, "sigma": 0.8}, 400, 1, None),
    ({"dist": "empirical", "values": [10, 1000], "weights": [3, 1]}, 257.5, 10, 1000),
])
def test_length_distributions(spec, mean, lo, hi):
    from capsim.workload.length_dists import Lengths
    from pydantic import TypeAdapter

    x = sample_lengths(TypeAdapter(Lengths).validate_python(spec), 40000, np.random.default_rng(0))
    assert x.dtype == np.int64 and x.min() >= lo and (hi is None or x.max() <= hi)
    assert x.mean() == pytest.approx(mean, rel=0.03)


def test_lognormal_is_clipped_and_sequence_repeats():
    x = sample_lengths(LogNormal(dist="lognormal", mean=100, sigma=2.0, min=5, max=300), 5000, np.random.default_rng(1))
    assert x.min() >= 5 and x.max() <= 300
    from capsim.workload.length_dists import InOrder

    assert list(sample_lengths(InOrder(dist="sequence", values=[3, 1, 2]), 7, None)) == [3, 1, 2, 3, 1, 2, 3]


def test_same_seed_same_stream_and_streams_are_independent(round_gpu_file):
    a = build_stream(workload(round_gpu_file, seed=5))
    b = build_stream(workload(round_gpu_file, seed=5))
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    c = build_stream(workload(round_gpu_file, seed=5, output_tokens={"dist": "fixed", "value": 3}))
    assert np.array_equal(a.arrival_s, c.arrival_s) and np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_classes_mix_by_weight(round_gpu_file):
    classes = [{"name": "chat", "weight": 3, "prompt_tokens": {"dist": "fixed", "value": 100},
                "output_tokens": {"dist": "fixed", "value": 10}},
               {"name": "agent", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 50000},
                "output_tokens": {"dist": "fixed", "value": 500}}]
    s = build_stream(workload(round_gpu_file, prompt_tokens=None, output_tokens=None, classes=classes, requests=8000))
    assert s.class_names == ("chat", "agent")
    agent = s.class_index == 1
    assert agent.mean() == pytest.approx(0.25, abs=0.02)
    assert set(s.prompt_tokens[agent]) == {50000} and set(s.output_tokens[~agent]) == {10}


def test_trace_csv_and_jsonl(tmp_path, round_gpu_file):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n1.5,10,3\n0.5,20,4\n")
    (tmp_path / "t.jsonl").write_text('{"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 4}\n'
                                      '{"arrival_s": 1.5, "prompt_tokens": 10, "output_tokens": 3}\n')
    for name in ("t.csv", "t.jsonl"):
        t = read_trace(tmp_path / name)  # times from the first arrival
        assert list(t["arrival_s"]) == [0.0, 1.0] and list(t["prompt_tokens"]) == [20, 10]
        assert list(t["time_offset_s"]) == [0.5]
    w = workload(round_gpu_file, arrivals={"kind": "trace", "file": "t.csv", "time_scale": 2.0}, requests=None,
                 prompt_tokens={"dist": "trace"}, output_tokens={"dist": "fixed", "value": 9})
    s = build_stream(w, base_dir=tmp_path)
    assert list(s.arrival_s) == [0.0, 2.0] and list(s.prompt_tokens) == [20, 10] and list(s.output_tokens) == [9, 9]
    assert s.time_offset_s == 0.5


@pytest.mark.parametrize("text, fragment", [
    ("arrival_s,prompt_tokens\n0,1\n", "lacks column(s) output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,0\n", "row 1, column output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,10,5\n", "column arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\n", "no rows"),
])
def test_bad_traces_say_where(tmp_path, text, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(CapsimError, match="bad.csv") as exc:
        read_trace(path)
    assert fragment in str(exc.value)


def test_missing_trace_file(round_gpu_file, tmp_path):
    w = workload(round_gpu_file, arrivals={"kind": "trace", "file": "none.csv"}, requests=None)
    with pytest.raises(CapsimError, match="trace file not found"):
        build_stream(w, base_dir=tmp_path)


def test_closed_loop_lengths_are_drawn_in_order(round_gpu_file):
    s = build_stream(workload(round_gpu_file, arrivals={"kind": "closed_loop", "users": 2, "think_time_s": 1.0},
                              requests=None, duration_s=10.0))
    first = [s.lengths(i) for i in range(5000)]  # past one block of draws
    assert all(p >= 10 and 1 <= o <= 60 for p, o, _ in first)
    assert 0.0 < s.think() < 50.0


def test_closed_loop_users_start_evenly_over_the_ramp(round_gpu_file):
    def starts(**arrivals):
        s = build_stream(workload(round_gpu_file, arrivals={"kind": "closed_loop", "users": 4, **arrivals}))
        return [s.start_s(u) for u in range(4)]

    assert starts(think_time_s=2.0) == [0.0, 0.5, 1.0, 1.5]  # by default over one mean think time
    assert starts(think_time_s=2.0, ramp_s=8.0) == [0.0, 2.0, 4.0, 6.0]
    assert starts(think_time_s=2.0, ramp_s=0.0) == [0.0] * 4
    assert starts() == [0.0] * 4  # no think time: everyone at once, as before ramps
