"""Every figure of the source documents, at the documents' own precision (DESIGN §6)."""

import pytest
from capsim.errors import CapsimError
from capsim.reference.tables import (
    TableSetup,
    all_tables,
    batch_table,
    kv_capacity_table,
    kv_per_token_table,
    paged_waste_table,
    render,
    utilisation_table,
)
from helpers import REPO


def test_batch_table_matches_the_note():
    rows = {r["batch"]: r for r in batch_table().as_dicts()}
    note = {1: (16.9, 59), 8: (16.9, 474), 16: (16.9, 949), 26: (17.0, 1528), 32: (20.9, 1528), 64: (41.9, 1528)}
    for batch, (ms, tps) in note.items():
        assert round(rows[batch]["pass_time_ms"], 1) == ms
        assert round(rows[batch]["total_tokens_per_s"]) == tps
    # The note prints 21.0 ms at batch 32; the model gives 20.945 ms. Recorded, not fudged.
    assert rows[32]["pass_time_ms"] == 20.945
    assert [rows[b]["bound"] for b in (16, 26)] == ["memory", "compute"]


def _crossover(table):
    return float(table.notes[0].split("batch ")[1].split(":")[0])


@pytest.mark.parametrize("context", [8192, 32768])
def test_context_moves_the_crossover_earlier(context):
    assert _crossover(batch_table()) == 25.8  # 16.865 ms of weights / 0.6545 ms of compute per sequence
    with_kv = batch_table(TableSetup(context_tokens=context))
    crossover = _crossover(with_kv)
    assert crossover < 25.8
    assert any(r["batch"] == int(-(-crossover // 1)) for r in with_kv.as_dicts())
    # every pass is slower once each sequence reads its cache
    base = {r["batch"]: r["pass_time_ms"] for r in batch_table().as_dicts()}
    assert all(r["pass_time_ms"] > base[r["batch"]] for r in with_kv.as_dicts() if r["batch"] in base)


def test_kv_capacity_matches_the_note():
    rows = {r["format"]: r for r in kv_capacity_table().as_dicts()}
    assert rows["fp16"]["kv_bytes_per_token"] == 65536
    note = {"fp16": (115, 14, 3), "q8_0": (216, 26, 6), "tbq4": (445, 54, 13)}
    for fmt, (k_tokens, at8k, at32k) in note.items():
        assert round(rows[fmt]["tokens_that_fit"] / 1000) == k_tokens
        assert (rows[fmt]["sequences_at_8k"], rows[fmt]["sequences_at_32k"]) == (at8k, at32k)


def test_opt13b_bytes_per_token_and_request():
    row = kv_per_token_table().as_dicts()[0]
    assert row["kv_bytes_per_token"] == 819_200 and row["kib_per_token"] == 800.0
    assert row["request_bytes"] == 819_200 * 2048 and round(row["request_gib"], 1) == 1.6


def test_paged_waste_example():
    paged, contiguous = paged_waste_table().as_dicts()
    assert (paged["blocks"], paged["token_slots"], paged["empty_slots"]) == (7, 112, 12)
    assert contiguous["empty_slots"] == 1948


def test_utilisation_example_through_the_schedulers():
    rows = {r["scheduler"]: r for r in utilisation_table().as_dicts()}
    assert (rows["static"]["steps"], rows["static"]["busy_slot_steps"], round(rows["static"]["utilisation_pct"])) == (17, 40, 59)
    assert (rows["continuous"]["steps"], rows["continuous"]["busy_slot_steps"], round(rows["continuous"]["utilisation_pct"])) == (12, 40, 83)


def test_the_bundled_seed_workload_is_the_tables_one():

    from capsim.api import load_workload
    from capsim.reference.tables import SEED_UTILISATION

    path = REPO / "workloads" / "seed-utilisation.yaml"
    w = load_workload(path)
    assert w.model_dump(exclude_unset=True) | {} == {k: v for k, v in w.model_dump(exclude_unset=True).items()}
    assert w.output_tokens.values == SEED_UTILISATION["output_tokens"]["values"]
    assert w.scheduler.max_num_seqs == SEED_UTILISATION["scheduler"]["max_num_seqs"] and w.mode == "unit"


def test_other_setups_and_formats():
    tables = all_tables(TableSetup(gpu="h100", model="llama-3.1-8b", weights="fp8", kv_cache=["fp16", "fp8"]))
    batch = tables[0]
    assert any("h100-sxm profile" in a for a in batch.assumptions)
    text = render(tables, "markdown")
    assert "| batch | pass_time_ms |" in text
    assert render(tables, "csv").startswith("# Batch vs pass time")
    assert '"key": "kv_capacity"' in render(tables, "json")


def test_weights_that_do_not_fit_are_an_error():
    with pytest.raises(CapsimError, match="do not fit"):
        kv_capacity_table(TableSetup(gpu="rtx4090", model="llama-3.1-70b", weights="bf16"))
