"""The command line end to end, as a user runs it: output, files, exit codes, no tracebacks."""

import json
import subprocess
import sys

import pytest
from helpers import REPO


def capsim(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "capsim", *args], check=False, capture_output=True, text=True, cwd=cwd)


def test_run_prints_vllm_block_and_writes_files(tmp_path):
    p = capsim("run", "workloads/chat.yaml", "--requests", "60", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    for line in ("============ Serving Benchmark Result ============", "Successful requests:",
                 "Benchmark duration (s):", "Request throughput (req/s):", "Output token throughput (tok/s):",
                 "Total Token throughput (tok/s):", "Mean TTFT (ms):", "P99 TPOT (ms):", "Median ITL (ms):",
                 "KV utilisation"):
        assert line in p.stdout
    # the step table only with --steps (tests/results/test_table_files.py)
    assert {f.name for f in tmp_path.iterdir()} == {"summary.json", "requests.csv", "capsim-output.json"}


def test_json_output_is_the_summary():
    p = capsim("run", "workloads/chat.yaml", "--requests", "40", "--json", "--gpu", "h100", "--kv-cache", "fp8")
    s = json.loads(p.stdout)
    assert s["completed"] == 40 and s["setup"]["gpu"] == "h100-sxm" and s["setup"]["kv_cache"] == "fp8_e4m3"
    for key in ("completed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
                "mean_ttft_ms", "median_tpot_ms", "std_itl_ms", "p90_e2el_ms", "p99_ttft_ms", "arrived", "rejected",
                "unfinished", "num_steps", "slot_utilisation", "kv_utilisation", "kv_internal_waste",
                "preemptions", "mfu", "mbu"):
        assert key in s


def test_tables_default_and_markdown_from_another_directory(tmp_path):
    p = capsim("tables", "--format", "markdown", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "| 32 | 20.945 | 1527.8 |" in p.stdout and "| tbq4 | 16896.0 | 444,850 | 54 | 13 |" in p.stdout
    assert capsim("tables", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("args, fragment", [
    (["run", "workloads/chat.yaml", "--gpu", "rtx4080"], "Did you mean: rtx4090"),
    (["run", "workloads/chat.yaml", "--model", "llama-7"], "unknown model"),
    (["run", "workloads/chat.yaml", "--rate", "-3"], "arrivals.rate_per_s"),
    (["run", "workloads/chat.yaml", "--scheduler", "fifo"], "scheduler.kind"),
    (["run", "workloads/chat.yaml", "--kv-cache", "fp9"], "unknown KV-cache format"),
    (["run", "nonexistent.yaml"], "cannot read the file"),
    (["tables", "--gpu", "v100"], "unknown GPU"),
    (["tables", "--context", "-5"], "--context"),
])
def test_bad_input_is_one_message_and_exit_2(args, fragment):
    p = capsim(*args)
    assert p.returncode == 2
    assert fragment in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_malformed_workload_names_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: llama-3.1-8b\ngpu: rtx4090\narrivals: {kind: poisson, rate_per_s: 1}\n"
                   "prompt_tokens: {dist: fixed, value: 10}\noutput_tokens: {dist: fixed, value: 10}\n"
                   "requests: 10\nschedular: {kind: chunked}\n")
    p = capsim("run", str(bad))
    assert p.returncode == 2 and str(bad) in p.stderr and "'schedular': unknown key" in p.stderr


def test_an_out_folder_that_cannot_be_made_is_one_message_and_exit_2(tmp_path):
    taken = tmp_path / "a-file"
    taken.write_text("not a folder")
    p = capsim("run", "workloads/chat.yaml", "--requests", "20", "--out", str(taken))
    assert p.returncode == 2 and str(taken) in p.stderr and "--out" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_catalogue_commands():
    gpus = json.loads(capsim("gpus", "--format", "json").stdout)
    assert gpus["rtx4090"]["peak_flops"]["fp16"] == 165.2e12
    models = json.loads(capsim("models", "--format", "json").stdout)
    assert models["opt-13b"]["derived"]["kv_bytes_per_token_fp16"] == 819_200
    assert "rtx4090" in capsim("gpus").stdout and "qwen3.5-27b" in capsim("models", "--format", "markdown").stdout
    schema = json.loads(capsim("schema").stdout)
    assert "arrivals" in schema["properties"]


def test_help_lists_the_commands():
    p = capsim("--help")
    assert p.returncode == 0 and all(c in p.stdout for c in ("run", "tables", "gpus", "models"))


def test_calibrate_on_cpu_then_run_with_the_profile(tmp_path):
    pytest.importorskip("torch")
    p = capsim("calibrate", "--device", "cpu", "--backend", "sdpa", "--tiny", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    profile = tmp_path / "cpu.calibrated.yaml"
    assert profile.exists() and "MAPE" in p.stdout
    check = capsim("calibrate", "--check", str(profile))
    assert check.returncode == 0 and "recomputed_pct" in check.stdout and "matches" in check.stdout
    run = capsim("run", "workloads/chat.yaml", "--gpu", str(profile), "--requests", "20", "--json")
    assert run.returncode == 0 and json.loads(run.stdout)["completed"] == 20


def test_unknown_option_is_a_usage_error_not_a_traceback():
    p = capsim("run", "workloads/chat.yaml", "--bogus")
    assert p.returncode == 2 and "No such option" in p.stderr and "Traceback" not in p.stderr


def test_run_draws_a_progress_bar_on_a_terminal_only(monkeypatch):
    import io

    import capsim.cli.app
    import capsim.cli.common
    import capsim.sim.engine
    from rich.console import Console
    from typer.testing import CliRunner

    monkeypatch.setattr(capsim.sim.engine, "PROGRESS_EVERY", 8)
    screen = io.StringIO()
    monkeypatch.setattr(capsim.cli.common, "err", Console(file=screen, force_terminal=True, width=100))
    result = CliRunner().invoke(capsim.cli.app.app, ["run", str(REPO / "workloads/chat.yaml"), "--requests", "200"])
    assert result.exit_code == 0 and "Successful requests:" in result.output
    assert "chat.yaml, requests finished" in screen.getvalue() and "/200" in screen.getvalue()
    screen.seek(0), screen.truncate()
    monkeypatch.setattr(capsim.cli.common, "err", Console(file=screen, force_terminal=False))
    assert CliRunner().invoke(capsim.cli.app.app, ["run", str(REPO / "workloads/chat.yaml"), "--requests", "200"]).exit_code == 0
    assert screen.getvalue() == ""  # not a terminal: no bar


# `capsim run` whose simulation says on stderr when it starts (so the test needs no timer).
_ANNOUNCING_RUN = """
import contextlib, sys
import capsim.api.run, capsim.cli.app
paused = capsim.api.run._collector_paused

@contextlib.contextmanager
def announced():
    print("simulating", file=sys.stderr, flush=True)
    with paused():
        yield

capsim.api.run._collector_paused = announced
sys.argv = ["capsim", *sys.argv[1:]]
capsim.cli.app.console_main()
"""


def test_ctrl_c_during_a_run_exits_130_with_one_line():
    import signal

    p = subprocess.Popen([sys.executable, "-c", _ANNOUNCING_RUN, "run", "workloads/bench-1m.yaml", "--requests", "300000"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a shell's foreground job
    assert p.stderr.readline() == "simulating\n"  # the simulation (a minute long) has started
    p.send_signal(signal.SIGINT)
    out, errors = p.communicate(timeout=600)
    assert p.returncode == 130 and errors.strip() == "interrupted" and out == ""
