"""The documentation: the site builds with `mkdocs build --strict` and its links resolve, the README
stays short and its Quick start is what CI runs, and the generated pages are current."""

from __future__ import annotations

import html
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import script_module

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# About two screens: the brief for the README is "what capsim answers, the two commands, one example
# with its output, a table of commands, the accuracy in one line, links".
README_MAX_LINES = 90
README_MAX_BYTES = 7_000


def _section(text: str, heading: str) -> str:
    """The body of a `## heading` section of a markdown text."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def test_site_builds_strict_and_links_resolve(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install '.[docs]' (the test extra includes it)")
    pytest.importorskip("material", reason="mkdocs-material is not installed: pip install '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(site)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 15
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for href in re.findall(r'href="([^"]+)"', text):
            href = html.unescape(href)
            if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("//"):
                continue  # an external link
            path, _, anchor = href.partition("#")
            if not path:
                target = page
            elif path.startswith("/"):  # 404.html links from the site's root
                target = site / path.lstrip("/")
            else:
                target = (page.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {href} (no such file)")
            elif anchor and target.suffix == ".html" and f'id="{anchor}"' not in target.read_text(encoding="utf-8"):
                broken.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    assert not broken, "broken links in the built site:\n" + "\n".join(broken)


def test_readme_is_short():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, "the README grew past two screens: move detail into docs/"
    assert len(text.encode()) <= README_MAX_BYTES, "the README grew past two screens: move detail into docs/"


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"^[a-z]+:", target):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_quick_start_is_what_ci_runs():
    """The second Quick start command is .ci/run's last line (pip's -q aside); the first installs
    the same way without the test extra and runs the main job."""
    blocks = re.findall(r"```bash\n(.*?)```", _section(README.read_text(encoding="utf-8"), "Quick start"), re.S)
    commands = [[line for line in block.splitlines() if line and not line.startswith("#")] for block in blocks]
    assert [len(c) for c in commands] == [1, 1], "the Quick start is two bash blocks of one command each"
    install, test = commands[0][0], commands[1][0]
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert len(ci) == 1, ".ci/run runs one install-and-test command"
    assert shlex.split(test) == [w for w in shlex.split(ci[0]) if w != "-q"]
    assert shlex.split(install) == shlex.split(test.replace("'.[test]'", ".").replace("python -m pytest", "capsim run "
                                                                                   "workloads/chat.yaml --gpu rtx4090"))
    assert (REPO / "workloads" / "chat.yaml").exists()


def test_readme_lists_every_command():
    typer_main = pytest.importorskip("typer.main")
    from capsim.cli.app import app

    table = _section(README.read_text(encoding="utf-8"), "Commands")
    names = set(re.findall(r"`(?:capsim )?([a-z][a-z-]*)", table))
    missing = [name for name in typer_main.get_command(app).commands if name not in names]
    assert not missing, f"the README's command table does not list: {', '.join(missing)}"


def test_cli_reference_is_current():
    docs_cli = script_module("docs_cli")
    committed = (REPO / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert committed == docs_cli.render(), "docs/reference/cli.md is stale: run `python scripts/docs_cli.py`"


def _fidelity_line(text: str) -> str:
    match = re.search(r"<!-- fidelity -->\n(.*?)\n<!-- /fidelity -->", text, re.S)
    assert match, "no <!-- fidelity --> line"
    return match.group(1).replace("(docs/fidelity.md)", "(fidelity.md)")


def test_readme_accuracy_is_the_fidelity_pages():
    page = (REPO / "docs" / "fidelity.md").read_text(encoding="utf-8")
    assert _fidelity_line(README.read_text(encoding="utf-8")) == _fidelity_line(page), (
        "README's accuracy line differs from docs/fidelity.md: run `python scripts/docs_fidelity.py`")
    assert "python scripts/docs_fidelity.py" in page and "capsim validate" in page


def test_fidelity_page_is_written_from_a_validation_run(tmp_path):
    """One real point through the suite: the page and the README line carry its figures."""
    from capsim.validation.runner import run_suite

    docs_fidelity = script_module("docs_fidelity")
    point = "xdai-rtx3090-llama3-8b-q4_k_m-tg512"
    outcomes = run_suite(None, only=[point], workers=1)
    (done,) = [o for o in outcomes if o.status == "ok"]
    error = round(done.error_pct, 1)
    page = docs_fidelity.render_page(outcomes)
    assert f"| calibration | decode | {point} |" in page
    assert f"| single-stream decode |  | {abs(error)} (1) |" in page  # no test point: its column is blank
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- fidelity -->\nold\n<!-- /fidelity -->\nend\n")
    docs_fidelity.write_readme_line(outcomes, readme)
    assert readme.read_text().splitlines()[2] == docs_fidelity.accuracy_line(outcomes)
    assert readme.read_text().endswith("<!-- /fidelity -->\nend\n")


def test_workload_examples_in_the_docs_load(tmp_path):
    """Every YAML block in the docs that starts with `model:` is a whole workload file: it loads."""
    from capsim.api.setup import load_workload

    blocks = [(page, block) for page in sorted((REPO / "docs").rglob("*.md"))
              for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
              if block.startswith("model:")]
    assert blocks, "the getting-started page shows a workload file"
    for i, (page, block) in enumerate(blocks):
        path = tmp_path / f"example{i}.yaml"
        path.write_text(block)
        load_workload(path)  # raises a CapsimError naming the field if the example is wrong


def test_the_ttft_figure_says_how_many_test_points_were_skipped_for_an_engine_start_up():
    from capsim.validation.runner import Outcome

    docs_fidelity = script_module("docs_fidelity")
    base = dict(file="f.yaml", engine="vllm", gpu="a100-80g", tp=1, model="llama-3.1-8b", metric="ttft_ms",
                statistic="mean", measured=100.0)
    outcomes = [Outcome(id="a", split="test", group="ttft", predicted=80.0, error_pct=-20.0, status="ok", **base),
                Outcome(id="b", split="test", group="ttft", predicted=None, error_pct=None, status="skipped",
                        reason="the measured run includes the engine's start-up (evidence); capsim simulates a warm "
                               "engine", **base),
                Outcome(id="c", split="test", group="ttft", predicted=None, error_pct=None, status="skipped",
                        reason="weight format not stated", **base)]
    line = docs_fidelity.accuracy_line(outcomes)
    assert "TTFT (prefill + ttft) 20.0% (1 point; 1 more skipped as measuring an engine's start-up" in line
    assert "1 more skipped as measuring an engine's start-up" in docs_fidelity._targets(outcomes)
    assert "start-up" not in docs_fidelity.accuracy_line(outcomes[:1] + outcomes[2:])  # other skips say nothing
