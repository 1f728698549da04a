"""Every catalogue name in a workload checked together (capsim.workload.names)."""

from __future__ import annotations

import pytest

from capsim.errors import CapsimError
from capsim.workload.flags import compose
from capsim.workload.names import check_names

FLAGS = {"prompt_tokens": "100", "output_tokens": "10", "rate": 1.0}


def test_all_unknown_names_at_once_one_line_each():
    w = compose(None, FLAGS | {"model": "lama-3.1-8b", "gpu": "rtx4909", "kv_cache": "fp9", "weights": "bf17",
                               "engine": "vlm"}, "flags")
    with pytest.raises(CapsimError) as info:
        check_names(w, "w.yaml")
    lines = str(info.value).split("\n")
    assert len(lines) == 5
    assert lines[0].startswith("w.yaml: field 'model': unknown model 'lama-3.1-8b'. Did you mean: llama-3.1-8b")
    assert lines[1].startswith("w.yaml: field 'gpu': unknown GPU 'rtx4909'. Did you mean: rtx4090")
    assert lines[2].startswith("w.yaml: field 'weights': unknown format 'bf17'")
    assert lines[3].startswith("w.yaml: field 'kv_cache': unknown KV-cache format 'fp9'")
    assert lines[4].startswith("w.yaml: field 'engine': unknown engine 'vlm'. Did you mean: vllm")


def test_known_names_pass_and_skipped_fields_are_left_to_the_command():
    good = compose(None, FLAGS | {"model": "llama-3.1-8b", "gpu": "h100", "engine": "vllm"}, "flags")
    check_names(good, "w.yaml")
    varied = compose(None, FLAGS | {"model": "llama-3.1-8b", "gpu": "nonesuch"}, "flags")
    check_names(varied, "w.yaml", skip=("gpu",))
