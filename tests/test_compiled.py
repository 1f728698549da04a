"""capsim.compiled: the engine compiled by mypyc (setup.py) gives the records plain Python gives.

The comparison runs in two fresh processes, one with CAPSIM_PURE_PYTHON=1 (the installed .py
files) and one without (the compiled modules), over the bundled workloads and the scheduler,
allocator, preemption and step-by-step variants; every summary, request row and step row must
match. Where capsim is installed as plain Python (an editable install, no C compiler) there is
nothing to compare and the test is skipped; the switch itself is tested either way. An install
that should have compiled and did not (setup.py's record says the compile failed) is a failure,
not a skip: CI runs `pip -q`, which hides setup.py's warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from capsim.compiled import PURE_PYTHON_VARIABLE, build_record, is_compiled
from helpers import REPO


# (workload, overrides, macro_steps): every bundled workload, shortened, and the variants that
# take the engine's other paths.
CASES = [
    *[(f"workloads/{p.name}", {"requests": 300}, True) for p in sorted((REPO / "workloads").glob("*.yaml"))],
    ("workloads/bench-10k.yaml", {"requests": 300, "scheduler": "chunked", "max_num_batched_tokens": 512}, True),
    ("workloads/bench-10k.yaml", {"requests": 300, "num_gpu_blocks": 300}, True),  # preempts
    ("workloads/chat.yaml", {"requests": 200, "scheduler": "static"}, True),
    ("workloads/chat.yaml", {"requests": 200, "allocator": "contiguous"}, True),
    ("workloads/chat.yaml", {"requests": 100}, False),
    ("workloads/bursty.yaml", {"requests": 100, "scheduler": "chunked"}, False),
]

SCRIPT = """
import hashlib, json, sys
import pandas as pd
from capsim.compiled import is_compiled
from capsim.api import simulate

runs = []
for workload, overrides, macro_steps in json.loads(sys.argv[1]):
    result = simulate(workload, macro_steps=macro_steps, **overrides)
    h = hashlib.sha256(result.summary_json().encode())
    for frame in (result.requests, result.steps):
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    runs.append(h.hexdigest())
print(json.dumps({"compiled": is_compiled(), "runs": runs}))
"""


def _run(pure: bool, script: str = SCRIPT, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_VARIABLE}
    if pure:
        env[PURE_PYTHON_VARIABLE] = "1"
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_an_installed_package_has_the_compiled_engine_unless_it_could_not_or_was_told_not_to():
    record = build_record()
    if record is None:
        pytest.skip("capsim runs from its source tree (an editable install): nothing was compiled or meant to be")
    assert not record["failed"], f"the engine should have compiled and did not: {record['why']}"
    if os.environ.get("CAPSIM_REQUIRE_COMPILED") == "1":
        assert record["compiled"], f"CAPSIM_REQUIRE_COMPILED=1 and the engine is not compiled: {record['why']}"
    if not record["compiled"]:
        pytest.skip(f"installed as plain Python: {record['why']}")
    assert is_compiled() or os.environ.get(PURE_PYTHON_VARIABLE) == "1"


@pytest.mark.skipif(not is_compiled(), reason="capsim is installed as plain Python: no compiled engine to compare")
def test_compiled_engine_gives_every_record_plain_python_gives():
    cases = json.dumps(CASES)
    compiled, pure = _run(False, SCRIPT, cases), _run(True, SCRIPT, cases)
    assert compiled["compiled"] and not pure["compiled"]
    assert len(compiled["runs"]) == len(CASES)
    mismatched = [case for case, a, b in zip(CASES, compiled["runs"], pure["runs"]) if a != b]
    assert not mismatched


def test_pure_python_switch_loads_the_engines_source_files():
    script = "import json, capsim.sim.engine, capsim.compiled as c; print(json.dumps([capsim.sim.engine.__file__, c.is_compiled()]))"
    source, compiled = _run(True, script)
    assert source.endswith(os.path.join("capsim", "sim", "engine.py"))
    assert compiled is False
