"""Planning figures, from DataFrames only: the note's batch table as curves, latency against
load with the SLO lines (sweeps and capacity searches), and compares side by side.

Each reads the frame the planning function returned (or its saved CSV) and returns a matplotlib
`Figure`; `capsim.report.run_figures.save` writes PNG + SVG.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from capsim.report.run_figures import _figure, save, setup_title, thousands
from capsim.planning.capacity import CapacityResult
from capsim.planning.sweep import CompareResult, SweepResult
from capsim.results.slo import Objectives
from capsim.errors import CapsimError
from capsim.report.run_figures import plot_run_dir, read_csv, read_json
from capsim.results.slo import from_dict

NOTE_BATCHES = (1, 8, 16, 26, 32, 64)
SETUP_COLUMNS = ("model", "gpu", "tp", "weights", "kv_cache", "scheduler", "allocator", "replicas")


def batch_figure(curves: pd.DataFrame) -> Figure:
    """Pass time and total tokens/s against batch size, one line per traffic case (weights only,
    weights + KV at a context), with each compute/memory crossover marked and the note's batches
    dotted on the weights-only line."""
    first = curves.iloc[0]
    subtitle = f"{first['model']} ({first['weights']}) on {first['gpu']}; document mode: eta_bw 1, eta_fl 0.5, no overheads"
    fig, (ax_t, ax_p) = _figure("Pass time and throughput against batch size", subtitle, ncols=2, width=12)
    for i, (traffic, curve) in enumerate(curves.groupby("traffic", sort=False)):
        colour = f"C{i}"
        ax_t.plot(curve["batch"], curve["pass_time_ms"], color=colour, label=traffic)
        ax_p.plot(curve["batch"], curve["total_tokens_per_s"], color=colour, label=traffic)
        cross = float(curve["crossover_batch"].iloc[0])
        if cross <= curve["batch"].max():
            for ax in (ax_t, ax_p):
                ax.axvline(cross, color=colour, linestyle=":", linewidth=1.2)
            ax_t.annotate(f"crossover\nbatch {cross:.1f}", (cross, float(np.interp(cross, curve["batch"], curve["pass_time_ms"]))),
                          xytext=(8, -30), textcoords="offset points", fontsize=8, color=colour)
        if i == 0:
            marks = curve[curve["batch"].isin(NOTE_BATCHES)]
            ax_t.plot(marks["batch"], marks["pass_time_ms"], "o", color=colour, markersize=4, label="the note's batches")
            ax_p.plot(marks["batch"], marks["total_tokens_per_s"], "o", color=colour, markersize=4)
    ax_t.set(xlabel="batch size (sequences per pass)", ylabel="pass time (ms)", ylim=(0, None),
             title="time of one forward pass")
    ax_p.set(xlabel="batch size (sequences per pass)", ylabel="total tokens/s", ylim=(0, None),
             title="total tokens/s = batch / pass time")
    ax_p.yaxis.set_major_formatter(thousands)
    for ax in (ax_t, ax_p):
        ax.set_xlim(0, curves["batch"].max() + 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    return fig


def _errorbar(ax, frame: pd.DataFrame, x: str, y: str, **kw) -> None:
    err = frame[f"{y}_ci95"] if f"{y}_ci95" in frame else None
    ax.errorbar(frame[x], frame[y], yerr=err, capsize=3 if err is not None else 0, **kw)


def _load_label(over: str) -> str:
    return "offered load (requests/s)" if over == "rate_per_s" else "closed-loop users"


def latency_vs_load(frame: pd.DataFrame, over: str, slo_lines: list | None = None,
                    capacity: float | None = None, title: str = "Latency against load") -> Figure:
    """TTFT and TPOT (p50, p99) and throughput against the load column `over`, with SLO lines
    (`Objectives.lines()`), points that miss an SLO ringed in red when the frame has slo_met, and
    a capacity line when given. Error bars when the frame has *_ci95 columns (seeds > 1)."""
    frame = frame.sort_values(over)
    subtitle = setup_title(frame.iloc[0].to_dict())
    fig, axes = _figure(title, subtitle, ncols=3, width=15, height=5)
    for ax, metric, name in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        for stat, style in (("median", "o-"), ("p99", "s--")):
            _errorbar(ax, frame, over, f"{stat}_{metric}_ms", fmt=style, markersize=4,
                      label=f"{name} {'p50' if stat == 'median' else stat}")
        for i, (m, limit, text) in enumerate(line for line in slo_lines or [] if line[0] == metric):
            ax.axhline(limit, color="C3", linewidth=1.5, linestyle=("-", "--", "-.")[i % 3], label=text)
        _mark(ax, frame, over, f"p99_{metric}_ms", capacity)
        values = frame[[f"median_{metric}_ms", f"p99_{metric}_ms"]].to_numpy(float)
        if np.nanmax(values) > 50 * max(np.nanmin(values), 1e-9):
            ax.set_yscale("log")
        ax.set(xlabel=_load_label(over), ylabel=f"{name} (ms)", title=name)
    _errorbar(axes[2], frame, over, "request_throughput", fmt="o-", markersize=4, label="completed requests/s")
    if "request_goodput" in frame and frame["request_goodput"].notna().any():
        _errorbar(axes[2], frame, over, "request_goodput", fmt="^-", markersize=4, label="goodput (requests/s)")
    if over == "rate_per_s":
        top = float(frame[over].max())
        axes[2].plot([0, top], [0, top], color="grey", linewidth=1, linestyle=":", label="offered = served")
    _mark(axes[2], frame, over, "request_throughput", capacity)
    axes[2].set(xlabel=_load_label(over), ylabel="requests/s", title="throughput", ylim=(0, None))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    return fig


def _mark(ax, frame: pd.DataFrame, over: str, y: str, capacity: float | None) -> None:
    """Ring points that miss the SLOs; draw the capacity line."""
    if "slo_met" in frame:
        miss = frame[~frame["slo_met"].astype(bool)]
        if len(miss):
            ax.plot(miss[over], miss[y], "o", markersize=10, markerfacecolor="none", markeredgecolor="C3",
                    label="point misses an SLO")
    if capacity is not None:
        ax.axvline(capacity, color="k", linestyle="-.", linewidth=1, label=f"capacity {capacity:,.4g}")


def compare_figure(frame: pd.DataFrame, axes_names: list[str]) -> Figure:
    """One bar per combination in five panels: sequences that fit, output tokens/s, p99 TTFT,
    p99 TPOT, and $ per 1M output tokens ('n/a' where there is no price)."""
    ok = frame[frame["problem"].isna()] if "problem" in frame else frame
    names = [" · ".join(str(r[a]) for a in axes_names) or str(r["gpu"]) for r in ok.to_dict("records")]
    fixed = {k: ok.iloc[0][k] for k in ("model", "weights", "kv_cache", "gpu", "scheduler", "allocator")
             if k not in axes_names}
    subtitle = ", ".join(f"{k} {v}" for k, v in fixed.items()) + f"; {ok.iloc[0]['workload']}"
    fig, axes = _figure("Comparison: " + " x ".join(axes_names or ["set-up"]), subtitle, ncols=5, width=18,
                        height=2.0 + 0.45 * len(ok))
    y = np.arange(len(ok))
    panels = (("max_seqs_at_mean_request", "sequences that fit in the KV cache\n(at the mean request length)", "{:,.0f}"),
              ("output_throughput", "output tokens/s", "{:,.0f}"),
              ("p99_ttft_ms", "TTFT p99 (ms)", "{:,.0f}"),
              ("p99_tpot_ms", "TPOT p99 (ms)", "{:,.1f}"),
              ("usd_per_m_output_tokens", "$ per 1M output tokens", "${:,.3f}"))
    for ax, (col, name, fmt) in zip(axes, panels):
        values = pd.to_numeric(ok[col], errors="coerce").to_numpy(float)
        ax.barh(y, np.nan_to_num(values), color=[f"C{i % 10}" for i in range(len(ok))])
        for yi, v in zip(y, values):
            ax.text(0 if np.isnan(v) else v, yi, " n/a" if np.isnan(v) else " " + fmt.format(v), va="center", fontsize=8)
        ax.set(xlabel=name, yticks=y, yticklabels=names if ax is axes[0] else [], ylim=(len(ok) - 0.5, -0.5))
        ax.set_xlim(0, np.nanmax(values) * 1.35 if np.isfinite(values).any() else 1)
        ax.grid(axis="x", alpha=0.3)
    return fig


def plot_sweep(frame: pd.DataFrame, over: str, objectives: Objectives, out_dir: Path) -> list[Path]:
    """latency_vs_load.png/.svg for a sweep frame."""
    return save(latency_vs_load(frame, over, objectives.lines()), out_dir, "latency_vs_load")


def plot_capacity(frame: pd.DataFrame, points: pd.DataFrame, over: str, objectives: Objectives,
                  out_dir: Path) -> list[Path]:
    """capacity_search[_SETUP].png/.svg: every searched point, one figure per set-up, named by
    what sets it apart (capacity_search_h100-sxm_fp8)."""
    paths = []
    names = setup_stems(frame)
    for n, mine in points.groupby("combination", sort=True):
        answer = frame[frame["combination"] == n].iloc[0]
        cap = None if pd.isna(answer[f"capacity_{over}"]) else float(answer[f"capacity_{over}"])
        searched = mine[mine["role"].astype(str).str.startswith("round")]
        stem = "capacity_search" if len(frame) == 1 else f"capacity_search_{names[n]}"
        fig = latency_vs_load(searched, over, objectives.lines(), capacity=cap, title="Capacity search: every point tried")
        paths += save(fig, out_dir, stem)
    return paths


def setup_stems(frame: pd.DataFrame) -> dict:
    """combination -> a file-name part from the set-up columns whose values differ between the
    frame's rows ('h100-sxm_fp8'); a profile file counts by its name, and the combination number
    is added only where two rows would otherwise share a name."""
    varying = [c for c in SETUP_COLUMNS if c in frame and frame[c].astype(str).nunique() > 1]
    stems = {}
    for row in frame.to_dict("records"):
        parts = [Path(str(row[c])).stem if str(row[c]).endswith((".yaml", ".yml")) else str(row[c]) for c in varying]
        stems[row["combination"]] = re.sub(r"[^A-Za-z0-9._+-]+", "-", "_".join(parts)).strip("-") or str(row["combination"])
    seen = pd.Series(list(stems.values())).value_counts()
    return {n: f"{stem}_{n}" if seen[stem] > 1 else stem for n, stem in stems.items()}


def plot_result(result: SweepResult | CompareResult | CapacityResult, out_dir: Path) -> list[Path]:
    """The figures of a planning result: latency_vs_load for a sweep, compare for a comparison,
    capacity_search for a capacity search."""
    out_dir = Path(out_dir)
    if isinstance(result, SweepResult):
        return plot_sweep(result.frame, result.over, result.objectives, out_dir)
    if isinstance(result, CompareResult):
        return save(compare_figure(result.frame, result.axes), out_dir, "compare")
    return plot_capacity(result.frame, result.points, result.over, result.objectives, out_dir)


def plot_saved(directory: Path, out_dir: Path | None = None, objectives: Objectives | None = None) -> list[Path]:
    """Redraw every figure from the files a run, sweep, compare or capacity search wrote (into
    directory/plots by default). SLO lines: `objectives` if given, else the saved ones (a run's
    from summary.json's provenance). Damaged or edited files are a CapsimError naming the folder."""

    directory = Path(directory)
    out_dir = Path(out_dir or directory / "plots")
    try:
        paths = _plot_saved(directory, out_dir, objectives)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise CapsimError(f"{directory}: the saved files lack what the figures need ({type(exc).__name__}: "
                          f"{str(exc)[:80]}); write them again with capsim.") from None
    if not paths:
        raise CapsimError(f"{directory}: nothing to plot: expected the files of `capsim run --out` (summary.json "
                          "and requests.csv or .parquet; the step table, steps.csv or .parquet, only with --steps) or "
                          "of sweep/compare/capacity --out (sweep.json, compare.json, capacity.json with their CSVs).")
    return paths


def _plot_saved(directory: Path, out_dir: Path, objectives: Objectives | None) -> list[Path]:
    saved = {stem: read_json(directory / f"{stem}.json")
             for stem in ("sweep", "compare", "capacity") if (directory / f"{stem}.json").is_file()}
    paths: list[Path] = []
    if "sweep" in saved:
        goals = _goals(objectives, saved["sweep"])
        paths += plot_sweep(read_csv(directory / "sweep.csv"), saved["sweep"]["over"], goals, out_dir)
    if "compare" in saved:
        paths += save(compare_figure(read_csv(directory / "compare.csv"), saved["compare"]["axes"]), out_dir, "compare")
    if "capacity" in saved:
        goals = _goals(objectives, saved["capacity"])
        paths += plot_capacity(read_csv(directory / "capacity.csv"), read_csv(directory / "capacity_points.csv"),
                               saved["capacity"]["over"], goals, out_dir)
    if (directory / "summary.json").is_file():
        summary = read_json(directory / "summary.json")  # plot_run_dir says what is wrong with a damaged one
        provenance = summary.get("provenance") if isinstance(summary, dict) else None
        goals = _goals(objectives, {"objectives": provenance.get("slo") if isinstance(provenance, dict) else None})
        paths += plot_run_dir(directory, out_dir, goals.lines())
    return paths


def _goals(given: Objectives | None, meta: dict) -> Objectives:
    return given if given is not None and not given.empty else from_dict(meta.get("objectives"))


def plan_figure(frame: pd.DataFrame, front: pd.DataFrame, winner: dict | None, title: str) -> Figure:
    """Output tokens/s per user against tokens/s per GPU (left) and against $ per 1M output tokens
    (right): every simulated deployment (meeting the SLOs: by GPU; missing them: grey x), the Pareto
    fronts as steps, the winner circled."""
    fig, (left, right) = _figure("Plan: deployments simulated at the target load", title, ncols=2, width=12)
    sim = frame[frame["tokens_per_s_per_user"].notna()] if "tokens_per_s_per_user" in frame else frame.iloc[:0]
    ok = sim[sim["status"] == "meets SLOs"]
    miss = sim[sim["status"] != "meets SLOs"]
    for ax, x, name in ((left, "tokens_per_s_per_gpu", "output tokens/s per GPU"),
                        (right, "usd_per_m_output_tokens", "$ per 1M output tokens")):
        ax.scatter(miss[x], miss["tokens_per_s_per_user"], marker="x", color="0.6", label="misses an SLO")
        for gpu, mine in ok.groupby("gpu", sort=True):
            ax.scatter(mine[x], mine["tokens_per_s_per_user"], label=f"{gpu} (meets SLOs)")
        flag = "on_gpu_front" if x == "tokens_per_s_per_gpu" else "on_cost_front"
        if not front.empty:
            line = front[front[flag]].sort_values(x)
            ax.step(line[x], line["tokens_per_s_per_user"], where="post", color="black", lw=1, marker="D",
                    markerfacecolor="none", label="Pareto front")
        if winner is not None:
            ax.scatter([winner[x]], [winner["tokens_per_s_per_user"]], s=160, facecolors="none", edgecolors="red",
                       label="cheapest meeting the SLOs")
        ax.set_xlabel(name)
        ax.set_ylabel("output tokens/s per user (1,000 / mean TPOT)")
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    return fig


def plot_plan(result, out_dir: Path) -> list[Path]:
    """plan.png/.svg for a capsim.planning.plan.PlanResult."""
    load = result.target["load"]
    unit = "requests/s" if result.target["over"] == "rate_per_s" else "users"
    title = f"{result.workload} ({result.model}) at {load:g} {unit}; " + "; ".join(result.objectives.describe())
    return save(plan_figure(result.frame, result.front, result.winner, title), Path(out_dir), "plan")
