"""Measure one grid point: build its inputs, check the kernel once against a float64 reference, time it.

`Measurer.measure(point) -> row` never raises for a kernel that fails on one point (out of memory,
an unsupported shape): the row carries `error` and no time, and the fit leaves it out.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field

from capsim.errors import CapsimError
from capsim.harness import timing
from capsim.harness.deps import require_torch
from capsim.harness.grid import GridSpec, decode_bytes
from capsim.harness.kernels.torch_ref import make_paged_inputs, random_block_tables, reference_decode, torch_dtype

BACKENDS = ("triton", "flex", "sdpa", "flash")
# Tolerances against float64, by the dtype of the query and output.
_TOL = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 4e-2}
_ROTATIONS = 4  # distinct block tables cycled through the repetitions (cold cache)


def decode_backend(name: str):
    """The paged-decode function of a backend name."""
    if name == "triton":
        from capsim.harness.kernels.triton import paged_decode_triton

        return paged_decode_triton
    if name == "sdpa":
        from capsim.harness.kernels.torch_ref import paged_decode_sdpa

        return paged_decode_sdpa
    if name == "flex":
        from capsim.harness.kernels.flex import paged_decode_flex

        return paged_decode_flex
    if name == "flash":
        from capsim.harness.kernels.flex import paged_decode_flash

        return paged_decode_flash
    raise CapsimError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}.")


def check_decode(backend: str, point: dict, device: str) -> float:
    """Run the backend on a small ragged batch of the point's config; return max abs error vs float64.

    Raises CapsimError when the error is above the dtype's tolerance: a wrong kernel is never timed.
    """
    block = point["block_size"]
    lens = [1, block + 3, 3 * block - 1, 5 * block]
    inp = make_paged_inputs(lens, q_heads=point["q_heads"], kv_heads=point["kv_heads"], head_dim=point["head_dim"],
                            block_size=block, q_dtype=point["q_dtype"], kv_dtype=point["kv_dtype"], device=device,
                            seed=7)
    got = decode_backend(backend)(*inp.backend_args(), **inp.backend_kwargs())
    ref = reference_decode(*inp.backend_args(), **inp.backend_kwargs())
    err = float((got.double().cpu() - ref).abs().max())
    if not err <= _TOL[point["q_dtype"]]:
        raise CapsimError(f"backend {backend!r} is wrong for {point}: max abs error {err:.3g} vs float64.")
    return err


@dataclass
class Measurer:
    """Times grid points on one device; remembers which kernel variants passed their check."""

    device: str
    spec: GridSpec
    checked: dict = field(default_factory=dict)
    _flusher: object = None

    def measure(self, point: dict) -> dict:
        torch = require_torch()
        try:
            with timing.one_cpu_thread() if self.device == "cpu" else nullcontext():
                result = getattr(self, "_" + point["family"])(point)
            return {**point, **result, "device": self.device}
        except Exception as exc:  # noqa: BLE001  one failing point (OOM, a compiler error) must not end the run
            if self.device == "cuda":
                torch.cuda.empty_cache()
            return {**point, "device": self.device, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}

    def _time(self, fn, *, flush: bool = True) -> dict:
        if flush and self._flusher is None:
            self._flusher = timing.CacheFlusher(self.device)
        t = timing.time_calls(fn, self.device, warmup=self.spec.warmup, reps=self.spec.reps,
                              flush=self._flusher if flush else None)
        return {"time_s": t.median_s, "min_s": t.min_s, "max_s": t.max_s, "reps": t.reps}

    def _decode(self, point: dict) -> dict:
        torch = require_torch()
        key = tuple(point[k] for k in ("backend", "q_heads", "kv_heads", "head_dim", "block_size", "kv_dtype"))
        if key not in self.checked:
            self.checked[key] = check_decode(point["backend"], point, self.device)
        batch, ctx, block = point["batch"], point["context_tokens"], point["block_size"]
        block_bytes = decode_bytes({**point, "batch": 1, "context_tokens": block})
        need = batch * math.ceil(ctx / block)
        pool = max(need + 1, math.ceil(timing.FLUSH_BYTES_GPU / block_bytes) if self.device == "cuda" else need + 1)
        inp = make_paged_inputs([ctx] * batch, q_heads=point["q_heads"], kv_heads=point["kv_heads"],
                                head_dim=point["head_dim"], block_size=block, q_dtype=point["q_dtype"],
                                kv_dtype=point["kv_dtype"], device=self.device, seed=1, num_blocks=pool)
        gen = torch.Generator().manual_seed(2)
        tables = [random_block_tables([ctx] * batch, block, pool, gen).to(self.device) for _ in range(_ROTATIONS)]
        fn = decode_backend(point["backend"])
        kwargs = inp.backend_kwargs()
        small = decode_bytes(point) < timing.FLUSH_BYTES_GPU
        if point["backend"] == "flex":
            # One table only: each new mask_mod closure would make the compiled kernel recompile.
            from capsim.harness.kernels.flex import flex_block_mask

            mask = flex_block_mask(tables[0], inp.context_lens, pool, block, ctx)
            run = lambda i: fn(inp.query, inp.k_cache, inp.v_cache, tables[0], inp.context_lens, block_mask=mask,
                               **kwargs)
            small = True  # no rotation, so flush instead
        else:
            run = lambda i: fn(inp.query, inp.k_cache, inp.v_cache, tables[i % _ROTATIONS], inp.context_lens, **kwargs)
        return {**self._time(run, flush=small), "bytes": decode_bytes(point), "check_abs_err": self.checked[key],
                "flops": 4.0 * batch * ctx * point["q_heads"] * point["head_dim"]}

    def _prefill(self, point: dict) -> dict:
        torch = require_torch()
        import torch.nn.functional as F

        b, n, d = point["batch"], point["context_tokens"], point["head_dim"]
        hq, hkv = point["q_heads"], point["kv_heads"]
        dt = torch_dtype(point["dtype"])
        q = torch.randn((b, hq, n, d), device=self.device, dtype=dt)
        k = torch.randn((b, hkv, n, d), device=self.device, dtype=dt)
        v = torch.randn((b, hkv, n, d), device=self.device, dtype=dt)
        key = ("prefill", hq, hkv, d, point["dtype"])
        if key not in self.checked:
            self.checked[key] = _check_prefill(q[:1, :, :64], k[:1, :, :64], v[:1, :, :64], point["dtype"])
        run = lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        pairs = n * (n + 1) / 2
        return {**self._time(run), "flops": 4.0 * b * hq * d * pairs,
                "bytes": b * n * d * (2 * hq + 2 * hkv) * dt.itemsize, "check_abs_err": self.checked[key]}

    def _gemm(self, point: dict) -> dict:
        from capsim.harness.gemm import make_gemm

        run, err, m = make_gemm(point["m"], point["n"], point["k"], point["dtype"], self.device)
        per_value = 1 if point["dtype"] == "fp8" else torch_dtype(point["dtype"]).itemsize
        n, k = point["n"], point["k"]
        # m_run: rows actually multiplied (fp8 pads M up to 16); flops and bytes count those.
        return {**self._time(run), "m_run": m, "flops": 2.0 * m * n * k,
                "bytes": (m * k + n * k) * per_value + m * n * 2, "check_abs_err": err}

    def _micro(self, point: dict) -> dict:
        kind = point["kind"]
        if kind == "launch":
            return {"time_s": timing.launch_overhead(self.device)}
        if kind == "copy":
            bw, t = timing.copy_bandwidth(self.device, self.spec.micro_bytes, reps=self.spec.reps)
            return {"time_s": t.median_s, "bytes": 2 * self.spec.micro_bytes, "bytes_per_s": bw}
        n = self.spec.micro_matmul_n
        flops, t = timing.matmul_peak(self.device, self.spec.compute_dtype, n, reps=self.spec.reps)
        return {"time_s": t.median_s, "flops": 2.0 * n**3, "flops_per_s": flops, "dtype": self.spec.compute_dtype}


def _check_prefill(q, k, v, dtype: str) -> float:
    """Causal SDPA on a slice vs a float64 dense computation."""
    torch = require_torch()
    import torch.nn.functional as F

    got = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).double().cpu()
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.double().cpu() for t in (q, k, v))
    k64, v64 = k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1)
    n = q.shape[2]
    scores = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    err = float((got - scores.softmax(-1) @ v64).abs().max())
    if not err <= _TOL[dtype]:
        raise CapsimError(f"prefill SDPA is wrong for {dtype}: max abs error {err:.3g} vs float64.")
    return err
