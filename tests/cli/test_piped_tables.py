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


CHAT = str(REPO / "workloads" / "chat.yaml")
TABLE_COMMANDS = {
    "tables": ["tables"],
    "models --from": ["models", "--from", str(REPO / "tests" / "data" / "hf_configs" / "llama-3.1-8b.json")],
    "compare": ["compare", CHAT, "--gpu", "rtx4090", "--gpu", "a100-80g", "--requests", "200", "--workers", "1"],
    "sweep": ["sweep", CHAT, "--rate", "1,2", "--requests", "200", "--workers", "1"],
    "capacity": ["capacity", CHAT, "--gpu", "h100-sxm", "--slo", "ttft_p99_ms=1000", "--tolerance", "0.5",
                 "--requests", "300", "--workers", "1"],
    "run --seeds": ["run", CHAT, "--requests", "200", "--seeds", "2", "--workers", "1"],
    "validate": ["validate", "--only", "xdai-rtx4090-llama3-8b-q4_k_m-tg512", "--workers", "1"],
    "plan": ["plan", CHAT, "--rate", "2", "--slo", "ttft_p99_ms=2000", "--gpu", "rtx4090", "--tp", "1", "--weights",
             "bf16", "--kv-cache", "fp16", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048",
             "--requests", "300", "--workers", "1"],
}


@pytest.mark.parametrize("name", sorted(TABLE_COMMANDS))
def test_every_table_printing_command_prints_whole_rows_through_a_pipe(name):
    """Each command that prints a Rich table, piped: every table row on one line (a folded row
    would continue on a line whose first cell is empty), and the rows as wide as they need."""
    lines = _piped(*TABLE_COMMANDS[name])
    body = [line for line in lines if line.startswith("│")]
    assert body, f"{name}: printed no table"
    for line in body:
        first = line[1:].split("│")[0]
        assert first.strip(), f"{name}: a row folded over two lines: {line!r}"
        assert line.rstrip().endswith("│")
