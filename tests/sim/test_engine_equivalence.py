"""Macro-steps (and, with one replica and open-loop arrivals, pulled arrivals) against the plain
reference, one SimPy event per step and per arrival (`macro_steps=False`), over every
combination the engine supports: the summary JSON, the requests table and the steps table must
be identical, byte for byte; the accounting holds (arrived = completed + rejected + unfinished,
stored <= held <= capacity), and after the run the allocators check out and, with no horizon,
every block and every byte of swap space is back.

The axes: arrivals (poisson, gamma, constant, all_at_once, trace; closed loop with and without
think time, fixed or exponential, multi-turn sessions, ramped or not), request count or
duration, horizon or none; 1-4 replicas and every router; every scheduler, both allocators and
reservations, block sizes, KV from tight (preemption by recompute or swap, full swap space,
rejections) to plenty, token budgets, max_model_len; prefix caching with shared prefixes and
sessions; parallel samples; request classes; speculative decoding with and without a draft
model; serving-engine profiles, one with multi-step scheduling and one with an overlap scheduler; a sliding-window and
linear-attention model; tensor parallelism; KV-cache format; realistic, document and unit mode.
Combinations resolve() refuses (KV sharing on contiguous reservations) are not drawn.

Each example is a small workload on the tiny model and the round-number GPU (tests/helpers.py),
so a run takes milliseconds; unit mode (every step the same length) makes step ends, arrivals
and think times tie often, which is where orderings differ if anything does.
"""

from functools import partial

import numpy as np
import pytest
from capsim.api.pools import build_pools, resolve_pools
from capsim.sim.engine import Engine
from capsim.api import build_replica, resolve, simulate
from capsim.workload.streams import build_stream
from helpers import TINY_MODEL, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# The tiny model with one layer of each token mixer: a sliding window (macro-steps stop where a
# context passes it) and linear attention (a recurrent state per sequence in the KV budget).
TINY_HYBRID = dict(TINY_MODEL, name="tiny-hybrid", num_layers=3, layers={"full": 1, "sliding": 1, "linear": 1},
                   sliding_window_tokens=48, linear_attention={"num_key_heads": 2, "num_value_heads": 2,
                                                               "key_head_dim": 50, "value_head_dim": 50})
TRACE_ROWS = [(0.0, 40, 5), (0.0, 90, 12), (0.0005, 30, 30), (0.001, 70, 3), (0.001, 15, 40), (0.004, 120, 9),
              (0.004, 60, 1), (0.01, 20, 25), (0.0125, 100, 18), (0.02, 55, 7), (0.02, 35, 33), (0.03, 80, 11)]


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in TRACE_ROWS))
    return str(path)


def _arrivals(draw, mode: str):
    kind = draw(st.sampled_from(["poisson", "gamma", "constant", "all_at_once", "trace"] + ["closed_loop"] * 4))
    if kind == "closed_loop":
        # unit mode: whole 1 ms steps, so sends tie with step ends
        think = draw(st.sampled_from([0.0, 0.001, 0.002, 0.005] if mode == "unit" else [0.0, 0.0005, 0.002, 0.01]))
        arrivals = {"kind": "closed_loop", "users": draw(st.integers(1, 7)), "think_time_s": think,
                    "think_time_dist": draw(st.sampled_from(["fixed", "exponential"])),
                    "turns_per_session": draw(st.sampled_from([1, 1, 2, 3]))}
        ramp = draw(st.sampled_from([None, None, 0.0, 4 * think or 0.003]))
        if ramp is not None:
            arrivals["ramp_s"] = ramp
        return arrivals
    if kind == "all_at_once":
        return {"kind": kind}
    if kind == "trace":
        return {"kind": kind, "file": "TRACE", "time_scale": draw(st.sampled_from([1.0, 0.1]))}
    rate = draw(st.sampled_from([250.0, 1000.0, 4000.0] if mode == "unit" else [200.0, 2000.0, 20000.0]))
    arrivals = {"kind": kind, "rate_per_s": rate}
    if kind == "gamma":
        arrivals["burstiness"] = draw(st.sampled_from([0.2, 1.0, 4.0]))
    return arrivals


def _lengths(draw, paged: bool) -> dict:
    how = draw(st.sampled_from(["uniform", "uniform", "sequence", "classes"]))
    if how == "sequence":  # lengths Hypothesis picks one by one (and shrinks towards small ones)
        return {"prompt_tokens": {"dist": "sequence", "values": draw(st.lists(st.integers(1, 250), min_size=1, max_size=8))},
                "output_tokens": {"dist": "sequence", "values": draw(st.lists(st.integers(1, 120), min_size=1, max_size=8))}}
    if how == "uniform":
        return {"prompt_tokens": {"dist": "uniform", "min": 1, "max": draw(st.sampled_from([20, 120, 300]))},
                "output_tokens": {"dist": "uniform", "min": 1, "max": draw(st.sampled_from([3, 30, 80, 250]))}}
    classes = [{"name": "short", "weight": 3, "prompt_tokens": {"dist": "uniform", "min": 1, "max": 60},
                "output_tokens": {"dist": "uniform", "min": 1, "max": 20}},
               {"name": "long", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 50, "max": 400},
                "output_tokens": {"dist": "uniform", "min": 1, "max": 60},
                "shared_prefix_tokens": draw(st.sampled_from([None, 0, 24])),
                "samples": draw(st.sampled_from([None, 1, 3])) if paged else None}]
    return {"prompt_tokens": None, "output_tokens": None,
            "classes": [{k: v for k, v in c.items() if v is not None} for c in classes]}


def _server(draw, mode: str) -> dict:
    """Model, serving-engine profile, scheduler, allocator, KV memory, replicas and router."""
    kind = draw(st.sampled_from(["static", "continuous", "chunked"]))
    block_size = draw(st.sampled_from([1, 4, 16]))
    paged = kind != "static" if draw(st.booleans()) else draw(st.booleans())
    return {
        "model": dict(draw(st.sampled_from([TINY_MODEL, TINY_MODEL, TINY_HYBRID]))), "tp": draw(st.sampled_from([1, 1, 2])),
        "kv_cache": draw(st.sampled_from(["fp16", "fp16", "fp8"])),
        "engine": draw(st.sampled_from([None, None, None, "vllm", "vllm@0.6-ms10", "sglang@0.4"])) if mode == "realistic" else None,
        "scheduler": {"kind": kind, "max_num_seqs": draw(st.integers(1, 8)), "block_size": block_size,
                      "max_num_batched_tokens": draw(st.sampled_from([16, 64, 512])) if kind == "chunked" else 4096,
                      "preemption": draw(st.sampled_from(["recompute", "swap"]))},
        "allocator": "paged" if paged else "contiguous",
        "reserve": draw(st.sampled_from(["max_model_len", "request"])),
        # KV tokens from a few requests' worth (preemption, swapping, rejections) to plenty
        "num_gpu_blocks": draw(st.sampled_from([500, 1500, 6000, 50_000])) // (block_size if paged else 1),
        "swap_space_gib": draw(st.sampled_from([4.0, 1e-4])),  # room for all, or for a few blocks
        "max_model_len": draw(st.sampled_from([2048, 2048, 600, 150])),  # 150: some requests are rejected
        "replicas": draw(st.integers(1, 4)),
        "router": draw(st.sampled_from(["round_robin", "least_outstanding", "least_kv"])),
        # sharing KV needs paged blocks (resolve() refuses it with contiguous reservations)
        "prefix_caching": draw(st.booleans()) if paged else False,
        "samples": draw(st.sampled_from([1, 1, 2, 3])) if paged else 1,
    }


def _under_pressure(draw, fields: dict, mode: str) -> None:
    """Little KV, long answers, several requests at once: decodes outgrow the memory, so requests
    are preempted (and swapped)."""
    block_size = fields["scheduler"]["block_size"]
    fields.update(num_gpu_blocks=draw(st.sampled_from([500, 1000])) // block_size, requests=draw(st.integers(8, 30)),
                  prompt_tokens={"dist": "uniform", "min": 1, "max": 120},
                  output_tokens={"dist": "uniform", "min": 1, "max": 250}, classes=None)
    fields["scheduler"].update(max_num_seqs=draw(st.integers(4, 8)),
                               preemption=draw(st.sampled_from(["swap", "swap", "recompute"])))
    arrivals = fields["arrivals"]
    if "rate_per_s" in arrivals:
        arrivals["rate_per_s"] = 4000.0 if mode == "unit" else 20000.0
    if arrivals["kind"] == "closed_loop":
        arrivals["users"] = max(arrivals["users"], 4)


@st.composite
def workloads(draw) -> dict:
    """The fields of one workload (on top of helpers.workload's defaults)."""
    mode = draw(st.sampled_from(["realistic", "realistic", "unit", "document"]))
    fields = _server(draw, mode)
    paged = fields["allocator"] == "paged"
    fields.update(mode=mode, unit_step_s=0.001, seed=draw(st.integers(0, 10_000)),
                  shared_prefix_tokens=draw(st.sampled_from([0, 0, 8, 40])), requests=draw(st.integers(1, 30)),
                  horizon_s=draw(st.sampled_from([None, None, None, 0.004, 0.02])), arrivals=_arrivals(draw, mode))
    if mode == "unit" and fields["horizon_s"] is not None:
        fields["horizon_s"] *= 2.5  # mid-step and on step ends alike
    # A duration instead of a request count; not for users without think time, who resend a
    # rejected request at the same instant (requests that are all rejected would never end).
    arrivals = fields["arrivals"]
    if arrivals["kind"] not in ("all_at_once", "trace") and arrivals.get("think_time_s") != 0.0 \
            and draw(st.integers(0, 4)) == 0:
        fields["requests"], fields["duration_s"] = None, (0.004 if mode != "unit" else 0.01)
    fields.update(_lengths(draw, paged))
    if not paged and fields["reserve"] == "max_model_len":  # room for two reservations at least
        fields["num_gpu_blocks"] = max(fields["num_gpu_blocks"], 2 * fields["max_model_len"])
    if paged and draw(st.integers(0, 2)) == 0:
        _under_pressure(draw, fields, mode)
    if arrivals["kind"] == "trace":
        fields.update(prompt_tokens={"dist": "trace"}, output_tokens={"dist": "trace"}, classes=None)
    if draw(st.integers(0, 3)) == 0:
        fields["speculative"] = {"draft_tokens": draw(st.integers(1, 4)),
                                 "acceptance_rate": draw(st.sampled_from([0.3, 0.8, 1.0])),
                                 **({"draft_model": "llama-2-7b"} if draw(st.booleans()) else {})}
    return fields


def _build(gpu_file: str, trace: str, fields: dict):
    fields = dict(fields)
    if fields["arrivals"]["kind"] == "trace":
        fields["arrivals"] = dict(fields["arrivals"], file=trace)
    return workload(gpu_file, **fields)


def assert_same(w) -> None:
    """Both engines on workload w: every record identical, accounting and memory invariants held."""
    macro, step = simulate(w, macro_steps=True), simulate(w, macro_steps=False)
    assert macro.summary_json() == step.summary_json()
    assert macro.requests.to_csv() == step.requests.to_csv()
    assert macro.steps.to_csv() == step.steps.to_csv()
    assert macro.prefill_chunks.to_csv() == step.prefill_chunks.to_csv()
    assert macro.preemptions.to_csv() == step.preemptions.to_csv()
    s, steps = macro.summary, macro.steps
    # every prompt token a pass computed is in one chunk; every preemption is in a request's row
    # (a group's row counts all its samples', those still running at the horizon included)
    assert macro.prefill_chunks["tokens"].sum() == steps["prefill_tokens"].sum()
    assert len(macro.preemptions) == macro.requests["preemptions"].sum()
    assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"] == len(macro.requests)
    capacity_units = s["setup"]["num_gpu_blocks"]
    capacity_tokens = s["setup"]["kv_capacity_tokens"]
    assert (steps["kv_stored_tokens"] <= steps["kv_held_tokens"]).all()
    assert (steps["kv_held_tokens"] <= capacity_tokens).all() and (steps["kv_used_units"] <= capacity_units).all()
    if w.horizon_s is None:
        assert s["unfinished"] == 0
    done = macro.requests[macro.requests["outcome"] == "completed"]
    assert (done["generated_tokens"] == done["output_tokens"]).all()
    assert np.all(np.diff(steps["end_s"].to_numpy()) >= 0)
    assert_memory_returned(w)


def assert_memory_returned(w) -> None:
    """The allocators' own invariants after a run, and with no horizon every block and every
    byte of swap space back (cached prefixes count as free)."""
    setup, stream = resolve(w), build_stream(w)
    build = partial(build_replica, num_classes=len(stream.class_names))
    if w.serving is not None:
        replicas, handoff = build_pools(resolve_pools(w, "test", None), build)
    else:
        replicas, handoff = [build(setup, i) for i in range(w.replicas * w.pp * w.ep)], None
    Engine(replicas, stream, horizon_s=w.horizon_s, router=w.router, handoff=handoff).run()
    for rep in replicas:
        rep.kv.check()
        if w.horizon_s is None:
            assert rep.kv.used_units == 0 and rep.stored_tokens == 0 and not rep.running and not rep.waiting
            assert rep.swap is None or rep.swap.used_bytes == 0


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=workloads())
def test_macro_steps_equal_step_by_step_everywhere(round_gpu_file, trace_file, fields):
    w = _build(round_gpu_file, trace_file, fields)
    assert_same(w)


@st.composite
def disaggregated_workloads(draw) -> dict:
    """The same workloads served by a prefill pool and a decode pool (1-3 instances each, their
    own TP and KV), over a link from instant to slow, so landings tie with step ends and queue."""
    fields = draw(workloads())
    fields.pop("speculative", None)  # not modelled across the handoff (resolve() refuses it)
    replicas = fields.pop("replicas")
    tp = draw(st.sampled_from([1, 1, 2]))
    blocks = fields.get("num_gpu_blocks")
    fields["serving"] = {"disaggregated": {
        "prefill": {"replicas": replicas if replicas < 4 else 1, "tp": tp},
        "decode": {"replicas": draw(st.integers(1, 3)), "num_gpu_blocks": draw(st.sampled_from([blocks, blocks, 2 * blocks]))},
        "link": {"bandwidth_bytes_per_s": draw(st.sampled_from([1e8, 1e9, 1e12])),
                 "latency_s": draw(st.sampled_from([0.0, 0.0, 1e-3])), "per_transfer_s": draw(st.sampled_from([0.0, 1e-3]))},
    }}
    return fields


@st.composite
def pipelined_workloads(draw) -> dict:
    """The same workloads on a 4-layer model cut into 2-4 pipeline stages (uneven at 3), each
    replica running pp virtual engines."""
    fields = draw(workloads())
    fields.pop("speculative", None)  # not modelled with pp (resolve() refuses it)
    fields["model"] = dict(TINY_MODEL, name="tiny4", num_layers=4)
    fields["pp"] = draw(st.sampled_from([2, 3, 4]))
    fields["pp_link"] = draw(st.sampled_from([None, {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4}]))
    fields["num_gpu_blocks"] = fields["num_gpu_blocks"] * fields["pp"]  # each virtual engine gets 1/pp
    return fields


@st.composite
def expert_parallel_workloads(draw) -> dict:
    """The same workloads on a 2-layer model of 8 experts (2 per token) spread over 2 or 4 ranks."""
    fields = draw(workloads())
    fields.pop("speculative", None)
    fields["model"] = dict(TINY_MODEL, name="tiny-moe", num_layers=2,
                           moe={"num_experts": 8, "experts_per_token": 2, "expert_intermediate_size": 1000})
    fields.update(tp=1, ep=draw(st.sampled_from([2, 4])),
                  ep_link=draw(st.sampled_from([None, {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4}])))
    return fields


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.one_of(disaggregated_workloads(), pipelined_workloads(), expert_parallel_workloads()))
def test_macro_steps_equal_step_by_step_in_every_deployment_shape(round_gpu_file, trace_file, fields):
    w = _build(round_gpu_file, trace_file, fields)
    assert_same(w)
