"""Workloads -> request streams: arrival processes, length distributions, trace import (seeded).

Everything random comes from one numpy Generator made from the run's seed; each stream (arrival
gaps, request classes, each class's prompt and output lengths, think times) gets its own child
generator, so changing one distribution never shifts the draws of another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capsim.errors import CapsimError
from capsim.workload_schema import WorkloadConfig


@dataclass(frozen=True)
class OpenLoopStream:
    """All arrivals known up front (sorted by time)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray  # shared prefix included
    output_tokens: np.ndarray
    class_index: np.ndarray
    class_names: tuple[str, ...]
    class_prefix: tuple[int, ...]  # shared prefix tokens per class
    class_samples: tuple[int, ...]  # parallel samples per class

    def __len__(self) -> int:
        return len(self.arrival_s)


class _LengthSampler:
    """Draws (prompt, output, class) triples: a class by weight, then that class's lengths."""

    def __init__(self, w: WorkloadConfig, rng: np.random.Generator) -> None:
        if w.classes:
            self.names = tuple(c.name for c in w.classes)
            self.specs = [(c.prompt_tokens, c.output_tokens, c.split) for c in w.classes]
            weights = np.array([c.weight for c in w.classes])
            self.weights = weights / weights.sum()
            self.prefix = tuple(w.shared_prefix_tokens if c.shared_prefix_tokens is None else c.shared_prefix_tokens
                                for c in w.classes)
            self.samples = tuple(w.samples if c.samples is None else c.samples for c in w.classes)
        else:
            self.names, self.weights = ("all",), np.ones(1)
            self.specs = [(w.prompt_tokens, w.output_tokens, w.split)]
            self.prefix, self.samples = (w.shared_prefix_tokens,), (w.samples,)
        children = rng.spawn(1 + 2 * len(self.specs))
        self.class_rng, self.rngs = children[0], children[1:]

    def draw(self, n: int, trace: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if len(self.specs) == 1:
            cls = np.zeros(n, dtype=np.int64)
        else:
            cls = self.class_rng.choice(len(self.specs), size=n, p=self.weights)
        prompt = np.zeros(n, dtype=np.int64)
        output = np.zeros(n, dtype=np.int64)
        for c, (p_spec, o_spec, split) in enumerate(self.specs):
            idx = np.flatnonzero(cls == c)
            if split is not None:
                total = _lengths(split.total_tokens, idx, self.rngs[2 * c], trace, "prompt_tokens")
                prompt[idx] = np.minimum(np.rint(total * split.prompt_share), total - 1).astype(np.int64)
                output[idx] = total - prompt[idx]
                continue
            prompt[idx] = _lengths(p_spec, idx, self.rngs[2 * c], trace, "prompt_tokens")
            output[idx] = _lengths(o_spec, idx, self.rngs[2 * c + 1], trace, "output_tokens")
        return prompt, output, cls


def _lengths(spec, idx: np.ndarray, rng, trace: dict | None, column: str) -> np.ndarray:
    if spec.dist == "trace":
        return trace[column][idx]
    return sample_lengths(spec, len(idx), rng)


class ClosedLoopStream:
    """`users` each send a request, wait for its last token, think, and send the next.

    Lengths are drawn in sending order, in blocks, so a duration-bound run needs no upper bound.
    """

    BLOCK = 4096

    def __init__(self, w: WorkloadConfig, sampler: _LengthSampler, rng_think: np.random.Generator) -> None:
        a = w.arrivals
        self.users, self.think_time_s, self.think_time_dist = a.users, a.think_time_s, a.think_time_dist
        self.ramp_s = a.think_time_s if a.ramp_s is None else a.ramp_s
        self.turns_per_session = a.turns_per_session
        self.max_requests, self.duration_s = w.requests, w.duration_s
        self.class_names, self.class_prefix, self.class_samples = sampler.names, sampler.prefix, sampler.samples
        self._sampler, self._think_rng = sampler, rng_think
        self._drawn: tuple[np.ndarray, ...] = (np.zeros(0, dtype=np.int64),) * 3

    def lengths(self, i: int) -> tuple[int, int, int]:
        """(prompt tokens drawn, output tokens, class index) of the i-th request sent; the
        class's shared prefix (first turn) or the session history (later turns) comes on top."""
        while i >= len(self._drawn[0]):
            n = self.BLOCK if self.max_requests is None else self.max_requests
            self._drawn = tuple(np.concatenate(pair) for pair in zip(self._drawn, self._sampler.draw(n)))
        return int(self._drawn[0][i]), int(self._drawn[1][i]), int(self._drawn[2][i])

    def start_s(self, user: int) -> float:
        """When a user sends its first request: evenly staggered over [0, ramp_s)."""
        return user * self.ramp_s / self.users

    def think(self) -> float:
        if self.think_time_s == 0:
            return 0.0
        if self.think_time_dist == "fixed":
            return self.think_time_s
        return float(self._think_rng.exponential(self.think_time_s))


def sample_lengths(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """n token counts (int64, >= 1) from a length distribution."""
    if spec.dist == "fixed":
        return np.full(n, spec.value, dtype=np.int64)
    if spec.dist == "sequence":
        return np.resize(np.asarray(spec.values, dtype=np.int64), n)
    if spec.dist == "uniform":
        return rng.integers(spec.min, spec.max, endpoint=True, size=n).astype(np.int64)
    if spec.dist == "empirical":
        p = None if spec.weights is None else np.asarray(spec.weights) / sum(spec.weights)
        return rng.choice(np.asarray(spec.values, dtype=np.int64), size=n, p=p)
    if spec.dist == "normal":
        raw = rng.normal(spec.mean, spec.std, size=n)
    else:  # lognormal with the given mean: mu = ln(mean) - sigma^2 / 2
        raw = rng.lognormal(np.log(spec.mean) - spec.sigma**2 / 2, spec.sigma, size=n)
    upper = spec.max if spec.max is not None else np.inf
    return np.clip(np.rint(raw), spec.min, upper).astype(np.int64)


def _gaps(arrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    if arrivals.kind == "poisson":
        return rng.exponential(1.0 / arrivals.rate_per_s, size=n)
    if arrivals.kind == "gamma":
        shape = arrivals.burstiness
        return rng.gamma(shape, 1.0 / (arrivals.rate_per_s * shape), size=n)
    return np.full(n, 1.0 / arrivals.rate_per_s)  # constant


def _arrival_times(w: WorkloadConfig, rng: np.random.Generator) -> np.ndarray:
    """Arrival times starting at 0 (the first request arrives at once, as benchmark clients send)."""
    arrivals = w.arrivals
    if arrivals.kind == "all_at_once":
        return np.full(w.requests, arrivals.at_s)
    if w.requests is not None:
        times = np.cumsum(_gaps(arrivals, w.requests, rng))
        return times - times[0]
    chunks, t = [], 0.0
    block = int(w.duration_s * arrivals.rate_per_s * 1.2) + 16
    while t < w.duration_s:
        times = np.cumsum(_gaps(arrivals, block, rng))
        times = times - times[0] + t if not chunks else times + t
        chunks.append(times)
        t = times[-1]
    times = np.concatenate(chunks)
    return times[times < w.duration_s]


def read_trace(path: Path) -> dict[str, np.ndarray]:
    """Columns arrival_s, prompt_tokens, output_tokens from a CSV or JSONL trace, checked, sorted."""
    import pandas as pd

    need = ("arrival_s", "prompt_tokens", "output_tokens")
    try:
        if path.suffix in (".jsonl", ".json"):
            df = pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
        else:
            df = pd.read_csv(path)
    except FileNotFoundError:
        raise CapsimError(f"{path}: trace file not found (arrivals.file is relative to the workload file).") from None
    except (ValueError, json.JSONDecodeError) as exc:
        raise CapsimError(f"{path}: cannot parse the trace ({exc}).") from None
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise CapsimError(f"{path}: trace lacks column(s) {', '.join(missing)}; needs {', '.join(need)}.")
    if len(df) == 0:
        raise CapsimError(f"{path}: the trace has no rows.")
    out = {}
    for col in need:
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        floor = 0 if col == "arrival_s" else 1
        bad = np.flatnonzero(~np.isfinite(values) | (values < floor))
        if len(bad):
            wanted = "a time >= 0" if col == "arrival_s" else "a whole token count >= 1"
            raise CapsimError(f"{path}: row {bad[0] + 1}, column {col}: {df[col].iloc[bad[0]]!r} is not allowed ({wanted}).")
        out[col] = values if col == "arrival_s" else np.rint(values).astype(np.int64)
    order = np.argsort(out["arrival_s"], kind="stable")
    return {k: v[order] for k, v in out.items()}


def build_stream(w: WorkloadConfig, base_dir: Path | None = None) -> OpenLoopStream | ClosedLoopStream:
    """The request stream a workload describes, reproducible from w.seed."""
    rng_arrivals, rng_lengths, rng_think = np.random.default_rng(w.seed).spawn(3)
    sampler = _LengthSampler(w, rng_lengths)
    arrivals = w.arrivals
    if arrivals.kind == "closed_loop":
        return ClosedLoopStream(w, sampler, rng_think)
    trace = None
    if arrivals.kind == "trace":
        path = Path(arrivals.file)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        trace = read_trace(path)
        n = len(trace["arrival_s"]) if w.requests is None else min(w.requests, len(trace["arrival_s"]))
        trace = {k: v[:n] for k, v in trace.items()}
        times = trace["arrival_s"] * arrivals.time_scale
    else:
        times = _arrival_times(w, rng_arrivals)
    prompt, output, cls = sampler.draw(len(times), trace)
    prompt = prompt + np.asarray(sampler.prefix, dtype=np.int64)[cls]
    return OpenLoopStream(times, prompt, output, cls, sampler.names, sampler.prefix, sampler.samples)
