"""An engine profile's GEMM share (`kernel_efficiency.compute`) on a grid, scored on the calibration set.

For each candidate value the calibration-set points of the chosen groups that map onto the profile are
simulated with that value in the profile (everything else as in engines.yaml), and the MAPE is printed, over
all of them and per source family (the point id's first word; MLPerf points by GPU). Test-set points are never
run: a parameter is chosen from the calibration set only (validation/README.md, "Calibration and test sets").

    python scripts/engine_share_grid.py trt-llm --values 0.85,0.90,0.92,0.93,0.94,0.95,1.0
    python scripts/engine_share_grid.py trt-llm@0.13 --values 0.74,0.77,0.80 --groups max_throughput,ttft,concurrency

MLPerf Server and Interactive points are left out (`--with-server` keeps them): their TTFT and TPOT move by
several percent per 1% of rate near saturation, so they would decide the grid by how close each run sits to its
limit rather than by the step's price.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections import defaultdict

from capsim.errors import CapsimError
from capsim.spec.serving import engine_catalog, load_engine
from capsim.validation.mapping import Skip, workload_for
from capsim.validation.runner import find_suite, load_points, run_suite


def calibration_ids(profile: str, groups: list[str], with_server: bool, suite=None) -> list[str]:
    """Ids of the calibration-set points of `groups` that map onto `profile`."""
    ids = []
    for p in load_points(find_suite(suite)):
        if p["_split"] != "calibration" or p["group"] not in groups:
            continue
        if not with_server and ("-server-" in p["id"] or "-interactive-" in p["id"]):
            continue
        try:
            if workload_for(p).engine == profile:
                ids.append(p["id"])
        except Skip:
            continue
    return ids


def family(point_id: str) -> str:
    """The point's source family for the breakdown: its id's first word, MLPerf ones by GPU."""
    head = point_id.split("-")[0]
    if head.startswith("mlperf"):
        gpu = next((g for g in ("b200", "h200", "h100") if g in point_id), "other")
        return f"{head}-{gpu}"
    return head


def scan(profile: str, values: list[float], ids: list[str], suite=None) -> list[tuple[float, float, dict]]:
    """[(value, MAPE %, {family: (MAPE %, mean signed %, points)}), ...]"""
    catalog = engine_catalog()
    original = catalog[profile]
    rows = []
    try:
        for value in values:
            catalog[profile] = original.model_copy(update={"kernel_efficiency": original.kernel_efficiency.model_copy(
                update={"compute": value})})
            # worker processes see the patched profile only when forked; else run in this one
            workers = None if multiprocessing.get_start_method() == "fork" else 1
            wanted = set(ids)
            outcomes = [o for o in run_suite(suite, only=ids, split="calibration", workers=workers)
                        if o.id in wanted and o.status == "ok"]
            errors = defaultdict(list)
            for o in outcomes:
                errors[family(o.id)].append(o.error_pct)
            fams = {k: (sum(abs(e) for e in v) / len(v), sum(v) / len(v), len(v)) for k, v in sorted(errors.items())}
            total = sum(abs(o.error_pct) for o in outcomes) / len(outcomes) if outcomes else float("nan")
            rows.append((value, total, fams))
    finally:
        catalog[profile] = original
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="engine profile name (capsim engines)")
    parser.add_argument("--values", required=True, help="candidate GEMM shares, comma-separated (0 < v <= 1)")
    parser.add_argument("--groups", default="max_throughput", help="point groups to score, comma-separated")
    parser.add_argument("--with-server", action="store_true", help="keep MLPerf Server and Interactive points")
    parser.add_argument("--suite", default=None, help="validation suite folder (default: the repository's)")
    args = parser.parse_args(argv)
    try:
        profile = load_engine(args.profile).name  # an alias names the profile it stands for
        values = [float(v) for v in args.values.split(",") if v.strip()]
    except CapsimError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except ValueError:
        print(f"--values {args.values!r}: give GEMM shares as numbers, comma-separated (e.g. 0.9,0.95,1.0)", file=sys.stderr)
        return 2
    if not values or any(not 0 < v <= 1 for v in values):
        print("--values: each GEMM share must be above 0 and at most 1", file=sys.stderr)
        return 2
    ids = calibration_ids(profile, [g.strip() for g in args.groups.split(",") if g.strip()], args.with_server, args.suite)
    if not ids:
        print(f"no calibration-set point of groups {args.groups} maps onto {profile}", file=sys.stderr)
        return 1
    print(f"{profile}: GEMM share on {len(ids)} calibration-set points ({args.groups}):")
    for value, total, fams in scan(profile, values, ids, args.suite):
        parts = "  ".join(f"{k} {m:.1f} ({s:+.1f}, {n})" for k, (m, s, n) in fams.items())
        print(f"  {value:.2f}: MAPE {total:.1f}%   by family, MAPE (mean signed, points): {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
