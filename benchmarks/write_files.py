"""How long writing a run's files takes against simulating it: every way `capsim run --out` can
write them (the default, --steps, --format parquet), the --trace file, and pandas' `to_csv` of the
same tables (with a check that capsim's CSV text is pandas' byte for byte).

    python benchmarks/write_files.py                          # bench-10k: 3 simulations, 5 writes each
    python benchmarks/write_files.py workloads/chat.yaml --sims 2 --reps 3

Simulates --sims times (the median is the simulation's time: `capsim.api.simulate`, the summary
included), then writes each variant --reps times into temporary folders, round robin, and prints
the median seconds, the ratio to the simulation, and the files' sizes. Asserts nothing. The pandas
row is timed with its DataFrames already built (and pandas imported), which favours it; Parquet
rows need pyarrow (the `parquet` extra) and are left out without it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", nargs="?", default="workloads/bench-10k.yaml")
    p.add_argument("--sims", type=int, default=3, help="simulations timed (default 3)")
    p.add_argument("--reps", type=int, default=5, help="writes of each variant (default 5)")
    args = p.parse_args(argv)
    path = Path(args.workload)
    if not path.is_file():
        print(f"write_files.py: {path}: no such workload file.", file=sys.stderr)
        return 1

    from capsim.api import simulate

    sims = []
    for _ in range(args.sims):
        t0 = time.perf_counter()
        result = simulate(path)
        sims.append(time.perf_counter() - t0)
    sim_s = statistics.median(sims)
    variants = _variants(result)
    times: dict[str, list[float]] = {name: [] for name in variants}
    sizes: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for i, (name, write) in enumerate(variants.items()):
                out = Path(tmp) / f"{rep}-{i}"
                out.mkdir()
                t0 = time.perf_counter()
                write(out)
                times[name].append(time.perf_counter() - t0)
                sizes[name] = {f.name: f.stat().st_size for f in sorted(out.iterdir())}
        pandas, capsim = list(variants).index("pandas"), list(variants).index("--steps")
        same = all((Path(tmp) / f"{rep}-{pandas}" / n).read_bytes() == (Path(tmp) / f"{rep}-{capsim}" / n).read_bytes()
                   for rep in range(args.reps) for n in ("requests.csv", "steps.csv"))
    print(f"{path}: {len(result.requests):,} request rows, {len(result.steps):,} step rows; simulation median of "
          f"{args.sims}: {sim_s:.3f} s; writes median of {args.reps}")
    print(f"| {'what is written':38s} | {'write s':>8s} | {'/ simulation':>12s} | files (MB) |")
    print(f"|{'-' * 40}|{'-' * 10}:|{'-' * 14}:|{'-' * 12}|")
    for name in variants:
        w = statistics.median(times[name])
        files = ", ".join(f"{n} {b / 1e6:.2f}" for n, b in sizes[name].items())
        print(f"| {name:38s} | {w:8.3f} | {w / sim_s:12.2f} | {files} |")
    print(f"capsim's steps.csv and requests.csv are pandas' to_csv text byte for byte: {'yes' if same else 'NO'}")
    return 0


def _variants(result) -> dict:
    """The ways to write the run's files, by the `capsim run` options that choose them."""
    import pandas as pd
    from capsim.results.summary import BOUND_NAMES
    from capsim.results.trace import TraceLimits

    steps = result.steps.copy()
    steps["bound"] = pd.Categorical.from_codes(steps["bound"], BOUND_NAMES)
    requests = result.requests

    def with_pandas(out: Path) -> None:
        requests.to_csv(out / "requests.csv", index=False)
        steps.to_csv(out / "steps.csv", index=False)

    variants = {
        "--out (default: summary, requests)": lambda out: result.write(out, steps=False),
        "--steps": lambda out: result.write(out, steps=True),
        "pandas": with_pandas,
        "--trace trace.json (200,000 events)": lambda out: result.write_trace(out / "trace.json", TraceLimits()),
    }
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("write_files.py: pyarrow is not installed: no Parquet rows (the `parquet` extra).", file=sys.stderr)
        return variants
    variants["--format parquet"] = lambda out: result.write(out, table_format="parquet", steps=False)
    variants["--format parquet --steps"] = lambda out: result.write(out, table_format="parquet", steps=True)
    return variants


if __name__ == "__main__":
    sys.exit(main())
