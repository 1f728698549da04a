"""sim/intake.py: where requests enter a run. Routing across replicas, the arrivals a one-replica
open-loop engine pulls itself, and the stream's requests as the arrival processes build them."""

import math

import pytest
from capsim.api import build_replica, resolve
from capsim.sim.arrivals import open_loop_request
from capsim.sim.intake import Intake
from capsim.workload.streams import build_stream
from helpers import make_request, workload


def _intake(gpu_file, replicas=1, router="round_robin", macro_steps=True, **fields):
    w = workload(gpu_file, replicas=replicas, router=router, **fields)
    setup = resolve(w)
    stream = build_stream(w)
    reps = [build_replica(setup, i, num_classes=len(stream.class_names)) for i in range(replicas)]
    return Intake(reps, stream, macro_steps, router), stream


def test_round_robin_takes_replicas_in_turn(round_gpu_file):
    intake, _ = _intake(round_gpu_file, replicas=3)
    for i in range(7):
        intake.submit(make_request(rid=i))
    assert [len(r.waiting) for r in intake.replicas] == [3, 2, 2]
    assert [q.replica for r in intake.replicas for q in r.waiting] == [0, 0, 0, 1, 1, 2, 2]
    assert intake.arrived == 7


def test_least_outstanding_fills_the_emptiest_replica_lowest_index_first(round_gpu_file):
    intake, _ = _intake(round_gpu_file, replicas=3, router="least_outstanding")
    intake.replicas[0].waiting.extend([make_request(rid=100), make_request(rid=101)])
    intake.replicas[2].waiting.append(make_request(rid=102))
    for i in range(3):
        intake.submit(make_request(rid=i))
    # replica 1 (0 queued) takes the first; then 1 and 2 tie at 1: replica 1 by index; then replica 2
    assert [len(r.waiting) for r in intake.replicas] == [2, 2, 2]


def test_one_open_loop_replica_pulls_the_arrivals_due(round_gpu_file):
    intake, stream = _intake(round_gpu_file, requests=10)
    assert intake.pull and intake.next_arrival_s() == stream.arrival_s[0]
    t = float(stream.arrival_s[3])
    intake._pull(t)  # the first four (arrival times sorted) are due by the fourth's arrival
    waiting = intake.replicas[0].waiting
    assert [r.id for r in waiting] == [0, 1, 2, 3] and intake.arrived == 4 and intake.next_index == 4
    assert intake.next_arrival_s() == stream.arrival_s[4]
    intake._pull(math.inf)
    assert intake.arrived == 10 and intake.next_arrival_s() == math.inf and intake._arrivals_done


def test_step_by_step_or_several_replicas_never_pull(round_gpu_file):
    assert not _intake(round_gpu_file, macro_steps=False)[0].pull
    assert not _intake(round_gpu_file, replicas=2)[0].pull
    closed = {"kind": "closed_loop", "users": 2, "think_time_s": 0.1}
    assert not _intake(round_gpu_file, arrivals=closed)[0].pull


def test_a_stream_request_carries_its_arrival_lengths_and_class(round_gpu_file):
    _, stream = _intake(round_gpu_file, requests=5)
    req = open_loop_request(stream, 2)
    assert req.id == 2 and req.arrival_s == stream.arrival_s[2]
    assert (req.prompt_tokens, req.output_tokens) == (stream.prompt_tokens[2], stream.output_tokens[2])
    assert isinstance(req.prompt_tokens, int) and isinstance(req.arrival_s, float)  # Python numbers, not numpy


def test_sessions_are_numbered_from_one(round_gpu_file):
    intake, _ = _intake(round_gpu_file)
    assert [intake.new_session() for _ in range(3)] == [1, 2, 3]


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv"])
def test_every_router_sends_each_request_to_exactly_one_replica(round_gpu_file, router):
    intake, _ = _intake(round_gpu_file, replicas=2, router=router)
    for i in range(6):
        intake.submit(make_request(rid=i))
    ids = sorted(q.id for r in intake.replicas for q in r.waiting)
    assert ids == list(range(6)) and intake.arrived == 6
