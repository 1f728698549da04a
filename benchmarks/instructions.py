"""Instructions the compiled engine executes for one run, counted by valgrind: prints figures, asserts nothing.

    python benchmarks/instructions.py                                   # bench-10k, 2,000 requests
    python benchmarks/instructions.py workloads/chat.yaml --requests 500

Times on a shared machine drift by tens of percent; an instruction count does not, so a change of a
few percent shows in one run of each version. The count covers Engine.run only (callgrind collects
inside the compiled engine's C function), so it needs valgrind and a compiled install
(`pip install .`); instructions are not time (cache misses, page faults), so confirm a change with
benchmarks/speed.py. About 30 s for the default run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from capsim.compiled import is_compiled

ROOT = Path(__file__).resolve().parent.parent
ENGINE_RUN = "CPyDef_engine___Engine___run"  # the C function mypyc makes of capsim.engine.Engine.run
CHILD = "import sys; from capsim.simulation import simulate; simulate(sys.argv[1], requests=int(sys.argv[2]))"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", default=str(ROOT / "workloads" / "bench-10k.yaml"))
    p.add_argument("--requests", type=int, default=2000)
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.exit("instructions.py: valgrind is not installed (apt install valgrind).")
    if not is_compiled():
        sys.exit("instructions.py: capsim is installed as plain Python; `pip install .` compiles the engine.")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
                               f"--toggle-collect={ENGINE_RUN}", sys.executable, "-c", CHILD, args.workload,
                               str(args.requests)], capture_output=True, text=True, check=False)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"instructions.py: the run failed:\n{done.stderr[-2000:]}")
    print(f"{args.workload}, {args.requests} requests: Engine.run executed {found.group(1)} instructions")


if __name__ == "__main__":
    main()
