"""The deployment planner's candidate space as data: one frozen `Candidate` per per-replica shape
(GPU type x TP x weight format x KV format x engine x max_num_seqs x max_num_batched_tokens), the
`SearchSpace` the user's limits describe, and `enumerate_candidates`, the one function through which
every deployment shape enters the search.

Replicas are not part of a candidate: the planner finds, for each candidate, the fewest replicas
that meet the SLOs at the target load. Today every candidate has shape "aggregated" (prefill and
decode on the same GPUs, tensor parallelism only); a new shape (disaggregated prefill/decode,
pipeline or expert parallelism) adds its enumerator to SHAPES and the fields it needs, and the
bounds and the simulation take it from there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from capsim.errors import CapsimError
from capsim.spec.catalog import load_hardware
from capsim.spec.formats import get_format
from capsim.spec.serving import load_engine

DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_WEIGHTS = ("bf16", "fp8")
DEFAULT_KV = ("fp16", "fp8")
DEFAULT_ENGINES = ("vllm",)
DEFAULT_MAX_NUM_SEQS = (64, 256)
DEFAULT_MAX_NUM_BATCHED_TOKENS = (2048, 8192)
MAX_CANDIDATES = 20_000  # a bigger product of the options is refused before anything runs


@dataclass(frozen=True)
class Candidate:
    """One per-replica deployment shape the planner may choose (replicas are searched per candidate)."""

    shape: str  # "aggregated": prefill and decode share the replica's GPUs (the only shape today)
    gpu: str  # GPU profile name (capsim gpus)
    tp: int  # tensor-parallel degree: GPUs per replica
    weights: str  # weight number format
    kv_cache: str  # KV-cache number format
    engine: str  # serving-engine profile (capsim engines)
    max_num_seqs: int  # the engine's cap on running sequences
    max_num_batched_tokens: int  # tokens per step (the chunked-prefill budget)

    @property
    def gpus_per_replica(self) -> int:
        return self.tp

    def overrides(self) -> dict:
        """The simulation's overrides (capsim.api.apply_overrides) that make a workload run this shape."""
        return {"gpu": self.gpu, "tp": self.tp, "weights": self.weights, "kv_cache": self.kv_cache,
                "engine": self.engine, "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens}

    def label(self) -> str:
        return (f"{self.gpu} tp{self.tp} {self.weights}/{self.kv_cache} {self.engine} "
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
    for option, values in (("--tp", space.tp), ("--max-num-seqs", space.max_num_seqs),
                           ("--max-num-batched-tokens", space.max_num_batched_tokens)):
        if not values or any(v < 1 for v in values):
            raise CapsimError(f"{option}: give positive whole numbers (got {', '.join(map(str, values)) or 'none'}).")


def aggregated(space: SearchSpace) -> list[Candidate]:
    """Prefill and decode on the same GPUs: every combination of the space's options whose TP fits
    the GPU budget."""
    return [Candidate("aggregated", g, tp, w, kv, e, s, b) for g, tp, w, kv, e, s, b in itertools.product(
        space.gpus, sorted(set(space.tp)), space.weights, space.kv_cache, space.engines,
        sorted(set(space.max_num_seqs)), sorted(set(space.max_num_batched_tokens))) if tp <= space.budget_gpus]


# Each deployment shape's enumerator; the planner searches every shape listed here.
SHAPES: dict[str, Callable[[SearchSpace], list[Candidate]]] = {"aggregated": aggregated}


def enumerate_candidates(space: SearchSpace) -> list[Candidate]:
    """Every candidate of every shape in SHAPES, in a fixed order (the plan's tie-break)."""
    check_space(space)
    out = [c for enumerate_shape in SHAPES.values() for c in enumerate_shape(space)]
    if len(out) > MAX_CANDIDATES:
        raise CapsimError(f"plan: {len(out):,} candidate deployments is more than {MAX_CANDIDATES:,}; give fewer "
                          "values to --gpu, --tp, --weights, --kv-cache, --engine, --max-num-seqs or "
                          "--max-num-batched-tokens.")
    return out
