"""Figures: the right titles, labels and lines (not pixels), drawn from DataFrames and saved files."""

import pandas as pd
import pytest
from capsim.reference.curves import batch_curves
from capsim.errors import CapsimError
from capsim.report.run_figures import (
    GANTT_MAX_REQUESTS,
    SLIDE_FONTS,
    batch_over_time,
    kv_memory,
    latency_cdfs,
    plot_run,
    plot_run_dir,
    save,
    setup_title,
    slot_gantt,
    slot_intervals,
)
from capsim.report.planning_figures import batch_figure, compare_figure, latency_vs_load, plot_saved
from capsim.report.planning_figures import plot_result as plot_saved_result
from capsim.api import simulate
from capsim.results.slo import Objectives
from capsim.planning.sweep import compare, sweep
from helpers import unit_workload, workload

SEED_EXAMPLE = {"mode": "unit", "arrivals": {"kind": "all_at_once"}, "requests": 8,
                "prompt_tokens": {"dist": "fixed", "value": 16},
                "output_tokens": {"dist": "sequence", "values": [9, 3, 4, 2, 8, 3, 5, 6]},
                "scheduler": {"kind": "continuous", "max_num_seqs": 4}}


@pytest.fixture
def static_run(round_gpu_file):
    return simulate(workload(round_gpu_file, **SEED_EXAMPLE), scheduler="static")


def labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_setup_title_names_the_setup(static_run):
    title = setup_title(static_run.summary["setup"])
    assert title == "tiny (fp16) · KV fp16 · round-gpu · static scheduler, contiguous KV · unit mode"


def test_slot_intervals_are_the_explainers_picture(static_run):
    # static batching: r0..r3 start at step 1; r4..r7 wait for the whole first batch (9 steps)
    spans = slot_intervals(static_run.requests, static_run.steps).set_index("request_id")
    assert list(spans.loc[[0, 1, 2, 3], "first_step"]) == [0, 0, 0, 0]
    assert list(spans.loc[[0, 1, 2, 3], "last_step"]) == [8, 2, 3, 1]
    assert list(spans.loc[[4, 5, 6, 7], "first_step"]) == [9, 9, 9, 9]
    assert spans.loc[7, "last_step"] == 14 and spans.loc[4, "last_step"] == 16
    assert sorted(spans["slot"].unique()) == [0, 1, 2, 3] and spans.loc[4, "slot"] == spans.loc[0, "slot"]


def test_gantt_labels_each_request(static_run):
    fig = slot_gantt(static_run.requests, static_run.steps, static_run.summary["setup"])
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == [f"r{i}" for i in range(8)]
    assert ax.get_xlabel() == "step (forward pass)" and ax.get_ylabel() == "slot"
    assert ax.get_xlim() == (0.5, 17.5)
    assert "17 steps, 4 slots used" in fig._suptitle.get_text() and "utilisation 59%" in fig._suptitle.get_text()


def test_gantt_without_labels_for_many_requests(round_gpu_file):
    run = simulate(workload(round_gpu_file, requests=60))
    fig = slot_gantt(run.requests, run.steps, run.summary["setup"])
    assert len(fig.axes[0].texts) == 0 and "60 requests" in fig._suptitle.get_text()


def test_cdfs_have_units_percentiles_and_slo_lines(round_gpu_file):
    run = simulate(workload(round_gpu_file))
    lines = Objectives({"p99_ttft_ms": 1.0}, {"tpot": 0.5}).lines()
    fig = latency_cdfs(run.requests, run.summary["setup"], lines)
    ttft, tpot = fig.axes
    assert ttft.get_xlabel() == "TTFT (ms)" and tpot.get_xlabel() == "TPOT (ms)"
    assert ttft.get_ylabel() == "share of completed requests" and ttft.get_title() == "TTFT: 40 requests"
    assert "limit: TTFT p99 <= 1 ms" in labels(ttft) and "goodput: TPOT <= 0 ms" in labels(tpot)
    assert any(t.startswith("p99 ") for t in labels(ttft))
    assert "Latency distributions" in fig._suptitle.get_text()


@pytest.mark.parametrize("allocator, slack", [("paged", "internal waste (slack in blocks)"),
                                              ("contiguous", "reserved but unused")])
def test_kv_memory_stacks_stored_slack_and_free(round_gpu_file, allocator, slack):
    run = simulate(workload(round_gpu_file, allocator=allocator, num_gpu_blocks=2000 if allocator == "paged" else 8000))
    fig = kv_memory(run.steps, run.summary["setup"])
    ax = fig.axes[0]
    capacity = run.summary["setup"]["kv_capacity_tokens"]
    assert labels(ax) == ["tokens stored", slack, "free", f"capacity {capacity:,} tokens"]
    assert ax.get_ylabel() == "KV cache (tokens)"
    assert f"{100 * run.summary['kv_utilisation']:.1f}%" in ax.get_title()
    # the waste band again on its own scale, so that a few percent of the capacity is visible
    low = fig.axes[1]
    assert low.get_xlabel() == "time (s)" and low.get_title().startswith(f"{slack}: ")
    waste = (run.steps["kv_held_tokens"] - run.steps["kv_stored_tokens"]).max()
    assert waste > 0 and waste <= low.get_ylim()[1] <= 1.2 * waste


def test_batch_over_time_bins_long_runs(round_gpu_file):
    run = simulate(workload(round_gpu_file, requests=200))
    assert len(run.steps) > 2000
    fig = batch_over_time(run.steps, run.summary["setup"])
    ax, queue = fig.axes
    assert labels(ax) == ["max in bin", "sequences per pass (time-binned mean)", "max_num_seqs 8",
                          "requests waiting (right axis)"]
    assert ax.get_ylabel() == "sequences per forward pass" and queue.get_ylabel() == "requests waiting"


def test_batch_figure_marks_crossovers_and_the_notes_batches():
    fig = batch_figure(batch_curves(context_tokens=8192))
    pass_ax, tput_ax = fig.axes
    assert pass_ax.get_ylabel() == "pass time (ms)" and tput_ax.get_ylabel() == "total tokens/s"
    assert labels(pass_ax) == ["weights only", "the note's batches", "weights + KV at 8,192 tokens of context"]
    assert sorted(t.get_text() for t in pass_ax.texts) == ["crossover\nbatch 24.3", "crossover\nbatch 25.8"]
    assert "qwen3.5-27b (q4_k_m) on rtx4090" in fig._suptitle.get_text()


def test_latency_vs_load_with_slo_and_capacity_lines(priced_gpu_file):
    goals = Objectives({"p99_ttft_ms": 100.0, "p99_tpot_ms": 50.0})
    res = sweep(unit_workload(priced_gpu_file), rates=[10.0, 50.0, 150.0], objectives=goals, workers=1)
    fig = latency_vs_load(res.frame, res.over, goals.lines(), capacity=42.0)
    ttft, tpot, tput = fig.axes
    assert ttft.get_xlabel() == "offered load (requests/s)" and ttft.get_ylabel() == "TTFT (ms)"
    assert "limit: TTFT p99 <= 100 ms" in labels(ttft) and "limit: TPOT p99 <= 50 ms" in labels(tpot)
    assert "capacity 42" in labels(tput) and "point misses an SLO" in labels(ttft)
    assert tput.get_ylabel() == "requests/s"


def test_compare_figure_shows_na_without_a_price(priced_gpu_file, round_gpu_file):
    res = compare(unit_workload(priced_gpu_file, requests=10), gpu=[priced_gpu_file, round_gpu_file], workers=1)
    fig = compare_figure(res.frame, res.axes)
    assert [ax.get_xlabel() for ax in fig.axes][-1] == "$ per 1M output tokens"
    assert [t.get_text() for t in fig.axes[-1].texts][1] == " n/a"
    assert fig.axes[-1].texts[0].get_text().startswith(" $")


def test_run_figures_redrawn_from_saved_files(round_gpu_file, tmp_path):
    run = simulate(workload(round_gpu_file, requests=10))
    run.write(tmp_path / "run")
    paths = plot_run_dir(tmp_path / "run")
    assert sorted(p.name for p in paths) == sorted(f"{s}.{e}" for s in ("latency_cdf", "kv_memory", "batch_size",
                                                                        "slot_gantt") for e in ("png", "svg"))
    assert all(p.stat().st_size > 1000 and p.parent == tmp_path / "run" / "plots" for p in paths)


def test_save_writes_png_and_an_svg_without_a_date(static_run, tmp_path):
    fig = slot_gantt(static_run.requests, static_run.steps, static_run.summary["setup"])
    png, svg = save(fig, tmp_path, "gantt")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "<dc:date>" not in svg.read_text()
    pd.testing.assert_frame_equal(static_run.steps, static_run.steps)  # drawing does not touch the frames


def test_plot_saved_compare_and_capacity_from_their_files(priced_gpu_file, tmp_path):
    from capsim.planning.capacity import capacity

    w = unit_workload(priced_gpu_file, requests=40)
    compare(w, kv_cache=["fp16", "q8_0"], workers=1).write(tmp_path / "c")
    assert [p.name for p in plot_saved(tmp_path / "c")] == ["compare.png", "compare.svg"]
    res = capacity(w, Objectives({"p99_ttft_ms": 100.0}), tolerance=0.5, workers=1)
    res.write(tmp_path / "cap")
    paths = plot_saved(tmp_path / "cap", tmp_path / "figs")
    assert [p.name for p in paths] == ["capacity_search.png", "capacity_search.svg"]
    with pytest.raises(CapsimError, match=r"nothing to plot.*requests.csv or .parquet; the step table, steps.csv or .parquet, only with --steps"):
        plot_saved(tmp_path / "figs")


def test_slot_gantt_only_for_runs_small_enough_to_read(round_gpu_file, tmp_path):
    run = simulate(workload(round_gpu_file, requests=GANTT_MAX_REQUESTS + 10))
    names = {p.name for p in plot_run(run.summary, run.requests, run.steps, tmp_path)}
    assert names == {f"{s}.{e}" for s in ("latency_cdf", "kv_memory", "batch_size") for e in ("png", "svg")}


def test_saved_figures_have_slide_sized_text(static_run, tmp_path):
    fig = latency_cdfs(static_run.requests, static_run.summary["setup"], [("ttft", 1.0, "limit")])
    save(fig, tmp_path, "cdf")
    ax = fig.axes[0]
    assert ax.xaxis.label.get_fontsize() == SLIDE_FONTS["label"] >= 12
    assert ax.get_xticklabels()[0].get_fontsize() == SLIDE_FONTS["ticks"]
    assert {t.get_fontsize() for t in ax.get_legend().get_texts()} == {SLIDE_FONTS["legend"]}


def test_capacity_figures_are_named_by_set_up(priced_gpu_file, tmp_path):
    from capsim.planning.capacity import capacity

    res = capacity(unit_workload(priced_gpu_file, requests=40), Objectives({"p99_ttft_ms": 100.0}), tolerance=0.5,
                   workers=1, kv_cache=["fp16", "q8_0"])
    paths = plot_saved_result(res, tmp_path)
    assert [p.name for p in paths] == ["capacity_search_fp16.png", "capacity_search_fp16.svg",
                                       "capacity_search_q8_0.png", "capacity_search_q8_0.svg"]


def test_slo_lines_are_kept_on_redraws_from_summary_json(run_cli, round_gpu_file, tmp_path):
    from helpers import write_workload

    w = unit_workload(round_gpu_file, requests=30, slo={"goodput": {"ttft_ms": 900, "tpot_ms": 70}})
    wfile = write_workload(tmp_path / "w.yaml", w)
    assert run_cli("run", wfile, "--out", tmp_path / "run", "--slo", "ttft_p99_ms=800")[0] == 0
    assert run_cli("plot", tmp_path / "run")[0] == 0
    svg = (tmp_path / "run" / "plots" / "latency_cdf.svg").read_text()
    assert "limit: TTFT p99 &lt;= 800 ms" in svg  # the objectives the run was judged by, from summary.json
    assert run_cli("run", wfile, "--out", tmp_path / "run2")[0] == 0
    assert run_cli("plot", tmp_path / "run2")[0] == 0
    svg = (tmp_path / "run2" / "plots" / "latency_cdf.svg").read_text()
    assert "goodput: TTFT &lt;= 900 ms" in svg and "goodput: TPOT &lt;= 70 ms" in svg
