"""Turn fits into a calibrated HardwareProfile YAML (`<gpu>.calibrated.yaml`) with provenance.

Datasheet numbers (memory, peaks, interconnect, sources) come from the catalogue profile of the
same GPU; a CPU or an unknown GPU gets a profile whose ceilings are its own micro-benchmarks, and
its `sources` say so. The profile is validated through capsim.spec.catalog whenever pydantic is
importable (always in a normal install; the GPU machine's image lacks it, so the device script
writes the YAML unvalidated and the local `check`/refit validates it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import subprocess
from importlib import resources
from pathlib import Path

import yaml

from capsim.errors import CapsimError
from capsim.harness.fit import FamilyFit
from capsim.spec.limits import MAX_TOKENS, MIN_EFFICIENCY

# Kernel calls per layer charged at the GEMM intercept in overhead.layer_s (qkv, o, gate_up, down).
GEMMS_PER_LAYER = 4


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def name_candidates(device_name: str) -> list[str]:
    """'NVIDIA GeForce RTX 4090' -> ['nvidia geforce rtx 4090', 'rtx-4090', 'rtx4090', 'rtx', ...]."""
    text = device_name.lower().strip()
    words = [w for w in re.split(r"[\s_]+", text) if w not in ("nvidia", "geforce", "tesla")]
    out = [text]
    for n in range(len(words), 0, -1):
        out += ["-".join(words[:n]), "".join(words[:n])]
    return list(dict.fromkeys(out))


def catalogue_profile(name: str) -> dict | None:
    """The catalogue profile `name` (name or alias, case-insensitive) as a plain dict, or None."""
    try:
        from capsim.spec.catalog import load_hardware
    except ImportError:  # no pydantic (the GPU machine's image): read the shipped YAML directly
        return _raw_catalogue().get(name.lower())
    try:
        return load_hardware(name).model_dump(mode="json")
    except CapsimError:
        return None


def _raw_catalogue() -> dict[str, dict]:
    root = resources.files("capsim.hardware_profiles")
    table: dict[str, dict] = {}
    for entry in root.iterdir():
        if entry.name.endswith(".yaml") and ".calibrated" not in entry.name:
            data = yaml.safe_load(entry.read_text())
            for key in [data["name"], *data.get("aliases", [])]:
                table.setdefault(str(key).lower(), data)
    return table


def find_base(device_name: str, base_gpu: str | None) -> dict | None:
    """The catalogue profile to start from: `base_gpu` if given (must exist), else by device name."""
    if base_gpu is not None:
        base = catalogue_profile(base_gpu)
        if base is None:
            raise CapsimError(f"--base-gpu {base_gpu!r}: not in the hardware catalogue (see `capsim gpus`).")
        return base
    for candidate in name_candidates(device_name):
        base = catalogue_profile(candidate)
        if base is not None and not base["name"].endswith(".calibrated"):
            return base
    return None


def measured_base(device: str, device_name: str, micro: dict[str, float], memory_bytes: int) -> dict:
    """A profile whose ceilings are this machine's own micro-benchmarks (CPU or unknown GPU)."""
    slug = "cpu" if device == "cpu" else (name_candidates(device_name)[1] or "gpu")
    how = "measured by capsim calibrate"
    copy, peak = micro["copy_bytes_per_s"], micro["matmul_flops_per_s"]
    return {
        "name": slug, "aliases": [], "vendor": "other" if device == "cpu" else "nvidia",
        "memory_bytes": int(memory_bytes), "memory_bandwidth_bytes_per_s": copy,
        "peak_flops": {"fp16": peak, "bf16": peak, "fp32": peak},
        "interconnect": {"pcie_bytes_per_s": 31.5e9 if device == "cuda" else copy},
        "sources": {
            "memory_bytes": "total memory reported by the OS / CUDA runtime",
            "memory_bandwidth_bytes_per_s": f"{how}: copy micro-benchmark (read + write bytes per second)",
            "peak_flops": f"{how}: square matmul micro-benchmark in {micro.get('matmul_dtype', 'fp32')}, "
                          "used for every dtype (no datasheet known for this device)",
            "interconnect": "not measured: assumed PCIe 4.0 x16 (GPU) or the copy bandwidth (CPU), placeholder",
        },
        "notes": f"No catalogue profile for {device_name!r}: ceilings are this machine's micro-benchmarks, so "
                 "efficiencies are relative to them, not to a datasheet.",
    }


def memory_bytes(device: str) -> int:
    """Total memory of the device (CPU: physical RAM)."""
    if device == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def driver_version() -> str | None:
    """NVIDIA driver version from nvidia-smi, or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _share(rate: float | None, ceiling: float) -> float | None:
    """Achieved / ceiling, clipped into the schema's [limits.MIN_EFFICIENCY, 1]; None when
    nothing was measured."""
    if not rate or rate <= 0:
        return None
    return float(f"{min(1.0, max(MIN_EFFICIENCY, rate / ceiling)):.4g}")


def fit_numbers(fits: dict[str, FamilyFit], micro: dict[str, float]) -> dict[str, float]:
    """Every fitted coefficient as a flat dict of floats (the profile's `calibration.fit`)."""
    out = {f"micro.{k}": float(v) for k, v in micro.items() if isinstance(v, (int, float))}
    for name, f in fits.items():
        m = f.model
        out[f"{name}.a_s"] = m.a
        if m.s_b > 0:
            out[f"{name}.bytes_per_s"] = 1.0 / m.s_b
        if m.s_f > 0:
            out[f"{name}.flops_per_s"] = 1.0 / m.s_f
        if name.startswith("gemm"):
            out[f"{name}.half_tokens"] = m.h
        if m.s_r > 0:
            out[f"{name}.half_keys"] = m.half_keys()
        out[f"{name}.points"] = float(f.n_points)
    return out


def mape_table(fits: dict[str, FamilyFit]) -> dict[str, float]:
    """Held-out and training errors in percent: '<family>.<kfold|logo_key|train>_pct'."""
    return {f"{name}.{kind}_pct": round(v, 3) for name, f in fits.items() for kind, v in f.mape_pct.items()}


def decode_fit(fits: dict[str, FamilyFit], backend: str, kv_dtype: str) -> FamilyFit | None:
    """The decode fit the profile is built from: the backend's, with the compute dtype's KV cache
    (the default cache format) when it was measured, else the backend's first."""
    if f"decode.{backend}.{kv_dtype}" in fits:
        return fits[f"decode.{backend}.{kv_dtype}"]
    return next((f for name, f in fits.items() if name.startswith(f"decode.{backend}.")), None)


def build_profile(base: dict, fits: dict[str, FamilyFit], micro: dict[str, float], *, backend: str,
                  compute_dtype: str, provenance: dict) -> dict:
    """The calibrated profile: the base profile with efficiencies, overheads and calibration replaced."""
    bw = float(base["memory_bandwidth_bytes_per_s"])
    peaks = base["peak_flops"]
    peak = float(peaks.get(compute_dtype) or peaks["fp16"])
    decode, gemm = decode_fit(fits, backend, compute_dtype), fits.get(f"gemm.{compute_dtype}")
    eff = dict(base.get("efficiency") or {})
    gemv_rate = 1.0 / gemm.model.s_b if gemm and gemm.model.s_b > 0 else micro.get("copy_bytes_per_s")
    updates = {
        "attention_bandwidth": _share(1.0 / decode.model.s_b if decode and decode.model.s_b > 0 else None, bw),
        "bandwidth": _share(gemv_rate, bw),
        "compute": _share(1.0 / gemm.model.s_f if gemm and gemm.model.s_f > 0 else None, peak),
    }
    eff.update({k: v for k, v in updates.items() if v is not None})
    if gemm is not None:
        eff["compute_half_tokens"] = float(min(gemm.model.h, MAX_TOKENS))
    prefill = fits.get("prefill")
    if prefill is not None and prefill.model.s_f > 0:
        share = _share(1.0 / prefill.model.s_f, float(peaks.get("fp16") or peak))  # the attention peak capsim uses
        if share is not None:
            eff["attention_compute"] = share
            eff["attention_half_keys"] = float(min(prefill.model.half_keys(), MAX_TOKENS))
    attention_call_s = decode.model.a if decode else micro.get("launch_s", 0.0)
    layer_s = attention_call_s + GEMMS_PER_LAYER * (gemm.model.a if gemm else 0.0)
    overhead = {**(base.get("overhead") or {}), "layer_s": float(layer_s)}
    profile = {k: v for k, v in base.items() if k not in ("efficiency", "overhead", "calibration")}
    profile["name"] = f"{base['name']}.calibrated"
    profile["aliases"] = []
    profile["efficiency"], profile["overhead"] = eff, overhead
    profile["sources"] = {**base.get("sources", {}), **_calibrated_sources(backend, compute_dtype)}
    profile["calibration"] = {**provenance, "backend": backend, "fit": fit_numbers(fits, micro),
                              "mape": mape_table(fits), "notes": _notes(fits, compute_dtype)}
    return profile


def _calibrated_sources(backend: str, dtype: str) -> dict[str, str]:
    how = "capsim calibrate (see calibration.fit, calibration.mape and the raw data file)"
    return {
        "efficiency": f"{how}: attention_bandwidth = 1/s of decode t = a + kv_bytes*s ({backend} backend, "
                      f"{dtype} KV); "
                      f"bandwidth = GEMV (small-M {dtype} GEMM) bandwidth; compute, compute_half_tokens = "
                      f"{dtype} GEMM fit t = a + max(bytes*s_b, flops*(M+h)/M*s_f); attention_compute, "
                      f"attention_half_keys = causal prefill-attention (SDPA) fit t = a + flops*s_f + rows*s_r "
                      f"(half keys = s_r / 4 s_f; when that form fits best); all / the datasheet ceilings",
        "overhead": f"{how}: layer_s = decode-attention intercept + {GEMMS_PER_LAYER} x GEMM intercept",
    }


def _notes(fits: dict[str, FamilyFit], dtype: str) -> str:
    parts = ["mape values are percent (kfold = 5-fold cross-validated; logo_X = leave one X out)."]
    for name, f in fits.items():
        if f.rejected:
            other = ", ".join(f"{k} {v:.1f}%" for k, v in f.rejected.items())
            parts.append(f"{name}: kept the {f.model.form} form (5-fold MAPE of the other: {other}).")
    return " ".join(parts)


def write_profile(profile: dict, path: Path) -> None:
    """Write the YAML and, where pydantic is importable, load it back through the catalogue loader."""
    header = ("# Calibrated by `capsim calibrate`: efficiencies and overheads fitted to kernel timings on this "
              "device.\n# Raw points: calibration.raw_data_file (beside this file). Do not edit by hand; re-run.\n")
    path.write_text(header + yaml.safe_dump(profile, sort_keys=False, width=110))
    validate_profile(path)


def validate_profile(path: Path) -> bool:
    """Load the profile through capsim.spec.catalog (raises CapsimError if invalid); False if pydantic is absent."""
    try:
        from capsim.spec.catalog import load_hardware
    except ImportError:
        return False
    profile = load_hardware(path)
    if profile.name != path.name.removesuffix(".yaml"):
        raise CapsimError(f"{path}: name {profile.name!r} does not match the file name.")
    return True
