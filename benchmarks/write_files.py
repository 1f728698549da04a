"""How long writing a run's files takes: `RunResult.write` (what `capsim run --out` does) against
pandas' `to_csv` of the same tables, and whether the two give the same text.

    python benchmarks/write_files.py                          # bench-10k, median of 5
    python benchmarks/write_files.py workloads/chat.yaml --reps 3

Simulates once, then writes requests.csv and steps.csv both ways into temporary folders (--reps
times each, alternating), compares the files, and prints the medians. Asserts nothing. The pandas
side is timed with its DataFrames already built (and pandas imported), which favours it.
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
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    path = Path(args.workload)
    if not path.is_file():
        print(f"write_files.py: {path}: no such workload file.", file=sys.stderr)
        return 1

    import pandas as pd
    from capsim.results.summary import BOUND_NAMES
    from capsim.api import simulate

    result = simulate(path)
    steps = result.steps.copy()
    steps["bound"] = pd.Categorical.from_codes(steps["bound"], BOUND_NAMES)
    requests = result.requests

    def with_pandas(out: Path) -> None:
        requests.to_csv(out / "requests.csv", index=False)
        steps.to_csv(out / "steps.csv", index=False)

    times: dict[str, list[float]] = {"pandas": [], "capsim": []}
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            outs = {who: Path(tmp) / f"{who}-{rep}" for who in times}
            for who, write in (("pandas", with_pandas), ("capsim", result.write)):
                outs[who].mkdir()
                t0 = time.perf_counter()
                write(outs[who])
                times[who].append(time.perf_counter() - t0)
            for name in ("requests.csv", "steps.csv"):
                same &= (outs["pandas"] / name).read_bytes() == (outs["capsim"] / name).read_bytes()
    pandas_s, capsim_s = statistics.median(times["pandas"]), statistics.median(times["capsim"])
    print(f"{path}: {len(requests):,} request rows, {len(steps):,} step rows; median of {args.reps}")
    print(f"  pandas to_csv (DataFrames already built): {pandas_s:.3f} s")
    print(f"  RunResult.write (capsim run --out):       {capsim_s:.3f} s  ({capsim_s / pandas_s:.2f} x)")
    print(f"  same requests.csv and steps.csv text:     {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
