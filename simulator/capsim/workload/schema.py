"""The workload file's schema (DESIGN §5): validated, frozen data; unknown keys are errors.

Read with capsim.spec.config.load_yaml_as(WorkloadConfig, path); `capsim schema` prints it as JSON Schema.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from capsim.spec import limits as L
from capsim.spec.config import _UNION_TAGS, Frozen, ModelSpec
from capsim.spec.metric_names import summary_key
from capsim.spec.shapes import Link, Serving, shape_problems
from capsim.workload.length_dists import Lengths

TimeS = Annotated[float, Field(ge=0, le=L.MAX_TIME_S)]
Rate = Annotated[float, Field(ge=L.MIN_RATE_PER_S, le=L.MAX_RATE_PER_S)]


class Poisson(Frozen):
    kind: Literal["poisson"]
    rate_per_s: Rate


class Gamma(Frozen):
    """Gamma inter-arrival times, vLLM's --burstiness: shape = burstiness; < 1 is burstier than Poisson."""

    kind: Literal["gamma"]
    rate_per_s: Rate
    burstiness: float = Field(ge=1e-3, le=1e3)


class Constant(Frozen):
    kind: Literal["constant"]
    rate_per_s: Rate


class AllAtOnce(Frozen):
    kind: Literal["all_at_once"]
    at_s: TimeS = 0.0


class ClosedLoop(Frozen):
    """`users` each send a request, wait for its last token, think, and send the next."""

    kind: Literal["closed_loop"]
    users: int = Field(gt=0, le=1_000_000)
    think_time_s: TimeS = 0.0
    think_time_dist: Literal["fixed", "exponential"] = "exponential"
    ramp_s: float | None = Field(
        None, ge=0, description="users start evenly staggered over [0, ramp_s): user u sends its first request "
        "at u x ramp_s / users, as a load generator ramps up; default: one mean think time (so 0 without think "
        "time); 0 starts every user at once"
    )
    turns_per_session: int = Field(
        1, gt=0, le=10_000, description="multi-turn chats: each turn resends the session's history (earlier prompts and "
        "answers) plus a new message drawn from prompt_tokens; after this many turns the user starts a new session"
    )


class Trace(Frozen):
    """Replay a CSV or JSONL file with columns arrival_s, prompt_tokens, output_tokens. Times are
    taken from the first arrival (a trace in Unix-epoch seconds starts at 0; the offset is
    reported as trace_time_offset_s)."""

    kind: Literal["trace"]
    file: str = Field(min_length=1, description="path, relative to the workload file")
    time_scale: float = Field(1.0, ge=1e-6, le=1e6, description="multiply trace times by this (0.5 = twice as fast)")


Arrivals = Annotated[Poisson | Gamma | Constant | AllAtOnce | ClosedLoop | Trace, Field(discriminator="kind")]
_UNION_TAGS.update({"fixed", "uniform", "normal", "lognormal", "empirical", "sequence", "trace", "poisson", "gamma",
                    "constant", "all_at_once", "closed_loop"})


class TotalSplit(Frozen):
    """Draw a request's total length, then split it: prompt = round(total x prompt_share), kept
    within [1, total - 1] so that prompt and output each get at least one token. Vidur's length
    generators work this way (prefill:decode ratio 3 is prompt_share 0.75). A total needs at least
    2 tokens: continuous distributions are clipped to at least 2, given values must be >= 2."""

    total_tokens: Lengths
    prompt_share: float = Field(gt=0, lt=1)

    @model_validator(mode="after")
    def _splittable(self) -> TotalSplit:
        t = self.total_tokens
        given = {"fixed": ["value"], "uniform": ["min"], "empirical": ["values"], "sequence": ["values"]}.get(
            t.dist, ["min"] if "min" in t.model_fields_set else [])
        for name in given:
            value = getattr(t, name)
            if (min(value) if isinstance(value, list) else value) < 2:
                raise ValueError(f"total_tokens.{name}: a total of 1 token cannot be split into a prompt and an "
                                 "output token; totals must be at least 2")
        return self


class RequestClass(Frozen):
    """One kind of request in a mixed workload (e.g. short chats beside long agent sessions)."""

    name: str = Field(min_length=1)
    weight: float = Field(gt=0, le=L.MAX_WEIGHT, description="share of requests (normalised over the classes)")
    prompt_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    split: TotalSplit | None = None
    shared_prefix_tokens: int | None = Field(None, ge=0, le=L.MAX_TOKENS, description="default: the workload's")
    samples: int | None = Field(None, gt=0, le=1024, description="default: the workload's")

    @model_validator(mode="after")
    def _lengths(self) -> RequestClass:
        _check_lengths(self, f"classes.{self.name}: ")
        return self


def _check_lengths(obj, where: str) -> None:
    separate = obj.prompt_tokens is not None or obj.output_tokens is not None
    if obj.split is not None and separate:
        raise ValueError(f"{where}give either 'split' or 'prompt_tokens'/'output_tokens', not both")
    if obj.split is None and (obj.prompt_tokens is None or obj.output_tokens is None):
        raise ValueError(f"{where}give 'prompt_tokens' and 'output_tokens' (or 'split')")


class SchedulerConfig(Frozen):
    kind: Literal["static", "continuous", "chunked", "prefill_first"] = "chunked"
    max_num_seqs: int = Field(256, gt=0, le=10_000_000)
    max_num_batched_tokens: int | None = Field(
        None, gt=0, le=L.MAX_TOKENS,
        description="per-step token budget; default 2048 for chunked and prefill_first, max(max_model_len, 2048) otherwise"
    )
    block_size: int = Field(16, gt=0, le=L.MAX_BLOCK_SIZE, description="tokens per KV block (vLLM: 16; "
                            f"at most {L.MAX_BLOCK_SIZE})")
    preemption: Literal["recompute", "swap"] = "recompute"
    watermark: float = Field(0.01, ge=0, lt=1, description="share of blocks kept free when admitting (vLLM)")


class Speculative(Frozen):
    """Speculative decoding: a draft proposes `draft_tokens` per step, each accepted with
    probability `acceptance_rate`; the target verifies them all in one pass."""

    draft_tokens: int = Field(gt=0, le=16)
    acceptance_rate: float = Field(gt=0, le=1)
    draft_model: str | None = Field(
        None, description="a catalogue model run as the draft (its weights, KV and passes are priced); "
        "none: a draft that costs nothing measurable (n-gram lookup, or heads folded into the target)"
    )


class GoodputSLO(Frozen):
    """Per-request thresholds, vLLM's `--goodput ttft:MS tpot:MS e2el:MS`: a request is good when it
    completed and met every one; the objective holds when good requests are at least `min_share`
    of the requests that arrived in the measurement window."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2el_ms: float | None = Field(None, gt=0)
    min_share: float = Field(0.9, gt=0, le=1, description="share of requests that must be good (0.9 = 90%)")

    @model_validator(mode="after")
    def _some(self) -> GoodputSLO:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None:
            raise ValueError("give at least one of ttft_ms, tpot_ms, e2el_ms")
        return self


_LEGACY_SLO = (
    "the slo block names its kind: `slo: {goodput: {ttft_ms: 1000, tpot_ms: 60}}` for per-request thresholds "
    "(vLLM's --goodput; good requests must be at least min_share, default 0.9, of the requests), or "
    "`slo: {limits: {ttft_p99_ms: 1000, tpot_p99_ms: 60}}` for percentile limits"
)


class SLO(Frozen):
    """Service-level objectives, in two kinds named apart (capsim.results.slo): percentile limits on the
    reported statistics, and goodput thresholds per request."""

    limits: dict[str, float] | None = Field(
        None, description="percentile limits, METRIC_STAT_ms: LIMIT (ttft|tpot|itl|e2el x mean|median|pNN), "
        "e.g. {ttft_p99_ms: 2000, tpot_p99_ms: 50}")
    goodput: GoodputSLO | None = None

    @model_validator(mode="before")
    @classmethod
    def _named_kinds(cls, data):
        if isinstance(data, dict) and any(k in data for k in ("ttft_ms", "tpot_ms", "e2el_ms")):
            raise ValueError(_LEGACY_SLO)
        return data

    @model_validator(mode="after")
    def _check(self) -> SLO:
        for name, limit in (self.limits or {}).items():
            if summary_key(name) is None:
                raise ValueError(f"limits: {name!r} names no statistic; use METRIC_STAT_ms with METRIC one of ttft, "
                                 "tpot, itl, e2el and STAT one of mean, median, p50, p90, p95, p99, p99.9 "
                                 "(e.g. ttft_p99_ms)")
            if not limit > 0:
                raise ValueError(f"limits: {name} must be a positive number of milliseconds")
        if not self.limits and self.goodput is None:
            raise ValueError("give limits, goodput or both")
        return self


class Measure(Frozen):
    """The steady-state window the figures are measured over (DESIGN §8): the warm-up and the
    cool-down are left out, by request count or by time. Defaults: a tenth of the arrivals at
    each end, and with closed-loop users at least each user's first request (the first wave) and
    their last (the drain)."""

    warmup_requests: int | None = Field(None, ge=0, description="leave out the first N arrivals")
    warmup_s: float | None = Field(None, ge=0, description="or: leave out arrivals before this time")
    cooldown_requests: int | None = Field(None, ge=0, description="leave out the last N arrivals")
    cooldown_s: float | None = Field(None, ge=0, description="or: leave out arrivals in the last N seconds")
    whole_run: bool = Field(False, description="measure over every request instead (no window)")

    @model_validator(mode="after")
    def _one_each(self) -> Measure:
        if self.warmup_requests is not None and self.warmup_s is not None:
            raise ValueError("give warmup_requests or warmup_s, not both")
        if self.cooldown_requests is not None and self.cooldown_s is not None:
            raise ValueError("give cooldown_requests or cooldown_s, not both")
        return self


class WorkloadConfig(Frozen):
    name: str = ""
    description: str = ""
    model: str | ModelSpec
    weights: str = "bf16"
    kv_cache: str = "fp16"
    gpu: str | None = Field(None, description="default GPU; --gpu overrides")
    engine: str | None = Field(
        None, description="serving-engine profile (vllm, sglang, trt-llm, llama.cpp; `capsim engines`): its host "
        "overheads and kernel class, and its scheduling and memory defaults where this file leaves them unset; "
        "none: the bare GPU roofline")
    tp: int = Field(1, gt=0, le=1024, description="tensor-parallel GPUs per replica (weights and KV heads split, "
                    "two all-reduces per layer)")
    pp: int = Field(1, gt=0, le=256, description="pipeline stages per replica (layers split over pp groups of tp "
                    "GPUs, pp micro-batches in flight; docs/shapes.md)")
    pp_link: str | Link | None = Field(None, description="link between pipeline stages: a name from "
                                       "spec/data/links.yaml or inline (default: the GPU's NVLink, else PCIe)")
    ep: int = Field(1, gt=0, le=1024, description="expert-parallel GPUs per replica of a MoE model (attention "
                    "data-parallel, experts spread; docs/shapes.md)")
    ep_link: str | Link | None = Field(None, description="link of the experts' all-to-all: a name from "
                                       "spec/data/links.yaml or inline (default: the GPU's NVLink, else PCIe)")
    mode: Literal["realistic", "document", "unit"] = "realistic"
    unit_step_s: float = Field(1.0, ge=1e-9, le=3600, description="step time in unit mode")
    scheduler: SchedulerConfig = SchedulerConfig()
    allocator: Literal["paged", "contiguous"] | None = Field(None, description="default: contiguous for static, else paged")
    reserve: Literal["max_model_len", "request"] = "max_model_len"
    max_model_len: int | None = Field(None, gt=0, le=L.MAX_TOKENS, description="default (and at most): the model's "
                                      "context length")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    num_gpu_blocks: int | None = Field(None, gt=0, le=L.MAX_TOKENS, description="override the computed KV capacity")
    arrivals: Arrivals
    prompt_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    split: TotalSplit | None = Field(None, description="instead of prompt/output_tokens: a total length, split")
    classes: list[RequestClass] | None = Field(None, min_length=1, description="instead of the above: a mix of kinds")
    requests: int | None = Field(None, gt=0, description="how many requests arrive (with duration_s: at most this many)")
    duration_s: float | None = Field(None, gt=0, le=L.MAX_TIME_S, description="or: send requests for this long "
                                     "(with requests: whichever ends first)")
    horizon_s: float | None = Field(None, gt=0, le=L.MAX_TIME_S, description="stop the clock here; the rest is 'unfinished'")
    slo: SLO | None = None
    measure: Measure = Measure()
    seed: int = Field(0, ge=0, lt=2**63)
    shared_prefix_tokens: int = Field(
        0, ge=0, le=L.MAX_TOKENS, description="a system prompt of this many tokens, identical for every request (of a class), "
        "added in front of the drawn prompt"
    )
    samples: int = Field(1, gt=0, le=1024, description="parallel sampling (n): answers per request, sharing its prompt")
    prefix_caching: bool = Field(False, description="reuse cached KV blocks of identical prefixes (vLLM APC)")
    prompt_set: int | None = Field(None, gt=0, le=1_000_000, description="the client sends the same this-many "
                                   "prompts in turn (request i re-sends prompt i mod N with its lengths), as benchmark "
                                   "clients that replay a fixed set do: with prefix_caching a prompt sent before finds "
                                   "its blocks cached")
    prompt_set_cached: bool = Field(False, description="the prompt set was sent before this run: its prompts start in "
                                    "the prefix cache, oldest evicted first (needs prompt_set and prefix_caching)")
    replicas: int = Field(1, gt=0, le=4096, description="copies of the server behind a router")
    router: Literal["round_robin", "least_outstanding", "least_kv"] = "round_robin"
    endpoint: Literal["chat", "completions"] = Field(
        "chat", description="the API the clients call: chat (/v1/chat/completions, the conversation is templated "
        "first) or completions (/v1/completions); only an engine with a chat-only front-end time tells them apart")
    swap_space_gib: float = Field(4.0, ge=0, le=2**20, description="host memory per replica for swapped-out KV (vLLM --swap-space)")
    speculative: Speculative | None = None
    serving: Serving | None = Field(None, description="deployment shape: disaggregated prefill/decode pools (docs/shapes.md)")

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        """Checks across fields; every problem found is reported, one line each."""
        problems = _workload_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self


def _workload_problems(w: WorkloadConfig) -> list[str]:
    problems = shape_problems(w)
    trace = w.arrivals.kind == "trace"
    if not trace and w.requests is None and w.duration_s is None:
        problems.append("give 'requests' (how many) or 'duration_s' (for how long)")
    if w.classes is None:
        try:
            _check_lengths(w, "")
        except ValueError as exc:
            problems.append(str(exc))
    elif w.prompt_tokens is not None or w.output_tokens is not None or w.split is not None:
        problems.append("give either 'prompt_tokens'/'output_tokens' (or 'split') or 'classes', not both")
    if w.classes is not None and len({c.name for c in w.classes}) != len(w.classes):
        problems.append("classes: names must be unique")
    lengths = [(c.name, c.prompt_tokens, c.output_tokens) for c in w.classes or []]
    lengths += [(c.name, c.split.total_tokens, None) for c in w.classes or [] if c.split]
    lengths.append(("", w.prompt_tokens, w.output_tokens))
    lengths.append(("", w.split.total_tokens if w.split else None, None))
    from_trace = [n for n, p, o in lengths if (p is not None and p.dist == "trace") or (o is not None and o.dist == "trace")]
    if from_trace and not trace:
        problems.append("length dist 'trace' needs arrivals.kind 'trace'")
    if w.arrivals.kind == "all_at_once" and (w.requests is None or w.duration_s is not None):
        problems.append("arrivals 'all_at_once' sends 'requests' requests at once: give 'requests', not duration_s")
    if w.prompt_set is not None:
        if w.classes is not None or trace or w.split is not None:
            problems.append("prompt_set replays prompts drawn from prompt_tokens/output_tokens: not with classes, "
                            "split or a trace")
        if w.arrivals.kind == "closed_loop" and w.arrivals.turns_per_session > 1:
            problems.append("prompt_set replays single-turn prompts: not with turns_per_session above 1")
    if w.prompt_set_cached and (w.prompt_set is None or not w.prefix_caching):
        problems.append("prompt_set_cached: the set's prompts start in the prefix cache, so it needs 'prompt_set' and "
                        "'prefix_caching: true'")
    return problems
