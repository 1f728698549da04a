"""GEMMs at a model layer's shapes: y[M, N] = x[M, K] @ W[N, K]^T (nn.Linear layout), in fp32, fp16,
bf16 and fp8 (torch._scaled_mm with per-tensor scales, bf16 output, where the GPU supports it)."""

from __future__ import annotations

from collections.abc import Callable

from capsim.errors import CapsimError
from capsim.harness.deps import require_torch
from capsim.harness.kernels.torch_ref import torch_dtype

_REL_TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 3e-2, "fp8": 3e-2}
_FP8_MIN_M = 16  # _scaled_mm needs every dimension a multiple of 16


def _check(got, x, w, dtype: str, x_scale: float = 1.0, w_scale: float = 1.0) -> float:
    """Relative max error of the first rows/columns against float64 (the whole product is too big)."""
    rows, cols = min(16, x.shape[0]), min(256, w.shape[0])
    ref = (x[:rows].double().cpu() * x_scale) @ (w[:cols].double().cpu() * w_scale).T
    err = float((got[:rows, :cols].double().cpu() - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
    if not err <= _REL_TOL[dtype]:
        raise CapsimError(f"GEMM {dtype} is wrong: relative error {err:.3g} vs float64.")
    return err


def make_gemm(m: int, n: int, k: int, dtype: str, device: str) -> tuple[Callable[[int], object], float, int]:
    """A timed-call closure for one GEMM, its relative error (checked before timing), and the M it
    really runs (fp8 pads M up to 16)."""
    torch = require_torch()
    gen = torch.Generator(device=device).manual_seed(0)
    if dtype == "fp8":
        m = max(m, _FP8_MIN_M)
        return (*_make_fp8(m, n, k, device, gen), m)
    dt = torch_dtype(dtype)
    x = torch.randn((m, k), device=device, generator=gen).to(dt)
    w = torch.randn((n, k), device=device, generator=gen).to(dt)
    err = _check(x @ w.T, x, w, dtype)
    return (lambda _: x @ w.T), err, m


def _make_fp8(m: int, n: int, k: int, device: str, gen):
    torch = require_torch()
    if not hasattr(torch, "_scaled_mm"):
        raise CapsimError("fp8 GEMM: this torch has no torch._scaled_mm.")
    x = torch.randn((m, k), device=device, generator=gen)
    w = torch.randn((n, k), device=device, generator=gen)
    sx, sw = float(x.abs().max()) / 448.0, float(w.abs().max()) / 448.0
    x8 = (x / sx).to(torch.float8_e4m3fn)
    w8 = (w / sw).to(torch.float8_e4m3fn)
    scale_x = torch.tensor(sx, device=device)
    scale_w = torch.tensor(sw, device=device)

    def run(_):
        return torch._scaled_mm(x8, w8.T, scale_a=scale_x, scale_b=scale_w, out_dtype=torch.bfloat16)

    err = _check(run(0), x8.float(), w8.float(), "fp8", sx, sw)
    return run, err
