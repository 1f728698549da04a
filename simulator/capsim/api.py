"""Workload config (+ command-line overrides) -> a configured engine -> a RunResult.

This is the public entry point `capsim.simulate()`; the CLI and notebooks both call it.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from capsim.spec import config as C
from capsim.spec.catalog import load_hardware, load_model
from capsim.cost.roofline import CostModel
from capsim.results.cost import deployment_cost, deployment_gpus, price_for
from capsim.results.csv_out import Column, Labels, as_dataframe, write_parts, write_table
from capsim.sim.engine import Engine
from capsim.spec.serving import EngineProfile, load_engine
from capsim.errors import CapsimError, short_path
from capsim.spec.formats import NumberFormat, get_format
from capsim.sim.kv_cache import ContiguousAllocator, PagedAllocator
from capsim.cost.memory import MemoryBudget, memory_budget
from capsim.results.summary import (
    BOUND_NAMES,
    OUTCOMES,
    REQUEST_TEXT_COLUMNS,
    Gaps,
    per_class,
    request_table,
    summarize,
)
from capsim.results.provenance import provenance
from capsim.sim.replica import Replica, SwapSpace
from capsim.sim.running import RunningSet
from capsim.sim.schedulers import SCHEDULERS
from capsim.results.slo import DEFAULT_PERCENTILES, Objectives, from_workload
from capsim.sim.speculative import TokenSchedule
from capsim.results.steady import Window, choose_window, saturation
from capsim.sim.step_log import STEP_COLUMNS, step_totals
from capsim.results.verdict import judge
from capsim.workload.streams import build_stream, check_memory, shortest_request_tokens, with_paths_from
from capsim.workload.schema import WorkloadConfig

if TYPE_CHECKING:
    import pandas as pd


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


@dataclass
class RunResult:
    """One run: its summary, one row per request, and the step table (one row per forward pass;
    for runs of more than step_log.LARGE_RUN_STEPS passes one row per macro-step, with a `steps`
    column). The two tables are built when first used, and `write` writes them from the records'
    columns: a run that only reports its summary or writes its files never imports pandas."""

    setup: Setup
    summary: dict
    gaps: Gaps = field(repr=False)  # inter-token gaps, read in chunks (Gaps.pieces, Gaps.arrays)
    _request_table: Callable[[], dict[str, Column]] = field(repr=False)  # csv_out columns
    _step_table: Callable[[], dict[str, Column]] = field(repr=False)
    _step_parts: Callable[[], Iterable[dict[str, Column]]] = field(repr=False)  # the same rows, a part at a time
    steps_per_row: bool = False  # True when the step table has one row per macro-step (column `steps`)
    _requests: pd.DataFrame | None = field(default=None, repr=False)
    _steps: pd.DataFrame | None = field(default=None, repr=False)
    events: int = 0  # events the engine took (steps or macro-steps, waits, arrival events): its work
    provenance: dict = field(default_factory=dict, repr=False)  # capsim.results.provenance: version, date, inputs
    window: Window | None = field(default=None, repr=False)  # the requests the figures are measured over

    @property
    def requests(self) -> pd.DataFrame:
        """One row per arrived request (metrics.request_frame's table)."""
        if self._requests is None:
            self._requests = as_dataframe(self._request_table(), text=REQUEST_TEXT_COLUMNS)
        return self._requests

    @property
    def steps(self) -> pd.DataFrame:
        """One row per forward pass (or per macro-step); `bound` as its code into BOUND_NAMES."""
        if self._steps is None:
            self._steps = as_dataframe(self._step_table(), codes=("bound",))
        return self._steps

    def summary_json(self, provenance: bool = False) -> str:
        """The summary as JSON; with `provenance` (summary.json, --json) also where it came from
        (capsim.results.provenance: version, date, inputs), which differs between reruns."""
        data = self.summary | {"provenance": self.provenance} if provenance else self.summary
        return json.dumps(data, indent=2, sort_keys=False, allow_nan=True) + "\n"

    def write(self, out_dir: Path) -> list[Path]:
        """summary.json, requests.csv, steps.csv (one row per forward pass, or per macro-step for
        very large runs: then the file starts with a '#' line saying so, and the table is written
        a chunk of macro-steps at a time, never held whole) under out_dir. The CSVs are the text
        pandas' to_csv writes for these tables (capsim.results.csv_out)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / "summary.json", out_dir / "requests.csv", out_dir / "steps.csv"]
        paths[0].write_text(self.summary_json(provenance=True))
        with open(paths[1], "w", newline="") as fh:
            write_table(self._request_table(), fh)
        with open(paths[2], "w", newline="") as fh:
            if self.steps_per_row:
                fh.write("# capsim: one row per macro-step (its last pass's state; duration, tokens, FLOPs and "
                         "bytes summed over the `steps` forward passes it holds)" + os.linesep)
            write_parts(self._step_parts(), fh, STEP_COLUMNS + (("steps",) if self.steps_per_row else ()))
        return paths


def load_workload(path: str | Path) -> WorkloadConfig:
    """Read and validate a workload YAML (errors name the file and the field). Every path in it
    (a GPU profile file, a trace) is relative to the workload file's folder, and comes back
    absolute."""
    path = Path(path)
    return with_paths_from(C.load_yaml_as(WorkloadConfig, path), path.absolute().parent)


OVERRIDABLE = ("gpu", "model", "weights", "kv_cache", "scheduler", "allocator", "rate", "requests", "seed",
               "max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks", "mode", "horizon_s", "engine", "tp", "replicas", "router",
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
    w = with_engine_defaults(w, engine, hardware)
    _check_tp(model, w.tp, source)
    check_memory(w, source)
    sched = w.scheduler
    max_model_len = w.max_model_len or model.max_context_tokens
    if max_model_len > model.max_context_tokens:
        raise CapsimError(f"{source}: field 'max_model_len' is {max_model_len:,}, above {model.name}'s context length of "
                          f"{model.max_context_tokens:,} tokens; give at most that (or leave it out to use it).")
    _check_some_request_fits(w, max_model_len, source)
    budget = sched.max_num_batched_tokens
    if budget is None:
        budget = 2048 if sched.kind == "chunked" else max(max_model_len, 2048)
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
    memory = _memory(w, model, hardware, weights, kv_fmt, allocator, budget, engine, w.tp, w.num_gpu_blocks)
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
    return Setup(w, source, base_dir, model, hardware, weights, kv_fmt, allocator, max_model_len, budget, memory,
                 engine)


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


def _budget(setup: Setup, kv_fmt: NumberFormat | None = None, tp: int | None = None) -> MemoryBudget:
    """The set-up's KV budget with another KV format or TP (what the verdict suggests)."""
    return _memory(setup.workload, setup.model, setup.hardware, setup.weights, kv_fmt or setup.kv_cache,
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
    given = w.scheduler.model_fields_set if "scheduler" in w.model_fields_set else set()
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


def _check_tp(model: C.ModelSpec, tp: int, source: str) -> None:
    if model.num_heads % tp:
        raise CapsimError(f"{source}: field 'tp' is {tp}, but {model.name} has {model.num_heads} attention heads; "
                          "tensor parallelism splits the heads evenly, so tp must divide them.")


def build_replica(setup: Setup, index: int = 0, num_classes: int = 1) -> Replica:
    w, sched = setup.workload, setup.workload.scheduler
    if setup.allocator == "paged":
        watermark = int(sched.watermark * setup.memory.num_blocks)
        kv = PagedAllocator(setup.memory.num_blocks, sched.block_size, watermark, caching=w.prefix_caching,
                            seq_units=setup.memory.seq_units)
    else:
        kv = ContiguousAllocator(setup.memory.num_blocks, setup.max_model_len, w.reserve)
    multi_step = setup.engine.overhead.steps_per_schedule if setup.engine and w.mode == "realistic" else 1
    scheduler = SCHEDULERS[sched.kind](sched.max_num_seqs, setup.max_num_batched_tokens, setup.max_model_len,
                                       steps_per_schedule=multi_step)
    spec = w.speculative
    draft = None
    if spec is not None and spec.draft_model is not None:
        draft = CostModel(load_model(spec.draft_model), setup.hardware, setup.weights, setup.kv_cache, mode=w.mode,
                          unit_step_s=0.0, engine=setup.engine, tp=w.tp)
    cost = CostModel(setup.model, setup.hardware, setup.weights, setup.kv_cache, mode=w.mode, unit_step_s=w.unit_step_s,
                     engine=setup.engine, tp=w.tp, draft_tokens=spec.draft_tokens if spec else 0, draft=draft)
    schedule = TokenSchedule.for_speculation(spec.draft_tokens, spec.acceptance_rate) if spec else TokenSchedule()
    running = RunningSet(kv.block_size, cost.window if w.mode == "realistic" else 0, num_classes, schedule)
    swap = None
    if sched.preemption == "swap":
        bytes_per_token = setup.memory.bytes_per_block / setup.memory.block_size
        swap = SwapSpace(w.swap_space_gib * 2**30, bytes_per_token * kv.block_size,
                         setup.hardware.interconnect.pcie_bytes_per_s)
    return Replica(index, scheduler, kv, cost, running, swap=swap)


def simulate(workload: WorkloadConfig | str | Path, *, macro_steps: bool = True,
             progress: Callable[[int, int | None], None] | None = None, objectives: Objectives | None = None,
             percentiles: tuple[float, ...] | None = None, price: float | dict[str, float] | None = None,
             **overrides) -> RunResult:
    """Run one simulation. `workload` is a config object or a YAML path; keyword overrides are
    the CLI's (gpu, model, kv_cache, scheduler, allocator, rate, requests, seed, ...).
    `objectives` (capsim.results.slo) judge the run (default: the workload's `slo:` block); `percentiles`
    are reported besides mean and median (default 90 and 99, plus any a limit needs); `price`
    overrides the profile's $ per GPU-hour (one number, or {GPU name: price}).
    `progress(finished, total)` is called now and then during the run (total: the workload's
    request count, None when a closed loop has none)."""
    if isinstance(workload, (str, Path)):
        source, base_dir = short_path(workload), Path(workload).parent
        w = load_workload(workload)
    else:
        source, base_dir, w = "workload", None, workload
    w = apply_overrides(w, source, **overrides)
    setup = resolve(w, source, base_dir)
    stream = build_stream(w, base_dir)
    replicas = [build_replica(setup, i, num_classes=len(stream.class_names)) for i in range(w.replicas)]
    engine = Engine(replicas, stream, horizon_s=w.horizon_s, macro_steps=macro_steps, router=w.router,
                    progress=progress)
    with _collector_paused():
        end_s = engine.run()
    if objectives is None:
        objectives = from_workload(setup.workload.slo)
    asked = DEFAULT_PERCENTILES if percentiles is None else percentiles
    return _result(setup, engine, end_s, objectives, tuple(sorted(set(asked) | set(objectives.percentiles()))), price)


@contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while the engine runs: the engine makes no reference
    cycles (a collection right after a 20K-request run finds nothing to free compiled, and a few
    hundred objects in plain Python), so its passes over the millions of objects a run allocates
    only cost time (9% of the compiled engine's instructions at 2,000 requests). Reference
    counting still frees everything as before; the collector's state is restored afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _result(setup: Setup, engine: Engine, end_s: float, objectives: Objectives, percentiles: tuple[float, ...],
            price) -> RunResult:
    requests = engine.requests.columns()
    log, cm = engine.steps, engine.replicas[0].cost
    if log.large:  # summarise in chunks; the table gets one row per macro-step, when asked for
        totals = log.totals(cm.decode_detail)
        step_table = partial(_step_table, partial(log.segment_columns, cm.decode_detail))
        step_parts = partial(_step_parts, partial(log.segment_parts, cm.decode_detail))
    else:
        steps = log.columns(cm.decode_detail)
        totals = step_totals(steps)
        step_table = partial(_step_table, partial(dict, steps))
        step_parts = partial(_step_parts, partial(list, [steps]))
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
    summary.update(_cost(setup, summary, price))
    summary["setup"] = describe(setup)
    summary["verdict"] = judge(summary, objectives, setup, kv_alternatives(setup, summary.get("mean_request_tokens")),
                               capacity_command(setup.source, objectives, engine.closed_loop)).as_dict()
    return RunResult(setup, summary, gaps, partial(request_table, requests, class_names, reasons), step_table,
                     step_parts, steps_per_row=log.large, events=engine.events,
                     provenance=provenance(setup, summary, objectives), window=window)


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
    cost = deployment_cost(per_gpu, source, deployment_gpus(w.tp, 1, w.replicas), summary["output_throughput"],
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
        fp8 = _budget(setup, kv_fmt=get_format("fp8_e4m3", for_kv=True))
        out.append(("fp8 KV", int(fp8.kv_tokens // mean_tokens)))
    tp = setup.workload.tp * 2
    if tp <= 8 and setup.model.num_heads % tp == 0:
        wider = _budget(setup, tp=tp)
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


def _step_table(columns: Callable[[], dict[str, np.ndarray]]) -> dict[str, Column]:
    """The step log's columns with `bound` as names (steps.csv)."""
    return _bound_named(columns())


def _step_parts(parts: Callable[[], Iterable[dict[str, np.ndarray]]]) -> Iterator[dict[str, Column]]:
    """The same rows a part at a time (a large run's steps.csv is written as it is made)."""
    return map(_bound_named, parts())


def _bound_named(table: dict[str, np.ndarray]) -> dict[str, Column]:
    return {**table, "bound": Labels(table["bound"], BOUND_NAMES)}


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
    }
