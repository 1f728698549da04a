"""Where a whole `capsim run` goes, phase by phase: prints figures, asserts nothing.

    python benchmarks/run_phases.py                              # bench-10k, median of 7 runs
    python benchmarks/run_phases.py workloads/chat.yaml --runs 5

Each run is a fresh process that runs the `capsim run WORKLOAD` command in-process, with clocks
around its parts: importing the CLI and the simulator (numpy, pydantic, Typer, rich, capsim),
Typer reading the command line up to the start of `simulate()`, the simulation up to its summary
(workload, engine run), the summary (`simulation._result`: records to columns, statistics), the
printing, and the interpreter's exit (from the command's end until the parent sees the process
gone). Runs alternate between the `capsim` entry point (`cli.console_main`, which freezes the
garbage collector's objects before exiting) and plain `cli.main()`, to show what the freeze saves
at exit. Medians; the machine's noise is large, so compare within one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import json, os, sys, time
stamps = {"start": time.time()}
import capsim.cli.app as cli
import capsim.api as simulation
stamps["imported"] = time.time()
def timed(fn, start, end):
    def call(*args, **kwargs):
        stamps[start] = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            stamps[end] = time.time()
    return call

simulation.simulate = timed(simulation.simulate, "simulate", "simulated")
simulation._result = timed(simulation._result, "summary", "summarised")
report_fd, entry = int(sys.argv[2]), sys.argv[3]
sys.argv = ["capsim", "run", sys.argv[1]]
stamps["main"] = time.time()
try:
    # versions before console_main: both columns run main()
    (getattr(cli, "console_main", cli.main) if entry == "console" else cli.main)()
finally:
    stamps["done"] = time.time()
    os.write(report_fd, json.dumps(stamps).encode())
"""
PHASES = (("imports", "start", "imported"), ("command line", "main", "simulate"),
          ("simulation", "simulate", "summary"), ("summary", "summary", "summarised"),
          ("printing", "simulated", "done"))


def one_run(workload: str, entry: str) -> dict[str, float]:
    read, write = os.pipe()
    begin = time.time()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, workload, str(write), entry], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(write,))
    os.close(write)
    proc.wait()
    end = time.time()
    data = os.read(read, 65536)
    os.close(read)
    if proc.returncode != 0 or not data:
        sys.exit(f"run_phases.py: the run failed: {proc.stderr.read().decode(errors='replace').strip()[-500:]}")
    proc.stderr.close()
    s = json.loads(data)
    out = {name: s[b] - s[a] for name, a, b in PHASES}
    out["start-up"] = s["start"] - begin
    out["exit"] = end - s["done"]
    out["process"] = end - begin
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", default="workloads/bench-10k.yaml")
    p.add_argument("--runs", type=int, default=7, help="runs of each entry point (default 7)")
    args = p.parse_args(argv)
    if not (ROOT / args.workload).is_file() and not Path(args.workload).is_file():
        print(f"run_phases.py: {args.workload}: no such workload file.", file=sys.stderr)
        return 1
    runs: dict[str, list[dict[str, float]]] = {"console": [], "main": []}
    for _ in range(args.runs):
        for entry, done in runs.items():
            done.append(one_run(args.workload, entry))
    names = ["start-up", *[name for name, _, _ in PHASES], "exit", "process"]
    print(f"{args.workload}: median seconds of {args.runs} runs each")
    print(f"{'phase':14s} {'capsim (console_main)':>22s} {'cli.main() alone':>18s}")
    for name in names:
        a = statistics.median(r[name] for r in runs["console"])
        b = statistics.median(r[name] for r in runs["main"])
        print(f"{name:14s} {a:22.3f} {b:18.3f}")
    print("start-up: interpreter and site until the child's first line; exit: the command's end until "
          "the process is gone; console_main freezes the collector's objects before exiting.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
