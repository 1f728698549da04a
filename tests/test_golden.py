"""Golden runs: a few bundled workloads whose results are pinned (tests/golden/runs.json), so a
change that moves any result fails here instead of comparing the code with itself. When a change
is meant to move results, regenerate them deliberately with `python tests/golden/update.py` and
say in the commit which figures moved and why."""

import json
from pathlib import Path

import pytest

from golden.update import GOLDEN, HEADLINE, RUNS_FILE, golden_run

PINNED = json.loads(Path(RUNS_FILE).read_text())


def test_every_golden_run_is_pinned():
    assert sorted(PINNED) == sorted(GOLDEN)
    assert all(sorted(run["headline"]) == sorted(HEADLINE) for run in PINNED.values())


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_run_gives_the_pinned_results(name):
    run, pinned = golden_run(name), PINNED[name]
    moved = {k: (pinned["headline"][k], v) for k, v in run["headline"].items() if pinned["headline"][k] != v}
    assert moved == {}, f"{name}: results moved (pinned, now): {moved}; if intended: python tests/golden/update.py"
    assert run["fingerprint"] == pinned["fingerprint"], (
        f"{name}: a request or step record moved (headline figures equal); if intended: python tests/golden/update.py")
