"""capsim's per-operator forms fitted to NVIDIA's measured per-operator database (ai-dynamo/aiconfigurator):
the decode-attention cost per sequence and KV head, by GPU, engine and KV-cache format, and the GEMM
share per format of the B200, H100, H200 and L40S, by framework (docs/cost-model.md, "Measured operators").

    python scripts/aiconfigurator_fit.py --aiconfigurator PATH/aic-core/src/aiconfigurator_core/systems/data

Decode attention (generation_attention_perf.parquet: one layer, batch B of sequences each with S cached
tokens, latency in ms): capsim's form per layer is t = a + max(s x B x kv_heads, KV bytes / (eta_bw x BW))
(capsim.cost.roofline attention_part, with the profile's attention bandwidth share eta_bw = 0.77); `s` (the
profile's `attention_seq_s`) and the intercept `a` are fitted on a grid, over B >= 16, for the Llama-70B
(64 query / 8 KV heads) and Llama-8B (32 / 8) head shapes at head size 128. The mean |error| with the
current class value (0.0294 us) is printed beside it.

GEMMs (gemm_perf.parquet, B200, H100, H200, L40S): capsim's form t = a + (mem^4 + comp^4)^(1/4) with mem = weight
bytes / (eta_bw x BW) and comp = 2MNK / (eta_c x peak x M'/(M' + 64)), M' = max(M, 128), fitted on Llama-70B-sized
shapes (N in 8192, 10240, 51200, 65536; K in 8192, 16384, 51200); the median eta_c per GPU and format over every
collection (framework release and kernel) follows them.

Weight reads at small M (gemm_perf.parquet): the bf16 GEMMs' weight bytes per second as a share of the datasheet
bandwidth (H100, H200, B200), and, for every GPU and framework, the median over M = 1-16 and eight
Llama/Qwen-sized shapes of the FP8 (per-tensor) and block-FP8 GEMM's time over the bf16 GEMM's, and the
engine-profile multiplier it gives (kernel_efficiency.weight_formats): the bf16 multiplier x (format bytes /
bf16 bytes) / that ratio, so that a weight-read-bound GEMM in the format takes that ratio of the bf16 time.
Reading parquet needs pyarrow (capsim's `parquet` extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

HBM_BANDWIDTH = {"h100_sxm": 3.35e12, "h200_sxm": 4.8e12, "b200_sxm": 8.0e12}  # the profiles' datasheet figures
GEMM_BANDWIDTH = HBM_BANDWIDTH | {"l40s": 864e9}  # decode attention is fitted on the HBM parts only (their 0.77 share)
ATTENTION_BW_SHARE = 0.77  # the Hopper/Blackwell profiles' bandwidth share (hardware_profiles/h100-sxm.yaml)
CLASS_SEQ_S = 2.94e-8  # the class value the profiles carried (Vidur A100)
HEADS = ((64, 8), (32, 8))  # (query heads, KV heads) at head size 128
KV_BYTES = {"fp8": 1.0, "bfloat16": 2.0}
GRID_SEQ_S = np.arange(0.002e-6, 0.060e-6, 0.0005e-6)
GRID_A_S = np.arange(0.0, 15e-6, 0.5e-6)

SMALL_M = (1, 2, 4, 8, 16)  # decode and short-prompt GEMMs: weight-read bound
SMALL_M_SHAPES = ((6144, 4096), (4096, 4096), (12288, 4096), (4096, 12288), (16384, 4096), (8192, 8192),
                  (10240, 8192), (8192, 28672))  # (N, K): Llama-3-8B / Qwen3-8B and Llama-70B projections
FORMAT_BYTES = {"fp8": 8 / 16, "fp8_block": (8 + 32 / (128 * 128)) / 16}  # over bf16 (capsim.spec.formats)
BF16_BANDWIDTH_MULTIPLIER = 0.88  # the vllm and sglang profiles' kernel_efficiency.bandwidth

HOPPER_PEAK = {"fp8": 1.979e15, "bfloat16": 0.9895e15}  # dense, hardware_profiles/h100-sxm.yaml and h200.yaml
PEAK = {"b200_sxm": {"nvfp4": 9.0e15, "fp8": 4.5e15, "bfloat16": 2.25e15},  # dense, hardware_profiles/b200.yaml
        "h100_sxm": HOPPER_PEAK, "h200_sxm": HOPPER_PEAK,
        "l40s": {"fp8": 733e12, "bfloat16": 362.05e12}}  # dense, hardware_profiles/l40s.yaml
WEIGHT_BYTES = {"nvfp4": 4.5 / 8, "fp8": 1.0, "bfloat16": 2.0}  # NVFP4: 4 bits + one 8-bit scale per 16 values
GEMM_N = (8192, 10240, 51200, 65536)
GEMM_K = (8192, 16384, 51200)
GRID_C = np.arange(0.30, 1.00, 0.01)
GRID_BW = np.arange(0.30, 0.95, 0.01)
GRID_GEMM_A_S = np.arange(0.0, 30e-6, 1e-6)


def attention_fit(batch, cached, t_s, kv_heads: int, kv_bytes: float, bandwidth: float) -> tuple[float, float, float, float]:
    """(seq_s, a_s, mean |error| of the fit, mean |error| with the class value and its best a)."""
    batch, cached, t_s = (np.asarray(x, dtype=float) for x in (batch, cached, t_s))
    memory_s = batch * cached * kv_heads * 128 * 2 * kv_bytes / (ATTENTION_BW_SHARE * bandwidth)
    per_seq = batch * kv_heads
    pred = GRID_A_S[:, None, None] + np.maximum(GRID_SEQ_S[None, :, None] * per_seq, memory_s)  # (a, s, rows)
    err = (np.abs(pred - t_s) / t_s).mean(axis=2)
    i, j = np.unravel_index(np.argmin(err), err.shape)
    at_class = (np.abs(GRID_A_S[:, None] + np.maximum(CLASS_SEQ_S * per_seq, memory_s) - t_s) / t_s).mean(axis=1)
    return float(GRID_SEQ_S[j]), float(GRID_A_S[i]), float(err[i, j]), float(at_class.min())


def gemm_fit(m, n, k, t_s, dtype: str, gpu: str) -> tuple[float, float, float, float]:
    """(eta_c, eta_bw, a_s, mean |error|) of capsim's 4-norm GEMM form on `gpu`, refit on a grid."""
    m, n, k, t_s = (np.asarray(x, dtype=float) for x in (m, n, k, t_s))
    ramp_m = np.maximum(m, 128.0)
    at_peak = 2 * m * n * k / (PEAK[gpu][dtype] * ramp_m / (ramp_m + 64.0))
    memory = n * k * WEIGHT_BYTES[dtype] / (GRID_BW[:, None] * GEMM_BANDWIDTH[gpu])  # (bw, rows)
    best = None
    for c in GRID_C:
        core = (memory ** 4 + (at_peak / c) ** 4) ** 0.25
        err = (np.abs(core[None] + GRID_GEMM_A_S[:, None, None] - t_s) / t_s).mean(axis=2)  # (a, bw)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if best is None or err[i, j] < best[3]:
            best = (float(c), float(GRID_BW[j]), float(GRID_GEMM_A_S[i]), float(err[i, j]))
    return best


def attention_sets(data_dir: Path):
    """(gpu, framework version, kernel, KV format, heads, table) for every decode-attention collection."""
    for path in sorted(data_dir.glob("*_sxm/attention/*/*/generation_attention_perf.parquet")):
        gpu = path.relative_to(data_dir).parts[0]
        if gpu not in HBM_BANDWIDTH:
            continue  # the GPUs capsim's profiles were fitted for
        d = pd.read_parquet(path)
        if "window_size" in d:
            d = d[d["window_size"] == 0]
        d = d[(d["head_dim"] == 128) & (d["batch_size"] >= 16)]
        for (kernel, kv), x in d.groupby(["kernel_source", "kv_cache_dtype"]):
            if kv not in KV_BYTES:
                continue
            for heads, kv_heads in HEADS:
                rows = x[(x["num_heads"] == heads) & (x["num_key_value_heads"] == kv_heads)]
                if len(rows) >= 10:
                    yield gpu, f"{d['framework'].iloc[0]} {d['version'].iloc[0]}", kernel, kv, (heads, kv_heads), rows


def gemm_sets(data_dir: Path):
    """(gpu, framework version, kernel, dtype, table) for every GEMM collection of a GPU in PEAK."""
    for path in sorted(data_dir.glob("*/gemm/*/*/gemm_perf.parquet")):
        gpu = path.relative_to(data_dir).parts[0]
        if gpu not in PEAK:
            continue
        d = pd.read_parquet(path)
        d = d[d["n"].isin(GEMM_N) & d["k"].isin(GEMM_K)]
        for (dtype, kernel), x in d.groupby(["gemm_dtype", "kernel_source"]):
            if dtype in PEAK[gpu]:
                x = x.groupby(["m", "n", "k"], as_index=False)["latency"].median()
                yield gpu, f"{d['framework'].iloc[0]} {d['version'].iloc[0]}", kernel, dtype, x


def gemm_shares(data_dir: Path) -> dict[tuple[str, str], list[tuple[str, str, tuple[float, float, float, float]]]]:
    """Per (GPU, format): every collection's (version, kernel, gemm_fit result), in gemm_sets' order."""
    shares: dict[tuple[str, str], list[tuple[str, str, tuple[float, float, float, float]]]] = {}
    for gpu, version, kernel, dtype, x in gemm_sets(data_dir):
        fit = gemm_fit(x["m"], x["n"], x["k"], x["latency"] / 1e3, dtype, gpu)
        shares.setdefault((gpu, dtype), []).append((version, kernel, fit))
    return shares


def median_share(fits: list[tuple[str, str, tuple[float, float, float, float]]]) -> float:
    """The profile value: the median eta_c over a GPU's and format's collections."""
    return float(np.median([fit[0] for _, _, fit in fits]))


def weight_format_ratios(d: pd.DataFrame) -> dict[str, float]:
    """Median over SMALL_M x SMALL_M_SHAPES of each FP8 format's GEMM time over bf16's (formats measured)."""
    d = d[d["m"].isin(SMALL_M)]
    best = d.groupby(["gemm_dtype", "m", "n", "k"])["latency"].min()
    out = {}
    for fmt in FORMAT_BYTES:
        ratios = [best[(fmt, m, n, k)] / best[("bfloat16", m, n, k)] for m in SMALL_M for n, k in SMALL_M_SHAPES
                  if (fmt, m, n, k) in best.index and ("bfloat16", m, n, k) in best.index]
        if ratios:
            out[fmt] = float(np.median(ratios))
    return out


def bf16_weight_read_share(d: pd.DataFrame, bandwidth: float) -> float | None:
    """Median over SMALL_M x SMALL_M_SHAPES of a bf16 GEMM's weight bytes / time, as a share of `bandwidth`
    (None: no such bf16 rows)."""
    best = d[d["gemm_dtype"] == "bfloat16"].groupby(["m", "n", "k"])["latency"].min()
    shares = [n * k * 2 / (best[(m, n, k)] / 1e3) / bandwidth for m in SMALL_M for n, k in SMALL_M_SHAPES
              if (m, n, k) in best.index]
    return float(np.median(shares)) if shares else None


def weight_format_sets(data_dir: Path, framework: str):
    """(gpu, version, {format: ratio}) for every GEMM table of one framework."""
    for path in sorted(data_dir.glob(f"*/gemm/{framework}/*/gemm_perf.parquet")):
        ratios = weight_format_ratios(pd.read_parquet(path))
        if ratios:
            yield path.relative_to(data_dir).parts[0], path.parent.name, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", type=Path, required=True,
                        help="aiconfigurator's systems/data folder (aic-core/src/aiconfigurator_core/systems/data)")
    data_dir = parser.parse_args().aiconfigurator
    if not any(data_dir.glob("*/*/*/*/*_perf.parquet")):
        parser.error(f"{data_dir}: no aiconfigurator tables (<gpu>/<family>/<framework>/<version>/*_perf.parquet) "
                     "here; pass aiconfigurator's aic-core/src/aiconfigurator_core/systems/data folder")
    print("Decode attention per sequence and KV head (capsim's attention_seq_s), fitted per layer:")
    for gpu, version, kernel, kv, (heads, kv_heads), x in attention_sets(data_dir):
        seq_s, a_s, err, err_class = attention_fit(x["batch_size"], x["step"] + 1, x["latency"] / 1e3, kv_heads,
                                                   KV_BYTES[kv], HBM_BANDWIDTH[gpu])
        print(f"  {gpu:8s} {version:18s} {kernel:24s} KV {kv:8s} {heads}/{kv_heads} heads ({len(x)}): "
              f"{seq_s * 1e6:.4f} us, a {a_s * 1e6:.1f} us, mean |error| {100 * err:.1f}% "
              f"(class value {CLASS_SEQ_S * 1e6:.4f} us: {100 * err_class:.1f}%)")
    print("GEMM shares, capsim's 4-norm form on Llama-70B-sized shapes:")
    shares = gemm_shares(data_dir)
    for (gpu, dtype), fits in shares.items():
        for version, kernel, (c, bw, a_s, err) in fits:
            print(f"  {gpu:8s} {version:18s} {kernel:36s} {dtype:9s}: eta_c {c:.2f}, eta_bw {bw:.2f}, "
                  f"a {a_s * 1e6:.0f} us, mean |error| {100 * err:.1f}%")
    for (gpu, dtype), fits in shares.items():
        c = [fit[0] for _, _, fit in fits]
        print(f"  {gpu:8s} {dtype:9s} median eta_c over {len(c)} collections {median_share(fits):.2f} "
              f"({min(c):.2f}-{max(c):.2f})")
    print("bf16 weight reads at M = 1-16, share of the datasheet bandwidth (capsim's Hopper GEMV: 0.77 x 0.88 = 0.68):")
    for path in sorted(data_dir.glob("*/gemm/*/*/gemm_perf.parquet")):
        gpu = path.relative_to(data_dir).parts[0]
        if gpu in HBM_BANDWIDTH:
            share = bf16_weight_read_share(pd.read_parquet(path), HBM_BANDWIDTH[gpu])
            if share is not None:
                print(f"  {gpu:8s} {path.parent.parent.name:7s} {path.parent.name:12s} {share:.3f}")
    print("Weight formats at M = 1-16 (GEMM time over bf16's; profile multiplier = 0.88 x bytes ratio / time ratio):")
    for framework in ("sglang", "vllm", "trtllm"):
        per_gpu: dict[str, dict[str, list[float]]] = {}
        for gpu, version, ratios in weight_format_sets(data_dir, framework):
            print(f"  {framework:7s} {version:12s} {gpu:22s} " + ", ".join(f"{f} {r:.3f}" for f, r in ratios.items()))
            for fmt, r in ratios.items():
                per_gpu.setdefault(gpu, {}).setdefault(fmt, []).append(r)
        for gpu, fmts in per_gpu.items():
            print(f"  {framework:7s} median over versions {gpu:22s} " + ", ".join(
                f"{f} {float(np.median(r)):.3f} -> multiplier {BF16_BANDWIDTH_MULTIPLIER * FORMAT_BYTES[f] / float(np.median(r)):.2f}"
                for f, r in fmts.items()))


if __name__ == "__main__":
    main()
