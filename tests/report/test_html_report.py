"""The HTML report without a browser: one self-contained file (nothing fetched), written whole,
with the set-up, verdict, tables and charts of each result kind; bounded in size for long runs;
the knee and Pareto rules; a clear error when plotly is missing. The browser test is
test_html_browser.py."""

import re
import sys

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("plotly", reason="the HTML report needs plotly: pip install 'capsim[report]'")

from capsim.api import simulate  # noqa: E402
from capsim.errors import CapsimError  # noqa: E402
from capsim.planning.capacity import capacity  # noqa: E402
from capsim.report import html_charts  # noqa: E402
from capsim.report.html_page import write_page  # noqa: E402
from capsim.report.html_report import report_html, write_report  # noqa: E402
from capsim.results.slo import Objectives  # noqa: E402
from helpers import unit_workload, workload  # noqa: E402


def chart_count(page: str) -> int:
    return len(re.findall(r'<div id="chart\d+" class="chart">', page))


def test_run_report_is_self_contained_with_setup_verdict_and_charts(round_gpu_file, tmp_path):
    run = simulate(workload(round_gpu_file))
    page = write_report(tmp_path / "r.html", run, Objectives({"p99_ttft_ms": 5.0})).read_text()
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import", page)  # nothing to fetch
    assert page.count("<script>") >= 4 and "Plotly.newPlot" in page
    for heading in ("Verdict", "Set-up", "Results", "Latency", "KV-cache memory", "Batch size"):
        assert f"<h2>{heading}</h2>" in page
    assert chart_count(page) == 3 and "limit: TTFT p99 \\u003c= 5 ms" in page  # plotly JSON escapes "<"
    assert "Serving Benchmark Result" in page  # vLLM's block, folded
    assert "time bins" not in page  # a short run is drawn whole


def test_long_run_is_drawn_binned_and_says_so(round_gpu_file):
    run = simulate(workload(round_gpu_file, requests=2000, arrivals={"kind": "poisson", "rate_per_s": 200.0}))
    assert len(run.steps) > html_charts.MAX_POINTS
    page = report_html(run)
    assert f"drawn as {html_charts.MAX_POINTS:,} time bins" in page
    fig = html_charts.kv_memory(run.steps, run.summary["setup"])
    assert all(len(trace.x) <= html_charts.MAX_POINTS for trace in fig.data)


def test_cdf_points_are_exact_where_kept():
    values = np.arange(10_000, dtype=float)[::-1]
    x, share = html_charts.cdf_points(values, n=100)
    assert len(x) == 100 and x[0] == 0 and x[-1] == 9_999 and share[-1] == 1.0
    assert np.allclose(share, (x + 1) / 10_000)
    x, share = html_charts.cdf_points(np.array([1.0, 2.0]), np.array([3, 1]))
    assert list(share) == [0.75, 1.0]


def test_knee_is_the_load_before_the_first_saturated_point():
    frame = pd.DataFrame({"rate_per_s": [8.0, 1.0, 2.0, 4.0], "saturated": [True, False, False, True]})
    assert html_charts.knee(frame, "rate_per_s") == 2.0
    assert html_charts.knee(frame.assign(saturated=False), "rate_per_s") is None
    assert html_charts.knee(frame.assign(saturated=True), "rate_per_s") is None


def test_pareto_front_keeps_only_undominated_points():
    cost = np.array([1.0, 2.0, 3.0, 2.5])
    speed = np.array([10.0, 20.0, 15.0, 20.0])
    assert list(html_charts.pareto_mask(cost, speed)) == [True, True, False, False]
    frame = pd.DataFrame({"usd": cost, "tps": speed, "name": list("abcd")})
    fig = html_charts.pareto_front(frame, "usd", "tps", "name", "$ per 1M tokens", "tokens/s")
    assert list(fig.data[1].text) == ["a", "b"]


def test_capacity_report_has_the_capacity_and_each_search(priced_gpu_file, round_gpu_file):
    goals = Objectives({"p99_ttft_ms": 200.0})
    res = capacity(unit_workload(priced_gpu_file), goals, gpu=[priced_gpu_file, round_gpu_file], workers=1,
                   tolerance=0.2)
    page = report_html(res)
    assert "<h2>Capacity</h2>" in page and chart_count(page) == 2
    assert "limit: TTFT p99 \\u003c= 200 ms" in page and "capacity " in page


@pytest.mark.parametrize("failure, error", [(OSError(28, "No space left on device"), CapsimError),
                                            (KeyboardInterrupt(), KeyboardInterrupt)])
def test_report_is_written_whole_or_not_at_all(tmp_path, monkeypatch, failure, error):
    target = tmp_path / "r.html"
    target.write_text("old")

    def fail(*args):
        raise failure

    monkeypatch.setattr("capsim.report.html_page.os.replace", fail)
    with pytest.raises(error):
        write_page(target, "<html>new</html>")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_report_path_must_be_a_file(tmp_path):
    with pytest.raises(CapsimError, match="is a folder"):
        write_page(tmp_path, "<html></html>")


def test_missing_plotly_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)
    with pytest.raises(CapsimError, match=r"capsim\[report\]"):
        html_charts.require_plotly()


def test_cli_writes_a_report_for_run_and_sweep(run_cli, round_gpu_file, tmp_path):
    from helpers import write_workload

    wfile = write_workload(tmp_path / "w.yaml", unit_workload(round_gpu_file, requests=30))
    code, _, err = run_cli("run", wfile, "--report", tmp_path / "run.html")
    assert code == 0 and f"wrote {tmp_path / 'run.html'}" in err
    assert chart_count((tmp_path / "run.html").read_text()) == 3
    code, _, err = run_cli("sweep", wfile, "--rate", "5,20", "--workers", "1", "--report", tmp_path / "sweep.html")
    assert code == 0 and "Latency against load" in (tmp_path / "sweep.html").read_text()


def test_cli_refuses_a_folder_as_report_before_running(run_cli, round_gpu_file, tmp_path, monkeypatch):
    from helpers import write_workload

    wfile = write_workload(tmp_path / "w.yaml", unit_workload(round_gpu_file, requests=30))
    monkeypatch.setattr("capsim.api.simulate", None)  # the check comes first: no simulation is started
    code, _, err = run_cli("run", wfile, "--report", tmp_path)
    assert code == 2 and "is a folder; give a file name such as report.html" in err
