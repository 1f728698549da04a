"""Disaggregated prefill/decode (capsim.sim.handoff, the handoff in capsim.sim.intake, the pools in
capsim.api.pools): a transfer time by hand, TTFT made of the prefill step, the transfer and the
decode side's first step, the bytes moved, every request accounted for, the cost of both pools,
and the config errors. Macro-steps against step-by-step are in test_engine_equivalence.py.

The tiny model holds 1 layer x 10 KV heads x 100 dims x 2 (K and V) x 2 bytes = 4,000 KV bytes per
token on one GPU (2,000 per GPU at TP 2).
"""

import numpy as np
import pytest
from capsim.api import simulate
from capsim.errors import CapsimError
from capsim.sim.handoff import Handoff
from capsim.spec.shapes import Link, link_catalog
from helpers import TINY_MODEL, workload

# 1 GB/s, 1 ms latency, 2 ms per transfer: 100 tokens (400 kB) hold the link 2.4 ms and land 3.4 ms
# after they are sent.
SLOW_LINK = {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3, "per_transfer_s": 2e-3}


def _disagg(gpu: str, prefill: dict | None = None, decode: dict | None = None, link=None, **fields):
    serving = {"disaggregated": {"prefill": prefill or {}, "decode": decode or {}, "link": link or SLOW_LINK}}
    return workload(gpu, serving=serving, **fields)


def test_a_transfer_time_by_hand():
    link = Link(**SLOW_LINK)
    assert link.transfer_s(400_000) == pytest.approx(2.4e-3)
    handoff = Handoff(link.achieved_bytes_per_s, link.latency_s, link.per_transfer_s, 4000.0)
    assert handoff.link_s(100) == pytest.approx(2.4e-3)
    assert Link(bandwidth_bytes_per_s=1e9, efficiency=0.5).transfer_s(1e9) == pytest.approx(2.0)


def test_transfers_from_one_instance_queue_on_its_link():
    from capsim.core.request import Request

    handoff = Handoff(1e9, 1e-3, 2e-3, 4000.0)
    a, b, c = (Request(i, 0.0, 100, 5, computed_tokens=100) for i in range(3))
    assert handoff.send(0, a, 1.0) == pytest.approx(1.0034)
    assert handoff.send(0, b, 1.001) == pytest.approx(1.0058)  # waits for a to leave the link (1.0024)
    assert handoff.send(1, c, 1.001) == pytest.approx(1.0044)  # another instance's link is free
    cols = handoff.records.columns()
    assert cols["queue_s"].tolist() == pytest.approx([0.0, 0.0014, 0.0])
    assert cols["bytes"].tolist() == [400_000.0] * 3


def test_every_catalogue_link_names_the_source_of_its_bandwidth():
    links = link_catalog()
    assert {"nvlink4", "pcie-gen4-x16", "pcie-gen5-x16", "rdma-100g", "rdma-200g", "rdma-400g", "tcp-25gbe"} <= set(links)
    for link in links.values():
        assert "bandwidth_bytes_per_s" in link.sources


def test_ttft_holds_the_prefill_step_the_transfer_and_the_first_decode_step(round_gpu_file):
    """Requests far apart (constant 20/s): nothing queues, so each TTFT is exactly its prefill
    step, 3.4 ms of transfer, and the decode instance's step computing the last prompt token."""
    w = _disagg(round_gpu_file, prompt_tokens={"dist": "fixed", "value": 100},
                output_tokens={"dist": "fixed", "value": 5}, arrivals={"kind": "constant", "rate_per_s": 20.0},
                requests=10)
    run = simulate(w)
    req, steps = run.requests, run.steps
    prefill = steps[steps["replica"] == 0]
    decode = steps[steps["replica"] == 1]
    assert len(prefill) == 10 and (prefill["prefill_tokens"] == 100).all()  # each prompt in one step
    first_decode = decode[decode["prefill_tokens"] == 1]  # the last prompt token, computed where it decodes
    assert len(first_decode) == 10
    expected = prefill["duration_s"].to_numpy() + 3.4e-3 + first_decode["duration_s"].to_numpy()
    ttft = (req["first_token_s"] - req["arrival_s"]).to_numpy()
    assert ttft == pytest.approx(expected, rel=1e-9)
    t = run.summary["disaggregated"]["transfers"]
    assert t["count"] == 10 and t["bytes"] == 10 * 100 * 4000
    assert t["p50_transfer_ms"] == pytest.approx(3.4) and t["max_link_queue_ms"] == 0.0


def test_ttft_is_at_least_prefill_plus_transfer_under_load(round_gpu_file):
    """Busy 1P1D: TTFT >= the duration of the prefill step that finished the prompt + its transfer
    time (sent to landed, link queue included)."""
    from capsim.api.pools import build_pools, resolve_pools
    from capsim.api.run import build_replica
    from capsim.sim.engine import Engine
    from capsim.workload.streams import build_stream

    w = _disagg(round_gpu_file, requests=60, arrivals={"kind": "poisson", "rate_per_s": 3000.0})
    stream = build_stream(w)
    replicas, handoff = build_pools(resolve_pools(w, "test", None), build_replica)
    engine = Engine(replicas, stream, handoff=handoff)
    engine.run()
    reqs, steps, moves = engine.requests.columns(), engine.steps.columns(replicas[-1].cost.decode_detail), handoff.records.columns()
    assert len(moves["id"]) == 60
    prefill_end = {float(e): float(d) for e, d, r in zip(steps["end_s"], steps["duration_s"], steps["replica"]) if r == 0}
    first = dict(zip(reqs["request_id"].tolist(), (reqs["first_token_s"] - reqs["arrival_s"]).tolist()))
    arrival = dict(zip(reqs["request_id"].tolist(), reqs["arrival_s"].tolist()))
    for rid, sent, land in zip(moves["id"].tolist(), moves["sent_s"], moves["land_s"]):
        step_s = prefill_end[float(sent)]  # the prompt's last prefill step ends when the transfer starts
        assert first[rid] >= step_s + (land - sent) - 1e-12
        assert sent - arrival[rid] >= step_s - 1e-12
    # each at least its own link time (2 ms + bytes at 1 GB/s) plus 1 ms latency; some waited for the link
    alone = 2e-3 + moves["bytes"] / 1e9 + 1e-3
    assert np.all(moves["land_s"] - moves["sent_s"] >= alone - 1e-12)
    assert np.all(moves["land_s"] - moves["sent_s"] == pytest.approx(alone + moves["queue_s"]))
    assert moves["queue_s"].max() > 0


@pytest.mark.parametrize("horizon_s", [None, 0.005, 0.02])
def test_every_request_is_completed_rejected_or_unfinished(round_gpu_file, horizon_s):
    """Tight KV on the decode side (admission waits for it, some requests do not fit at all),
    two prefill and two decode instances, a horizon cutting transfers short."""
    w = _disagg(round_gpu_file, prefill={"replicas": 2}, decode={"replicas": 2, "num_gpu_blocks": 60},
                horizon_s=horizon_s, requests=50, max_model_len=300,
                prompt_tokens={"dist": "uniform", "min": 10, "max": 280},
                output_tokens={"dist": "uniform", "min": 1, "max": 60}, router="least_outstanding")
    s = simulate(w).summary
    assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"]
    if horizon_s is None:
        assert s["arrived"] == 50 and s["unfinished"] == 0 and s["completed"] > 0
        assert s["rejected"] > 0  # prompts over 240 tokens never fit 60 blocks of 4
    else:
        assert s["unfinished"] > 0


def test_tp_shards_and_cost_count_both_pools(round_gpu_file):
    w = _disagg(round_gpu_file, prefill={"replicas": 1, "tp": 2}, decode={"replicas": 3, "tp": 1},
                prompt_tokens={"dist": "fixed", "value": 50}, requests=20)
    s = simulate(w, price=2.0).summary
    d = s["disaggregated"]
    assert d["prefill"]["gpus"] == 2 and d["decode"]["gpus"] == 3
    assert s["gpus"] == 5 and s["usd_per_hour"] == pytest.approx(10.0)
    # TP 1 on the decode side: its GPUs take a whole token's KV (4,000 bytes) each
    assert d["transfers"]["bytes"] == 20 * 50 * 4000
    assert 0 < d["prefill"]["busy_share"] <= 1 and 0 < d["decode"]["busy_share"] <= 1
    assert d["decode"]["mean_batch_seqs"] >= 1


def test_config_errors_name_the_field(round_gpu_file):
    with pytest.raises(CapsimError, match="prefill.replicas"):
        _disagg(round_gpu_file, replicas=2)
    with pytest.raises(CapsimError, match="speculative"):
        _disagg(round_gpu_file, speculative={"draft_tokens": 2, "acceptance_rate": 0.5})
    with pytest.raises(CapsimError, match="unknown link 'rdma-300g'.*rdma-"):
        simulate(_disagg(round_gpu_file, link="rdma-300g"))
    with pytest.raises(CapsimError, match="bandwidth_bytes_per_s"):
        _disagg(round_gpu_file, link={"latency_s": 1e-3})


def test_a_pool_may_be_pipelined(round_gpu_file):
    """A 2-stage prefill pool runs 2 virtual engines (indices 0-1), the decode pool's instance is 2."""
    tiny4 = dict(TINY_MODEL, name="tiny4", num_layers=4)
    w = _disagg(round_gpu_file, prefill={"pp": 2}, model=tiny4, requests=20)
    run = simulate(w, price=1.0)
    d = run.summary["disaggregated"]
    assert (d["prefill"]["replicas"], d["prefill"]["pp"], d["prefill"]["gpus"], d["decode"]["gpus"]) == (1, 2, 2, 1)
    assert run.summary["gpus"] == 3 and run.summary["completed"] == 20
    assert set(run.steps["replica"]) == {0, 1, 2}
