"""Deployment shapes beyond copies of one server: validated config for disaggregated prefill/decode
(a prefill pool and a decode pool joined by a link), and the catalogue of links between GPUs.

A workload's `serving:` block holds them (capsim.workload.schema.WorkloadConfig.serving);
docs/shapes.md explains the model. Links come from spec/data/links.yaml (every figure with its
source) or are given inline.
"""

from __future__ import annotations

from functools import cache

from pydantic import Field

from capsim.errors import CapsimError, did_you_mean
from capsim.spec import limits as L
from capsim.spec.catalog import data_catalog
from capsim.spec.config import Frozen


class Link(Frozen):
    """A one-direction link that carries KV caches: time = latency_s + per_transfer_s + bytes /
    (bandwidth_bytes_per_s x efficiency); transfers on one sender's link go one after another."""

    name: str = "inline"
    bandwidth_bytes_per_s: float = Field(ge=L.MIN_BYTES_PER_S, le=L.MAX_BYTES_PER_S,
                                         description="line rate per GPU, one direction")
    efficiency: float = Field(1.0, ge=L.MIN_EFFICIENCY, le=1, description="achieved / line rate for large transfers")
    latency_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S, description="one-way latency (does not occupy the link)")
    per_transfer_s: float = Field(0.0, ge=0, le=L.MAX_FIXED_TIME_S,
                                  description="fixed cost of one request's transfer (setup, completion), occupies the link")
    sources: dict[str, str] = {}
    notes: str = ""

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency

    def transfer_s(self, nbytes: float) -> float:
        """Seconds the link is busy moving `nbytes` (latency excluded: it overlaps the next transfer)."""
        return self.per_transfer_s + nbytes / self.achieved_bytes_per_s


class Pool(Frozen):
    """One pool of a disaggregated deployment: its replicas and what differs from the workload's
    top-level settings (which are the defaults)."""

    replicas: int = Field(1, gt=0, le=4096, description="instances in the pool")
    tp: int | None = Field(None, gt=0, le=1024, description="tensor-parallel GPUs per instance (default: the workload's tp)")
    pp: int | None = Field(None, gt=0, le=256, description="pipeline stages per instance (default: the workload's pp)")
    ep: int | None = Field(None, gt=0, le=1024, description="expert-parallel ranks per instance (default: the workload's ep)")
    gpu: str | None = Field(None, description="GPU of this pool (default: the workload's gpu)")
    max_num_seqs: int | None = Field(None, gt=0, le=10_000_000)
    max_num_batched_tokens: int | None = Field(None, gt=0, le=L.MAX_TOKENS)
    num_gpu_blocks: int | None = Field(None, gt=0, le=L.MAX_TOKENS, description="override the computed KV capacity")


class Disaggregated(Frozen):
    """xPyD: prompts prefill in the prefill pool, their KV moves over `link`, they decode in the
    decode pool."""

    prefill: Pool = Pool()
    decode: Pool = Pool()
    link: str | Link = Field("rdma-200g", description="a link name from spec/data/links.yaml (docs/shapes.md lists "
                             "them) or an inline link")


class Serving(Frozen):
    """How the deployment is shaped (absent: `replicas` copies of one server)."""

    disaggregated: Disaggregated | None = None


@cache
def link_catalog() -> dict[str, Link]:
    """The shipped links by name (spec/data/links.yaml)."""
    return data_catalog("links.yaml", Link, "link")


def load_link(link: str | Link, where: str = "serving.disaggregated.link") -> Link:
    """A link by catalogue name, or the inline one given."""
    if isinstance(link, Link):
        return link
    catalog = link_catalog()
    if link not in catalog:
        raise CapsimError(f"field '{where}': unknown link {link!r}.{did_you_mean(link, sorted(catalog))} Known links: "
                          f"{', '.join(sorted(catalog))}, or give one inline with bandwidth_bytes_per_s "
                          "(and latency_s, per_transfer_s, efficiency).")
    return catalog[link]


def shape_problems(w) -> list[str]:
    """What the deployment shapes of workload `w` (a WorkloadConfig) cannot combine with, one line
    each: a disaggregated deployment's pools set the
    replicas; speculative decoding is not modelled across the handoff, nor with pp or ep; ep runs
    attention data-parallel, one GPU per rank."""
    problems = []
    if w.serving is not None and w.serving.disaggregated is not None:
        if w.replicas != 1:
            problems.append("with serving.disaggregated, give the instances as serving.disaggregated.prefill.replicas "
                            "and decode.replicas, not 'replicas'")
        if w.speculative is not None:
            problems.append("serving.disaggregated does not combine with 'speculative' (not modelled across the handoff)")
    if (w.pp > 1 or w.ep > 1) and w.speculative is not None:
        problems.append("'pp' or 'ep' above 1 does not combine with 'speculative' (not modelled)")
    if w.ep > 1 and (w.pp > 1 or w.tp > 1):
        problems.append("'ep' above 1 runs attention data-parallel, one GPU per rank: give tp 1 and pp 1")
    return problems
