"""Timing: warm-up, CUDA events on GPU (perf_counter on CPU, one thread), a cold cache between
repetitions, the median of repetitions; and the micro-benchmarks (copy bandwidth, matmul peak,
launch overhead) that anchor a profile when no datasheet is known.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from capsim.harness.deps import require_torch

# Larger than the 60 MB L2 of an H100/H200 (and than any CPU's last-level cache we expect).
FLUSH_BYTES_GPU = 256 * 2**20
FLUSH_BYTES_CPU = 64 * 2**20
# GPU cycles the stream spins before each timed call (about 0.5 ms at the H200's 1.98 GHz), so the
# host has queued the whole call (allocations, Triton's Python launcher) before the start event
# fires: the events then time the GPU's work, not the host's launch latency. A serving engine
# replays its decode step as a CUDA graph, so host launch cost is not part of the step it prices.
HIDE_LAUNCH_CYCLES = 1_000_000


@dataclass(frozen=True)
class Timing:
    """Median and spread of `reps` timed calls, in seconds."""

    median_s: float
    min_s: float
    max_s: float
    reps: int
    samples_s: tuple[float, ...] = ()  # every repetition's time, in order


@contextmanager
def one_cpu_thread():
    """CPU timings run on one thread: stable, and comparable between machines of any core count."""
    torch = require_torch()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CacheFlusher:
    """Overwrites a buffer larger than the last-level cache, so the next call reads from memory."""

    def __init__(self, device: str):
        torch = require_torch()
        size = FLUSH_BYTES_GPU if device == "cuda" else FLUSH_BYTES_CPU
        self._buf = torch.empty(size // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self._buf.fill_(1.0)


def time_calls(fn: Callable[[int], object], device: str, *, warmup: int = 3, reps: int = 10,
               flush: Callable[[], None] | None = None, hide_launch: bool = True) -> Timing:
    """Time `fn(rep)` `reps` times after `warmup` untimed calls; `flush` runs untimed before each.

    On CUDA with `hide_launch`, the stream first spins `HIDE_LAUNCH_CYCLES` (untimed), so the
    host's launch latency falls outside the events; pass False to time the host's launches.

    `fn` receives the repetition index so callers can rotate inputs (block tables) for a cold cache.
    """
    torch = require_torch()
    for i in range(warmup):
        fn(-1 - i)
    samples = []
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    for i in range(reps):
        if flush is not None:
            flush()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if hide_launch:
                torch.cuda._sleep(HIDE_LAUNCH_CYCLES)
            start.record()
            fn(i)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t0)
    return Timing(statistics.median(samples), min(samples), max(samples), reps, tuple(samples))


def copy_bandwidth(device: str, nbytes: int, reps: int = 10) -> tuple[float, Timing]:
    """Device-to-device copy; returns (bytes moved per second counting read + write, timing)."""
    torch = require_torch()
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    timing = time_calls(lambda _: dst.copy_(src), device, reps=reps)
    return 2 * nbytes / timing.median_s, timing


def matmul_peak(device: str, dtype: str, n: int, reps: int = 10) -> tuple[float, Timing]:
    """Square n x n x n matmul on random data; returns (FLOP/s, timing)."""
    torch = require_torch()
    from capsim.harness.kernels.torch_ref import torch_dtype

    a = torch.randn((n, n), device=device).to(torch_dtype(dtype))
    b = torch.randn((n, n), device=device).to(torch_dtype(dtype))
    timing = time_calls(lambda _: a @ b, device, reps=reps)
    return 2.0 * n**3 / timing.median_s, timing


def launch_overhead(device: str, calls: int = 200) -> float:
    """Seconds per call of a tiny kernel launched back to back (CPU: per tiny op)."""
    torch = require_torch()
    x = torch.zeros(16, device=device)
    timing = time_calls(lambda _: [x.add_(1.0) for _ in range(calls)], device, warmup=2, reps=5,
                        hide_launch=False)
    return timing.median_s / calls
