"""The catalogue commands: `capsim gpus`, `models` and `engines` list what a workload can name,
and `capsim schema` prints the workload files' JSON Schema."""

import json
import sys

from capsim.cli.common import FormatOpt, TableFormat, out
from capsim.report.console import rich_table


def gpus(fmt: FormatOpt = TableFormat.table) -> None:
    """List the GPU catalogue: memory, bandwidth, dense peaks, price."""
    from capsim.report.listings import gpu_listing

    _listing(gpu_listing(), fmt)


def models(fmt: FormatOpt = TableFormat.table) -> None:
    """List the model catalogue with derived sizes (parameters, KV bytes per token, state)."""
    from capsim.report.listings import model_listing

    _listing(model_listing(), fmt)


def engines(fmt: FormatOpt = TableFormat.table) -> None:
    """List the serving-engine profiles: scheduling defaults, host overheads, kernel counts."""
    from capsim.report.listings import engine_listing

    _listing(engine_listing(), fmt)


def schema() -> None:
    """Print the JSON Schema of workload files (for editor completion and validation)."""
    from capsim.workload.schema import WorkloadConfig

    sys.stdout.write(json.dumps(WorkloadConfig.model_json_schema(), indent=2) + "\n")


def _listing(listing: tuple, fmt: TableFormat) -> None:
    title, columns, rows, data = listing
    if fmt is TableFormat.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        _print_rows(title, columns, rows, fmt)


def _print_rows(title: str, columns: list[str], rows: list[list], fmt: TableFormat) -> None:
    from capsim.results.text_tables import csv_table, markdown_table

    if fmt is TableFormat.markdown:
        sys.stdout.write(markdown_table(columns, rows) + "\n")
    elif fmt is TableFormat.csv:
        sys.stdout.write(csv_table(columns, rows))
    else:
        out.print(rich_table(title, columns, rows))
