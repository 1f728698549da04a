"""Workload validation: every rule gives a message naming the field."""

import pytest
from capsim.errors import CapsimError
from helpers import workload


@pytest.mark.parametrize("fields, fragment", [
    ({"requests": None}, "give 'requests' (how many) or 'duration_s'"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": 0}}, "arrivals.rate_per_s"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": -2}}, "greater than or equal to 0.000001"),
    ({"arrivals": {"kind": "sometimes"}}, "'poisson', 'gamma', 'constant', 'all_at_once', 'closed_loop', 'trace'"),
    ({"scheduler": {"kind": "fifo"}}, "scheduler.kind"),
    ({"scheduler": {"kind": "chunked", "max_num_seqs": 0}}, "scheduler.max_num_seqs"),
    ({"allocator": "buddy"}, "'paged' or 'contiguous'"),
    ({"prompt_tokens": {"dist": "uniform", "min": 10, "max": 5}}, "max must be >= min"),
    ({"output_tokens": {"dist": "lognormal", "mean": 100, "sigma": 0.5, "min": 200, "max": 50}}, "max must be >= min"),
    ({"prompt_tokens": {"dist": "trace"}}, "needs arrivals.kind 'trace'"),
    ({"colour": "blue"}, "field 'colour': unknown key"),
    # counts that would build that many objects, and numbers that would overflow later
    ({"replicas": 10**9}, "field 'replicas': Input should be less than or equal to 4096"),
    ({"samples": 2**63}, "field 'samples'"),
    ({"seed": -1}, "field 'seed'"),
    ({"arrivals": {"kind": "closed_loop", "users": 10**12}}, "field 'arrivals.users'"),
    ({"arrivals": {"kind": "closed_loop", "users": 2, "ramp_s": -1.0}}, "field 'arrivals.ramp_s'"),
    ({"prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 1e300}}, "field 'prompt_tokens.sigma'"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": float("inf")}}, "finite number"),
    ({"classes": [{"name": "a", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 1},
                   "output_tokens": {"dist": "fixed", "value": 1}}]}, "not both"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
])
def test_bad_workloads(round_gpu_file, fields, fragment):
    with pytest.raises(CapsimError) as exc:
        workload(round_gpu_file, **fields)
    assert fragment in str(exc.value)
    assert str(exc.value).startswith("test workload:")


def test_union_tags_are_left_out_of_field_names(round_gpu_file):
    with pytest.raises(CapsimError) as exc:
        workload(round_gpu_file, arrivals={"kind": "gamma", "rate_per_s": 1.0})
    assert "field 'arrivals.burstiness': required field is missing" in str(exc.value)


# ---------------------------------------------------------------- fuzzing the loader
import yaml  # noqa: E402
from capsim.errors import CapsimError as _Error  # noqa: E402
from capsim.api import simulate  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALID = {
    "model": "llama-3.1-8b", "gpu": "h100", "weights": "bf16", "kv_cache": "fp8",
    "scheduler": {"kind": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 512, "block_size": 16},
    "arrivals": {"kind": "poisson", "rate_per_s": 5.0},
    "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 4000},
    "output_tokens": {"dist": "uniform", "min": 1, "max": 50}, "requests": 5, "seed": 1,
}
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                     st.text(max_size=12), st.sampled_from(["poisson", "trace", "fixed", "static", "paged", "q8_0",
                                                            "closed_loop", "-1", "1e9", "inf", "nan"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=12)


def _mutate(draw_key, draw_value, delete):
    data = yaml.safe_load(yaml.safe_dump(_VALID))
    target = data
    for part in draw_key[:-1]:
        target = target.setdefault(part, {}) if isinstance(target.get(part), dict) or part not in target else target
        if not isinstance(target, dict):
            return data
    if delete:
        target.pop(draw_key[-1], None)
    else:
        target[draw_key[-1]] = draw_value
    return data


_paths = st.sampled_from([(k,) for k in _VALID] + [("scheduler", k) for k in _VALID["scheduler"]]
                         + [("arrivals", k) for k in ("kind", "rate_per_s", "users", "burstiness", "file")]
                         + [("prompt_tokens", k) for k in ("dist", "mean", "sigma", "max", "min", "values")]
                         + [(k,) for k in ("classes", "split", "samples", "speculative", "replicas", "tp", "engine",
                                           "horizon_s", "duration_s", "num_gpu_blocks", "max_model_len", "colour")])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(path=_paths, value=_values, delete=st.booleans())
def test_any_mutation_of_a_workload_runs_or_fails_clearly(tmp_path, path, value, delete):
    """Any workload file: a result, or one CapsimError naming the file; never a traceback."""
    file = tmp_path / "fuzz.yaml"
    file.write_text(yaml.safe_dump(_mutate(path, value, delete)))
    try:
        result = simulate(file, requests=5)
    except _Error as exc:
        assert str(file) in str(exc) or "unknown" in str(exc) or "--" in str(exc)
    else:
        s = result.summary
        assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_any_text_as_a_workload_fails_clearly(tmp_path, text):
    file = tmp_path / "junk.yaml"
    file.write_text(text)
    try:
        simulate(file, requests=3)
    except _Error as exc:
        assert str(file) in str(exc)
