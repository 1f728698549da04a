"""Plots of one run, from its DataFrames only (DESIGN §7.6): every figure can be redrawn from
the files `capsim run --out DIR` writes (`capsim plot DIR`).

Figures are matplotlib `Figure` objects (no pyplot state, no GUI backend); `save` writes each as
PNG and SVG. Each is titled with its set-up (model, weights, KV format, GPU, scheduler,
allocator) and has units on its axes. Planning figures (batch curves, latency against load,
compares, capacity) are in `capsim.report.planning_figures`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from capsim.errors import CapsimError

MAX_POINTS = 2000  # time series longer than this are drawn as time-binned means (and maxima)
LABELLED_REQUESTS = 40  # Gantt bars carry request ids up to this many requests
GANTT_MAX_REQUESTS = 200  # above this many scheduled requests the slot Gantt is a smear of colours: not drawn
SLIDE_FONTS = {"suptitle": 14, "title": 12, "label": 13, "ticks": 11, "legend": 10}  # points, for a slide
thousands = FuncFormatter(lambda v, _: f"{v:,.0f}")


def setup_title(setup: dict) -> str:
    """'llama-3.1-8b (bf16) · KV fp16 · rtx4090 · chunked scheduler, paged KV' from a summary's
    setup block or any row with those keys."""
    parts = [f"{setup['model']} ({setup['weights']})", f"KV {setup['kv_cache']}", str(setup["gpu"])]
    if "scheduler" in setup:
        parts.append(f"{setup['scheduler']} scheduler, {setup['allocator']} KV")
    if setup.get("mode") not in (None, "realistic"):
        parts.append(f"{setup['mode']} mode")
    return " · ".join(parts)


def save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write the figure as out_dir/stem.png and .svg (SVG without a date, so reruns are identical)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    slide_sized(fig)
    fig.draw_without_rendering()  # lay out once, then keep it for both files (half the time)
    fig.set_layout_engine("none")
    fig.savefig(png, dpi=150)
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]


def slide_sized(fig: Figure) -> Figure:
    """Titles, axis labels, ticks and legends at sizes that read on a projected slide
    (SLIDE_FONTS); text written on the data (bar values, request ids) keeps its size."""
    if fig._suptitle is not None:
        fig._suptitle.set_fontsize(SLIDE_FONTS["suptitle"])
    for ax in fig.axes:
        ax.title.set_fontsize(SLIDE_FONTS["title"])
        ax.xaxis.label.set_fontsize(SLIDE_FONTS["label"])
        ax.yaxis.label.set_fontsize(SLIDE_FONTS["label"])
        ax.tick_params(labelsize=SLIDE_FONTS["ticks"])
        legend = ax.get_legend()
        for text in legend.get_texts() if legend is not None else []:
            text.set_fontsize(SLIDE_FONTS["legend"])
    return fig


def _figure(title: str, subtitle: str, ncols: int = 1, width: float = 10.0, height: float = 5.0):
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    fig.suptitle(f"{title}\n{subtitle}", fontsize=11)
    return fig, list(axes)


def latency_cdfs(requests: pd.DataFrame, setup: dict, slo_lines: list | None = None) -> Figure:
    """TTFT and TPOT CDFs over completed requests, with p50/p99 marked and SLO lines
    (`Objectives.lines()`: (metric, limit ms, label))."""
    done = requests[requests["outcome"].astype(str) == "completed"]
    fig, axes = _figure("Latency distributions (CDF over completed requests)", setup_title(setup), ncols=2)
    for ax, metric, name in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        values = np.sort(done[f"{metric}_ms"].dropna().to_numpy(float))
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", color="C0", label=name)
            for q, style in ((50, ":"), (99, "--")):
                v = float(np.percentile(values, q))
                ax.axvline(v, color="grey", linestyle=style, linewidth=1, label=f"p{q} {v:,.1f} ms")
        for i, (m, limit, text) in enumerate(line for line in slo_lines or [] if line[0] == metric):
            ax.axvline(limit, color="C3", linewidth=1.5, linestyle=("-", "--", "-.")[i % 3], label=text)
        if len(values) and values[-1] / max(values[0], 1e-12) > 100:
            ax.set_xscale("log")
        ax.set(xlabel=f"{name} (ms)", ylabel="share of completed requests", ylim=(0, 1.02),
               title=f"{name}: {len(values):,} requests")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    return fig


def time_bins(steps: pd.DataFrame, n: int = MAX_POINTS) -> pd.DataFrame:
    """Steps grouped into at most n time bins: duration-weighted means and maxima per bin."""
    if len(steps) <= n:
        return steps.assign(bin_end_s=steps["end_s"])
    edges = np.linspace(steps["end_s"].iloc[0], steps["end_s"].iloc[-1], n + 1)
    idx = np.clip(np.searchsorted(edges, steps["end_s"].to_numpy(), side="left"), 1, n)
    w = steps["duration_s"].to_numpy()
    cols = ["num_seqs", "waiting", "kv_held_tokens", "kv_stored_tokens"]
    frame = pd.DataFrame({c: steps[c].to_numpy(float) * w for c in cols} | {"w": w, "bin": idx})
    g = frame.groupby("bin")
    out = g[cols].sum().div(g["w"].sum(), axis=0)
    out["max_num_seqs_in_bin"] = steps["num_seqs"].groupby(idx).max().to_numpy()
    out["bin_end_s"] = edges[out.index.to_numpy()]
    return out.reset_index(drop=True)


def kv_memory(steps: pd.DataFrame, setup: dict) -> Figure:
    """KV memory over time, stacked: tokens stored, internal waste (paged: slack in last blocks)
    or reserved-but-unused (contiguous), and free, up to the KV capacity; under it the waste
    alone on its own scale, since a few percent of the capacity is a hairline on the first."""
    data = time_bins(steps)
    capacity = float(setup["kv_capacity_tokens"])
    t = data["bin_end_s"].to_numpy()
    stored, held = data["kv_stored_tokens"].to_numpy(float), data["kv_held_tokens"].to_numpy(float)
    waste = np.maximum(held - stored, 0)
    slack = "reserved but unused" if setup["allocator"] == "contiguous" else "internal waste (slack in blocks)"
    fig = Figure(figsize=(10.0, 6.5), layout="constrained")
    ax, low = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    fig.suptitle(f"KV-cache memory over time\n{setup_title(setup)}", fontsize=11)
    ax.stackplot(t, stored, waste, np.maximum(capacity - held, 0),
                 labels=["tokens stored", slack, "free"], colors=["C0", "C3", "0.88"], step="post")
    ax.axhline(capacity, color="k", linewidth=1, label=f"capacity {capacity:,.0f} tokens")
    binned = " (time-binned means)" if len(data) < len(steps) else ""
    xlim = (t[0] if len(t) else 0, t[-1] if len(t) else 1)
    ax.set(ylabel=f"KV cache (tokens){binned}", xlim=xlim, ylim=(0, capacity * 1.05))
    ax.yaxis.set_major_formatter(thousands)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    used, store = (_time_mean(steps, c) for c in ("kv_held_tokens", "kv_stored_tokens"))
    ax.set_title(f"held memory storing tokens: {100 * store / used if used else 0:.1f}% (time-weighted)", fontsize=9)
    low.fill_between(t, 0, waste, step="post", color="C3", linewidth=0)
    low.set(xlabel="time (s)", ylabel=f"{'reserved unused' if setup['allocator'] == 'contiguous' else 'waste'}\n(tokens)",
            ylim=(0, max(float(waste.max()) if len(waste) else 0, 1) * 1.15), xlim=xlim)
    low.set_title(f"{slack}: {100 * (used - store) / used if used else 0:.1f}% of held memory, on its own scale",
                  fontsize=9)
    low.yaxis.set_major_formatter(thousands)
    return fig


def _time_mean(steps: pd.DataFrame, column: str) -> float:
    """A step column's duration-weighted mean (0 for an empty run)."""
    return float((steps[column] * steps["duration_s"]).sum() / steps["duration_s"].sum()) if len(steps) else 0.0


def batch_over_time(steps: pd.DataFrame, setup: dict) -> Figure:
    """Sequences per forward pass (left axis, with the max_num_seqs cap when it is in view) and
    requests waiting (right axis), over time."""
    data = time_bins(steps)
    fig, (ax,) = _figure("Batch size over time", setup_title(setup))
    t = data["bin_end_s"].to_numpy()
    binned = "max_num_seqs_in_bin" in data
    if binned:
        ax.fill_between(t, 0, data["max_num_seqs_in_bin"], step="post", color="C0", alpha=0.2, label="max in bin")
    ax.step(t, data["num_seqs"], where="post", color="C0",
            label="sequences per pass" + (" (time-binned mean)" if binned else ""))
    top = float(data["max_num_seqs_in_bin"].max() if binned else data["num_seqs"].max()) if len(data) else 1.0
    cap = setup.get("max_num_seqs")
    if cap is not None and cap <= 2 * top:
        ax.axhline(cap, color="C0", linestyle="--", linewidth=1, label=f"max_num_seqs {cap}")
        top = max(top, cap)
    elif cap is not None:
        ax.set_title(f"max_num_seqs {cap} is off the scale: the batch never came near it", fontsize=9)
    ax.set(xlabel="time (s)", ylabel="sequences per forward pass", ylim=(0, top * 1.15 + 1))
    ax.grid(alpha=0.3)
    queue = ax.twinx()
    queue.step(t, data["waiting"], where="post", color="C1", linewidth=1, label="requests waiting (right axis)")
    queue.set(ylabel="requests waiting", ylim=(0, float(data["waiting"].max() if len(data) else 0) * 1.15 + 1))
    handles = ax.get_legend_handles_labels()[0] + queue.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.08, 1), fontsize=8)
    return fig


def slot_intervals(requests: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Which request held which slot, in step indices: one row per scheduled request with its
    first and last step (inclusive) and a slot from greedy lowest-free-slot assignment in
    admission order. A preempted request is counted from its first admission to its finish."""
    ends = steps["end_s"].to_numpy(float)
    ran = requests[requests["first_scheduled_s"].notna()].copy()
    first = np.searchsorted(ends, ran["first_scheduled_s"].to_numpy(float), side="right")
    finish = ran["finish_s"].to_numpy(float)
    last = np.where(np.isnan(finish), len(ends) - 1, np.searchsorted(ends, np.nan_to_num(finish), side="left"))
    ran = pd.DataFrame({"request_id": ran["request_id"].to_numpy(), "first_step": first, "last_step": last,
                        "preempted": ran["preemptions"].to_numpy() > 0}).sort_values(["first_step", "request_id"])
    slots, busy_until = [], []  # busy_until[s]: last step of slot s's current holder
    for first_step, last_step in zip(ran["first_step"], ran["last_step"]):
        free = [s for s, until in enumerate(busy_until) if until < first_step]
        slot = free[0] if free else len(busy_until)
        if slot == len(busy_until):
            busy_until.append(last_step)
        busy_until[slot] = last_step
        slots.append(slot)
    ran["slot"] = slots
    return ran.reset_index(drop=True)


def gantt_readable(requests: pd.DataFrame) -> bool:
    """Whether the slot Gantt of this run can be read: at most GANTT_MAX_REQUESTS requests were
    scheduled (beyond that the bars are slivers; the batch-size figure tells the story)."""
    return int(requests["first_scheduled_s"].notna().sum()) <= GANTT_MAX_REQUESTS


def slot_gantt(requests: pd.DataFrame, steps: pd.DataFrame, setup: dict) -> Figure:
    """The explainer's picture: one lane per slot, one bar per request across the steps it held
    the slot; request ids are written on the bars up to 40 requests, preempted ones hatched."""
    steps = steps[steps["replica"] == 0] if "replica" in steps else steps
    spans = slot_intervals(requests, steps)
    lanes = int(spans["slot"].max()) + 1 if len(spans) else 1
    util = float(steps["num_seqs"].sum() / steps["slots"].sum()) if len(steps) else 0.0
    subtitle = (f"{setup_title(setup)}\n{len(spans):,} requests, {len(steps):,} steps, {lanes} slots used"
                f" (max_num_seqs {setup.get('max_num_seqs', '?')}); slot-step utilisation {100 * util:.0f}%")
    fig, (ax,) = _figure("Which request held which slot at each step", subtitle,
                         height=min(2.6 + 0.32 * lanes, 12))
    cmap = [f"C{i}" for i in range(10)]
    labelled = len(spans) <= LABELLED_REQUESTS
    for slot, lane in spans.groupby("slot"):
        bars = list(zip(lane["first_step"] + 0.5, lane["last_step"] - lane["first_step"] + 1))
        colours = [cmap[r % 10] for r in lane["request_id"]]
        ax.broken_barh(bars, (slot - 0.4, 0.8), facecolors=colours, edgecolor="white" if labelled else "none",
                       linewidth=0.8, hatch=None)
        for (x, width), rid, hatch in zip(bars, lane["request_id"], lane["preempted"]):
            if hatch:
                ax.broken_barh([(x, width)], (slot - 0.4, 0.8), facecolors="none", edgecolor="k", hatch="//", linewidth=0)
            if labelled:
                ax.text(x + width / 2, slot, f"r{rid}", ha="center", va="center", fontsize=8, color="white")
    ax.set(xlabel="step (forward pass)", ylabel="slot", xlim=(0.5, len(steps) + 0.5), ylim=(lanes - 0.5, -0.5))
    if lanes <= 32:
        ax.set_yticks(range(lanes))
    if labelled and len(steps) <= 60:
        ax.set_xticks(range(1, len(steps) + 1))
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_run(summary: dict, requests: pd.DataFrame, steps: pd.DataFrame | None, out_dir: Path,
             slo_lines: list | None = None) -> list[Path]:
    """Every run figure (latency CDFs, KV memory, batch size, and for runs of at most
    GANTT_MAX_REQUESTS scheduled requests the slot Gantt) as PNG + SVG; without a step table (a
    folder written without --steps) only the latency CDFs."""
    setup = summary["setup"]
    figures = {"latency_cdf": latency_cdfs(requests, setup, slo_lines)}
    if steps is not None:
        figures |= {"kv_memory": kv_memory(steps, setup), "batch_size": batch_over_time(steps, setup)}
        if gantt_readable(requests):
            figures["slot_gantt"] = slot_gantt(requests, steps, setup)
    return [p for stem, fig in figures.items() for p in save(fig, out_dir, stem)]


def read_run(run_dir: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame | None]:
    """(summary, requests, steps) from the files `capsim run --out DIR` writes, CSV or Parquet;
    steps is None when the folder has no step table (written without --steps)."""
    from capsim.results.table_files import find_table, read_table_file

    run_dir = Path(run_dir)
    requests, steps = find_table(run_dir, "requests"), find_table(run_dir, "steps")
    missing = [n for n, found in (("summary.json", (run_dir / "summary.json").is_file()),
                                  ("requests.csv", requests is not None)) if not found]
    if missing:
        raise CapsimError(f"{run_dir}: not a run directory: {', '.join(missing)} missing "
                          "(write one with `capsim run WORKLOAD --out DIR`).")
    summary = read_json(run_dir / "summary.json")
    if not isinstance(summary, dict) or not isinstance(summary.get("setup"), dict):
        raise CapsimError(f"{run_dir / 'summary.json'}: not a run summary (no 'setup' block); was it written by "
                          "`capsim run`?")
    return summary, read_table_file(requests), read_table_file(steps) if steps is not None else None


def read_json(path: Path):
    """A saved JSON file; a damaged one is a CapsimError naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CapsimError(f"{path}: cannot read it ({exc.strerror or exc}).") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, undecodable bytes
        raise CapsimError(f"{path}: damaged or not JSON ({str(exc)[:100]}); write it again with capsim.") from None


def read_csv(path: Path) -> pd.DataFrame:
    """A saved CSV table; a damaged one is a CapsimError naming it."""
    from capsim.results.table_files import read_table_file

    return read_table_file(path)


def plot_run_dir(run_dir: Path, out_dir: Path | None = None, slo_lines: list | None = None) -> list[Path]:
    """Redraw a saved run's figures from its files (into run_dir/plots by default)."""
    summary, requests, steps = read_run(run_dir)
    return plot_run(summary, requests, steps, Path(out_dir or Path(run_dir) / "plots"), slo_lines)
