"""`capsim plan`: the cheapest deployment that meets every SLO at a target load.

1. Enumerate the candidates (capsim.planning.plan_space: one per per-replica shape).
2. Prune with bounds that need no simulation (capsim.planning.plan_bounds), counting what each
   bound removed; each survivor gets the fewest replicas its throughput bound allows.
3. For each survivor, search the fewest replicas meeting the SLOs at the target load, as
   `capacity --target-rate` checks replicas: one replica simulated at its share of the load
   (target / n requests/s, or users / n closed-loop users) with capacity's steady window,
   saturation test and longer re-runs of uncertain points. More replicas never hurt a replica's
   share, so the search tries the bound's count, doubles on a miss and then bisects.
   Candidates are searched in rounds of ROUND_SIZE, cheapest lower bound first; once a deployment
   meets the SLOs, a candidate whose least possible cost ($/hour at its fewest replicas) is no lower
   is not simulated further (the cost bound). `front_within` F > 1 keeps searching candidates that
   could cost up to F times the cheapest found, so the Pareto front covers deployments near the
   optimum; math.inf simulates every survivor. Rounds do not depend on the number of workers, so neither does the answer.
4. The winner is the cheapest deployment meeting every SLO ($/hour, then GPUs, then $ per 1M output
   tokens, then enumeration order); the front and launch commands are in capsim.planning.plan_output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from capsim.api import apply_overrides
from capsim.errors import CapsimError
from capsim.planning.capacity import ProbeJob, probe_requests
from capsim.planning.parallel import Runner
from capsim.planning.plan_bounds import PRUNE_REASONS, Bounds, candidate_bounds, traffic
from capsim.planning.plan_output import explain, launch_commands, order, pareto_front, summarise_rows
from capsim.planning.plan_space import SearchSpace, enumerate_candidates
from capsim.planning.tasks import prepare
from capsim.results.slo import Objectives
from capsim.spec.catalog import load_model

ROUND_SIZE = 8  # candidates simulated side by side per round (fixed: the answer must not depend on workers)


@dataclass
class PlanResult:
    """`frame`: one row per candidate (its bounds, what happened to it, and for a simulated one its
    fewest replicas meeting the SLOs and the metrics there); `points`: every simulation; `winner`:
    the chosen row (None when no candidate meets the SLOs); `closest`: with no winner, the row that
    came nearest; `front`: the Pareto front rows; `pruned`: how many candidates each bound removed."""

    frame: pd.DataFrame
    points: pd.DataFrame
    winner: dict | None
    closest: dict | None
    front: pd.DataFrame
    pruned: dict[str, int]
    target: dict  # {"over": "rate_per_s" | "users", "load": the target}
    objectives: Objectives
    workload: str
    model: str
    budget_gpus: int
    launch: dict[str, str] | None = None  # the winner's per-replica launch commands: {"vllm": ..., "sglang": ...}
    explain: list[str] = field(default_factory=list)  # why the winner wins (capsim.planning.plan_output.explain)

    def write(self, out_dir: Path) -> list[Path]:
        """plan.csv (every candidate), plan_points.csv (every simulation), plan_front.csv and plan.json."""
        from capsim.planning.plan_output import write_plan

        return write_plan(self, Path(out_dir))


class ReplicaSearch:
    """The fewest replicas meeting the SLOs for one candidate, between its throughput bound and the
    GPU budget: try the bound, double on a miss, then bisect between the highest miss and lowest pass."""

    def __init__(self, index: int, bounds: Bounds) -> None:
        self.index, self.bounds = index, bounds
        self.below = bounds.min_replicas - 1  # every count up to this misses (or is ruled out)
        self.passing: int | None = None  # the fewest replicas known to pass
        self.dropped = False  # removed by the cost bound
        self.tried: dict[int, dict] = {}

    @property
    def done(self) -> bool:
        if self.dropped:
            return True
        if self.passing is not None:
            return self.passing - self.below <= 1
        return self.below >= self.bounds.max_replicas

    def propose(self) -> int:
        if self.passing is not None:
            return (self.below + self.passing) // 2
        if not self.tried:
            return self.below + 1
        return min(self.bounds.max_replicas, 2 * max(self.tried))

    def observe(self, n: int, record: dict) -> None:
        self.tried[n] = record
        if record["slo_met"]:
            self.passing = n if self.passing is None else min(self.passing, n)
        else:
            self.below = max(self.below, n)

    def least_cost(self) -> tuple[float, int]:
        """(the lowest $/hour this candidate could still reach, its GPUs), for ordering and the cost bound."""
        n = self.below + 1
        gpus = n * self.bounds.candidate.gpus_per_replica
        price = self.bounds.usd_per_gpu_hour
        return (math.inf if price is None else gpus * price), gpus


def plan(workload, objectives: Objectives, space: SearchSpace, *, rate: float | None = None, users: int | None = None,
         think_time_s: float | None = None, price=None, workers: int | None = None, dask_scheduler: str | None = None,
         progress=None, front_within: float = 1.0, **options) -> PlanResult:
    """Search `space` for the cheapest deployment meeting `objectives` at `rate` requests/s (or
    `users` closed-loop users); see the module docstring. `options`: fixed overrides (requests, seed)."""
    if not front_within >= 1:
        raise CapsimError(f"--front-within: must be at least 1 (got {front_within}); 1 stops at the cheapest deployment.")
    if objectives.empty:
        raise CapsimError("plan: no objective to plan for: give --slo (e.g. --slo ttft_p99_ms=1000 --slo tpot_p99_ms=50), "
                          "or an slo: block in the workload.")
    w, given = prepare(workload, options, check=False)
    w = apply_overrides(w, "plan", **given)  # the bounds see what the simulations run (seed, model, ...)
    over, load = _target(w, rate, users)
    if "requests" not in given:
        w = w.model_copy(update={"duration_s": None, "requests": probe_requests(over, load)})
    spec = load_model(w.model) if isinstance(w.model, str) else w.model
    candidates = enumerate_candidates(replace(space, model=spec))
    demand = traffic(w, over, load, load if over == "rate_per_s" else None)
    cost_models: dict = {}
    bounds = [candidate_bounds(w, c, demand, objectives, space.budget_gpus, price, cost_models) for c in candidates]
    searches = [ReplicaSearch(i, b) for i, b in enumerate(bounds) if b.pruned_by is None]
    job = ProbeJob(w, given, over, think_time_s, objectives, price)
    points: list[dict] = []
    with Runner(workers, dask_scheduler) as runner:
        _search(job, runner, searches, over, load, points, progress, front_within)
    rows = summarise_rows(bounds, {s.index: s for s in searches}, objectives, over, load)
    frame = pd.DataFrame(rows)
    pruned = {k: sum(b.pruned_by == k for b in bounds) for k in PRUNE_REASONS}
    pruned["cost"] = sum(s.dropped and not s.tried for s in searches)  # never simulated
    feasible = [r for r in rows if r["status"] == "meets SLOs"]
    winner = min(feasible, key=order) if feasible else None
    closest = None if winner else _closest(rows)
    front = pareto_front(pd.DataFrame(feasible)) if feasible else pd.DataFrame()
    name = w.name or (Path(workload).stem if isinstance(workload, (str, Path)) else "workload")
    model = spec.name
    result = PlanResult(frame, pd.DataFrame(points), winner, closest, front, pruned, {"over": over, "load": load},
                        objectives, name, model, space.budget_gpus)
    if winner is not None:
        fraction = w.gpu_memory_utilization if "gpu_memory_utilization" in w.model_fields_set else None
        result.launch = launch_commands(winner, spec, w.max_model_len or spec.max_context_tokens, fraction)
    result.explain = explain(result)
    return result


def _target(w, rate: float | None, users: int | None) -> tuple[str, float]:
    if rate is not None and users is not None:
        raise CapsimError("plan: give --rate (requests/s) or --users (closed-loop users), not both.")
    if users is not None or (rate is None and w.arrivals.kind == "closed_loop"):
        users = users if users is not None else w.arrivals.users
        if users < 1:
            raise CapsimError(f"--users: must be at least 1 (got {users}).")
        return "users", int(users)
    if w.arrivals.kind not in ("poisson", "gamma", "constant"):
        raise CapsimError(f"plan: the workload's arrivals are '{w.arrivals.kind}', which have no rate to plan for; "
                          "give --users for closed-loop users, or use poisson, gamma or constant arrivals.")
    rate = rate if rate is not None else w.arrivals.rate_per_s
    if not rate > 0:
        raise CapsimError(f"--rate: must be a positive rate in requests/s (got {rate}).")
    return "rate_per_s", float(rate)


def replica_load(over: str, load: float, n: int) -> float:
    """One replica's share of the target: load / n requests/s (4 significant digits, as capacity's
    target check), or ceil(users / n) closed-loop users."""
    if over == "users":
        return math.ceil(load / n)
    return float(f"{load / n:.4g}")


def _search(job, runner, searches: list[ReplicaSearch], over: str, load: float, points: list, progress,
            front_within: float) -> None:
    best: tuple[float, int] | None = None
    while True:
        active = sorted((s for s in searches if not s.done), key=lambda s: (s.least_cost(), s.index))
        if best is not None:
            for s in active:
                s.dropped = _beyond(s.least_cost(), best, front_within)
            active = [s for s in active if not s.dropped]
        if not active:
            return
        batch = active[:ROUND_SIZE]
        jobs = []
        for s in batch:
            n = s.propose()
            combo = s.bounds.candidate.overrides() | {"combination": s.index}
            jobs.append((s, n, combo))
        # capacity's ProbeJob.run reports (simulations so far, so far + this round's); the total shown
        # counts one more simulation for every candidate still searching.
        extra = len(active) - len(jobs)
        tick = None if progress is None else (lambda done, total: progress(done, total + extra))
        records = job.run(runner, [(c, replica_load(over, load, n), f"{n} replicas") for _, n, c in jobs], points, tick)
        for (s, n, _), rec in zip(jobs, records):
            s.observe(n, rec)
            if rec["slo_met"]:
                price = s.bounds.usd_per_gpu_hour
                gpus = n * s.bounds.candidate.gpus_per_replica
                cost = ((math.inf if price is None else gpus * price), gpus)
                best = cost if best is None else min(best, cost)


def _beyond(cost: tuple[float, int], best: tuple[float, int], factor: float) -> bool:
    """Whether a candidate's least possible (usd/hour, GPUs) cannot come within `factor` of the best
    found: at factor 1, cannot be cheaper (GPUs decide when prices are unknown)."""
    if factor == math.inf:
        return False
    if math.isfinite(best[0]):
        return cost[0] >= best[0] * factor if factor == 1 else cost[0] > best[0] * factor
    return cost[1] >= best[1] * factor if factor == 1 else cost[1] > best[1] * factor


def _closest(rows: list[dict]) -> dict | None:
    """With no deployment meeting the SLOs: the simulated candidate whose worst objective is
    nearest its limit (at the most replicas tried), else the pruned one that got furthest."""
    simulated = [r for r in rows if r.get("binding_ratio") is not None]
    if simulated:
        return min(simulated, key=lambda r: (r["binding_ratio"], r["candidate"]))
    rank = {k: i for i, k in enumerate(PRUNE_REASONS)}
    pruned = [r for r in rows if r.get("pruned_by")]
    return max(pruned, key=lambda r: (rank.get(r["pruned_by"], -1), -r["candidate"])) if pruned else None

