"""Disaggregated prefill/decode (a workload's `serving.disaggregated`): each pool resolved as a
set-up of its own, its replicas built with their role, the handoff over the link, and the run's
per-pool figures, transfers and cost (docs/shapes.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from capsim.api.setup import Setup, apply_overrides, resolve
from capsim.errors import CapsimError
from capsim.results.cost import deployment_cost, price_for
from capsim.sim.engine import Engine
from capsim.sim.handoff import Handoff
from capsim.sim.replica import Replica
from capsim.spec.shapes import Link, Pool, load_link
from capsim.workload.schema import WorkloadConfig


@dataclass(frozen=True)
class Pools:
    """A disaggregated deployment resolved: one set-up per pool and the link between them."""

    prefill: Setup  # the prefill pool's set-up (its GPU, TP, limits and KV budget)
    decode: Setup  # the decode pool's
    prefill_replicas: int
    decode_replicas: int
    link: Link


def resolve_pools(w: WorkloadConfig, source: str, base_dir: Path | None) -> Pools:
    """Each pool as the workload with the pool's settings in place of the top-level ones."""
    d = w.serving.disaggregated if w.serving else None
    assert d is not None  # called only for disaggregated workloads
    setups = [replace(resolve(_pool_workload(w, pool, f"{source}: serving.disaggregated.{role}"),
                              f"{source} (serving.disaggregated.{role})", base_dir), source=source)
              for role, pool in (("prefill", d.prefill), ("decode", d.decode))]
    if setups[0].workload.scheduler.block_size != setups[1].workload.scheduler.block_size:
        raise CapsimError(f"{source}: the prefill and decode pools resolve to different KV block sizes; the step log "
                          "needs one. Set scheduler.block_size in the workload.")
    return Pools(setups[0], setups[1], d.prefill.replicas, d.decode.replicas, load_link(d.link))


def _pool_workload(w: WorkloadConfig, pool: Pool, where: str) -> WorkloadConfig:
    return apply_overrides(w, where, gpu=pool.gpu, tp=pool.tp, pp=pool.pp, ep=pool.ep, max_num_seqs=pool.max_num_seqs,
                           max_num_batched_tokens=pool.max_num_batched_tokens, num_gpu_blocks=pool.num_gpu_blocks)


def build_pools(pools: Pools, build: Callable[[Setup, int], Replica]) -> tuple[list[Replica], Handoff]:
    """The prefill replicas (indices 0..P-1), then the decode replicas, and the handoff between.
    One link carries one GPU's shard of the KV: the pool with fewer GPUs per instance sets the
    shard (its GPUs send or take more each)."""
    p_count = pools.prefill_replicas * _engines(pools.prefill)
    prefill = [build(pools.prefill, i) for i in range(p_count)]
    decode = [build(pools.decode, p_count + i) for i in range(pools.decode_replicas * _engines(pools.decode))]
    for rep in prefill:
        rep.role = "prefill"
    for rep in decode:
        rep.role = "decode"
    shard = max(_bytes_per_token(pools.prefill), _bytes_per_token(pools.decode))
    link = pools.link
    return prefill + decode, Handoff(link.achieved_bytes_per_s, link.latency_s, link.per_transfer_s, shard)


def _engines(setup: Setup) -> int:
    """Replicas the engine simulates per instance: pp virtual engines, or ep data-parallel ranks."""
    return setup.workload.pp * setup.workload.ep


def _bytes_per_token(setup: Setup) -> float:
    """KV bytes of one token held by one GPU of the set-up's instances (its KV format and TP)."""
    return setup.memory.bytes_per_block / setup.memory.block_size


def pool_summary(pools: Pools, engine: Engine, parts: Iterable[dict], end_s: float) -> dict:
    """The summary's `disaggregated` block: per pool its GPUs, busy share and batch; the link;
    the transfers (count, bytes, time from prefill end to landing, time queued for the link)."""
    p = pools.prefill_replicas * _engines(pools.prefill)
    busy = np.zeros(len(engine.replicas))
    seq_s = np.zeros(len(engine.replicas))
    for part in parts:
        rep = np.asarray(part["replica"], dtype=np.int64)
        dur = np.asarray(part["duration_s"], dtype=np.float64)
        busy += np.bincount(rep, weights=dur, minlength=len(busy))
        seq_s += np.bincount(rep, weights=dur * np.asarray(part["num_seqs"], dtype=np.float64), minlength=len(busy))
    out: dict = {}
    for name, setup, idx in (("prefill", pools.prefill, slice(0, p)), ("decode", pools.decode, slice(p, None))):
        b, s = busy[idx], seq_s[idx]
        out[name] = {
            "replicas": int(b.size // _engines(setup)), "gpu": setup.hardware.name, "tp": setup.workload.tp,
            "pp": setup.workload.pp, "ep": setup.workload.ep,
            "gpus": int(b.size * setup.workload.tp), "max_num_seqs": setup.workload.scheduler.max_num_seqs,
            "max_num_batched_tokens": setup.max_num_batched_tokens, "kv_capacity_tokens": setup.memory.kv_tokens,
            "busy_share": float(b.sum() / (end_s * b.size)) if end_s > 0 else 0.0,
            "busy_share_per_replica": [float(x / end_s) if end_s > 0 else 0.0 for x in b],
            "mean_batch_seqs": float(s.sum() / b.sum()) if b.sum() > 0 else 0.0,
        }
    link = pools.link
    out["link"] = {"name": link.name, "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
                   "efficiency": link.efficiency, "latency_s": link.latency_s, "per_transfer_s": link.per_transfer_s}
    out["transfers"] = transfer_stats(engine.handoff)
    return out


def transfer_stats(handoff: Handoff | None) -> dict:
    """Count, bytes and the distribution of transfer time (prefill end to landing) in ms."""
    cols = handoff.records.columns() if handoff is not None else {}
    if not cols or not len(cols["bytes"]):
        return {"count": 0, "bytes": 0.0}
    ms = (cols["land_s"] - cols["sent_s"]) * 1e3
    queue_ms = cols["queue_s"] * 1e3
    stats = {"count": int(len(ms)), "bytes": float(cols["bytes"].sum()), "mean_bytes": float(cols["bytes"].mean())}
    for name, values in (("transfer_ms", ms), ("link_queue_ms", queue_ms)):
        stats[f"mean_{name}"] = float(values.mean())
        for q in (50, 90, 99):
            stats[f"p{q}_{name}"] = float(np.percentile(values, q))
        stats[f"max_{name}"] = float(values.max())
    return stats


def pool_cost(pools: Pools, summary: dict, price, load: str) -> dict:
    """The summary's cost fields counting every GPU of both pools (each at its own GPU's price)."""
    per_hour = 0.0
    gpus = 0
    sources = set()
    for setup, replicas in ((pools.prefill, pools.prefill_replicas), (pools.decode, pools.decode_replicas)):
        per_gpu, source = price_for(setup.hardware.name, setup.hardware.price_per_hour_usd, price)
        n = setup.workload.tp * _engines(setup) * replicas
        gpus += n
        if per_gpu is None:
            per_hour = float("nan")
        per_hour += (per_gpu or 0.0) * n
        sources.add(source)
    known = per_hour == per_hour
    source = sources.pop() if len(sources) == 1 else "mixed"
    cost = deployment_cost(per_hour / gpus if known else None, source if known else None, gpus,
                           summary["output_throughput"], summary["total_token_throughput"], load)
    return {"gpus": cost.gpus, "usd_per_hour": cost.usd_per_hour, "usd_per_m_output_tokens": cost.usd_per_m_output_tokens,
            "usd_per_m_total_tokens": cost.usd_per_m_total_tokens, "cost": cost.as_dict()}
