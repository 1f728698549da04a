"""`calibrate` (grid -> fit -> profile) and `check` (re-read raw data, recompute held-out errors):
the two calls behind `capsim calibrate`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from capsim.errors import CapsimError
from capsim.harness import profile as prof
from capsim.harness.deps import require_torch, require_triton, triton_interpreted, versions
from capsim.harness.fit import FamilyFit, fit_rows
from capsim.harness.grid import GridSpec, grid_for, plan_points, run_points
from capsim.harness.measure import BACKENDS, Measurer

Progress = Callable[[int, int, str], None]
# Largest KV cache a decode point may allocate, by device.
MAX_KV_BYTES = {"cuda": 24 * 2**30, "cpu": 256 * 2**20}


def _mape_rows(fits: dict[str, FamilyFit]) -> list[dict]:
    return [{"family": name, "form": f.model.form, "points": f.n_points,
             **{f"{k}_pct": round(v, 2) for k, v in f.mape_pct.items()}} for name, f in fits.items()]


@dataclass
class CalibrationResult:
    """What `calibrate` wrote and how well the fit held out."""

    profile_path: Path
    raw_data_path: Path
    csv_path: Path
    fits: dict[str, FamilyFit]
    points_measured: int
    points_planned: int
    points_failed: int
    stopped_at_deadline: bool
    elapsed_s: float
    validated: bool = True
    skipped_backends: dict[str, str] = field(default_factory=dict)

    def table_rows(self) -> list[dict]:
        """One row per fitted family: form, points, and MAPE (percent) train / 5-fold / leave-one-group-out."""
        return _mape_rows(self.fits)


@dataclass
class CheckReport:
    """Held-out errors recomputed from the raw data beside a calibrated profile."""

    profile_path: Path
    raw_data_path: Path
    sha256_matches: bool
    stored_mape_pct: dict[str, float]
    fits: dict[str, FamilyFit]

    def table_rows(self) -> list[dict]:
        """One row per (family, error kind): the stored and the recomputed MAPE in percent."""
        rows = []
        for name, f in self.fits.items():
            for kind, value in f.mape_pct.items():
                key = f"{name}.{kind}_pct"
                rows.append({"family": name, "error": kind, "stored_pct": self.stored_mape_pct.get(key),
                             "recomputed_pct": round(value, 3)})
        return rows


def _check_device(device: str, backend: str) -> None:
    torch = require_torch()
    if device not in ("cpu", "cuda"):
        raise CapsimError(f"--device {device!r}: allowed: cpu, cuda.")
    if backend not in BACKENDS:
        raise CapsimError(f"--backend {backend!r}: allowed: {', '.join(BACKENDS)}.")
    if device == "cuda" and not torch.cuda.is_available():
        raise CapsimError("--device cuda: torch sees no CUDA GPU (is this a CPU build of torch?).")
    if backend == "triton":
        require_triton()
        if device == "cpu" and not triton_interpreted():
            raise CapsimError("--backend triton on CPU needs Triton's interpreter: set TRITON_INTERPRET=1 "
                              "(correctness only; its timings mean nothing), or use --backend sdpa.")
    if backend == "flash" and device != "cuda":
        raise CapsimError("--backend flash needs --device cuda.")


def _cross_backends(spec: GridSpec, device: str, backend: str) -> tuple[GridSpec, dict[str, str]]:
    """Drop cross-check backends that cannot run here; say why."""
    from dataclasses import replace

    from capsim.harness.kernels.flex import probe_flash

    keep, skipped = [], {}
    for other in spec.cross_backends:
        if other == backend:
            continue
        reason = None
        if other == "flash":
            reason = probe_flash(spec.block_sizes[0], spec.compute_dtype, device)
        elif other == "triton" and (device == "cpu" and not triton_interpreted()):
            reason = "needs CUDA or TRITON_INTERPRET=1"
        if reason:
            skipped[other] = reason
        else:
            keep.append(other)
    return replace(spec, cross_backends=tuple(keep)), skipped


def calibrate(device: str, backend: str, out_dir: Path, *, quick: bool = False, deadline_s: float | None = None,
              tiny: bool = False, base_gpu: str | None = None, progress: Progress | None = None) -> CalibrationResult:
    """Time the grid on `device`, fit the cost model, write `<gpu>.calibrated.yaml` plus raw data.

    Writes into `out_dir`: the profile, `<name>.jsonl` (one row per point, flushed as measured, so a
    run stopped by `deadline_s` or killed still leaves its data) and `<name>.csv`. `tiny` is a
    seconds-long grid for smoke tests; `base_gpu` names the catalogue GPU whose datasheet to use.
    """
    torch = require_torch()
    _check_device(device, backend)
    started = time.monotonic()
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    base = None if device == "cpu" and base_gpu is None else prof.find_base(device_name, base_gpu)
    spec, skipped = _cross_backends(grid_for(device, quick=quick, tiny=tiny), device, backend)
    slug = base["name"] if base else ("cpu" if device == "cpu" else prof.name_candidates(device_name)[1])
    stem = f"{slug}.calibrated"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_path, csv_path = out_dir / f"{stem}.jsonl", out_dir / f"{stem}.csv"
    raw_path.write_text("")
    points = plan_points(spec, backend, max_kv_bytes=MAX_KV_BYTES[device])
    log = run_points(points, Measurer(device, spec).measure, raw_path, deadline_s=deadline_s, progress=progress)
    rows = log.rows
    micro = _micro_numbers(rows)
    fits = fit_rows(rows)
    if not fits or (base is None and not {"copy_bytes_per_s", "matmul_flops_per_s"} <= set(micro)):
        raise CapsimError(f"calibrate: {len(rows)} of {log.planned} points measured, too few to fit "
                          f"(--deadline-s {deadline_s} too short?). Raw data kept in {raw_path}.")
    if base is None:
        base = prof.measured_base(device, device_name, micro, prof.memory_bytes(device))
    provenance = _provenance(device_name, raw_path)
    profile = prof.build_profile(base, fits, micro, backend=backend, compute_dtype=spec.compute_dtype,
                                 provenance=provenance)
    _write_csv(rows, csv_path)
    profile_path = out_dir / f"{stem}.yaml"
    prof.write_profile(profile, profile_path)
    return CalibrationResult(profile_path, raw_path, csv_path, fits, len(rows), log.planned,
                             sum(1 for r in rows if r.get("error")), log.stopped_at_deadline,
                             time.monotonic() - started, prof.validate_profile(profile_path), skipped)


def _micro_numbers(rows: list[dict]) -> dict[str, float]:
    out: dict = {}
    for r in rows:
        if r["family"] != "micro" or r.get("error"):
            continue
        if r["kind"] == "launch":
            out["launch_s"] = r["time_s"]
        elif r["kind"] == "copy":
            out["copy_bytes_per_s"] = r["bytes_per_s"]
        else:
            out["matmul_flops_per_s"], out["matmul_dtype"] = r["flops_per_s"], r["dtype"]
    return out


def _provenance(device_name: str, raw_path: Path) -> dict:
    v = versions()
    return {"device_name": device_name, "date": prof.today(), "driver": prof.driver_version(),
            "torch_version": v["torch"], "triton_version": v["triton"], "raw_data_file": raw_path.name,
            "raw_data_sha256": prof.sha256_file(raw_path)}


def _write_csv(rows: list[dict], path: Path) -> None:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)


def read_raw(path: Path) -> list[dict]:
    """Rows of a raw JSONL file (one JSON object per line; a torn last line from a killed run is skipped)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def check(profile_path: Path) -> CheckReport:
    """Re-read the raw data beside a calibrated profile and recompute its held-out errors."""
    from capsim.spec.catalog import load_hardware

    profile_path = Path(profile_path)
    cal = load_hardware(profile_path).calibration
    if cal is None or not cal.raw_data_file:
        raise CapsimError(f"{profile_path}: no calibration.raw_data_file; is this a calibrated profile?")
    raw_path = profile_path.parent / cal.raw_data_file
    if not raw_path.is_file():
        raise CapsimError(f"{profile_path}: raw data file {cal.raw_data_file!r} not found beside the profile.")
    fits = fit_rows(read_raw(raw_path))
    return CheckReport(profile_path, raw_path, prof.sha256_file(raw_path) == cal.raw_data_sha256,
                       dict(cal.mape), fits)


def refit(profile_path: Path) -> Path:
    """Refit a calibrated profile from the raw data beside it, in place (provenance kept, fit and
    errors recomputed, sha256 refreshed): how a profile measured on another machine is fitted here."""
    from capsim.spec.catalog import load_hardware

    profile_path = Path(profile_path)
    old = load_hardware(profile_path).model_dump(mode="json")
    cal = old["calibration"] or {}
    if not cal.get("raw_data_file"):
        raise CapsimError(f"{profile_path}: no calibration.raw_data_file; is this a calibrated profile?")
    raw_path = profile_path.parent / cal["raw_data_file"]
    rows = read_raw(raw_path)
    fits = fit_rows(rows)
    if not fits:
        raise CapsimError(f"{raw_path}: no kernel family has enough points to fit.")
    micro = _micro_numbers(rows)
    dtypes = [r["dtype"] for r in rows if r.get("family") == "gemm" and r.get("dtype") != "fp8"]
    base = {**old, "name": old["name"].removesuffix(".calibrated")}
    provenance = {k: cal.get(k) for k in ("device_name", "date", "driver", "torch_version", "triton_version")}
    provenance.update(raw_data_file=raw_path.name, raw_data_sha256=prof.sha256_file(raw_path))
    profile = prof.build_profile(base, fits, micro, backend=cal["backend"],
                                 compute_dtype=micro.get("matmul_dtype") or (dtypes[0] if dtypes else "fp16"),
                                 provenance=provenance)
    prof.write_profile(profile, profile_path)
    return profile_path
