"""Instructions the compiled engine executes for one run, counted by valgrind: prints figures, asserts nothing.

    python benchmarks/instructions.py                                   # bench-10k, 2,000 requests
    python benchmarks/instructions.py workloads/chat.yaml --requests 500
    python benchmarks/instructions.py --scheduler chunked --max-num-batched-tokens 512   # bench-10k, Sarathi

Times on a shared machine drift by tens of percent; an instruction count does not, so a change of a
few percent shows in one run of each version. The count covers Engine.run only (callgrind collects
inside the compiled engine's C function), so it needs valgrind and a compiled install
(`pip install .`); instructions are not time (cache misses, page faults), so confirm a change with
benchmarks/speed.py. About 30 s for the default run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from capsim.compiled import is_compiled

ROOT = Path(__file__).resolve().parent.parent
ENGINE_RUN = "CPyDef_engine___Engine___run"  # the C function mypyc makes of capsim.sim.engine.Engine.run
CHILD = ("import json, sys; from capsim.api import simulate; "
         "simulate(sys.argv[1], requests=int(sys.argv[2]), **json.loads(sys.argv[3]))")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", default=str(ROOT / "workloads" / "bench-10k.yaml"))
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--scheduler", choices=("static", "continuous", "chunked"), help="override the workload's")
    p.add_argument("--max-num-batched-tokens", type=int, help="override the workload's token budget")
    args = p.parse_args(argv)
    overrides = {key: value for key, value in (("scheduler", args.scheduler),
                                               ("max_num_batched_tokens", args.max_num_batched_tokens)) if value}
    if shutil.which("valgrind") is None:
        sys.exit("instructions.py: valgrind is not installed (apt install valgrind).")
    if not is_compiled():
        sys.exit("instructions.py: capsim is installed as plain Python; `pip install .` compiles the engine.")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
                               f"--toggle-collect={ENGINE_RUN}", sys.executable, "-c", CHILD, args.workload,
                               str(args.requests), json.dumps(overrides)], capture_output=True, text=True, check=False)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"instructions.py: the run failed:\n{done.stderr[-2000:]}")
    setting = "".join(f", {key} {value}" for key, value in overrides.items())
    print(f"{args.workload}, {args.requests} requests{setting}: Engine.run executed {found.group(1)} instructions")


if __name__ == "__main__":
    main()
