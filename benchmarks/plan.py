"""How fast `capsim plan` searches: prints figures, asserts nothing.

    python benchmarks/plan.py              # chat at 40 requests/s, 4 GPU types x TP 1-8 x 2 x 2 x 2 engines x 2 x 2
    python benchmarks/plan.py --markdown   # the table as markdown (docs/planning.md)

The search the issue asks for: at least 500 candidate deployments, the survivors simulated with
2,000-request steady windows (capacity's probe length), on this machine's cores. It reports how
many candidates each bound pruned, how many the cost bound left unsimulated, the simulations run,
and the time per simulation and per simulated candidate. The bounds are timed again on their own
(the same calls plan makes), so the table splits the wall time into bounds and simulations.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from capsim.planning.capacity import probe_requests
from capsim.planning.plan import plan
from capsim.planning.plan_bounds import candidate_bounds, traffic
from capsim.planning.plan_space import SearchSpace, enumerate_candidates
from capsim.planning.tasks import prepare
from capsim.results.slo import parse_objectives

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "workloads" / "chat.yaml"
RATE = 40.0
SLOS = ["ttft_p99_ms=1000", "tpot_p99_ms=50"]
SPACE = SearchSpace(("h100-sxm", "h200", "l40s", "rtx5090"), 16, tp=(1, 2, 4, 8), weights=("bf16", "fp8"),
                    kv_cache=("fp16", "fp8"), engines=("vllm", "sglang"), max_num_seqs=(64, 256),
                    max_num_batched_tokens=(2048, 8192))


def bounds_only(goals) -> float:
    """Seconds the bounds take for every candidate (what plan does before any simulation)."""
    start = time.perf_counter()
    w, _ = prepare(WORKLOAD, {}, check=False)
    w = w.model_copy(update={"duration_s": None, "requests": probe_requests("rate_per_s", RATE)})
    demand = traffic(w, "rate_per_s", RATE, RATE)
    cost_models: dict = {}
    for c in enumerate_candidates(SPACE):
        candidate_bounds(w, c, demand, goals, SPACE.budget_gpus, None, cost_models)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--workers", type=int, default=None, help="parallel simulations (default: one per core)")
    args = parser.parse_args()
    goals = parse_objectives(SLOS)
    start = time.perf_counter()
    res = plan(WORKLOAD, goals, SPACE, rate=RATE, workers=args.workers)
    wall = time.perf_counter() - start
    bounds_s = bounds_only(goals)
    frame = res.frame
    n = len(frame)
    by_bounds = sum(v for k, v in res.pruned.items() if k != "cost")
    simulated = int((frame["simulations"] > 0).sum())
    sims = len(res.points)
    sim_s = max(wall - bounds_s, 0.0)
    win = res.winner
    rows = [
        ("candidate deployments", f"{n}"),
        ("pruned by bounds", f"{by_bounds} ({100 * by_bounds / n:.1f}%): "
                             + ", ".join(f"{k} {v}" for k, v in res.pruned.items() if k != "cost")),
        ("left unsimulated by the cost bound", f"{res.pruned['cost']}"),
        ("candidates simulated", f"{simulated} ({100 * (1 - simulated / n):.1f}% of candidates never simulated)"),
        ("simulations (one replica each, >= 2,000 requests in the window)", f"{sims}"),
        ("wall time, whole plan", f"{wall:.1f} s on {os.cpu_count()} cores"),
        ("of which bounds (timed again alone)", f"{bounds_s:.1f} s ({1e3 * bounds_s / n:.1f} ms per candidate)"),
        ("time per simulation (wall, workers in parallel)", f"{sim_s / max(sims, 1):.2f} s"),
        ("time per simulated candidate (wall)", f"{sim_s / max(simulated, 1):.2f} s"),
        ("winner", "none" if win is None else f"{win['gpu']} TP{win['tp']} {win['weights']}/{win['kv_cache']} "
                                               f"{win['engine']} x {win['replicas']}, ${win['usd_per_hour']:.2f}/h"),
    ]
    if args.markdown:
        print("| figure | value |\n|---|---|")
        for k, v in rows:
            print(f"| {k} | {v} |")
    else:
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
