"""Whole forward passes timed by the harness (`capsim calibrate --forward`) against capsim's
predicted step times: the "validation" side of the forward measurements.

Each raw row (`family: forward`) describes one step completely: its decoding sequences and their
contexts, its prompt chunks (cached tokens, new tokens), the model's shapes, the measured layers and
the dtype. The step becomes a StepPlan of requests with exactly those counts and is priced by
`capsim.cost.roofline.CostModel` for each hardware profile asked for, with the model cut to the
measured layers (`num_layers` = the slice; the LM head runs once, as it does in the measured step),
at TP 1. Decode-only steps are priced by `decode_seconds`, the path the engine takes for them.

The engine is the bare GPU roofline by default (capsim's default); an engine profile may be named,
and its host time (scheduling, input preparation, sampling) is then removed, because the harness
times the GPU's work only. Nothing is fitted to these rows: every error is out of sample.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from capsim.spec.catalog import load_hardware
from capsim.spec.config import HardwareProfile, ModelSpec, validate
from capsim.cost.roofline import CostModel
from capsim.spec.serving import EngineOverhead, EngineProfile, load_engine
from capsim.errors import CapsimError
from capsim.spec.formats import get_format
from capsim.core.plan import StepPlan
from capsim.core.request import Request
from capsim.sim.running import RunningSet

KINDS = ("decode", "prefill", "mixed")
# Fields every forward row must have (the schema `capsim calibrate --forward` writes).
ROW_FIELDS = ("family", "kind", "model", "model_spec", "layers", "batch", "decode_contexts", "prefill",
              "chunk_tokens", "num_tokens", "logit_tokens", "block_size", "dtype", "kv_dtype", "device",
              "device_name", "attention", "graph", "torch_version", "triton_version", "warmup", "reps",
              "time_s", "min_s", "max_s", "times_s")


@dataclass(frozen=True)
class StepCheck:
    """One measured step priced on one hardware profile."""

    gpu: str  # the hardware profile that priced it
    model: str
    layers: int  # decoder layers measured (and priced)
    kind: str  # decode, prefill or mixed
    batch: int  # sequences in the step
    num_tokens: int  # tokens computed
    chunk_tokens: int  # new prompt tokens among them
    context_tokens: int  # cached positions attended, summed over sequences
    measured_ms: float  # median of the repetitions
    predicted_ms: float
    error_pct: float  # predicted / measured - 1, in percent


@dataclass
class ForwardCheck:
    """Every priced step, the MAPE per (profile, model, kind), and FlashInfer-vs-harness attention."""

    raw_paths: list[Path]
    gpus: list[str]
    engine: str | None
    steps: list[StepCheck]
    failed_rows: int  # rows the harness could not measure (`error`): not scored
    attention: list[dict] = field(default_factory=list)

    def mape_rows(self) -> list[dict]:
        """MAPE and mean signed error (percent) per profile, model and kind, then per profile and kind."""
        keys = list(dict.fromkeys((s.gpu, s.model, s.kind) for s in self.steps))
        if len({s.model for s in self.steps}) > 1:
            keys += list(dict.fromkeys((s.gpu, "all", s.kind) for s in self.steps))
        out = []
        for gpu, model, kind in keys:
            errs = [s.error_pct for s in self.steps if s.gpu == gpu and s.kind == kind and model in ("all", s.model)]
            out.append({"gpu": gpu, "model": model, "kind": kind, "points": len(errs),
                        "mape_pct": round(sum(abs(e) for e in errs) / len(errs), 2),
                        "mean_error_pct": round(sum(errs) / len(errs), 2)})
        return out

    def step_rows(self) -> list[dict]:
        return [{**asdict(s), "measured_ms": round(s.measured_ms, 4), "predicted_ms": round(s.predicted_ms, 4),
                 "error_pct": round(s.error_pct, 1)} for s in self.steps]

    def step_tables(self) -> dict[str, list[dict]]:
        """The steps for printing: one narrow table per (profile, model), titled with both."""
        tables: dict[str, list[dict]] = {}
        for s in self.steps:
            title = f"{s.model} ({s.layers} layers) on {s.gpu}: measured vs predicted"
            tables.setdefault(title, []).append({
                "kind": s.kind, "seqs": s.batch, "tokens": s.num_tokens, "chunk": s.chunk_tokens,
                "context": s.context_tokens, "meas ms": round(s.measured_ms, 4), "pred ms": round(s.predicted_ms, 4),
                "err %": round(s.error_pct, 1)})
        return tables

    def write(self, out_dir: Path) -> list[Path]:
        """forward-check.csv (one row per step and profile), forward-check.json (everything),
        and forward-attention.csv when attention rows exist."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [_write_csv(out_dir / "forward-check.csv", self.step_rows())]
        if self.attention:
            paths.append(_write_csv(out_dir / "forward-attention.csv", self.attention))
        summary = {"raw_data": [str(p) for p in self.raw_paths], "gpus": self.gpus,
                   "engine": self.engine or "none (the bare GPU roofline)", "fitted_on_these_rows": False,
                   "failed_rows": self.failed_rows, "mape": self.mape_rows(), "steps": self.step_rows(),
                   "attention": self.attention}
        path = out_dir / "forward-check.json"
        path.write_text(json.dumps(summary, indent=2))
        return [*paths, path]


def _write_csv(path: Path, rows: list[dict]) -> Path:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_rows(path: Path) -> list[dict]:
    """The rows of a raw forward file; a clear error for a file that is not one."""
    path = Path(path)
    if not path.is_file():
        raise CapsimError(f"--forward-check {path}: no such file.")
    rows = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):  # a torn last line from a killed run
                continue
            raise CapsimError(f"{path}, line {number}: not a JSON object (raw rows are JSON lines).") from None
    for number, row in enumerate(rows, 1):
        if row.get("family") not in ("forward", "attention"):
            raise CapsimError(f"{path}, row {number}: field 'family' is {row.get('family')!r}; a forward raw file "
                              "holds rows of family 'forward' (and 'attention') as `capsim calibrate --forward` "
                              "writes them.")
        needed = ROW_FIELDS if not row.get("error") else ROW_FIELDS[:10]
        missing = [k for k in needed if k not in row]
        if missing:
            raise CapsimError(f"{path}, row {number}: missing field(s) {', '.join(missing)}.")
    return rows


def model_spec(row: dict) -> ModelSpec:
    """The row's model cut to its measured layers."""
    data = {"name": row["model"], "source": "capsim calibrate --forward raw row", "num_layers": row["layers"],
            **row["model_spec"]}
    return validate(ModelSpec, data, f"forward row of {row['model']} (model_spec)")


def step_plan(row: dict) -> tuple[StepPlan, RunningSet]:
    """The row's step as the engine would hand it to the cost model: a decoding request per decode
    context (c positions attended: c - 1 computed, one new), and a scheduled request per prompt
    chunk (its cached tokens computed, its new tokens scheduled, its prompt ending with them)."""
    running = RunningSet(block_size=int(row["block_size"]))
    plan = StepPlan()
    decodes = [int(c) for c in row["decode_contexts"]]
    for i, c in enumerate(decodes):
        running.admit(Request(i, 0.0, c - 1, 2, computed_tokens=c - 1, generated_tokens=1))
    plan.decode_all = bool(decodes)
    plan.num_decodes = len(decodes)
    for j, (prior, new) in enumerate(row["prefill"]):
        plan.scheduled.append(Request(len(decodes) + j, 0.0, int(prior) + int(new), 1, computed_tokens=int(prior)))
        plan.new_tokens.append(int(new))
    plan.decode_only = not plan.scheduled
    return plan, running


def predict_s(row: dict, hardware: HardwareProfile, engine: EngineProfile | None) -> float:
    """capsim's step time (seconds) for the row's step on `hardware`."""
    cost = CostModel(model_spec(row), hardware, get_format(row["dtype"], where="forward row dtype"),
                     get_format(row["kv_dtype"], for_kv=True, where="forward row kv_dtype"), engine=engine, tp=1)
    plan, running = step_plan(row)
    if plan.decode_only:
        return float(cost.decode_seconds(plan.num_decodes, running.context_sum(1), 0))
    return cost.step_cost(plan, *running.decode_context(1)).seconds


def gpu_engine(name: str | None) -> EngineProfile | None:
    """The engine profile with its host time removed (None: the bare GPU roofline)."""
    if name is None or name.lower() == "none":
        return None
    return load_engine(name).model_copy(update={"overhead": EngineOverhead()})


def check_forward(raw_paths: list[Path], gpus: list[str], engine: str | None = None) -> ForwardCheck:
    """Price every measured forward row of `raw_paths` on each of `gpus` (names or profile paths)."""
    if not gpus:
        raise CapsimError("--gpu: name at least one hardware profile to price the steps with (e.g. h200).")
    profiles = [load_hardware(g) for g in gpus]
    eng = gpu_engine(engine)
    steps, failed, attention = [], 0, []
    for path in raw_paths:
        rows = read_rows(path)
        for row in rows:
            if row.get("error"):
                failed += 1
            elif row["family"] == "attention":
                attention.append(row)
            else:
                steps += [_priced(row, hw, eng) for hw in profiles]
    if not steps:
        raise CapsimError(f"{', '.join(map(str, raw_paths))}: no measured forward step to compare.")
    return ForwardCheck(list(map(Path, raw_paths)), [p.name for p in profiles], engine, steps, failed,
                        attention_table(attention))


def _priced(row: dict, hardware: HardwareProfile, engine: EngineProfile | None) -> StepCheck:
    measured, predicted = float(row["time_s"]), predict_s(row, hardware, engine)
    if not (measured > 0 and math.isfinite(measured)):
        raise CapsimError(f"forward row {row['kind']} of {row['model']}: time_s {measured!r} is not a positive time.")
    context = sum(int(c) for c in row["decode_contexts"]) + sum(int(p) + int(n) for p, n in row["prefill"])
    return StepCheck(hardware.name, row["model"], int(row["layers"]), row["kind"], int(row["batch"]),
                     int(row["num_tokens"]), int(row["chunk_tokens"]), context, measured * 1e3, predicted * 1e3,
                     (predicted / measured - 1.0) * 100.0)


def attention_table(rows: list[dict]) -> list[dict]:
    """One row per attention step: the time (ms) of each backend timed there, and their ratio."""
    by_step: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["kind"], tuple(r["decode_contexts"]), tuple(map(tuple, r["prefill"])))
        entry = by_step.setdefault(key, {"model": r["model"], "kind": r["kind"], "batch": r["batch"],
                                         "num_tokens": r["num_tokens"], "chunk_tokens": r["chunk_tokens"]})
        entry[f"{r['backend']}_ms"] = round(float(r["time_s"]) * 1e3, 4)
    for entry in by_step.values():
        times = [v for k, v in entry.items() if k.endswith("_ms")]
        if "flashinfer_ms" in entry and len(times) == 2:
            harness = next(v for k, v in entry.items() if k.endswith("_ms") and k != "flashinfer_ms")
            entry["flashinfer_vs_harness"] = round(entry["flashinfer_ms"] / harness, 3)
    return list(by_step.values())
