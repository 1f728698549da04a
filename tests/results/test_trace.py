"""The run trace (results.trace, `capsim run --trace`): valid trace-event JSON, the schema the
viewers read, counts that match the run's records, the size bound, and a tiny run checked by hand."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from capsim.api import simulate
from capsim.results.trace import TraceLimits
from helpers import REPO, run_main, unit_workload, workload, write_workload

PASSES = ("prefill pass", "decode pass", "mixed pass")
PHASES = ("queued", "prefill", "decode")


def _events(path) -> tuple[list[dict], dict]:
    doc = json.loads(path.read_text())  # strict JSON: no NaN or Infinity
    assert doc["displayTimeUnit"] == "ms"
    return doc["traceEvents"], doc["otherData"]


def _check_schema(events: list[dict]) -> None:
    """What the Chrome/Perfetto JSON importers need of each event."""
    for e in events:
        assert e["ph"] in ("X", "i", "C", "M") and isinstance(e["name"], str), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["pid"] >= 1, e
        if e["ph"] != "M":  # whole microseconds: exact edges in every viewer
            assert isinstance(e["ts"], int) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] == "t", e
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e


def _check_nesting(events: list[dict]) -> None:
    """A request's phases lie inside its slice, one after another, on its lane; its prompt chunks
    inside its prefill or decode slice, and its preemptions inside its slice."""
    lanes: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e["ph"] == "X" and e["tid"] >= 2 and e["name"] != "prefill chunk":
            lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for e in events:
        if e["tid"] >= 2 and e["name"] in ("prefill chunk", "preempted"):
            end = e["ts"] + e.get("dur", 0)
            holders = [p["name"] for p in lanes[(e["pid"], e["tid"])] if p["ts"] <= e["ts"] and end <= p["ts"] + p["dur"]]
            if e["name"] == "preempted":
                assert holders and holders[0] == e["args"]["request"], (e, holders)
            else:
                assert len(holders) == 2 and holders[1] in ("prefill", "decode"), (e, holders)
    for slices in lanes.values():
        parent = None
        for e in slices:  # in the order written: a request, then its phases
            if e["name"] not in PHASES:
                assert parent is None or e["ts"] >= parent["ts"] + parent["dur"], (parent, e)  # lanes never overlap
                parent, edge = e, e["ts"]
            else:
                assert e["ts"] == edge and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"], (parent, e)
                edge = e["ts"] + e["dur"]


@pytest.fixture
def busy_run(round_gpu_file):
    """Two replicas, a KV cache small enough to preempt, some requests too long to admit."""
    w = workload(round_gpu_file, requests=150, replicas=2, num_gpu_blocks=120,
                 prompt_tokens={"dist": "uniform", "min": 10, "max": 600})
    return simulate(w)


def test_trace_holds_every_pass_and_request_of_the_run(busy_run, tmp_path):
    info = busy_run.write_trace(tmp_path / "t.json", TraceLimits(max_events=10**7))
    events, other = _events(tmp_path / "t.json")
    _check_schema(events)
    _check_nesting(events)
    s, steps, reqs = busy_run.summary, busy_run.steps, busy_run.requests
    assert info == other and other["cut"] is None and other["events"] == sum(e["ph"] != "M" for e in events)
    assert other["passes"] == other["passes_in_run"] == s["num_steps"] == len(steps)
    assert other["requests"] == other["requests_in_run"] == s["arrived"] == len(reqs)
    names = Counter(e["name"] for e in events if e["ph"] != "M")
    assert sum(names[n] for n in PASSES) == len(steps)
    served = reqs["outcome"] != "rejected"
    assert sum(1 for e in events if e["ph"] == "X" and e["name"].startswith("r")) == served.sum() > 0
    rejected = [e for e in events if e["ph"] == "i" and e["name"].startswith("rejected")]
    assert len(rejected) == s["rejected"] > 0
    assert Counter(e["args"]["reason"] for e in rejected) == s["rejected_reasons"]
    preempt = [e for e in events if e["name"] == "preempted" and e["tid"] == 0]
    assert sum(e["args"]["count"] for e in preempt) == steps["preempted"].sum() == s["preemptions"] > 0
    assert {e["pid"] for e in events} == {1, 2}
    # a pass's args are its step row's
    first = min((e for e in events if e["name"] in PASSES and e["pid"] == 1), key=lambda e: e["ts"])
    row = steps[steps["replica"] == 0].iloc[0]
    assert first["args"]["batch"] == row["num_seqs"]
    assert first["args"]["tokens"] == row["prefill_tokens"] + row["decode_tokens"]
    assert first["dur"] == pytest.approx(row["duration_s"] * 1e6, abs=1)


def test_counters_change_with_the_step_rows(busy_run, tmp_path):
    busy_run.write_trace(tmp_path / "t.json", TraceLimits(max_events=10**7))
    events, _ = _events(tmp_path / "t.json")
    steps = busy_run.steps
    for replica in (0, 1):
        rows = steps[steps["replica"] == replica]
        waiting = [e["args"]["requests"] for e in events if e["ph"] == "C" and e["name"] == "waiting"
                   and e["pid"] == replica + 1]
        values = rows["waiting"].to_numpy()
        changes = values[np.concatenate(([True], values[1:] != values[:-1]))]
        assert waiting == changes.tolist()
        kv = [e for e in events if e["ph"] == "C" and e["name"].startswith("KV used") and e["pid"] == replica + 1]
        assert kv[0]["name"] == "KV used (blocks of 120)" and max(e["args"]["used"] for e in kv) == rows["kv_used_units"].max()


def test_event_limit_cuts_at_a_time_and_says_so(busy_run, tmp_path):
    info = busy_run.write_trace(tmp_path / "t.json", TraceLimits(max_events=500))
    events, other = _events(tmp_path / "t.json")
    _check_schema(events)
    _check_nesting(events)
    timed = [e for e in events if e["ph"] != "M"]
    cut_us = other["cut"]["at_s"] * 1e6
    assert 0 < len(timed) <= 500 and info["events"] == len(timed)
    assert "500 events" in other["cut"]["why"] and all(e["ts"] < cut_us for e in timed)
    steps = busy_run.steps
    assert other["passes"] == (np.round((steps["end_s"] - steps["duration_s"]) * 1e6) < cut_us).sum() < len(steps)
    assert other["requests"] == (np.round(busy_run.requests["arrival_s"] * 1e6) < cut_us).sum() < len(busy_run.requests)


def test_seconds_limit(busy_run, tmp_path):
    busy_run.write_trace(tmp_path / "t.json", TraceLimits(until_s=0.05))
    events, other = _events(tmp_path / "t.json")
    assert other["cut"]["at_s"] == 0.05 and "0.05 s" in other["cut"]["why"]
    assert all(e["ts"] < 50_000 for e in events if e["ph"] != "M")
    assert other["requests"] == (np.round(busy_run.requests["arrival_s"] * 1e6) < 50_000).sum()


def test_tiny_run_by_hand(round_gpu_file, tmp_path):
    """Unit mode (every pass 10 ms), one slot, 10-token prompts, 3 output tokens, arrivals every
    25 ms: r0 runs 0-30 ms (a prefill pass that gives the first token, two decode passes); r1
    arrives at 25 ms and waits for the slot until 30 ms, so its lane is a second one; r2 arrives at
    50 ms, after r0 left, and takes r0's lane."""
    w = unit_workload(round_gpu_file, requests=3, arrivals={"kind": "constant", "rate_per_s": 40.0},
                      output_tokens={"dist": "fixed", "value": 3},
                      scheduler={"kind": "continuous", "max_num_seqs": 1, "block_size": 4})
    simulate(w).write_trace(tmp_path / "t.json")
    events, other = _events(tmp_path / "t.json")
    passes = [(e["name"], e["ts"], e["dur"]) for e in events if e["name"] in PASSES]
    assert passes == [("prefill pass", 0.0, 10000.0), ("decode pass", 10000.0, 10000.0),
                      ("decode pass", 20000.0, 10000.0), ("prefill pass", 30000.0, 10000.0),
                      ("decode pass", 40000.0, 10000.0), ("decode pass", 50000.0, 10000.0),
                      ("prefill pass", 60000.0, 10000.0), ("decode pass", 70000.0, 10000.0),
                      ("decode pass", 80000.0, 10000.0)]
    lanes = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["tid"] >= 2]
    assert lanes[-3:] == [("prefill chunk", 2, 0, 10000), ("prefill chunk", 3, 30000, 10000),
                          ("prefill chunk", 2, 60000, 10000)]  # each prompt in one chunk, as long as its prefill
    assert lanes[:-3] == [("r0", 2, 0.0, 30000.0), ("prefill", 2, 0.0, 10000.0), ("decode", 2, 10000.0, 20000.0),
                     ("r1", 3, 25000.0, 35000.0), ("queued", 3, 25000.0, 5000.0), ("prefill", 3, 30000.0, 10000.0),
                     ("decode", 3, 40000.0, 20000.0),
                     ("r2", 2, 50000.0, 40000.0), ("queued", 2, 50000.0, 10000.0), ("prefill", 2, 60000.0, 10000.0),
                     ("decode", 2, 70000.0, 20000.0)]
    waiting = [(e["ts"], e["args"]["requests"]) for e in events if e["name"] == "waiting"]
    # the queue after each pass: r1 waits from 25 ms (the pass ending at 30 ms), r2 from 50 ms
    assert waiting == [(10000.0, 0), (30000.0, 1), (40000.0, 0), (60000.0, 1), (70000.0, 0)]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {(1, 0): "forward passes", (1, 2): "slot 0", (1, 3): "slot 1"}  # nothing rejected: no such track
    assert other["passes"] == 9 and other["requests"] == 3 and other["cut"] is None


def test_cli_trace_option(round_gpu_file, tmp_path):
    path = write_workload(tmp_path / "w.yaml", workload(round_gpu_file, requests=30))
    code, _, err = run_main("run", path, "--trace", tmp_path / "sub" / "t.json", "--trace-events", "100")
    assert code == 0, err
    events, other = _events(tmp_path / "sub" / "t.json")
    assert sum(e["ph"] != "M" for e in events) <= 100 and other["cut"] is not None
    assert "t.json: " in err and "stops at" in err
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["t.json"]  # nothing partial beside it
    code, _, err = run_main("run", path, "--trace", tmp_path)
    assert code == 2 and "is a folder" in err
    # into the --out folder: written with it and listed in its manifest, so the folder can be replaced
    for _ in range(2):
        code, _, err = run_main("run", path, "--out", tmp_path / "o", "--trace", tmp_path / "o" / "trace.json")
        assert code == 0, err
    manifest = json.loads((tmp_path / "o" / "capsim-output.json").read_text())
    assert manifest["files"] == ["requests.csv", "summary.json", "trace.json"]
    for bad, says in (("summary.json", "name the trace otherwise"), ("x/t.json", "written whole")):
        code, _, err = run_main("run", path, "--out", tmp_path / "o", "--trace", tmp_path / "o" / bad)
        assert code == 2 and says in err, err


def test_a_per_macro_step_run_gives_a_slice_per_macro_step(round_gpu_file, tmp_path, monkeypatch):
    from capsim.sim import step_log

    monkeypatch.setattr(step_log, "LARGE_RUN_STEPS", 10)
    run = simulate(workload(round_gpu_file))
    assert run.steps_per_row
    info = run.write_trace(tmp_path / "t.json", TraceLimits(max_events=10**7))
    events, _ = _events(tmp_path / "t.json")
    _check_schema(events)
    slices = [e for e in events if e["name"] in PASSES]
    assert len(slices) == len(run.steps) and sum(e["args"]["passes"] for e in slices) == run.summary["num_steps"]
    assert info["passes"] == run.summary["num_steps"]


def test_requests_unfinished_at_the_horizon_end_there(round_gpu_file, tmp_path):
    run = simulate(unit_workload(round_gpu_file, requests=120, horizon_s=1.0))
    unfinished = run.requests[run.requests["outcome"] == "unfinished"]
    assert len(unfinished) > 0
    run.write_trace(tmp_path / "t.json")
    events, other = _events(tmp_path / "t.json")
    _check_schema(events)
    _check_nesting(events)
    ends = {e["name"]: e["ts"] + e["dur"] for e in events if e["ph"] == "X" and e["tid"] >= 2 and e["name"][0] == "r"}
    assert all(ends[f"r{rid}"] == 1_000_000 for rid in unfinished["request_id"])
    assert other["requests"] == run.summary["arrived"]


def test_step_parts_are_read_as_far_as_the_limits_need():
    """Parts in end-time order; replica 1's long pass starts before the time limit but ends in a
    later part, so reading stops only once every replica has passed the limit."""
    from capsim.results.trace_steps import read_steps

    def part(ends, durations, replicas):
        n = len(ends)
        zeros = np.zeros(n, np.int32)
        return {"end_s": np.array(ends, float), "duration_s": np.array(durations, float),
                "replica": np.array(replicas, np.int16), "num_seqs": zeros + 1, "prefill_tokens": zeros,
                "decode_tokens": zeros + 1, "bound": np.zeros(n, np.int8), "kv_used_units": zeros,
                "waiting": zeros, "preempted": zeros}

    parts = [part([1.0, 2.0], [1.0, 1.0], [0, 0]), part([3.0, 4.0], [1.0, 1.0], [0, 0]),
             part([4.5, 5.0], [4.0, 1.0], [1, 0]), part([6.0], [1.0], [1])]
    steps = read_steps(iter(parts), 100, 2.5, replicas=2)
    assert (steps.start_us / 1e6).tolist() == [0.0, 1.0, 2.0, 0.5] and not steps.truncated
    steps = read_steps(iter(parts), 3, None, replicas=2)
    assert len(steps.start_us) == 3 and steps.truncated and steps.horizon_us == 3e6


def test_disaggregated_replicas_are_named_by_pool(tmp_path):
    run = simulate(REPO / "workloads" / "disaggregated.yaml", requests=60)
    run.write_trace(tmp_path / "t.json")
    names = {e["args"]["name"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
             if e.get("name") == "process_name"}
    pools = run.summary["disaggregated"]
    prefill, decode = (len(pools[p]["busy_share_per_replica"]) for p in ("prefill", "decode"))
    assert {f"prefill replica {k}" for k in range(prefill)} <= names and "decode replica 0" in names
    assert not any(n.startswith("replica ") for n in names) and decode >= 1


def test_chunked_prefill_by_hand(round_gpu_file, tmp_path):
    """Unit mode (every pass 10 ms), a token budget of 16 and one 48-token prompt: three chunks
    of 16 tokens, 0-10, 10-20 and 20-30 ms, nested in the prefill slice from 0 to 30 ms."""
    w = unit_workload(round_gpu_file, requests=1, prompt_tokens={"dist": "fixed", "value": 48},
                      output_tokens={"dist": "fixed", "value": 2},
                      scheduler={"kind": "chunked", "max_num_seqs": 4, "max_num_batched_tokens": 16, "block_size": 4})
    run = simulate(w)
    chunks = run.prefill_chunks
    assert chunks["request_id"].tolist() == [0, 0, 0] and chunks["tokens"].tolist() == [16, 16, 16]
    assert np.allclose(chunks["start_s"], [0.0, 0.01, 0.02]) and np.allclose(chunks["end_s"], [0.01, 0.02, 0.03])
    run.write_trace(tmp_path / "t.json")
    events, other = _events(tmp_path / "t.json")
    _check_schema(events)
    _check_nesting(events)
    lane = [(e["name"], e["ts"], e["dur"], e["args"]) for e in events if e["ph"] == "X" and e["tid"] == 2]
    assert lane == [("r0", 0, 40000, lane[0][3]), ("prefill", 0, 30000, {"passes": 3}),
                    ("decode", 30000, 10000, {"generated_tokens": 2}),
                    ("prefill chunk", 0, 10000, {"tokens": 16}), ("prefill chunk", 10000, 10000, {"tokens": 16}),
                    ("prefill chunk", 20000, 10000, {"tokens": 16})]
    assert other["events"] == sum(e["ph"] != "M" for e in events)


def test_preemptions_show_on_the_requests_lanes(busy_run, tmp_path):
    """Each preempted request gets a "preempted" instant on its lane per preemption, at the start
    of a pass whose planning preempted it; the chunks add up to the prompt tokens the passes computed."""
    req = busy_run.requests
    assert req["preemptions"].sum() > 0  # the fixture's small KV cache preempts
    assert len(busy_run.preemptions) == req["preemptions"].sum()
    assert busy_run.prefill_chunks["tokens"].sum() == busy_run.steps["prefill_tokens"].sum()
    busy_run.write_trace(tmp_path / "t.json", TraceLimits(max_events=10**7))
    events, other = _events(tmp_path / "t.json")
    _check_schema(events)
    _check_nesting(events)
    instants = Counter(e["args"]["request"] for e in events if e["name"] == "preempted" and e["tid"] >= 2)
    assert instants == Counter({f"r{rid}": n for rid, n in zip(req["request_id"], req["preemptions"]) if n})
    pass_instants = Counter()
    for e in events:
        if e["name"] == "preempted" and e["tid"] == 0:
            pass_instants[(e["pid"], e["ts"])] += e["args"]["count"]
    assert Counter((e["pid"], e["ts"]) for e in events if e["name"] == "preempted" and e["tid"] >= 2) == pass_instants
    # a request computes its prompt and whatever a preemption dropped, plus, when that happened
    # after its first token, the one token it then samples from (counted as prompt by the step log)
    chunk_tokens = busy_run.prefill_chunks.groupby("request_id")["tokens"].sum()
    least = (req["prompt_tokens"] + req["recomputed_tokens"]).set_axis(req["request_id"])
    served = req["request_id"][req["outcome"] != "rejected"]
    assert (chunk_tokens.reindex(served) >= least[served]).all()
    assert (chunk_tokens.reindex(served) <= least[served] + req["preemptions"].set_axis(req["request_id"])[served]).all()
    assert sum(e["name"] == "prefill chunk" for e in events) == len(busy_run.prefill_chunks)
    assert other["events"] == sum(e["ph"] != "M" for e in events)


def test_event_limit_counts_chunks_and_preemptions(busy_run, tmp_path):
    """The chunks and preemption instants count towards --trace-events like every other event."""
    whole = busy_run.write_trace(tmp_path / "all.json", TraceLimits(max_events=10**7))
    limit = whole["events"] // 2
    info = busy_run.write_trace(tmp_path / "t.json", TraceLimits(max_events=limit))
    events, _ = _events(tmp_path / "t.json")
    assert info["cut"] is not None and info["events"] == sum(e["ph"] != "M" for e in events) <= limit
    assert any(e["name"] == "prefill chunk" for e in events)
