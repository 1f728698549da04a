"""SLO capacity search: the highest request rate (or number of closed-loop users) at which a
set-up meets every objective, and how many replicas a target rate needs.

Each point is a full simulation with the same seed (the same requests, arriving proportionally
faster), judged by `capsim.results.slo.Objectives`. The search runs in rounds of `points_per_round`
simulations (run in parallel; the rounds do not depend on the number of workers, so neither does
the answer):

1. bracket: from the start load, try start x 1, 2, 4 (x 2 per point) until a point fails; if the
   start fails, halve until one passes;
2. refine: place the round's points evenly inside (highest pass, lowest fail) and keep the new
   highest pass below the lowest fail, until (fail - pass) / pass <= tolerance (users: within
   max(1, tolerance x users)).

The capacity is the highest passing load below the lowest failing one (a non-monotone response
is resolved conservatively). A saturated point (its queue keeps growing: capsim.results.steady) never
passes, and each point simulates enough requests for a steady window of PROBE_WINDOW_REQUESTS
(probe_requests), whatever the workload's own length, so the answer does not move with how many
requests the workload happens to list; `requests=` overrides it.

Several set-ups (e.g. GPUs) are searched side by side, their rounds sharing the workers.
`target_rate`: replicas = ceil(target / capacity), checked by simulating one replica at
target / replicas with Poisson arrivals (conservative: round-robin over n replicas gives each a
smoother stream than Poisson), adding replicas until the check passes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from capsim.errors import CapsimError
from capsim.spec.limits import MAX_RATE_PER_S, MIN_RATE_PER_S
from capsim.planning.parallel import Runner
from capsim.planning.tasks import Task, evaluate
from capsim.results.slo import Objectives
from capsim.results.steady import DEFAULT_SHARE
from capsim.planning.sweep import COMPARE_FIRST, GRID_KEYS, order_columns, with_users, write_frames
from capsim.planning.tasks import prepare
from capsim.planning.sweep import CompareResult

MAX_DOUBLINGS = 20  # give up bracketing after 2^20 x the start load (up or down)
MAX_USERS = 1_000_000  # the workload schema's bound on closed-loop users
MAX_EXTRA_REPLICAS = 4
# Requests in each probe's steady window: a p99 then rests on 20 requests above it, and a queue that
# grows by 5% of the arrivals (the saturation test's tolerance) grows by 100 requests.
PROBE_WINDOW_REQUESTS = 2000
MAX_PROBE_REQUESTS = 50_000
MAX_LONGER = 4  # a probe is simulated again for longer up to this many times its first length


def probe_requests(over: str, x: float) -> int:
    """Requests each probe simulates: a steady window of PROBE_WINDOW_REQUESTS plus the warm-up and
    cool-down capsim.results.steady leaves out (a tenth of the arrivals at each end, and with closed-loop
    users at least one request per user at each end), at most MAX_PROBE_REQUESTS."""
    share = DEFAULT_SHARE
    n = math.ceil(PROBE_WINDOW_REQUESTS / (1 - 2 * share))
    if over == "users":
        n = max(n, PROBE_WINDOW_REQUESTS + 2 * int(x) + 2)
    return min(n, MAX_PROBE_REQUESTS)


class Search:
    """The bracketing search's state for one set-up: propose loads, observe verdicts."""

    def __init__(self, start: float, tolerance: float, points: int, integer: bool) -> None:
        self.start, self.tolerance, self.points, self.integer = start, tolerance, points, integer
        self.seen: dict[float, bool] = {}
        self.round = 0

    def bounds(self) -> tuple[float | None, float | None]:
        """(highest pass below the lowest fail, lowest fail); None where not found yet."""
        fails = [x for x, ok in self.seen.items() if not ok]
        hi = min(fails) if fails else None
        passes = [x for x, ok in self.seen.items() if ok and (hi is None or x < hi)]
        return (max(passes) if passes else None), hi

    def propose(self) -> list[float]:
        """The next round's loads; [] when the search is over."""
        lo, hi = self.bounds()
        if not self.seen:
            xs = [self.start * 2**j for j in range(self.points)]
        elif hi is None:
            top = max(self.seen)
            ceiling = min(self.start * 2**MAX_DOUBLINGS, MAX_USERS if self.integer else MAX_RATE_PER_S)
            xs = [] if top >= ceiling else [min(top * 2**j, ceiling) for j in range(1, self.points + 1)]
        elif lo is None:
            floor = 1 if self.integer else max(self.start / 2**MAX_DOUBLINGS, MIN_RATE_PER_S)
            xs = [] if hi <= floor else [max(hi / 2**j, floor) for j in range(1, self.points + 1)]
        elif self.converged(lo, hi):
            xs = []
        else:
            xs = [lo + (hi - lo) * k / (self.points + 1) for k in range(1, self.points + 1)]
        xs = sorted({self._round(x) for x in xs} - set(self.seen))
        if lo is not None and hi is not None:
            xs = [x for x in xs if lo < x < hi]
        self.round += bool(xs)
        return xs

    def converged(self, lo: float, hi: float) -> bool:
        if self.integer:
            return hi - lo <= max(1, math.floor(self.tolerance * lo))
        return hi - lo <= self.tolerance * lo

    def _round(self, x: float) -> float:
        if self.integer:
            return max(1, round(x))
        return float(f"{x:.4g}")


@dataclass
class CapacityResult:
    """`frame`: one row per set-up: `capacity_rate_per_s` (or `capacity_users`; None when even the
    lowest load tried misses an SLO), `bounded` (a failing load was found above it), the record
    at the capacity, and with a target the replicas it needs; `points`: every simulation the
    search ran, with its `role` (round N, or the target check) and verdict."""

    frame: pd.DataFrame
    points: pd.DataFrame
    over: str
    objectives: Objectives

    def write(self, out_dir: Path) -> list[Path]:
        """capacity.csv, capacity.json and capacity_points.csv."""
        paths = write_frames(Path(out_dir), "capacity", self.frame, self.points,
                             {"over": self.over, "objectives": self.objectives.as_dict()})
        paths.append(Path(out_dir) / "capacity_points.csv")
        self.points.to_csv(paths[-1], index=False)
        return paths


def capacity(workload, objectives: Objectives, *, users: bool = False, start: float | None = None,
             tolerance: float = 0.02, points_per_round: int = 3, target_rate: float | None = None,
             think_time_s: float | None = None, price=None, workers: int | None = None,
             dask_scheduler: str | None = None, progress=None, **options) -> CapacityResult:
    """Search the highest load meeting `objectives` for each combination of the list-valued
    options (as in `compare`); see the module docstring for the algorithm."""
    _check_args(objectives, users, tolerance, points_per_round, target_rate, start)
    axes = [k for k, v in options.items() if isinstance(v, (list, tuple))]
    if any(k not in GRID_KEYS for k in axes):
        raise CapsimError(f"capacity: only {', '.join(GRID_KEYS)} can be given more than once.")
    fixed = {k: v for k, v in options.items() if k not in axes}
    w, given = prepare(workload, fixed, check=False)
    combos = [dict(zip(axes, v)) for v in itertools.product(*(options[k] for k in axes))]
    over = "users" if users else "rate_per_s"
    if not users and w.arrivals.kind not in ("poisson", "gamma", "constant"):
        raise CapsimError(f"capacity: the workload's arrivals are '{w.arrivals.kind}', which have no rate to search; "
                          "search closed-loop users with --users, or use poisson, gamma or constant arrivals.")
    start = start or _default_start(w, users)
    if "requests" not in given:  # each probe's length is probe_requests', not the workload's
        w = w.model_copy(update={"duration_s": None, "requests": probe_requests(over, start)})
    for combo in combos:  # fail fast on a set-up that cannot run, before any search starts
        prepare(_at(w, over, 1, think_time_s), given | combo | ({} if users else {"rate": start}))
    searches = [Search(start, tolerance, points_per_round, users) for _ in combos]
    job = ProbeJob(w, given, over, think_time_s, objectives, price)
    with Runner(workers, dask_scheduler) as runner:
        points = job.search(runner, combos, searches, progress)
        rows = [_answer(job, s, n, combo, points, tolerance) for n, (combo, s) in enumerate(zip(combos, searches))]
        if target_rate is not None:
            rows = [job.replicas(runner, row, combo | {"combination": n}, target_rate, points)
                    for n, (row, combo) in enumerate(zip(rows, combos))]
    first = ["combination"] + axes + [f"capacity_{over}", "bounded", "replicas_for_target"] + list(COMPARE_FIRST)
    frame = order_columns(pd.DataFrame(rows), first)
    return CapacityResult(frame, pd.DataFrame(points), over, objectives)


def _check_args(objectives, users, tolerance, points_per_round, target_rate, start) -> None:
    if objectives.empty:
        raise CapsimError("capacity: no objective to search against: give --slo (e.g. --slo ttft_p99_ms=2000 "
                          "--slo tpot_p99_ms=50, or vLLM's --slo 'ttft:2000 tpot:50'), or an slo: block in the workload.")
    if not 0 < tolerance < 1:
        raise CapsimError(f"--tolerance: must be between 0 and 1 (got {tolerance}); 0.02 stops within 2%.")
    if points_per_round < 1:
        raise CapsimError(f"--points-per-round: must be at least 1 (got {points_per_round}).")
    if target_rate is not None and (users or not target_rate > 0):
        raise CapsimError("--target-rate: must be a positive rate in requests/s, and works with a rate search "
                          "(not --users).")
    if start is not None and not start > 0:
        raise CapsimError(f"--start: must be positive (got {start}).")


def _default_start(w, users: bool) -> float:
    arrivals = w.arrivals
    if users:
        return arrivals.users if arrivals.kind == "closed_loop" else 1
    return getattr(arrivals, "rate_per_s", None) or 1.0


def _at(w, over: str, x, think_time_s):
    return with_users(w, x, think_time_s) if over == "users" else w


class ProbeJob:
    """What every probe of a capacity search (and of `capsim plan`'s replica search) shares:
    workload, overrides, objectives, price; `run` simulates a round of probes."""

    def __init__(self, w, given, over, think_time_s, objectives, price) -> None:
        self.w, self.given, self.over, self.think, self.objectives, self.price = w, given, over, think_time_s, objectives, price

    def task(self, combo: dict, x, requests: int | None = None) -> Task:
        """`combo` holds the grid values plus its 'combination' index (a label, not an override);
        `requests`: the probe's length (default: the user's --requests, else probe_requests)."""
        extra = {"rate": x} if self.over == "rate_per_s" else {}
        if requests is not None or "requests" not in self.given:
            extra["requests"] = requests or probe_requests(self.over, x)
        overrides = {k: v for k, v in combo.items() if k != "combination"}
        return Task(_at(self.w, self.over, x, self.think), self.given | overrides | extra, combo | {self.over: x},
                    self.objectives, self.price)

    def run(self, runner: Runner, jobs: list[tuple[dict, float, str]], points: list, progress) -> list[dict]:
        """Simulate each (combo, load, role) and judge it. A probe that is not saturated but too short
        for a steady window (capsim.results.steady: fewer than 10 mean end-to-end latencies) or whose
        verdict is uncertain (a limit within two standard errors of its statistic: records.margins)
        is simulated again with twice the requests: a too-short one up to MAX_PROBE_REQUESTS, an
        uncertain one up to MAX_LONGER times its first length."""
        done = len(points)
        tick = None if progress is None else (lambda i, n: progress(done + i, done + n))
        tasks = [self.task(c, x) for c, x, _ in jobs]
        records = runner.map(evaluate, tasks, tick)
        first = [rec["arrived"] for rec in records]
        while True:
            caps = [MAX_PROBE_REQUESTS if rec["too_short"] else min(MAX_LONGER * n, MAX_PROBE_REQUESTS)
                    for rec, n in zip(records, first)]
            longer = [i for i, rec in enumerate(records) if (rec["too_short"] or rec.get("uncertain"))
                      and not rec["saturated"] and rec["arrived"] < caps[i]]
            if not longer:
                break
            redo = [self.task(jobs[i][0], jobs[i][1], min(2 * records[i]["arrived"], caps[i])) for i in longer]
            for i, rec in zip(longer, runner.map(evaluate, redo)):
                records[i] = rec
        for rec, (_, _, role) in zip(records, jobs):
            failures = self.objectives.failures(rec)
            rec.update({"role": role, "slo_met": not failures, "slo_failures": "; ".join(failures)})
            points.append(rec)
        return records

    def search(self, runner: Runner, combos: list[dict], searches: list[Search], progress) -> list[dict]:
        """Run every search's rounds in lockstep until all are done; returns all points."""
        points: list[dict] = []
        while True:
            jobs = [(n, x, f"round {s.round}") for n, s in enumerate(searches) for x in s.propose()]
            if not jobs:
                return points
            records = self.run(runner, [(combos[n] | {"combination": n}, x, r) for n, x, r in jobs], points, progress)
            for (n, x, _), rec in zip(jobs, records):
                searches[n].seen[x] = rec["slo_met"]

    def replicas(self, runner: Runner, row: dict, combo: dict, target: float, points: list) -> dict:
        """Replicas for `target` requests/s: ceil(target / capacity), then check one replica at its share."""
        capacity_rate = row["capacity_rate_per_s"]
        if capacity_rate is None:
            return row | {"target_rate_per_s": target, "replicas_for_target": None, "replica_rate_per_s": None,
                          "target_check_met": None}
        n = max(1, math.ceil(target / capacity_rate - 1e-9))
        for n in range(n, n + MAX_EXTRA_REPLICAS + 1):
            x = float(f"{target / n:.4g}")
            rec = self.run(runner, [(combo, x, f"target check, {n} replicas")], points, None)[0]
            if rec["slo_met"]:
                break
        # n replicas, each at target / n: n times one replica's GPUs and $/hour, the same $ per token
        cost = {k: rec[k] for k in ("usd_per_m_output_tokens", "usd_per_m_total_tokens")}
        per_hour = None if rec["usd_per_hour"] is None else n * rec["usd_per_hour"]
        return row | {"target_rate_per_s": target, "replicas_for_target": n, "replica_rate_per_s": x,
                      "target_check_met": rec["slo_met"], "gpus_at_target": n * rec["gpus"],
                      "usd_per_hour_at_target": per_hour, **{f"{k}_at_target": v for k, v in cost.items()}}


def _answer(job: ProbeJob, search: Search, n: int, combo: dict, points: list[dict], tolerance: float) -> dict:
    """The set-up's answer row: capacity (None if no load met the objectives) and its record."""
    lo, hi = search.bounds()
    mine = [p for p in points if p["combination"] == n]
    at = next((p for p in mine if p[job.over] == lo), None)
    base = {k: v for k, v in (at or {}).items() if k not in ("role", "slo_met", "slo_failures", job.over)}
    if at is None and mine:  # no load met the objectives: still say which set-up this row is
        base = {k: mine[0][k] for k in GRID_KEYS if k in mine[0]}
    return {"combination": n, **combo, **base, f"capacity_{job.over}": lo, "over": job.over, "bounded": hi is not None,
            f"lowest_failing_{job.over}": hi, "tolerance": tolerance, "simulations": len(mine), "rounds": search.round}


def compare_at_capacity(workload, objectives: Objectives, *, users: bool = False, price=None,
                        workers: int | None = None, dask_scheduler: str | None = None, progress=None,
                        **options):
    """`compare --at-capacity`: each combination of the list-valued options at its own capacity
    under `objectives` (a capacity search each), so rows compare what each set-up serves within the
    SLO and what a token costs there. A combination with no capacity keeps a row saying so."""
    res = capacity(workload, objectives, users=users, price=price, workers=workers, dask_scheduler=dask_scheduler,
                   progress=progress, **options)
    axes = [k for k, v in options.items() if isinstance(v, (list, tuple))]
    frame = res.frame.copy()
    over = f"capacity_{res.over}"
    frame["problem"] = [None if v is not None and v == v else "no load tried meets the SLOs" for v in frame[over]]
    return CompareResult(frame, res.points, axes, objectives)
