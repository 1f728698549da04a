"""A verdict on every run (DESIGN §8): did it meet its SLOs, what it costs, which limit binds, and
one or two next steps computed from the run itself.

A server under pressure (saturated, missing an SLO, or with requests spending most of their time
to first token queued) has a binding limit, read off the run's own figures in this order:
- KV capacity: requests were preempted for memory, or the KV cache ran full (over KV_FULL of its
  capacity on average);
- max_num_seqs: the batch reached the scheduler's cap;
- the GPU: the step time's bound (compute, memory bandwidth or fixed overheads) says which part.
Without pressure the limit is "none": the server had room at this load. An open-loop run whose
requests' own work takes NEAR_LOAD or more of the GPU's time also says how steep its latencies are
there (capsim.results.load_share), unless KV capacity or max_num_seqs binds (the binding limit
already says why requests wait).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from capsim.results.load_share import near_saturation_text

KV_FULL = 0.8  # average share of the KV capacity in use that counts as full
QUEUED_SHARE = 0.5  # mean queueing delay over this share of the mean TTFT: requests wait for the server


@dataclass(frozen=True)
class Verdict:
    """What `capsim run` says after its result block (and summary.json's `verdict`)."""

    slo_met: bool | None  # None: the run has no objectives
    checks: list[dict]  # per objective: kind ('limit', 'goodput', 'saturation', 'completion'), met, text
    binding: str  # kv_capacity, max_num_seqs, compute, memory, overhead or none
    evidence: str  # the figures that show the binding limit
    next_steps: list[str]  # concrete suggestions computed from the run
    cost: str  # $/hour and $/1M tokens, with the load they hold at
    near_saturation: str = ""  # from NEAR_LOAD on: the load share and how steep latency is there ('' otherwise)

    def as_dict(self) -> dict:
        return asdict(self)


def judge(summary: dict, objectives, setup, alternatives: list[tuple[str, int]], command: str) -> Verdict:
    """The verdict of a run: `summary` (metrics.summarize + cost), the Objectives it is judged
    against, its Setup, `alternatives` (label, sequences the KV cache would hold at the mean request)
    and the `capsim capacity ...` command a user would run next."""
    checks = [{"kind": k, "met": m, "text": t} for k, m, t in objectives.checks(summary)] if not objectives.empty else []
    if summary.get("saturated") and not checks:
        checks = [{"kind": "saturation", "met": False, "text": f"saturated: {summary['saturation']['evidence']}"}]
    slo_met = None if objectives.empty else all(c["met"] for c in checks)
    pressed = bool(summary.get("saturated")) or slo_met is False or \
        summary.get("mean_queueing_ms", 0.0) > QUEUED_SHARE * summary.get("mean_ttft_ms", 0.0)
    binding, evidence = binding_limit(summary, setup, pressed)
    steps = next_steps(summary, setup, binding, alternatives, command, slo_met)
    # where KV capacity or max_num_seqs binds, requests queue for memory or a slot, not GPU time
    near = "" if binding in ("kv_capacity", "max_num_seqs") else near_saturation_text(summary.get("load_share"))
    return Verdict(slo_met, checks, binding, evidence, steps, cost_line(summary), near)


def binding_limit(s: dict, setup, pressed: bool) -> tuple[str, str]:
    """(limit, evidence) per the module docstring."""
    bound = max(s["bound_fraction"], key=s["bound_fraction"].get) if s["num_steps"] else "memory"
    if not pressed:
        return "none", (f"the server had room at this load: mean queueing {s.get('mean_queueing_ms', 0.0):,.1f} ms "
                        f"of a mean TTFT of {s.get('mean_ttft_ms', 0.0):,.1f} ms, KV cache "
                        f"{100 * s.get('kv_capacity_utilisation', 0.0):.0f}% in use; steps were mostly {bound}-bound")
    seqs_fit = s.get("max_seqs_at_mean_request")
    if s["preemptions"] > 0 or s.get("kv_capacity_utilisation", 0.0) > KV_FULL:
        fit = f"the KV cache holds {seqs_fit:,} sequences of this workload's mean length " \
              f"({s['mean_request_tokens']:,.0f} tokens)" if seqs_fit is not None else "the KV cache is full"
        return "kv_capacity", (f"{fit}; it was {100 * s['kv_capacity_utilisation']:.0f}% full on average, "
                               f"{s['preemptions']:,} preemptions, mean queueing {s['mean_queueing_ms']:,.0f} ms")
    cap = setup.workload.scheduler.max_num_seqs
    if s["max_batch_size"] >= cap:
        return "max_num_seqs", (f"the batch reached max_num_seqs {cap} (mean {s['mean_batch_size']:.1f}) while "
                                f"requests queued {s['mean_queueing_ms']:,.0f} ms on average")
    what = {"compute": "compute (tensor FLOPS)", "memory": "memory bandwidth",
            "overhead": "fixed per-step overheads (host time, kernel launches)"}[bound]
    return bound, (f"the GPU was busy {100 * s['gpu_busy_fraction']:.0f}% of the time, "
                   f"{100 * s['bound_fraction'][bound]:.0f}% of it bound by {what}; mean batch "
                   f"{s['mean_batch_size']:.1f}, mean queueing {s['mean_queueing_ms']:,.0f} ms")


def next_steps(s: dict, setup, binding: str, alternatives: list[tuple[str, int]], command: str,
               slo_met: bool | None) -> list[str]:
    """One or two suggestions that follow from the binding limit and the run's figures."""
    out = []
    load = s.get("cost", {}).get("load", "this load")
    sat = s.get("saturation") or {}
    if sat.get("too_short"):
        spans = sat.get("window_latencies") or 0.0
        factor = 10.0 / spans if spans > 0 else 10.0
        out.append(f"simulate more requests (about {factor:.1f}x as many, `--requests "
                   f"{int(s['arrived'] * factor * 1.2):,}`): this run ends before the server reaches a steady state")
    if s.get("saturated"):
        out.append(f"saturated at {load}: the server kept up with {sat['departure_rate_per_s']:,.3g} of "
                   f"{sat['arrival_rate_per_s']:,.3g} req/s; the highest rate within the SLO is lower still: "
                   f"`{command}`")
    if binding == "kv_capacity" and alternatives:
        fits = ", ".join(f"{label} holds {n:,}" for label, n in alternatives)
        out.append(f"the KV cache holds {s.get('max_seqs_at_mean_request', 0):,} sequences of this length: {fits}")
    elif binding == "max_num_seqs":
        fit = s.get("max_seqs_at_mean_request")
        room = f" (the KV cache holds {fit:,} sequences of this length)" if fit else ""
        out.append(f"raise max_num_seqs above {setup.workload.scheduler.max_num_seqs}{room}")
    elif binding in ("compute", "memory", "overhead"):
        replicas = setup.workload.replicas
        out.append(f"the GPU is the limit: add replicas (now {replicas}) or GPUs per replica (--tp), or a faster "
                   f"GPU (`capsim compare ... --gpu A --gpu B`)")
    what = "number of users" if command.endswith("--users") else "rate"
    if not s.get("saturated") and slo_met is not False and len(out) < 2:
        out.append(f"headroom at {load}: find the highest {what} within the SLO with `{command}`")
    elif slo_met is False and not s.get("saturated") and len(out) < 2:
        out.append(f"the SLO is missed at {load}: find the {what} that meets it with `{command}`")
    return out[:2]


def cost_line(s: dict) -> str:
    c = s.get("cost") or {}
    if c.get("usd_per_hour") is None:
        return f"{c.get('gpus', '?')} GPU(s); no price known (give --price-per-hour)"
    per_m = c.get("usd_per_m_output_tokens")
    tokens = "n/a" if per_m is None else f"${per_m:,.3f} per 1M output tokens"
    return (f"${c['usd_per_hour']:,.2f}/hour for {c['gpus']} GPU(s) at ${c['price_per_gpu_hour_usd']:,.2f} per "
            f"GPU-hour ({c['price_source']}); {tokens} at {c['load']}")
