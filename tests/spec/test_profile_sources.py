"""Every efficiency and overhead in a hardware or engine profile names its source, and no source
names a validation test-set document or point (validation/*.yaml with `split: test`): parameters
come from datasheets, microbenchmarks, calibration runs and the calibration set only."""

from __future__ import annotations

import re

import pytest
import yaml
from capsim.spec.catalog import _profile_files
from capsim.spec.serving import _data_path, engine_catalog
from capsim.validation.runner import load_points
from helpers import REPO

SUITE = REPO / "validation"
# Engine fields that change a step's cost or a request's latency, each needing a source entry
# (when set: None means "use the GPU's figure" and 0 MoE kernels means none).
ENGINE_COST_FIELDS = ("overhead", "kernel_efficiency", "kernels_per_layer", "cuda_graphs", "flash_attention",
                      "attention_kv_reuse", "extra_kernels_moe", "elementwise_bytes", "dequant_gemm_above_tokens",
                      "allreduce_latency_s")


def _test_markers() -> list[str]:
    """What would identify a test-set document or point in a source text: its file name (with and
    without .yaml), point ids, the document's address and its pull-request number."""
    markers: set[str] = set()
    for path in SUITE.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        if data["source"]["split"] != "test":
            continue
        url = str(data["source"].get("url", "")).rstrip("/")
        markers |= {path.name, path.stem} | ({url} if url else set())
        markers |= {p["id"] for p in data["points"]}
        pr = re.search(r"/pull/(\d+)", url)
        if pr:
            markers.add(f"#{pr[1]}")
    return sorted(markers)


MARKERS = _test_markers()


def _named_test_document(text: str) -> list[str]:
    return [m for m in MARKERS if re.search(re.escape(m) + (r"(?!\d)" if m.startswith("#") else ""), text)]


def test_the_markers_cover_every_test_point():
    test_points = [p for p in load_points(SUITE) if p["_split"] == "test"]
    assert test_points and all(p["id"] in MARKERS for p in test_points)
    assert "#4766" in MARKERS and "#16834" in MARKERS  # the llama.cpp pull requests in the test set


@pytest.mark.parametrize("path", _profile_files(), ids=lambda p: p.name)
def test_hardware_profile_names_a_source_for_every_efficiency_and_overhead(path):
    raw = yaml.safe_load(path.read_text())
    sources = raw["sources"]
    # A calibrated profile (capsim calibrate) keeps the fields its fit does not set from its base
    # profile, whose sources name them (h200.calibrated.yaml: h200.yaml).
    base = yaml.safe_load(path.with_name(path.name.split(".")[0] + ".yaml").read_text()) if raw.get("calibration") else {}
    for block in ("efficiency", "overhead"):
        text = sources.get(block, "")
        assert text, f"{path.name}: no sources.{block}"
        for field, value in (raw.get(block) or {}).items():
            if value in (0, 0.0, None, {}) or (base and (base.get(block) or {}).get(field) == value):
                continue
            assert re.search(rf"\b{field}\b", text), f"{path.name}: sources.{block} does not name {field}"
    every = " ".join(str(v) for v in sources.values()) + " " + str(raw.get("notes", ""))
    assert not _named_test_document(every), f"{path.name} cites test-set points: {_named_test_document(every)}"


@pytest.mark.parametrize("name", sorted(engine_catalog()))
def test_engine_profile_names_a_source_for_every_cost_field(name):
    profile = engine_catalog()[name]
    for field in ENGINE_COST_FIELDS:
        value = getattr(profile, field)
        if value is None or (field == "extra_kernels_moe" and value == 0):
            continue
        assert profile.sources.get(field, "").strip(), f"engine {name}: no sources.{field}"
    over = profile.sources["overhead"]
    for field, value in profile.overhead.model_dump().items():
        if value and field != "steps_per_schedule":
            assert re.search(rf"\b{field}\b", over), f"engine {name}: sources.overhead does not name {field}"


def test_no_engine_source_cites_a_test_set_document():
    text = _data_path().read_text()
    assert not _named_test_document(text), _named_test_document(text)
