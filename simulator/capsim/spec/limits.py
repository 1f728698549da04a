"""The ranges a number in an input file may take, and what a run may ask of memory.

Each bound is far beyond any real set-up and far inside what float64 times and int64 token
counts carry exactly: a value outside it is a typo or an attack, and a run accepting it would
report meaningless figures (a clock at 1e308 s cannot tell two steps apart, so every latency
came out 0.0; a bandwidth of 1e-300 B/s made every step last forever) or overflow.
"""

from __future__ import annotations

import os

# A request longer than any model's context (the largest known is a few million tokens); also
# the cap a long-tailed length distribution is clipped to.
MAX_TOKENS = 1_000_000_000
# Simulated seconds (about three years): at 1e8 s a float64 clock still resolves 15 ns.
MAX_TIME_S = 1e8
# Request rates: one a week to a billion a second.
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e9
# Byte rates (memory, PCIe, GPU links) and FLOP rates of a device: from a slow CPU to far past
# any GPU; efficiencies (achieved / peak) from 0.1% up.
MIN_BYTES_PER_S, MAX_BYTES_PER_S = 1e6, 1e17
MIN_FLOPS, MAX_FLOPS = 1e6, 1e20
MIN_EFFICIENCY = 1e-3
MAX_MEMORY_BYTES = 2**50  # a PiB per device
MAX_FIXED_TIME_S = 10.0  # a per-step, per-layer or per-kernel fixed time
# Model shapes: layers, and any width (hidden, heads, head size, vocabulary, experts).
MAX_LAYERS, MAX_WIDTH = 10_000, 100_000_000
MAX_BLOCK_SIZE = 1024  # tokens per KV block (vLLM: 16 by default, at most 128 on CUDA)
MAX_WEIGHT = 1e12  # class weights and histogram weights (relative: only their ratios count)

# Memory a simulated request costs while a run holds it (its arrival, lengths and record, its
# share of the step log), rounded up from bench-1m's whole-run peak over its request count (a
# million requests peak at about 0.8 GB: about 830 bytes each, the interpreter included).
BYTES_PER_REQUEST = 900
# Refuse a run that would need more than this share of the memory available to it.
MEMORY_SHARE = 0.8
# Memory a block held in a simulated prefix cache costs (its key, its entries in the cache's
# indexes): warming 50 million blocks (workload prompt_set_cached) peaked at 15.4 GB, about 310 each.
BYTES_PER_CACHED_BLOCK = 320
# Most cached blocks a run starts with (prompt_set_cached, over all replicas): entering them costs
# about 2.7 us each (50 million took 136 s), so 10 million is about half a minute of set-up.
MAX_CACHED_BLOCKS_AT_START = 10_000_000


def available_memory_bytes() -> int | None:
    """Memory this process can still use (Linux: MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(requests: float, what: str) -> str | None:
    """Why `requests` requests cannot be simulated in this machine's memory, or None if they can."""
    need = requests * BYTES_PER_REQUEST
    have = available_memory_bytes()
    if have is None or need <= MEMORY_SHARE * have:
        return None
    return (f"{what} means about {requests:,.0f} requests, which need about {_gib(need)} of memory "
            f"({BYTES_PER_REQUEST} bytes each) while {_gib(have)} is available; simulate fewer requests "
            "(a few thousand give stable percentiles)")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.1f} TiB"
