"""The measurement grid: which points to time, in which order, and the deadline-aware runner.

Points are plain dicts (one JSONL row each once measured). The order is coarse to fine within each
kernel family (the ends and middle of every axis first) and the families are interleaved, so a run
cut short by a deadline still holds a spread of points that every fit can use.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# Layer shapes of Llama-3-8B (hidden 4096, 32 query / 8 KV heads of 128, MLP 14336; HF config.json):
# (name, N, K) of y[M, N] = x[M, K] @ W[K, N]; gate and up are fused as vLLM does.
GEMM_SHAPES_8B = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336))
# Scaled-down shapes for CPU runs (one thread), same aspect ratios.
GEMM_SHAPES_CPU = (("qkv", 768, 512), ("o", 512, 512), ("gate_up", 1792, 512), ("down", 512, 896))
GEMM_SHAPES_TINY = (("o", 64, 64), ("down", 64, 128))


@dataclass(frozen=True)
class GridSpec:
    """The axes of one calibration run. Head configs are (q_heads, kv_heads, head_dim)."""

    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    block_sizes: tuple[int, ...]
    head_configs: tuple[tuple[int, int, int], ...]
    kv_dtypes: tuple[str, ...]
    compute_dtype: str
    prefill_lengths: tuple[int, ...]
    prefill_batches: tuple[int, ...]
    gemm_ms: tuple[int, ...]
    gemm_shapes: tuple[tuple[str, int, int], ...]
    gemm_dtypes: tuple[str, ...]
    warmup: int = 3
    reps: int = 10
    cross_backends: tuple[str, ...] = ()  # other decode backends timed on a few points, for comparison
    cross_points: int = 3
    micro_bytes: int = 1 << 30
    micro_matmul_n: int = 8192
    notes: list[str] = field(default_factory=list)


def grid_for(device: str, *, quick: bool = False, tiny: bool = False) -> GridSpec:
    """The built-in grids: full GPU, quick GPU, CPU (always small), and tiny (seconds, for tests)."""
    if tiny:
        return GridSpec((1, 2), (32, 80), (16,), ((4, 2, 16),), ("fp32",) if device == "cpu" else ("bf16",),
                        "fp32" if device == "cpu" else "bf16", (16, 48), (1,), (1, 8, 32), GEMM_SHAPES_TINY,
                        ("fp32",) if device == "cpu" else ("bf16",), warmup=1, reps=2,
                        micro_bytes=1 << 20, micro_matmul_n=64)
    if device == "cpu":
        steps = (1, 4, 16) if quick else (1, 2, 4, 8, 16)
        return GridSpec(steps, (128, 512, 2048) if quick else (64, 256, 1024, 2048, 4096), (16,) if quick else (16, 32),
                        ((8, 2, 64),), ("fp32",), "fp32", (64, 256, 512), (1, 2),
                        (1, 16, 128, 512) if quick else (1, 8, 32, 128, 512, 1024),
                        GEMM_SHAPES_CPU, ("fp32",), warmup=1, reps=3 if quick else 5,
                        micro_bytes=32 << 20, micro_matmul_n=512)
    gemm_ms = (1, 16, 128, 1024, 8192) if quick else (1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    return GridSpec(
        batches=(1, 16, 128) if quick else (1, 4, 16, 32, 64, 128, 256),
        contexts=(512, 4096, 32768) if quick else (256, 1024, 2048, 4096, 8192, 16384, 32768),
        block_sizes=(16,) if quick else (16, 32),
        head_configs=((32, 8, 128),) if quick else ((32, 8, 128), (64, 8, 128), (32, 32, 128)),
        kv_dtypes=("bf16",) if quick else ("bf16", "fp8"),
        compute_dtype="bf16",
        prefill_lengths=(512, 2048, 8192) if quick else (256, 512, 1024, 2048, 4096, 8192, 16384),
        prefill_batches=(1,) if quick else (1, 4),
        gemm_ms=gemm_ms, gemm_shapes=GEMM_SHAPES_8B,
        gemm_dtypes=("bf16",) if quick else ("bf16", "fp8"),
        cross_backends=("sdpa", "flex", "flash"),
    )


def coarse_to_fine(n: int) -> list[int]:
    """Rank of each index of an axis of length n: both ends first, then midpoints, recursively."""
    if n <= 0:
        return []
    order = [0] + ([n - 1] if n > 1 else [])
    spans = [(0, n - 1)]
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                order.append(mid)
                nxt += [(lo, mid), (mid, hi)]
        spans = nxt
    rank = [0] * n
    for position, index in enumerate(order):
        rank[index] = position
    return rank


def ordered_product(axes: dict[str, tuple]) -> list[dict]:
    """Every combination of the axes, most useful first: sorted by (worst axis rank, sum of ranks)."""
    names = list(axes)
    ranks = {k: coarse_to_fine(len(v)) for k, v in axes.items()}
    combos = []
    for idx in itertools.product(*(range(len(axes[k])) for k in names)):
        r = [ranks[k][i] for k, i in zip(names, idx)]
        combos.append(((max(r, default=0), sum(r), idx), {k: axes[k][i] for k, i in zip(names, idx)}))
    combos.sort(key=lambda c: c[0])
    return [point for _, point in combos]


def interleave(*families: list[dict]) -> list[dict]:
    """Round-robin over families so that every family has points early in the run."""
    out = []
    for group in itertools.zip_longest(*families):
        out.extend(p for p in group if p is not None)
    return out


@dataclass
class RunLog:
    """What a grid run did: rows measured (and written), points skipped at the deadline."""

    rows: list[dict]
    planned: int
    stopped_at_deadline: bool


def run_points(points: Iterable[dict], measure: Callable[[dict], dict], out_path: Path, *,
               deadline_s: float | None = None, progress: Callable[[int, int, str], None] | None = None) -> RunLog:
    """Measure points in order, appending each row to `out_path` (JSONL) as soon as it exists.

    `deadline_s` counts from this call: the run stops before the next point once it has passed,
    and the rows written so far are the result (each flushed, so even a killed run leaves them).
    """
    points = list(points)
    start = time.monotonic()
    rows: list[dict] = []
    stopped = False
    with open(out_path, "a") as fh:
        for i, point in enumerate(points):
            if deadline_s is not None and time.monotonic() - start > deadline_s:
                stopped = True
                break
            row = measure(point)
            fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.flush()
            rows.append(row)
            if progress is not None:
                progress(i + 1, len(points), point_label(point))
    return RunLog(rows, len(points), stopped)


def point_label(point: dict) -> str:
    """Short human label for progress bars: family and its main coordinates."""
    fam = point["family"]
    if fam == "decode":
        return f"decode {point['backend']} b={point['batch']} ctx={point['context_tokens']} {point['kv_dtype']}"
    if fam == "prefill":
        return f"prefill b={point['batch']} len={point['context_tokens']}"
    if fam == "gemm":
        return f"gemm {point['shape']} M={point['m']} {point['dtype']}"
    if fam in ("forward", "attention"):  # whole steps (capsim.harness.forward_run)
        return f"{fam} {point.get('backend', '')} {point['kind']} seqs={point['batch']} tokens={point['num_tokens']}"
    return f"micro {point['kind']}"


def decode_bytes(point: dict) -> int:
    """KV bytes one decode call reads: batch x context x kv_heads x head_dim x (K and V) x bytes."""
    per_value = 1 if point["kv_dtype"] == "fp8" else (4 if point["kv_dtype"] == "fp32" else 2)
    return point["batch"] * point["context_tokens"] * point["kv_heads"] * point["head_dim"] * 2 * per_value


def plan_points(spec: GridSpec, backend: str, *, max_kv_bytes: int) -> list[dict]:
    """All points of a run, ordered: micro-benchmarks, then the families interleaved coarse to fine.

    Decode points whose KV cache would exceed `max_kv_bytes` are left out.
    """
    micro = [{"family": "micro", "kind": k} for k in ("launch", "copy", "matmul")]
    decode = []
    for p in ordered_product({"batch": spec.batches, "context_tokens": spec.contexts, "heads": spec.head_configs,
                              "kv_dtype": spec.kv_dtypes, "block_size": spec.block_sizes}):
        q, kv, dim = p.pop("heads")
        point = {"family": "decode", "backend": backend, "q_heads": q, "kv_heads": kv, "head_dim": dim,
                 "q_dtype": spec.compute_dtype, **p}
        if decode_bytes(point) <= max_kv_bytes:
            decode.append(point)
    # Cross-check backends go a quarter of the way in: late enough not to delay the main fit, early
    # enough that a deadline rarely drops them.
    at = len(decode) // 4
    decode = decode[:at] + _cross_points(decode, spec) + decode[at:]
    prefill = [{"family": "prefill", "q_heads": h[0], "kv_heads": h[1], "head_dim": h[2], "dtype": spec.compute_dtype,
                "batch": p["batch"], "context_tokens": p["context_tokens"]}
               for p in ordered_product({"batch": spec.prefill_batches, "context_tokens": spec.prefill_lengths,
                                         "heads": spec.head_configs[:2]})
               for h in [p["heads"]]]
    gemm = [{"family": "gemm", "shape": s[0], "n": s[1], "k": s[2], "m": p["m"], "dtype": p["dtype"]}
            for p in ordered_product({"m": spec.gemm_ms, "shape": spec.gemm_shapes, "dtype": spec.gemm_dtypes})
            for s in [p["shape"]]]
    return micro + interleave(decode, gemm, prefill)


def _cross_points(decode: list[dict], spec: GridSpec) -> list[dict]:
    """A few small decode points for each cross-check backend (fp16/bf16 KV only)."""
    small = [p for p in decode if p["kv_dtype"] == spec.compute_dtype and p["batch"] * p["context_tokens"] <= 1 << 19]
    return [{**p, "backend": b} for b in spec.cross_backends for p in small[: spec.cross_points]]
