"""Catalogue listings: one row per entry, columns and JSON agree with the catalogues."""

from capsim.spec.catalog import hardware_catalog, model_catalog
from capsim.report.listings import engine_listing, gpu_listing, model_listing


def test_each_listing_has_a_row_per_entry_and_matching_json():
    for listing, catalog in ((gpu_listing(), hardware_catalog()), (model_listing(), model_catalog())):
        title, columns, rows, data = listing
        assert len(rows) == len(catalog) == len(data) and all(len(r) == len(columns) for r in rows)
        assert [r[0] for r in rows] == list(catalog)
    _, columns, rows, data = engine_listing()
    assert {"vllm", "trt-llm", "llama.cpp"} <= set(data) and all(len(r) == len(columns) for r in rows)


def test_model_listing_derives_sizes():
    _, columns, rows, data = model_listing()
    row = dict(zip(columns, rows[[r[0] for r in rows].index("llama-2-7b")]))
    assert row["kv_kib_per_token_fp16"] == 512.0 and round(row["params_b"], 1) == 6.7
    assert data["opt-13b"]["derived"]["kv_bytes_per_token_fp16"] == 819_200
