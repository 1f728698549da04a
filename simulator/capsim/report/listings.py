"""The catalogues as rows for `capsim gpus`, `capsim models` and `capsim engines`: (title,
columns, rows) for tables, and plain dicts for --format json."""

from __future__ import annotations

from capsim.spec import architecture as arch
from capsim.spec.catalog import hardware_catalog
from capsim.spec.catalog import model_catalog
from capsim.spec.serving import EngineProfile, engine_catalog


def gpu_listing() -> tuple[str, list[str], list[list], dict]:
    cat = hardware_catalog()
    columns = ["name", "aliases", "memory_gib", "bandwidth_gb_s", "fp16_tflops", "fp8_tflops", "price_usd_per_h"]
    rows = [[p.name, ", ".join(p.aliases), round(p.memory_bytes / 2**30, 1), round(p.memory_bandwidth_bytes_per_s / 1e9),
             round(p.peak_flops["fp16"] / 1e12, 1), round(p.peak_flops["fp8"] / 1e12, 1) if "fp8" in p.peak_flops else None,
             p.price_per_hour_usd] for p in cat.values()]
    return ("GPUs (dense tensor peaks; GeForce at FP32 accumulate)", columns, rows,
            {k: v.model_dump() for k, v in cat.items()})


def model_listing(specs: dict | None = None, title: str = "Models (from their published configs)"
                  ) -> tuple[str, list[str], list[list], dict]:
    """The catalogue's models (or the given specs, by name) with their derived sizes."""
    cat = model_catalog() if specs is None else specs
    columns = ["name", "params_b", "active_b", "layers", "kv_heads", "head_dim", "kv_kib_per_token_fp16",
               "state_mib_per_seq", "context"]
    rows, data = [], {}
    for name, spec in cat.items():
        p = arch.param_counts(spec)
        kv, state = arch.kv_bytes_per_token(spec, 2), arch.state_bytes_per_sequence(spec)
        rows.append([spec.name, round(p.total / 1e9, 2), round(p.active / 1e9, 2), spec.num_layers, spec.num_kv_heads,
                     spec.head_dim, round(kv / 1024, 1), round(state / 2**20, 1), spec.max_context_tokens])
        data[name] = spec.model_dump() | {"derived": {
            "total_params": p.total, "active_params": p.active, "flops_per_token": 2 * p.active,
            "kv_bytes_per_token_fp16": kv, "state_bytes_per_sequence": state}}
    return title, columns, rows, data


def _max_num_seqs(engine: EngineProfile) -> int | str:
    """The engine's running-request limit, or its rule when it derives it from the KV pool."""
    rule = engine.max_num_seqs_from_pool
    if rule is None:
        return engine.scheduler.max_num_seqs
    return f"from the KV pool ({rule.floor:,}-{rule.cap:,})"


def engine_listing() -> tuple[str, list[str], list[list], dict]:
    cat = engine_catalog()
    columns = ["name", "version", "scheduler", "max_num_seqs", "max_num_batched_tokens", "block_size",
               "gpu_memory_utilization", "cuda_graphs", "kernels_per_layer", "step_ms", "seq_us"]
    rows = [[e.name, e.version, e.scheduler.kind, _max_num_seqs(e),
             e.scheduler.max_num_batched_tokens or "max(max_model_len, 2048)",
             e.scheduler.block_size, e.gpu_memory_utilization, e.cuda_graphs, e.kernels_per_layer,
             round(e.overhead.step_s * 1e3, 3), round(e.overhead.seq_s * 1e6, 1)] for e in cat.values()]
    return ("Serving-engine profiles (capsim/data/engines.yaml; sources: --format json)", columns, rows,
            {k: v.model_dump() for k, v in cat.items()})
