"""capsim.sim.clock: SimPy events at exact absolute times, in SimPy's order."""

from __future__ import annotations

from capsim.sim.clock import At, Environment


def test_events_fire_at_their_absolute_time_in_priority_then_creation_order():
    env = Environment()
    fired = []
    # 0.1 + 0.2 is not 0.3 in binary: an absolute time is kept to the bit, not rebuilt from now + delay
    for when, priority, name in [(0.1 + 0.2, 2, "late"), (0.1 + 0.2, 1, "early"), (0.3, 1, "exact"),
                                 (0.1 + 0.2, 1, "early-second")]:
        At(env, when, priority).callbacks.append(lambda _, name=name: fired.append((name, env.now)))
    env.run()
    assert fired == [("exact", 0.3), ("early", 0.1 + 0.2), ("early-second", 0.1 + 0.2), ("late", 0.1 + 0.2)]


def test_an_event_asked_for_in_the_past_fires_now():
    env = Environment()
    env.run(until=At(env, 2.0, 1))
    fired = []
    At(env, 1.0, 1).callbacks.append(lambda _: fired.append(env.now))
    env.run()
    assert fired == [2.0] and env.now == 2.0
