"""calibrate / check / refit end to end on CPU, the device script's --tiny path, and the lazy
torch import. Timing values are never asserted: only that the pipeline runs, fits and loads."""

from __future__ import annotations

import json
import sys

import pytest
from capsim.spec.catalog import load_hardware
from capsim.errors import CapsimError
from harness_helpers import (
    DEVICE_IMAGE_SITECUSTOMIZE,
    NO_TORCH_SITECUSTOMIZE,
    REPO,
    run_with_sitecustomize,
)


@pytest.fixture(scope="module")
def quick_cpu_run(tmp_path_factory):
    pytest.importorskip("torch")
    from capsim.harness import calibrate

    out = tmp_path_factory.mktemp("cal")
    seen = []
    result = calibrate("cpu", "sdpa", out, quick=True, progress=lambda d, n, label: seen.append((d, n, label)))
    return result, seen


def test_quick_cpu_calibration_writes_a_profile_the_simulator_loads(quick_cpu_run):
    result, seen = quick_cpu_run
    assert result.profile_path.name == "cpu.calibrated.yaml" and result.validated
    assert result.raw_data_path.is_file() and result.csv_path.is_file()
    profile = load_hardware(result.profile_path)
    assert profile.name == "cpu.calibrated"
    assert profile.calibration.backend == "sdpa" and profile.calibration.raw_data_file == result.raw_data_path.name
    assert {"decode.sdpa.fp32", "gemm.fp32", "prefill"} <= set(result.fits)
    assert profile.overhead.layer_s > 0 and profile.efficiency.attention_bandwidth is not None
    assert seen[-1][0] == seen[-1][1] == result.points_planned
    from capsim.spec.architecture import param_counts  # noqa: F401  (the simulator's side of the profile)
    from capsim.spec.catalog import load_model
    from capsim.cost.roofline import CostModel
    from capsim.spec.formats import get_format

    cost = CostModel(load_model("llama-2-7b"), profile, get_format("fp16"), get_format("fp16"))
    assert cost.eta_attn_bw == profile.efficiency.attention_bandwidth


def test_raw_rows_are_one_json_object_per_point(quick_cpu_run):
    result, _ = quick_cpu_run
    rows = [json.loads(line) for line in result.raw_data_path.read_text().splitlines()]
    assert len(rows) == result.points_measured
    decode = [r for r in rows if r["family"] == "decode"]
    assert decode and all(r["check_abs_err"] < 1e-4 and r["time_s"] > 0 for r in decode)


def test_table_rows_have_held_out_errors(quick_cpu_run):
    rows = quick_cpu_run[0].table_rows()
    decode = next(r for r in rows if r["family"] == "decode.sdpa.fp32")
    assert {"kfold_pct", "logo_context_tokens_pct", "logo_batch_pct"} <= set(decode)


def test_check_recomputes_the_stored_errors(quick_cpu_run):
    from capsim.harness import check

    report = check(quick_cpu_run[0].profile_path)
    assert report.sha256_matches
    rows = report.table_rows()
    assert rows and all(r["stored_pct"] == pytest.approx(r["recomputed_pct"], abs=1e-3) for r in rows)


def test_check_notices_edited_raw_data_and_refit_restores_it(quick_cpu_run, tmp_path):
    from capsim.harness import check, refit

    result = quick_cpu_run[0]
    for src in (result.profile_path, result.raw_data_path):
        (tmp_path / src.name).write_text(src.read_text())
    raw = tmp_path / result.raw_data_path.name
    raw.write_text(raw.read_text() + raw.read_text().splitlines()[-1] + "\n")
    assert not check(tmp_path / result.profile_path.name).sha256_matches
    refit(tmp_path / result.profile_path.name)
    assert check(tmp_path / result.profile_path.name).sha256_matches


def test_the_shipped_h200_calibration_reproduces_from_its_raw_data(tmp_path):
    """hardware_profiles/h200.calibrated.yaml was measured on an H200; its hash, stored errors and
    fitted efficiencies must all follow from the raw points shipped beside it."""
    from capsim.harness import check, refit

    shipped = REPO / "hardware_profiles" / "h200.calibrated.yaml"
    report = check(shipped)
    assert report.sha256_matches
    rows = report.table_rows()
    assert {r["family"] for r in rows} >= {"decode.triton.bf16", "decode.triton.fp8", "gemm.bf16", "prefill"}
    assert all(r["stored_pct"] == pytest.approx(r["recomputed_pct"], abs=1e-3) for r in rows)
    for name in (shipped.name, "h200.calibrated.jsonl"):
        (tmp_path / name).write_text((shipped.parent / name).read_text())
    refitted = load_hardware(refit(tmp_path / shipped.name))
    original = load_hardware(shipped)
    for part in ("efficiency", "overhead"):  # the fit's last bits depend on the machine's BLAS
        new, old = getattr(refitted, part).model_dump(), getattr(original, part).model_dump()
        floats = [k for k, v in old.items() if isinstance(v, float)]  # approx refuses nested dicts and None
        assert {k: new[k] for k in floats} == pytest.approx({k: old[k] for k in floats}, rel=1e-9)
        assert {k: v for k, v in new.items() if k not in floats} == {k: v for k, v in old.items() if k not in floats}


def test_check_needs_a_calibrated_profile():
    from capsim.harness import check

    with pytest.raises(CapsimError, match="raw_data_file"):
        check(REPO / "hardware_profiles" / "h200.yaml")


def test_calibrate_rejects_bad_choices(tmp_path):
    pytest.importorskip("torch")
    from capsim.harness import calibrate

    with pytest.raises(CapsimError, match="allowed: cpu, cuda"):
        calibrate("tpu", "sdpa", tmp_path)
    with pytest.raises(CapsimError, match="allowed: triton"):
        calibrate("cpu", "cudnn", tmp_path)
    with pytest.raises(CapsimError, match="needs --device cuda"):
        calibrate("cpu", "flash", tmp_path)


def test_a_deadline_that_leaves_nothing_to_fit_is_a_clear_error(tmp_path):
    pytest.importorskip("torch")
    from capsim.harness import calibrate

    with pytest.raises(CapsimError, match="too few to fit"):
        calibrate("cpu", "sdpa", tmp_path, tiny=True, deadline_s=0.0)
    assert (tmp_path / "cpu.calibrated.jsonl").exists()


def test_device_script_tiny_runs_without_pydantic_or_simpy(tmp_path):
    """The exact GPU-machine code path (bash script, bare-package bootstrap), on CPU in seconds."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    out = tmp_path / "out"
    proc = run_with_sitecustomize(tmp_path, DEVICE_IMAGE_SITECUSTOMIZE,
                                  ["bash", str(REPO / "scripts" / "h200_calibrate.sh"), "--tiny"],
                                  env={"OUT": str(out), "PYTHON": sys.executable}, timeout_s=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["profile_validated"] is False  # no pydantic there: validated later, here
    assert summary["points_measured"] == summary["points_planned"] and summary["points_failed"] == 0
    assert load_hardware(out / summary["profile"]).calibration.backend == "triton"


def test_importing_the_harness_never_needs_torch(tmp_path):
    code = ("import capsim.harness as h, capsim.errors as e\n"
            "try:\n    h.calibrate('cpu', 'sdpa', '/tmp/x')\nexcept e.CapsimError as exc:\n    print(exc)\n")
    proc = run_with_sitecustomize(tmp_path, NO_TORCH_SITECUSTOMIZE, [sys.executable, "-c", code])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pip install '.[calibrate]'" in proc.stdout
