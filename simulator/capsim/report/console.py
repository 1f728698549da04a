"""Text forms of results: vLLM's serving-benchmark block, capsim's extra lines, and Rich tables
(markdown and CSV renderings are in capsim.results.text_tables). No computation happens here."""

from __future__ import annotations

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
    ]
    m = s.get("measurement")
    if m is not None:
        out.append(f"Rates and latencies over {_window_text(m)}:")
    out.append(_line("Request throughput (req/s):", s["request_throughput"]))
    if "request_goodput" in s:
        out.append(_line("Request goodput (req/s):", s["request_goodput"]))
    out += [
        _line("Output token throughput (tok/s):", s["output_throughput"]),
        _line("Total Token throughput (tok/s):", s["total_token_throughput"]),
    ]
    stats = [("mean", "Mean"), ("median", "Median")] + [
        (f"p{q}", f"P{q}") for q in s.get("percentiles", ["90", "99"]) if q != "50"]
    for key, name, header in (("ttft", "TTFT", "Time to First Token"),
                              ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                              ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency")):
        out.append(_title(header, "-"))
        for stat, label in stats:
            out.append(_line(f"{label} {name} (ms):", s[f"{stat}_{key}_ms"]))
    out += _load_lines(s)
    out += _kv_lines(s)
    if "disaggregated" in s:
        out += _pool_lines(s["disaggregated"])
    out.append("=" * WIDTH)
    return "\n".join(out)


def _window_text(m: dict) -> str:
    if not m["steady"]:
        return "the whole run"
    return (f"requests {m['warmup_requests'] + 1:,}-{m['warmup_requests'] + m['requests']:,}\n"
            f"(steady window: arrivals {m['start_s']:,.1f}-{m['end_s']:,.1f} s)")


def _load_lines(s: dict) -> list[str]:
    out = [_title(" capsim: requests and load ", "-")]
    whole = s.get("whole_run")
    if whole is not None:
        out.append(_line("Whole run: req/s, mean TTFT (ms):", f"{whole['request_throughput']:.2f}, "
                                                             f"{whole['mean_ttft_ms']:,.2f}"))
    out.append(_line("Arrived requests:", s["arrived"]))
    reasons = ", ".join(f"{k} {v}" for k, v in s["rejected_reasons"].items())
    out.append(_line("Rejected requests:", f"{s['rejected']}" + (f" ({reasons})" if reasons else "")))
    out.append(_line("Unfinished at the horizon:", s["unfinished"]))
    if "saturated" in s:
        out.append(_line("Saturated (queue keeps growing):", "yes" if s["saturated"] else "no"))
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
    return out


def _kv_lines(s: dict) -> list[str]:
    out = [_title(" capsim: KV cache ", "-")]
    setup = s.get("setup", {})
    if setup:
        out.append(_line("KV capacity (tokens):", f"{setup['kv_capacity_tokens']:,} ({setup['num_gpu_blocks']:,} "
                         f"{'blocks' if setup['allocator'] == 'paged' else 'token slots'})"))
    if s.get("max_seqs_at_mean_request") is not None:
        out.append(_line("Sequences that fit (mean request):", f"{s['max_seqs_at_mean_request']:,}"))
    out.append(_line("KV utilisation (% of held, storing):", 100 * s["kv_utilisation"]))
    out.append(_line("KV internal waste (%):", 100 * s["kv_internal_waste"]))
    out.append(_line("KV reserved but unused (%):", 100 * s["kv_reserved_unused"]))
    out.append(_line("KV capacity in use (% time-avg):", 100 * s["kv_capacity_utilisation"]))
    return out


def _pool_lines(d: dict) -> list[str]:
    """Disaggregated serving: each pool's GPUs, busy share and batch; the link; the transfers."""
    out = [_title(" capsim: prefill / decode pools ", "-")]
    for name in ("prefill", "decode"):
        p = d[name]
        out.append(_line(f"{name.capitalize()} pool:", f"{p['replicas']} x TP {p['tp']} {p['gpu']} ({p['gpus']} GPU(s))"))
        out.append(_line(f"{name.capitalize()} busy (%), mean batch:", f"{100 * p['busy_share']:.1f}, {p['mean_batch_seqs']:.1f}"))
    link, t = d["link"], d["transfers"]
    out.append(_line("Link:", f"{link['name']} ({link['bandwidth_bytes_per_s'] / 1e9:,.1f} GB/s x {link['efficiency']:g})"))
    out.append(_line("KV transfers, GB moved:", f"{t['count']:,}, {t['bytes'] / 1e9:,.2f}"))
    if t["count"]:
        out.append(_line("Transfer mean / p99 (ms):", f"{t['mean_transfer_ms']:,.2f} / {t['p99_transfer_ms']:,.2f}"))
        out.append(_line("Waiting for the link mean / p99 (ms):",
                         f"{t['mean_link_queue_ms']:,.2f} / {t['p99_link_queue_ms']:,.2f}"))
    return out


def verdict_block(v: dict) -> str:
    """The verdict after the result block: SLOs met or missed, cost, binding limit, a warning near
    saturation, next steps."""
    out = [_title(" capsim: verdict ", "=")]
    if v["slo_met"] is None:
        out.append("SLO: none given (add an slo: block to the workload, or --slo)")
    else:
        out.append(f"SLO: {'MET' if v['slo_met'] else 'MISSED'}")
    out += [f"  {'ok  ' if c['met'] else 'MISS'} {c['text']}" for c in v["checks"]]
    out.append(f"Cost: {v['cost']}")
    names = {"kv_capacity": "KV-cache capacity", "max_num_seqs": "max_num_seqs", "compute": "GPU compute",
             "memory": "GPU memory bandwidth", "overhead": "per-step overheads", "none": "none"}
    out.append(f"Binding limit: {names[v['binding']]}: {v['evidence']}")
    if v.get("near_saturation"):
        out.append(f"Near saturation: {v['near_saturation']}")
    out += [f"Next: {step}" for step in v["next_steps"]]
    out.append("=" * WIDTH)
    return "\n".join(out)


def rich_table(title: str, columns: list[str], rows: list[list], caption: str | None = None):
    """A Rich table (text columns left, numbers right; ints with thousands separators). Cells fold
    rather than being cut, so a table wider than a terminal still prints whole (piped, the CLI's
    console has no width limit: a row stays on one line)."""
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
