"""The HTML report's interactive charts: Plotly figures built from the same DataFrames the PNG
figures (run_figures, planning_figures) read, so the two never disagree.

Every builder returns a `plotly.graph_objects.Figure`; `html_page` turns them into one
self-contained file. Time series and CDFs are thinned to at most `MAX_POINTS` points (the page
says so under the chart), which keeps a report of a million-request run a few megabytes.
Plotly is an optional dependency (extra `report`): `require_plotly` names the extra when it is
missing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from capsim.errors import CapsimError
from capsim.report.run_figures import time_bins

MAX_POINTS = 3000  # points per drawn series: CDFs are sampled at this many quantiles, time series binned
SLO_COLOURS = ("#d62728", "#9467bd", "#8c564b")
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
FONT = dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size=14)


def require_plotly():
    """The plotly module, or a CapsimError naming the extra that installs it."""
    try:
        import plotly  # noqa: F401
        import plotly.graph_objects as go
    except ImportError:
        raise CapsimError("--report needs the Python package plotly, which capsim installs as an extra: "
                          "pip install 'capsim[report]' (or pip install plotly).") from None
    return go


def _slo_trace(text: str, x: list, y: list, j: int):
    """An SLO line as a trace (legend entry, exact on log axes, where Plotly misplaces the
    annotations of add_hline/add_vline)."""
    import plotly.graph_objects as go

    return go.Scatter(x=x, y=y, mode="lines", name=text, line=dict(color=SLO_COLOURS[j % 3], width=2.5, dash="dash"),
                      hoverinfo="name")


def _layout(fig, title: str, **kw):
    legend = dict(font=dict(size=12)) | kw.pop("legend", {})
    fig.update_layout(title=dict(text=title, x=0.01), template="plotly_white", font=FONT, height=kw.pop("height", 420),
                      margin=dict(l=70, r=30, t=70, b=60), legend=legend, **kw)
    return fig


def cdf_points(values: np.ndarray, counts: np.ndarray | None = None, n: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, share <= x) of a (weighted) sample, sampled at no more than n points: exact at every
    point kept, with the first and last value always kept."""
    values = np.asarray(values, float)
    counts = np.ones(len(values)) if counts is None else np.asarray(counts, float)
    keep = ~np.isnan(values)
    values, counts = values[keep], counts[keep]
    if not len(values):
        return np.zeros(0), np.zeros(0)
    order = np.argsort(values, kind="stable")
    x, share = values[order], np.cumsum(counts[order]) / counts.sum()
    if len(x) > n:  # PERF: a million-request CDF drawn at n points looks the same and weighs 1/300th
        idx = np.unique(np.linspace(0, len(x) - 1, n).round().astype(int))
        x, share = x[idx], share[idx]
    return x, share


def latency_cdfs(requests: pd.DataFrame, itl: tuple[np.ndarray, np.ndarray] | None,
                 slo_lines: list | None = None):
    """TTFT, TPOT, ITL and E2EL CDFs over completed requests (ITL over every inter-token gap, from
    (gaps ms, counts)), with each SLO line on its metric's panel."""
    go = require_plotly()
    from plotly.subplots import make_subplots

    done = requests[requests["outcome"].astype(str) == "completed"]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[name for _, name in LATENCIES],
                        horizontal_spacing=0.09, vertical_spacing=0.16)
    for i, (metric, name) in enumerate(LATENCIES):
        row, col = i // 2 + 1, i % 2 + 1
        if metric == "itl":
            x, y = cdf_points(*itl) if itl is not None else (np.zeros(0), np.zeros(0))
        else:
            x, y = cdf_points(done[f"{metric}_ms"].to_numpy(float))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line=dict(shape="hv", color="#1f77b4", width=2), name=name,
                                 showlegend=False, hovertemplate=f"{name} %{{x:,.1f}} ms<br>share %{{y:.3f}}<extra></extra>"),
                      row=row, col=col)
        for j, (_, limit, text) in enumerate(line for line in slo_lines or [] if line[0] == metric):
            fig.add_trace(_slo_trace(text, [limit, limit], [0, 1.02], j), row=row, col=col)
        if len(x) and x[-1] / max(x[0], 1e-9) > 1000:  # a linear axis would crush the body of the curve
            fig.update_xaxes(type="log", row=row, col=col)
        fig.update_xaxes(title_text=f"{name} (ms)", row=row, col=col)
        fig.update_yaxes(title_text="share" if col == 1 else None, range=[0, 1.02], row=row, col=col)
    return _layout(fig, f"Latency distributions (CDF over {len(done):,} completed requests)", height=640)


def kv_memory(steps: pd.DataFrame, setup: dict):
    """KV memory over time, stacked to the capacity: tokens stored, the waste band (slack in
    paged blocks, or reserved-but-unused contiguous space) in red, and free; under it the waste
    alone on its own scale (a few percent of the capacity is a hairline on the first)."""
    go = require_plotly()
    from plotly.subplots import make_subplots

    data = time_bins(steps, MAX_POINTS)
    t = data["bin_end_s"].to_numpy(float)
    stored, held = data["kv_stored_tokens"].to_numpy(float), data["kv_held_tokens"].to_numpy(float)
    capacity = float(setup["kv_capacity_tokens"])
    waste = "reserved but unused" if setup.get("allocator") == "contiguous" else "waste (slack in blocks)"
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.08)
    for values, name, colour in ((stored, "tokens stored", "#1f77b4"), (np.maximum(held - stored, 0), waste, "#d62728"),
                                 (np.maximum(capacity - held, 0), "free", "#e5e5e5")):
        fig.add_trace(go.Scatter(x=t, y=values, name=name, stackgroup="kv", mode="lines", line=dict(width=0.5, shape="hv"),
                                 fillcolor=colour, marker=dict(color=colour),
                                 hovertemplate=f"{name}: %{{y:,.0f}} tokens<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=np.maximum(held - stored, 0), name=f"{waste}, own scale", mode="lines",
                             fill="tozeroy", line=dict(width=0.5, shape="hv", color="#d62728"), showlegend=False,
                             hovertemplate=f"{waste}: %{{y:,.0f}} tokens<extra></extra>"), row=2, col=1)
    fig.add_hline(y=capacity, line=dict(color="black", width=1), annotation_text=f"capacity {capacity:,.0f} tokens",
                  annotation_position="top left", row=1, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    fig.update_yaxes(title_text="KV cache (tokens)", range=[0, capacity * 1.08], tickformat=",", row=1, col=1)
    fig.update_yaxes(title_text=f"{waste.split(' (')[0]}<br>(tokens)", rangemode="tozero", tickformat=",", row=2, col=1)
    return _layout(fig, "KV-cache memory over time", hovermode="x unified", height=560)


def batch_over_time(steps: pd.DataFrame, setup: dict):
    """Sequences per forward pass (time-binned mean, and the max in each bin when binned) and
    requests waiting on a second axis."""
    go = require_plotly()
    data = time_bins(steps, MAX_POINTS)
    t = data["bin_end_s"].to_numpy(float)
    fig = go.Figure()
    if "max_num_seqs_in_bin" in data:
        fig.add_trace(go.Scatter(x=t, y=data["max_num_seqs_in_bin"], name="max in bin", mode="lines",
                                 line=dict(width=0, shape="hv"), fill="tozeroy", fillcolor="rgba(31,119,180,0.2)"))
    fig.add_trace(go.Scatter(x=t, y=data["num_seqs"], name="sequences per pass", mode="lines",
                             line=dict(color="#1f77b4", shape="hv")))
    fig.add_trace(go.Scatter(x=t, y=data["waiting"], name="requests waiting (right axis)", mode="lines", yaxis="y2",
                             line=dict(color="#ff7f0e", shape="hv", width=1), opacity=0.8))
    cap = setup.get("max_num_seqs")
    top = float(data.get("max_num_seqs_in_bin", data["num_seqs"]).max()) if len(data) else 1.0
    if cap is not None and cap <= 2 * top:
        fig.add_hline(y=cap, line=dict(color="#1f77b4", dash="dash", width=1), annotation_text=f"max_num_seqs {cap}",
                      annotation_position="top left")
    fig.update_xaxes(title_text="time (s)")
    fig.update_layout(yaxis=dict(title="sequences per forward pass", rangemode="tozero"),
                      yaxis2=dict(title="requests waiting", overlaying="y", side="right", rangemode="tozero",
                                  showgrid=False))
    return _layout(fig, "Batch size over time", hovermode="x unified", legend=dict(orientation="h", y=-0.2))


def knee(frame: pd.DataFrame, over: str) -> float | None:
    """The knee of a latency-against-load curve: the highest load before the first point capsim
    found saturated (queues growing, latency set by the run's length). None when no point in the
    range saturated, or the lowest one already did."""
    frame = frame.sort_values(over)
    if "saturated" not in frame:
        return None
    flags = frame["saturated"].fillna(False).astype(bool).to_numpy()
    if not flags.any() or flags[0]:
        return None
    return float(frame[over].to_numpy()[int(np.argmax(flags)) - 1])


def latency_vs_load(frame: pd.DataFrame, over: str, slo_lines: list | None = None, capacity: float | None = None,
                    title: str = "Latency against load"):
    """p50 and p99 TTFT and TPOT, and throughput, against the load column, with SLO lines, the
    knee (dotted) and the capacity found (dash-dot) when given."""
    go = require_plotly()
    from plotly.subplots import make_subplots

    frame = frame.sort_values(over)
    x = frame[over].to_numpy(float)
    label = "offered load (requests/s)" if over == "rate_per_s" else "closed-loop users"
    fig = make_subplots(rows=1, cols=3, subplot_titles=["TTFT", "TPOT", "throughput"], horizontal_spacing=0.07)
    for col, (metric, name) in enumerate(LATENCIES[:2], start=1):
        for stat, dash in (("median", "solid"), ("p99", "dash")):
            fig.add_trace(go.Scatter(x=x, y=frame[f"{stat}_{metric}_ms"], mode="lines+markers", line=dict(dash=dash),
                                     name=f"{name} {'p50' if stat == 'median' else stat} (ms)"), row=1, col=col)
        for j, (_, limit, text) in enumerate(line for line in slo_lines or [] if line[0] == metric):
            fig.add_trace(_slo_trace(text, [x.min(), x.max()], [limit, limit], j), row=1, col=col)
        fig.update_yaxes(title_text=f"{name} (ms)", type="log", row=1, col=col)
    fig.add_trace(go.Scatter(x=x, y=frame["request_throughput"], mode="lines+markers", name="completed requests/s"),
                  row=1, col=3)
    if over == "rate_per_s":
        fig.add_trace(go.Scatter(x=[0, x.max()], y=[0, x.max()], mode="lines", name="offered = served",
                                 line=dict(color="grey", dash="dot", width=1)), row=1, col=3)
    if "slo_met" in frame:  # ring the points that miss an SLO, as the PNG figure does
        miss = frame[~frame["slo_met"].astype(bool)]
        for col, y in ((1, "p99_ttft_ms"), (2, "p99_tpot_ms"), (3, "request_throughput")):
            fig.add_trace(go.Scatter(x=miss[over], y=miss[y], mode="markers", name="point misses an SLO",
                                     legendgroup="miss", showlegend=col == 1 and len(miss) > 0,
                                     marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color="#d62728", width=2))),
                          row=1, col=col)
    marks = [(knee(frame, over), "knee", "dot", "bottom right"), (capacity, "capacity", "dashdot", "top right")]
    for value, name, dash, where in marks:
        if value is None:
            continue
        for col in (1, 2, 3):  # shapes span the axis domain, so they sit right on log axes too
            fig.add_vline(x=value, line=dict(color="black", dash=dash, width=1.5), row=1, col=col)
        fig.add_annotation(x=value, y=0.02 if where.startswith("bottom") else 0.98, xref="x", yref="y domain",
                           text=f"{name} {value:,.4g}", showarrow=False, xanchor="left", bgcolor="rgba(255,255,255,0.8)")
    fig.update_xaxes(title_text=label)
    fig.update_yaxes(title_text="requests/s", rangemode="tozero", row=1, col=3)
    return _layout(fig, title, height=460, legend=dict(orientation="h", y=-0.25))


def compare_bars(frame: pd.DataFrame, axes_names: list[str]):
    """One bar per combination in four panels: output tokens/s, p99 TTFT, p99 TPOT, $ per 1M
    output tokens (a missing price leaves its bar out)."""
    go = require_plotly()
    from plotly.subplots import make_subplots

    ok = frame[frame["problem"].isna()] if "problem" in frame else frame
    names = [" · ".join(str(r[a]) for a in axes_names) or str(r["gpu"]) for r in ok.to_dict("records")]
    panels = (("output_throughput", "output tokens/s"), ("p99_ttft_ms", "TTFT p99 (ms)"),
              ("p99_tpot_ms", "TPOT p99 (ms)"), ("usd_per_m_output_tokens", "$ per 1M output tokens"))
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels], shared_yaxes=True, horizontal_spacing=0.03)
    for col, (key, name) in enumerate(panels, start=1):
        values = pd.to_numeric(ok[key], errors="coerce") if key in ok else pd.Series([np.nan] * len(ok))
        fig.add_trace(go.Bar(y=names, x=values, orientation="h", name=name, showlegend=False,
                             marker_color=[f"hsl({(i * 67) % 360},55%,50%)" for i in range(len(ok))],
                             text=[_short(v) for v in values], textposition="auto"),
                      row=1, col=col)
        if values.isna().all():
            fig.add_annotation(text="n/a: no price<br>(give --price-per-hour)" if key.startswith("usd") else "n/a",
                               x=0.5, y=0.5, xref=f"x{col if col > 1 else ''} domain",
                               yref=f"y{col if col > 1 else ''} domain", showarrow=False)
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Comparison: " + " x ".join(axes_names or ["set-up"]), height=180 + 40 * len(ok))


def _short(value: float) -> str:
    """A bar's label: three significant figures, thousands written out ('1,298', '0.432')."""
    if pd.isna(value):
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def pareto_front(frame: pd.DataFrame, x: str, y: str, label: str, x_title: str, y_title: str,
                 lower_x: bool = True, higher_y: bool = True):
    """Every candidate as a point and the Pareto front (no other point better in both x and y)
    as a line, for `capsim plan`'s cost-against-throughput (or latency) choices."""
    go = require_plotly()
    data = frame[[x, y, label]].dropna(subset=[x, y])
    front = pareto_mask(data[x].to_numpy(float), data[y].to_numpy(float), lower_x, higher_y)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=data[x], y=data[y], mode="markers", name="candidates", text=data[label],
                             marker=dict(color="#aaaaaa", size=8), hovertemplate="%{text}<extra></extra>"))
    best = data[front].sort_values(x)
    fig.add_trace(go.Scatter(x=best[x], y=best[y], mode="lines+markers+text", name="Pareto front", text=best[label],
                             textposition="top center", marker=dict(color="#d62728", size=10), line=dict(shape="hv")))
    fig.update_xaxes(title_text=x_title, rangemode="tozero")  # from zero: near-ties look like ties
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    return _layout(fig, "Pareto front")


def pareto_mask(x: np.ndarray, y: np.ndarray, lower_x: bool = True, higher_y: bool = True) -> np.ndarray:
    """True where no other point is at least as good in both x and y and better in one."""
    sx, sy = (x if lower_x else -x), (-y if higher_y else y)  # both to minimise
    keep = np.ones(len(x), dtype=bool)
    for i in range(len(x)):
        dominated = (sx <= sx[i]) & (sy <= sy[i]) & ((sx < sx[i]) | (sy < sy[i]))
        keep[i] = not dominated.any()
    return keep
