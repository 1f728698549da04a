"""The fit: exact NNLS, recovery of known parameters from synthetic points, form selection by
cross-validated error, and the held-out error estimates. No torch needed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from capsim.harness.fit import (
    Model,
    fit_family,
    fit_form,
    fit_linear,
    fit_rows,
    kfold_mape,
    logo_mape,
    nnls,
    to_arrays,
)

BW = 4.8e12
PEAK = 989.5e12
GEMM_SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
MS = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def decode_rows(a_s: float, bytes_per_s: float, noise: float = 0.0, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for batch, ctx in itertools.product((1, 4, 16, 64, 256), (256, 1024, 4096, 16384)):
        kv_bytes = batch * ctx * 8 * 128 * 2 * 2
        t = (a_s + kv_bytes / bytes_per_s) * (1 + noise * rng.standard_normal())
        rows.append({"family": "decode", "backend": "triton", "kv_dtype": "bf16", "batch": batch, "context_tokens": ctx,
                     "bytes": kv_bytes, "time_s": t})
    return rows


def gemm_rows(a_s, eta_bw, eta_fl, half, *, form="roofline", noise=0.0, seed=0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for m, (n, k) in itertools.product(MS, GEMM_SHAPES):
        flops, nbytes = 2.0 * m * n * k, (m * k + n * k + m * n) * 2.0
        mem, comp = nbytes / (eta_bw * BW), flops * (m + half) / m / (eta_fl * PEAK)
        t = a_s + (max(mem, comp) if form == "roofline" else mem + comp)
        rows.append({"family": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "flops": flops, "bytes": nbytes,
                     "time_s": t * (1 + noise * rng.standard_normal())})
    return rows


def test_nnls_satisfies_the_kkt_conditions_on_random_problems():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.standard_normal((12, 3))
        b = rng.standard_normal(12)
        x = nnls(a, b)
        grad = a.T @ (a @ x - b)
        assert np.all(x >= 0)
        assert np.all(grad >= -1e-9)  # no descent direction into the feasible set
        assert np.allclose(x * grad, 0, atol=1e-9)  # complementary slackness


def test_nnls_returns_the_plain_solution_when_it_is_non_negative():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    x_true = np.array([0.5, 3.0])
    assert np.allclose(nnls(a, a @ x_true), x_true)


def test_nnls_refuses_too_many_columns():
    with pytest.raises(ValueError):
        nnls(np.ones((10, 7)), np.ones(10))


def test_decode_fit_recovers_intercept_and_bandwidth_exactly():
    pts = to_arrays(decode_rows(a_s=6e-6, bytes_per_s=0.82 * BW))
    model = fit_linear(pts)
    assert model.a == pytest.approx(6e-6, rel=1e-6)
    assert 1 / model.s_b == pytest.approx(0.82 * BW, rel=1e-6)


def test_decode_fit_recovers_parameters_through_noise():
    fitted = fit_family(decode_rows(a_s=6e-6, bytes_per_s=0.82 * BW, noise=0.03, seed=1), "decode.triton",
                        kind="decode", groups=("context_tokens", "batch"))
    assert fitted.model.a == pytest.approx(6e-6, rel=0.15)
    assert 1 / fitted.model.s_b == pytest.approx(0.82 * BW, rel=0.03)
    assert set(fitted.mape_pct) == {"train", "kfold", "logo_context_tokens", "logo_batch"}
    assert all(v < 6.0 for v in fitted.mape_pct.values())


def test_decode_fit_clamps_a_negative_intercept_to_zero():
    rows = decode_rows(a_s=0.0, bytes_per_s=BW)
    for r in rows:
        r["time_s"] -= 1e-7  # would need a negative intercept
    model = fit_linear(to_arrays(rows))
    assert model.a == 0.0 and model.s_b > 0


def test_gemm_roofline_fit_recovers_efficiencies_and_ramp():
    rows = gemm_rows(3e-6, 0.85, 0.7, 64.0)
    model = fit_form(to_arrays(rows), "roofline", (0.0, 16.0, 32.0, 64.0, 128.0))
    assert model.h == 64.0
    assert 1 / (model.s_b * BW) == pytest.approx(0.85, rel=1e-3)
    assert 1 / (model.s_f * PEAK) == pytest.approx(0.7, rel=1e-3)
    assert model.a == pytest.approx(3e-6, rel=1e-2)


def test_family_fit_keeps_the_form_that_generated_the_data():
    roof = fit_family(gemm_rows(3e-6, 0.85, 0.7, 64.0, noise=0.01), "gemm.bf16", kind="gemm", groups=("m",))
    add = fit_family(gemm_rows(3e-6, 0.85, 0.7, 0.0, form="additive", noise=0.01), "gemm.bf16", kind="gemm",
                     groups=("m",))
    assert roof.model.form == "roofline" and add.model.form == "additive"
    assert roof.rejected["additive"] > roof.mape_pct["kfold"]
    assert add.rejected["roofline"] > add.mape_pct["kfold"]
    assert roof.mape_pct["kfold"] < 3.0 and "logo_m" in roof.mape_pct


def test_held_out_errors_are_zero_on_noiseless_data_and_grow_for_a_wrong_model():
    pts = to_arrays(decode_rows(a_s=5e-6, bytes_per_s=BW))
    assert kfold_mape(pts, fit_linear) == pytest.approx(0.0, abs=1e-6)
    assert logo_mape(pts, fit_linear, "batch") == pytest.approx(0.0, abs=1e-6)
    wrong = lambda p: Model("linear", 0.0, float(np.median(p["t"] / p["bytes"])))  # noqa: E731
    assert kfold_mape(pts, wrong) > 10.0


def test_held_out_errors_need_enough_points_or_groups():
    pts = to_arrays(decode_rows(5e-6, BW)[:2])
    assert kfold_mape(pts, fit_linear) is None
    assert logo_mape(pts, fit_linear, "batch") is None


def test_fit_rows_groups_families_and_skips_failed_rows():
    rows = decode_rows(5e-6, BW) + gemm_rows(3e-6, 0.8, 0.7, 32.0)
    rows += [{"family": "decode", "backend": "flex", "kv_dtype": "bf16", "batch": 1, "context_tokens": 8,
              "error": "OOM"}]
    rows += [{"family": "micro", "kind": "launch", "time_s": 4e-6}]
    fp8 = [{**r, "kv_dtype": "fp8", "bytes": r["bytes"] / 2} for r in decode_rows(5e-6, BW)]
    fits = fit_rows(rows + fp8)
    assert set(fits) == {"decode.triton.bf16", "decode.triton.fp8", "gemm.bf16"}
    assert fits["decode.triton.bf16"].n_points == 20


def prefill_rows(a_s: float, eta: float, half_keys: float, noise: float = 0.0, seed: int = 0) -> list[dict]:
    """Causal prefill rows as the harness records them (FLOPs count n(n+1)/2 pairs per head),
    timed by t = a + FLOPs / (eta x PEAK) + each query row's cost of `half_keys` more keys."""
    rng = np.random.default_rng(seed)
    rows = []
    for n, batch, hq in itertools.product((256, 512, 1024, 2048, 4096, 8192, 16384), (1, 4), (32, 64)):
        pairs, d = n * (n + 1) / 2, 128
        flops = 4.0 * batch * hq * d * pairs
        t = a_s + (flops + 4.0 * half_keys * batch * n * hq * d) / (eta * PEAK)
        rows.append({"family": "prefill", "batch": batch, "context_tokens": n, "q_heads": hq, "kv_heads": 8,
                     "head_dim": d, "flops": flops, "bytes": batch * n * d * (2 * hq + 16) * 2.0,
                     "time_s": t * (1 + noise * rng.standard_normal())})
    return rows


def test_prefill_fit_recovers_the_attention_share_and_the_row_cost_in_keys():
    # hand check of one row: 1 x 32 heads x 256 tokens, 220 keys per row on top of 128.5 mean keys
    row = prefill_rows(9e-6, 0.65, 220.0)[0]
    assert row["time_s"] == pytest.approx(9e-6 + 4 * 128 * 32 * 256 * (128.5 + 220) / (0.65 * PEAK))
    fit = fit_family(prefill_rows(9e-6, 0.65, 220.0), "prefill", kind="prefill", groups=("context_tokens",))
    assert fit.model.form == "rows" and fit.rejected.keys() == {"roofline"}
    assert 1 / (fit.model.s_f * PEAK) == pytest.approx(0.65, rel=1e-6)
    assert fit.model.half_keys() == pytest.approx(220.0, rel=1e-6) and fit.model.a == pytest.approx(9e-6, rel=1e-6)
    noisy = fit_family(prefill_rows(9e-6, 0.65, 220.0, noise=0.03), "prefill", kind="prefill", groups=())
    assert noisy.model.half_keys() == pytest.approx(220.0, rel=0.15) and noisy.mape_pct["kfold"] < 5
