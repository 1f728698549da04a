"""A workload (+ command-line overrides) resolved against the catalogues into a `Setup`: the model,
GPU, number formats, serving-engine defaults and the KV-cache budget one run needs, checked so that
a bad combination is a CapsimError naming the field before anything runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capsim.cost.memory import MemoryBudget, memory_budget
from capsim.cost.parallel import stage_layers
from capsim.errors import CapsimError
from capsim.spec import config as C
from capsim.spec.catalog import load_hardware, load_model
from capsim.spec.formats import NumberFormat, get_format
from capsim.sim.schedulers import CHUNKED_KINDS
from capsim.spec.serving import EngineProfile, load_engine
from capsim.workload.schema import WorkloadConfig
from capsim.workload.streams import check_memory, shortest_request_tokens, with_paths_from


@dataclass(frozen=True)
class Setup:
    """A workload resolved against the catalogues: everything one run needs, nothing random."""

    workload: WorkloadConfig
    source: str  # where the workload came from (file path or "inline")
    base_dir: Path | None
    model: C.ModelSpec
    hardware: C.HardwareProfile
    weights: NumberFormat
    kv_cache: NumberFormat
    allocator: str
    max_model_len: int
    max_num_batched_tokens: int
    memory: MemoryBudget
    engine: EngineProfile | None = None  # the serving engine's profile (None: the bare GPU roofline)
    # The part of the model one GPU group runs: pp > 1 its largest pipeline stage, ep > 1 one
    # expert-parallel rank's experts (None: the whole model)
    stage_model: C.ModelSpec | None = None

def load_workload(path: str | Path) -> WorkloadConfig:
    """Read and validate a workload YAML (errors name the file and the field). Every path in it
    (a GPU profile file, a trace) is relative to the workload file's folder, and comes back
    absolute."""
    path = Path(path)
    return with_paths_from(C.load_yaml_as(WorkloadConfig, path), path.absolute().parent)

OVERRIDABLE = ("gpu", "model", "weights", "kv_cache", "scheduler", "allocator", "rate", "requests", "seed",
               "max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks", "mode", "horizon_s", "engine", "tp", "pp", "ep", "replicas", "router", "serving",
               "prefix_caching", "preemption")

def apply_overrides(w: WorkloadConfig, source: str, **overrides) -> WorkloadConfig:
    """Return the workload with command-line values applied and re-validated. `requests` replaces
    the workload's stopping rule: the run sends that many requests, whatever its duration_s."""
    data = w.model_dump(exclude_unset=True)
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - set(OVERRIDABLE)
    if unknown:
        raise CapsimError(f"unknown override(s): {', '.join(sorted(unknown))}; allowed: {', '.join(OVERRIDABLE)}.")
    sched = dict(data.get("scheduler", {}))
    for key, value in given.items():
        if key == "scheduler":
            sched["kind"] = value
        elif key in ("max_num_seqs", "max_num_batched_tokens", "preemption"):
            sched[key] = value
        elif key == "requests":
            data["requests"] = value
            data.pop("duration_s", None)
        elif key == "rate":
            arrivals = dict(data["arrivals"])
            if arrivals.get("kind") not in ("poisson", "gamma", "constant"):
                raise CapsimError(
                    f"--rate: the workload's arrivals are '{arrivals.get('kind')}', which have no rate; "
                    "--rate works with poisson, gamma and constant arrivals."
                )
            arrivals["rate_per_s"] = value
            data["arrivals"] = arrivals
        else:
            data[key] = value
    if sched:
        data["scheduler"] = sched
    return C.validate(WorkloadConfig, data, f"{source} (with command-line options)")

def resolve(w: WorkloadConfig, source: str = "inline", base_dir: Path | None = None) -> Setup:
    """Look up the model, GPU and formats, size the KV cache, and check the scheduler limits."""
    model = w.model if isinstance(w.model, C.ModelSpec) else _look_up(load_model, w.model, source, "model")
    if w.gpu is None:
        raise CapsimError(f"{source}: no GPU given: set 'gpu' in the workload or pass --gpu (see `capsim gpus`).")
    hardware = _look_up(load_hardware, w.gpu, source, "gpu")
    weights = get_format(w.weights, where=f"{source}: field 'weights'")
    kv_fmt = get_format(w.kv_cache, for_kv=True, where=f"{source}: field 'kv_cache'")
    engine = _engine(w, source)
    if engine is not None:
        engine = engine.for_endpoint(w.endpoint)
    seqs_given = "max_num_seqs" in _scheduler_keys_given(w)
    w = with_engine_defaults(w, engine, hardware)
    _check_tp(model, w.tp, source)
    stage = stage_model(model, w.pp, source) or rank_model(model, w.ep, source)
    check_memory(w, source)
    sched = w.scheduler
    max_model_len = w.max_model_len or model.max_context_tokens
    if max_model_len > model.max_context_tokens:
        raise CapsimError(f"{source}: field 'max_model_len' is {max_model_len:,}, above {model.name}'s context length of "
                          f"{model.max_context_tokens:,} tokens; give at most that (or leave it out to use it).")
    _check_some_request_fits(w, max_model_len, source)
    budget = sched.max_num_batched_tokens
    if budget is None:
        budget = 2048 if sched.kind in CHUNKED_KINDS else max(max_model_len, 2048)
    if sched.kind == "continuous" and budget < max_model_len:
        raise CapsimError(
            f"{source}: field 'scheduler.max_num_batched_tokens' is {budget}, below max_model_len {max_model_len}; "
            "the continuous scheduler prefills a whole prompt in one step, so the budget must be at least "
            "max_model_len (or use kind: chunked)."
        )
    allocator = w.allocator or ("contiguous" if sched.kind == "static" else "paged")
    samples = max([w.samples] + [c.samples or 0 for c in w.classes or []])
    if allocator == "contiguous" and (samples > 1 or w.prefix_caching):
        raise CapsimError(f"{source}: parallel samples and prefix caching share KV blocks, which needs "
                          "allocator: paged (a contiguous reservation cannot be shared).")
    if w.speculative and w.speculative.draft_model:  # an unknown draft is named against its field
        _look_up(load_model, w.speculative.draft_model, source, "speculative.draft_model")
    memory = _memory(w, stage or model, hardware, weights, kv_fmt, allocator, budget, engine, w.tp, w.num_gpu_blocks)
    if memory.num_blocks <= 0 and memory.kv_bytes > 0:
        raise CapsimError(
            f"{source}: field 'scheduler.block_size' is {sched.block_size:,}: one KV block of that many tokens takes "
            f"{memory.bytes_per_block / 2**20:,.1f} MiB, more than the {memory.kv_bytes / 2**20:,.1f} MiB left for the KV "
            f"cache on {hardware.name}; use a smaller block_size (vLLM uses 16).")
    if memory.num_blocks <= 0:
        raise CapsimError(
            f"{source}: {model.name} with {weights.name} weights ({memory.weight_bytes / 1e9:.1f} GB) leaves no memory "
            f"for the KV cache on {hardware.name} ({hardware.memory_bytes / 2**30:.0f} GiB x "
            f"gpu_memory_utilization {w.gpu_memory_utilization}). Use a smaller model or weight format, or a bigger GPU."
        )
    if engine is not None and engine.max_num_seqs_from_pool is not None and not seqs_given:
        # The engine sizes its request limit from the pool after sizing the pool, so the limit
        # never feeds back into the memory budget.
        seqs = engine.max_num_seqs_from_pool.limit(memory.kv_tokens, max_model_len)
        w = w.model_copy(update={"scheduler": w.scheduler.model_copy(update={"max_num_seqs": seqs})})
    return Setup(w, source, base_dir, model, hardware, weights, kv_fmt, allocator, max_model_len, budget, memory,
                 engine, stage)

def _memory(w: WorkloadConfig, model, hardware, weights, kv_fmt, allocator: str, max_num_batched_tokens: int,
            engine: EngineProfile | None, tp: int, num_gpu_blocks: int | None) -> MemoryBudget:
    """The KV budget per GPU (capsim.cost.memory) of a workload's set-up, at this KV format and TP."""
    sched = w.scheduler
    draft = load_model(w.speculative.draft_model) if w.speculative and w.speculative.draft_model else None
    return memory_budget(
        model, hardware, weights, kv_fmt, block_size=sched.block_size if allocator == "paged" else 1,
        gpu_memory_utilization=w.gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=sched.max_num_seqs, realistic=w.mode == "realistic", num_gpu_blocks=num_gpu_blocks,
        engine=engine if w.mode == "realistic" else None, tp=tp, draft=draft,
    )

def budget_with(setup: Setup, kv_fmt: NumberFormat | None = None, tp: int | None = None) -> MemoryBudget:
    """The set-up's KV budget with another KV format or TP (what the verdict suggests)."""
    return _memory(setup.workload, setup.stage_model or setup.model, setup.hardware, setup.weights, kv_fmt or setup.kv_cache,
                   setup.allocator, setup.max_num_batched_tokens, setup.engine, tp or setup.workload.tp, None)

def _engine(w: WorkloadConfig, source: str) -> EngineProfile | None:
    return None if w.engine is None else _look_up(load_engine, w.engine, source, "engine")

def _look_up(load, name: str, source: str, field: str):
    """A catalogue entry by name; an unknown one is reported against the workload's field."""
    try:
        return load(name)
    except CapsimError as exc:
        raise CapsimError(f"{source}: field '{field}': {exc}") from None

def with_engine_defaults(w: WorkloadConfig, engine: EngineProfile | None, hardware: C.HardwareProfile) -> WorkloadConfig:
    """The workload with the engine's scheduling defaults (kind, max_num_seqs,
    max_num_batched_tokens, block_size) and gpu_memory_utilization wherever the workload (or the
    command line) leaves them unset."""
    if engine is None:
        return w
    defaults = engine.scheduler_for(hardware.memory_visible_bytes or hardware.memory_bytes, hardware.name)
    given = _scheduler_keys_given(w)
    if "kind" in given and w.scheduler.kind != defaults.kind:
        # The engine's token budget belongs to its own batching mode: vLLM with chunked prefill
        # turned off defaults to max(max_model_len, 2048), which resolve() applies to an unset budget.
        given = given | {"max_num_batched_tokens"}
    sched = {k: getattr(defaults, k) for k in ("kind", "max_num_seqs", "max_num_batched_tokens", "block_size")
             if k not in given}
    update = {"scheduler": w.scheduler.model_copy(update=sched)}
    if "gpu_memory_utilization" not in w.model_fields_set:
        update["gpu_memory_utilization"] = engine.gpu_memory_utilization
    return w.model_copy(update=update)

def _scheduler_keys_given(w: WorkloadConfig) -> set[str]:
    """The scheduler keys the workload (or the command line) sets itself."""
    return set(w.scheduler.model_fields_set) if "scheduler" in w.model_fields_set else set()

def _check_some_request_fits(w: WorkloadConfig, max_model_len: int, source: str) -> None:
    """Closed-loop users with no think time and only a duration to stop them would resend rejected
    requests at the same instant for ever if every request is over max_model_len: refuse that."""
    a = w.arrivals
    if a.kind != "closed_loop" or a.think_time_s > 0 or w.requests is not None:
        return
    shortest = shortest_request_tokens(w)
    if shortest is not None and shortest > max_model_len:
        raise CapsimError(
            f"{source}: every request is at least {shortest:,} tokens (prompt + output), over max_model_len "
            f"{max_model_len:,}, so every one is rejected; with think_time_s 0 and no 'requests' count the users would "
            "resend them for ever at the same instant. Shorten the lengths, raise max_model_len, or give 'requests'.")

def stage_model(model: C.ModelSpec, pp: int, source: str) -> C.ModelSpec | None:
    """The model cut to its largest pipeline stage (capsim.cost.parallel): its memory per GPU and
    its step time are that stage's. None for pp 1."""
    if pp == 1:
        return None
    counts = model.layer_counts
    if counts.sliding or counts.linear:
        raise CapsimError(f"{source}: field 'pp' is {pp}, but {model.name} has sliding-window or linear-attention "
                          "layers; pipeline stages are modelled for models whose layers are all full attention (use pp 1).")
    if pp > model.num_layers:
        raise CapsimError(f"{source}: field 'pp' is {pp}, more than {model.name}'s {model.num_layers} layers; each "
                          "pipeline stage needs at least one layer.")
    layers = max(stage_layers(model.num_layers, pp))
    update: dict = {"num_layers": layers, "layers": None, "name": f"{model.name} (largest of {pp} stages)"}
    moe = model.moe
    if moe is not None:  # the heaviest stage: as few dense layers as a stage of this length can have
        update["moe"] = moe.model_copy(update={"dense_layers": max(0, layers - (model.num_layers - moe.dense_layers))})
    return model.model_copy(update=update)

def rank_model(model: C.ModelSpec, ep: int, source: str) -> C.ModelSpec | None:
    """The model with one expert-parallel rank's share of the experts (capsim.cost.parallel):
    its weights per GPU. None for ep 1."""
    if ep == 1:
        return None
    moe = model.moe
    if moe is None:
        raise CapsimError(f"{source}: field 'ep' is {ep}, but {model.name} has no experts (expert parallelism "
                          "needs a mixture-of-experts model).")
    if moe.num_experts % ep or moe.num_experts // ep < moe.experts_per_token:
        raise CapsimError(f"{source}: field 'ep' is {ep}, but {model.name}'s {moe.num_experts} experts "
                          f"({moe.experts_per_token} per token) must split evenly into ranks of at least "
                          f"{moe.experts_per_token}; use an ep that divides {moe.num_experts} and is at most "
                          f"{moe.num_experts // moe.experts_per_token}.")
    return model.model_copy(update={"moe": moe.model_copy(update={"num_experts": moe.num_experts // ep}),
                                    "name": f"{model.name} (one of {ep} expert-parallel ranks)"})

def _check_tp(model: C.ModelSpec, tp: int, source: str) -> None:
    if model.num_heads % tp:
        raise CapsimError(f"{source}: field 'tp' is {tp}, but {model.name} has {model.num_heads} attention heads; "
                          "tensor parallelism splits the heads evenly, so tp must divide them.")

def describe(setup: Setup) -> dict:
    """The resolved set-up, as it goes into summary.json."""
    w, m = setup.workload, setup.memory
    return {
        "workload": w.name or setup.source, "model": setup.model.name, "gpu": setup.hardware.name,
        "weights": setup.weights.name, "kv_cache": setup.kv_cache.name, "mode": w.mode,
        "scheduler": w.scheduler.kind, "allocator": setup.allocator, "max_num_seqs": w.scheduler.max_num_seqs,
        "max_num_batched_tokens": setup.max_num_batched_tokens, "block_size": w.scheduler.block_size,
        "max_model_len": setup.max_model_len, "num_gpu_blocks": m.num_blocks, "kv_capacity_tokens": m.kv_tokens,
        "weight_bytes": m.weight_bytes, "kv_cache_bytes": m.kv_bytes, "seed": w.seed,
        "engine": setup.engine.name if setup.engine else None,
        "engine_version": setup.engine.version if setup.engine else None, "tp": w.tp,
        "gpu_memory_utilization": w.gpu_memory_utilization, "gpu_blocks_log_line": m.log_line(),
    } | ({"pp": w.pp} if w.pp > 1 else {}) | ({"ep": w.ep} if w.ep > 1 else {}) | (
        {"endpoint": w.endpoint} if w.endpoint != "chat" else {})  # a default adds no key: summaries stay as they were
