"""How one validation point becomes one simulation, and which number of the run it is compared
with. Every assumption for a field a source leaves unstated lives here, named and explained
(validation/README.md, "How points map onto simulations"); nothing here depends on the
measured value.
"""

from __future__ import annotations

import math
from typing import get_args

from capsim.errors import CapsimError
from capsim.spec.config import validate
from capsim.spec.serving import load_engine
from capsim.validation.lengths import SHAREGPT_MAX_OUTPUT, SHAREGPT_MAX_PROMPT, lengths_for
from capsim.validation.skip import Skip
from capsim.workload.schema import WorkloadConfig


# Conditions stated in each source's notes (not per-point fits): {file: workload fields}.
SOURCE_CONDITIONS = {
    # "usually with --kv_cache_free_gpu_mem_fraction 0.95"
    "trtllm-perf-overview-v0.17.yaml": {"gpu_memory_utilization": 0.95},
    "trtllm-perf-overview-v1.0.yaml": {"gpu_memory_utilization": 0.95},
    # results JSONs are named ..._len2000: --max-model-len 2000
    "lambda-vllm-benchmark.yaml": {"max_model_len": 2000},
}

# Sources whose figures are a steady state, not every request the client sent: NIM's page, whose
# closed-loop figures cannot include the opening wave (every user's first prompt at once; the file's
# notes give the arithmetic). capsim measures these over its default steady window (workload
# `measure`, DESIGN §8).
STEADY_STATE_SOURCES = {"nim-benchmarking-llama33-70b-h100.yaml"}

# The skip reason of a point whose measured run includes the engine's start-up (`startup_transient`);
# scripts/docs_fidelity.py counts these beside the TTFT figure.
STARTUP_SKIP = "the measured run includes the engine's start-up"


def engine_for(point: dict) -> str:
    """The engine profile of a point's engine and version (capsim/data/engines.yaml)."""
    engine, version = str(point["engine"]), str(point.get("engine_version", "")).removeprefix("v")
    if engine == "llama.cpp":
        # engine profiles by build era: the point's build or date picks one
        if any(tag in version for tag in ("b1671", "Dec 2023", "2024-01", "January 2024", "#4766")):
            return "llama.cpp@2024-01"
        if any(tag in version for tag in ("(2834)", "(2837)", "(2843)", "May 2024")):
            return "llama.cpp@2024-05"
        if any(tag in version for tag in ("2025-08", "2025-09", "2025-10")):
            return "llama.cpp@2025-08"
        if "2025-1" in version or "2026" in version:
            return "llama.cpp"  # the December 2025 profile
        raise Skip(f"no llama.cpp profile for the build era of {version!r} (eras: 2024-01, 2024-05, 2025-08, 2025-12)")
    if engine == "vllm":
        if version.startswith("0.5"):
            return "vllm@0.5"
        if version.startswith("0.6") and "num-scheduler-steps 10" in version:
            return "vllm@0.6-ms10"  # the SGLang benchmark ran vLLM 0.6.0 with --num-scheduler-steps 10
        if "num_scheduler_steps" in version:
            raise Skip(f"no engine profile for vLLM {version.split(' (')[0]} run as the V0 engine with multi-step "
                       "scheduling (profiles: 0.5, 0.6 multi-step, V1 0.9 and later)")
        if version.startswith("0.11.0"):
            return "vllm@0.11.0"  # its chat endpoint parses the chat template for every request
        if _minor_release(version) >= 9:
            return "vllm"  # V1 engine (default since 0.8): the newest profile (it describes 0.10-0.11)
        raise Skip(f"no engine profile for vLLM {version} (profiles: 0.5, 0.6 multi-step, V1 0.9 and later)")
    if engine == "sglang":
        # the overlap scheduler is on from 0.4 (December 2024 on); DataCrunch's unstated version is
        # its December 2024 Docker image
        if version.startswith("0.3"):
            return "sglang@0.3"
        if version.startswith(("0.4", "0.5")) or "December 2024" in version or "2025" in version:
            return "sglang@0.4"
        raise Skip(f"no engine profile for SGLang {version!r} (profiles: 0.3, 0.4-0.5)")
    if engine in ("trt-llm", "nim"):
        # NIM serves TensorRT-LLM engines where NVIDIA built one for the GPU (its optimisation page:
        # 'The NVIDIA TensorRT-LLM accelerated NIM backend provides support for optimized versions of
        # common models across a number of NVIDIA GPUs'); NIM points name such a profile (GPU, precision, TP)
        if engine == "trt-llm" and (version.startswith(("0.11", "0.12", "0.13", "0.14")) or "MLPerf v4.1" in version):
            # the 2024 releases; MLPerf v4.1's harness is a mid-2024 build (round published 2024-08-28)
            return "trt-llm@0.13"
        return "trt-llm"
    raise Skip(f"no engine profile for {engine!r}")


def _minor_release(version: str) -> int:
    """9 for "0.9.2", 20 for "0.20.1+transformers-5.8.1"; -1 when the version is not 0.N."""
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[0] == "0" and parts[1].isdigit() else -1


def kv_format_for(point: dict) -> str:
    """The point's KV format; unstated: TensorRT-LLM quantised builds use FP8 KV (the v0.17 page:
    'If you specify FP8 quantization, the KV cache will automatically be set to FP8 as well'; NIM's
    FP8 profiles are TensorRT-LLM builds, see engine_for), every other engine the model dtype
    (vLLM/SGLang kv_cache_dtype 'auto' = bf16)."""
    kv = str(point.get("kv_cache", "unstated"))
    if kv != "unstated":
        return kv
    weights = str(point["weights"])
    if point["engine"] in ("trt-llm", "nim") and weights in ("fp8_e4m3", "nvfp4"):
        return "fp8_e4m3"
    return weights if weights in ("fp16", "bf16") else "bf16"


def _replay(point: dict) -> dict:
    """A client that re-sends a fixed prompt set (`prompt_replay`: the set's size, the requests its
    runs sent, whether an earlier pass left the set cached) to an engine with prefix caching on."""
    replay = point.get("prompt_replay")
    if not replay:
        return {}
    return {"prefix_caching": True, "prompt_set": int(replay["set"]), "requests": int(replay["requests"]),
            "prompt_set_cached": bool(replay.get("cached_at_start", False))}


def _load(point: dict) -> dict:
    """Arrivals and request count of the point's group."""
    group, rate = point["group"], point.get("request_rate_per_s")
    n = point.get("num_requests") or point.get("concurrency") or point.get("batch_size") or 1
    if group in ("decode", "prefill"):
        return {"arrivals": {"kind": "all_at_once"}, "requests": 1}
    if rate is None and point.get("concurrency"):
        # closed loop (AIPerf / genai-perf --concurrency N): N requests in flight, no think time; an
        # unstated request count is taken as 10 per user (at least 100), enough for steady-state means
        users = int(point["concurrency"])
        count = point.get("num_requests") or max(100, 10 * users)
        return {"arrivals": {"kind": "closed_loop", "users": users, "think_time_s": 0.0}, "requests": int(count)}
    if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)):
        # all at once: max throughput, Lambda's request_rate inf, AMD's static batch
        return {"arrivals": {"kind": "all_at_once"}, "requests": int(n)}
    # open loop: Poisson (vLLM's and SGLang's clients; the TensorRT-LLM page does not say)
    return {"arrivals": {"kind": "poisson", "rate_per_s": float(rate)}, "requests": int(n)}


def workload_for(point: dict) -> WorkloadConfig:
    """The simulation of one point (raises Skip when it cannot be represented)."""
    disaggregated = _disaggregated(point) if point["group"] == "disaggregated" else {}
    if point["group"] == "concurrency" and point["metric"] == "output_tokens_per_s" and (point.get("num_requests") or 0) < 50 \
            and str(point.get("length_distribution", "")).startswith("sharegpt"):
        raise Skip("the throughput of a handful of ShareGPT requests is set by the longest answer; "
                   "the point gives only mean lengths")
    data = {"name": point["id"], "model": point["model"], "gpu": point["gpu"],
            "engine": disaggregated.pop("engine", None) or engine_for(point),
            "tp": int(point.get("tp") or 1), "weights": point["weights"], "kv_cache": kv_format_for(point), "seed": 0}
    if point["weights"] == "unstated":
        raise Skip("weight format not stated")
    if point.get("repeated_prompts"):
        # every request after the first pass finds its whole prompt in the prefix cache; capsim's
        # workloads draw new prompts and cannot replay a fixed set against a warm cache
        raise Skip(f"the client re-sent its prompts ({point['repeated_prompts']}); capsim cannot replay a fixed "
                   "prompt set against a warm prefix cache")
    if point.get("startup_transient"):
        # the engine's one-off start-up cost (kernel compilation, first allocations) fell inside the
        # measured window; capsim simulates an engine that is already warm
        raise Skip(f"{STARTUP_SKIP} ({point['startup_transient']}); capsim simulates a warm engine")
    data.update(lengths_for(point))
    data.update(_load(point))
    data.update(_replay(point))
    data.update(SOURCE_CONDITIONS.get(point["_file"], {}))
    data.update(_point_conditions(point))
    data.update(_stated_system(point))
    data.update(disaggregated)
    if point["group"] == "decode":
        # llama-bench tgN / ./main eval: N tokens decoded after the prompt; one more output token
        # so that N decode steps follow the first token (prefill excluded, as llama-bench does)
        data["output_tokens"] = {"dist": "fixed", "value": int(point["output_tokens"]) + 1}
    if point["group"] == "prefill":
        data["output_tokens"] = {"dist": "fixed", "value": 1}
    total = (data["prompt_tokens"].get("value", data["prompt_tokens"].get("max", SHAREGPT_MAX_PROMPT))
             + data["output_tokens"].get("value", data["output_tokens"].get("max", SHAREGPT_MAX_OUTPUT)))
    # An engine that sizes its request limit from the context length (SGLang: max_num_seqs_from_pool)
    # keeps the model's own, as its servers ran without --context-length; the others get a short one.
    if load_engine(data["engine"]).max_num_seqs_from_pool is None:
        data.setdefault("max_model_len", max(2048, int(total) + 16))
    # The published figures are a benchmark client's, over every request it sent (vLLM's and
    # SGLang's bench_serving, TensorRT-LLM's benchmark, llama-bench, MLPerf's LoadGen): the whole
    # run, with no warm-up or cool-down left out; except where the client reports a steady state.
    data["measure"] = {} if point.get("_file") in STEADY_STATE_SOURCES else {"whole_run": True}
    if point.get("length_distribution") == "mlperf-openorca":
        data.update(_mlperf_run(point, data))
    return validate(WorkloadConfig, data, f"validation point {point['id']}")


def _disaggregated(point: dict) -> dict:
    """Workload fields of a disaggregated point: its pools, link and the server flags its source
    states. Mooncake's vLLM 0.6.2 runs (PR 8498, one prefill and one decode A10 on two nodes): the
    V0 engine with single-step scheduling (no --num-scheduler-steps), mapped to the vllm@0.5 profile,
    the V0 single-step one (assumption: 0.6's separate API-server process makes its host time
    somewhat shorter); "--max-model-len 10000 --gpu-memory-utilization 0.95" as stated; the NICs'
    speed is not stated, so the RDMA rows take the rdma-100g link and the TCP rows tcp-25gbe
    (assumption: these catalogue links move the 57 kB per token of Qwen2.5-7B's KV in 2-20 ms per
    1,024-token prompt, small beside the TTFTs measured)."""
    if point["_file"] == "sglang-pd-disagg-deepseek-h100.yaml":
        raise Skip("each pool is measured alone with expert parallelism (EP 32 prefill, EP 72 decode) and DP "
                   "attention, which capsim does not simulate yet")
    if point["_file"] != "mooncake-vllm-disagg-a10.yaml":
        raise Skip("no mapping for this source's disaggregated points")
    link = "tcp-25gbe" if "-tcp-" in point["id"] else "rdma-100g"
    return {"engine": "vllm@0.5", "max_model_len": 10000, "gpu_memory_utilization": 0.95,
            "serving": {"disaggregated": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}, "link": link}}}


def _point_conditions(point: dict) -> dict:
    """Server flags a source states for some of its points."""
    out = {}
    if point["_file"] == "sglang-benchmark-vllm060.yaml":
        if point["engine"] == "vllm":
            out["max_model_len"] = 4096  # "--max_model_len 4096"
        else:  # "SGLang's mem_frac is 0.88 at TP 1 and 0.85 at TP 4" (0.88 for the offline 70B run)
            offline = point["group"] == "max_throughput"
            out["gpu_memory_utilization"] = 0.88 if point.get("tp", 1) == 1 or offline else 0.85
    return out


ROUTERS = get_args(WorkloadConfig.model_fields["router"].annotation)  # the workload's own choices


def _stated_system(point: dict) -> dict:
    """Copies of the model (`replicas`), how requests are spread over them (`router`) and server
    settings (`server_flags`) a point states."""
    out: dict = {}
    if point.get("replicas"):
        out["replicas"] = int(point["replicas"])
    if point.get("router") is not None:
        if point["router"] not in ROUTERS:
            raise Skip(f"router {point['router']!r} not understood (allowed: {', '.join(ROUTERS)})")
        out["router"] = point["router"]
    flags = dict(point.get("server_flags") or {})
    unknown = sorted(set(flags) - {*SCHEDULER_FLAGS, "gpu_memory_utilization", "max_model_len"})
    if unknown:
        raise Skip(f"server_flags {', '.join(unknown)} not understood (allowed: {', '.join(SCHEDULER_FLAGS)}, "
                   "gpu_memory_utilization, max_model_len)")
    if "gpu_memory_utilization" in flags:
        out["gpu_memory_utilization"] = float(flags["gpu_memory_utilization"])
    if "max_model_len" in flags:
        out["max_model_len"] = int(flags["max_model_len"])
    scheduler = {k: int(flags[k]) for k in SCHEDULER_FLAGS if k in flags}
    if scheduler:
        out["scheduler"] = scheduler
    return out


SCHEDULER_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "block_size")
# MLPerf runs last 10-40 minutes (tens to hundreds of thousands of samples); capsim simulates a
# shorter run of the same system. Offline: MLPERF_OFFLINE_WAVES times the largest batch per copy
# of the model, all at once, measured whole (the drain of the last wave is a small share of the
# run; on the DGX H100 point 4, 8 and 16 waves give throughputs within 0.6% of each other).
# Server / Interactive: MLPERF_SERVER_S seconds of Poisson arrivals at the achieved rate, measured
# over capsim's steady window, as the real run's warm-up is a negligible share of its figures
# (240 s and 480 s give mean TTFT and TPOT within 1% and p99 TTFT within 2% on that system).
MLPERF_OFFLINE_WAVES = 4
MLPERF_SERVER_S = 240.0


def _mlperf_run(point: dict, data: dict) -> dict:
    replicas = int(data.get("replicas", 1))
    rate = point.get("request_rate_per_s")
    if rate in (None, "inf"):
        batch = int(data.get("scheduler", {}).get("max_num_seqs", 1024))
        count = min(int(point.get("num_requests") or 10**9), MLPERF_OFFLINE_WAVES * batch * replicas)
        return {"requests": count}
    return {"requests": max(1000, int(float(rate) * MLPERF_SERVER_S)), "measure": {}}


# MLPerf Server and Interactive runs report, as their result, the Poisson rate the submitter scheduled
# with every latency constraint of the round met. A `slo_capacity` point compares that rate with the
# highest rate at which capsim's simulation of the same system meets the same limits (runner.slo_rate);
# each probe of that search is the point run at one rate, as its TTFT points are run.
SLO_LIMIT_KEYS = ("p99_ttft_ms", "p99_tpot_ms")


def slo_limits_ms(point: dict) -> dict[str, float]:
    """A slo_capacity point's latency limits: run-summary key -> limit in ms."""
    slo = point.get("slo_ms")
    if not isinstance(slo, dict) or not slo or any(
            k not in SLO_LIMIT_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf
            for k, v in slo.items()):
        raise CapsimError(f"{point.get('_file', 'validation suite')}: point {point['id']}: field 'slo_ms' is {slo!r}; a "
                          f"slo_capacity point maps one or more of {', '.join(SLO_LIMIT_KEYS)} to a positive, finite limit in ms "
                          "(e.g. {p99_ttft_ms: 2000, p99_tpot_ms: 200}).")
    return {k: float(v) for k, v in slo.items()}


def at_rate(point: dict, rate_per_s: float) -> dict:
    """The point run at `rate_per_s` requests/s (a probe of a slo_capacity point's search)."""
    return {**point, "request_rate_per_s": float(rate_per_s)}


_STAT = {"mean": "mean", "median": "median", "p99": "p99", "mean of 3 runs": "mean"}


def predicted_value(point: dict, s: dict) -> float:
    """The point's metric from a run's summary."""
    metric, stat = point["metric"], _STAT.get(str(point.get("statistic", "mean")), "mean")
    if metric == "decode_tokens_per_s":
        return 1000.0 / s["mean_tpot_ms"]
    if metric == "prefill_tokens_per_s":
        return float(point["prompt_tokens"]) / (s["mean_ttft_ms"] / 1000.0)
    if metric == "output_tokens_per_s":
        return s["output_throughput"]
    if metric == "total_tokens_per_s":
        return s["total_token_throughput"]
    if metric == "input_tokens_per_s":
        return s["total_token_throughput"] - s["output_throughput"]
    if metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        return s[f"{stat}_{metric}"]
    if metric == "e2el_s":
        return s[f"{stat}_e2el_ms"] / 1000.0
    if metric in ("ttft_ns", "tpot_ns"):  # MLPerf loadgen prints latencies in ns
        return s[f"{stat}_{metric[:-3]}_ms"] * 1.0e6
    raise Skip(f"metric {metric!r} has no counterpart in the run's summary")
