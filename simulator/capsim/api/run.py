"""`simulate()`: a resolved set-up -> replicas and the engine -> the run -> its summary, verdict and
cost (capsim.api.run_result.RunResult)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np

from capsim.api.pools import Pools, build_pools, pool_cost, pool_summary, resolve_pools
from capsim.api.run_result import RunResult, step_parts, step_table
from capsim.api.setup import Setup, apply_overrides, budget_with, describe, load_workload, resolve
from capsim.core.names import OUTCOMES
from capsim.cost.parallel import ExpertParallelCost, PipelineCost, pipeline_link
from capsim.cost.roofline import CostModel
from capsim.errors import CapsimError, short_path
from capsim.results.cost import deployment_cost, deployment_gpus, price_for
from capsim.results.load_share import load_share
from capsim.results.provenance import provenance
from capsim.results.slo import DEFAULT_PERCENTILES, Objectives, from_workload
from capsim.results.steady import choose_window, saturation
from capsim.results.summary import Gaps, per_class, request_table, summarize
from capsim.results.verdict import judge
from capsim.sim.engine import Engine
from capsim.sim.kv_cache import PagedAllocator, warm_keys
from capsim.sim.kv_contiguous import ContiguousAllocator
from capsim.sim.replica import Replica, SwapSpace
from capsim.sim.running import RunningSet
from capsim.sim.schedulers import SCHEDULERS
from capsim.sim.speculative import TokenSchedule
from capsim.sim.step_log import step_totals
from capsim.spec import limits as L
from capsim.spec.catalog import load_model
from capsim.spec.formats import get_format
from capsim.spec.shapes import load_link
from capsim.workload.schema import WorkloadConfig
from capsim.workload.streams import build_stream


def build_replica(setup: Setup, index: int = 0, num_classes: int = 1) -> Replica:
    w, sched = setup.workload, setup.workload.scheduler
    # pp > 1: this is one of the replica's pp virtual engines, with 1/pp of the KV (vLLM V0's PP)
    num_blocks = setup.memory.num_blocks // w.pp
    if setup.allocator == "paged":
        watermark = int(sched.watermark * num_blocks)
        kv = PagedAllocator(num_blocks, sched.block_size, watermark, caching=w.prefix_caching,
                            seq_units=setup.memory.seq_units)
    else:
        kv = ContiguousAllocator(num_blocks, setup.max_model_len, w.reserve)
    multi_step = setup.engine.overhead.steps_per_schedule if setup.engine and w.mode == "realistic" else 1
    scheduler = SCHEDULERS[sched.kind](sched.max_num_seqs, setup.max_num_batched_tokens, setup.max_model_len,
                                       steps_per_schedule=multi_step)
    spec = w.speculative
    draft = None
    if spec is not None and spec.draft_model is not None:
        draft = CostModel(load_model(spec.draft_model), setup.hardware, setup.weights, setup.kv_cache, mode=w.mode,
                          unit_step_s=0.0, engine=setup.engine, tp=w.tp)
    cost = cost_model_for(setup, draft)
    schedule = TokenSchedule.for_speculation(spec.draft_tokens, spec.acceptance_rate) if spec else TokenSchedule()
    running = RunningSet(kv.block_size, cost.window if w.mode == "realistic" else 0, num_classes, schedule)
    swap = None
    if sched.preemption == "swap":
        bytes_per_token = setup.memory.bytes_per_block / setup.memory.block_size
        swap = SwapSpace(w.swap_space_gib * 2**30, bytes_per_token * kv.block_size,
                         setup.hardware.interconnect.pcie_bytes_per_s)
    return Replica(index, scheduler, kv, cost, running, swap=swap)


def cost_model_for(setup: Setup, draft: CostModel | None) -> CostModel:
    """The replica's pricing: the model on its TP group, or with pp > 1 one virtual engine of the
    pipeline (capsim.cost.parallel.PipelineCost on the largest stage)."""
    w, spec = setup.workload, setup.workload.speculative
    if w.ep > 1:
        assert setup.stage_model is not None and setup.model.moe is not None  # resolve() made the rank's model
        ep_cost = ExpertParallelCost(setup.stage_model, setup.hardware, setup.weights, setup.kv_cache, mode=w.mode,
                                     unit_step_s=w.unit_step_s, engine=setup.engine, tp=1)
        ep_cost.set_experts(w.ep, setup.model.moe.num_experts, *_link(setup, w.ep_link, "ep_link"))
        return ep_cost
    if setup.stage_model is None:
        return CostModel(setup.model, setup.hardware, setup.weights, setup.kv_cache, mode=w.mode,
                         unit_step_s=w.unit_step_s, engine=setup.engine, tp=w.tp,
                         draft_tokens=spec.draft_tokens if spec else 0, draft=draft)
    cost = PipelineCost(setup.stage_model, setup.hardware, setup.weights, setup.kv_cache, mode=w.mode,
                        unit_step_s=w.unit_step_s, engine=setup.engine, tp=w.tp)
    cost.set_pipeline(w.pp, *_link(setup, w.pp_link, "pp_link"))
    return cost

def _link(setup: Setup, given, field: str) -> tuple[float, float]:
    """(achieved bytes/s, latency) of the link a pp or ep replica's GPUs talk over: the one given,
    else the GPU's NVLink (or PCIe) at the profile's link efficiency."""
    if given is not None:
        link = load_link(given, field)
        return link.achieved_bytes_per_s, link.latency_s
    ic = setup.hardware.interconnect
    return pipeline_link(ic.gpu_link_bytes_per_s, ic.pcie_bytes_per_s, ic.link_efficiency, ic.allreduce_latency_s)

def simulate(workload: WorkloadConfig | str | Path, *, macro_steps: bool = True,
             progress: Callable[[int, int | None], None] | None = None, objectives: Objectives | None = None,
             percentiles: tuple[float, ...] | None = None, price: float | dict[str, float] | None = None,
             command_source: str | None = None, **overrides) -> RunResult:
    """Run one simulation. `workload` is a config object or a YAML path; keyword overrides are
    the CLI's (gpu, model, kv_cache, scheduler, allocator, rate, requests, seed, ...).
    `objectives` (capsim.results.slo) judge the run (default: the workload's `slo:` block); `percentiles`
    are reported besides mean and median (default 90 and 99, plus any a limit needs); `price`
    overrides the profile's $ per GPU-hour (one number, or {GPU name: price}).
    `progress(finished, total)` is called now and then during the run (total: the workload's
    request count, None when a closed loop has none). `command_source`: how the verdict's
    next-step command names the workload, e.g. the CLI's set-up flags for a run without a file
    (default: the file's path; 'WORKLOAD.yaml' for a config object, which no command can name)."""
    if isinstance(workload, (str, Path)):
        source, base_dir = short_path(workload), Path(workload).parent
        w = load_workload(workload)
    else:
        source, base_dir, w = "workload", None, workload
    w = apply_overrides(w, source, **overrides)
    setup = resolve(w, source, base_dir)
    stream = build_stream(w, base_dir)
    build = partial(build_replica, num_classes=len(stream.class_names))
    pools = resolve_pools(w, source, base_dir) if w.serving and w.serving.disaggregated else None
    handoff = None
    if pools is None:
        replicas = [build(setup, i) for i in range(w.replicas * w.pp * w.ep)]
    else:  # the run's set-up (summary, verdict) is the decode pool's; the prefill pool's is in `disaggregated`
        replicas, handoff = build_pools(pools, build)
        setup = pools.decode
    if w.prompt_set_cached:
        warm_prompt_set(replicas, stream, setup, source)
    engine = Engine(replicas, stream, horizon_s=w.horizon_s, macro_steps=macro_steps, router=w.router,
                    progress=progress, handoff=handoff)
    with _collector_paused():
        end_s = engine.run()
    if objectives is None:
        objectives = from_workload(setup.workload.slo)
    asked = DEFAULT_PERCENTILES if percentiles is None else percentiles
    if command_source is None:
        command_source = source if base_dir is not None else "WORKLOAD.yaml"
    return _result(setup, engine, end_s, objectives, tuple(sorted(set(asked) | set(objectives.percentiles()))), price,
                   command_source, pools)

def warm_prompt_set(replicas: list[Replica], stream, setup: Setup, source: str) -> None:
    """The client sent its replayed prompt set before this run (workload prompt_set_cached): each
    copy's prefix cache starts as that pass left it (capsim.sim.kv_cache.warm_keys), refused with the
    reason when that would be more cached blocks than capsim starts a run with or this machine holds."""
    w = setup.workload
    prompts, outputs = stream.replayed_set()
    copies: dict[tuple, int] = {}
    for replica in replicas:
        if isinstance(replica.kv, PagedAllocator):
            copies[_cache_shape(replica.kv)] = copies.get(_cache_shape(replica.kv), 0) + 1
    have = L.available_memory_bytes()
    most = L.MAX_CACHED_BLOCKS_AT_START
    if have is not None:
        most = min(most, int(L.MEMORY_SHARE * have / L.BYTES_PER_CACHED_BLOCK))
    plans: dict[tuple, list[tuple]] = {}
    for replica in replicas:
        kv = replica.kv
        if isinstance(kv, PagedAllocator) and _cache_shape(kv) not in plans:
            keys = warm_keys(prompts, outputs, w.shared_prefix_tokens, kv, setup.max_model_len,
                             most // copies[_cache_shape(kv)])
            if keys is None:
                raise CapsimError(
                    f"{source}: field 'prompt_set_cached': the earlier pass over the prompt set would leave more than "
                    f"{most:,} KV blocks in the prefix caches of the {len(replicas)} replica(s), more than capsim starts a "
                    f"run with ({L.MAX_CACHED_BLOCKS_AT_START:,} at most, {L.BYTES_PER_CACHED_BLOCK} bytes each, within "
                    "this machine's memory). Use fewer replicas or a smaller num_gpu_blocks, or leave prompt_set_cached "
                    "out (the set is then cached as this run sends it).")
            most -= len(keys) * copies[_cache_shape(kv)]
            plans[_cache_shape(kv)] = keys
    for replica in replicas:
        if isinstance(replica.kv, PagedAllocator):
            replica.kv.warm(plans[_cache_shape(replica.kv)])


def _cache_shape(kv: PagedAllocator) -> tuple[int, int, int]:
    """What a replica's warmed cache depends on: its blocks, their size and its watermark."""
    return kv.num_blocks, kv.block_size, kv.watermark_units


@contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while the engine runs (restored afterwards): the
    engine makes no reference cycles, and reference counting still frees everything."""
    # PERF: the collector's passes over the millions of objects a run allocates only cost time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

def _result(setup: Setup, engine: Engine, end_s: float, objectives: Objectives, percentiles: tuple[float, ...],
            price, command_source: str, pools: Pools | None = None) -> RunResult:
    log, cm = engine.steps, engine.replicas[0].cost
    requests = engine.requests.columns(log.spans_by_replica() if cm.output_lag_steps() else None)
    if log.large:  # summarise in chunks; the table gets one row per macro-step, when asked for
        totals = log.totals(cm.decode_detail)
        table = partial(step_table, partial(log.segment_columns, cm.decode_detail))
        parts = partial(step_parts, partial(log.segment_parts, cm.decode_detail))
    else:
        steps = log.columns(cm.decode_detail)
        totals = step_totals(steps)
        table = partial(step_table, partial(dict, steps))
        parts = partial(step_parts, partial(list, [steps]))
    gaps = Gaps(*engine.gaps.parts(log.segment_ends, log.segment_starts, log.decoder_gaps()))
    class_names, reasons = engine.stream.class_names, engine.requests.reject_reasons
    users = engine.stream.users if engine.closed_loop else None
    window = choose_window(requests, setup.workload.measure, users)
    summary = summarize(
        requests, totals, gaps, duration_s=end_s, peak_flops=cm.peak, bandwidth_bytes_per_s=cm.bandwidth,
        kv_capacity_tokens=setup.memory.kv_tokens, replicas=len(engine.replicas), reject_reasons=reasons,
        window=window, saturation=saturation(requests, window, engine.closed_loop, end_s=end_s), percentiles=percentiles,
        goodput_ms=objectives.goodput_ms,
    )
    if len(class_names) > 1:
        summary["classes"] = per_class(requests, class_names, gaps, window, percentiles)
    if setup.workload.arrivals.kind == "trace":  # the trace's first arrival: the run's time 0
        summary["trace_time_offset_s"] = engine.stream.time_offset_s
    if setup.allocator == "contiguous":
        summary["kv_reserved_unused"], summary["kv_internal_waste"] = summary["kv_internal_waste"], 0.0
    else:
        summary["kv_reserved_unused"] = 0.0
    summary.update(_feature_stats(setup, engine, totals, requests))
    summary.update(kv_fit(requests, setup.memory.kv_tokens, setup.max_model_len))
    if pools is None:
        summary.update(_cost(setup, summary, price))
    else:
        summary.update(pool_cost(pools, summary, price, load_text(setup.workload)))
        summary["disaggregated"] = pool_summary(pools, engine, parts(), end_s)
    summary["setup"] = describe(setup)
    if pools is None:
        share = load_share(cm, summary, setup.memory.kv_tokens, setup.workload.arrivals.kind)
        summary["load_share"] = share.as_dict() if share is not None else None
    summary["verdict"] = judge(summary, objectives, setup, kv_alternatives(setup, summary.get("mean_request_tokens")),
                               capacity_command(command_source, objectives, engine.closed_loop)).as_dict()
    return RunResult(setup, summary, gaps, partial(request_table, requests, class_names, reasons), table,
                     parts, steps_per_row=log.large, events=engine.events,
                     provenance=provenance(setup, summary, objectives), window=window,
                     # columns, not the log: a RunResult crosses processes (run --seeds keeps the first)
                     _chunk_table=partial(dict, engine.phases.chunk_columns()),
                     _preemption_table=partial(dict, engine.phases.preemption_columns()))

def kv_fit(requests: dict[str, np.ndarray], kv_tokens: int, max_model_len: int) -> dict:
    """Concurrent sequences the KV cache holds: at the workload's mean request length (prompt +
    output of the requests that arrived) and at max_model_len (the guaranteed worst case)."""
    lengths = requests["prompt_tokens"].astype(np.int64) + requests["output_tokens"].astype(np.int64)
    mean_tokens = float(lengths.mean()) if len(lengths) else None
    return {"mean_request_tokens": mean_tokens,
            "max_seqs_at_mean_request": int(kv_tokens // mean_tokens) if mean_tokens else None,
            "max_seqs_at_max_model_len": int(kv_tokens // max_model_len)}

def _cost(setup: Setup, summary: dict, price) -> dict:
    """The deployment's cost at this run's load (capsim.results.cost): every GPU of every replica."""
    w = setup.workload
    per_gpu, source = price_for(setup.hardware.name, setup.hardware.price_per_hour_usd, price)
    cost = deployment_cost(per_gpu, source, deployment_gpus(w.tp, w.pp * w.ep, w.replicas), summary["output_throughput"],
                           summary["total_token_throughput"], load_text(w))
    return {"gpus": cost.gpus, "usd_per_hour": cost.usd_per_hour, "usd_per_m_output_tokens": cost.usd_per_m_output_tokens,
            "usd_per_m_total_tokens": cost.usd_per_m_total_tokens, "cost": cost.as_dict()}

def load_text(w: WorkloadConfig) -> str:
    """The offered load in words ('2 req/s offered (poisson)', '200 closed-loop users ...')."""
    a = w.arrivals
    if a.kind in ("poisson", "gamma", "constant"):
        return f"{a.rate_per_s:g} req/s offered ({a.kind})"
    if a.kind == "closed_loop":
        return f"{a.users:,} closed-loop users, {a.think_time_s:g} s think time"
    if a.kind == "trace":
        return f"the trace {Path(a.file).name} at time scale {a.time_scale:g}"
    return f"{w.requests:,} requests at once"

def kv_alternatives(setup: Setup, mean_tokens: float | None) -> list[tuple[str, int]]:
    """Sequences of the mean request length the KV cache would hold with an 8-bit KV cache and with
    twice the tensor parallelism (each where it applies), for the verdict's next steps."""
    if not mean_tokens or setup.memory.overridden:
        return []
    out = []
    if setup.kv_cache.bits_per_value > 8:
        fp8 = budget_with(setup, kv_fmt=get_format("fp8_e4m3", for_kv=True))
        out.append(("fp8 KV", int(fp8.kv_tokens // mean_tokens)))
    tp = setup.workload.tp * 2
    if tp <= 8 and setup.model.num_heads % tp == 0:
        wider = budget_with(setup, tp=tp)
        out.append((f"TP {tp}", int(wider.kv_tokens // mean_tokens)))
    return out

def capacity_command(source: str, objectives: Objectives, users: bool = False) -> str:
    """The `capsim capacity` command a user would run next for this workload and these SLOs."""
    slo = [f"--slo {key.split('_')[1]}_{'p50' if key.startswith('median') else key.split('_')[0]}_ms={v:g}"
           for key, v in objectives.limits_ms.items()]
    if objectives.goodput_ms:
        slo.append("--slo '" + " ".join(f"{m}:{v:g}" for m, v in objectives.goodput_ms.items()) + "'")
    slo_text = " ".join(slo) if slo else "--slo ttft_p99_ms=2000 --slo tpot_p99_ms=50"
    return f"capsim capacity {source} {slo_text}" + (" --users" if users else "")

def _feature_stats(setup: Setup, engine: Engine, totals: dict, requests: dict[str, np.ndarray]) -> dict:
    """Prefix caching, sharing and swapping figures (zeros when the features are off)."""
    queried = engine.prompt_tokens_admitted
    busy = totals["busy_s"]
    block_bytes = setup.memory.bytes_per_block
    done = requests["replica"][requests["outcome"] == OUTCOMES.index("completed")].astype(np.int64)
    return {
        "prefix_cache_hit_rate": engine.prefill_tokens_saved / queried if queried else 0.0,
        "prefill_tokens_saved": int(engine.prefill_tokens_saved),
        "kv_memory_saved_bytes": totals["shared_time"] / busy * block_bytes if busy else 0.0,
        "kv_memory_saved_peak_bytes": float(totals["max_shared"] * block_bytes),
        "swapped_bytes": float(engine.swapped_bytes),
        "replicas": len(engine.replicas),
        "completed_per_replica": [int(n) for n in np.bincount(done, minlength=len(engine.replicas))],
    }
