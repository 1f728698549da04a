"""`measure_forward`: time whole forward passes of a model's real layer shapes and write raw rows.

One JSONL row per measured step (`family: forward`), flushed as measured, with the step's full
shape (kind, sequences, every context, chunk tokens, logit rows), the model's shapes and measured
layers, dtype, device, kernel backend, torch/Triton/FlashInfer versions, and every repetition's
time. On CUDA each step is captured as a CUDA graph and replayed between CUDA events (a serving
engine replays its steps from graphs; the host's launch path is not the GPU's step time); a step
that cannot be captured is timed eagerly and its row says `graph: false`. With `flashinfer`, one
layer's attention is also timed alone (`family: attention`) with the harness's kernels and with
FlashInfer's at the same steps, after the forward rows, so a slow first FlashInfer compile never
costs forward data. Nothing here prices a step: `capsim.validation.forward` compares the rows with
capsim's cost model.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from capsim.errors import CapsimError
from capsim.harness import timing
from capsim.harness.deps import require_torch, require_triton, triton_interpreted, versions
from capsim.harness.kernels.forward_attention import (
    ATTENTION_BACKENDS,
    flashinfer_version,
    make_attention,
    probe_flashinfer,
    step_meta,
    write_kv,
)
from capsim.harness.forward_grid import ForwardGrid, forward_grid, plan_steps
from capsim.harness.forward_model import ForwardModel
from capsim.harness.forward_shapes import ModelShape, StepShape, load_shape
from capsim.harness.grid import run_points
from capsim.harness.kernels.torch_ref import random_block_tables

Progress = Callable[[int, int, str], None]
# Largest K/V cache (all measured layers together) a run allocates, by device.
# On CUDA: room for the 8B's 32 layers at 64 x 8,192 tokens beside its weights on a 141 GB H200.
MAX_FORWARD_KV_BYTES = {"cuda": 72 * 2**30, "cpu": 256 * 2**20}
_FLASHINFER_SHARE = 0.2  # of the deadline, kept for the FlashInfer attention rows when asked for


@dataclass
class ForwardResult:
    """What `measure_forward` wrote."""

    raw_data_path: Path
    model: str
    layers: int
    points_planned: int
    points_measured: int
    points_failed: int
    stopped_at_deadline: bool
    elapsed_s: float
    skipped: dict[str, str] = field(default_factory=dict)  # optional backend -> why it did not run


def raw_name(model_name: str) -> str:
    """File name of a model's raw forward rows: `forward-<model name>.jsonl`."""
    return f"forward-{model_name.lower().replace('/', '-')}.jsonl"


def _check(device: str, attention: str, layers: int | None, shape: ModelShape) -> int:
    torch = require_torch()
    if device not in ("cpu", "cuda"):
        raise CapsimError(f"--device {device!r}: allowed: cpu, cuda.")
    if device == "cuda" and not torch.cuda.is_available():
        raise CapsimError("--device cuda: torch sees no CUDA GPU (is this a CPU build of torch?).")
    if attention not in ATTENTION_BACKENDS:
        raise CapsimError(f"--attention {attention!r}: allowed: {', '.join(ATTENTION_BACKENDS)}.")
    if attention == "triton":
        require_triton()
        if device == "cpu" and not triton_interpreted():
            raise CapsimError("--attention triton on CPU needs Triton's interpreter (TRITON_INTERPRET=1); "
                              "use --attention sdpa, the CPU path.")
    if layers is None:
        return shape.num_layers
    if not 1 <= layers <= shape.num_layers:
        raise CapsimError(f"--layers {layers}: allowed: 1 to {shape.num_layers} (the layers of {shape.name}).")
    return layers


def measure_forward(model: str, device: str, out_dir: Path, *, layers: int | None = None,
                    attention: str | None = None, quick: bool = False, tiny: bool = False,
                    deadline_s: float | None = None, flashinfer: bool = False,
                    progress: Progress | None = None) -> ForwardResult:
    """Time the forward grid of `model` (catalogue name or model YAML) on `device`, write
    `<out_dir>/forward-<model>.jsonl`. `layers`: measure the first N layers (default all);
    `attention`: triton (CUDA default) or sdpa (CPU default) or flashinfer; `deadline_s` stops
    before the next step once passed; `flashinfer` adds the attention-alone comparison rows."""
    torch = require_torch()
    started = time.monotonic()
    shape = load_shape(model)
    attention = attention or ("triton" if device == "cuda" else "sdpa")
    layers = _check(device, attention, layers, shape)
    grid = forward_grid(device, quick=quick, tiny=tiny)
    steps, fm = _build(shape, layers, device, grid)
    heads = {"q_heads": shape.num_heads, "kv_heads": shape.num_kv_heads, "head_dim": shape.head_dim,
             "block_size": grid.block_size, "dtype": fm.dtype, "device": device}
    attn = make_attention(attention, **heads)
    other, skipped = _flashinfer_beside(flashinfer, heads)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_path = out_dir / raw_name(shape.name)
    raw_path.write_text("")
    measure = _StepMeasurer(fm, attn, grid, device, _common_fields(shape, layers, device, grid, attention))
    with timing.one_cpu_thread() if device == "cpu" else nullcontext():
        rows, planned, stopped = _run(measure, steps, raw_path, other, deadline_s, started, progress)
    del fm, measure, attn, other  # the weights and caches go before the next model is built
    if device == "cuda":
        torch.cuda.empty_cache()
    return ForwardResult(raw_path, shape.name, layers, planned, len(rows), sum(1 for r in rows if r.get("error")),
                         stopped, time.monotonic() - started, skipped)


def _build(shape: ModelShape, layers: int, device: str, grid: ForwardGrid) -> tuple[list[StepShape], ForwardModel]:
    """The steps that fit the device's KV budget, and the model with caches sized for the largest."""
    dtype = "bf16" if device == "cuda" else "fp32"
    per_token = ForwardModel.kv_bytes_per_token(shape, layers, 2 if dtype == "bf16" else 4)
    steps = plan_steps(grid, kv_bytes_per_token=per_token, max_kv_bytes=MAX_FORWARD_KV_BYTES[device])
    if not steps:
        raise CapsimError(f"--forward {shape.name}: no grid step fits the {device} KV budget with {layers} layers.")
    pool = max(sum(math.ceil(n / grid.block_size) for n in s.seq_lengths()) for s in steps) + 1
    max_position = max(max(s.seq_lengths()) for s in steps)
    return steps, ForwardModel(shape, layers, device, dtype, grid.block_size, pool, max_position)


def _flashinfer_beside(wanted: bool, heads: dict):
    """(FlashInfer backend or None, {'flashinfer': why not} when wanted and unusable)."""
    if not wanted:
        return None, {}
    reason = probe_flashinfer(heads["device"], **{k: v for k, v in heads.items() if k != "device"})
    if reason:
        return None, {"flashinfer": reason}
    return make_attention("flashinfer", **heads), {}


def _run(measure: _StepMeasurer, steps: list[StepShape], raw_path: Path, other, deadline_s: float | None,
         started: float, progress: Progress | None) -> tuple[list[dict], int, bool]:
    """Forward rows first (within 1 - _FLASHINFER_SHARE of the deadline when FlashInfer runs too),
    then the attention-alone pairs in the time left; returns (rows, points planned, stopped early)."""
    share = _FLASHINFER_SHARE if other is not None and deadline_s is not None else 0.0
    points = [{"family": "forward", **s.fields()} for s in steps]
    log = run_points(points, measure.forward, raw_path, progress=progress,
                     deadline_s=None if deadline_s is None else deadline_s * (1 - share))
    if other is None:
        return log.rows, log.planned, log.stopped_at_deadline
    base = measure.attention
    measure.backends = {base.name: base, other.name: other}
    pairs = [{**p, "family": "attention", "backend": b.name} for p in points for b in (base, other)]
    left = None if deadline_s is None else max(0.0, deadline_s - (time.monotonic() - started))
    more = run_points(pairs, measure.attention_alone, raw_path, deadline_s=left, progress=progress)
    return log.rows + more.rows, log.planned + more.planned, log.stopped_at_deadline or more.stopped_at_deadline


def _common_fields(shape: ModelShape, layers: int, device: str, grid: ForwardGrid, attention: str) -> dict:
    """The fields every row of the run shares (model, slice, dtype, device, versions, repetitions)."""
    torch = require_torch()
    v = versions()
    dtype = "bf16" if device == "cuda" else "fp32"
    return {"model": shape.name, "model_spec": shape.spec_fields(), "model_layers": shape.num_layers,
            "layers": layers, "dtype": dtype, "kv_dtype": dtype, "block_size": grid.block_size, "device": device,
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
            "attention": attention, "torch_version": v["torch"], "triton_version": v["triton"],
            "flashinfer_version": flashinfer_version(), "warmup": grid.warmup, "reps": grid.reps}


def _times(t: timing.Timing) -> dict:
    return {"time_s": t.median_s, "min_s": t.min_s, "max_s": t.max_s, "times_s": list(t.samples_s)}


class _StepMeasurer:
    """Times steps on one model; a step that fails (out of memory, a kernel error) gives a row
    with `error` and no time, and the run goes on."""

    def __init__(self, fm: ForwardModel, attention, grid: ForwardGrid, device: str, common: dict):
        self.fm, self.attention, self.grid, self.device, self.common = fm, attention, grid, device, common
        self.backends: dict = {}

    def forward(self, point: dict) -> dict:
        return self._guard(point, lambda: self._time_forward(StepShape.from_row(point)))

    def attention_alone(self, point: dict) -> dict:
        backend = self.backends[point["backend"]]
        return self._guard(point, lambda: self._time_attention(StepShape.from_row(point), backend))

    def _guard(self, point: dict, fn) -> dict:
        torch = require_torch()
        try:
            return {**self.common, **point, **fn()}
        except Exception as exc:  # noqa: BLE001  one failing step must not end the run
            if self.device == "cuda":
                torch.cuda.empty_cache()
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            return {**self.common, **point, "error": f"{type(exc).__name__}: {text}"}

    def _call(self, fn):
        return timing.time_calls(fn, self.device, warmup=self.grid.warmup, reps=self.grid.reps)

    def _time_forward(self, step: StepShape) -> dict:
        run = self.fm.prepare(step, self.attention)
        call, graph, why = self._graph_or_eager(run)
        return {**_times(self._call(call)), "graph": graph, **({"graph_error": why} if why else {})}

    def _graph_or_eager(self, run):
        """(timed call, captured?, why not): a CUDA graph of the step where it can be captured."""
        if self.device != "cuda":
            return (lambda _: run()), False, None
        torch = require_torch()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compile kernels and settle allocations before capture
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                run()
        except Exception as exc:  # noqa: BLE001  time eagerly and say why
            torch.cuda.synchronize()
            return (lambda _: run()), False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return (lambda _: graph.replay()), True, None

    def _time_attention(self, step: StepShape, backend) -> dict:
        """One layer's attention alone at the step's shapes (eager, like the kernel grid)."""
        torch = require_torch()
        fm, dev = self.fm, self.device
        s = fm.shape
        tables = random_block_tables(step.seq_lengths(), fm.block_size, fm.pool_blocks,
                                     torch.Generator().manual_seed(1)).to(dev)
        meta = step_meta(step, tables, dev)
        backend.plan(meta)
        gen = torch.Generator(device=dev).manual_seed(1)
        q = torch.randn((step.num_tokens, s.num_heads, s.head_dim), generator=gen, device=dev, dtype=fm.dtype)
        k = torch.randn((step.num_tokens, s.num_kv_heads, s.head_dim), generator=gen, device=dev, dtype=fm.dtype)
        v = torch.randn_like(k)
        k_cache, v_cache = fm.caches[0]
        write_kv(meta, step, k, v, k_cache, v_cache, fm.block_size)
        t = self._call(lambda _: backend(meta, q, k, v, k_cache, v_cache))
        return {**_times(t), "graph": False}
