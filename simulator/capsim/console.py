"""Text forms of results: vLLM's serving-benchmark block, capsim's extra lines, and plain
renderings (markdown, CSV) of row tables. No computation happens here."""

from __future__ import annotations

import csv
import io

WIDTH = 50


def _title(text: str, fill: str) -> str:
    return f"{text:{fill}^{WIDTH}}"


def _line(label: str, value) -> str:
    if isinstance(value, float):
        return f"{label:<40} {value:<10.2f}"
    return f"{label:<40} {value!s:<10}"


def result_block(s: dict) -> str:
    """The summary in vLLM's benchmark_serving layout (same line names), then capsim's lines."""
    out = [
        _title(" Serving Benchmark Result ", "="),
        _line("Successful requests:", s["completed"]),
        _line("Benchmark duration (s):", s["duration"]),
        _line("Total input tokens:", s["total_input_tokens"]),
        _line("Total generated tokens:", s["total_output_tokens"]),
        _line("Request throughput (req/s):", s["request_throughput"]),
    ]
    if "request_goodput" in s:
        out.append(_line("Request goodput (req/s):", s["request_goodput"]))
    out += [
        _line("Output token throughput (tok/s):", s["output_throughput"]),
        _line("Total Token throughput (tok/s):", s["total_token_throughput"]),
    ]
    for key, name, header in (("ttft", "TTFT", "Time to First Token"),
                              ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                              ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency")):
        out.append(_title(header, "-"))
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p99", "P99")):
            out.append(_line(f"{label} {name} (ms):", s[f"{stat}_{key}_ms"]))
    out.append(_title(" capsim: requests and load ", "-"))
    out.append(_line("Arrived requests:", s["arrived"]))
    reasons = ", ".join(f"{k} {v}" for k, v in s["rejected_reasons"].items())
    out.append(_line("Rejected requests:", f"{s['rejected']}" + (f" ({reasons})" if reasons else "")))
    out.append(_line("Unfinished at the horizon:", s["unfinished"]))
    out.append(_line("Mean queueing delay (ms):", s["mean_queueing_ms"]))
    out.append(_line("Forward passes (steps):", s["num_steps"]))
    out.append(_line("Mean / max batch size:", f"{s['mean_batch_size']:.1f} / {s['max_batch_size']}"))
    out.append(_line("Slot utilisation (%):", 100 * s["slot_utilisation"]))
    out.append(_line("GPU busy (%):", 100 * s["gpu_busy_fraction"]))
    out.append(_line("MFU / MBU (%):", f"{100 * s['mfu']:.1f} / {100 * s['mbu']:.1f}"))
    b = s["bound_fraction"]
    out.append(_line("Time compute/memory/overhead-bound (%):",
                     f"{100 * b['compute']:.0f} / {100 * b['memory']:.0f} / {100 * b['overhead']:.0f}"))
    out.append(_line("Preemptions (recomputed tokens):", f"{s['preemptions']} ({s['recomputed_tokens']})"))
    out.append(_title(" capsim: KV cache ", "-"))
    setup = s.get("setup", {})
    if setup:
        out.append(_line("KV capacity (tokens):", f"{setup['kv_capacity_tokens']:,} ({setup['num_gpu_blocks']:,} "
                         f"{'blocks' if setup['allocator'] == 'paged' else 'token slots'})"))
    out.append(_line("KV utilisation (% of held, storing):", 100 * s["kv_utilisation"]))
    out.append(_line("KV internal waste (%):", 100 * s["kv_internal_waste"]))
    out.append(_line("KV reserved but unused (%):", 100 * s["kv_reserved_unused"]))
    out.append(_line("KV capacity in use (% time-avg):", 100 * s["kv_capacity_utilisation"]))
    out.append("=" * WIDTH)
    return "\n".join(out)


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


def rich_table(title: str, columns: list[str], rows: list[list], caption: str | None = None):
    """A Rich table (text columns left, numbers right; ints with thousands separators). Cells fold
    rather than being cut, so a table narrower than its text (piped: 80 columns) still prints whole."""
    from rich.table import Table

    table = Table(title=title, caption=caption, caption_justify="left")
    for c in columns:
        left = c in ("model", "name", "format", "allocator", "scheduler", "bound", "gpu", "kind")
        table.add_column(c, justify="left" if left else "right", overflow="fold")
    for row in rows:
        table.add_row(*["" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
                        for v in row])
    return table


def dict_table(title: str, rows: list[dict]):
    """A Rich table of dict rows, columns in first-seen order across all rows."""
    columns = list(dict.fromkeys(k for r in rows for k in r)) or ["(no rows)"]
    return rich_table(title, columns, [[r.get(c) for c in columns] for r in rows])
