"""Workloads -> request streams: arrival processes, length distributions, trace import (seeded).

Everything random comes from one numpy Generator made from the run's seed; each stream (arrival
gaps, request classes, each class's prompt and output lengths, think times) gets its own child
generator, so changing one distribution never shifts the draws of another.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capsim.spec import limits as L
from capsim.errors import CapsimError, quote
from capsim.workload.schema import WorkloadConfig

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


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
    time_offset_s: float = 0.0  # a trace's first arrival time, subtracted from every arrival
    prompt_set: int | None = None  # request i re-sends prompt i mod prompt_set (workload prompt_set)
    set_prompt_tokens: np.ndarray | None = None  # the set's prompts (shared prefix included) and answers
    set_output_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)

    def replayed_set(self) -> tuple[list[int], list[int]]:
        """(prompt tokens with the shared prefix, output tokens) of each prompt of the replayed set."""
        if self.set_prompt_tokens is None or self.set_output_tokens is None:
            return [], []
        return self.set_prompt_tokens.tolist(), self.set_output_tokens.tolist()


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
                total = _lengths(split.total_tokens, idx, self.rngs[2 * c], trace, "prompt_tokens", at_least=2)
                if len(total) and total.min() < 2:  # only a trace can give this: the schema refuses the rest
                    raise CapsimError(f"{self.names[c] if len(self.specs) > 1 else 'split'}: split.total_tokens "
                                      "from the trace holds a total of 1 token, which cannot be split into a "
                                      "prompt and an output token; totals must be at least 2.")
                prompt[idx] = np.clip(np.rint(total * split.prompt_share), 1, total - 1).astype(np.int64)
                output[idx] = total - prompt[idx]
                continue
            prompt[idx] = _lengths(p_spec, idx, self.rngs[2 * c], trace, "prompt_tokens")
            output[idx] = _lengths(o_spec, idx, self.rngs[2 * c + 1], trace, "output_tokens")
        return prompt, output, cls


def _lengths(spec, idx: np.ndarray, rng, trace: dict | None, column: str, at_least: int = 1) -> np.ndarray:
    if spec.dist == "trace":
        return trace[column][idx]
    return sample_lengths(spec, len(idx), rng, at_least)


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
        self.prompt_set = w.prompt_set
        self.class_names, self.class_prefix, self.class_samples = sampler.names, sampler.prefix, sampler.samples
        self._sampler, self._think_rng = sampler, rng_think
        self._drawn: tuple[np.ndarray, ...] = (np.zeros(0, dtype=np.int64),) * 3

    def lengths(self, i: int) -> tuple[int, int, int]:
        """(prompt tokens drawn, output tokens, class index) of the i-th request sent; the
        class's shared prefix (first turn) or the session history (later turns) comes on top. With
        a prompt set, the i-th request re-sends prompt i mod prompt_set."""
        if self.prompt_set is not None:
            i %= self.prompt_set
            if not len(self._drawn[0]):  # the whole set at once (re-drawing in blocks would copy it each time)
                self._drawn = self._sampler.draw(self.prompt_set)
        while i >= len(self._drawn[0]):
            n = self.BLOCK if self.max_requests is None else self.max_requests
            self._drawn = tuple(np.concatenate(pair) for pair in zip(self._drawn, self._sampler.draw(n)))
        return int(self._drawn[0][i]), int(self._drawn[1][i]), int(self._drawn[2][i])

    def replayed_set(self) -> tuple[list[int], list[int]]:
        """(prompt tokens with the shared prefix, output tokens) of each prompt of the replayed set."""
        if self.prompt_set is None:
            return [], []
        drawn = [self.lengths(i) for i in range(self.prompt_set)]
        return [p + self.class_prefix[c] for p, _, c in drawn], [o for _, o, _ in drawn]

    def start_s(self, user: int) -> float:
        """When a user sends its first request: evenly staggered over [0, ramp_s)."""
        return user * self.ramp_s / self.users

    def think(self) -> float:
        if self.think_time_s == 0:
            return 0.0
        if self.think_time_dist == "fixed":
            return self.think_time_s
        return float(self._think_rng.exponential(self.think_time_s))


def shortest_request_tokens(w: WorkloadConfig) -> int | None:
    """The fewest tokens (shared prefix + prompt + output) any request of the workload can have, or
    None when its lengths come from a trace (not known before reading it)."""
    specs = [(c.prompt_tokens, c.output_tokens, c.split,
              w.shared_prefix_tokens if c.shared_prefix_tokens is None else c.shared_prefix_tokens)
             for c in w.classes] if w.classes else [(w.prompt_tokens, w.output_tokens, w.split, w.shared_prefix_tokens)]
    shortest = []
    for prompt, output, split, prefix in specs:
        parts = [split.total_tokens] if split is not None else [prompt, output]
        if any(p.dist == "trace" for p in parts):
            return None
        shortest.append(prefix + sum(_least(p) for p in parts))
    return min(shortest)


def _least(spec) -> int:
    """The smallest count a length distribution draws."""
    if spec.dist == "fixed":
        return spec.value
    if spec.dist in ("sequence", "empirical"):
        return min(spec.values)
    return max(spec.min, 1)


def sample_lengths(spec, n: int, rng: np.random.Generator, at_least: int = 1) -> np.ndarray:
    """n token counts (int64) from a length distribution; a continuous one is rounded and clipped
    to [max(min, at_least), max], or to limits.MAX_TOKENS without a max."""
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
    upper = spec.max if spec.max is not None else L.MAX_TOKENS
    return np.clip(np.rint(raw), max(spec.min, at_least), upper).astype(np.int64)


def _gaps(arrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    if arrivals.kind == "poisson":
        return rng.exponential(1.0 / arrivals.rate_per_s, size=n)
    if arrivals.kind == "gamma":
        shape = arrivals.burstiness
        return rng.gamma(shape, 1.0 / (arrivals.rate_per_s * shape), size=n)
    return np.full(n, 1.0 / arrivals.rate_per_s)  # constant


def _arrival_times(w: WorkloadConfig, rng: np.random.Generator) -> np.ndarray:
    """Arrival times starting at 0 (the first request arrives at once, as benchmark clients send).
    With both `requests` and `duration_s`, whichever ends first: at most that many requests, none
    at or after duration_s."""
    arrivals = w.arrivals
    if arrivals.kind == "all_at_once":
        return np.full(w.requests, arrivals.at_s)
    if w.requests is not None:
        times = np.cumsum(_gaps(arrivals, w.requests, rng))
        times = times - times[0]
        return times if w.duration_s is None else times[times < w.duration_s]
    chunks, t = [], 0.0
    block = int(w.duration_s * arrivals.rate_per_s * 1.2) + 16
    while t < w.duration_s:
        times = np.cumsum(_gaps(arrivals, block, rng))
        times = times - times[0] + t if not chunks else times + t
        chunks.append(times)
        t = times[-1]
    times = np.concatenate(chunks)
    return times[times < w.duration_s]


def check_memory(w: WorkloadConfig, source: str) -> None:
    """Refuse, before anything is drawn, a run whose requests cannot fit in this machine's
    memory (limits.memory_problem), naming the field that asks for them."""
    arrivals = w.arrivals
    if w.requests is not None:
        n, what = float(w.requests), f"field 'requests' ({w.requests:,})"
    elif w.duration_s is not None and hasattr(arrivals, "rate_per_s"):
        n = w.duration_s * arrivals.rate_per_s
        what = f"field 'duration_s' ({w.duration_s:g} s at {arrivals.rate_per_s:g} requests/s)"
    else:
        return
    problem = L.memory_problem(n, what)
    if problem:
        raise CapsimError(f"{source}: {problem}.")


def read_trace(path: Path) -> dict[str, np.ndarray]:
    """Columns arrival_s, prompt_tokens, output_tokens from a CSV or JSONL trace, checked and
    sorted by arrival, with times taken from the first arrival ('time_offset_s': what was
    subtracted; a trace in Unix-epoch seconds has an offset of about 1.7e9)."""
    import pandas as pd

    try:
        if path.suffix in (".jsonl", ".json"):
            df, lines = _read_jsonl(path)
        else:
            df = pd.read_csv(path)
            lines = np.arange(2, len(df) + 2)  # the header is line 1
    except FileNotFoundError:
        raise CapsimError(f"{path}: trace file not found (arrivals.file is relative to the workload file).") from None
    except OSError as exc:
        raise CapsimError(f"{path}: cannot read the trace ({exc.strerror or exc}).") from None
    except (ValueError, RecursionError) as exc:  # pandas' parser errors, undecodable bytes
        raise CapsimError(f"{path}: cannot parse the trace ({str(exc)[:120]}).") from None
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise CapsimError(f"{path}: trace lacks column(s) {', '.join(missing)}; needs {', '.join(TRACE_COLUMNS)}.")
    if len(df) == 0:
        raise CapsimError(f"{path}: the trace has no rows.")
    out = {col: _trace_column(path, df[col], lines, col) for col in TRACE_COLUMNS}
    order = np.argsort(out["arrival_s"], kind="stable")
    out = {k: v[order] for k, v in out.items()}
    offset = float(out["arrival_s"][0])
    out["arrival_s"] = out["arrival_s"] - offset
    out["time_offset_s"] = np.array([offset])
    return out


def _read_jsonl(path: Path):
    """A JSONL trace as a DataFrame, with each row's line number; every line is one JSON object."""
    import pandas as pd

    rows, lines = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CapsimError(f"{path}: line {n}: not valid JSON ({exc.msg}).") from None
        if not isinstance(row, dict):
            raise CapsimError(f"{path}: line {n}: expected a JSON object with {', '.join(TRACE_COLUMNS)}, "
                              f"got {quote(row)}.")
        rows.append(row)
        lines.append(n)
    return pd.DataFrame(rows), np.array(lines, dtype=np.int64)


def _trace_column(path: Path, raw, lines: np.ndarray, col: str) -> np.ndarray:
    """One column as numbers: times finite and >= 0, token counts whole numbers in [1,
    limits.MAX_TOKENS]; the first bad cell is named by line and column."""
    import pandas as pd

    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    ok = np.isfinite(values)
    if raw.dtype == bool or raw.dtype == object:  # JSON's true/false: not a number of anything
        ok &= ~raw.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
    if col == "arrival_s":
        ok &= values >= 0
        wanted = "a time in seconds, >= 0"
    else:
        ok &= (values >= 1) & (values <= L.MAX_TOKENS) & (values == np.floor(values))
        wanted = f"a whole number of tokens from 1 to {L.MAX_TOKENS:,}"
    bad = np.flatnonzero(~ok)
    if len(bad):
        raise CapsimError(f"{path}: row {bad[0] + 1}, column {col} (line {lines[bad[0]]}): {quote(raw.iloc[bad[0]])} "
                          f"is not allowed ({wanted}).")
    return values if col == "arrival_s" else values.astype(np.int64)


def is_path(gpu: str) -> bool:
    """Whether a workload's `gpu` names a profile file (ends in .yaml/.yml or holds a folder
    separator) rather than a catalogue entry."""
    return gpu.endswith((".yaml", ".yml")) or "/" in gpu or os.sep in gpu


def with_paths_from(w: WorkloadConfig, folder: Path) -> WorkloadConfig:
    """The workload with every relative path it names (its GPU profile file, its model's
    config.json, its trace) taken
    from `folder`: one rule for every path in a workload file, wherever capsim runs from."""
    update: dict = {}
    if w.gpu is not None and is_path(w.gpu) and not Path(w.gpu).is_absolute():
        update["gpu"] = str(folder / w.gpu)
    if isinstance(w.model, str) and w.model.endswith(".json") and not Path(w.model).is_absolute():
        update["model"] = str(folder / w.model)  # a Hugging Face config.json
    if w.arrivals.kind == "trace" and not Path(w.arrivals.file).is_absolute():
        update["arrivals"] = w.arrivals.model_copy(update={"file": str(folder / w.arrivals.file)})
    return w.model_copy(update=update) if update else w


def build_stream(w: WorkloadConfig, base_dir: Path | None = None) -> OpenLoopStream | ClosedLoopStream:
    """The request stream a workload describes, reproducible from w.seed. A relative trace path
    is taken from base_dir (load_workload has already made a file's paths absolute)."""
    rng_arrivals, rng_lengths, rng_think = np.random.default_rng(w.seed).spawn(3)
    sampler = _LengthSampler(w, rng_lengths)
    arrivals = w.arrivals
    if arrivals.kind == "closed_loop":
        return ClosedLoopStream(w, sampler, rng_think)
    trace, offset = None, 0.0
    if arrivals.kind == "trace":
        trace, offset = _trace(w, base_dir)
        times = trace["arrival_s"]
    else:
        times = _arrival_times(w, rng_arrivals)
    prefix = np.asarray(sampler.prefix, dtype=np.int64)
    if w.prompt_set is not None:  # the whole set's lengths, drawn once, re-sent in turn
        set_prompt, set_output, set_cls = sampler.draw(w.prompt_set)
        set_prompt = set_prompt + prefix[set_cls]
        prompt, output, cls = (np.resize(a, len(times)) for a in (set_prompt, set_output, set_cls))
        return OpenLoopStream(times, prompt, output, cls, sampler.names, sampler.prefix, sampler.samples, offset,
                              w.prompt_set, set_prompt, set_output)
    prompt, output, cls = sampler.draw(len(times), trace)
    prompt = prompt + prefix[cls]
    return OpenLoopStream(times, prompt, output, cls, sampler.names, sampler.prefix, sampler.samples, offset)


def _trace(w: WorkloadConfig, base_dir: Path | None) -> tuple[dict[str, np.ndarray], float]:
    """The trace's rows the workload asks for (the first `requests`, those before duration_s),
    times scaled, and the offset taken off its times."""
    a = w.arrivals
    path = Path(a.file)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    trace = read_trace(path)
    offset = float(trace.pop("time_offset_s")[0])
    times = trace["arrival_s"] * a.time_scale
    if times[-1] > L.MAX_TIME_S:
        raise CapsimError(f"{path}: the trace spans {times[-1]:.3g} s (times x arrivals.time_scale) after its first "
                          f"arrival, more than the {L.MAX_TIME_S:.0e} s a run can time exactly.")
    n = len(times) if w.requests is None else min(w.requests, len(times))
    if w.duration_s is not None:
        n = min(n, int(np.searchsorted(times, w.duration_s, side="left")))
    trace = {k: v[:n] for k, v in trace.items()}
    trace["arrival_s"] = times[:n]
    return trace, offset
