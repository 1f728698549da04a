"""Tables piped or redirected print whole: off a terminal the console has no width limit, so each
row stays on one line with every name and number in one piece (`capsim models | grep qwen` finds
each model once). CSV and JSON stay the machine formats."""

import os
import subprocess
import sys

import pytest
from capsim.report.listings import engine_listing, gpu_listing, model_listing
from helpers import REPO


def _piped(*args) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # COLUMNS would set Rich's width
    run = subprocess.run([sys.executable, "-m", "capsim", *args], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


@pytest.mark.parametrize("command, listing", [("gpus", gpu_listing), ("models", model_listing),
                                              ("engines", engine_listing)])
def test_a_piped_listing_has_one_line_per_row_with_names_whole(command, listing):
    _, columns, rows, _ = listing()
    lines = _piped(command)
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == len(rows)  # no row folded over two lines
    header = next(line for line in lines if line.startswith("┃"))
    assert all(f" {name} " in header for name in columns)  # column names in one piece
    for row, line in zip(rows, body):
        assert line.startswith(f"│ {row[0]} ")  # the first cell (the name) whole, at the start of its row
