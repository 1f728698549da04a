"""How well measured GEMM times fit capsim's GEMM roofline with the two sides combined as their max
or as their p-norm (docs/cost-model.md, "GEMM overlap"; capsim.cost.decode_runs.GEMM_OVERLAP_NORM).

    python scripts/gemm_overlap_fit.py
    python scripts/gemm_overlap_fit.py --aiconfigurator PATH/aic-core/src/aiconfigurator_core/systems/data

Model per GEMM (capsim's form): t = a + norm_p(weight bytes / (eta_bw x BW),
2MNK / (eta_c x peak x M'/(M' + 64))), M' = max(M, 128). For each set of measurements and each p,
eta_c, eta_bw and the intercept a are refit on a grid (so p is judged apart from the shares), and the
mean absolute error over all M, and its signed mean over M = 64..512 (near the ridge), are printed.

Sets: capsim's own H200 calibration run (hardware_profiles/h200.calibrated.csv, its 96 GEMMs); with
--aiconfigurator, NVIDIA's ai-dynamo/aiconfigurator per-op database (TensorRT-LLM 1.3.0rc20,
gemm/trtllm/1.3.0rc20/gemm_perf.parquet for h100_sxm and h200_sxm; latency in ms per call), the
Llama-70B qkv (10240 x 8192) and o_proj (8192 x 8192) shapes; its fp8 rows include a dynamic
activation quantisation, taken out with the same database's quantize tables (compute_scale +
scale_matrix at the same m and k), as aiconfigurator itself does for static FP8. Reading the
parquet files needs pyarrow (capsim's `parquet` extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
PEAK = {"bf16": 989.5e12, "fp8": 1979.0e12}
BANDWIDTH = {"h100_sxm": 3.35e12, "h200_sxm": 4.8e12}
SHAPES = {(10240, 8192), (8192, 8192)}  # (n, k): Llama-70B qkv and o_proj at TP 1
NORMS = (None, 6.0, 4.0, 3.0)  # None: the max
GRID_C = np.arange(0.60, 1.00, 0.01)
GRID_BW = np.arange(0.55, 0.95, 0.01)
GRID_A_S = np.arange(0.0, 12.5e-6, 1e-6)


def fit(m, n, k, t_s, dtype: str, bandwidth: float) -> list[tuple]:
    """(p, mean |error| %, signed error % at M = 64..512, eta_c, eta_bw, a_us) per norm, each refit."""
    m, n, k, t_s = (np.asarray(x, dtype=float) for x in (m, n, k, t_s))
    weight_bytes = n * k * (1 if dtype == "fp8" else 2)
    ramp_m = np.maximum(m, 128.0)
    flops_at_peak = 2 * m * n * k / (PEAK[dtype] * ramp_m / (ramp_m + 64.0))
    ridge = (m >= 64) & (m <= 512)
    rows = []
    for p in NORMS:
        best = None
        for c in GRID_C:
            comp = flops_at_peak / c
            mem = weight_bytes[None, :] / (GRID_BW[:, None] * bandwidth)  # (bw, rows)
            core = np.maximum(mem, comp) if p is None else (mem ** p + comp ** p) ** (1.0 / p)
            pred = core[None, :, :] + GRID_A_S[:, None, None]  # (a, bw, rows)
            err = (pred - t_s) / t_s
            mape = np.abs(err).mean(axis=2)
            i, j = np.unravel_index(np.argmin(mape), mape.shape)
            if best is None or mape[i, j] < best[1]:
                best = (p, float(mape[i, j]), float(err[i, j][ridge].mean()), float(c), float(GRID_BW[j]),
                        float(GRID_A_S[i]) * 1e6)
        rows.append(best)
    return rows


def own_h200() -> dict[str, pd.DataFrame]:
    d = pd.read_csv(REPO / "hardware_profiles" / "h200.calibrated.csv")
    g = d[d["family"] == "gemm"]
    return {f"capsim H200 calibration run, {dt}": pd.DataFrame({"m": x["m_run"], "n": x["n"], "k": x["k"], "t_s": x["time_s"],
                                                                  "dtype": dt, "bandwidth": BANDWIDTH["h200_sxm"]})
            for dt, x in g.groupby("dtype")}


def aiconfigurator(data_dir: Path) -> dict[str, pd.DataFrame]:
    sets = {}
    for gpu in ("h100_sxm", "h200_sxm"):
        base = data_dir / gpu
        gemm = pd.read_parquet(base / "gemm/trtllm/1.3.0rc20/gemm_perf.parquet")
        quant = [pd.read_parquet(base / f"quantize/trtllm/1.3.0rc20/{name}_perf.parquet").set_index(["m", "k"])["latency"]
                 for name in ("computescale", "scale_matrix")]
        gemm = gemm[[(n, k) in SHAPES for n, k in zip(gemm["n"], gemm["k"])]]
        for dtype, name in (("bfloat16", "bf16"), ("fp8", "fp8")):
            x = gemm[gemm["gemm_dtype"] == dtype].copy()
            t_ms = x["latency"].to_numpy(dtype=float)
            if name == "fp8":  # the dynamic activation quantisation the fp8 rows carry
                key = pd.MultiIndex.from_arrays([x["m"], x["k"]])
                t_ms = t_ms - sum(q.reindex(key).to_numpy(dtype=float) for q in quant)
            sets[f"aiconfigurator TensorRT-LLM 1.3.0rc20 {gpu}, {name}"] = pd.DataFrame(
                {"m": x["m"], "n": x["n"], "k": x["k"], "t_s": t_ms / 1e3, "dtype": name, "bandwidth": BANDWIDTH[gpu]}).dropna()
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", type=Path, help="aiconfigurator's systems/data folder (a checkout of "
                        "ai-dynamo/aiconfigurator: aic-core/src/aiconfigurator_core/systems/data)")
    args = parser.parse_args()
    sets = own_h200()
    if args.aiconfigurator is not None:
        sets |= aiconfigurator(args.aiconfigurator)
    for name, x in sets.items():
        print(f"{name} ({len(x)} GEMMs):")
        for p, mape, ridge, c, bw, a_us in fit(x["m"], x["n"], x["k"], x["t_s"], x["dtype"].iloc[0], x["bandwidth"].iloc[0]):
            label = "max" if p is None else f"p = {p:g}"
            print(f"  {label:7s} mean |error| {100 * mape:4.1f}%, at M = 64-512 {100 * ridge:+5.1f}% "
                  f"(eta_c {c:.2f}, eta_bw {bw:.2f}, a {a_us:.0f} us)")


if __name__ == "__main__":
    main()
