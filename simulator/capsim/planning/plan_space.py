"""The deployment planner's candidate space as data: one frozen `Candidate` per per-replica shape
(deployment shape x GPU type x TP (x PP, EP, prefill:decode split) x weight format x KV format x
engine x max_num_seqs x max_num_batched_tokens), the `SearchSpace` the user's limits describe, and
`enumerate_candidates`, the one function through which every deployment shape enters the search.

Replicas are not part of a candidate: the planner finds, for each candidate, the fewest replicas
that meet the SLOs at the target load. The shapes (SHAPES, docs/shapes.md):

- "aggregated": prefill and decode on the same TP GPUs;
- "pp": TP x PP GPUs per replica (models whose layers are all full attention, pp <= layers);
- "ep": EP GPUs per replica, one attention data-parallel rank each (mixture-of-experts models
  whose expert count splits evenly into ranks of at least experts_per_token);
- "disaggregated": a replica is one unit of P prefill and D decode instances of TP GPUs each (the
  split P:D is fixed per candidate; more replicas add whole units), joined by the link
  `disaggregated_link` picks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capsim.api import load_workload
from capsim.errors import CapsimError
from capsim.spec import config as C
from capsim.spec.catalog import load_hardware, load_model
from capsim.spec.formats import get_format
from capsim.spec.serving import load_engine

DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_WEIGHTS = ("bf16", "fp8")
DEFAULT_KV = ("fp16", "fp8")
DEFAULT_ENGINES = ("vllm",)
DEFAULT_MAX_NUM_SEQS = (64, 256)
DEFAULT_MAX_NUM_BATCHED_TOKENS = (2048, 8192)
DEFAULT_PP = (2, 4)
DEFAULT_EP = (2, 4, 8)
DEFAULT_SPLITS = ((1, 1), (1, 2), (2, 1), (1, 3))  # prefill:decode instances per disaggregated unit
SHAPE_NAMES = ("aggregated", "pp", "ep", "disaggregated")
NODE_GPUS = 8  # GPUs in one server: a disaggregated unit up to this size keeps its KV transfers inside it
MAX_CANDIDATES = 20_000  # a bigger product of the options is refused before anything runs


@dataclass(frozen=True)
class Candidate:
    """One per-replica deployment shape the planner may choose (replicas are searched per candidate)."""

    shape: str  # one of SHAPE_NAMES
    gpu: str  # GPU profile name (capsim gpus)
    tp: int  # tensor-parallel degree (per pipeline stage, per disaggregated instance)
    weights: str  # weight number format
    kv_cache: str  # KV-cache number format
    engine: str  # serving-engine profile (capsim engines)
    max_num_seqs: int  # the engine's cap on running sequences (per instance, virtual engine or rank)
    max_num_batched_tokens: int  # tokens per step (the chunked-prefill budget)
    pp: int = 1  # pipeline stages per replica
    ep: int = 1  # expert-parallel ranks per replica (tp is then 1)
    prefill: int = 0  # disaggregated: prefill instances per unit (0 for the other shapes)
    decode: int = 0  # disaggregated: decode instances per unit
    link: str = ""  # disaggregated: the catalogue link between the pools (spec/data/links.yaml)

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp * self.ep

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica: of a disaggregated unit, both pools' instances."""
        units = self.prefill + self.decode if self.shape == "disaggregated" else 1
        return self.gpus_per_instance * units

    def overrides(self) -> dict:
        """The simulation's overrides (capsim.api.apply_overrides) that make a workload run this shape."""
        out: dict = {"gpu": self.gpu, "tp": self.tp, "weights": self.weights, "kv_cache": self.kv_cache,
                     "engine": self.engine, "max_num_seqs": self.max_num_seqs,
                     "max_num_batched_tokens": self.max_num_batched_tokens, "pp": self.pp, "ep": self.ep}
        # The shape replaces the workload's own (an aggregated candidate of a disaggregated workload
        # runs aggregated).
        out["serving"] = {"disaggregated": {"prefill": {"replicas": self.prefill}, "decode": {"replicas": self.decode},
                                            "link": self.link}} if self.shape == "disaggregated" else {}
        return out

    def label(self) -> str:
        par = f"tp{self.tp}" + (f" pp{self.pp}" if self.pp > 1 else "") + (f" ep{self.ep}" if self.ep > 1 else "")
        split = f" {self.prefill}P{self.decode}D over {self.link}" if self.shape == "disaggregated" else ""
        return (f"{self.gpu} {par}{split} {self.weights}/{self.kv_cache} {self.engine} "
                f"seqs {self.max_num_seqs} batch {self.max_num_batched_tokens}")


@dataclass(frozen=True)
class SearchSpace:
    """The user's limits: what may be combined, and how many GPUs a deployment may hold in all."""

    gpus: tuple[str, ...]  # GPU profile names to choose from
    budget_gpus: int  # at most this many GPUs in the whole deployment (every replica's)
    tp: tuple[int, ...] = DEFAULT_TP
    weights: tuple[str, ...] = DEFAULT_WEIGHTS
    kv_cache: tuple[str, ...] = DEFAULT_KV
    engines: tuple[str, ...] = DEFAULT_ENGINES
    max_num_seqs: tuple[int, ...] = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: tuple[int, ...] = DEFAULT_MAX_NUM_BATCHED_TOKENS
    shapes: tuple[str, ...] = ("aggregated",)  # which of SHAPE_NAMES to search
    pp: tuple[int, ...] = DEFAULT_PP  # pipeline stages tried by the "pp" shape
    ep: tuple[int, ...] = DEFAULT_EP  # expert-parallel ranks tried by the "ep" shape
    splits: tuple[tuple[int, int], ...] = DEFAULT_SPLITS  # prefill:decode instances tried by "disaggregated"
    model: C.ModelSpec | None = None  # the workload's model: "pp" and "ep" keep only degrees it allows


def default_shapes(model: C.ModelSpec) -> tuple[str, ...]:
    """The shapes searched when none are named: aggregated, plus expert parallelism for a
    mixture-of-experts model. PP and disaggregated are searched on request: each multiplies the
    candidates and a disaggregated simulation runs two pools."""
    return ("aggregated", "ep") if model.moe is not None else ("aggregated",)


def parse_shapes(text: str | None, workload) -> tuple[str, ...]:
    """--shapes "aggregated,pp" as a tuple; None: default_shapes of the workload's model (a
    WorkloadConfig, or a path to one)."""
    if text is not None:
        return tuple(part.strip() for part in text.split(",") if part.strip())
    w = workload if not isinstance(workload, (str, Path)) else load_workload(workload)
    return default_shapes(load_model(w.model) if isinstance(w.model, str) else w.model)


def parse_splits(text: str) -> tuple[tuple[int, int], ...]:
    """--splits "1:1,1:2" as ((1, 1), (1, 2)); a CapsimError naming the bad part otherwise."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        p, _, d = part.partition(":")
        if not (p.isdigit() and d.isdigit()):
            raise CapsimError(f"--splits: {part!r} is not PREFILL:DECODE instance counts (e.g. 1:2); give whole "
                              "numbers, comma-separated: 1:1,1:2,2:1.")
        out.append((int(p), int(d)))
    return tuple(out)


def check_space(space: SearchSpace) -> None:
    """Every name known and every number positive, before anything is enumerated: a CapsimError
    naming the option otherwise."""
    if not space.gpus:
        raise CapsimError("plan: give at least one --gpu to choose from (see `capsim gpus`).")
    if space.budget_gpus < 1:
        raise CapsimError(f"--budget-gpus: must be at least 1 (got {space.budget_gpus}); it caps the GPUs of the "
                          "whole deployment, every replica's.")
    for gpu in space.gpus:
        load_hardware(gpu)  # an unknown GPU raises, with the names it knows
    for name in space.weights:
        get_format(name, where="--weights")
    for name in space.kv_cache:
        get_format(name, for_kv=True, where="--kv-cache")
    for name in space.engines:
        load_engine(name)
    unknown = [s for s in space.shapes if s not in SHAPE_NAMES]
    if unknown or not space.shapes:
        raise CapsimError(f"--shapes: unknown shape(s) {', '.join(unknown) or '(none given)'}; choose from "
                          f"{', '.join(SHAPE_NAMES)}, comma-separated.")
    if any(p < 1 or d < 1 for p, d in space.splits) or not space.splits:
        raise CapsimError("--splits: give prefill:decode instance counts, each at least 1 (e.g. 1:1,1:2,2:1).")
    for option, values in (("--tp", space.tp), ("--pp", space.pp), ("--ep", space.ep),
                           ("--max-num-seqs", space.max_num_seqs),
                           ("--max-num-batched-tokens", space.max_num_batched_tokens)):
        if not values or any(v < 1 for v in values):
            raise CapsimError(f"{option}: give positive whole numbers (got {', '.join(map(str, values)) or 'none'}).")


def aggregated(space: SearchSpace) -> list[Candidate]:
    """Prefill and decode on the same GPUs: every combination of the space's options whose TP fits
    the GPU budget."""
    return [Candidate("aggregated", g, tp, w, kv, e, s, b) for g, tp, w, kv, e, s, b in itertools.product(
        space.gpus, sorted(set(space.tp)), space.weights, space.kv_cache, space.engines,
        sorted(set(space.max_num_seqs)), sorted(set(space.max_num_batched_tokens))) if tp <= space.budget_gpus]


def _rest(space: SearchSpace):
    """The options every shape combines with the same way: formats, engine and batch limits."""
    return list(itertools.product(space.weights, space.kv_cache, space.engines, sorted(set(space.max_num_seqs)),
                                  sorted(set(space.max_num_batched_tokens))))


def pipeline(space: SearchSpace) -> list[Candidate]:
    """TP x PP GPUs per replica within the budget, for each pp > 1 the model allows (all layers full
    attention, at least one layer per stage; without a model every pp is tried)."""
    m = space.model
    allowed = [p for p in sorted(set(space.pp)) if p > 1 and (m is None or (
        not m.layer_counts.sliding and not m.layer_counts.linear and p <= m.num_layers))]
    return [Candidate("pp", g, tp, *rest, pp=p) for g in space.gpus for tp in sorted(set(space.tp)) for p in allowed
            for rest in _rest(space) if tp * p <= space.budget_gpus]


def expert(space: SearchSpace) -> list[Candidate]:
    """EP ranks of one GPU each, for each ep > 1 that splits a mixture-of-experts model's experts
    evenly into ranks of at least experts_per_token (none for a dense model)."""
    moe = space.model.moe if space.model is not None else None
    if space.model is not None and moe is None:
        return []
    allowed = [e for e in sorted(set(space.ep)) if e > 1 and (moe is None or (
        moe.num_experts % e == 0 and moe.num_experts // e >= moe.experts_per_token))]
    return [Candidate("ep", g, 1, *rest, ep=e) for g in space.gpus for e in allowed for rest in _rest(space)
            if e <= space.budget_gpus]


def disaggregated_link(gpu: str, unit_gpus: int) -> str:
    """The link between a disaggregated unit's pools: within one NODE_GPUS server, the GPUs' own
    NVLink (nvlink4) where the profile has one, else PCIe (gen5 where the profile's host link is at
    least gen5's line rate, else gen4); across servers an RDMA NIC per GPU (rdma-400g, the
    catalogue's fastest and the class H100/H200 clusters ship with)."""
    if unit_gpus > NODE_GPUS:
        return "rdma-400g"
    ic = load_hardware(gpu).interconnect
    if ic.gpu_link_bytes_per_s is not None:
        return "nvlink4"
    return "pcie-gen5-x16" if ic.pcie_bytes_per_s >= 63e9 else "pcie-gen4-x16"


def disaggregated(space: SearchSpace) -> list[Candidate]:
    """One unit of P prefill and D decode instances of TP GPUs each, for each split P:D whose
    (P + D) x TP GPUs fit the budget; both pools share the instance shape."""
    out = []
    for g, tp in itertools.product(space.gpus, sorted(set(space.tp))):
        for p, d in space.splits:
            if (p + d) * tp <= space.budget_gpus:
                link = disaggregated_link(g, (p + d) * tp)
                out += [Candidate("disaggregated", g, tp, *rest, prefill=p, decode=d, link=link) for rest in _rest(space)]
    return out


# Each deployment shape's enumerator; the planner searches the shapes the space names, in this order.
SHAPES: dict[str, Callable[[SearchSpace], list[Candidate]]] = {
    "aggregated": aggregated, "pp": pipeline, "ep": expert, "disaggregated": disaggregated}


def enumerate_candidates(space: SearchSpace) -> list[Candidate]:
    """Every candidate of every shape the space names, in a fixed order (the plan's tie-break)."""
    check_space(space)
    out = [c for name, enumerate_shape in SHAPES.items() if name in space.shapes for c in enumerate_shape(space)]
    if len(out) > MAX_CANDIDATES:
        raise CapsimError(f"plan: {len(out):,} candidate deployments is more than {MAX_CANDIDATES:,}; give fewer "
                          "values to --shapes, --gpu, --tp, --pp, --ep, --splits, --weights, --kv-cache, --engine, --max-num-seqs or "
                          "--max-num-batched-tokens.")
    return out
