"""simulate(): overrides, resolution against the catalogues, and the article's KV contrast."""

import subprocess
import sys

import pytest
from capsim.errors import CapsimError
from capsim.api import apply_overrides, resolve, simulate
from helpers import REPO, workload

WORKLOADS = REPO / "workloads"


def test_overrides_are_validated_like_the_file(round_gpu_file):
    w = workload(round_gpu_file)
    w2 = apply_overrides(w, "w.yaml", rate=7.0, scheduler="chunked", max_num_seqs=3, seed=9, kv_cache="fp8")
    assert w2.arrivals.rate_per_s == 7.0 and w2.scheduler.kind == "chunked" and w2.scheduler.max_num_seqs == 3
    assert w2.seed == 9 and w2.kv_cache == "fp8"
    with pytest.raises(CapsimError, match=r"w.yaml \(with command-line options\): field 'arrivals.rate_per_s'"):
        apply_overrides(w, "w.yaml", rate=-1.0)
    closed = workload(round_gpu_file, arrivals={"kind": "closed_loop", "users": 2})
    with pytest.raises(CapsimError, match="--rate works with poisson, gamma and constant"):
        apply_overrides(closed, "w.yaml", rate=2.0)


def test_resolution_errors_name_the_problem(round_gpu_file):
    with pytest.raises(CapsimError, match="unknown KV-cache format 'fp7'"):
        resolve(workload(round_gpu_file, kv_cache="fp7"), "w.yaml")
    with pytest.raises(CapsimError, match="q4_k_m"):  # a weights-only format is not a KV format
        resolve(workload(round_gpu_file, kv_cache="q4_k_m"), "w.yaml")
    with pytest.raises(CapsimError, match="w.yaml: field 'model': unknown model 'lama-2-7b'. Did you mean: llama-2-7b"):
        resolve(workload(round_gpu_file, model="lama-2-7b"), "w.yaml")
    with pytest.raises(CapsimError, match="w.yaml: field 'gpu': unknown GPU 'rtx4909'. Did you mean: rtx4090"):
        resolve(workload("rtx4909"), "w.yaml")
    with pytest.raises(CapsimError, match="no GPU given"):
        resolve(workload(None), "w.yaml")
    with pytest.raises(CapsimError, match="leaves no memory for the KV cache"):
        resolve(workload("rtx4090", model="llama-3.1-70b", weights="bf16"), "w.yaml")
    with pytest.raises(CapsimError, match="max_num_batched_tokens' is 512, below max_model_len 4096"):
        resolve(workload(round_gpu_file, scheduler={"kind": "continuous", "max_num_batched_tokens": 512}), "w.yaml")


def test_paged_vs_contiguous_reproduces_the_article():
    """vLLM paper (seeds/004): contiguous max-length reservations store real tokens in roughly
    20-40% of the KV memory they hold; paging raises that above 95%."""
    path = WORKLOADS / "paged-vs-contiguous.yaml"
    paged = simulate(path, requests=600).summary
    contiguous = simulate(path, requests=600, allocator="contiguous").summary
    assert paged["kv_utilisation"] > 0.95
    assert 0.20 <= contiguous["kv_utilisation"] <= 0.40
    assert paged["max_batch_size"] > 3 * contiguous["max_batch_size"]  # more requests fit


def test_bundled_workloads_load_and_run_briefly():
    for path in sorted(WORKLOADS.glob("*.yaml")):
        result = simulate(path, requests=30)
        s = result.summary
        assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"] > 0, path.name


def test_write_creates_the_three_files(tmp_path, round_gpu_file):
    import json

    import pandas as pd

    r = simulate(workload(round_gpu_file))
    paths = r.write(tmp_path / "out")
    assert [p.name for p in paths] == ["summary.json", "requests.csv", "steps.csv"]
    summary = json.loads(paths[0].read_text())
    assert summary["completed"] == 40 and summary["setup"]["model"] == "tiny"
    assert len(pd.read_csv(paths[1])) == 40
    steps = pd.read_csv(paths[2])
    assert len(steps) == summary["num_steps"] and set(steps["bound"]) <= {"compute", "memory", "overhead"}


def test_a_per_macro_step_table_is_written_after_a_line_saying_so(tmp_path, round_gpu_file, monkeypatch):
    import pandas as pd
    from capsim.sim import step_log

    monkeypatch.setattr(step_log, "LARGE_RUN_STEPS", 10)
    r = simulate(workload(round_gpu_file))
    steps_csv = r.write(tmp_path / "out")[2]
    first = steps_csv.read_text().splitlines()[0]
    assert r.steps_per_row and first.startswith("# capsim: one row per macro-step")
    table = pd.read_csv(steps_csv, comment="#")
    assert table["steps"].sum() == r.summary["num_steps"] and list(table.columns) == list(r.steps.columns)
    assert table["end_s"].tolist() == r.steps["end_s"].tolist()  # every digit round-trips


def test_a_run_builds_its_tables_only_when_asked():
    # The summary and the files come from numpy columns; pandas is imported when a table is first
    # used (so `capsim run`, with or without --out, never imports it), and the tables hold what
    # the summary counted.
    code = ("import sys, tempfile, pathlib; from capsim.api import simulate; "
            "r = simulate('workloads/chat.yaml', requests=30); r.write(pathlib.Path(tempfile.mkdtemp())); "
            "assert 'pandas' not in sys.modules, 'pandas imported by the run or by writing its files'; "
            "assert len(r.requests) == r.summary['arrived'] == 30 and 'pandas' in sys.modules; "
            "assert len(r.steps) == r.summary['num_steps']; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO, capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_run_result_crosses_processes_whole(round_gpu_file):
    # run --seeds hands the first seed's RunResult back from a worker process: it must pickle.
    import pickle
    w = workload(round_gpu_file, engine="vllm", scheduler={"kind": "chunked", "max_num_batched_tokens": 64})
    result = simulate(w)
    copy = pickle.loads(pickle.dumps(result))
    assert copy.fingerprint() == result.fingerprint()
    assert len(copy.prefill_chunks) == len(result.prefill_chunks) > 40  # prompts of up to 200 in 64-token chunks
