"""The HTML report in a real browser: headless Chromium opens each kind of report with the network
cut off, and the test fails on any script error or console error, checks that every chart drew
(an SVG with a drawn trace in each chart's div) and saves a screenshot under the test's tmp_path.

Skipped, saying why, where no Chromium is installed (`apt-get install chromium`; CI's .ci/run
installs it where it can).
"""

import json
import re
import shutil
import subprocess

import pytest

pytest.importorskip("plotly", reason="the HTML report needs plotly: pip install 'capsim[report]'")

from capsim.api import simulate  # noqa: E402
from capsim.planning.sweep import compare, sweep  # noqa: E402
from capsim.report.html_report import write_report  # noqa: E402
from capsim.results.slo import Objectives  # noqa: E402
from helpers import workload  # noqa: E402

BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine: apt-get install chromium "
                                "(Debian) to run the browser tests of the HTML report")

# Collects uncaught errors (capture phase: failed resource loads too), rejected promises and
# console.error calls, and writes them into the page once it has loaded and drawn.
PROBE = """<script>window.__capsimErrors=[];
window.addEventListener("error",function(e){window.__capsimErrors.push("error: "+(e.message||(e.target&&(e.target.src||e.target.href))||e.type))},true);
window.addEventListener("unhandledrejection",function(e){window.__capsimErrors.push("rejection: "+e.reason)});
(function(){var o=console.error;console.error=function(){window.__capsimErrors.push("console.error: "+Array.prototype.join.call(arguments," "));o.apply(console,arguments)}})();
window.addEventListener("load",function(){setTimeout(function(){var d=document.createElement("pre");d.id="capsim-probe";
d.textContent=JSON.stringify(window.__capsimErrors);document.body.appendChild(d)},300)});</script>"""
FLAGS = ["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--proxy-server=127.0.0.1:9",
         "--virtual-time-budget=5000", "--no-first-run", "--disable-extensions"]


def chromium(*args: str, timeout_s: float = 180) -> str:
    done = subprocess.run([BROWSER, *FLAGS, *args], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def check_in_browser(report, tmp_path, charts: int, height: int = 3200) -> str:
    """Open the report (a copy with the error probe) once, screenshot it into tmp_path, and return
    the dumped DOM after checking it: no errors, `charts` chart divs each with a drawn trace."""
    probe = tmp_path / f"{report.stem}-probe.html"
    probe.write_text(report.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    shot = tmp_path / f"{report.stem}.png"
    dom = chromium(f"--window-size=1400,{height}", f"--screenshot={shot}", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="capsim-probe">(.*?)</pre>', dom, re.S)
    assert found, "the page never finished loading (no probe output in the DOM)"
    assert json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")) == []
    divs = re.split(r'<div id="chart\d+"', dom)[1:]
    assert len(divs) == charts
    for i, div in enumerate(divs, 1):
        div = div.split("</section>")[0]
        assert 'class="main-svg"' in div, f"chart {i} drew no SVG"
        assert re.search(r'class="trace[^"]*".*?d="M[\d.-]', div, re.S), f"chart {i} has no drawn trace"
    assert shot.stat().st_size > 10_000
    return dom


def test_run_report_draws_in_a_browser(round_gpu_file, tmp_path):
    run = simulate(workload(round_gpu_file, requests=120), objectives=Objectives({"p99_ttft_ms": 5.0}, {"tpot": 1.0}))
    report = write_report(tmp_path / "run.html", run)  # the SLO lines come from the run's provenance
    dom = check_in_browser(report, tmp_path, charts=3)
    assert "limit: TTFT p99 &lt;= 5 ms" in dom and "goodput: TPOT &lt;= 1 ms" in dom  # SLO lines drawn
    assert "SLOs met" in dom and "KV-cache memory over time" in dom


def test_planning_reports_draw_in_a_browser(priced_gpu_file, tmp_path):
    goals = Objectives({"p99_ttft_ms": 20.0})
    path = workload(priced_gpu_file, requests=60, arrivals={"kind": "poisson", "rate_per_s": 2.0})
    swept = sweep(path, rates=[1.0, 4.0, 16.0, 64.0], objectives=goals, workers=1)
    dom = check_in_browser(write_report(tmp_path / "sweep.html", swept), tmp_path, charts=1, height=1600)
    assert "Latency against load" in dom
    compared = compare(path, kv_cache=["fp16", "fp8"], objectives=goals, workers=1, price=None)
    dom = check_in_browser(write_report(tmp_path / "compare.html", compared), tmp_path, charts=2, height=1400)
    assert "Pareto front" in dom


def test_plan_report_draws_in_a_browser(tmp_path):
    from capsim.planning.plan import plan
    from capsim.planning.plan_space import SearchSpace
    from helpers import unit_workload, write_workload

    path = write_workload(tmp_path / "unit.yaml", unit_workload("l40s", requests=40))
    space = SearchSpace(("l40s", "h100-sxm"), 4, tp=(1,), weights=("fp16",), kv_cache=("fp16",), engines=("vllm",),
                        max_num_seqs=(8,), max_num_batched_tokens=(4096,))
    res = plan(path, Objectives({"p99_ttft_ms": 100.0}), space, rate=150.0, workers=1, front_within=5.0, requests=400)
    assert res.winner is not None
    dom = check_in_browser(write_report(tmp_path / "plan.html", res), tmp_path, charts=2, height=1800)
    assert "meets every SLO" in dom and "vllm serve tiny" in dom and "Pareto front" in dom
