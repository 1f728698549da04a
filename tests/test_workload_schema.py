"""Workload validation: every rule gives a message naming the field."""

import pytest
from conftest import workload

from capsim.errors import CapsimError


@pytest.mark.parametrize("fields, fragment", [
    ({"requests": None}, "give 'requests' (how many) or 'duration_s'"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": 0}}, "arrivals.rate_per_s"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": -2}}, "greater than 0"),
    ({"arrivals": {"kind": "sometimes"}}, "'poisson', 'gamma', 'constant', 'all_at_once', 'closed_loop', 'trace'"),
    ({"scheduler": {"kind": "fifo"}}, "scheduler.kind"),
    ({"scheduler": {"kind": "chunked", "max_num_seqs": 0}}, "scheduler.max_num_seqs"),
    ({"allocator": "buddy"}, "'paged' or 'contiguous'"),
    ({"prompt_tokens": {"dist": "uniform", "min": 10, "max": 5}}, "max must be >= min"),
    ({"prompt_tokens": {"dist": "trace"}}, "needs arrivals.kind 'trace'"),
    ({"colour": "blue"}, "field 'colour': unknown key"),
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
