"""A fuzzer through the real command line: random workload documents, from valid to hostile
(wrong types, ranges, NaN/inf/huge/negative numbers, unknown, misspelled and duplicate keys,
aliases, encodings, damaged bytes, traces), each run as `capsim run W --json --out DIR` in this
process. Every one must end as either

- a clean error: exit 2, no traceback, one line per problem, each under 1 KB and naming the
  file at fault, or
- a run whose accounting holds: arrived = completed + rejected + unfinished, every number in the
  summary finite, and in every step stored KV tokens <= held <= the cache's capacity, with the
  output folder complete (its manifest written) and nothing partial left beside it.

The same holds for runs said with set-up flags only (lengths, loads, --set, the file options
pointed at good and bad places: an error leaves nothing written) and for Hugging Face config.json
files (`capsim models --from`, a run on one), damaged as a user's download might be.

Each test draws the profile's number of examples (100 by default: about a minute for the first
three on 2 cores, 20 s for the other two); `--hypothesis-profile=long` (tests/conftest.py) draws
thousands.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pandas as pd
import yaml
from helpers import ROUND_GPU, TINY_MODEL, run_main
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---------------------------------------------------------------- valid documents, varied

_lengths = st.one_of(
    st.builds(lambda v: {"dist": "fixed", "value": v}, st.integers(1, 300)),
    st.builds(lambda a, b: {"dist": "uniform", "min": a, "max": a + b}, st.integers(1, 100), st.integers(0, 200)),
    st.builds(lambda m, s: {"dist": "normal", "mean": m, "std": s}, st.floats(1, 300), st.floats(0, 100)),
    st.builds(lambda m, s: {"dist": "lognormal", "mean": m, "sigma": s, "max": 2000}, st.floats(1, 300), st.floats(0.1, 2)),
    st.builds(lambda vs: {"dist": "empirical", "values": vs}, st.lists(st.integers(1, 300), min_size=1, max_size=4)),
    st.builds(lambda vs: {"dist": "sequence", "values": vs}, st.lists(st.integers(1, 300), min_size=1, max_size=4)),
)
_arrivals = st.one_of(
    st.builds(lambda r: {"kind": "poisson", "rate_per_s": r}, st.floats(0.5, 2000)),
    st.builds(lambda r, b: {"kind": "gamma", "rate_per_s": r, "burstiness": b}, st.floats(0.5, 2000), st.floats(0.1, 4)),
    st.builds(lambda r: {"kind": "constant", "rate_per_s": r}, st.floats(0.5, 2000)),
    st.builds(lambda t: {"kind": "all_at_once", "at_s": t}, st.floats(0, 100)),
    st.builds(lambda u, t, n: {"kind": "closed_loop", "users": u, "think_time_s": t, "turns_per_session": n},
              st.integers(1, 6), st.floats(0, 2), st.integers(1, 3)),
)


@st.composite
def valid_documents(draw) -> dict:
    """A small valid workload on the tiny model and the round-number GPU (gpu.yaml beside it)."""
    doc = {"name": "fuzz", "model": dict(TINY_MODEL), "gpu": "gpu.yaml", "weights": "fp16", "kv_cache": "fp16",
           "mode": draw(st.sampled_from(["realistic", "document", "unit"])), "max_model_len": 4096,
           "scheduler": {"kind": draw(st.sampled_from(["static", "continuous", "chunked"])),
                         "max_num_seqs": draw(st.integers(1, 8)), "block_size": draw(st.sampled_from([1, 4, 16])),
                         "preemption": draw(st.sampled_from(["recompute", "swap"]))},
           "arrivals": draw(_arrivals), "seed": draw(st.integers(0, 2**32)),
           "requests": draw(st.integers(1, 40))}
    if doc["scheduler"]["kind"] != "static":
        doc["scheduler"]["max_num_batched_tokens"] = 4096
    shape = draw(st.sampled_from(["lengths", "split", "classes"]))
    if shape == "lengths":
        doc["prompt_tokens"], doc["output_tokens"] = draw(_lengths), draw(_lengths)
    elif shape == "split":
        doc["split"] = {"total_tokens": {"dist": "uniform", "min": 2, "max": 300}, "prompt_share": draw(st.floats(0.05, 0.95))}
    else:
        n = draw(st.integers(1, 3))
        doc["classes"] = [{"name": f"c{i}", "weight": draw(st.floats(0.1, 5)), "prompt_tokens": draw(_lengths),
                           "output_tokens": draw(_lengths)} for i in range(n)]
    paged = draw(st.booleans())
    doc["allocator"] = "paged" if paged else "contiguous"
    if paged:
        if draw(st.booleans()):
            doc["prefix_caching"], doc["shared_prefix_tokens"] = True, draw(st.integers(0, 64))
        doc["samples"] = draw(st.integers(1, 3))
    for key, values in (("num_gpu_blocks", st.integers(4, 400)), ("replicas", st.integers(1, 3)),
                        ("horizon_s", st.floats(0.01, 50)), ("duration_s", st.floats(0.01, 5))):
        if draw(st.integers(0, 3)) == 0:
            doc[key] = draw(values)
    if doc["arrivals"]["kind"] == "all_at_once":
        doc.pop("duration_s", None)
    return doc


# ---------------------------------------------------------------- hostile values and edits

_hostile_values = st.one_of(
    st.sampled_from([None, True, False, -1, 0, 2**31, 2**63, 2**64, 10**30, -(2**63), 0.5, 3.5]),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 1e-300, -0.0, 1e19]),
    st.sampled_from(["", "x" * 10_000, "1e3", "nan", "inf", "true", "🙂", "[dask] {task}", "../../etc/passwd",
                     "gpu.yaml", "trace", "poisson", "fixed", "chunked", "swap", "llama-3.1-8b", "bogus"]),
    st.sampled_from([[], [1], [[[]]], [True, 2], ["a"], {}, {"a": 1}, {"dist": "fixed"}, {"kind": "trace"}]),
)


def _paths(doc, prefix=()):
    """Every (key path) in a document, lists by index."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _set(doc, path, value=None, delete=False):
    target = doc
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value


@st.composite
def hostile_documents(draw) -> dict:
    """A valid document with up to three edits: a value replaced by a hostile one, a key deleted,
    misspelled or added."""
    doc = draw(valid_documents())
    for _ in range(draw(st.integers(1, 3))):
        paths = sorted(_paths(doc), key=str)
        path = draw(st.sampled_from(paths))
        edit = draw(st.sampled_from(["value", "value", "delete", "misspell", "add"]))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        # deepcopy: sampled_from hands out the same list or dict each time; edited in place, one
        # would grow into itself and into later examples
        if edit == "value":
            _set(doc, path, copy.deepcopy(draw(_hostile_values)))
        elif isinstance(parent, dict) and edit == "delete":
            _set(doc, path, delete=True)
        elif isinstance(parent, dict) and isinstance(path[-1], str):
            name = path[-1][:-1] if edit == "misspell" else draw(st.sampled_from(["colour", "rate", "kind", "requests"]))
            parent[name] = parent.pop(path[-1]) if edit == "misspell" else copy.deepcopy(draw(_hostile_values))
    return doc


def _text_edits(text: str, draw) -> bytes:
    """The document's text with an edit only text can make: a duplicated line, an alias bomb,
    another encoding, damaged bytes, a cut."""
    edit = draw(st.sampled_from(["duplicate", "aliases", "encoding", "bytes", "cut", "tabs", "none"]))
    lines = text.splitlines()
    if edit == "duplicate":
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(draw(st.integers(0, len(lines))), lines[i])
    elif edit == "aliases":
        width, levels = draw(st.integers(2, 12)), draw(st.integers(1, 10))
        bomb = ["b0: &b0 [" + ", ".join(["x"] * width) + "]"]
        bomb += [f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * width) + "]" for i in range(1, levels)]
        key = draw(st.sampled_from(["name", "requests", "description", "seed"]))
        lines = bomb + [line for line in lines if not line.startswith(f"{key}:")] + [f"{key}: *b{levels - 1}"]
    text = "\n".join(lines) + "\n"
    if edit == "encoding":
        codec = draw(st.sampled_from(["utf-16", "utf-32", "utf-8-sig", "utf-16-le", "latin-1", "cp1252"]))
        return text.replace("fuzz", "füzz").encode(codec, errors="replace")
    raw = text.encode()
    if edit == "bytes":
        i = draw(st.integers(0, len(raw) - 1))
        return raw[:i] + draw(st.binary(min_size=1, max_size=8)) + raw[i + 1:]
    if edit == "cut":
        return raw[:draw(st.integers(0, len(raw)))]
    if edit == "tabs":
        return raw.replace(b"  ", b"\t", 1)
    return raw


# ---------------------------------------------------------------- traces

_cells = st.one_of(st.integers(1, 500), st.integers(1, 500), st.floats(0, 100),
                   st.sampled_from([0, -1, 10.5, 1e20, 2**63, "abc", "", "nan", "inf", True, None, 1.7e9]))


@st.composite
def traces(draw) -> tuple[str, bytes]:
    """(file name, contents) of a CSV or JSONL trace, mostly sound, sometimes not."""
    n = draw(st.integers(1, 30))
    epoch = draw(st.sampled_from([0.0, 0.0, 1.7e9]))
    rows = [[epoch + i * draw(st.floats(0, 2)), draw(st.integers(1, 400)), draw(st.integers(1, 60))] for i in range(n)]
    for _ in range(draw(st.integers(0, 2))):
        rows[draw(st.integers(0, n - 1))][draw(st.integers(0, 2))] = draw(_cells)
    columns = ["arrival_s", "prompt_tokens", "output_tokens"]
    if draw(st.integers(0, 9)) == 0:
        columns[draw(st.integers(0, 2))] = "colour"
    if draw(st.booleans()):
        body = ",".join(columns) + "\n" + "".join(",".join("" if v is None else str(v) for v in r) + "\n" for r in rows)
        return "trace.csv", body.encode()
    lines = [json.dumps(dict(zip(columns, r))) for r in rows]
    if draw(st.integers(0, 9)) == 0:
        lines[draw(st.integers(0, n - 1))] = draw(st.sampled_from(["5", "[1, 2]", "null", '"x"', "{", "[" * 5000]))
    return "trace.jsonl", ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------- the check

def _finite_numbers(value) -> bool:
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_numbers(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)


def _check(folder: Path, workload: bytes, gpu: bytes = b"", extra: dict | None = None) -> None:
    """Write the files, run `capsim run`, and hold the outcome to the module docstring's rules."""
    (folder / "w.yaml").write_bytes(workload)
    (folder / "gpu.yaml").write_bytes(gpu or yaml.safe_dump(ROUND_GPU).encode())
    named = {"w.yaml", "gpu.yaml"}
    for name, data in (extra or {}).items():
        (folder / name).write_bytes(data)
        named.add(name)
    out = folder / "out"
    code, stdout, err = run_main("run", folder / "w.yaml", "--json", "--out", out, "--steps")
    assert "Traceback" not in err and code in (0, 2), (code, err[-2000:])
    event("clean error" if code == 2 else "run")
    if code == 2:
        message = err.strip()
        lines = message.split("\n")  # one line per problem, at most 20 and a count of the rest
        assert message.startswith("error: ") and len(lines) <= 21, message
        for line in lines:
            assert len(line.encode()) < 1024 and any(name in line for name in named), message
        assert not out.exists()
        return
    s = json.loads(stdout)
    assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"], s
    assert _finite_numbers(s), s
    assert json.loads((out / "capsim-output.json").read_text())["kind"] == "run"
    steps = pd.read_csv(out / "steps.csv", comment="#")
    capacity = s["setup"]["kv_capacity_tokens"]
    assert (steps["kv_stored_tokens"] <= steps["kv_held_tokens"]).all()
    assert (steps["kv_held_tokens"] <= capacity).all(), capacity
    assert sorted(p.name for p in folder.iterdir()) == sorted(named | {"out"})  # nothing partial beside it


def _dump(doc) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@FUZZ
@given(doc=st.one_of(valid_documents(), hostile_documents(), hostile_documents()))
def test_workload_documents_run_cleanly_or_fail_with_one_clear_line(doc):
    with tempfile.TemporaryDirectory() as tmp:
        _check(Path(tmp), _dump(doc).encode())


@FUZZ
@given(doc=valid_documents(), data=st.data())
def test_workload_text_damaged_as_only_text_can_be(doc, data):
    gpu = yaml.safe_dump(ROUND_GPU)
    if data.draw(st.integers(0, 4)) == 0:  # the GPU profile is damaged instead
        gpu_doc = yaml.safe_load(gpu)
        _set(gpu_doc, data.draw(st.sampled_from(sorted(_paths(gpu_doc), key=str))), copy.deepcopy(data.draw(_hostile_values)))
        gpu = yaml.safe_dump(gpu_doc)
        workload = _dump(doc).encode()
    else:
        workload = _text_edits(_dump(doc), data.draw)
    with tempfile.TemporaryDirectory() as tmp:
        _check(Path(tmp), workload, gpu.encode())


@FUZZ
@given(doc=valid_documents(), trace=traces(), data=st.data())
def test_traces_replay_cleanly_or_name_the_row_and_column(doc, trace, data):
    name, contents = trace
    doc["arrivals"] = {"kind": "trace", "file": name,
                       "time_scale": data.draw(st.sampled_from([1.0, 1.0, 0.5, 3.0, 1e-6, 0.0, -1.0, math.nan]))}
    doc.pop("split", None), doc.pop("classes", None), doc.pop("requests", None)
    doc["prompt_tokens"] = {"dist": "trace"}
    doc["output_tokens"] = data.draw(st.sampled_from([{"dist": "trace"}, {"dist": "fixed", "value": 5}]))
    if data.draw(st.booleans()):
        doc["requests"] = data.draw(st.integers(1, 30))
    with tempfile.TemporaryDirectory() as tmp:
        _check(Path(tmp), _dump(doc).encode(), extra={name: contents})


# ---------------------------------------------------------------- set-up flags and config.json files

HF_DIR = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
# A small Llama-shaped config.json, so that a flag run on it takes milliseconds.
TINY_HF = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 4096}
_valid_lengths = st.one_of(st.integers(1, 400).map(str), st.sampled_from(
    ["uniform:5:50", "lognormal:30:0.6", "lognormal:30:0.6:1:200", "empirical:10=1,20=3", "sequence:5,9", "fixed:12"]))
_hostile_lengths = st.one_of(
    st.integers(-5, 0).map(str),
    st.sampled_from(["lognormal:", "uniform:5:1", "nan", "inf", "1e309", "-0", "99999999999999", "lognormal:1e309:1",
                     "normal:30:nan", "normal:30:5:50:10", "empirical:", "empirical:1=x", "empirical:3,5=2",
                     "empirical:1=0,2=0", "sequence:,", "fixed:1.5", "trace", "", ":", "🙂", "x" * 300]),
)
_length_texts = st.one_of(_valid_lengths, _valid_lengths, _valid_lengths, _hostile_lengths)
_numbers = st.sampled_from(["0", "-1", "1", "2.5", "nan", "inf", "1e309", "abc", "", "3", "100000000000"])
_set_items = st.one_of(
    st.sampled_from(["scheduler.watermark=0.02", "measure.whole_run=true", "seed=3", "schedular.kind=x", "=1", "a",
                     "a..b=1", "model.x=1", "scheduler=5", "slo=5", "tp=[1", "tp=!!python/object:os.system ls",
                     "tp=&a [*a]", "requests=99999999999999999999999", "arrivals.rate_per_s=.nan", "colour=red"]),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["scheduler.max_num_seqs", "max_model_len", "replicas", "name"]),
              st.sampled_from(["0", "-3", "8", "x", "1e3", "null", "[]", "{}"])),
)


def _rarely(draw, n: int) -> bool:
    """True about once in n + 1 draws (sampled_from draws evenly; small integers come up more)."""
    return draw(st.sampled_from([False] * n + [True]))


@st.composite
def flag_commands(draw) -> list[str]:
    """`capsim run` with no workload file: the set-up flags (model a config.json, GPU a profile
    file), lengths and loads from valid to hostile, conflicting load flags, --set items, and the
    file options pointed at good and bad places ({dir} stands for the test's folder)."""
    args = ["run", "--model", "{dir}/tiny.json", "--gpu", "{dir}/gpu.yaml", "--requests", draw(st.sampled_from(["8", "20"]))]
    for flag in ("--prompt-tokens", "--output-tokens"):
        if not _rarely(draw, 9):
            args += [flag, draw(_length_texts)]
    load = draw(st.sampled_from([["--rate", "5"], ["--users", "3", "--think-time-s", "0.2"], ["--rate", "20",
                                 "--burstiness", "0.5"], ["--rate", "5"], ["--users", "2"], ["--rate", "50"], []]))
    args += load
    for flag in ("--rate", "--users", "--think-time-s", "--burstiness"):
        if flag not in load and _rarely(draw, 11):
            args += [flag, draw(_numbers)]
    if _rarely(draw, 5):
        args += ["--arrivals", draw(st.sampled_from(["poisson", "closed_loop", "trace", "gamma", "bogus"]))]
    for item in draw(st.lists(_set_items, max_size=2)) if _rarely(draw, 2) else []:
        args += ["--set", item]
    out = draw(st.sampled_from([None, "{dir}/out"]))
    if out:
        args += ["--out", out, *draw(st.sampled_from([[], ["--steps"], ["--format", "parquet"], ["--format", "xml"]]))]
    targets = ["{dir}/file.x", "{dir}/file.x", "{dir}/new/deeper/file.x", "{dir}", "{dir}/out",
               "{dir}/out/summary.json", "{dir}/gpu.yaml/x", "/proc/capsim/x"]
    for flag in ("--trace", "--save-workload"):
        if _rarely(draw, 2):
            args += [flag, draw(st.sampled_from(targets))]
    if _rarely(draw, 5):
        args += draw(st.sampled_from([["--trace-events", "0"], ["--trace-events", "5"], ["--trace-seconds", "-1"],
                                      ["--trace-seconds", "nan"], ["--trace-seconds", "0.01"]]))
    return args


@FUZZ
@given(args=flag_commands())
def test_set_up_flags_run_cleanly_or_name_the_flag(args):
    """Every flag-only run ends as a run with sound accounting, a one-paragraph error per problem,
    or Typer's usage error for a value of the wrong type; an error writes nothing at all."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tiny.json").write_text(json.dumps(TINY_HF))
        (folder / "gpu.yaml").write_text(yaml.safe_dump(ROUND_GPU))
        code, stdout, err = run_main(*[a.replace("{dir}", tmp) for a in args], "--json")
        assert "Traceback" not in err and code in (0, 2), (code, err[-2000:])
        event("clean error" if code == 2 else "run")
        if code == 2:
            message = err.strip()
            if message.startswith("Usage:"):  # Typer: a number that does not parse, a value out of range
                assert "Error: Invalid value for '--" in message, message
            else:
                lines = message.split("\n")
                assert message.startswith("error: ") and len(lines) <= 21, message
                assert all(len(line.encode()) < 1024 for line in lines), message
                assert all("--" in line or "workload" in line or "tiny.json" in line or "gpu.yaml" in line
                           for line in lines), message
            assert sorted(p.name for p in folder.iterdir()) == ["gpu.yaml", "tiny.json"]
            return
        s = json.loads(stdout)
        assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"], s
        assert _finite_numbers(s), s
        strays = [p for p in folder.rglob("*") if ".partial-" in p.name or p.name.endswith(".tmp")]
        assert strays == []


@st.composite
def hf_config_texts(draw) -> bytes:
    """A config.json: a shipped one (or the tiny one) with up to three fields replaced by hostile
    values, deleted or added, or a document that is not a JSON object, or cut short."""
    names = sorted(p.name for p in HF_DIR.glob("*.json"))
    name = draw(st.sampled_from(["tiny", *names]))
    doc = dict(TINY_HF) if name == "tiny" else json.loads((HF_DIR / name).read_text())
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(doc) + ["layer_types", "text_config", "sliding_window_pattern"]))
        if draw(st.integers(0, 3)) == 0:
            doc.pop(key, None)
        else:
            doc[key] = copy.deepcopy(draw(_hostile_values))
    text = json.dumps(doc)  # NaN and Infinity as Python's json writes them
    shape = draw(st.sampled_from(["object"] * 6 + ["cut", "list", "string", "deep", "bytes"]))
    if shape == "cut":
        return text.encode()[:draw(st.integers(0, len(text)))]
    if shape == "bytes":
        return text.encode()[:20] + draw(st.binary(min_size=1, max_size=8))
    return {"object": text, "list": "[1, 2]", "string": '"llama"', "deep": "[" * 50_000 + "]" * 50_000}[shape].encode()


@FUZZ
@given(config=hf_config_texts(), run=st.booleans())
def test_config_json_files_read_cleanly_or_name_the_field(config, run):
    """`capsim models --from` (and a short run on it) on any config.json: a table, or one clean
    error naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_bytes(config)
        args = (["run", "--model", path, "--gpu", "h100", "--rate", "2", "--requests", "3", "--prompt-tokens", "20",
                 "--output-tokens", "4"] if run else ["models", "--from", path])
        code, _, err = run_main(*args)
        assert "Traceback" not in err and code in (0, 2), (code, err[-2000:])
        event("clean error" if code == 2 else "read")
        if code == 2:
            lines = err.strip().split("\n")
            assert lines[0].startswith("error: ") and len(lines) <= 21, err
            # the file, or (a model that does not fit the GPU, say) the workload the flags make
            assert all(len(line.encode()) < 1024 and ("config.json" in line or run and "workload" in line)
                       for line in lines), err
