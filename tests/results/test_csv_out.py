"""csv_out.write_table writes exactly what pandas' to_csv(index=False) writes for the same table
(as_dataframe), for every kind of column the records keep: floats, integers of every width, booleans,
labels and nullable integers."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from capsim.results import csv_out
from capsim.results.csv_out import Labels, MaybeInts, as_dataframe, write_table
from capsim.results.summary import BOUND_NAMES
from helpers import REPO


def _both(table: dict, **as_frame) -> tuple[str, str]:
    """(pandas' text of the table's DataFrame, write_table's text)."""
    expected, got = io.StringIO(), io.StringIO()
    as_dataframe(table, **as_frame).to_csv(expected, index=False)
    write_table(table, got)
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
    expected, got = _both({"x": values, "y": values[::-1] * 1e-9})
    assert got == expected


def test_integers_bools_and_narrow_and_wide_ranges_match():
    n = 3000
    table = {
        "small": np.arange(n, dtype=np.int16) % 7, "negative": np.arange(n, dtype=np.int32) - 1500,
        "wide": np.arange(n, dtype=np.int64) * 7_919_000_003, "unsigned": np.arange(n, dtype=np.uint8),
        "flag": np.arange(n) % 3 == 0, "empty_range": np.zeros(n, dtype=np.int8),
        "top_of_uint64": np.arange(n, dtype=np.uint64) + np.uint64(2**64 - n),
        "bottom_of_int64": np.arange(n, dtype=np.int64) + np.iinfo(np.int64).min,
    }
    expected, got = _both(table)
    assert got == expected


def _labelled() -> dict:
    return {
        "id": np.arange(6, dtype=np.int64),
        "cls": Labels(np.array([0, 1, -1, 2, 0, 1], dtype=np.int16), ["a", "b,c", 'say "hi"']),
        "reason": Labels(np.array([-1, 0, -1, 1, -1, -1]), ["too_long", "two\nlines"]),
        "user": MaybeInts(np.array([3, 0, 7, 0, 1, 2], dtype=np.int32), np.array([0, 1, 0, 1, 0, 0], dtype=bool)),
        "t": np.array([0.5, np.nan, 2.0, 1e-7, -0.0, 3e20]),
    }


def test_labels_missing_values_and_quoting_match():
    for as_frame in ({}, {"text": ("reason",)}):  # categorical, or plain text with "" for missing
        expected, got = _both(_labelled(), **as_frame)
        assert got == expected
    assert '"b,c"' in got and '"say ""hi"""' in got and '"two\nlines"' in got


def test_as_dataframe_keeps_text_codes_and_missing_values():
    table = _labelled() | {"bound": Labels(np.array([0, 1, 2, 1, 0, 2], dtype=np.int8), BOUND_NAMES)}
    frame = as_dataframe(table, text=("reason",), codes=("bound",))
    assert frame["reason"].tolist() == ["", "too_long", "", "two\nlines", "", ""]
    assert frame["bound"].tolist() == [0, 1, 2, 1, 0, 2]
    assert isinstance(frame["cls"].dtype, pd.CategoricalDtype) and frame["cls"].isna().tolist()[2]
    assert frame["user"].isna().tolist() == [False, True, False, True, False, False]


def test_rows_are_written_in_chunks_with_the_same_text(monkeypatch):
    monkeypatch.setattr(csv_out, "ROWS_PER_CHUNK", 7)
    table = {"i": np.arange(50), "x": np.linspace(0, 1, 50), "c": Labels(np.arange(50) % 2, ["p", "q"])}
    expected, got = _both(table)
    assert got == expected


def test_empty_tables_match():
    for table in ({"a": np.array([], dtype=np.int64), "b": np.array([], dtype=float)},
                  {"a": Labels(np.array([], dtype=np.int8), ["x"])}):
        expected, got = _both(table)
        assert got == expected


def test_a_runs_files_are_what_pandas_writes_for_its_tables(tmp_path):
    from capsim.api import simulate

    result = simulate(REPO / "workloads" / "chat.yaml", requests=300)
    _, requests_csv, steps_csv = result.write(tmp_path)
    steps = result.steps.copy()
    steps["bound"] = pd.Categorical.from_codes(steps["bound"], BOUND_NAMES)
    for frame, path in ((result.requests, requests_csv), (steps, steps_csv)):
        expected = io.StringIO()
        frame.to_csv(expected, index=False)
        assert path.read_text() == expected.getvalue()
        assert path.read_text().count("\n") == len(frame) + 1


def test_parts_written_one_after_another_make_the_whole_table():
    # A large run's steps.csv is written a part at a time (write_parts): one header, then each
    # part's rows, the same text as the joined table; an empty part adds nothing.
    values = _floats()
    labels = Labels(np.arange(len(values)) % 3 - 1, BOUND_NAMES)
    table = {"x": values, "n": np.arange(len(values), dtype=np.int32), "bound": labels}
    cuts = [0, 5, 5, 2500, len(values)]
    parts = [{name: col[a:b] for name, col in table.items()} for a, b in zip(cuts, cuts[1:])]
    whole, pieces = io.StringIO(), io.StringIO()
    write_table(table, whole)
    csv_out.write_parts(parts, pieces, tuple(table))
    assert pieces.getvalue() == whole.getvalue() and pieces.getvalue().count("\n") == len(values) + 1
