"""Start-up time of the `capsim` command: the median wall time of several `capsim --help`,
`capsim gpus` and `capsim run --help` processes, the import of capsim.cli.app alone, and the time
Typer takes to build the command tree (every command's parameters) in-process.

    PYTHONPATH=simulator python benchmarks/startup.py [--repeats 7]

Each figure is a median over fresh processes, so the machine's other load shows as spread, not
as bias in one direction; the min is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

_BUILD = ("import time, typer; from capsim.cli.app import app; t = time.perf_counter(); "
          "typer.main.get_command(app); print(time.perf_counter() - t)")


def _wall(args: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def _inner(code: str, repeats: int) -> list[float]:
    return [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
            for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    n = parser.parse_args().repeats
    capsim = [sys.executable, "-m", "capsim"]
    rows = {
        "python -c pass": _wall([sys.executable, "-c", "pass"], n),
        "import capsim.cli.app": _wall([sys.executable, "-c", "import capsim.cli.app"], n),
        "capsim --help": _wall([*capsim, "--help"], n),
        "capsim gpus": _wall([*capsim, "gpus"], n),
        "capsim run --help": _wall([*capsim, "run", "--help"], n),
        "Typer builds the command tree (in-process)": _inner(_BUILD, n),
    }
    for name, times in rows.items():
        print(f"{name:45s} median {statistics.median(times) * 1000:7.1f} ms   min {min(times) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
