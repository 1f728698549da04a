"""scripts/aiconfigurator_prefill_attention.py, which chose the prefill-attention shares and row costs of the
A100, H100, H200, B200 and L40S profiles from NVIDIA's per-operator database (docs/cost-model.md, "Measured
operators"): on a folder laid out like that database, with latencies made from known parameters in capsim's
form, it finds those parameters again, fits each kernel on its own and leaves out a kernel faster than the peak;
and it carries the RTX PRO 6000's attention / GEMM ratio over to the RTX 5090 as hand arithmetic does."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import script_module

SHARE, HALF_KEYS, A_S = 0.6, 250.0, 10e-6


def _table(script, gpu: str, kernel: str, speedup: float = 1.0) -> pd.DataFrame:
    peak = script.PEAK[gpu]
    rows = []
    for batch in (1, 4, 16):
        for isl in (16, 128, 512, 2048, 8192, 16384):
            for heads, kv_heads, dtype in ((32, 8, "bfloat16"), (64, 8, "bfloat16"), (40, 8, "bfloat16"),
                                           (32, 8, "fp8")):
                flops = 4.0 * heads * 128 * isl * (isl + 1) / 2 * batch
                rows_dims = batch * isl * heads * 128
                t_s = A_S + (flops + 4.0 * HALF_KEYS * rows_dims) / (SHARE * peak) / speedup
                if dtype == "fp8" or heads == 40:  # other formats and head shapes must be left out of the fit
                    t_s *= 0.1
                rows.append({"framework": "X", "version": "9.9", "kernel_source": kernel, "batch_size": batch,
                             "isl": isl, "num_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 128,
                             "attn_dtype": dtype, "kv_cache_dtype": dtype, "latency": t_s * 1e3})
    return pd.DataFrame(rows)


def test_the_fit_finds_the_share_and_row_cost_and_leaves_out_a_kernel_faster_than_the_peak(tmp_path):
    pytest.importorskip("pyarrow")
    script = script_module("aiconfigurator_prefill_attention")
    folder = tmp_path / "a100_sxm" / "attention" / "vllm" / "9.9"
    folder.mkdir(parents=True)
    both = pd.concat([_table(script, "a100_sxm", "good"), _table(script, "a100_sxm", "too_fast", speedup=2.5)])
    both.to_parquet(folder / "context_attention_perf.parquet")

    table = script.fit_all(tmp_path).set_index("kernel")
    good, fast = table.loc["good"], table.loc["too_fast"]
    assert good.points == 3 * 5 * 2  # batches x prompts of 128+ tokens x the two Llama head shapes
    assert (good.eta, good.half_keys, good.a_us) == pytest.approx((SHARE, HALF_KEYS, A_S * 1e6), rel=1e-6)
    assert good.mape_pct < 1e-6 and pd.isna(good.left_out)
    assert fast.left_out.startswith("implies 1.")  # 2.5 x 0.6 of the peak at the longest prompts

    values = script.profile_values(table.reset_index())
    assert list(values) == ["a100-80g"] and values["a100-80g"]["kernels"] == 1  # the kernel left out is not counted
    v = values["a100-80g"]
    assert (v["attention_compute"], v["attention_half_keys"]) == pytest.approx((SHARE, HALF_KEYS), rel=1e-6)


def test_the_rtx5090_takes_the_pro_6000s_attention_to_gemm_ratio_times_its_own_measured_gemm(tmp_path):
    pytest.importorskip("pyarrow")
    script = script_module("aiconfigurator_prefill_attention")
    folder = tmp_path / "rtx_pro_6000_server" / "gemm" / "vllm" / "9.9"
    folder.mkdir(parents=True)
    big, rate = 8192, 400e12  # large bf16 GEMMs at 400 TFLOPS; small ones and fp8 ones must not count
    large = {"gemm_dtype": "bfloat16", "m": big, "n": big, "k": big, "latency": 2.0 * big**3 / rate * 1e3}
    slow = 1e3  # ms: a row that counted would pull the median far below 400 TFLOPS
    rows = [large, {**large, "m": 16, "latency": slow}, {**large, "n": 16, "latency": slow},
            {**large, "gemm_dtype": "fp8", "latency": slow}]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    assert script.gemm_rate(tmp_path, "rtx_pro_6000_server") == pytest.approx(rate)

    # attention at 0.5 of the PRO 6000's stated 467.8 TFLOPS = 233.9 TFLOPS, 0.58475 of its 400 TFLOPS GEMMs;
    # on the 5090: 0.58475 x 224.3 / 209.5 = 0.62605 of its datasheet peak
    v = script.rtx5090_values({"attention_compute": 0.5, "attention_half_keys": 224.0}, rate)
    assert v["attention_ratio"] == pytest.approx(0.58475)
    assert v["attention_compute"] == pytest.approx(0.58475 * 224.3 / 209.5)
    assert v["attention_half_keys"] == 224.0


@pytest.mark.parametrize("gpu, share, keys", [("a100-80g", 0.62, 202), ("a100-40g", 0.62, 202),
                                              ("h100-sxm", 0.63, 525), ("h200", 0.61, 493),
                                              ("b200", 0.54, 783), ("l40s", 0.56, 218), ("h100-pcie", 0.50, 525),
                                              ("rtx5090", 0.61, 224)])
def test_the_profiles_carry_the_fitted_values(gpu, share, keys):
    from capsim.spec.catalog import load_hardware

    profile = load_hardware(gpu)
    assert profile.efficiency.attention_compute == pytest.approx(share)
    assert profile.efficiency.attention_half_keys == pytest.approx(keys)
    assert "aiconfigurator_prefill_attention.py" in profile.sources["efficiency"] or gpu == "h100-pcie"
