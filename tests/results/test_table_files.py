"""The run's tables as files (results.table_files, `capsim run --out DIR [--steps] [--format]`):
Parquet holds what the CSV holds, the step table only when asked, summary.json says what was
written, and `capsim plot` reads CSV, Parquet and older folders."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from capsim.api import simulate
from capsim.errors import CapsimError
from capsim.report.run_figures import read_run
from capsim.results.csv_out import Labels, MaybeInts
from capsim.results.table_files import check_format, read_table_file, write_table_file
from helpers import run_main, workload, write_workload


@pytest.fixture
def run(round_gpu_file):
    return simulate(workload(round_gpu_file, requests=40, replicas=2, num_gpu_blocks=150))


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal values column by column, labels compared as text (CSV reads them as strings)."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for name in a.columns:
        x, y = a[name], b[name]
        if isinstance(x.dtype, pd.CategoricalDtype) or isinstance(y.dtype, pd.CategoricalDtype) or x.dtype == object:
            assert x.astype(object).where(x.notna(), "").astype(str).tolist() == \
                y.astype(object).where(y.notna(), "").astype(str).tolist(), name
        else:
            np.testing.assert_array_equal(x.to_numpy(float, na_value=np.nan), y.to_numpy(float, na_value=np.nan), name)


def test_parquet_holds_what_the_csv_holds(run, tmp_path):
    pytest.importorskip("pyarrow")  # the `parquet` extra
    csv = run.write(tmp_path / "csv", table_format="csv")
    pq = run.write(tmp_path / "pq", table_format="parquet")
    assert [p.name for p in pq] == ["summary.json", "requests.parquet", "steps.parquet"]
    for c, p in zip(csv[1:], pq[1:]):
        _same(read_table_file(c), read_table_file(p))
    steps = read_table_file(pq[2])
    assert steps["bound"].dtype == "category" and len(steps) == run.summary["num_steps"]
    assert json.loads(pq[0].read_text())["files"] == {"format": "parquet", "requests": "requests.parquet",
                                                      "steps": "steps.parquet"}


def test_parquet_typed_columns_parts_and_note(tmp_path):
    pytest.importorskip("pyarrow")  # the `parquet` extra
    part = {"x": np.array([1.5, np.nan]), "n": np.array([1, 2], np.int16), "flag": np.array([True, False]),
            "label": Labels(np.array([1, -1]), ("a", "b")), "user": MaybeInts(np.array([3, 0]), np.array([False, True]))}
    path = write_table_file(tmp_path, "t", [part, part], tuple(part), "parquet", note="one row per thing")
    import pyarrow.parquet as pq

    assert pq.read_schema(path).metadata[b"capsim_note"] == b"one row per thing"
    frame = read_table_file(path)
    assert len(frame) == 4 and frame["n"].dtype == np.int16 and frame["flag"].dtype == bool
    assert frame["label"].astype(object).tolist()[:2] == ["b", np.nan] and frame["user"].isna().tolist()[:2] == [False, True]
    csv = write_table_file(tmp_path, "t", [part], tuple(part), "csv", note="one row per thing")
    assert csv.read_text().startswith("# one row per thing\n") and len(read_table_file(csv)) == 2


def test_steps_only_when_asked_and_summary_says_so(run, tmp_path):
    paths = run.write(tmp_path / "o", steps=False)
    assert [p.name for p in paths] == ["summary.json", "requests.csv"]
    assert json.loads(paths[0].read_text())["files"] == {"format": "csv", "requests": "requests.csv", "steps": None}
    summary, requests, steps = read_run(tmp_path / "o")
    assert steps is None and len(requests) == run.summary["arrived"] and summary["setup"] == run.summary["setup"]


def test_cli_format_steps_and_plot_read_both(round_gpu_file, tmp_path):
    pytest.importorskip("pyarrow")  # the `parquet` extra
    path = write_workload(tmp_path / "w.yaml", workload(round_gpu_file, requests=30))
    code, _, err = run_main("run", path, "--out", tmp_path / "pq", "--format", "parquet", "--steps")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == ["capsim-output.json", "requests.parquet",
                                                                   "steps.parquet", "summary.json"]
    code, _, err = run_main("plot", tmp_path / "pq")
    assert code == 0 and "kv_memory.png" in err and "no step table" not in err, err
    code, _, err = run_main("run", path, "--out", tmp_path / "csv")
    assert code == 0 and not (tmp_path / "csv" / "steps.csv").exists()
    code, _, err = run_main("plot", tmp_path / "csv")
    assert code == 0 and "latency_cdf.png" in err and "kv_memory" not in err.split("note:")[0] and "--steps" in err
    code, _, err = run_main("run", path, "--steps")
    assert code == 2 and "--out" in err
    code, _, err = run_main("run", path, "--out", tmp_path / "x", "--format", "xlsx")
    assert code == 2 and "csv, parquet" in err and not (tmp_path / "x").exists()


def test_older_folder_with_a_noted_steps_csv_still_reads(run, tmp_path):
    """A folder from before `files` and --format: summary.json without it, steps.csv opening with
    its '#' note line."""
    folder = tmp_path / "old"
    run.write(folder)
    summary = json.loads((folder / "summary.json").read_text())
    del summary["files"]
    (folder / "summary.json").write_text(json.dumps(summary))
    text = (folder / "steps.csv").read_text()
    (folder / "steps.csv").write_text("# capsim: one row per macro-step (...)\n" + text)
    _, requests, steps = read_run(folder)
    assert len(steps) == run.summary["num_steps"] and len(requests) == run.summary["arrived"]


def test_missing_pyarrow_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(CapsimError, match=r"capsim\[parquet\]"):
        check_format("parquet")
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    with pytest.raises(CapsimError, match="parquet"):
        read_table_file(tmp_path / "t.parquet")
    check_format("csv")


def test_damaged_parquet_is_a_clear_error(tmp_path):
    pytest.importorskip("pyarrow")  # the `parquet` extra
    (tmp_path / "steps.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CapsimError, match="damaged or not a Parquet table"):
        read_table_file(tmp_path / "steps.parquet")


def test_a_per_macro_step_table_in_parquet_says_so(round_gpu_file, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")  # the `parquet` extra
    import pyarrow.parquet as pq
    from capsim.sim import step_log

    monkeypatch.setattr(step_log, "LARGE_RUN_STEPS", 10)
    run = simulate(workload(round_gpu_file))
    path = run.write(tmp_path / "o", table_format="parquet")[2]
    assert pq.read_schema(path).metadata[b"capsim_note"].startswith(b"capsim: one row per macro-step")
    table = read_table_file(path)
    assert table["steps"].sum() == run.summary["num_steps"] and table["end_s"].tolist() == run.steps["end_s"].tolist()
