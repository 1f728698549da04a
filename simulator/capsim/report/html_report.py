"""`--report report.html`: the HTML report of a run, sweep, compare or capacity search, built from
the same result objects the console tables and the PNG figures read.

`write_report(path, result)` takes a RunResult, SeedsResult, SweepResult, CompareResult,
CapacityResult or PlanResult (its page: capsim.report.html_plan) and writes one self-contained page (html_page): the set-up, the verdict, the
result table and the interactive charts (html_charts).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from capsim.planning.capacity import CapacityResult
from capsim.planning.plan import PlanResult
from capsim.planning.seeds import SeedsResult
from capsim.planning.sweep import CompareResult, SweepResult
from capsim.report import html_charts as charts
from capsim.report.console import result_block
from capsim.report.html_plan import plan_page
from capsim.report.html_page import Section, items, key_values, page, text, verdict_badge, view_table, write_page
from capsim.report.planning_tables import capacity_view, compare_view, seeds_view, sweep_view
from capsim.report.run_figures import setup_title
from capsim.results.slo import Objectives, from_dict

SETUP_KEYS = ("workload", "model", "weights", "kv_cache", "gpu", "tp", "engine", "scheduler", "allocator",
              "max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size", "kv_capacity_tokens", "mode",
              "replicas", "seed")
BINDING = {"kv_capacity": "KV-cache capacity", "max_num_seqs": "max_num_seqs", "compute": "GPU compute",
           "memory": "GPU memory bandwidth", "overhead": "per-step overheads", "none": "none"}


def write_report(path: Path, result, objectives: Objectives | None = None) -> Path:
    """Build the report of `result` and write it to `path` whole (temp file, then rename)."""
    return write_page(path, report_html(result, objectives))


def report_html(result, objectives: Objectives | None = None) -> str:
    """The whole page for any of the result kinds the commands return."""
    charts.require_plotly()
    if isinstance(result, SeedsResult):
        return run_page(result.first, objectives, seeds=result.table)
    if isinstance(result, SweepResult):
        return sweep_page(result)
    if isinstance(result, CompareResult):
        return compare_page(result)
    if isinstance(result, CapacityResult):
        return capacity_page(result)
    if isinstance(result, PlanResult):
        return plan_page(result)
    return run_page(result, objectives)


def _setup_section(setup: dict) -> Section:
    pairs = [(k, setup[k]) for k in SETUP_KEYS if setup.get(k) is not None]
    return Section("Set-up", key_values(pairs, per_row=3))


def run_page(result, objectives: Objectives | None = None, seeds: pd.DataFrame | None = None) -> str:
    """A run's page: verdict, set-up, results (latency table and vLLM's block), CDFs, KV memory,
    batch size."""
    s = result.summary
    setup = s["setup"]
    if objectives is None:
        objectives = from_dict(_provenance(result).get("slo"))
    v = s["verdict"]
    verdict = Section("Verdict", verdict_badge(v["slo_met"]) + items(
        [("ok: " if c["met"] else "MISSED: ") + c["text"] for c in v["checks"]]
        + [f"Cost: {v['cost']}", f"Binding limit: {BINDING.get(v['binding'], v['binding'])}: {v['evidence']}"]
        + ([f"Near saturation: {v['near_saturation']}"] if v.get("near_saturation") else [])
        + [f"Next: {step}" for step in v["next_steps"]]))
    results = Section("Results" if seeds is None else f"Results of the first seed's run (seed {setup.get('seed')})",
                      _latency_table(s) + f"<details><summary>vLLM's result block</summary>"
                      f"<pre>{text(result_block(s))}</pre></details>")
    if seeds is not None:
        results.html += "<h3>Over seeds (mean ± 95% interval)</h3>" + view_table(seeds_view(seeds))
    gaps = _itl(result)
    steps = result.steps
    sections = [verdict, _setup_section(setup), results,
                Section("Latency", charts=[charts.latency_cdfs(result.requests, gaps, objectives.lines())],
                        notes=_thinned(len(result.requests), "requests") + _thinned(len(gaps[0]), "inter-token gaps")),
                Section("KV-cache memory", charts=[charts.kv_memory(steps, setup)],
                        notes=_binned(steps) + ["Red: memory held but not storing tokens (slack in the last block of each "
                                                "sequence when paged, space reserved but unused when contiguous); the "
                                                "lower panel shows it on its own scale."]),
                Section("Batch size", charts=[charts.batch_over_time(steps, setup)], notes=_binned(steps))]
    return page(f"capsim run: {setup['workload']}", setup_title(setup), sections, _footer(_provenance(result)))


def _latency_table(s: dict) -> str:
    stats = ["mean", "median"] + [f"p{q}" for q in s.get("percentiles", ["90", "99"]) if q != "50"]
    head = "".join(f"<th>{text(st)}</th>" for st in stats)
    rows = "".join(f'<tr><th class="text">{name} (ms)</th>' + "".join(
        f"<td>{_ms(s[f'{st}_{m}_ms'])}</td>" for st in stats) + "</tr>" for m, name in charts.LATENCIES)
    lines = [("completed requests", f"{s['completed']:,}"), ("request throughput", f"{s['request_throughput']:,.2f} req/s"),
             ("output throughput", f"{s['output_throughput']:,.0f} tok/s")]
    if "request_goodput" in s:
        lines.append(("goodput", f"{s['request_goodput']:,.2f} req/s ({100 * s['good_share']:.1f}% of requests)"))
    return key_values(lines) + f'<h3>Latency</h3><div class="wide"><table><tr><th></th>{head}</tr>{rows}</table></div>'


def _ms(value: float) -> str:
    """A latency cell: one decimal, or three significant figures under 1 ms (a unit-test model's
    0.047 ms is not '0.0')."""
    if value is None or value != value:  # no completed request: no latency
        return "n/a"
    return f"{value:,.1f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def _itl(result) -> tuple[np.ndarray, np.ndarray]:
    """Every inter-token gap (ms) with its count, for the ITL CDF."""
    parts = list(result.gaps.pieces())
    if not parts:
        return np.zeros(0), np.zeros(0)
    return np.concatenate([g for g, _ in parts]) * 1e3, np.concatenate([c for _, c in parts])


def _thinned(n: int, what: str) -> list[str]:
    if n <= charts.MAX_POINTS:
        return []
    return [f"The CDF of {n:,} {what} is drawn at {charts.MAX_POINTS:,} evenly spaced quantiles (exact at each)."]


def _binned(steps: pd.DataFrame) -> list[str]:
    if len(steps) <= charts.MAX_POINTS:
        return []
    return [f"{len(steps):,} step rows drawn as {charts.MAX_POINTS:,} time bins: duration-weighted means "
            "(and the maximum batch in each bin)."]


def _footer(prov: dict) -> str:
    return f"capsim {prov.get('capsim_version', '')} {prov.get('git_revision') or ''}".strip()


def _provenance(result) -> dict:
    return result.provenance or result.summary.get("provenance") or {}


def _slo_section(objectives: Objectives, judged: str) -> Section:
    goals = objectives.describe() or ["none given (add an slo: block to the workload, or --slo)"]
    return Section("Objectives", items(goals) + f'<p>{text(judged)}</p>')


def sweep_page(res: SweepResult) -> str:
    """A sweep's page: objectives and how many points met them, the table, latency against load."""
    frame = res.frame
    met = f"{int(frame['slo_met'].astype(bool).sum())} of {len(frame)} load points meet them." if "slo_met" in frame else ""
    knee = charts.knee(frame, res.over)
    note = ("Knee: the highest load before the first point capsim found saturated (queues growing through the run): "
            + (f"{knee:,.4g}." if knee is not None else "no knee in this range."))
    sections = [_slo_section(res.objectives, met), _setup_section(frame.iloc[0].to_dict()),
                Section("Results", view_table(sweep_view(frame, res.over))),
                Section("Latency against load", charts=[charts.latency_vs_load(frame, res.over, res.objectives.lines())],
                        notes=[note])]
    return page("capsim sweep", setup_title(frame.iloc[0].to_dict()), sections)


def compare_page(res: CompareResult) -> str:
    """A comparison's page: the table, bars per metric, and cost against throughput with its
    Pareto front when two or more rows have a price."""
    frame = res.frame
    ok = frame[frame["problem"].isna()] if "problem" in frame else frame
    names = [" · ".join(str(r[a]) for a in res.axes) or str(r["gpu"]) for r in ok.to_dict("records")]
    section = Section("Comparison", charts=[charts.compare_bars(frame, res.axes)])
    priced = ok.assign(name=names).dropna(subset=["usd_per_m_output_tokens", "output_throughput"])
    if len(priced) >= 2:
        section.charts.append(charts.pareto_front(priced, "usd_per_m_output_tokens", "output_throughput", "name",
                                                  "$ per 1M output tokens", "output tokens/s"))
        section.notes.append("Pareto front: the set-ups no other is both cheaper per token and faster than.")
    sections = [_slo_section(res.objectives, ""), Section("Results", view_table(compare_view(frame, res.axes))), section]
    return page("capsim compare: " + " x ".join(res.axes or ["set-up"]), str(ok.iloc[0]["workload"]) if len(ok) else "",
                sections)


def capacity_page(res: CapacityResult) -> str:
    """A capacity search's page: the capacity per set-up and every point it tried, per set-up."""
    frame, over = res.frame, res.over
    axes = [k for k in ("gpu", "kv_cache", "weights") if k in frame and frame[k].nunique() > 1] or ["gpu"]
    searched = Section("Every point tried", notes=["Dash-dot: the capacity found; dotted: the knee (the highest load "
                                                   "before the first saturated point)."])
    for n, mine in res.points.groupby("combination", sort=True):
        answer = frame[frame["combination"] == n].iloc[0]
        cap = None if pd.isna(answer[f"capacity_{over}"]) else float(answer[f"capacity_{over}"])
        tried = mine[mine["role"].astype(str).str.startswith("round")]
        searched.charts.append(charts.latency_vs_load(tried, over, res.objectives.lines(), capacity=cap,
                                                      title=f"Capacity search: {setup_title(answer.to_dict())}"))
    sections = [_slo_section(res.objectives, ""), Section("Capacity", view_table(capacity_view(frame, over, axes))),
                searched]
    return page("capsim capacity", "the highest load meeting every objective", sections)
