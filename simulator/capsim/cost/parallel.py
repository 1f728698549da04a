"""Pipeline parallelism: layers split into stages over GPUs, and the step time of a pipelined replica.

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


class PipelineCost(CostModel):
    """A CostModel of the largest stage (built on a model with that many layers) turned into the
    step time of one virtual engine of a pp-stage replica (see the module docstring)."""

    pp: int
    link_bytes_per_s: float
    link_latency_s: float

    def set_pipeline(self, pp: int, link_bytes_per_s: float, link_latency_s: float) -> None:
        """The stages and the link between consecutive ones (achieved bandwidth, one direction)."""
        self.pp, self.link_bytes_per_s, self.link_latency_s = pp, link_bytes_per_s, link_latency_s
        self._decode_cache = {}

    def activation_s(self, tokens: int) -> float:
        """Moving a step's hidden states over every stage boundary, one after another."""
        one = self.link_latency_s + activation_bytes(tokens, self.hidden_size, self.tp) / self.link_bytes_per_s
        return (self.pp - 1) * one

    def host_s(self, num_seqs: int, decode_only: bool) -> float:
        r = self.rates
        if r is None or self.mode != "realistic":
            return 0.0
        host = r.step_s + r.seq_s * num_seqs
        return host / r.steps_per_schedule if decode_only else host

    def step_cost(self, plan: StepPlan, decode_context_tokens: int = 0, decode_sliding_tokens: int = 0) -> StepCost:
        stage = CostModel.step_cost(self, plan, decode_context_tokens, decode_sliding_tokens)
        pp = self.pp
        tokens = plan.num_tokens + plan.num_decodes * (self.queries - 1)
        extra = self.activation_s(tokens) - (pp - 1) * self.host_s(plan.num_seqs, plan.num_tokens == plan.num_seqs)
        return StepCost(pp * stage.seconds + extra, pp * stage.compute_s, pp * stage.memory_s,
                        pp * stage.overhead_s + extra, stage.flops, stage.bytes, stage.bound)

    def decode_coefficients(self, n: int) -> tuple[float, ...]:
        """The stage's coefficients times pp, the host time once and the activation transfers
        added to both sides: a decode step stays max(c1*S + c2*Ss + c0, m1*S + m2*Ss + m0)."""
        cached = self._decode_cache.get(n)
        if cached is not None:
            return cached
        c = CostModel.decode_coefficients(self, n)
        self._decode_cache.pop(n, None)
        pp = self.pp
        extra = self.activation_s(n * self.queries) - (pp - 1) * self.host_s(n, True)
        coefs = (pp * c[0], pp * c[1], pp * c[2] + extra, pp * c[3], pp * c[4], pp * c[5] + extra) + tuple(c[6:])
        self._decode_cache[n] = coefs
        return coefs


def pipeline_link(gpu_link_bytes_per_s: float | None, pcie_bytes_per_s: float, efficiency: float,
                  latency_s: float) -> tuple[float, float]:
    """(achieved bytes/s, latency) of the link between stages by default: the GPU's NVLink (or
    Infinity Fabric) if it has one, else PCIe, at the profile's link efficiency."""
    bandwidth = gpu_link_bytes_per_s if gpu_link_bytes_per_s is not None else pcie_bytes_per_s
    return bandwidth * efficiency, latency_s if math.isfinite(latency_s) else 0.0
