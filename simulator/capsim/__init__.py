"""capsim: capacity simulator for LLM serving (DESIGN §1: the public API).

    import capsim
    result = capsim.simulate("workloads/chat.yaml", gpu="rtx4090")        # one run
    capsim.compare("workloads/chat.yaml", gpu=["rtx4090", "a100-80g"], kv_cache=["fp16", "q8_0"])
    capsim.sweep("workloads/chat.yaml", rates=capsim.parse_range("1:10:1", "--rate"))
    capsim.capacity("workloads/chat.yaml", capsim.parse_objectives(["ttft_p99_ms=2000"]), gpu="rtx4090")

Names are imported on first use (module __getattr__), so `import capsim` stays cheap: no pandas,
SimPy or matplotlib until something needs them. `capsim.simulate`, `capsim.sweep` and
`capsim.capacity` are the functions, even though modules of the same names exist (the import
system is kept from rebinding them); import from the modules as `from capsim.sweep import ...`.
"""

from __future__ import annotations

import importlib
import sys
import types

_EXPORTS = {
    # one run
    "simulate": "capsim.simulate", "load_workload": "capsim.simulate", "apply_overrides": "capsim.simulate",
    "RunResult": "capsim.simulate",
    # catalogues
    "load_hardware": "capsim.catalog", "load_model": "capsim.catalog", "hardware_catalog": "capsim.catalog",
    "model_catalog": "capsim.catalog",
    # the documents' tables
    "TableSetup": "capsim.tables", "DocTable": "capsim.tables", "all_tables": "capsim.tables",
    "batch_table": "capsim.tables", "kv_capacity_table": "capsim.tables", "kv_per_token_table": "capsim.tables",
    "paged_waste_table": "capsim.tables", "utilisation_table": "capsim.tables", "batch_curves": "capsim.curves",
    # capacity planning
    "compare": "capsim.sweep", "sweep": "capsim.sweep", "parse_range": "capsim.sweep", "CompareResult": "capsim.sweep",
    "SweepResult": "capsim.sweep", "capacity": "capsim.capacity", "CapacityResult": "capsim.capacity",
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


class _Package(types.ModuleType):
    """Keeps an exported function (simulate, sweep, capacity) from being replaced by the submodule
    of the same name when that submodule is imported."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == value.__name__:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
