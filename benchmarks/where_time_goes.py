"""Where a simulation's time goes: shares of one `simulate()` call under cProfile, by part of the engine.

    python benchmarks/where_time_goes.py                                   # bench-10k
    python benchmarks/where_time_goes.py workloads/bench-1m.yaml --requests 20000

Prints each part's cumulative time as a share of the whole call, then the functions with the most
time of their own. cProfile adds a fixed cost to every call, so parts made of many small calls
read larger than they run; use the shares to rank, and benchmarks/compare.py to measure a change.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import pstats

# (label, [(module, qualified function)]): cumulative times, so nested parts are listed once.
PARTS = [
    ("planning: Scheduler.schedule", [("sim.schedulers", "ContinuousScheduler.schedule"),
                                      ("sim.schedulers", "StaticScheduler.schedule")]),
    ("pricing decode runs: CostModel.decode_ends", [("cost.decode_runs", "DecodeRuns.decode_ends")]),
    ("pricing other steps: CostModel.step_cost", [("cost.roofline", "CostModel.step_cost")]),
    ("step and gap records", [("sim.step_log", "StepLog.add"), ("sim.step_log", "StepLog.add_segment"),
                              ("sim.request_log", "GapLog.add"), ("sim.request_log", "GapLog.add_segment")]),
    ("admissions and allocation: Engine._start", [("sim.engine", "Engine._start")]),
    ("completions: Engine._release", [("sim.engine", "Engine._release")]),
    ("arrivals: Intake._pull", [("sim.intake", "Intake._pull")]),
    ("result: summary and columns", [("api.run", "_result")]),
]


def _where(module: str, qualname: str) -> tuple[str, int, str]:
    """cProfile's key (file, first line, name) of a capsim function."""
    obj = __import__(f"capsim.{module}", fromlist=["_"])
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.getsourcefile(obj), inspect.getsourcelines(obj)[1], qualname.split(".")[-1]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", default="workloads/bench-10k.yaml")
    p.add_argument("--requests", type=int, help="override the workload's request count")
    p.add_argument("--top", type=int, default=15, help="functions to list by own time (default 15)")
    args = p.parse_args(argv)
    from capsim.errors import CapsimError
    from capsim.api import simulate

    overrides = {"requests": args.requests} if args.requests else {}
    try:
        simulate(args.workload, **overrides)  # warm: imports, catalogues, caches
    except CapsimError as exc:
        raise SystemExit(f"where_time_goes.py: {exc}") from None
    profile = cProfile.Profile()
    profile.enable()
    simulate(args.workload, **overrides)
    profile.disable()
    stats = pstats.Stats(profile)
    total = stats.stats[_where("api.run", "simulate")][3]
    print(f"simulate({args.workload}) under cProfile: {total:.3f} s\n")
    listed = 0.0
    for label, functions in PARTS:
        seconds = sum(stats.stats.get(_where(m, q), (0, 0, 0, 0.0))[3] for m, q in functions)
        listed += seconds
        print(f"  {label:48s} {100 * seconds / total:5.1f}%")
    print(f"  {'the rest: the step loop itself, running set, gaps':48s} {100 * (total - listed) / total:5.1f}%\n")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
