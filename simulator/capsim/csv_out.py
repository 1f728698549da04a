"""CSV files of the record frames, byte for byte what `DataFrame.to_csv(index=False)` writes, in
about a third of the time.

pandas formats a float column through numpy's string conversion and then hands every field to the
csv module; for bench-10k's 237,528-row step table that took longer than the simulation. Here each
column becomes a list of strings with Python's own formatting (`float.__repr__` is the same
shortest round-trip form numpy and pandas print), and rows are joined in chunks, so memory stays
bounded on million-row tables.

Written the same as pandas: floats in shortest round-trip form with NaN as an empty field, integers
as digits, categoricals and strings as their text with missing values empty, booleans as
True/False, and a field quoted (doubling its quotes) only when it holds a comma, a quote or a line
break. A frame with a column of any other dtype (or duplicate column names) is written by pandas.
"""

from __future__ import annotations

import os
from typing import TextIO

import numpy as np
import pandas as pd

ROWS_PER_CHUNK = 20_000
_NEEDS_QUOTES = (",", '"', "\n", "\r")


def write_csv(frame: pd.DataFrame, fh: TextIO) -> None:
    """Write `frame` to the open text file as `frame.to_csv(fh, index=False)` would."""
    columns = [frame[c] for c in frame.columns] if frame.columns.is_unique else None
    if columns is None or not all(_supported(col) for col in columns):
        frame.to_csv(fh, index=False)
        return
    end = os.linesep
    fh.write(",".join(_quote(str(c)) for c in frame.columns) + end)
    for start in range(0, len(frame), ROWS_PER_CHUNK):
        fields = [_fields(col.iloc[start:start + ROWS_PER_CHUNK]) for col in columns]
        fh.write(end.join(map(",".join, zip(*fields))) + end)


def _supported(col: pd.Series) -> bool:
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return dtype.categories.dtype.kind in "OTU"
    if isinstance(dtype, pd.StringDtype):
        return True
    if pd.api.types.is_extension_array_dtype(dtype):
        return dtype.kind in "iub"  # nullable Int/UInt/boolean
    return dtype.kind in "iub" or (dtype.kind == "f" and dtype.itemsize == 8)


def _fields(col: pd.Series) -> list[str]:
    """One column's fields, as text."""
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        names = [_quote(str(c)) for c in dtype.categories] + [""]
        return [names[code] for code in col.cat.codes.to_numpy().tolist()]  # code -1 (missing) -> ""
    if isinstance(dtype, pd.StringDtype) or pd.api.types.is_extension_array_dtype(dtype):
        values = col.to_numpy(dtype=object, na_value=None).tolist()
        return ["" if v is None else _quote(str(v)) for v in values]
    values = col.to_numpy()
    if dtype.kind == "f":
        return _float_fields(values)
    if dtype.kind == "b":
        return list(map(str, values.tolist()))
    return _int_fields(values)


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
