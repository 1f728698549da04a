"""A workload said with command-line flags instead of (or on top of) a YAML file: compact length
distributions ('2000', 'lognormal:300:0.8'), the arrival process from --rate or --users, any other
field with --set KEY=VALUE, and the YAML text of the result (`capsim run --save-workload`).

One parser per kind of value; every error names the flag and what it allows. What a run needs and
the flags do not say is listed all at once, never guessed.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from capsim.errors import CapsimError, quote
from capsim.spec import safe_yaml
from capsim.spec.config import validate
from capsim.workload.length_dists import Lengths
from capsim.workload.schema import WorkloadConfig

LENGTH_FORMS = ("N (fixed), fixed:N, uniform:LO:HI, normal:MEAN:STD[:MIN:MAX], lognormal:MEAN:SIGMA[:MIN:MAX], "
                "empirical:V1,V2,... (or V1=W1,V2=W2,... with weights), sequence:V1,V2,..., trace")
RATE_KINDS = ("poisson", "gamma", "constant")
ARRIVAL_KINDS = RATE_KINDS + ("all_at_once", "closed_loop")
# Requests a command-line workload sends when neither --requests nor --duration-s is given: enough
# for a steady window at modest loads; closed-loop users get at least ten requests each.
DEFAULT_REQUESTS = 1000
DEFAULT_REQUESTS_PER_USER = 10
# Flags that are workload fields under the same name, at the top level.
_TOP_LEVEL = ("model", "gpu", "weights", "kv_cache", "engine", "tp", "replicas", "router", "allocator", "mode",
              "max_model_len", "gpu_memory_utilization", "num_gpu_blocks", "prefix_caching", "seed",
              "shared_prefix_tokens", "samples", "name", "requests", "duration_s", "horizon_s")
_SCHEDULER = {"scheduler": "kind", "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
              "preemption": "preemption"}
_LENGTHS = TypeAdapter(Lengths)


def parse_lengths(text: str, flag: str) -> dict:
    """'2000' -> {dist: fixed, value: 2000}; 'lognormal:300:0.8' -> {dist: lognormal, mean: 300,
    sigma: 0.8}; ... (LENGTH_FORMS), checked against the workload schema's bounds."""
    text = str(text).strip()
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    args = rest.split(":") if rest else []
    try:
        data = _length_data(kind, args) if not kind.isdigit() or rest else {"dist": "fixed", "value": int(kind)}
    except (ValueError, IndexError):
        data = None
    if data is None:
        raise CapsimError(f"{flag} {quote(text)}: not a length distribution; allowed: {LENGTH_FORMS}.")
    try:
        return _LENGTHS.validate_python(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'value'}: "
                             f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise CapsimError(f"{flag} {quote(text)}: {problems}; allowed: {LENGTH_FORMS}.") from None


def _length_data(kind: str, args: list[str]) -> dict | None:
    """The distribution's fields from the parts after its name (None: a form not allowed)."""
    numbers = [float(a) for a in args] if kind in ("normal", "lognormal") else None
    if kind == "fixed" and len(args) == 1:
        return {"dist": "fixed", "value": int(args[0])}
    if kind == "uniform" and len(args) == 2:
        return {"dist": "uniform", "min": int(args[0]), "max": int(args[1])}
    if numbers is not None and len(numbers) in (2, 3, 4):
        spread = "std" if kind == "normal" else "sigma"
        data: dict[str, Any] = {"dist": kind, "mean": numbers[0], spread: numbers[1]}
        data.update({k: int(v) for k, v in zip(("min", "max"), args[2:])})
        return data
    if kind in ("empirical", "sequence") and len(args) == 1:
        pairs = [item.partition("=") for item in args[0].split(",")]
        data = {"dist": kind, "values": [int(v) for v, _, _ in pairs]}
        if kind == "empirical" and any(sep for _, sep, _ in pairs):
            data["weights"] = [float(w) for _, _, w in pairs]
        return data
    if kind == "trace" and not args:
        return {"dist": "trace"}
    return None


def parse_sets(texts: list[str] | None) -> list[tuple[list[str], Any]]:
    """--set KEY=VALUE items -> (dotted key as parts, YAML value): 'scheduler.watermark=0.02'."""
    out = []
    for text in texts or []:
        key, sep, value = text.partition("=")
        parts = [p.strip() for p in key.split(".")]
        if not sep or not all(parts):
            raise CapsimError(f"--set {quote(text)}: give KEY=VALUE, the key dotted as in the workload file "
                              "(e.g. --set scheduler.watermark=0.02, --set measure.whole_run=true).")
        out.append((parts, safe_yaml.load(value, f"--set {key}") if value.strip() else None))
    return out


def compose(base: dict | None, flags: dict, source: str, load: dict | None = None,
            slo: dict | None = None) -> WorkloadConfig:
    """A workload from a file's data (`base`, None: no file) with the flags' fields written over it,
    validated. `flags` holds the set-up options by name (None: not given); `load` is the load a
    planning command varies itself ({'rate': r} or {'users': n}), used when there is no file and
    the flags give none; `slo` replaces the slo: block (the --slo objectives as a block).
    Without a file, what a run cannot do without (model, GPU, load, lengths) is listed all at once."""
    given = {k: v for k, v in flags.items() if v is not None and v != []}
    data = dict(base or {})
    load = load or {}
    if base is None:
        _check_complete(given, load)
    else:
        load = {}
    for key in _TOP_LEVEL:
        if key in given:
            data[key] = given[key]
    if "requests" in given and "duration_s" not in given:
        data.pop("duration_s", None)  # --requests replaces the file's stopping rule, as the run override does
    sched = {_SCHEDULER[k]: given[k] for k in _SCHEDULER if k in given}
    if sched:
        data["scheduler"] = {**data.get("scheduler", {}), **sched}
    for key in ("prompt_tokens", "output_tokens"):
        if key in given:
            data[key] = parse_lengths(given[key], "--" + key.replace("_", "-"))
            data.pop("split", None)
            data.pop("classes", None)
    data["arrivals"] = _arrivals(data.get("arrivals"), given, load)
    if base is None and "requests" not in data and "duration_s" not in data:
        users = data["arrivals"].get("users", 0)
        data["requests"] = max(DEFAULT_REQUESTS, DEFAULT_REQUESTS_PER_USER * users)
    if slo:
        data["slo"] = slo
    for parts, value in parse_sets(given.get("set")):
        _put(data, parts, value)
    return validate(WorkloadConfig, data, source)


def _check_complete(given: dict, load: dict) -> None:
    missing = []
    if "model" not in given:
        missing.append("--model (a catalogue name, see `capsim models`, or a Hugging Face config.json)")
    if "gpu" not in given:
        missing.append("--gpu (see `capsim gpus`)")
    if not ({"rate", "users"} & set(given) or load or given.get("arrivals") == "all_at_once"):
        missing.append("the load: --rate REQ_PER_S (Poisson arrivals) or --users N (closed-loop users)")
    for key in ("prompt_tokens", "output_tokens"):
        if key not in given:
            missing.append(f"--{key.replace('_', '-')} (e.g. 2000 or lognormal:300:0.8)")
    if missing:
        raise CapsimError("no workload file, and the flags leave out what a run needs: " + "; ".join(missing)
                          + ". Give them, or a workload YAML (see workloads/).")


def _arrivals(old: dict | None, given: dict, load: dict) -> dict:
    """The arrivals block: the file's, changed by --rate, --users, --think-time-s, --burstiness and
    --arrivals. Without a file the kind follows the load: closed_loop for --users, poisson for
    --rate (gamma with --burstiness)."""
    old = dict(old or {})
    rate, users = given.get("rate", load.get("rate")), given.get("users", load.get("users"))
    kind = given.get("arrivals")
    if kind is None:
        if "users" in given or (not old and users is not None):
            kind = "closed_loop"
        elif "burstiness" in given:
            kind = "gamma"
        elif old:
            kind = old.get("kind")
        else:
            kind = "poisson" if rate is not None else "all_at_once"
    if kind not in ARRIVAL_KINDS and kind != old.get("kind"):
        raise CapsimError(f"--arrivals {quote(kind)}: allowed: {', '.join(ARRIVAL_KINDS)} (a trace needs a workload "
                          "file's arrivals block).")
    new = old if kind == old.get("kind") else {"kind": kind}
    if kind in RATE_KINDS:
        if rate is not None:
            new["rate_per_s"] = rate
        if "burstiness" in given:
            new["burstiness"] = given["burstiness"]
    elif kind == "closed_loop":
        if users is not None:
            new["users"] = users
        if "think_time_s" in given:
            new["think_time_s"] = given["think_time_s"]
    unused = [f for f, key in (("--rate", "rate"), ("--users", "users"), ("--think-time-s", "think_time_s"),
                               ("--burstiness", "burstiness")) if key in given and key not in _USED_BY[kind]]
    if unused:
        raise CapsimError(f"{', '.join(unused)}: the arrivals are '{kind}', which do not take "
                          f"{'it' if len(unused) == 1 else 'them'}; {_ARRIVAL_HELP}.")
    return new


_USED_BY = {"poisson": {"rate"}, "constant": {"rate"}, "gamma": {"rate", "burstiness"}, "all_at_once": set(),
            "closed_loop": {"users", "think_time_s"}, "trace": set()}
_ARRIVAL_HELP = ("--rate goes with poisson, gamma (and --burstiness) and constant arrivals, --users and "
                 "--think-time-s with closed_loop (--arrivals KIND chooses)")


def _put(data: dict, parts: list[str], value: Any) -> None:
    """data[a][b][c] = value for --set a.b.c=VALUE, making the blocks on the way."""
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {} if child is None else _not_a_block(parts, part)
            node[part] = child
        node = child
    node[parts[-1]] = value


def _not_a_block(parts: list[str], part: str) -> dict:
    raise CapsimError(f"--set {'.'.join(parts)}: '{part}' holds a value, not a block of keys.")


def workload_yaml(w: WorkloadConfig) -> str:
    """The workload as YAML that loads back to the same config: the fields that were given (defaults
    left out), in the schema's order."""
    data = w.model_dump(mode="json", exclude_unset=True)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None, width=100)
