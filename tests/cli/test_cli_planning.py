"""compare, sweep, capacity, plot and run's --seeds/--plots end to end, as a user runs them."""

import io
import json
import subprocess
import sys

import pandas as pd
import pytest
from helpers import REPO, unit_workload, write_workload


@pytest.fixture
def wfile(tmp_path, priced_gpu_file):
    return write_workload(tmp_path / "unit.yaml", unit_workload(priced_gpu_file, requests=40))


def test_compare_table_csv_json(run_cli, wfile, priced_gpu_file, round_gpu_file):
    code, out, err = run_cli("compare", wfile, "--gpu", priced_gpu_file, "--gpu", round_gpu_file, "--kv-cache", "fp16",
                             "--kv-cache", "q8_0", "--workers", "1")
    assert code == 0, err
    assert "Compare: unit (tiny, 40 requests per run)" in out and "n/a" in out and "$2.00" in out
    code, out, _ = run_cli("compare", wfile, "--gpu", priced_gpu_file, "--kv-cache", "fp16", "--kv-cache", "q8_0",
                           "--format", "csv", "--workers", "1")
    frame = pd.read_csv(io.StringIO(out))
    assert list(frame["kv_cache"]) == ["fp16", "q8_0"] and (frame["usd_per_hour"] == 2.0).all()
    for column in ("max_seqs_at_mean_request", "max_seqs_at_max_model_len", "output_throughput", "median_ttft_ms",
                   "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "kv_utilisation", "usd_per_m_output_tokens"):
        assert frame[column].notna().all(), column
    code, out, _ = run_cli("compare", wfile, "--kv-cache", "tbq4", "--format", "json", "--workers", "1")
    data = json.loads(out)
    assert data["axes"] == ["kv_cache"] and data["rows"][0]["kv_cache"] == "tbq4"


def test_sweep_writes_csv_and_plot(run_cli, wfile, tmp_path):
    code, out, err = run_cli("sweep", wfile, "--rate", "10:30:10", "--slo", "ttft_p99_ms=100", "--out", tmp_path / "s",
                             "--workers", "2")
    assert code == 0, err
    assert "Sweep: unit" in out and "met" in out
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "capsim-output.json", "latency_vs_load.png", "latency_vs_load.svg", "sweep.csv", "sweep.json"]
    assert list(pd.read_csv(tmp_path / "s" / "sweep.csv")["rate_per_s"]) == [10.0, 20.0, 30.0]


def test_sweep_users_markdown(run_cli, wfile):
    code, out, err = run_cli("sweep", wfile, "--users", "1:4:x2", "--format", "markdown", "--workers", "1")
    assert code == 0, err
    assert out.startswith("| users | done |") and "\n| 4 | 40 |" in out


def test_capacity_json_with_target_and_points(run_cli, wfile, tmp_path):
    code, out, err = run_cli("capacity", wfile, "--slo", "ttft_p99_ms=100", "--target-rate", "150", "--format", "json",
                             "--workers", "1", "--out", tmp_path / "c", "--plots", tmp_path / "c")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert 20 < row["capacity_rate_per_s"] < 80 and row["replicas_for_target"] >= 2 and row["target_check_met"] is True
    assert row["usd_per_m_output_tokens"] > 0 and row["request_goodput"] is None  # limits only: no goodput
    names = {p.name for p in (tmp_path / "c").iterdir()}
    assert {"capacity.csv", "capacity.json", "capacity_points.csv", "capacity_search.png", "capacity_search.svg"} <= names
    code, out, _ = run_cli("capacity", wfile, "--slo", "ttft:100", "--show-points", "--workers", "1")
    assert code == 0 and "Capacity under >= 90% of requests with TTFT <= 100 ms (goodput)" in out
    assert "Searched points" in out and "round 1" in out


def test_run_with_seeds_and_plots(run_cli, wfile, tmp_path):
    code, out, err = run_cli("run", wfile, "--seeds", "3", "--out", tmp_path / "r", "--plots", tmp_path / "p",
                             "--workers", "1")
    assert code == 0, err
    assert "3 seeds" in out and "mean ± 95%" in out and "< 100 samples" in out
    assert {"summary.json", "requests.csv", "seeds.csv", "confidence.csv", "capsim-output.json"} == {  # steps: --steps
        p.name for p in (tmp_path / "r").iterdir()}
    assert len(list((tmp_path / "p").glob("*.png"))) == 4
    seeds = pd.read_csv(tmp_path / "r" / "seeds.csv")
    assert list(seeds["seed"]) == [1, 2, 3]
    code, out, _ = run_cli("run", wfile, "--seeds", "2", "--json", "--workers", "1")
    assert json.loads(out)["seeds"] == [1, 2]


def test_plot_redraws_a_saved_sweep_and_tables_draw_the_batch_curves(run_cli, wfile, tmp_path):
    assert run_cli("sweep", wfile, "--rate", "10,40", "--format", "csv", "--out", tmp_path / "s", "--workers", "1")[0] == 0
    code, _, err = run_cli("plot", tmp_path / "s", "--out", tmp_path / "figs")
    assert code == 0 and "latency_vs_load.png" in err
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "capsim-output.json", "latency_vs_load.png", "latency_vs_load.svg"]
    code, _, err = run_cli("tables", "--plots", tmp_path / "t", "--format", "csv")
    assert code == 0 and (tmp_path / "t" / "batch_curves.png").is_file()


@pytest.mark.parametrize("args, fragment", [
    (["sweep", "W", "--rate", "5:1:1"], "--rate '5:1:1': expected START:STOP:STEP"),
    (["sweep", "W"], "give --rate START:STOP:STEP"),
    (["sweep", "W", "--users", "0:4"], "--users '0:4'"),
    (["capacity", "W", "--slo", "foo=1"], "--slo 'foo=1': unknown objective 'foo'"),
    (["capacity", "W"], "no objective to search against"),
    (["capacity", "workloads/seed-utilisation.yaml", "--slo", "ttft_p99_ms=5"], "no rate to search"),
    (["compare", "W", "--gpu", "rtx4090", "--gpu", "rtx9090"], "unknown GPU 'rtx9090'"),
    (["compare", "W", "--price-per-hour", "cheap"], "--price-per-hour 'cheap'"),
    (["run", "W", "--seeds", "1"], "--seeds: needs at least 2"),
    (["sweep", "W", "--rate", "1,2", "--workers", "0"], "--workers: must be at least 1"),
    (["plot", "."], "nothing to plot"),
])
def test_bad_input_is_one_paragraph_and_exit_2(run_cli, wfile, args, fragment):
    code, out, err = run_cli(*[wfile if a == "W" else a for a in args])
    assert code == 2 and fragment in err and "Traceback" not in out + err


def test_real_process_exit_code():
    p = subprocess.run([sys.executable, "-m", "capsim", "sweep", "workloads/chat.yaml", "--rate", "5:1:1"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "--rate '5:1:1'" in p.stderr and "Traceback" not in p.stderr
