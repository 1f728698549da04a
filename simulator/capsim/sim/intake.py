"""The engine's intake: where requests enter a run and which replica takes each.

`Intake` holds the arrival side of capsim.sim.engine.Engine (its base class): the open-loop
arrivals it pulls itself (one replica), the events the arrival processes of capsim.sim.arrivals
wait on, the closed-loop sends still pending and the router. The step loop is in engine.py.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Final, cast

import numpy as np
from simpy.events import Event

from capsim.core.names import REJECT_REASONS
from capsim.core.request import Request
from capsim.sim.arrivals import open_loop_request
from capsim.sim.clock import At, Environment
from capsim.sim.handoff import Handoff
from capsim.sim.outcomes import Outcomes
from capsim.sim.replica import Replica
from capsim.sim.request_log import RequestLog
from capsim.workload.streams import ClosedLoopStream, OpenLoopStream

# The order of what happens at one instant. SimPy runs same-time events by priority, then in the
# order they were made; every engine event has a fixed priority, so a macro-step's end (made when
# it starts, or when a send cuts it short) falls where the last of its single steps would, and no
# order depends on when an event was made:
#   1          arrivals and sends made earlier, outcomes, wake-ups (SimPy's NORMAL)
#   2 + i      replica i's step ends
#   2 + R      sends made at this instant (think time 0), once every step ending now has ended
#   3 + R + i  replica i plans (closed loop), once those sends have arrived
_ARRIVAL: Final = 1  # PERF: Final, so compiled it is a constant, not a look-up in the module's globals
_STEP_END: Final = 2


class InFlight:
    """A decode macro-step under way (closed loop, several replicas): what a send made during it
    may cut short."""

    def __init__(self, rep: Replica, ends, k: int, event: Event) -> None:
        self.rep = rep
        self.ends = ends  # its steps' end times (a list or an array)
        self.k = k  # steps it runs (fewer once cut)
        self.event = event  # the event its replica waits on


class Intake:
    """Requests in: arrivals, closed-loop sends, sessions and routing (see the module docstring)."""

    ROUTERS = ("round_robin", "least_outstanding", "least_kv")

    def __init__(self, replicas: list[Replica], stream: OpenLoopStream | ClosedLoopStream, macro_steps: bool,
                 router: str, handoff: Handoff | None = None) -> None:
        self.env = Environment()
        self.replicas, self.stream, self.macro_steps, self.router = replicas, stream, macro_steps, router
        # Disaggregated serving: arrivals go to the prefill pool, prefilled requests move to the
        # decode pool through `handoff` (None: every replica serves whole requests).
        self.handoff = handoff
        self.entry = [r for r in replicas if r.role != "decode"]  # the replicas arrivals are routed to
        self.decode_pool = [r for r in replicas if r.role == "decode"]
        self._rr_decode = 0
        # The serving front end's time per request and prompt token: in TTFT and E2EL, off the GPU.
        self.front_end = replicas[0].cost.front_end()
        self.requests = RequestLog(REJECT_REASONS, stream.class_names, self.front_end)
        self.outcomes = Outcomes(self.requests)
        self.arrived = 0
        self.next_index = 0  # open loop: index of the next arrival
        self._arrivals_done = False
        self._pending_sends: dict[int, float] = {}  # closed loop: user -> send time
        self._users_left = 0  # closed loop: users still sending (set when the run starts)
        self._rr = 0
        self._sessions = 0
        self.closed_loop = isinstance(stream, ClosedLoopStream)
        # One replica, open loop: nothing happens at an arrival but the queue growing, and only the
        # step loop reads the queue, so it takes the arrivals due whenever it looks (_pull) instead
        # of each arriving through its own event. Step-by-step runs keep one event per arrival.
        self.pull = macro_steps and not self.closed_loop and len(replicas) == 1
        self._arrival_list: list[float] = cast(OpenLoopStream, stream).arrival_s.tolist() if self.pull else []
        self._due = self._arrival_list[0] if self._arrival_list else math.inf  # next arrival to pull
        if self.pull and not self._arrival_list:
            self._arrivals_done = True
        num = len(replicas)
        self._send_now = _STEP_END + num  # priorities: see the order of an instant above
        self._plan_first = _STEP_END + num + 1
        # Closed loop with several replicas: a send can be made while a replica is in a macro-step
        # planned without it (another replica's request finished), so macro-steps stay cuttable;
        # so does a transfer to the decode pool, made while its replicas decode.
        self._cutting = macro_steps and (self.closed_loop or handoff is not None) and num > 1
        self._in_flight: dict[int, InFlight] = {}  # replica index -> its cuttable macro-step

    def next_arrival_s(self) -> float:
        """When a request next joins a queue: an arrival, a send, or (disaggregated) a landing."""
        if self.pull:
            return self._due
        if self.closed_loop:
            limit = cast(ClosedLoopStream, self.stream).max_requests
            if limit is not None and self.arrived >= limit:
                nxt = math.inf  # the sends still pending only end their users
            else:
                nxt = min(self._pending_sends.values(), default=math.inf)
        else:
            times = cast(OpenLoopStream, self.stream).arrival_s
            nxt = float(times[self.next_index]) if self.next_index < len(times) else math.inf
        if self.handoff is not None and self.handoff.landing_s:
            nxt = min(nxt, min(self.handoff.landing_s.values()))
        return nxt

    def at(self, when: float, user: int | None = None, planned: int = 0) -> Event:
        """An event at `when`, for arrivals and users (see the order of an instant above). A
        user's pending send time is known to the macro-step logic until it fires, and cuts short
        the macro-steps under way that it falls in. `planned`: replicas numbered below it have
        planned at this instant already (a send made by a rejection at that replica's plan)."""
        if user is None:
            return At(self.env, when, _ARRIVAL)
        event = At(self.env, when, _ARRIVAL if when > self.env.now else self._send_now)
        duration_s = cast(ClosedLoopStream, self.stream).duration_s
        if duration_s is not None and when >= duration_s:
            return event  # the user stops then, sending nothing
        self._pending_sends[user] = when
        if self._in_flight:
            self._cut(when, planned)
        sends = self._pending_sends

        def sent(_: Event) -> None:
            sends.pop(user, None)

        event.callbacks.append(sent)
        return event

    def event(self, rid: int) -> Event:
        """An event that fires with the outcome of request `rid`."""
        event = self.env.event()
        self.outcomes.wait_for(rid, event)
        return event

    def client_delay_s(self, prompt_tokens: int) -> float:
        """How much later than the engine's last token a client has the whole answer (the front
        end's time per request): a closed-loop user sends again only after that."""
        return self.front_end[0] + self.front_end[1] * prompt_tokens

    def new_session(self) -> int:
        self._sessions += 1
        return self._sessions

    def submit(self, req: Request) -> None:
        self.arrived += 1
        rep = self._route()
        req.replica = rep.index
        rep.waiting.append(req)
        _wake(rep)

    def _pull(self, now: float) -> None:
        """Submit the open-loop arrivals due by `now` (one replica: see __init__)."""
        if self._due > now:
            return
        i, times = self.next_index, self._arrival_list
        last = bisect_right(times, now, lo=i)
        waiting = self.replicas[0].waiting
        stream = cast(OpenLoopStream, self.stream)
        for j in range(i, last):
            req = open_loop_request(stream, j)
            req.replica = 0
            waiting.append(req)
        self.arrived += last - i
        self.next_index = last
        if last == len(times):
            self._due, self._arrivals_done = math.inf, True
        else:
            self._due = times[last]

    def arrivals_finished(self) -> None:
        self._arrivals_done = True
        self._wake_all()

    def user_finished(self) -> None:
        self._users_left -= 1
        if self._users_left == 0:
            self.arrivals_finished()

    def _route(self, decode: bool = False) -> Replica:
        """The replica a new request goes to (`decode`: the decode instance a handoff goes to)."""
        replicas = self.decode_pool if decode else self.entry
        if len(replicas) == 1:
            return replicas[0]
        if self.router == "least_outstanding":
            return min(replicas, key=lambda r: (len(r.waiting) + len(r.running), r.index))
        if self.router == "least_kv":
            return min(replicas, key=lambda r: (r.kv.used_units / r.kv.num_blocks, len(r.waiting), r.index))
        if decode:
            self._rr_decode += 1
            return replicas[(self._rr_decode - 1) % len(replicas)]
        rep = replicas[self._rr % len(replicas)]
        self._rr += 1
        return rep

    def _wake_all(self) -> None:
        for rep in self.replicas:
            _wake(rep)

    # ---------------------------------------------------------------- disaggregated handoff

    def _hand_off(self, rep: Replica, reqs: list[Request], now: float) -> None:
        """Prefilled requests leave their prefill instance (which keeps their KV until it has
        crossed the link) and join a decode instance's queue when their transfer lands."""
        handoff = self.handoff
        assert handoff is not None  # only prefill replicas hand off, and only with a handoff
        rep.running.remove(reqs)
        for req in reqs:
            # Strictly after now, so a landing never joins a step that has already planned.
            land = max(handoff.send(rep.index, req, now), math.nextafter(now, math.inf))
            handoff.landing_s[req.id] = land
            At(self.env, land, _ARRIVAL).callbacks.append(self._lands(rep, req))
            if self._in_flight:
                self._cut(land, 0)

    def _lands(self, sender: Replica, req: Request):
        def landed(_: Event) -> None:
            self._land(sender, req)
        return landed

    def _land(self, sender: Replica, req: Request) -> None:
        """A transfer lands: the prefill instance lets the KV go, the request queues at a decode
        instance holding all but its last prompt token's KV (the decode instance computes that
        token to sample the first output token, as vLLM's KV connectors do)."""
        handoff = self.handoff
        assert handoff is not None
        handoff.landed(req)
        sender.kv.release(req)
        sender.stored_tokens -= req.computed_tokens
        _wake(sender)
        req.computed_tokens -= 1
        dest = self._route(decode=True)
        req.replica = dest.index
        dest.landed.add(req.id)
        dest.waiting.append(req)
        _wake(dest)
        if not handoff.landing_s:  # idle decode instances may be done now
            self._wake_all()

    def _quiet(self) -> bool:
        """No request will join any queue again (disaggregated: nothing is left upstream)."""
        if not self._arrivals_done:
            return False
        if self.handoff is None:
            return True
        return not self.handoff.landing_s and all(not r.waiting and not r.running for r in self.entry)

    def _arrivals_by(self, ends: np.ndarray) -> np.ndarray:
        """How many requests will have arrived by each of these times, counting from now (one
        replica only: with more, macro-steps always stop at the next arrival)."""
        if self.closed_loop:
            sends = np.sort(np.fromiter(self._pending_sends.values(), np.float64))
            arrived = np.searchsorted(sends, ends, side="right")
            limit = cast(ClosedLoopStream, self.stream).max_requests
            return arrived if limit is None else np.minimum(arrived, limit - self.arrived)  # the rest stop
        return np.searchsorted(cast(OpenLoopStream, self.stream).arrival_s, ends, side="right") - self.next_index

    def _cut(self, when: float, planned: int) -> None:
        """A send for `when` was just made: each macro-step under way now ends with the first of
        its steps that the send can still join, as the single steps would (a send at this
        instant joins the step after the one ending now on a replica that has planned already).
        Blocks promised for the steps cut off go back."""
        now = self.env.now
        for m in self._in_flight.values():
            rep = m.rep
            if when == now and rep.index < planned:
                k = bisect_right(m.ends, when, 0, m.k) + 1
            else:
                k = bisect_left(m.ends, when, 0, m.k) + 1
            if k < m.k:
                kv = rep.kv
                kv.promise(kv.decode_need(rep.running, k) - kv.decode_need(rep.running, m.k))
                event = At(self.env, float(m.ends[k - 1]), _STEP_END + rep.index)
                event.callbacks, m.event.callbacks = m.event.callbacks, []  # the old end wakes nobody
                m.event, m.k = event, k


def _wake(rep: Replica) -> None:
    """Wake the replica if it waits idle for work."""
    if rep.wake is not None and not rep.wake.triggered:
        rep.wake.succeed()
