"""Shared test helpers, imported as a module (`from helpers import workload`): the round-number GPU
and tiny model as data, request/scheduler/allocator factories with keyword defaults, workload
builders, and the command line run in this process. Fixtures built on them live in conftest.py.

pyproject.toml puts tests/ on the import path (`pythonpath`), so every test folder imports this
the same way, whatever pytest's import mode.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from capsim.core.request import Request

REPO = Path(__file__).resolve().parents[1]  # the repository root: workloads/, validation/, notebooks/

ROUND_GPU = {
    "name": "round-gpu",
    "memory_bytes": 100_000_000_000,           # 100 GB
    "memory_bandwidth_bytes_per_s": 1e12,      # 1 TB/s
    "peak_flops": {"fp16": 100e12, "fp32": 10e12},  # 100 TFLOPS
    "efficiency": {"bandwidth": 1.0, "compute": 1.0},
    "overhead": {"step_s": 0.0, "layer_s": 0.0},
    "interconnect": {"pcie_bytes_per_s": 10e9},
    "sources": {"all": "round numbers for tests"},
}

# 1 layer, hidden 1000: easy to count by hand.
TINY_MODEL = {
    "name": "tiny", "source": "test", "num_layers": 1, "hidden_size": 1000, "num_heads": 10,
    "num_kv_heads": 10, "head_dim": 100, "intermediate_size": 4000, "mlp": "plain", "vocab_size": 1000,
    "tie_embeddings": True, "max_context_tokens": 100_000,
}

_next_id = [0]


def make_request(prompt: int = 10, output: int = 5, *, arrival_s: float = 0.0, computed: int = 0,
                 generated: int = 0, rid: int | None = None, **kw) -> Request:
    """A request in any state: computed/generated tokens can be set directly."""
    if rid is None:
        rid = _next_id[0]
        _next_id[0] += 1
    return Request(rid, arrival_s, prompt, output, computed_tokens=computed, generated_tokens=generated, **kw)


def decoding(prompt: int = 10, output: int = 5, generated: int = 1, **kw) -> Request:
    """A request past its prefill, about to decode its next token."""
    return make_request(prompt, output, computed=prompt + generated - 1, generated=generated, **kw)


def make_scheduler(kind: str = "continuous", *, max_num_seqs: int = 4, max_num_batched_tokens: int = 1000,
                   max_model_len: int = 1000):
    from capsim.sim.schedulers import SCHEDULERS

    return SCHEDULERS[kind](max_num_seqs, max_num_batched_tokens, max_model_len)


def make_paged(num_blocks: int = 100, block_size: int = 4, watermark: int = 0):
    from capsim.sim.kv_cache import PagedAllocator

    return PagedAllocator(num_blocks, block_size, watermark)


def workload(gpu: str, **fields):
    """A validated WorkloadConfig on the tiny model with small defaults; keywords override."""
    from capsim.spec.config import validate
    from capsim.workload.schema import WorkloadConfig

    data = {
        "model": dict(TINY_MODEL), "gpu": gpu, "weights": "fp16", "kv_cache": "fp16",
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "block_size": 4},
        "max_model_len": 4096, "arrivals": {"kind": "poisson", "rate_per_s": 1000.0},
        "prompt_tokens": {"dist": "uniform", "min": 10, "max": 200},
        "output_tokens": {"dist": "uniform", "min": 1, "max": 60}, "requests": 40, "seed": 1,
    }
    data.update(fields)
    data = {k: v for k, v in data.items() if v is not None}  # a None keyword removes the key
    return validate(WorkloadConfig, data, "test workload")


def unit_workload(gpu: str, **fields):
    """A unit-mode workload (every step 10 ms): 10-token prompts and answers on 8 slots, so a
    request holds a slot for 10 steps (0.1 s) and the server completes at most 80 requests/s."""
    data = {"mode": "unit", "unit_step_s": 0.01, "prompt_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 10}, "arrivals": {"kind": "poisson", "rate_per_s": 20.0},
            "requests": 120}
    return workload(gpu, **(data | fields))


def write_workload(path, w) -> str:
    """A WorkloadConfig as a YAML file (for the command line)."""
    import yaml

    path.write_text(yaml.safe_dump(w.model_dump(mode="json", exclude_unset=True, exclude_none=True), sort_keys=False))
    return str(path)


def running_set(*reqs, block_size: int = 4, window: int = 0):
    """A RunningSet holding these requests in this (admission) order."""
    from capsim.sim.running import RunningSet

    rs = RunningSet(block_size, window)
    for r in reqs:
        rs.admit(r)
    return rs


def run_main(*args) -> tuple[int, str, str]:
    """`capsim ARGS` through capsim.cli.app.main in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io
    import sys

    from capsim.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["capsim", *map(str, args)]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def script_module(name: str, folder: str = "scripts"):
    """A module of scripts/ or benchmarks/ (run as `python scripts/NAME.py`, not installed)."""
    spec = importlib.util.spec_from_file_location(name, REPO / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
