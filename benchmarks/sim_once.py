"""One timed `capsim.simulate()` call in a fresh process: the child that benchmarks/speed.py runs.

    python benchmarks/sim_once.py '{"workload": "workloads/bench-10k.yaml", "overrides": {}, "macro_steps": true}'

Prints one JSON line: import_s (importing capsim.simulation: numpy, pandas, SimPy, pydantic),
sim_s (the simulate() call alone: workload, engine run, result frames and summary), the run's
request and step counts, and events (SimPy events the run scheduled). Peak RSS is taken by the
parent from this process's rusage, so it covers imports, the run and its result.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time


def _count_environments(envs: list) -> None:
    """Make simpy.Environment record its instances, so the events a run scheduled can be read
    afterwards. No method is overridden: the event loop runs at full speed."""
    import simpy

    base = simpy.Environment

    class CountedEnvironment(base):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            envs.append(self)

    simpy.Environment = CountedEnvironment


def _events(envs: list) -> int | None:
    """Events scheduled by every environment (SimPy numbers them with an itertools.count, `_eid`;
    at the end of a run all of them have been processed). None if SimPy changes that."""
    try:
        return sum(next(env._eid) for env in envs)
    except (AttributeError, TypeError):
        return None


def _digest(result) -> str:
    """Fingerprint of what a run produced (summary, per-request and per-step records), to show
    that macro-steps and step-by-step give the same results."""
    import pandas as pd

    h = hashlib.sha256(json.dumps(result.summary, sort_keys=True, default=str).encode())
    for frame in (result.requests, result.steps):
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def main(spec: dict) -> dict:
    start = time.perf_counter()
    envs: list = []
    _count_environments(envs)
    from capsim.simulation import simulate

    imported = time.perf_counter()
    result = simulate(spec["workload"], macro_steps=spec.get("macro_steps", True), **spec.get("overrides", {}))
    done = time.perf_counter()
    s = result.summary
    return {
        "import_s": imported - start, "sim_s": done - imported, "arrived": int(s["arrived"]),
        "completed": int(s["completed"]), "steps": int(s["num_steps"]), "events": _events(envs),
        "output_tokens": int(s["total_output_tokens"]), "simulated_s": float(s["duration"]),
        "preemptions": int(s["preemptions"]), "mean_queueing_ms": float(s["mean_queueing_ms"]),
        "digest": _digest(result) if spec.get("digest") else None,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
