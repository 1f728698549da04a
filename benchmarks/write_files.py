"""How long writing a run's files takes: capsim's CSV writer against pandas' to_csv, same text.

    python benchmarks/write_files.py                          # bench-10k, median of 5
    python benchmarks/write_files.py workloads/chat.yaml --reps 3

Simulates once, then times writing requests.csv and steps.csv both ways into memory (medians of
--reps, alternating), checks the two texts are identical, and prints the figures. Asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    from capsim.csv_out import write_csv
    from capsim.simulation import simulate

    result = simulate(path)
    steps = result.steps.copy()
    steps["bound"] = pd.Categorical.from_codes(steps["bound"], ["compute", "memory", "overhead"])
    print(f"{path}: {len(result.requests):,} request rows, {len(steps):,} step rows; "
          f"median of {args.reps}, seconds")
    print(f"{'table':<10} {'pandas to_csv':>14} {'capsim':>8} {'ratio':>6}  identical")
    for name, frame in (("requests", result.requests), ("steps", steps)):
        times = {"pandas": [], "capsim": []}
        texts = {}
        for _ in range(args.reps):
            for who, write in (("pandas", lambda f, fh: f.to_csv(fh, index=False)), ("capsim", write_csv)):
                buf = io.StringIO()
                t0 = time.perf_counter()
                write(frame, buf)
                times[who].append(time.perf_counter() - t0)
                texts[who] = buf.getvalue()
        pandas_s, capsim_s = statistics.median(times["pandas"]), statistics.median(times["capsim"])
        print(f"{name:<10} {pandas_s:>14.3f} {capsim_s:>8.3f} {capsim_s / pandas_s:>6.2f}  "
              f"{'yes' if texts['pandas'] == texts['capsim'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
