"""Small tables as text: GitHub markdown and CSV, for `capsim tables`, `capsim validate` and the
planning tables. Rows are lists of plain values; integers get thousands separators in markdown."""

from __future__ import annotations

import csv
import io


def markdown_table(columns: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def csv_table(columns: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buf.getvalue()
