"""capsim's prefill-attention form fitted to the serving engines' own prefill-attention kernels, as NVIDIA's
per-operator database measured them (ai-dynamo/aiconfigurator, context_attention_perf.parquet): the
hardware profiles' `attention_compute` and `attention_half_keys` (docs/cost-model.md, "Measured operators").

    python scripts/aiconfigurator_prefill_attention.py --aiconfigurator PATH/aic-core/src/aiconfigurator_core/systems/data

Each file times one layer's causal prefill attention of `batch_size` fresh prompts of `isl` tokens (latency
in ms), per engine release. capsim prices it (capsim.cost.roofline attention_part) as FLOPs / (eta x peak)
plus each prompt token's row costing as much as `half_keys` more keys, here with an intercept per call:
    t = a + FLOPs * s_f + rows * s_r,  FLOPs = 4 x heads x 128 x isl (isl + 1) / 2 x batch,
    rows = batch x isl x heads x 128,  eta = 1 / (s_f x fp16 peak),  half_keys = s_r / (4 s_f)
(capsim.harness.fit.fit_rows_form, relative least squares), over the Llama-3 head shapes (32 or 64 query heads,
8 KV heads, head size 128), bf16, prompts of 128 tokens and more. A kernel whose times imply more than the
peak at any point does less work than a causal prefill and is left out, with the reason.
Each kernel a file times (its kernel_source) is fitted on its own; the profile value per GPU is the median
over the kernels kept. Reading parquet needs pyarrow.

The RTX 5090 (GB202) is not in the database; the RTX PRO 6000 Blackwell Server (the same die) is. Its kernels
give the 5090's values as a ratio: prefill attention runs at `attention_ratio` of the PRO 6000's large bf16
GEMMs (the median over its gemm_perf.parquet files of M >= 4,096, N and K >= 4,096), and the 5090's large bf16
GEMM was measured at 224.3 TFLOPS (main-horse.github.io/posts/5090-mm-perf, torch.matmul 16384 x 8192 x 1280);
the 5090's share of its 209.5 TFLOPS datasheet peak is that ratio x 224.3 / 209.5. A ratio of two kernels on
one die carries over where their absolute rates do not: the PRO 6000's GEMMs reach 0.85 of its tensor rate, the
5090's 0.61 of the 370.6 TFLOPS its tensor cores were measured at (the same page, mmapeak).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.harness.fit import fit_rows_form, mape_pct

# fp16/bf16 dense tensor peaks with fp32 accumulation, as the hardware profiles carry them; the RTX PRO 6000's
# is the one aiconfigurator's systems/rtx_pro_6000_server.yaml states (467.8 TFLOPS dense at 2,430 MHz)
PEAK = {"a100_sxm": 312e12, "h100_sxm": 989.4e12, "h200_sxm": 989.5e12, "b200_sxm": 2.25e15, "l40s": 362.05e12,
        "rtx_pro_6000_server": 467.8e12}
PROFILE = {"a100_sxm": "a100-80g", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "l40s": "l40s",
           "rtx_pro_6000_server": "rtx-pro-6000"}  # no capsim profile: the RTX 5090's source (rtx5090_values)
RTX5090_GEMM_FLOPS, RTX5090_PEAK = 224.3e12, 209.5e12  # measured torch.matmul bf16; datasheet fp32-accumulate peak
BIG_GEMM = 4096
HEADS = ((32, 8), (64, 8))
HEAD_DIM = 128
MIN_ISL = 128
DTYPES = ("bfloat16", "float16")  # attention computed and KV cache stored in 16 bits


def points(d: pd.DataFrame) -> pd.DataFrame:
    keep = (d.head_dim == HEAD_DIM) & (d.isl >= MIN_ISL)
    keep &= pd.Series(list(zip(d.num_heads, d.num_key_value_heads)), index=d.index).isin(HEADS)
    d = d[keep].groupby(["batch_size", "isl", "num_heads"], as_index=False).latency.median()
    n, b, h = d.isl.to_numpy(float), d.batch_size.to_numpy(float), d.num_heads.to_numpy(float)
    return pd.DataFrame({"t": d.latency.to_numpy(float) * 1e-3, "flops": 4.0 * h * HEAD_DIM * n * (n + 1) / 2 * b,
                         "rows": b * n * h * HEAD_DIM, "isl": n})


def fit_set(d: pd.DataFrame, peak: float) -> dict:
    pts = points(d)
    row = {"points": len(pts)}
    if len(pts) < 4:
        return {**row, "left_out": "fewer than 4 points"}
    top = float((pts.flops / pts.t).max() / peak)
    if top > 1.0:
        return {**row, "left_out": f"implies {top:.2f} of the peak"}
    arrays = {k: pts[k].to_numpy() for k in ("t", "flops", "rows")} | {"bytes": np.zeros(len(pts))}
    model = fit_rows_form(arrays)
    if model.s_f <= 0:
        return {**row, "left_out": "no FLOP term in the fit"}
    return {**row, "eta": 1.0 / (model.s_f * peak), "half_keys": model.half_keys(), "a_us": model.a * 1e6,
            "mape_pct": mape_pct(model, arrays)}


def fit_all(data: Path) -> pd.DataFrame:
    """One row per (GPU, engine release, kernel): its fit, or why it was left out."""
    rows = []
    for gpu, peak in PEAK.items():
        for path in sorted(data.glob(f"{gpu}/attention/*/*/context_attention_perf.parquet")):
            d = pd.read_parquet(path)
            d = d[d.attn_dtype.isin(DTYPES) & d.kv_cache_dtype.isin(DTYPES)]
            for kernel, one in d.groupby("kernel_source"):
                rows.append({"gpu": gpu, "framework": path.parts[-3], "version": path.parts[-2], "kernel": kernel,
                             **fit_set(one, peak)})
    return pd.DataFrame(rows)


def profile_values(table: pd.DataFrame) -> dict[str, dict]:
    """Per profile: the median share and the median row cost over the kernels kept (two medians)."""
    kept = table[table["left_out"].isna()] if "left_out" in table else table
    return {PROFILE[gpu]: {"attention_compute": float(g.eta.median()), "attention_half_keys": float(g.half_keys.median()),
                           "kernels": len(g), "eta": (float(g.eta.min()), float(g.eta.max())),
                           "half_keys": (float(g.half_keys.min()), float(g.half_keys.max())),
                           "mape_pct": (float(g.mape_pct.min()), float(g.mape_pct.max()))}
            for gpu, g in kept.groupby("gpu", sort=False)}


def gemm_rate(data: Path, gpu: str) -> float:
    """Median achieved FLOP/s of the GPU's large bf16 GEMMs (M, N and K of BIG_GEMM or more), over every table."""
    rates = []
    for path in sorted(data.glob(f"{gpu}/gemm/*/*/gemm_perf.parquet")):
        d = pd.read_parquet(path)
        d = d[(d.gemm_dtype == "bfloat16") & (d.m >= BIG_GEMM) & (d.n >= BIG_GEMM) & (d.k >= BIG_GEMM)]
        rates.extend(2.0 * d.m * d.n * d.k / (d.latency * 1e-3))
    return float(np.median(rates)) if rates else float("nan")


def rtx5090_values(pro6000: dict, pro6000_gemm_flops: float) -> dict:
    """The RTX 5090's prefill-attention share of its datasheet peak, from the RTX PRO 6000's attention / GEMM ratio."""
    ratio = pro6000["attention_compute"] * PEAK["rtx_pro_6000_server"] / pro6000_gemm_flops
    return {"attention_ratio": ratio, "attention_compute": ratio * RTX5090_GEMM_FLOPS / RTX5090_PEAK,
            "attention_half_keys": pro6000["attention_half_keys"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", type=Path, required=True,
                        help="aiconfigurator's aic-core/src/aiconfigurator_core/systems/data")
    data = parser.parse_args().aiconfigurator
    table = fit_all(data)
    pd.set_option("display.width", 200)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print("\nmedian over the kernels kept (the profile values):")
    for name, v in profile_values(table).items():
        print(f"  {name}: attention_compute {v['attention_compute']:.3f}, attention_half_keys "
              f"{v['attention_half_keys']:.0f} ({v['kernels']} kernels; eta {v['eta'][0]:.2f}-{v['eta'][1]:.2f}, "
              f"half keys {v['half_keys'][0]:.0f}-{v['half_keys'][1]:.0f}, "
              f"MAPE {v['mape_pct'][0]:.1f}-{v['mape_pct'][1]:.1f}%)")
    pro = profile_values(table).get(PROFILE["rtx_pro_6000_server"])
    gemm = gemm_rate(data, "rtx_pro_6000_server")
    if pro is None or np.isnan(gemm):
        print("\nRTX 5090: no RTX PRO 6000 attention or large bf16 GEMM tables here, so no transfer")
    else:
        v = rtx5090_values(pro, gemm)
        print(f"\nRTX 5090 (GB202, from the RTX PRO 6000): large bf16 GEMMs {gemm / 1e12:.0f} TFLOPS there, attention "
              f"{v['attention_ratio']:.3f} of that; x {RTX5090_GEMM_FLOPS / 1e12:.1f} / {RTX5090_PEAK / 1e12:.1f}: "
              f"attention_compute {v['attention_compute']:.3f}, attention_half_keys {v['attention_half_keys']:.0f}")


if __name__ == "__main__":
    main()
