"""Where requests come from: the open-loop arrival process and closed-loop users (with multi-turn
sessions). Both are generator processes run by the engine; they wait on events the engine makes
(`engine.at`, `engine.event`) and hand requests to it, through the few services `Sink` names (the
engine implements them; this module does not import it). With one replica and open-loop arrivals,
a macro-stepping engine instead submits the arrivals due whenever a step ends, with
open_loop_request (Engine._pull)."""

from __future__ import annotations

from typing import Protocol

from simpy.events import Event

from capsim.core.request import Request
from capsim.sim.clock import Environment
from capsim.workload.streams import ClosedLoopStream, OpenLoopStream


class Sink(Protocol):
    """What the arrival processes need from the engine (capsim.sim.engine.Engine)."""

    env: Environment
    arrived: int  # requests submitted so far (the next request's id)
    next_index: int  # open loop: the index of the next arrival, kept where the engine reads it

    def at(self, when: float, user: int | None = None, planned: int = 0) -> Event:
        """An event at `when` (a user's send, when `user` is given)."""

    def event(self, rid: int) -> Event:
        """An event that fires with the outcome of request `rid`."""

    def client_delay_s(self, prompt_tokens: int) -> float:
        """The front end's time per request: the client has the answer that much after the engine."""

    def new_session(self) -> int: ...

    def submit(self, req: Request) -> None: ...

    def arrivals_finished(self) -> None: ...

    def user_finished(self) -> None: ...


def open_loop(engine: Sink, stream: OpenLoopStream):
    """Submit every request of the stream at its arrival time, each through its own event."""
    times = stream.arrival_s
    for i in range(len(times)):
        t = float(times[i])
        if t > engine.env.now:
            yield engine.at(t)
        engine.next_index = i + 1
        engine.submit(open_loop_request(stream, i))
    engine.arrivals_finished()


def open_loop_request(stream: OpenLoopStream, i: int) -> Request:
    """The stream's i-th request."""
    c = stream.class_index.item(i)  # item(): a Python number straight away, no numpy scalar
    return Request(i, stream.arrival_s.item(i), stream.prompt_tokens.item(i), stream.output_tokens.item(i),
                   class_index=c, shared_prefix_tokens=stream.class_prefix[c], samples=stream.class_samples[c],
                   prompt_id=None if stream.prompt_set is None else i % stream.prompt_set)


def user(engine: Sink, stream: ClosedLoopStream, index: int):
    """One closed-loop user: start at its place in the ramp, send, wait for the whole answer,
    think, send again. With turns_per_session > 1 each turn's prompt is the session so far
    (earlier prompts and answers) plus a new message, and the session id lets the prefix cache
    find that history."""
    history, turn, session, cls, prompt = 0, 0, None, 0, 0
    first = True
    planned = 0  # replicas that planned at this instant before the last request's rejection
    start = stream.start_s(index)
    if start > 0:
        yield engine.at(start, user=index)
    while True:
        if not first:  # the answer reaches the user after the front end's time; then the user thinks
            yield engine.at(engine.env.now + engine.client_delay_s(prompt) + stream.think(), user=index, planned=planned)
        now = engine.env.now
        if (stream.duration_s is not None and now >= stream.duration_s) or \
                (stream.max_requests is not None and engine.arrived >= stream.max_requests):
            break
        drawn, output, drawn_cls = stream.lengths(engine.arrived)
        if turn == 0:
            cls, history = drawn_cls, stream.class_prefix[drawn_cls]
            session = engine.new_session() if stream.turns_per_session > 1 else None
        prompt = history + drawn
        req = Request(engine.arrived, now, prompt, output, user=index, class_index=cls,
                      shared_prefix_tokens=stream.class_prefix[cls], session=session,
                      samples=stream.class_samples[cls], first_of_user=first,
                      prompt_id=None if stream.prompt_set is None else engine.arrived % stream.prompt_set)
        first = False
        done = engine.event(req.id)
        engine.submit(req)
        outcome = yield done
        turn = (turn + 1) % stream.turns_per_session
        history = prompt + output
        planned = 0
        if outcome != "completed":
            turn = 0  # a rejected turn ends the session
            planned = req.replica  # rejected while its replica planned (Engine.at)
    engine.user_finished()
