"""What the planning commands print: Rich tables (and their CSV/JSON/markdown text) of the
frames that `compare`, `sweep`, `capacity` and multi-seed runs return. No computation here,
only formatting: 'n/a' for a missing value, 'mean ± half-width' when seeds > 1, and a '*' on a
percentile that rests on fewer than 100 samples.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager

import pandas as pd
from rich.table import Table

from capsim.planning.tasks import MIN_PERCENTILE_SAMPLES
from capsim.results.text_tables import markdown_table
from capsim.planning.plan_output import by_shape, shape_text
from capsim.planning.sweep import json_rows

FEW = f"* percentile resting on fewer than {MIN_PERCENTILE_SAMPLES} samples (p99 of TTFT needs >= 100 completed requests)"


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def num(row: dict, key: str, digits: int = 1, scale: float = 1.0, prefix: str = "") -> str:
    """A cell: the value (x scale), ± its 95% half-width when the row has one, '*' if flagged."""
    v = row.get(key)
    if missing(v):
        return "n/a"
    text = f"{prefix}{v * scale:,.{digits}f}"
    half = row.get(f"{key}_ci95")
    if not missing(half):
        text += f" ± {half * scale:,.{digits}f}"
    if key in str(row.get("low_sample_percentiles") or "").split(";"):
        text += "*"
    return text


def _table(title: str, columns: list[str], rows: list[list[str]], caption: list[str]) -> Table:
    t = Table(title=title, caption="\n".join(caption), caption_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 or c in ("gpu", "kv_cache", "note", "verdict", "SLOs", "step", "flag") else "right",
                     overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


def _flags(rows: list[dict]) -> list[str]:
    return [FEW] if any(r.get("low_sample_percentiles") for r in rows) else []


def pair(row: dict, a: str, b: str, digits: int = 1) -> str:
    """'p50 / p99' style cell of two values."""
    return f"{num(row, a, digits)} / {num(row, b, digits)}"


def compare_view(frame: pd.DataFrame, axes: list[str]) -> tuple[list[str], list[list[str]], list[str]]:
    """(columns, rows, caption) of a compare frame."""
    rows = frame.to_dict("records")
    capacity = next((c for c in ("capacity_rate_per_s", "capacity_users") if c in frame), None)
    names = list(axes) + (["capacity (req/s)" if capacity == "capacity_rate_per_s" else "capacity (users)"]
                          if capacity else [])
    axes = axes + ([capacity] if capacity else [])
    columns = names + ["KV tokens", "seqs: mean req / max len", "req/s", "out tok/s", "TTFT ms p50 / p99",
                      "TPOT ms p50 / p99", "KV util %", "GPUs", "$/h", "$/1M out tok", "load"]
    problems = any(not missing(r.get("problem")) for r in rows)
    columns += ["note"] if problems else []
    out = []
    for r in rows:
        cells = [_cell(r[a]) for a in axes]
        if not missing(r.get("problem")):
            out.append(cells + ["-"] * (len(columns) - len(axes) - 1) + [str(r["problem"])])
            continue
        cells += [num(r, "kv_capacity_tokens", 0), pair(r, "max_seqs_at_mean_request", "max_seqs_at_max_model_len", 0),
                  num(r, "request_throughput", 2), num(r, "output_throughput", 0),
                  pair(r, "median_ttft_ms", "p99_ttft_ms"), pair(r, "median_tpot_ms", "p99_tpot_ms"),
                  num(r, "kv_utilisation", 1, 100), num(r, "gpus", 0), num(r, "usd_per_hour", 2, prefix="$"),
                  num(r, "usd_per_m_output_tokens", 3, prefix="$"), _load_cell(r)]
        out.append(cells + ([""] if problems else []))
    first = next((r for r in rows if missing(r.get("problem"))), rows[0])
    caption = [
        f"seqs: concurrent sequences the KV cache holds at the workload's mean request ({num(first, 'mean_request_tokens', 0)} "
        "prompt + output tokens) / at max_model_len (the guaranteed worst case)",
        "KV util: share of held KV memory that stores tokens (time-weighted)",
        "$/h = $ per GPU-hour x GPUs (TP x replicas); $/1M out tok = $/h / (output tokens/s x 3600) x 1e6, at the "
        "load shown (every row at the same offered load; --at-capacity prices each at its own capacity); n/a: no "
        "price (give --price-per-hour)",
        "load: the offered load; SATURATED: the queue kept growing, so the row's latency and cost hold for this run's "
        "length only",
    ]
    return columns, out, caption + _flags(rows)


def _cell(v) -> str:
    return "none" if missing(v) else f"{v:g}" if isinstance(v, float) else str(v)


def _load_cell(r: dict) -> str:
    """The offered load of a row, marked when it saturated (or was too short to judge)."""
    load = str(r.get("cost_at_load") or "")
    if r.get("saturated"):
        return f"{load} SATURATED"
    if r.get("too_short"):
        return f"{load} (too short)"
    return load


def sweep_view(frame: pd.DataFrame, over: str) -> tuple[list[str], list[list[str]], list[str]]:
    rows = frame.to_dict("records")
    load = "req/s offered" if over == "rate_per_s" else "users"
    columns = [load, "done", "req/s", "out tok/s", "TTFT ms p50 / p99", "TPOT ms p50 / p99", "E2EL p99 ms",
               "KV in use %", "$/1M out tok", "state"]
    goodput = any(not missing(r.get("good_share")) for r in rows)
    judged = "slo_met" in frame
    columns += (["goodput %"] if goodput else []) + (["SLOs"] if judged else [])
    out = []
    for r in rows:
        cells = [f"{r[over]:g}", num(r, "completed", 0), num(r, "request_throughput", 2), num(r, "output_throughput", 0),
                 pair(r, "median_ttft_ms", "p99_ttft_ms"), pair(r, "median_tpot_ms", "p99_tpot_ms"),
                 num(r, "p99_e2el_ms", 0), num(r, "kv_capacity_utilisation", 1, 100),
                 num(r, "usd_per_m_output_tokens", 3, prefix="$"), _state(r)]
        cells += [num(r, "good_share", 1, 100)] if goodput else []
        cells += (["met" if r["slo_met"] else "missed: " + r["slo_failures"]] if judged else [])
        out.append(cells)
    caption = ["KV in use: stored tokens / KV capacity, time-averaged; goodput: share of arrived requests meeting "
               "every goodput threshold",
               "state: steady, SATURATED (the queue kept growing: latency grows with the run's length, never meets "
               "an SLO) or too short (the steady window spans under 10 request lifetimes); figures over each run's "
               "steady window"]
    if "seeds" in frame:
        caption.append(f"mean ± 95% t-interval over {int(frame['seeds'].iloc[0])} seeds")
    return columns, out, caption + _flags(rows)


def _state(r: dict) -> str:
    if r.get("saturated"):
        return "SATURATED"
    return "too short" if r.get("too_short") else "steady"


def capacity_view(frame: pd.DataFrame, over: str, axes: list[str]) -> tuple[list[str], list[list[str]], list[str]]:
    rows = frame.to_dict("records")
    unit = "req/s" if over == "rate_per_s" else "users"
    columns = axes + [f"capacity ({unit})", "goodput req/s", "TTFT ms p50 / p99", "TPOT ms p50 / p99", "out tok/s",
                      "GPUs", "$/h", "$/1M out tok", "$/1M tok", "sims"]
    target = "replicas_for_target" in frame
    columns += ["target req/s", "replicas", "GPUs at target", "$/h at target", "$/1M out tok at target"] if target else []
    out = []
    for r in rows:
        value = r[f"capacity_{over}"]
        cap = "none" if missing(value) else f"{value:g}" + ("" if r["bounded"] else "+")
        cells = [str(r[a]) for a in axes] + [cap, num(r, "request_goodput", 2), pair(r, "median_ttft_ms", "p99_ttft_ms"),
                                             pair(r, "median_tpot_ms", "p99_tpot_ms"), num(r, "output_throughput", 0),
                                             num(r, "gpus", 0), num(r, "usd_per_hour", 2, prefix="$"),
                                             num(r, "usd_per_m_output_tokens", 3, prefix="$"),
                                             num(r, "usd_per_m_total_tokens", 3, prefix="$"), str(r["simulations"])]
        if target:
            cells += [f"{r['target_rate_per_s']:g}", num(r, "replicas_for_target", 0), num(r, "gpus_at_target", 0),
                      num(r, "usd_per_hour_at_target", 2, prefix="$"),
                      num(r, "usd_per_m_output_tokens_at_target", 3, prefix="$")]
        out.append(cells)
    caption = [f"capacity: the highest {unit} meeting every SLO, found within {100 * rows[0]['tolerance']:g}% by a "
               "bracketing search (same seed at every point); '+': no failing load found up to it; 'none': even the "
               "lowest load tried misses an SLO. Latency, goodput and cost are at the capacity, over each run's steady "
               "window; a saturated point (its queue kept growing) never counts as meeting an SLO, and a point too "
               "short or too close to a limit to judge is simulated again for longer.",
               "$/h = $ per GPU-hour x GPUs (TP x replicas); $/1M tok counts prompt + output tokens"]
    if target:
        caption.append("replicas: ceil(target / capacity), checked by simulating one replica at target / replicas")
    caption.append("goodput: requests meeting every goodput threshold, per second (n/a under percentile limits alone)")
    return columns, out, caption + _flags(rows)


def points_view(points: pd.DataFrame, over: str) -> tuple[list[str], list[list[str]], list[str]]:
    rows = points.to_dict("records")
    columns = ["#", "load", "step", "TTFT p99 ms", "TPOT p99 ms", "goodput %", "verdict"]
    out = [[str(r["combination"]), f"{r[over]:g}", str(r["role"]), num(r, "p99_ttft_ms"), num(r, "p99_tpot_ms"),
            num(r, "good_share", 1, 100), "met" if r["slo_met"] else "missed: " + r["slo_failures"]] for r in rows]
    return columns, out, []


def figure(v: float) -> str:
    """A number at a precision that suits its size: 20,360 / 107.3 / 1.58 / 0.03009."""
    if missing(v):
        return "n/a"
    size = abs(v)
    if size >= 1000:
        return f"{v:,.0f}"
    if size >= 10:
        return f"{v:,.1f}"
    return f"{v:.2f}" if size >= 1 else f"{v:.3g}"


def seeds_view(table: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    columns = ["metric", "mean ± 95%", "min … max", "seeds", "samples (fewest)", "flag"]
    out = []
    for r in table.to_dict("records"):
        half = "" if missing(r["ci95"]) else f" ± {figure(r['ci95'])}"
        out.append([r["metric"], f"{figure(r['mean'])}{half}", f"{figure(r['min'])} … {figure(r['max'])}", str(r["seeds"]),
                    "" if missing(r["samples_min"]) else f"{int(r['samples_min']):,}",
                    f"< {MIN_PERCENTILE_SAMPLES} samples" if r["few_samples"] else ""])
    caption = ["mean ± 95% Student-t interval over the seeds (seed, seed + 1, ...); flag: a percentile resting "
               f"on fewer than {MIN_PERCENTILE_SAMPLES} samples in at least one seed's run"]
    return columns, out, caption


def title(kind: str, frame: pd.DataFrame) -> str:
    """'Compare: chat (llama-3.1-8b, 300 requests per run)' from a planning frame's first full row."""
    row = next((r for r in frame.to_dict("records") if not missing(r.get("workload"))), {})
    if not row:
        return kind
    return f"{kind}: {row['workload']} ({row['model']}, {int(row['arrived']):,} requests per run)"


def rich(title: str, view: tuple[list[str], list[list[str]], list[str]]) -> Table:
    return _table(title, *view)


def text(view: tuple[list[str], list[list[str]], list[str]]) -> str:
    """The view as a markdown table followed by its caption as a list."""
    columns, rows, caption = view
    return markdown_table(columns, rows) + "\n" + "".join(f"\n- {c}" for c in caption) + "\n"


def frame_json(frame: pd.DataFrame, meta: dict) -> str:
    return json.dumps(meta | {"rows": json_rows(frame)}, indent=2) + "\n"


def emit(console, frame: pd.DataFrame, title: str, view, fmt: str, meta: dict) -> None:
    """Print a planning result: a Rich table, markdown, the frame's CSV, or its JSON (with meta)."""
    import sys

    if fmt == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    elif fmt == "json":
        sys.stdout.write(frame_json(frame, meta))
    elif fmt == "markdown":
        sys.stdout.write(text(view))
    else:
        console.print(rich(title, view))


@contextmanager
def progress(console, label: str, auto_refresh: bool = True):
    """A transient progress bar (drawn only on a terminal); yields progress(done, total).
    auto_refresh=False: no drawing thread; the bar is redrawn at each progress call (for a
    simulation in this process, which a thread would only slow)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    label = label.replace("{", "{{").replace("}", "}}")  # TextColumn formats its text: braces in a name are text
    with Progress(TextColumn(label, markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                  TimeRemainingColumn(), console=console, transient=True, auto_refresh=auto_refresh) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total, refresh=not auto_refresh)


def plan_report(console, result, fmt: str, explain: bool) -> None:
    """`capsim plan`'s output: the verdict (the winner with its metrics and launch commands, or the
    closest candidate and what binds), the pruning counts, the Pareto front and with `explain` the
    reasons; csv: every candidate's row; json: the verdict as plan.json holds it."""
    import sys

    from capsim.planning.plan_output import FIRST, plan_meta
    from capsim.planning.sweep import order_columns

    if fmt == "csv":
        sys.stdout.write(order_columns(result.frame, list(FIRST)).to_csv(index=False))
        return
    if fmt == "json":
        sys.stdout.write(json.dumps(plan_meta(result), indent=2) + "\n")
        return
    lines = plan_lines(result, explain)
    views = [("Plan: the cheapest deployment meeting every SLO", winner_view(result))]
    if not result.front.empty:
        views.append(("Pareto front: output tokens/s per user against tokens/s per GPU and $ per 1M output tokens",
                      front_view(result.front)))
    for heading, view in views:
        if fmt == "markdown":
            sys.stdout.write(f"**{heading}**\n\n" + text(view) + "\n")
        else:
            console.print(rich(heading, view))
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


def plan_lines(result, explain: bool) -> list[str]:
    """The launch commands and (with explain) the reasons, one line each."""
    lines = []
    if result.launch:
        w = result.winner
        n = int(w["replicas"])
        if w.get("shape") == "disaggregated":
            lines.append(f"Launch {n} unit{'s' if n > 1 else ''} of {int(w['prefill'])} prefill + {int(w['decode'])} "
                         f"decode instances ({w['link']} between them), each instance with its engine's command:")
            lines += [f"  {role}: {cmd}" for role, cmd in result.launch.items()]
        else:
            lines.append(f"Launch {n} replica{'s' if n > 1 else ''}, each with one of (behind a round-robin router):")
            lines += [f"  {cmd}" for cmd in result.launch.values()]
    if explain or result.winner is None:
        lines += result.explain
    return lines


def winner_view(result) -> tuple[list[str], list[list[str]], list[str]]:
    """Key / value rows of the winner (or the closest candidate), with its simulated metrics."""
    target = result.target
    load = f"{target['load']:g} requests/s" if target["over"] == "rate_per_s" else f"{target['load']:g} users"
    goals = "; ".join(result.objectives.describe())
    caption = [f"{result.workload} ({result.model}) at {load} under {goals}; at most {result.budget_gpus} GPUs",
               f"{len(result.frame)} candidates ({shape_counts(result.frame)}); pruned by bounds without simulation: "
               + (", ".join(f"{n} by {k}" for k, n in result.pruned.items() if n and k != "cost") or "none")
               + f"; never simulated by the cost bound: {result.pruned.get('cost', 0)}; "
               f"{len(result.points)} simulations of one replica at its share of the load"]
    r = result.winner or result.closest
    if r is None:
        return ["field", "value"], [["verdict", "no candidate"]], caption
    verdict = "meets every SLO" if result.winner else "NO deployment meets every SLO: closest candidate"
    rows = [["verdict", verdict],
            ["deployment", f"{r['gpu']} {shape_text(r)}, {r['weights']} weights, {r['kv_cache']} KV, {r['engine']}"],
            ["batch limits", f"max_num_seqs {r['max_num_seqs']}, max_num_batched_tokens {r['max_num_batched_tokens']}"]]
    if missing(r.get("replicas")):
        return ["field", "value"], rows + [["ruled out", f"{r['pruned_by']}: {r['reason']}"]], caption
    unit = "units x GPUs" if r.get("shape") == "disaggregated" else "replicas x GPUs"
    gpus = int(r["gpus"])
    rows += [[unit, f"{int(r['replicas'])} x {gpus // int(r['replicas'])} = {gpus} GPU{'' if gpus == 1 else 's'}"],
             ["$ per hour", num(r, "usd_per_hour", 2, prefix="$")],
             ["$ per 1M output tokens", num(r, "usd_per_m_output_tokens", 3, prefix="$")],
             ["per replica", f"{figure(r['replica_load'])} {'requests/s' if target['over'] == 'rate_per_s' else 'users'}"],
             ["TTFT p50 / p99 ms", pair(r, "median_ttft_ms", "p99_ttft_ms")],
             ["TPOT p50 / p99 ms", pair(r, "median_tpot_ms", "p99_tpot_ms")],
             ["output tokens/s per user", num(r, "tokens_per_s_per_user")],
             ["output tokens/s per GPU", num(r, "tokens_per_s_per_gpu")],
             ["tightest objective", f"{r['binding']} at {100 * r['binding_ratio']:.0f}% of its limit"]]
    if not result.winner:
        rows.append(["misses", str(r.get("slo_failures") or "")])
    return ["field", "value"], rows, caption


def shape_counts(frame: pd.DataFrame) -> str:
    """Candidates per deployment shape, e.g. "aggregated 64, pp 80"."""
    return ", ".join(f"{name} {n}" for name, n in by_shape(frame).items()) or "none"


def front_view(front: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    columns = ["#", "gpu", "shape", "weights/KV", "engine", "seqs", "batch", "replicas", "GPUs", "$/hour", "$/1M out",
               "tok/s/user", "tok/s/GPU", "front"]
    rows = []
    for r in front.to_dict("records"):
        fronts = "/".join(name for name, on in (("GPU", r["on_gpu_front"]), ("cost", r["on_cost_front"])) if on)
        rows.append([str(r["candidate"]), r["gpu"], shape_text(r), f"{r['weights']}/{r['kv_cache']}", r["engine"],
                     str(r["max_num_seqs"]), str(r["max_num_batched_tokens"]), str(int(r["replicas"])),
                     str(int(r["gpus"])), num(r, "usd_per_hour", 2), num(r, "usd_per_m_output_tokens", 3),
                     num(r, "tokens_per_s_per_user"), num(r, "tokens_per_s_per_gpu"), fronts])
    caption = ["front GPU: no other deployment meeting the SLOs has more tokens/s per user and per GPU; "
               "front cost: none has more tokens/s per user at a lower $ per 1M output tokens",
               "tokens/s per user: 1,000 / mean TPOT; per GPU: one replica's output tokens/s / its GPUs"]
    return columns, rows, caption
