"""Regenerate the golden runs that tests/test_golden.py pins:

    python tests/golden/update.py          # rewrite tests/golden/runs.json, print what moved

Run it only when a change is meant to move results (a model fix, a new default), and say in the
commit which figures moved and why. Each golden run is a bundled workload simulated as `capsim run`
would; its fingerprint covers the summary and every request and step record.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS_FILE = Path(__file__).with_name("runs.json")
# name -> (workload file, overrides): a large open-loop run, the explainer's unit-time run, a
# closed-loop multi-turn prefix-caching run and a routed multi-replica run with two classes.
GOLDEN = {
    "bench-10k": ("workloads/bench-10k.yaml", {}),
    "seed-utilisation": ("workloads/seed-utilisation.yaml", {}),
    "prefix-sharing": ("workloads/prefix-sharing.yaml", {"requests": 600}),
    "replicas": ("workloads/replicas.yaml", {"requests": 1500}),
}
HEADLINE = ("arrived", "completed", "rejected", "unfinished", "duration", "num_steps", "mean_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "output_throughput")


def golden_run(name: str) -> dict:
    """The fingerprint and headline figures of one golden run, as runs.json holds them."""
    from capsim.api import simulate

    path, overrides = GOLDEN[name]
    with contextlib.chdir(ROOT):  # the summary names the workload by its path from here: keep it the same
        result = simulate(path, **overrides)
    return {"workload": path, "overrides": overrides, "fingerprint": result.fingerprint(),
            "headline": {key: result.summary[key] for key in HEADLINE}}


def main() -> int:
    old = json.loads(RUNS_FILE.read_text()) if RUNS_FILE.is_file() else {}
    new = {name: golden_run(name) for name in GOLDEN}
    for name, run in new.items():
        before = old.get(name, {})
        if before.get("fingerprint") == run["fingerprint"]:
            print(f"{name}: unchanged")
            continue
        print(f"{name}: fingerprint {before.get('fingerprint')} -> {run['fingerprint']}")
        for key, value in run["headline"].items():
            was = before.get("headline", {}).get(key)
            if was != value:
                print(f"    {key}: {was} -> {value}")
    RUNS_FILE.write_text(json.dumps(new, indent=2) + "\n")
    print(f"wrote {RUNS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
