"""Parallel execution: same results in task order however they run; errors come back as raised."""

import pytest
from capsim.errors import CapsimError
from capsim.planning.parallel import Runner, run_tasks
from capsim.planning.tasks import Task, evaluate
from helpers import workload


def _square(x):
    return x * x


def _fail(x):
    if x == 3:
        raise CapsimError("bad input 3")
    return x


def test_results_in_task_order_with_progress():
    ticks = []
    assert run_tasks(_square, list(range(7)), workers=2, progress=lambda d, n: ticks.append((d, n))) == [
        0, 1, 4, 9, 16, 25, 36]
    assert ticks[-1] == (7, 7) and [d for d, _ in ticks] == sorted(d for d, _ in ticks)


def test_pool_equals_serial_for_simulations(round_gpu_file):
    tasks = [Task(workload(round_gpu_file, requests=20), {"seed": s}) for s in range(4)]
    assert run_tasks(evaluate, tasks, workers=1) == run_tasks(evaluate, tasks, workers=2)


def test_a_worker_error_is_raised_here():
    with pytest.raises(CapsimError, match="bad input 3"):
        run_tasks(_fail, list(range(6)), workers=2)


def test_runner_reuses_its_pool_across_rounds():
    with Runner(workers=2) as runner:
        assert runner.map(_square, [1, 2]) == [1, 4]
        pool = runner._pool
        assert runner.map(_square, [3, 4, 5]) == [9, 16, 25] and runner._pool is pool


def test_bad_worker_count():
    with pytest.raises(CapsimError, match="--workers"):
        Runner(workers=0)


def test_unreachable_dask_scheduler_is_a_user_error(monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("capsim.planning.parallel.DASK_CONNECT_TIMEOUT_S", 1)
    with pytest.raises(CapsimError, match="--dask-scheduler"):
        run_tasks(_square, [1, 2], dask_scheduler="tcp://127.0.0.1:1")
