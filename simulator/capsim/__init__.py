"""capsim: capacity simulator for LLM serving (DESIGN §1: the public API).

    import capsim
    result = capsim.simulate("workloads/chat.yaml", gpu="rtx4090")        # one run
    capsim.compare("workloads/chat.yaml", gpu=["rtx4090", "a100-80g"], kv_cache=["fp16", "q8_0"])
    capsim.sweep("workloads/chat.yaml", rates=capsim.parse_range("1:10:1", "--rate"))
    capsim.capacity("workloads/chat.yaml", capsim.parse_objectives(["ttft_p99_ms=2000"]), gpu="rtx4090")

Names are imported on first use (module __getattr__), so `import capsim` stays cheap: no pandas,
SimPy or matplotlib until something needs them. The functions `simulate`, `sweep` and `capacity`
live in the modules `capsim.simulation`, `capsim.sweeps` and `capsim.capacity_search`.
`pip install .` compiles the engine with mypyc; `capsim.compiled` says whether it did.
"""

from __future__ import annotations

import importlib

from capsim.compiled import prefer_source_if_asked

prefer_source_if_asked()  # CAPSIM_PURE_PYTHON=1: run the engine's .py files even where it is compiled

_EXPORTS = {
    # one run
    "simulate": "capsim.simulation", "load_workload": "capsim.simulation", "apply_overrides": "capsim.simulation",
    "RunResult": "capsim.simulation",
    # catalogues
    "load_hardware": "capsim.catalog", "load_model": "capsim.catalog", "hardware_catalog": "capsim.catalog",
    "model_catalog": "capsim.catalog",
    # the documents' tables
    "TableSetup": "capsim.tables", "DocTable": "capsim.tables", "all_tables": "capsim.tables",
    "batch_table": "capsim.tables", "kv_capacity_table": "capsim.tables", "kv_per_token_table": "capsim.tables",
    "paged_waste_table": "capsim.tables", "utilisation_table": "capsim.tables", "batch_curves": "capsim.curves",
    # capacity planning
    "compare": "capsim.sweeps", "sweep": "capsim.sweeps", "parse_range": "capsim.sweeps", "CompareResult": "capsim.sweeps",
    "SweepResult": "capsim.sweeps", "capacity": "capsim.capacity_search", "CapacityResult": "capsim.capacity_search",
    "run_seeds": "capsim.confidence", "SeedsResult": "capsim.confidence", "Objectives": "capsim.slo",
    "parse_objectives": "capsim.slo", "usd_per_million_tokens": "capsim.costs", "Runner": "capsim.parallel",
    # plots
    "plot_run": "capsim.report", "plot_run_dir": "capsim.report", "plot_saved": "capsim.report_planning",
    "CapsimError": "capsim.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'capsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
