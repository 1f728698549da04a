"""`capsim plan --report report.html`: the plan's page, built from the PlanResult the console
tables read (capsim.report.planning_tables): the verdict with the launch commands, the winner,
the Pareto fronts as tables and as charts of every deployment that met the SLOs."""

from __future__ import annotations

import pandas as pd

from capsim.planning.plan_output import shape_text
from capsim.report import html_charts as charts
from capsim.report.html_page import Section, items, page, view_table
from capsim.report.planning_tables import front_view, plan_lines, winner_view


def plan_page(res) -> str:
    """A plan's page: the winner (or the closest candidate), its launch commands and the reasons,
    the Pareto fronts, and each front as a chart over every feasible deployment simulated."""
    sections = [Section("Verdict", view_table(winner_view(res))),
                Section("Launch and reasons", items(plan_lines(res, explain=True)))]
    feasible = _feasible(res.frame)
    if not res.front.empty:
        front = Section("Pareto front", view_table(front_view(res.front)))
        if len(feasible) >= 2:
            front.charts.append(charts.pareto_front(feasible, "tokens_per_s_per_gpu", "tokens_per_s_per_user", "name",
                                                    "output tokens/s per GPU", "output tokens/s per user",
                                                    lower_x=False))
            front.charts.append(charts.pareto_front(feasible, "usd_per_m_output_tokens", "tokens_per_s_per_user",
                                                    "name", "$ per 1M output tokens", "output tokens/s per user"))
            front.notes.append("Grey: every deployment that met the SLOs at the target load; red: the front (no other "
                               "deployment is better on both axes).")
        sections.append(front)
    return page("capsim plan", f"{res.workload} ({res.model})", sections)


def _feasible(frame: pd.DataFrame) -> pd.DataFrame:
    """The candidates that met every SLO at their fewest replicas, named for the charts."""
    ok = frame[frame["status"] == "meets SLOs"] if "status" in frame else frame.iloc[0:0]
    names = [f"{r['gpu']} {shape_text(r)} {r['weights']}/{r['kv_cache']} x{int(r['replicas'])}"
             for r in ok.to_dict("records")]
    return ok.assign(name=names)
