"""`capsim plan` end to end, as a user runs it: the verdict, launch commands, files and figure, the
no-winner verdict (exit 0), bad input (exit 2), and the bundled chat and long-context workloads."""

import json

import pandas as pd
import pytest
from helpers import TINY_MODEL, unit_workload, write_workload

SMALL = ["--tp", "1", "--weights", "fp16", "--kv-cache", "fp16", "--max-num-seqs", "8", "--max-num-batched-tokens",
         "4096", "--requests", "400", "--workers", "1"]


@pytest.fixture
def wfile(tmp_path):
    return write_workload(tmp_path / "unit.yaml", unit_workload("l40s", requests=40))


def test_plan_prints_the_winner_and_writes_files(run_cli, wfile, tmp_path):
    code, out, err = run_cli("plan", wfile, "--rate", "150", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", "--gpu",
                             "h100-sxm", "--budget-gpus", "4", "--explain", "--out", tmp_path / "p", "--plots",
                             tmp_path / "p" / "plots", *SMALL)
    assert code == 0, err
    assert "meets every SLO" in out and "l40s TP1" in out and "Pareto front" in out
    assert "vllm serve tiny --tensor-parallel-size 1 --max-num-seqs 8 --max-num-batched-tokens 4096" in out
    assert "python -m sglang.launch_server --model-path tiny --tp 1 --max-running-requests 8" in out
    assert "Winner: #0 l40s" in out and "candidates; pruned by bounds" in out
    names = sorted(p.name for p in (tmp_path / "p").iterdir())
    assert names == ["capsim-output.json", "plan.csv", "plan.json", "plan_front.csv", "plan_points.csv", "plots"]
    assert sorted(p.name for p in (tmp_path / "p" / "plots").iterdir()) == ["capsim-output.json", "plan.png", "plan.svg"]
    data = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert data["winner"]["gpu"] == "l40s" and data["launch"]["vllm"].startswith("vllm serve tiny")
    assert data["candidates"] == 2 and sum(data["pruned"].values()) <= 2
    frame = pd.read_csv(tmp_path / "p" / "plan.csv")
    assert list(frame["gpu"]) == ["l40s", "h100-sxm"] and frame["status"].iloc[0] == "meets SLOs"


def test_plan_json_and_csv_formats(run_cli, wfile):
    code, out, err = run_cli("plan", wfile, "--rate", "40", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", "--format",
                             "json", *SMALL)
    assert code == 0, err
    data = json.loads(out)
    assert data["winner"]["replicas"] == 1 and data["target"] == {"over": "rate_per_s", "load": 40.0}
    code, out, _ = run_cli("plan", wfile, "--rate", "40", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", "--format",
                           "csv", *SMALL)
    assert code == 0 and out.startswith("candidate,status,shape,gpu,tp,pp,ep,prefill,decode,link,")


def test_no_deployment_meeting_the_slos_is_a_verdict(run_cli, wfile):
    code, out, err = run_cli("plan", wfile, "--rate", "40", "--slo", "e2el_p99_ms=50", "--gpu", "l40s",
                             "--budget-gpus", "2", *SMALL)
    assert code == 0, err
    assert "NO deployment meets every SLO" in out and "Closest:" in out and "p99_e2el_ms" in out


def test_closed_loop_users(run_cli, wfile):
    code, out, err = run_cli("plan", wfile, "--users", "12", "--slo", "ttft_p99_ms=200", "--gpu", "l40s",
                             "--budget-gpus", "2", "--format", "json", *SMALL)
    assert code == 0, err
    data = json.loads(out)
    assert data["target"] == {"over": "users", "load": 12} and data["winner"] is not None


@pytest.mark.parametrize("args, fragment", [
    (["--gpu", "h1000"], "unknown GPU 'h1000'"),
    (["--gpu", "l40s", "--slo", "foo=1"], "--slo 'foo=1': unknown objective 'foo'"),
    (["--gpu", "l40s", "--budget-gpus", "0"], "--budget-gpus: must be at least 1"),
    (["--gpu", "l40s", "--tp", "0"], "--tp: give positive whole numbers"),
    (["--gpu", "l40s", "--rate", "0"], "--rate: must be a positive rate"),
    (["--gpu", "l40s", "--rate", "5", "--users", "3"], "not both"),
    (["--gpu", "l40s", "--front-within", "0.5"], "--front-within"),
])
def test_bad_input_is_one_paragraph_and_exit_2(run_cli, wfile, args, fragment):
    code, out, err = run_cli("plan", wfile, *(args if "--slo" in args else args + ["--slo", "ttft_p99_ms=100"]))
    assert code == 2 and fragment in err and "Traceback" not in out + err


@pytest.mark.parametrize("path, rate, slo", [("workloads/chat.yaml", "10", "tpot_p99_ms=50"),
                                             ("workloads/long-context-agent.yaml", "1", "tpot_p99_ms=60")])
def test_bundled_workloads(run_cli, path, rate, slo):
    from helpers import REPO

    code, out, err = run_cli("plan", REPO / path, "--rate", rate, "--slo", slo, "--gpu", "h100-sxm", "--tp", "1",
                             "--weights", "bf16", "--kv-cache", "fp16", "--max-num-seqs", "256",
                             "--max-num-batched-tokens", "2048", "--budget-gpus", "2", "--workers", "1")
    assert code == 0, err
    assert "meets every SLO" in out and "vllm serve meta-llama/Llama-3.1-8B-Instruct" in out


def test_plan_with_shapes_counts_them_and_prints_the_disaggregated_pair(run_cli, tmp_path):
    w = write_workload(tmp_path / "two.yaml", unit_workload("l40s", requests=40,
                                                             model=dict(TINY_MODEL, num_layers=2)))
    code, out, err = run_cli("plan", w, "--rate", "40", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", "--budget-gpus",
                             "4", "--shapes", "disaggregated,pp", "--pp", "2", "--splits", "1:1,1:3", *SMALL)
    assert code == 0, err
    assert "3 candidates (pp 1, disaggregated 2)" in " ".join(out.split())
    assert "meets every SLO" in out
    code, out, err = run_cli("plan", w, "--rate", "40", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", "--shapes",
                             "disaggregated", "--splits", "1:1", "--format", "json", *SMALL)
    assert code == 0, err
    data = json.loads(out)
    assert data["winner"]["shape"] == "disaggregated" and data["winner"]["link"] == "pcie-gen4-x16"
    assert data["launch"]["sglang decode"].endswith("--disaggregation-mode decode")
    assert "NixlConnector" in data["launch"]["vllm prefill"]


@pytest.mark.parametrize("args, message", [(["--shapes", "aggregated,xpyd"], "unknown shape(s) xpyd"),
                                           (["--splits", "1-2"], "is not PREFILL:DECODE")])
def test_plan_refuses_bad_shapes(run_cli, wfile, args, message):
    code, out, err = run_cli("plan", wfile, "--rate", "40", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", *args, *SMALL)
    assert code == 2 and message in " ".join((out + err).split())


def test_plan_pp_without_shapes_adds_the_pp_shape(run_cli, tmp_path):
    w = write_workload(tmp_path / "two.yaml", unit_workload("l40s", requests=40, model=dict(TINY_MODEL, num_layers=2)))
    code, out, err = run_cli("plan", w, "--rate", "40", "--slo", "ttft_p99_ms=100", "--gpu", "l40s", "--pp", "2",
                             "--format", "json", *SMALL)
    assert code == 0, err
    assert json.loads(out)["candidates_by_shape"] == {"aggregated": 1, "pp": 1}
