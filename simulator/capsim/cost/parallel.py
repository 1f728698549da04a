"""Pipeline and expert parallelism: layers split into stages over GPUs, experts spread over ranks,
and the step time of such a replica.

A replica of TP x PP GPUs runs its layers in `pp` stages (consecutive layers, the first stages one
layer longer when the count does not divide). As in vLLM's V0 engine, it keeps `pp` micro-batches
in flight: `pp` virtual engines, each with its own scheduler and 1/pp of the KV blocks, whose
batches follow each other through the stages. The engine simulates each virtual engine as a replica
whose step takes

    pp x stage_s(batch) - (pp - 1) x host_s + (pp - 1) x activation_s(tokens)

where stage_s prices the batch on the largest stage (its layers on one TP group), host_s is the
scheduler's per-step host time (paid once per step, not per stage), and activation_s moves the
step's hidden states across one stage boundary. With even stages that is exactly the time one batch
takes through the pipeline, and with all pp virtual engines busy it is the period each of them sees
(every stage busy all the time); uneven stages make the slowest stage set the pace (`imbalance`).
With fewer busy virtual engines than stages the idle stage slots are the bubble
(`bubble_fraction`). docs/shapes.md says what this leaves out.

Expert parallelism (ExpertParallelCost): a replica of `ep` GPUs, each an attention data-parallel
rank with its own scheduler and KV cache, the MoE layers' experts spread evenly over the ranks. A
rank's step is its own batch's step on a model holding num_experts / ep experts, reading the
experts that all ranks' tokens touch among its own (distinct_experts_per_rank) and adding a
dispatch and a combine all-to-all per MoE layer over the link (all_to_all_s).
"""

from __future__ import annotations

import math

from capsim.core.plan import StepPlan
from capsim.cost.roofline import CostModel, StepCost


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per stage: as even as possible, the first `num_layers % pp` stages one longer."""
    base, extra = divmod(num_layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def imbalance(num_layers: int, pp: int) -> float:
    """The largest stage over the mean stage (1.0 when pp divides the layers)."""
    return max(stage_layers(num_layers, pp)) * pp / num_layers


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """Share of stage time idle when `micro_batches` equal micro-batches pass through `pp` equal
    stages, pipeline fill and drain included (GPipe): (pp - 1) / (micro_batches + pp - 1)."""
    return (pp - 1) / (micro_batches + pp - 1)


def activation_bytes(tokens: int, hidden_size: int, tp: int, bytes_per_value: float = 2.0) -> float:
    """Hidden states one TP rank sends across a stage boundary: each rank sends its 1/tp slice
    (vLLM's send_tensor_dict with the TP group as all_gather_group), 16-bit activations."""
    return tokens * hidden_size * bytes_per_value / tp


class ShapedCost(CostModel):
    """A CostModel whose steps are `scale` times its own plus extra_s: the common form of a
    pipelined (PipelineCost) and an expert-parallel (ExpertParallelCost) replica's pricing. Decode
    coefficients are changed the same way, so a decode step stays
    max(c1*S + c2*Ss + c0, m1*S + m2*Ss + m0) and macro-steps round like single steps."""

    scale: int

    def extra_s(self, tokens: int, num_seqs: int, decode_only: bool) -> float:
        return 0.0

    def step_cost(self, plan: StepPlan, decode_context_tokens: int = 0, decode_sliding_tokens: int = 0) -> StepCost:
        own = CostModel.step_cost(self, plan, decode_context_tokens, decode_sliding_tokens)
        k = self.scale
        tokens = plan.num_tokens + plan.num_decodes * (self.queries - 1)
        extra = self.extra_s(tokens, plan.num_seqs, plan.num_tokens == plan.num_seqs)
        return StepCost(k * own.seconds + extra, k * own.compute_s, k * own.memory_s, k * own.overhead_s + extra,
                        own.flops, own.bytes, own.bound)

    def decode_coefficients(self, n: int) -> tuple[float, ...]:
        cached = self._decode_cache.get(n)
        if cached is not None:
            return cached
        c = CostModel.decode_coefficients(self, n)
        k = self.scale
        extra = self.extra_s(n * self.queries, n, True)
        coefs = (k * c[0], k * c[1], k * c[2] + extra, k * c[3], k * c[4], k * c[5] + extra) + tuple(c[6:])
        self._decode_cache[n] = coefs
        return coefs


class PipelineCost(ShapedCost):
    """A CostModel of the largest stage (built on a model with that many layers) turned into the
    step time of one virtual engine of a pp-stage replica (see the module docstring)."""

    link_bytes_per_s: float
    link_latency_s: float

    def set_pipeline(self, pp: int, link_bytes_per_s: float, link_latency_s: float) -> None:
        """The stages and the link between consecutive ones (achieved bandwidth, one direction)."""
        self.scale, self.link_bytes_per_s, self.link_latency_s = pp, link_bytes_per_s, link_latency_s
        self._decode_cache = {}

    def activation_s(self, tokens: int) -> float:
        """Moving a step's hidden states over every stage boundary, one after another."""
        one = self.link_latency_s + activation_bytes(tokens, self.hidden_size, self.tp) / self.link_bytes_per_s
        return (self.scale - 1) * one

    def host_s(self, num_seqs: int, decode_only: bool) -> float:
        r = self.rates
        if r is None or self.mode != "realistic":
            return 0.0
        host = r.step_s + r.seq_s * num_seqs
        return host / r.steps_per_schedule if decode_only else host

    def extra_s(self, tokens: int, num_seqs: int, decode_only: bool) -> float:
        """The boundary crossings, less the host time the stages' times count pp - 1 times too often."""
        return self.activation_s(tokens) - (self.scale - 1) * self.host_s(num_seqs, decode_only)


def distinct_experts_per_rank(tokens_per_rank: int, num_experts: int, experts_per_token: int, ep: int) -> float:
    """Expected distinct experts among one rank's num_experts / ep when every rank's
    tokens_per_rank tokens (ep x tokens_per_rank in all) each pick experts_per_token of num_experts
    uniformly: the expert weights the rank reads in one MoE layer."""
    return num_experts / ep * (1.0 - (1.0 - experts_per_token / num_experts) ** (ep * tokens_per_rank))


def all_to_all_s(tokens: int, experts_per_token: int, hidden_size: int, ep: int, bytes_per_s: float,
                 latency_s: float, bytes_per_value: float = 2.0) -> float:
    """One dispatch (or one combine) of one MoE layer on one rank: each of its tokens' k hidden
    states goes to the rank holding that expert, (ep - 1) / ep of them to another rank, 16-bit."""
    nbytes = tokens * experts_per_token * hidden_size * bytes_per_value * (ep - 1) / ep
    return latency_s + nbytes / bytes_per_s


class ExpertParallelCost(ShapedCost):
    """One attention data-parallel rank of an expert-parallel replica, built on the rank's model
    (num_experts / ep experts per MoE layer): each step reads the experts its share of all ranks'
    tokens touches and pays a dispatch and a combine all-to-all per MoE layer. Every rank is priced
    as if all ranks ran a batch like its own (they step in lockstep, layer by layer)."""

    ep: int
    full_experts: int
    link_bytes_per_s: float
    link_latency_s: float

    def set_experts(self, ep: int, full_experts: int, link_bytes_per_s: float, link_latency_s: float) -> None:
        self.scale, self.ep, self.full_experts = 1, ep, full_experts
        self.link_bytes_per_s, self.link_latency_s = link_bytes_per_s, link_latency_s
        self._decode_cache = {}

    def experts_touched(self, num_tokens: int) -> float:
        return distinct_experts_per_rank(num_tokens, self.full_experts, self.experts_per_token, self.ep)

    def extra_s(self, tokens: int, num_seqs: int, decode_only: bool) -> float:
        one = all_to_all_s(tokens, self.experts_per_token, self.hidden_size, self.ep, self.link_bytes_per_s,
                           self.link_latency_s)
        return 2 * self.moe_layers * one


def pipeline_link(gpu_link_bytes_per_s: float | None, pcie_bytes_per_s: float, efficiency: float,
                  latency_s: float) -> tuple[float, float]:
    """(achieved bytes/s, latency) of the link between stages by default: the GPU's NVLink (or
    Infinity Fabric) if it has one, else PCIe, at the profile's link efficiency."""
    bandwidth = gpu_link_bytes_per_s if gpu_link_bytes_per_s is not None else pcie_bytes_per_s
    return bandwidth * efficiency, latency_s if math.isfinite(latency_s) else 0.0
