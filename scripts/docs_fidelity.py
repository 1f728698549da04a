"""Write the fidelity page (docs/fidelity.md) and the README's accuracy line from `capsim validate`.

    python scripts/docs_fidelity.py                 # run the whole suite (minutes), then write both
    python scripts/docs_fidelity.py --from DIR      # use a finished `capsim validate --out DIR`

Every figure on the page comes from the suite's outcomes: the MAPE per split and group, the
targets met or missed, and every point with its measured and predicted value. The README quotes
the test set's line between `<!-- fidelity -->` markers; this script rewrites that line too, so
the two cannot disagree (tests/test_docs.py checks they are the same).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "fidelity.md"
README = REPO / "README.md"
MARKER = re.compile(r"(<!-- fidelity -->\n)(.*?)(\n<!-- /fidelity -->)", re.S)
COMMAND = "python scripts/docs_fidelity.py"
GROUP_NAMES = {"decode": "single-stream decode", "prefill": "prefill", "ttft": "TTFT under load",
               "max_throughput": "max throughput", "concurrency": "concurrency sweeps",
               "slo_capacity": "rate within latency limits (MLPerf Server, Interactive)",
               "disaggregated": "disaggregated serving", "prefill+ttft": "TTFT (prefill + ttft)", "all": "all"}


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _cell(value) -> str:
    """A table cell: blank for None, text with its pipes escaped."""
    return "" if value is None else str(value).replace("|", "\\|")


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)]


def _groups(outcomes) -> dict[tuple[str, str], list]:
    """(split, group) -> [points, skipped, MAPE %, median |error| %, target %], from the runner."""
    from capsim.validation.runner import group_rows

    return {(row[0], row[1]): row[2:] for row in group_rows(outcomes)}


def _startup_skips(outcomes) -> int:
    """Test-set TTFT points skipped because their measured run includes an engine's start-up
    (`startup_transient`): the TTFT figure is quoted with their count beside it."""
    from capsim.validation.mapping import STARTUP_SKIP

    return sum(o.split == "test" and o.group in ("ttft", "prefill") and o.status != "ok"
               and STARTUP_SKIP in (o.reason or "") for o in outcomes)


def _startup_note(outcomes) -> str:
    n = _startup_skips(outcomes)
    return f"; {n} more skipped as measuring an engine's start-up, their errors in validation/README.md" if n else ""


def accuracy_line(outcomes) -> str:
    """The README's one line: the test set's MAPE per targeted group and overall."""
    groups = _groups(outcomes)
    parts = []
    for key in ("decode", "max_throughput", "prefill+ttft", "slo_capacity", "all"):
        points, _, value, _, _ = groups.get(("test", key), [0, 0, None, None, None])
        if points:
            name = "MLPerf rate within its latency limits" if key == "slo_capacity" else GROUP_NAMES[key]
            note = _startup_note(outcomes) if key == "prefill+ttft" else ""
            parts.append(f"{name} {value}% ({_n(points, 'point')}{note})")
    return ("Mean absolute error of the predictions against published measurements held out from every "
            f"parameter choice (the test set): {', '.join(parts)}. How it is measured and every point: "
            "[Fidelity](docs/fidelity.md).")


def _summary_table(outcomes) -> list[str]:
    groups = _groups(outcomes)
    header = ["group", "**test** MAPE % (points)", "calibration MAPE % (points)", "median abs. error %, test", "target MAPE %"]
    rows = []
    for key, name in GROUP_NAMES.items():
        test, calib = groups.get(("test", key)), groups.get(("calibration", key))
        if not (test and test[0]) and not (calib and calib[0]):
            continue
        fmt = lambda g: f"{g[2]} ({g[0]})" if g and g[0] else ""  # noqa: E731
        rows.append([name, f"**{fmt(test)}**" if fmt(test) else "", fmt(calib), test[3] if test else None,
                     (test or calib)[4]])
    return _table(header, rows)


def _targets(outcomes) -> str:
    """Which of the issue's targets the test set meets, as one sentence."""
    groups = _groups(outcomes)
    said = []
    for key in ("decode", "max_throughput", "prefill+ttft"):
        points, _, value, _, target = groups.get(("test", key), [0, 0, None, None, None])
        if points and value is not None and target is not None:
            note = _startup_note(outcomes) if key == "prefill+ttft" else ""
            said.append(f"{GROUP_NAMES[key]} {'met' if value <= target else 'not met'} ({value}% against {target}%{note})")
    return "Targets on the test set: " + "; ".join(said) + "." if said else ""


def _suite_counts(outcomes) -> list[str]:
    """How many points, files and skips, and which files make each split."""
    skipped = [o for o in outcomes if o.status != "ok"]
    lines = [f"The suite holds {len(outcomes)} points from {len({o.file for o in outcomes})} files; "
             f"{len(outcomes) - len(skipped)} are simulated and {len(skipped)} skipped, each with its reason "
             "(the most common below). Points are never adjusted.", ""]
    for split in ("test", "calibration"):
        mine = [o for o in outcomes if o.split == split]
        files = ", ".join(f"`{f}`" for f in sorted({o.file for o in mine}))
        lines.append(f"- **{split}** set: {_n(len(mine), 'point')}, {sum(o.status == 'ok' for o in mine)} simulated, from {files}.")
    reasons = Counter(o.reason for o in skipped)
    if reasons:
        lines += ["", *_table(["points skipped", "reason"], [[n, r] for r, n in reasons.most_common(6)])]
    return lines


def _points_table(outcomes) -> list[str]:
    from capsim.validation.runner import point_rows

    header = ["split", "group", "id", "engine", "gpu", "tp", "model", "metric", "measured", "predicted", "error %",
              "load share"]
    rows = [row[:12] for row, o in zip(point_rows(outcomes), outcomes) if o.status == "ok"]
    rows.sort(key=lambda row: (row[0] != "test", row[1], row[2]))  # the test set first
    return _table(header, rows)


def render_page(outcomes) -> str:
    """docs/fidelity.md from the suite's outcomes."""
    lines = [
        "# Fidelity",
        "",
        "capsim's realistic mode is checked in the open against **published measurements**: the points in "
        "`validation/` (single-stream decode and prefill, maximum throughput, TTFT under load and concurrency "
        "sweeps, published by engine maintainers, GPU vendors, cloud providers and MLPerf submitters). Each "
        "point becomes one simulation of the published set-up (engine, GPU, tensor parallelism, model, formats, "
        "lengths and load), measured over its whole run as the benchmark clients report; the error is "
        "predicted / measured - 1. How a point maps onto a simulation, and every source, is in "
        "`validation/README.md`.",
        "",
        f"Generated by `{COMMAND}`, which runs `capsim validate` (the same figures: "
        "`capsim validate --format markdown`; one set: `--split test`; one group: `--group decode`). How far a "
        "point's prediction moves with its load (a point near capacity amplifies any capacity error): "
        "`python scripts/validation_load_sensitivity.py ID`. Where a loaded run really operated (Little's law on its "
        "measured rate, TTFT and TPOT) and what capsim's step costs there: "
        "`python scripts/validation_operating_point.py ID`.",
        "",
        "## Prediction, not fit",
        "",
        "The suite is split by publisher document into a **test** set that no parameter may be chosen from "
        "and a **calibration** set that parameters may be chosen from. The accuracy capsim quotes is the test "
        "set's; the two are never pooled. Caveat: the profiles in use were chosen before the split, with "
        "llama.cpp PR #4766's points in view, so those are held out but not unseen (`validation/README.md`, "
        "\"Calibration and test sets\"); likewise MLPerf's Interactive runs for the GEMM 4-norm, whose GEMM "
        "measurements were looked up because of their residuals (its p was chosen on those measurements alone); and "
        "some test points' mappings were corrected, or the points skipped, after their residuals were read "
        "(AccelMark's vLLM admission limit, its answers' spread and its start-up rate level; NIM's steady window): "
        "each was looked for because of capsim's errors and rests on the sources' own code or figures, and "
        "`validation/README.md` gives the errors before each and the test-set figure with the start-up level counted.",
        "",
        *_suite_counts(outcomes),
        "",
        "## Accuracy",
        "",
        "MAPE = mean of |predicted - measured| / measured over the simulated points of a group.",
        "",
        *_summary_table(outcomes),
        "",
        _targets(outcomes),
        "",
        "The README's line:",
        "",
        "<!-- fidelity -->",
        accuracy_line(outcomes).replace("(docs/fidelity.md)", "(fidelity.md)"),
        "<!-- /fidelity -->",
        "",
        "## Every simulated point",
        "",
        "`load share`: for a run with offered arrivals, the share of the GPU's time the simulated requests' own "
        "work takes at that rate (the verdict's `Near saturation:` line from 0.75; [Metrics](metrics.md)). At a "
        "share s a 1% error in capsim's step price moves TTFT and TPOT by s / (1 - s) percent or more, so the "
        "errors of points above about 0.75 say more about capacity than about latency.",
        "",
        *_points_table(outcomes),
    ]
    return "\n".join(lines).rstrip() + "\n"


def load_outcomes(folder: Path):
    """The outcomes of a finished `capsim validate --out DIR` (its validation.json)."""
    from capsim.validation.runner import Outcome

    data = json.loads((folder / "validation.json").read_text(encoding="utf-8"))
    return [Outcome(**point) for point in data["points"]]


def write_readme_line(outcomes, readme: Path = README) -> None:
    """Replace the README's accuracy line between its markers (an error if they are missing)."""
    text = readme.read_text(encoding="utf-8")
    if not MARKER.search(text):
        raise SystemExit(f"{readme}: no <!-- fidelity --> ... <!-- /fidelity --> markers to write between")
    readme.write_text(MARKER.sub(lambda m: m.group(1) + accuracy_line(outcomes) + m.group(3), text), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, help="a finished `capsim validate --out DIR` folder")
    parser.add_argument("--workers", type=int, default=None, help="parallel simulations (default: one per core)")
    args = parser.parse_args(argv)
    if args.source is not None:
        outcomes = load_outcomes(args.source)
    else:
        from capsim.validation.runner import run_suite

        outcomes = run_suite(None, workers=args.workers)
    PAGE.write_text(render_page(outcomes), encoding="utf-8")
    write_readme_line(outcomes)
    print(f"wrote {PAGE.relative_to(REPO)} and the accuracy line of {README.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
