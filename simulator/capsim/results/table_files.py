"""A run's record tables as files, in CSV (csv_out: pandas' to_csv text, core install) or Parquet
(pyarrow, the optional extra `parquet`), and read back from either.

Parquet keeps the columns typed (labels as dictionary columns, missing integers as nulls) and
compressed, so bench-10k's per-step table is a few MB written in a fraction of the CSV's time.
A table too large to hold whole (a large run's step table, a part at a time) becomes one Parquet
row group a part. A table's note (what a row is, for per-macro-step tables) is the CSV's first
line, starting with '#', and the Parquet file's `capsim_note` metadata.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from capsim.errors import CapsimError
from capsim.results.csv_out import Column, Labels, MaybeInts, write_parts

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("csv", "parquet")
SUFFIX = {"csv": ".csv", "parquet": ".parquet"}
NOTE_KEY = b"capsim_note"


def check_format(table_format: str, option: str = "--format") -> None:
    """Refuse an unknown format, or Parquet where pyarrow is not installed, before any work."""
    if table_format not in FORMATS:
        raise CapsimError(f"{option} {table_format!r}: not a table format; use one of {', '.join(FORMATS)}.")
    if table_format == "parquet":
        _pyarrow()


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise CapsimError("--format parquet needs pyarrow, which is not installed: install capsim's `parquet` extra "
                          "(pip install 'capsim[parquet]'), or use --format csv.") from None
    return pyarrow


def write_table_file(folder: Path, stem: str, parts: Iterable[Mapping[str, Column]], names: Sequence[str],
                     table_format: str = "csv", note: str | None = None) -> Path:
    """Write the tables `parts` (each with the columns `names`) one after another as
    folder/stem.csv or .parquet; return its path."""
    path = folder / f"{stem}{SUFFIX[table_format]}"
    if table_format == "parquet":
        _write_parquet(path, parts, names, note)
        return path
    with open(path, "w", newline="") as fh:
        if note:
            fh.write(f"# {note}{os.linesep}")
        write_parts(parts, fh, names)
    return path


def _write_parquet(path: Path, parts: Iterable[Mapping[str, Column]], names: Sequence[str], note: str | None) -> None:
    pa = _pyarrow()
    writer = None
    try:
        for part in parts:
            table = pa.table({name: _arrow(pa, part[name]) for name in names})
            if writer is None:
                schema = table.schema.with_metadata({NOTE_KEY: note.encode()} if note else {})
                writer = pa.parquet.ParquetWriter(path, schema, compression="zstd")
            writer.write_table(table.replace_schema_metadata(writer.schema.metadata))
        if writer is None:  # no parts: an empty table still has its columns
            empty = {name: pa.array([], pa.float64()) for name in names}
            pa.parquet.write_table(pa.table(empty), path)
    finally:
        if writer is not None:
            writer.close()


def _arrow(pa, col: Column):
    """One column as an Arrow array: labels as dictionary (missing where the code is -1),
    MaybeInts with nulls, numpy columns as they are."""
    if isinstance(col, Labels):
        codes = np.asarray(col.codes, dtype=np.int32)
        indices = pa.array(codes, mask=codes < 0)
        return pa.DictionaryArray.from_arrays(indices, pa.array([str(n) for n in col.names], pa.string()))
    if isinstance(col, MaybeInts):
        return pa.array(col.values, mask=np.asarray(col.missing, dtype=bool))
    return pa.array(np.asarray(col))


def find_table(folder: Path, stem: str) -> Path | None:
    """folder/stem.csv or folder/stem.parquet, whichever exists (None if neither)."""
    for suffix in SUFFIX.values():
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def read_table_file(path: Path) -> pd.DataFrame:
    """A saved table (CSV, with or without a '#' note line, or Parquet) as a DataFrame; a damaged
    or unreadable one is a CapsimError naming it."""
    import pandas as pd

    path = Path(path)
    try:
        if path.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise CapsimError(f"{path}: a Parquet table, and pyarrow is not installed: install capsim's `parquet` "
                                  "extra (pip install 'capsim[parquet]') to read it.") from None
            return pq.read_table(path).to_pandas()
        with open(path, encoding="utf-8") as fh:
            notes = fh.read(1) == "#"  # a large run's steps.csv opens with one '#' line saying what a row is
        return pd.read_csv(path, skiprows=1 if notes else 0)
    except OSError as exc:
        raise CapsimError(f"{path}: cannot read it ({exc.strerror or exc}).") from None
    except (ValueError, pd.errors.ParserError) as exc:  # parser errors, empty files, undecodable bytes
        raise CapsimError(f"{path}: damaged or not a {'Parquet' if path.suffix == '.parquet' else 'CSV'} table "
                          f"({str(exc)[:100]}); write it again with capsim.") from None
