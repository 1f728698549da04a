"""The engine's SimPy clock: an environment that schedules at absolute times, and its event.

The only module that touches SimPy's private attributes, for two reasons: an event queued at an
exact absolute time (`schedule_at`: SimPy only offers now + delay, and a float sum cannot reach
every float), and the count of events a run took (`events_scheduled`). Both rely on the layout of
simpy.Environment (`_queue` entries (time, priority, event id, event), `_now`, the `_eid` counter),
unchanged since SimPy 3; pyproject.toml pins SimPy to the release series this is tested against.

Kept apart from capsim.sim.engine because the engine is compiled with mypyc (setup.py), and a
compiled class cannot extend SimPy's Python classes safely; these two stay plain Python.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import Event


class Environment(simpy.Environment):
    """SimPy's environment, able to schedule at an absolute time.

    SimPy schedules at now + delay, and a float sum cannot reach every float: a macro-step
    summed once and k steps summed one by one must end on the same bits, so step ends are
    pushed at their absolute time."""

    def schedule_at(self, event: Event, priority: int, when: float) -> None:
        queue: list = self._queue
        heappush(queue, (max(when, self._now), priority, next(self._eid), event))

    def events_scheduled(self) -> int:
        """How many events were scheduled so far (SimPy numbers them with a counter; this takes
        the next number, so call it once, when the run is over)."""
        return next(self._eid)


class At(Event):
    """An event at an exact absolute time."""

    def __init__(self, env: Environment, when: float, priority: int) -> None:
        super().__init__(env)
        self._ok, self._value = True, None  # as simpy.Timeout does
        env.schedule_at(self, priority, when)
