"""How requests end (capsim.sim.outcomes): one row per request, a parallel-sample group written
once when its last sample ends, and the closed-loop user waiting on a request told its outcome."""

from capsim.sim.outcomes import Outcomes
from capsim.sim.request_log import OUTCOMES, RequestLog
from helpers import make_request


class Waiter:
    """Stands in for the SimPy event a closed-loop user waits on."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def succeed(self, value: str) -> None:
        self.told.append(value)


def _rows(log: RequestLog) -> list[tuple]:
    cols = log.columns()
    return list(zip(cols["request_id"].tolist(), cols["outcome"].tolist(), cols["finish_s"].tolist(),
                    cols["preemptions"].tolist()))


def test_a_plain_request_is_written_once_and_its_user_is_told():
    log = RequestLog(("too_long",))
    outcomes, waiter = Outcomes(log), Waiter()
    r = make_request(10, 5, rid=7)
    r.finish_s = 2.0
    outcomes.wait_for(7, waiter)
    outcomes.finish(r, "completed")
    assert len(log) == 1 and waiter.told == ["completed"]
    outcomes.finish(make_request(10, 5, rid=8), "rejected", "too_long")  # nobody waits on this one
    assert len(log) == 2 and waiter.told == ["completed"]


def test_a_sample_group_is_one_row_when_its_last_sample_ends():
    log = RequestLog(())
    outcomes, waiter = Outcomes(log), Waiter()
    parent = make_request(10, 5, rid=1, samples=3)
    a, b = (make_request(10, 5, rid=rid, parent=1) for rid in (2, 3))
    outcomes.wait_for(1, waiter)
    outcomes.forked(parent, 3)
    parent.preemptions, a.preemptions, b.preemptions = 1, 1, 2
    for req, finish_s in ((parent, 3.0), (b, 3.5), (a, 4.0)):  # the prompt's own answer ends first
        req.finish_s = finish_s
        outcomes.finish(req, "completed")
        if req is not a:
            assert len(log) == 0 and waiter.told == []
    # The group finishes with its last sample and carries every sample's preemptions.
    assert _rows(log) == [(1, OUTCOMES.index("completed"), 4.0, 1 + 1 + 2)]
    assert waiter.told == ["completed"]


def test_a_group_cut_by_the_horizon_is_one_unfinished_row():
    log = RequestLog(())
    outcomes = Outcomes(log)
    parent = make_request(10, 5, rid=1, samples=2)
    sample = make_request(10, 5, rid=2, parent=1)
    outcomes.forked(parent, 2)
    outcomes.unfinished(sample)
    outcomes.unfinished(parent)  # the group is already written
    alone = make_request(10, 5, rid=3)
    outcomes.unfinished(alone)
    rows = _rows(log)
    assert [(rid, code) for rid, code, _, _ in rows] == [(1, OUTCOMES.index("unfinished")), (3, OUTCOMES.index("unfinished"))]


def test_a_group_cut_by_the_horizon_counts_every_samples_preemptions():
    log = RequestLog(())
    outcomes = Outcomes(log)
    parent = make_request(10, 5, rid=1, samples=3)
    done, running = (make_request(10, 5, rid=rid, parent=1) for rid in (2, 3))
    outcomes.forked(parent, 3)
    parent.preemptions, done.preemptions, running.preemptions = 1, 2, 4
    done.finish_s = 1.0
    outcomes.finish(done, "completed")  # one sample ended before the horizon
    outcomes.unfinished_all([running, parent])  # the row is closed by the still-running sample
    assert _rows(log)[0][1:] == (OUTCOMES.index("unfinished"), 1.0, 1 + 2 + 4)
