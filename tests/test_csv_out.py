"""csv_out writes exactly what pandas' to_csv(index=False) writes: write_csv for DataFrames of every
dtype the records use (pandas for the rest), write_table for the records' own columns (labels, nullable
integers), whose DataFrame is as_dataframe."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from capsim import csv_out
from capsim.csv_out import Labels, MaybeInts, as_dataframe, write_csv, write_table


def _both(frame: pd.DataFrame) -> tuple[str, str]:
    expected, got = io.StringIO(), io.StringIO()
    frame.to_csv(expected, index=False)
    write_csv(frame, got)
    return expected.getvalue(), got.getvalue()


def _floats() -> np.ndarray:
    rng = np.random.default_rng(7)
    scattered = rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 30, 4000)
    whole = np.round(rng.standard_normal(2000) * 1e9)
    edges = [0.0, -0.0, 1.0, -3.0, 0.1, 1 / 3, 1e-4, 1e-5, 1e15, 1e16, 9999999999999998.0, -9999999999999998.0,
             2.0**53, 2.0**53 + 2, 123456789012345678.0, 5e-324, 1.7976931348623157e308, np.inf, -np.inf, np.nan]
    return np.concatenate([scattered, whole, edges])


def test_floats_match_pandas_to_the_last_digit():
    values = _floats()
    expected, got = _both(pd.DataFrame({"x": values, "y": values[::-1] * 1e-9}))
    assert got == expected


def test_integers_bools_and_narrow_and_wide_ranges_match():
    n = 3000
    frame = pd.DataFrame({
        "small": np.arange(n, dtype=np.int16) % 7, "negative": np.arange(n, dtype=np.int32) - 1500,
        "wide": np.arange(n, dtype=np.int64) * 7_919_000_003, "unsigned": np.arange(n, dtype=np.uint8),
        "flag": np.arange(n) % 3 == 0, "empty_range": np.zeros(n, dtype=np.int8),
        "top_of_uint64": np.arange(n, dtype=np.uint64) + np.uint64(2**64 - n),
        "bottom_of_int64": np.arange(n, dtype=np.int64) + np.iinfo(np.int64).min,
    })
    expected, got = _both(frame)
    assert got == expected


def test_missing_values_categories_strings_and_quoting_match():
    frame = pd.DataFrame({
        "cls": pd.Categorical(["a", "b,c", None, 'say "hi"', "a"]),
        "reason": pd.array([None, "exceeds_kv_capacity", "two\nlines", "", None], dtype="string"),
        "user": pd.array([1, None, 3, None, 5], dtype="Int32"),
        "ok": pd.array([True, None, False, True, None], dtype="boolean"),
        "t": [0.5, np.nan, 2.0, np.nan, -0.0],
    })
    expected, got = _both(frame)
    assert got == expected
    assert '"b,c"' in got and '"say ""hi"""' in got and '"two\nlines"' in got


def test_rows_are_written_in_chunks_with_the_same_text(monkeypatch):
    monkeypatch.setattr(csv_out, "ROWS_PER_CHUNK", 7)
    frame = pd.DataFrame({"i": np.arange(50), "x": np.linspace(0, 1, 50),
                          "c": pd.Categorical(["p", "q"] * 25)})
    expected, got = _both(frame)
    assert got == expected


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"a": np.array([0.1, 0.2], dtype=np.float32)}),   # float32 prints its own shortest form
    pd.DataFrame({"a": [{"x": 1}, None]}),                            # objects
    pd.DataFrame([[1, 2]], columns=["a", "a"]),                        # duplicate names
    pd.DataFrame({"a": pd.to_datetime(["2026-01-01"])}),               # datetimes
    pd.DataFrame(),                                                    # no columns at all
], ids=["float32", "object", "duplicate-columns", "datetime", "no-columns"])
def test_other_frames_are_written_by_pandas(frame):
    expected, got = _both(frame)
    assert got == expected


def test_empty_frames_match():
    for frame in (pd.DataFrame({"a": np.array([], dtype=np.int64), "b": np.array([], dtype=float)}),
                  pd.DataFrame({"a": pd.Categorical([])})):
        expected, got = _both(frame)
        assert got == expected


def test_labels_and_maybe_ints_write_what_their_dataframe_writes():
    table = {
        "id": np.arange(6, dtype=np.int64),
        "cls": Labels(np.array([0, 1, -1, 2, 0, 1], dtype=np.int16), ["a", "b,c", 'say "hi"']),
        "reason": Labels(np.array([-1, 0, -1, 1, -1, -1]), ["too_long", "two\nlines"]),
        "user": MaybeInts(np.array([3, 0, 7, 0, 1, 2], dtype=np.int32), np.array([0, 1, 0, 1, 0, 0], dtype=bool)),
        "bound": Labels(np.array([0, 1, 2, 1, 0, 2], dtype=np.int8), ["compute", "memory", "overhead"]),
        "t": np.array([0.5, np.nan, 2.0, 1e-7, -0.0, 3e20]),
    }
    for text, codes in (((), ()), (("reason",), ("bound",))):
        expected = io.StringIO()
        frame = as_dataframe(table, text=text, codes=codes)
        if codes:  # a column kept as codes in the DataFrame is written as its names
            frame["bound"] = pd.Categorical.from_codes(frame["bound"], table["bound"].names)
        frame.to_csv(expected, index=False)
        got = io.StringIO()
        write_table(table, got)
        assert got.getvalue() == expected.getvalue()
    assert as_dataframe(table, text=("reason",))["reason"].tolist() == ["", "too_long", "", "two\nlines", "", ""]
    assert as_dataframe(table)["user"].isna().tolist() == [False, True, False, True, False, False]


def test_a_runs_files_are_what_pandas_writes_for_its_tables(tmp_path):
    from capsim.simulation import simulate

    result = simulate(Path(__file__).resolve().parents[1] / "workloads" / "chat.yaml", requests=300)
    _, requests_csv, steps_csv = result.write(tmp_path)
    steps = result.steps.copy()
    steps["bound"] = pd.Categorical.from_codes(steps["bound"], ["compute", "memory", "overhead"])
    for frame, path in ((result.requests, requests_csv), (steps, steps_csv)):
        expected = io.StringIO()
        frame.to_csv(expected, index=False)
        assert path.read_text() == expected.getvalue()
        assert path.read_text().count("\n") == len(frame) + 1
