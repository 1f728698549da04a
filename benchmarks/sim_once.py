"""One timed `capsim.simulate()` call in a fresh process: the child that benchmarks/speed.py runs.

    python benchmarks/sim_once.py '{"workload": "workloads/bench-10k.yaml", "overrides": {}, "macro_steps": true}'

Prints one JSON line: import_s (importing capsim.api: numpy, SimPy, pydantic), sim_s (the
simulate() call alone: workload, engine run, result columns and summary), the run's request and
step counts, events (RunResult.events: the engine's waits and arrival events; None from versions
before it, which benchmarks/compare.py may run) and where capsim was imported from. Peak RSS is
taken by the parent from this process's rusage, so it covers imports, the run and its result.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time


def _digest(result) -> str:
    """Fingerprint of what a run produced (summary, per-request and per-step records), to show
    that macro-steps and step-by-step give the same results: RunResult.fingerprint, computed here
    the same way for versions from before it (benchmarks/compare.py runs older ones)."""
    if hasattr(result, "fingerprint"):
        return result.fingerprint()
    import pandas as pd

    h = hashlib.sha256(json.dumps(result.summary, sort_keys=True, default=str).encode())
    for frame in (result.requests, result.steps):
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def main(spec: dict) -> dict:
    start = time.perf_counter()
    from capsim.api import simulate

    imported = time.perf_counter()
    result = simulate(spec["workload"], macro_steps=spec.get("macro_steps", True), **spec.get("overrides", {}))
    done = time.perf_counter()
    s = result.summary
    return {
        "import_s": imported - start, "sim_s": done - imported, "arrived": int(s["arrived"]),
        "completed": int(s["completed"]), "steps": int(s["num_steps"]), "events": getattr(result, "events", None),
        "output_tokens": int(s["total_output_tokens"]), "simulated_s": float(s["duration"]),
        "preemptions": int(s["preemptions"]), "mean_queueing_ms": float(s["mean_queueing_ms"]),
        "digest": _digest(result) if spec.get("digest") else None,
        "capsim": sys.modules["capsim"].__file__,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
