"""The engine's SimPy clock: an environment that schedules at absolute times, and its event.

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
    pushed at their absolute time. (This uses the queue layout of simpy.Environment.schedule,
    unchanged since SimPy 3: (time, priority, event id, event).) The engine reads the clock from
    `_now`, where SimPy keeps it, and with one replica pulling its arrivals moves it there itself
    (Engine._run_alone): no event is queued then."""

    def schedule_at(self, event: Event, priority: int, when: float) -> None:
        queue: list = self._queue
        heappush(queue, (max(when, self._now), priority, next(self._eid), event))


class At(Event):
    """An event at an exact absolute time."""

    def __init__(self, env: Environment, when: float, priority: int) -> None:
        super().__init__(env)
        self._ok, self._value = True, None  # as simpy.Timeout does
        env.schedule_at(self, priority, when)
