"""Bounds that rule a candidate deployment out without simulating it (capsim plan's first stage).

Each bound is a necessary condition the simulation itself would also enforce, taken from the same
cost model and memory budget the simulation uses, so pruning never removes a candidate the
simulation would accept (tests/planning/test_plan_bounds.py simulates pruned ones to check):

- memory fit: the set-up resolves (weights, activations and the engine's reserve leave room for a
  KV cache) and the KV cache holds at least one max_model_len sequence (vLLM refuses to start
  otherwise);
- throughput: steps run one after another, and a step holding b decoding sequences that attend S
  context positions in all takes at least g(b) + m1 x S (the GEMMs, elementwise kernels and fixed
  costs of b tokens, plus reading their KV cache and scores; prefill tokens in the same step only
  add). Each request decodes o - 1 tokens attending at least (o-1)p + (o-1)(o-2)/2 positions, and
  b is at most max_num_seqs and the KV cache's room, so one replica's busy time per request is at
  least E[o-1] / max_b(b / g(b)) + m1 x E[(o-1)p + (o-1)(o-2)/2]. Prompts cannot be read faster
  than a step of the whole token budget with no attention. The fewest replicas that can carry the
  target rate is ceil(rate / (THROUGHPUT_SLACK x the lower of the two rates)); beyond the GPU
  budget the candidate is out;
- TPOT (and ITL): no token gap is shorter than one decode step at batch 1;
- TTFT: no request's first token comes before its prompt's prefill alone on the replica; a
  percentile over the steady window (at least `window_share` of the simulated requests) is then at
  least the prefill time of the prompt at that share of the percentile's rank;
- goodput thresholds: the share of requests that could meet every threshold alone, divided by
  `window_share`, must reach the required share.

Step times are non-decreasing in the number of tokens and sequences (every term of the roofline
is), so a rate over a grid of batch sizes is bounded above by the next grid point's tokens over
this point's time: the grid need not contain the best batch. Prefix caching and speculative
decoding make steps do less than the token counts say: with them the prefill or decode bounds are
not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from capsim.api import apply_overrides, resolve
from capsim.api.run import cost_model_for
from capsim.core.plan import StepPlan
from capsim.core.request import Request
from capsim.cost.parallel import ShapedCost
from capsim.cost.roofline import CostModel
from capsim.spec.shapes import load_link
from capsim.errors import CapsimError
from capsim.planning.capacity import PROBE_WINDOW_REQUESTS, probe_requests
from capsim.planning.plan_space import Candidate
from capsim.results.cost import price_for
from capsim.results.slo import Objectives
from capsim.sim.schedulers import CHUNKED_KINDS
from capsim.spec import config as C
from capsim.workload.schema import WorkloadConfig
from capsim.workload.streams import build_stream

# The saturation test lets completions lag arrivals by 5% and a window's mean lengths differ from
# the sample's: a replica is asked to carry up to this multiple of its bound before it is ruled out.
THROUGHPUT_SLACK = 1.25
GRID_RATIO = 1.1  # batch sizes and token counts tried: 1, 2, ... growing by 10% a point
PRUNE_REASONS = ("invalid", "memory", "throughput", "tpot", "ttft", "goodput")


@dataclass(frozen=True)
class Traffic:
    """The workload's request lengths as the simulation draws them: what the bounds are taken over."""

    prompt_tokens: np.ndarray  # one per simulated request (shared prefix included)
    output_tokens: np.ndarray  # aligned with prompt_tokens
    mean_decodes: float  # E[o - 1]: tokens each request gets from decode steps
    mean_decode_context: float  # E[(o-1)p + (o-1)(o-2)/2]: least context positions its decode steps attend
    window_share: float  # least share of the simulated requests inside the steady window
    rate_per_s: float | None  # the target request rate (None: closed-loop users)
    prefill_exact: bool  # False with prefix caching (cached prompt tokens are not computed)
    decode_exact: bool  # False with speculative decoding or parallel samples

    @property
    def mean_prompt_tokens(self) -> float:
        return float(self.prompt_tokens.mean())

    @property
    def mean_output_tokens(self) -> float:
        return float(self.output_tokens.mean())


def traffic(w: WorkloadConfig, over: str, x: float, rate_per_s: float | None) -> Traffic:
    """The lengths of the requests a probe at load x simulates (same seed, same count), drawn from
    an open-loop copy of the workload so closed-loop users' lengths come out the same way."""
    n = probe_requests(over, x)
    data = w.model_dump(exclude_unset=True) | {"requests": n, "arrivals": {"kind": "poisson", "rate_per_s": 1.0}}
    data.pop("duration_s", None)
    stream = build_stream(C.validate(WorkloadConfig, data, "plan"))
    samples = max([w.samples] + [c.samples or 0 for c in w.classes or []])
    p, o = np.asarray(stream.prompt_tokens, np.float64), np.asarray(stream.output_tokens, np.float64)
    decodes = np.maximum(o - 1, 0)
    context = decodes * p + decodes * np.maximum(decodes - 1, 0) / 2
    return Traffic(np.asarray(stream.prompt_tokens), np.asarray(stream.output_tokens), float(decodes.mean()),
                   float(context.mean()), PROBE_WINDOW_REQUESTS / n, rate_per_s, not w.prefix_caching,
                   w.speculative is None and samples == 1)


@dataclass(frozen=True)
class Bounds:
    """What the bounds say about one candidate."""

    candidate: Candidate
    pruned_by: str | None  # one of PRUNE_REASONS, or None when it goes on to be simulated
    reason: str  # the binding bound as a sentence ("" when it survives)
    kv_tokens: int | None  # KV-cache capacity per replica, tokens (None: the set-up does not resolve)
    max_rate_per_replica: float | None  # upper bound on requests/s one replica carries (None: not bounded)
    min_replicas: int  # the fewest replicas the throughput bound allows
    max_replicas: int  # the most replicas the GPU budget allows
    ttft_floor_ms: float | None  # the TTFT percentile bound (None: no TTFT percentile limit)
    tpot_floor_ms: float | None  # one decode step at batch 1
    usd_per_gpu_hour: float | None  # the price used (None: unknown)

    def min_usd_per_hour(self) -> float | None:
        if self.usd_per_gpu_hour is None:
            return None
        return self.min_replicas * self.candidate.gpus_per_replica * self.usd_per_gpu_hour


class BoundModel:
    """Prices the bound steps of one candidate with the simulation's own cost model: for pp > 1 one
    virtual engine's (capsim.cost.parallel.PipelineCost), for ep > 1 one rank's (ExpertParallelCost),
    whose steps are `scale` x the stage's or rank's own plus extra_s."""

    def __init__(self, cost: CostModel, budget_tokens: int, chunked: bool, memo: dict) -> None:
        self.cost, self.budget_tokens, self.chunked = cost, budget_tokens, chunked
        self.memo = memo  # best rates already found for this cost model: (kind, top) -> rate
        self.shaped = isinstance(cost, ShapedCost)
        self.scale = cost.scale if isinstance(cost, ShapedCost) else 1

    def best_rate(self, kind: str, top: int) -> float:
        """best_rate over grid(top) of decode floors ("decode") or prefill floors ("prefill"), memoised:
        candidates differing only in max_num_seqs or the token budget share one cost model."""
        rate = self.memo.get((kind, top))
        if rate is None:
            seconds = self.decode_floor_s if kind == "decode" else self.prefill_floor_s
            rate = self.memo[(kind, top)] = best_rate(grid(top), seconds)
        return rate

    def decode_step_s(self, batch: int) -> float:
        """A decode-only step of `batch` sequences at the least context (one token each)."""
        return float(self.cost.decode_seconds(batch, batch, 0))

    def floor_s(self, tokens: int, decode_only: tuple[bool, ...]) -> float:
        """A step of `tokens` tokens of one sequence without attention or logits: scale x (the GEMMs,
        elementwise kernels and fixed costs) + extra_s, at the least over the decode_only flags given.
        scale x fixed + extra is non-decreasing in the sequences (a pipeline's extra takes back the
        host time pp - 1 stages count, never more), so one sequence is the least."""
        c, k = self.cost, self.scale
        if c.mode == "unit":
            body, fixed = c.unit_step_s, dict.fromkeys(decode_only, 0.0)
        else:
            gc, gm, _, _ = c.gemm_part(tokens, 0, 1)
            body = c.gemm_seconds(gc, gm) + c.elementwise_part(tokens)[0]
            fixed = {d: sum(c.fixed_seconds(tokens, 1, decode_only=d)) for d in decode_only}
        extra = (lambda d: c.extra_s(tokens, 1, d)) if isinstance(c, ShapedCost) else (lambda d: 0.0)
        return k * body + min(k * fixed[d] + extra(d) for d in decode_only)

    def decode_floor_s(self, tokens: int) -> float:
        """g(b): a step of `tokens` decode tokens without their attention: the GEMMs (no logits),
        elementwise kernels and the lesser of the decode-only and mixed fixed costs, for one sequence."""
        return self.floor_s(tokens, (True, False))

    def context_s(self) -> float:
        """m1: seconds of memory traffic per context position a decoding sequence attends (its KV
        cache and scores), the same coefficient decode and mixed steps are priced with."""
        return float(self.cost.decode_coefficients(1)[3])

    def prefill_floor_s(self, tokens: int) -> float:
        """A step computing `tokens` prompt tokens with no attention, no logits and one sequence."""
        return self.floor_s(tokens, (False,))

    def prefill_alone_s(self, prompt_tokens: int) -> float:
        """One prompt prefilled alone on the replica: its chunks of the token budget (one step
        without chunked prefill), each priced as the simulation prices it."""
        done, total = 0, 0.0
        while done < prompt_tokens:
            n = min(self.budget_tokens, prompt_tokens - done) if self.chunked else prompt_tokens
            req = Request(0, 0.0, prompt_tokens, 1, computed_tokens=done)
            total += self.cost.step_cost(StepPlan([req], [n])).seconds
            done += n
        return total


def grid(top: int) -> list[int]:
    """1, 2, ... up to `top` (included), each point at most GRID_RATIO times the one before."""
    points, b = [], 1
    while b < top:
        points.append(b)
        b = max(b + 1, int(b * GRID_RATIO))
    return points + [top]


def best_rate(points: list[int], seconds) -> float:
    """An upper bound on max over n <= points[-1] of n / seconds(n), for non-decreasing seconds."""
    times = [seconds(n) for n in points]
    ends = points[1:] + [points[-1]]
    return max(hi / t for hi, t in zip(ends, times))


def candidate_bounds(w: WorkloadConfig, candidate: Candidate, demand: Traffic, objectives: Objectives,
                     budget_gpus: int, price, cost_models: dict) -> Bounds:
    """Every bound for one candidate; the first that rules it out is `pruned_by`."""
    base = dict(candidate=candidate, kv_tokens=None, max_rate_per_replica=None, min_replicas=1,
                max_replicas=budget_gpus // candidate.gpus_per_replica, ttft_floor_ms=None, tpot_floor_ms=None,
                usd_per_gpu_hour=None)
    try:
        setup = resolve(apply_overrides(w, "plan", **candidate.overrides()), f"candidate {candidate.label()}")
    except CapsimError as exc:
        kind = "memory" if "memory" in str(exc) else "invalid"
        return Bounds(pruned_by=kind, reason=str(exc), **base)
    base["usd_per_gpu_hour"] = price_for(setup.hardware.name, setup.hardware.price_per_hour_usd, price)[0]
    mem = setup.memory
    base["kv_tokens"] = mem.kv_tokens
    if mem.kv_tokens < setup.max_model_len:
        return Bounds(pruned_by="memory", reason=f"its KV cache holds {mem.kv_tokens:,} tokens, less than one "
                      f"max_model_len sequence of {setup.max_model_len:,} (the engine would not start)", **base)
    model = _bound_model(setup, cost_models)
    checks = (_throughput, _tpot, _ttft, _goodput)
    for check in checks:
        verdict = check(setup, model, demand, objectives, base)
        if verdict is not None:
            return Bounds(pruned_by=verdict[0], reason=verdict[1], **base)
    return Bounds(pruned_by=None, reason="", **base)


def _bound_model(setup, cost_models: dict) -> BoundModel:
    """The candidate's step pricing, built as the simulation builds it (capsim.api.run.cost_model_for)
    and shared by candidates that differ only in batch limits."""
    w = setup.workload
    key = (setup.model.name, setup.hardware.name, setup.weights.name, setup.kv_cache.name, w.mode,
           setup.engine.name if setup.engine else None, w.endpoint, w.tp, w.pp, w.ep, str(w.pp_link), str(w.ep_link))
    if key not in cost_models:
        cost_models[key] = (cost_model_for(setup, None), {})
    cost, memo = cost_models[key]
    return BoundModel(cost, setup.max_num_batched_tokens, w.scheduler.kind in CHUNKED_KINDS, memo)


def _throughput(setup, model: BoundModel, demand: Traffic, objectives, base: dict):
    """A replica runs pp x ep engines (virtual engines or ranks), each bounded as one replica is
    (a virtual engine holds 1/pp of the KV blocks). A disaggregated unit carries at most the lesser
    of its prefill pool's prompt rate and its decode pool's decode rate."""
    if demand.rate_per_s is None:
        return None
    c: Candidate = base["candidate"]
    mem, w = setup.memory, setup.workload
    engines = w.pp * w.ep
    disagg = c.shape == "disaggregated"
    rates = []
    if demand.decode_exact and demand.mean_decodes > 0:
        blocks = mem.num_blocks // w.pp
        batch = max(1, min(w.scheduler.max_num_seqs, blocks // (1 + mem.seq_units)))
        busy_s = demand.mean_decodes / model.best_rate("decode", batch) + model.context_s() * demand.mean_decode_context
        rates.append(engines * (c.decode if disagg else 1) / busy_s)
    if demand.prefill_exact:
        per_engine = model.best_rate("prefill", setup.max_num_batched_tokens) / demand.mean_prompt_tokens
        rates.append(engines * (c.prefill if disagg else 1) * per_engine)
    if not rates:
        return None
    base["max_rate_per_replica"] = top = min(rates)
    base["min_replicas"] = need = max(1, math.ceil(demand.rate_per_s / (THROUGHPUT_SLACK * top) - 1e-9))
    if need > base["max_replicas"]:
        unit = "units" if disagg else "replicas"
        return "throughput", (f"one {'unit' if disagg else 'replica'} carries at most {top:,.2f} requests/s of this "
                              f"traffic, so {demand.rate_per_s:g}/s needs {need} {unit} ({need * c.gpus_per_replica} "
                              "GPUs), over the GPU budget")
    return None


def _tpot(setup, model: BoundModel, demand: Traffic, objectives: Objectives, base: dict):
    if not demand.decode_exact:
        return None
    base["tpot_floor_ms"] = floor_ms = 1e3 * model.decode_step_s(1)
    for key, limit in objectives.limits_ms.items():
        if key.split("_")[1] in ("tpot", "itl") and floor_ms > limit:
            return "tpot", f"one decode step at batch 1 takes {floor_ms:,.1f} ms, over {key} <= {limit:,.0f} ms"
    return None


def _ttft(setup, model: BoundModel, demand: Traffic, objectives: Objectives, base: dict):
    if not demand.prefill_exact:
        return None
    prompts = np.sort(demand.prompt_tokens)
    for key, limit in objectives.limits_ms.items():
        stat, metric = key.split("_")[0], key.split("_")[1]
        if metric != "ttft" or stat == "mean":
            continue
        q = 50.0 if stat == "median" else float(stat[1:])
        rank = math.floor(demand.window_share * q / 100 * len(prompts)) - 1
        floor_ms = 1e3 * first_token_floor_s(setup, model, base["candidate"], int(prompts[max(rank, 0)]))
        base["ttft_floor_ms"] = max(base["ttft_floor_ms"] or 0.0, floor_ms)
        if floor_ms > limit:
            alone = "alone, its KV transfer and a first decode step" if base["candidate"].shape == "disaggregated" \
                else "alone"
            return "ttft", (f"{key} is at least {floor_ms:,.1f} ms (prefilling a {int(prompts[max(rank, 0)]):,}-token "
                            f"prompt {alone}), over {limit:,.0f} ms")
    return None


def first_token_floor_s(setup, model: BoundModel, candidate: Candidate, prompt_tokens: int) -> float:
    """The least time to a request's first token: its prefill alone; disaggregated, then its KV
    over the link (per-transfer time + prompt x one GPU's KV bytes per token / achieved bandwidth +
    latency; both pools share the instance shape, so the shard is this set-up's) and the decode
    side's first step (at least a one-token step with no attention), as capsim.api.pools runs it."""
    alone = model.prefill_alone_s(prompt_tokens)
    if candidate.shape != "disaggregated":
        return alone
    link = load_link(candidate.link)
    shard = setup.memory.bytes_per_block / setup.memory.block_size
    return alone + link.transfer_s(prompt_tokens * shard) + link.latency_s + model.decode_floor_s(1)


def _goodput(setup, model: BoundModel, demand: Traffic, objectives: Objectives, base: dict):
    """The share of requests that could meet every goodput threshold alone (TTFT: its prefill
    alone; TPOT: one batch-1 decode step, or a single output token), over the window's least share."""
    limits = objectives.goodput_ms
    if not limits:
        return None
    can = np.ones(len(demand.prompt_tokens), bool)
    if "ttft" in limits and demand.prefill_exact:
        can &= demand.prompt_tokens <= _longest_prompt_within(model, demand.prompt_tokens, limits["ttft"])
    if "tpot" in limits and demand.decode_exact and 1e3 * model.decode_step_s(1) > limits["tpot"]:
        can &= demand.output_tokens <= 1
    best_share = min(1.0, float(can.mean()) / demand.window_share)
    if best_share < objectives.goodput_share:
        return "goodput", (f"at most {100 * best_share:.1f}% of requests can meet the goodput thresholds even alone "
                           f"on the replica, under the {100 * objectives.goodput_share:g}% required")
    return None


def _longest_prompt_within(model: BoundModel, prompts: np.ndarray, limit_ms: float) -> int:
    """The longest of the prompts whose prefill alone takes at most limit_ms (0 when none does)."""
    lengths = np.unique(prompts)
    lo, hi = 0, len(lengths)  # lengths[:lo] fit; lengths[hi:] do not
    while lo < hi:
        mid = (lo + hi) // 2
        if 1e3 * model.prefill_alone_s(int(lengths[mid])) <= limit_ms:
            lo = mid + 1
        else:
            hi = mid
    return int(lengths[lo - 1]) if lo else 0
