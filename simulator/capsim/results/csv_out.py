"""CSV files of the record tables, byte for byte what pandas' `DataFrame.to_csv(index=False)` writes
for the same table, in about a third of the time and without importing pandas.

pandas formats a float column through numpy's string conversion and then hands every field to the
csv module; for bench-10k's 237,528-row step table that took longer than the simulation. Here each
column becomes a list of strings with Python's own formatting (`float.__repr__` is the same
shortest round-trip form numpy and pandas print), and rows are joined in chunks, so memory stays
bounded on million-row tables.

`write_table` takes the columns as the records keep them: numpy arrays (floats with NaN written
empty, integers, booleans as True/False), `Labels` (codes into names, -1 empty: what a pandas
categorical writes) and `MaybeInts` (integers with missing ones empty: pandas' nullable Int).
`as_dataframe` turns such a table into the DataFrame whose to_csv text that is. A field is quoted
(its quotes doubled) only when it holds a comma, a quote or a line break.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

ROWS_PER_CHUNK = 20_000
_NEEDS_QUOTES = (",", '"', "\n", "\r")


@dataclass(frozen=True)
class Labels:
    """A text column stored as codes into `names`; code -1 is a missing (empty) field."""

    codes: np.ndarray
    names: Sequence[str]

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: slice) -> Labels:
        return Labels(self.codes[rows], self.names)


@dataclass(frozen=True)
class MaybeInts:
    """An integer column with missing values (written empty where `missing` is set)."""

    values: np.ndarray
    missing: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, rows: slice) -> MaybeInts:
        return MaybeInts(self.values[rows], self.missing[rows])


Column = np.ndarray | Labels | MaybeInts


def write_table(columns: Mapping[str, Column], fh: TextIO) -> None:
    """Write the columns (all of one length) as CSV with a header line, as pandas would."""
    write_parts([columns], fh, tuple(columns))


def write_parts(parts: Iterable[Mapping[str, Column]], fh: TextIO, names: Sequence[str]) -> None:
    """Write tables with the columns `names` one after another as one CSV, the header once: a
    table too large to hold whole is written as it is made."""
    end = os.linesep
    fh.write(",".join(_quote(str(name)) for name in names) + end)
    for columns in parts:
        rows = len(columns[names[0]]) if names else 0
        for start in range(0, rows, ROWS_PER_CHUNK):
            part = slice(start, start + ROWS_PER_CHUNK)
            fields = [_fields(columns[name][part]) for name in names]
            fh.write(end.join(map(",".join, zip(*fields))) + end)


def as_dataframe(columns: Mapping[str, Column], text: tuple[str, ...] = (),
                 codes: tuple[str, ...] = ()) -> pd.DataFrame:
    """The same table as a DataFrame (pandas imported here): Labels columns categorical, or plain
    text ("" where missing) for those named in `text`, or their integer codes for those in `codes`;
    MaybeInts as nullable integers. Its to_csv text is what write_table writes."""
    import pandas as pd

    frame = {}
    for name, col in columns.items():
        if isinstance(col, Labels):
            if name in codes:
                col = col.codes
            elif name in text:
                col = np.array(("", *col.names), dtype=object)[col.codes + 1]
            else:
                col = pd.Categorical.from_codes(col.codes, col.names)
        elif isinstance(col, MaybeInts):
            col = pd.arrays.IntegerArray(col.values, col.missing)
        frame[name] = col
    return pd.DataFrame(frame, copy=False)


def _fields(col: Column) -> list[str]:
    """One column's fields, as text."""
    if isinstance(col, Labels):
        names = [_quote(str(name)) for name in col.names] + [""]
        return [names[code] for code in np.asarray(col.codes).tolist()]  # code -1 (missing) -> ""
    if isinstance(col, MaybeInts):
        text = _fields(col.values)
        for i in np.flatnonzero(col.missing).tolist():
            text[i] = ""
        return text
    if col.dtype.kind == "f":
        return _float_fields(col)
    if col.dtype.kind == "b":
        return list(map(str, col.tolist()))
    return _int_fields(col)


def _int_fields(values: np.ndarray) -> list[str]:
    """Integers as digits; a narrow range (counts, slots, queue lengths) through a lookup table."""
    if not len(values):
        return []
    low, high = int(values.min()), int(values.max())
    if high - low <= max(1024, len(values) // 4):
        table = np.array([str(v) for v in range(low, high + 1)], dtype=object)
        return table[values - values.min()].tolist()  # offsets in the column's own dtype: no overflow
    return list(map(str, values.tolist()))


def _float_fields(values: np.ndarray) -> list[str]:
    """Shortest round-trip text; whole numbers below 1e16 (FLOPs and bytes mostly are) take the
    integer path, since repr(x) is then the integer's digits plus '.0'."""
    whole = (np.abs(values) < 1e16) & (values == np.trunc(values)) & ~((values == 0) & np.signbit(values))
    if not whole.any():
        text = list(map(float.__repr__, values.tolist()))
    else:
        text = np.empty(len(values), dtype=object)
        text[whole] = [digits + ".0" for digits in _int_fields(values[whole].astype(np.int64))]
        rest = ~whole
        text[rest] = list(map(float.__repr__, values[rest].tolist()))
        text = text.tolist()
    for i in np.flatnonzero(np.isnan(values)).tolist():
        text[i] = ""
    return text


def _quote(text: str) -> str:
    if any(ch in text for ch in _NEEDS_QUOTES):
        return '"' + text.replace('"', '""') + '"'
    return text
