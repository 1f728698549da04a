"""Run independent simulations in parallel: in this process, in a local process pool, or on a
Dask distributed cluster. Results come back in task order, so output never depends on where or
in which order the simulations ran.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

from capsim.errors import CapsimError, quote
from capsim.planning.dask_probe import probe

DASK_CONNECT_TIMEOUT_S = 10
# Printed by the command line before it connects to a cluster.
DASK_WARNING = ("warning: --dask-scheduler: the cluster runs capsim's simulations on your behalf, and this process "
                "unpickles the results it sends back, which can run code here: connect only to a cluster you trust.")
# progress(done, total): called after each finished simulation.
Progress = Callable[[int, int], None]


class Runner:
    """A pool of workers kept open across rounds (a capacity search runs several).

    workers: processes on this machine (None: one per CPU core; 1: run in this process).
    dask_scheduler: address of a Dask scheduler ('tcp://host:8786'); overrides `workers`.
    """

    def __init__(self, workers: int | None = None, dask_scheduler: str | None = None) -> None:
        if workers is not None and workers < 1:
            raise CapsimError(f"--workers: must be at least 1 (got {workers}); 1 runs everything in this process.")
        self.workers = workers or os.cpu_count() or 1
        self.dask_scheduler = dask_scheduler
        self._pool: ProcessPoolExecutor | None = None
        self._client = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def map(self, fn: Callable, tasks: Sequence, progress: Progress | None = None) -> list:
        """[fn(t) for t in tasks], computed where this runner computes; errors re-raised here."""
        if not tasks:
            return []
        if self.dask_scheduler is not None:
            return self._map_dask(fn, tasks, progress)
        if self.workers == 1 or len(tasks) == 1:
            out = []
            for t in tasks:
                out.append(fn(t))
                _tick(progress, len(out), len(tasks))
            return out
        return self._map_pool(fn, tasks, progress)

    def _map_pool(self, fn: Callable, tasks: Sequence, progress: Progress | None) -> list:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=_context())
        futures = [self._pool.submit(fn, t) for t in tasks]
        pending, done_count = set(futures), 0
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    for p in pending:
                        p.cancel()
                    raise f.exception()
            done_count += len(done)
            _tick(progress, done_count, len(tasks))
        return [f.result() for f in futures]

    def _map_dask(self, fn: Callable, tasks: Sequence, progress: Progress | None) -> list:
        client = self._dask_client()
        from distributed import as_completed

        futures = client.map(fn, list(tasks), pure=False)
        for i, _ in enumerate(as_completed(futures, loop=client.loop), start=1):
            _tick(progress, i, len(tasks))
        return client.gather(futures)

    def _dask_client(self):
        if self._client is None:
            try:
                from distributed import Client
            except ImportError:
                raise CapsimError(
                    "--dask-scheduler needs Dask's distributed package: pip install 'capsim[dask]'."
                ) from None
            import dask


            probe(self.dask_scheduler, DASK_CONNECT_TIMEOUT_S)
            # Every step of Dask's own connection is timed too: connecting, and each read.
            timeouts = {"distributed.comm.timeouts.connect": f"{DASK_CONNECT_TIMEOUT_S}s",
                        "distributed.comm.timeouts.tcp": f"{3 * DASK_CONNECT_TIMEOUT_S}s"}
            try:
                with dask.config.set(timeouts):
                    self._client = Client(self.dask_scheduler, timeout=DASK_CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise CapsimError(
                    f"--dask-scheduler {quote(self.dask_scheduler)}: cannot reach a Dask scheduler there "
                    f"({str(exc)[:200]}). "
                    "Give the address `dask scheduler` prints, e.g. tcp://10.0.0.5:8786."
                ) from None
        return self._client


def run_tasks(fn: Callable, tasks: Sequence, *, workers: int | None = None, dask_scheduler: str | None = None,
              progress: Progress | None = None) -> list:
    """One-shot Runner.map: the same results, in task order, however they are computed."""
    with Runner(workers, dask_scheduler) as runner:
        return runner.map(fn, tasks, progress)


def _context():
    """fork on Linux: workers start at once with capsim already imported, and a caller's script
    needs no `if __name__ == "__main__":` guard. Elsewhere the platform's default (spawn), which
    does need that guard in scripts."""
    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _tick(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)
