"""capsim: capacity simulator for LLM serving (DESIGN §1: the public API).

    import capsim
    result = capsim.simulate("workloads/chat.yaml", gpu="rtx4090")        # one run
    capsim.compare("workloads/chat.yaml", gpu=["rtx4090", "a100-80g"], kv_cache=["fp16", "q8_0"])
    capsim.sweep("workloads/chat.yaml", rates=capsim.parse_range("1:10:1", "--rate"))
    capsim.capacity("workloads/chat.yaml", capsim.parse_objectives(["ttft_p99_ms=2000"]), gpu="rtx4090")

Names are imported on first use (module __getattr__), so `import capsim` stays cheap: no pandas,
SimPy or matplotlib until something needs them. The functions `simulate`, `sweep` and `capacity`
live in the modules `capsim.api`, `capsim.planning.sweep` and `capsim.planning.capacity`.
`pip install .` compiles the engine with mypyc; `capsim.compiled` says whether it did.
"""

from __future__ import annotations

import importlib

from capsim.compiled import prefer_source_if_asked

prefer_source_if_asked()  # CAPSIM_PURE_PYTHON=1: run the engine's .py files even where it is compiled

_EXPORTS = {
    # one run
    "simulate": "capsim.api", "load_workload": "capsim.api", "apply_overrides": "capsim.api",
    "RunResult": "capsim.api",
    # catalogues
    "load_hardware": "capsim.spec.catalog", "load_model": "capsim.spec.catalog", "hardware_catalog": "capsim.spec.catalog",
    "model_catalog": "capsim.spec.catalog",
    # the documents' tables
    "TableSetup": "capsim.reference.tables", "DocTable": "capsim.reference.tables", "all_tables": "capsim.reference.tables",
    "batch_table": "capsim.reference.tables", "kv_capacity_table": "capsim.reference.tables", "kv_per_token_table": "capsim.reference.tables",
    "paged_waste_table": "capsim.reference.tables", "utilisation_table": "capsim.reference.tables", "batch_curves": "capsim.reference.curves",
    # capacity planning
    "compare": "capsim.planning.sweep", "sweep": "capsim.planning.sweep", "parse_range": "capsim.planning.sweep", "CompareResult": "capsim.planning.sweep",
    "SweepResult": "capsim.planning.sweep", "capacity": "capsim.planning.capacity", "CapacityResult": "capsim.planning.capacity",
    "run_seeds": "capsim.planning.seeds", "SeedsResult": "capsim.planning.seeds", "Objectives": "capsim.results.slo",
    "parse_objectives": "capsim.results.slo", "usd_per_million_tokens": "capsim.results.cost", "Runner": "capsim.planning.parallel",
    # plots
    "plot_run": "capsim.report.run_figures", "plot_run_dir": "capsim.report.run_figures", "plot_saved": "capsim.report.planning_figures",
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
