"""How fast `capsim plan` searches: prints figures, asserts nothing.

    python benchmarks/plan.py              # two searches of 512 candidates each (about a minute on 2 cores)
    python benchmarks/plan.py --markdown   # the table as markdown (docs/planning.md)

The search the issue asks for: at least 500 candidate deployments (4 GPU types x TP 1-8 x 2 weight
x 2 KV formats x 2 engines x 2 max_num_seqs x 2 token budgets, at most 16 GPUs), the survivors
simulated with 2,000-request steady windows (capacity's probe length), on this machine's cores:
chat.yaml with Llama-3.1-8B at 40 requests/s (the issue's command), and the same traffic with
Llama-3.1-70B at 10 requests/s, where the memory, throughput and latency bounds have work to do. It reports how
many candidates each bound pruned, how many the cost bound left unsimulated, the simulations run,
and the time per simulation and per simulated candidate. The bounds are timed again on their own
(the same calls plan makes), so the table splits the wall time into bounds and simulations. CPU
time (this process and its workers) is printed beside the wall time: on a shared machine the wall
time says more about the neighbours than about capsim.
"""

from __future__ import annotations

import argparse
import os
import resource
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
CASES = (("chat, Llama-3.1-8B, 40 req/s", "llama-3.1-8b", 40.0), ("chat, Llama-3.1-70B, 10 req/s", "llama-3.1-70b", 10.0))
SLOS = ["ttft_p99_ms=1000", "tpot_p99_ms=50"]
SPACE = SearchSpace(("h100-sxm", "h200", "l40s", "rtx5090"), 16, tp=(1, 2, 4, 8), weights=("bf16", "fp8"),
                    kv_cache=("fp16", "fp8"), engines=("vllm", "sglang"), max_num_seqs=(64, 256),
                    max_num_batched_tokens=(2048, 8192))


def bounds_only(goals, model: str, rate: float) -> float:
    """Seconds the bounds take for every candidate (what plan does before any simulation)."""
    start = time.perf_counter()
    w, _ = prepare(WORKLOAD, {"model": model}, check=False)
    w = w.model_copy(update={"model": model, "duration_s": None, "requests": probe_requests("rate_per_s", rate)})
    demand = traffic(w, "rate_per_s", rate, rate)
    cost_models: dict = {}
    for c in enumerate_candidates(SPACE):
        candidate_bounds(w, c, demand, goals, SPACE.budget_gpus, None, cost_models)
    return time.perf_counter() - start


def cpu_s() -> float:
    """CPU seconds of this process and of its finished worker processes (the pool is joined when plan returns)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(goals, model: str, rate: float, workers: int | None) -> list[tuple[str, str]]:
    """One plan search, timed: the table's rows for it."""
    start, cpu0 = time.perf_counter(), cpu_s()
    res = plan(WORKLOAD, goals, SPACE, rate=rate, workers=workers, model=model)
    wall, cpu = time.perf_counter() - start, cpu_s() - cpu0
    bounds_s = bounds_only(goals, model, rate)
    frame = res.frame
    n = len(frame)
    by_bounds = sum(v for k, v in res.pruned.items() if k != "cost")
    simulated = int((frame["simulations"] > 0).sum())
    sims = len(res.points)
    sim_s = max(wall - bounds_s, 0.0)
    win = res.winner
    return [
        ("candidate deployments", f"{n}"),
        ("pruned by bounds (no simulation)", f"{by_bounds} ({100 * by_bounds / n:.1f}%): "
                                             + (", ".join(f"{k} {v}" for k, v in res.pruned.items() if k != "cost" and v) or "none")),
        ("never simulated: the cost bound", f"{res.pruned['cost']}"),
        ("candidates simulated", f"{simulated} ({100 * simulated / n:.1f}%)"),
        ("simulations (one replica, 2,000-request window)", f"{sims}"),
        ("wall time, whole plan", f"{wall:.1f} s"),
        ("CPU time, whole plan (all processes)", f"{cpu:.1f} s: {cpu / 2:.1f} s of wall on 2 idle cores"),
        ("of which bounds (timed again alone)", f"{bounds_s:.1f} s ({1e3 * bounds_s / n:.1f} ms a candidate)"),
        ("time per simulation (wall, 2 workers)", f"{sim_s / max(sims, 1):.2f} s"),
        ("time per simulated candidate (wall)", f"{sim_s / max(simulated, 1):.2f} s"),
        ("winner", "none" if win is None else f"{win['gpu']} TP{win['tp']} {win['weights']}/{win['kv_cache']} "
                                               f"{win['engine']} x {win['replicas']}, ${win['usd_per_hour']:.2f}/h"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--workers", type=int, default=None, help="parallel simulations (default: one per core)")
    args = parser.parse_args()
    goals = parse_objectives(SLOS)
    columns = [measure(goals, model, rate, args.workers) for _, model, rate in CASES]
    names = [name for name, _, _ in CASES]
    print(f"# capsim plan benchmark: {os.cpu_count()} cores; SLOs {', '.join(SLOS)}")
    if args.markdown:
        print("| figure | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
        for i, (key, _) in enumerate(columns[0]):
            print(f"| {key} | " + " | ".join(col[i][1] for col in columns) + " |")
        return
    width = max(len(k) for k, _ in columns[0])
    for i, (key, _) in enumerate(columns[0]):
        print(f"{key:<{width}}  " + "  |  ".join(col[i][1] for col in columns))


if __name__ == "__main__":
    main()
