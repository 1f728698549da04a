"""The request lengths of a validation point's workload: ShareGPT's measured prompt shape, MLPerf's
published OpenOrca histogram, a client's listed prompts, or the stated fixed or uniform lengths
(validation/README.md, "How points map onto simulations"). Part of capsim.validation.mapping.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

from capsim.spec.config import read_yaml
from capsim.validation.skip import Skip

# ShareGPT lengths (vLLM's and SGLang's benchmark clients: first turn of each conversation, the
# dataset's answer as the output length, pairs with a side under 4 tokens or a prompt over 1,024
# or a total over 2,048 dropped). Means, where a point states none: Lambda's raw result for the
# first 320 prompts (73,671 input and 71,810 output tokens, validation/lambda-vllm-benchmark.yaml).
# Prompt shape: the 320 prompt lengths vLLM's client sent in another of Lambda's raw results
# (validation/lengths/sharegpt-vllm-client-llama3-input.yaml: mean 204.9, median 77 tokens),
# scaled to the point's mean. Answer shape: log-normal with sigma 1.0 (assumption: no per-request
# answer lengths of the data set were found; the clients' results record what the model generated).
SHAREGPT_MEAN_PROMPT, SHAREGPT_MEAN_OUTPUT, SHAREGPT_SIGMA = 230.2, 224.4, 1.0
SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_OUTPUT = 4, 1024, 1024
SHAREGPT_PROMPT_FILE = "lengths/sharegpt-vllm-client-llama3-input.yaml"


def _tokens(value, default: float) -> float | None:
    """A stated length, or None for 'sharegpt' / 'unstated'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None if value in ("sharegpt", "unstated") else default


def lengths_for(point: dict) -> dict:
    """The prompt and output length distributions of a point's workload."""
    dist = str(point.get("length_distribution", ""))
    prompt, output = point.get("prompt_tokens"), point.get("output_tokens")
    if dist.startswith("sharegpt"):
        p = _tokens(prompt, SHAREGPT_MEAN_PROMPT) or SHAREGPT_MEAN_PROMPT
        o = _tokens(output, SHAREGPT_MEAN_OUTPUT) or SHAREGPT_MEAN_OUTPUT
        return {"prompt_tokens": _sharegpt_prompts(point, p),
                "output_tokens": {"dist": "lognormal", "mean": o, "sigma": SHAREGPT_SIGMA, "min": SHAREGPT_MIN_TOKENS,
                                  "max": SHAREGPT_MAX_OUTPUT}}
    if dist == "uniform":
        # SGLang's bench_serving --dataset-name random: lengths uniform on [max(1, int(N * ratio)), N]
        ratio = float(point.get("range_ratio", 1.0))
        bounds = [(max(1, int(float(n) * ratio)), int(n)) for n in (prompt, output)]
        return {"prompt_tokens": {"dist": "uniform", "min": bounds[0][0], "max": bounds[0][1]},
                "output_tokens": {"dist": "uniform", "min": bounds[1][0], "max": bounds[1][1]}}
    p, o = _tokens(prompt, 1), _tokens(output, 1)
    if p is None and point["group"] == "decode":
        p = 1  # unstated prompt of a decode test: its ~100-200 tokens change the KV reads by < 1%
    if dist == "mlperf-openorca":
        return _openorca_lengths(point)
    if dist == "listed":
        return _listed_lengths(point)
    if p is None or o is None:
        raise Skip("prompt or output length not stated")
    return {"prompt_tokens": {"dist": "fixed", "value": max(1, int(p))},
            "output_tokens": {"dist": "fixed", "value": max(1, int(o))}}


# MLPerf's llama2-70b set (validation/lengths/mlperf-openorca-llama2-input.yaml): the 24,576 prompt lengths in
# Llama 2 tokens as published from MLCommons' processed set. The served model's answer lengths are not published per
# sample (the results' accuracy logs are truncated); every request gets the mean each point computes from its two
# printed rates.
OPENORCA_INPUT_FILE = "lengths/mlperf-openorca-llama2-input.yaml"
OPENORCA_TOKENIZER_MODELS = ("llama-2-70b",)  # models whose tokenizer the published lengths are counted in
DEFAULT_SUITE = Path(__file__).resolve().parents[3] / "validation"


@lru_cache(maxsize=8)
def _histogram(suite_dir: str, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(values, counts) of a length histogram in the suite's lengths/ folder."""
    path = Path(suite_dir) / name
    if not path.is_file():
        raise Skip(f"the length histogram {path} is missing")
    data = read_yaml(path)
    return tuple(int(v) for v in data["values"]), tuple(int(c) for c in data["counts"])


def _sharegpt_prompts(point: dict, mean_tokens: float) -> dict:
    """The measured ShareGPT prompt shape, each length scaled by the point's mean over the sample's
    and kept within the clients' filter (4 to 1,024 tokens)."""
    values, counts = _histogram(str(point.get("_dir") or DEFAULT_SUITE), SHAREGPT_PROMPT_FILE)
    scale = mean_tokens * sum(counts) / sum(v * c for v, c in zip(values, counts))
    scaled: dict[int, float] = {}
    for v, c in zip(values, counts):
        tokens = min(SHAREGPT_MAX_PROMPT, max(SHAREGPT_MIN_TOKENS, round(v * scale)))
        scaled[tokens] = scaled.get(tokens, 0.0) + c
    return {"dist": "empirical", "values": sorted(scaled), "weights": [scaled[t] for t in sorted(scaled)]}


def _openorca_lengths(point: dict) -> dict:
    """MLPerf llama2-70b: prompts drawn from the published histogram, answers at the point's mean."""
    if point["model"] not in OPENORCA_TOKENIZER_MODELS:
        raise Skip(f"the OpenOrca prompt lengths are published in Llama 2 tokens; {point['model']} has another "
                   "tokenizer and the set's lengths in its tokens are not stated")
    values, counts = _histogram(str(point.get("_dir") or DEFAULT_SUITE), OPENORCA_INPUT_FILE)
    return {"prompt_tokens": {"dist": "empirical", "values": list(values), "weights": [float(c) for c in counts]},
            "output_tokens": {"dist": "fixed", "value": max(1, round(float(point["output_tokens"])))}}


@lru_cache(maxsize=8)
def _listed(suite_dir: str, name: str) -> tuple[int, ...]:
    """A data set's per-request prompt lengths, in the order its client sends them."""
    path = Path(suite_dir) / name
    if not path.is_file():
        raise Skip(f"the prompt-length list {path} is missing")
    return tuple(int(v) for v in read_yaml(path)["lengths"])


def _listed_lengths(point: dict) -> dict:
    """A client that sends the first N prompts of a published list, in its order (`prompt_lengths`:
    its file, N and the chat template's tokens, which the list leaves out), and again from the first
    when it sends more; answers at the point's mean, as their own lengths are not published."""
    spec = point.get("prompt_lengths")
    if not isinstance(spec, dict) or "file" not in spec:
        raise Skip("length_distribution 'listed' needs prompt_lengths: {file, first, template_tokens}")
    lengths = _listed(str(point.get("_dir") or DEFAULT_SUITE), str(spec["file"]))
    extra = int(spec.get("template_tokens") or 0)
    sent = [tokens + extra for tokens in lengths[:int(spec.get("first") or len(lengths))]]
    return {"prompt_tokens": {"dist": "sequence", "values": sent}, "output_tokens": _answers(point)}


def _answers(point: dict) -> dict:
    """Answers of a point that states only their mean: all at the mean, or, where the point names the
    client's cap (`max_output_tokens`: answers end at EOS or there), ShareGPT's answer shape (log-normal,
    sigma SHAREGPT_SIGMA) clipped at the cap, its mean chosen so that the clipped answers average the
    stated mean."""
    mean, cap = float(point["output_tokens"]), point.get("max_output_tokens")
    if cap is None:
        return {"dist": "fixed", "value": max(1, round(mean))}
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or int(cap) != cap or cap < 1 or mean > cap:
        raise Skip(f"max_output_tokens {cap!r} must be a whole number of tokens at least the mean answer ({mean})")
    if mean == cap:  # every answer reached the cap
        return {"dist": "fixed", "value": int(cap)}
    return {"dist": "lognormal", "mean": clipped_lognormal_mean(mean, float(cap), SHAREGPT_SIGMA), "sigma": SHAREGPT_SIGMA,
            "min": 1, "max": int(cap)}


_PHI = NormalDist().cdf  # the standard normal distribution function


def clipped_lognormal_mean(target: float, cap: float, sigma: float) -> float:
    """The mean m of a log-normal X (log-space spread sigma) whose clipped form min(X, cap) has mean
    `target` (< cap): E[min(X, c)] = m * Phi((ln c - mu - sigma^2) / sigma) + c * (1 - Phi((ln c - mu) / sigma)),
    mu = ln m - sigma^2 / 2, which rises with m; solved by bisection on a log scale."""
    if not (0 < target < cap and sigma > 0):
        raise ValueError(f"need 0 < target < cap and sigma > 0 (target {target}, cap {cap}, sigma {sigma})")

    def clipped(m: float) -> float:
        mu = math.log(m) - sigma**2 / 2
        z = (math.log(cap) - mu) / sigma
        return m * _PHI(z - sigma) + cap * (1.0 - _PHI(z))
    lo, hi = target, target
    while clipped(hi) < target:
        hi *= 2.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if clipped(mid) < target else (lo, mid)
    return math.sqrt(lo * hi)

