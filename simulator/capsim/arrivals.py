"""Where requests come from: the open-loop arrival process and closed-loop users (with multi-turn
sessions). Both are generator processes run by the engine; they wait on events the engine makes
(`engine.at`, `engine.event`), so SimPy itself stays in engine.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsim.request import Request

if TYPE_CHECKING:
    from capsim.engine import Engine
    from capsim.workload import ClosedLoopStream, OpenLoopStream


def open_loop(engine: Engine, stream: OpenLoopStream):
    """Submit every request of the stream at its arrival time."""
    times, prompts, outputs, classes = stream.arrival_s, stream.prompt_tokens, stream.output_tokens, stream.class_index
    prefix, samples = stream.class_prefix, stream.class_samples
    for i in range(len(times)):
        t = float(times[i])
        if t > engine.env.now:
            yield engine.at(t)
        engine.next_index = i + 1
        c = int(classes[i])
        engine.submit(Request(i, t, int(prompts[i]), int(outputs[i]), class_index=c,
                              shared_prefix_tokens=prefix[c], samples=samples[c]))
    engine.arrivals_finished()


def user(engine: Engine, stream: ClosedLoopStream, index: int):
    """One closed-loop user: send, wait for the whole answer, think, send again. With
    turns_per_session > 1 each turn's prompt is the session so far (earlier prompts and answers)
    plus a new message, and the session id lets the prefix cache find that history."""
    history, turn, session, cls = 0, 0, None, 0
    first = True
    while True:
        if not first:
            yield engine.at(engine.env.now + stream.think(), user=index)
        first = False
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
                      samples=stream.class_samples[cls])
        done = engine.event(req.id)
        engine.submit(req)
        outcome = yield done
        turn = (turn + 1) % stream.turns_per_session
        history = prompt + output
        if outcome != "completed":
            turn = 0  # a rejected turn ends the session
    engine.user_finished()
