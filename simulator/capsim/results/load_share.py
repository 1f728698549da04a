"""How near an open-loop run sits to its server's saturated throughput (DESIGN §8), and so how
steep its latencies are there.

A batching server's step takes a fixed part (weight reads, host time) and a part that grows with
the work the running requests bring (their decode tokens, attention and prompt chunks). One more
request adds `per_request_s` of GPU time at the run's operating point: its output tokens' share of
a decode step at the run's mean batch and context, and its prompt priced as one chunk in such a
step. The load share rho = request rate x per_request_s (per engine) is the part of the GPU's time
the requests' own work takes; the rest is the fixed part a. The step settles where it serves the
rate, at about a / (1 - rho), so the step time, and with it TTFT and TPOT, moves by rho / (1 - rho)
percent per 1% of rate or of per-request cost. That is a local slope: per-request cost grows with
the batch where GEMMs cross from weight-read to compute bound, so the curve only gets steeper
towards saturation. Near rho = 1 a few percent of error in any step price (capsim's or the
hardware's) is a large error in latency; the verdict says so from NEAR_LOAD on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from capsim.core.plan import StepPlan
from capsim.core.request import Request

NEAR_LOAD = 0.75  # load share from which the verdict warns: latency moves 3% or more per 1%
OPEN_LOOP = ("poisson", "gamma", "constant", "trace")


@dataclass(frozen=True)
class LoadShare:
    """summary.json's `load_share` (open-loop runs that kept up)."""

    share: float  # rho: request rate x per_request_s, per engine
    latency_per_pct: float | None  # % change of the step time (TTFT, TPOT) per 1% of rate or cost; None at rho >= 1
    per_request_s: float  # GPU time one more request adds at the operating point
    at_batch: int  # the mean batch it is priced at
    at_context_tokens: float  # the mean context of a running sequence it is priced at

    def as_dict(self) -> dict:
        return asdict(self)


def load_share(cost, summary: dict, kv_tokens: int, arrivals_kind: str) -> LoadShare | None:
    """The run's LoadShare from its summary (mean batch, KV in use, lengths, throughput) and its
    cost model (anything with CostModel's `step_cost`, `window`, `mode` and `queries`); None for
    closed loops, requests sent at once, saturated runs (their throughput is the server's, not the
    offered rate), unit-mode pricing, speculative decoding (a step yields a varying number of tokens
    per sequence) and runs without completed requests or steps."""
    done = summary.get("completed", 0)
    if (arrivals_kind not in OPEN_LOOP or summary.get("saturated") or not done or not summary.get("num_steps")
            or cost.mode == "unit" or cost.queries > 1):
        return None
    batch = max(1, round(summary["mean_batch_size"]))
    context = max(1.0, summary["kv_capacity_utilisation"] * kv_tokens / max(summary["mean_batch_size"], 1.0))
    prompt = max(1, round(summary["total_input_tokens"] / done))
    output = summary["total_output_tokens"] / done
    base = _step_s(cost, batch, context, 0)
    per_request_s = output * (_step_s(cost, batch + 1, context, 0) - base) + (_step_s(cost, batch, context, prompt) - base)
    rho = summary["request_throughput"] / summary.get("replicas", 1) * per_request_s
    return LoadShare(rho, rho / (1.0 - rho) if rho < 1.0 else None, per_request_s, batch, context)


def _step_s(cost, decodes: int, context_tokens: float, prompt_tokens: int) -> float:
    """A step of `decodes` running sequences of `context_tokens` each, plus one new prompt of
    `prompt_tokens` in one chunk, priced as the engine prices a step."""
    plan = StepPlan()
    plan.decode_all, plan.num_decodes = True, decodes
    if prompt_tokens:
        plan.scheduled.append(Request(decodes, 0.0, prompt_tokens, 1))
        plan.new_tokens.append(prompt_tokens)
    plan.decode_only = not plan.scheduled
    window = cost.window
    sliding = decodes * min(context_tokens, window) if window else 0
    return cost.step_cost(plan, round(decodes * context_tokens), round(sliding)).seconds


def near_saturation_text(share: dict | None) -> str:
    """The verdict's line for a run at or above NEAR_LOAD ('' below it or without a share)."""
    if share is None or share["share"] < NEAR_LOAD:
        return ""
    took = f"the requests' own work takes {100 * share['share']:.0f}% of the GPU's time at this rate"
    if share["latency_per_pct"] is None:
        return f"{took}, as much as it has: the slightest error in a step price decides whether this rate keeps up"
    return (f"{took}; here TTFT and TPOT move by {share['latency_per_pct']:.1f}% or more per 1% of rate or step "
            f"time, so read them as a range (how far capsim's step prices are off: docs/fidelity.md)")
