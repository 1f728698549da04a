"""Fits -> calibrated profile: the mapping onto efficiency/overhead fields, provenance, the base
profile lookup, and that the written YAML loads through the catalogue loader. No torch needed."""

from __future__ import annotations

import pytest
from capsim.spec.catalog import load_hardware
from capsim.errors import CapsimError
from capsim.harness import profile as prof
from capsim.harness.fit import FamilyFit, Model

BW, PEAK = 4.8e12, 989.5e12


def _fits():
    return {
        "decode.triton.bf16": FamilyFit("decode.triton.bf16", Model("linear", 8e-6, 1 / (0.8 * BW)), 40,
                                   {"train": 2.0, "kfold": 3.0, "logo_batch": 4.0}),
        "gemm.bf16": FamilyFit("gemm.bf16", Model("roofline", 4e-6, 1 / (0.9 * BW), 1 / (0.65 * PEAK), 128.0), 96,
                               {"train": 5.0, "kfold": 6.0, "logo_m": 9.0}, {"additive": 20.0}),
        "prefill": FamilyFit("prefill", Model("rows", 1e-5, 0.0, 1 / (0.5 * PEAK), 0.0, 4 * 200 / (0.5 * PEAK)), 20,
                             {"kfold": 7.0}),
    }


PROVENANCE = {"device_name": "NVIDIA H200", "date": "2026-11-30T00:00:00Z", "driver": "580.159.03",
              "torch_version": "2.11.0", "triton_version": "3.6.0", "raw_data_file": "h200.calibrated.jsonl",
              "raw_data_sha256": "ab" * 32}
MICRO = {"launch_s": 3e-6, "copy_bytes_per_s": 4.3e12, "matmul_flops_per_s": 7.9e14, "matmul_dtype": "bf16"}


def _built():
    base = prof.find_base("NVIDIA H200", None)
    return prof.build_profile(base, _fits(), MICRO, backend="triton", compute_dtype="bf16", provenance=PROVENANCE)


def test_fit_maps_onto_the_profile_fields():
    p = _built()
    eff = p["efficiency"]
    assert p["name"] == "h200.calibrated" and p["aliases"] == []
    assert eff["attention_bandwidth"] == pytest.approx(0.8, rel=1e-3)
    assert eff["bandwidth"] == pytest.approx(0.9, rel=1e-3)
    assert eff["compute"] == pytest.approx(0.65, rel=1e-3)
    assert eff["compute_half_tokens"] == 128.0
    # prefill attention: 1/s_f of the fp16 peak, and the row cost s_r in keys, s_r / (4 s_f) = 200
    assert eff["attention_compute"] == pytest.approx(0.5, rel=1e-3)
    assert eff["attention_half_keys"] == pytest.approx(200.0)
    assert p["calibration"]["fit"]["prefill.half_keys"] == pytest.approx(200.0)
    assert p["overhead"]["layer_s"] == pytest.approx(8e-6 + prof.GEMMS_PER_LAYER * 4e-6)
    assert p["memory_bandwidth_bytes_per_s"] == BW  # datasheet numbers kept from the catalogue


def test_calibration_block_carries_provenance_fit_and_errors():
    cal = _built()["calibration"]
    assert cal["backend"] == "triton" and cal["device_name"] == "NVIDIA H200"
    assert cal["raw_data_sha256"] == "ab" * 32
    assert cal["mape"]["decode.triton.bf16.kfold_pct"] == 3.0 and cal["mape"]["gemm.bf16.logo_m_pct"] == 9.0
    assert cal["fit"]["decode.triton.bf16.bytes_per_s"] == pytest.approx(0.8 * BW)
    assert cal["fit"]["prefill.flops_per_s"] == pytest.approx(0.5 * PEAK)
    assert cal["fit"]["micro.launch_s"] == 3e-6 and "micro.matmul_dtype" not in cal["fit"]
    assert "roofline" in cal["notes"] and "additive 20.0%" in cal["notes"]


def test_written_profile_loads_through_the_catalogue_loader(tmp_path):
    path = tmp_path / "h200.calibrated.yaml"
    prof.write_profile(_built(), path)
    loaded = load_hardware(path)
    assert loaded.name == "h200.calibrated"
    assert loaded.efficiency.attention_bandwidth == pytest.approx(0.8, rel=1e-3)
    assert loaded.calibration is not None and loaded.calibration.torch_version == "2.11.0"
    assert loaded.sources["efficiency"].startswith("capsim calibrate")


def test_efficiencies_above_the_datasheet_are_clipped_to_one():
    fits = _fits()
    fits["decode.triton.bf16"] = FamilyFit("decode.triton.bf16", Model("linear", 1e-6, 1 / (1.3 * BW)), 10)
    base = prof.find_base("NVIDIA H200", None)
    p = prof.build_profile(base, fits, MICRO, backend="triton", compute_dtype="bf16", provenance=PROVENANCE)
    assert p["efficiency"]["attention_bandwidth"] == 1.0
    assert p["calibration"]["fit"]["decode.triton.bf16.bytes_per_s"] == pytest.approx(1.3 * BW)  # raw number kept


@pytest.mark.parametrize("device,expected", [("NVIDIA H200", "h200"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
                                             ("Mystery GPU 9000", None)])
def test_base_profile_found_from_the_device_name(device, expected):
    base = prof.find_base(device, None)
    assert (base["name"] if base else None) == expected


def test_base_gpu_overrides_and_must_exist():
    assert prof.find_base("Mystery GPU", "h100-sxm")["name"] == "h100-sxm"
    with pytest.raises(CapsimError, match="not in the hardware catalogue"):
        prof.find_base("NVIDIA H200", "h999")


def test_cpu_profile_from_micro_benchmarks_says_so_in_sources(tmp_path):
    base = prof.measured_base("cpu", "cpu", MICRO, 16 * 2**30)
    p = prof.build_profile(base, _fits(), MICRO, backend="sdpa", compute_dtype="bf16", provenance=PROVENANCE)
    path = tmp_path / "cpu.calibrated.yaml"
    prof.write_profile(p, path)
    loaded = load_hardware(path)
    assert loaded.name == "cpu.calibrated" and loaded.vendor == "other"
    assert loaded.memory_bandwidth_bytes_per_s == MICRO["copy_bytes_per_s"]
    assert "micro-benchmark" in loaded.sources["peak_flops"]


def test_name_candidates_strip_vendor_words():
    names = prof.name_candidates("NVIDIA GeForce RTX 4090")
    assert "rtx4090" in names and "rtx-4090" in names


def test_validate_rejects_a_name_that_does_not_match_the_file(tmp_path):
    path = tmp_path / "other.yaml"
    prof.write_profile(_built(), tmp_path / "h200.calibrated.yaml")
    path.write_text((tmp_path / "h200.calibrated.yaml").read_text())
    with pytest.raises(CapsimError, match="does not match the file name"):
        prof.validate_profile(path)
