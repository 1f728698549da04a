"""The public entry point for one run: resolve a workload (+ overrides) into a set-up
(`capsim.api.setup`), simulate it (`capsim.api.run`) and hand back its result
(`capsim.api.run_result`). The CLI, the planning layer and the notebooks all come through here.
May import results, sim, workload, cost, spec and core; never planning, report or cli."""

from capsim.api.run import (
    build_replica,
    capacity_command,
    kv_alternatives,
    kv_fit,
    load_text,
    simulate,
)
from capsim.api.run_result import RunResult
from capsim.api.setup import (
    OVERRIDABLE,
    Setup,
    apply_overrides,
    describe,
    load_workload,
    resolve,
    with_engine_defaults,
)

__all__ = ["OVERRIDABLE", "RunResult", "Setup", "apply_overrides", "build_replica", "capacity_command", "describe",
           "kv_alternatives", "kv_fit", "load_text", "load_workload", "resolve", "simulate", "with_engine_defaults"]
