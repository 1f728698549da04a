"""The SimPy processes: arrivals (open or closed loop) and one step loop per replica.

Each replica repeats DESIGN §2's loop: plan = scheduler.schedule(...); cost = cost_model(...);
wait cost.seconds; apply(plan). Time passes only here. A decode-only plan that the scheduler marks
repeatable for k steps is advanced in one wait (a macro-step) unless `macro_steps=False`; its
per-step times, token times and records are the ones k single steps would produce, because both
go through CostModel.decode_steps and the same integer bookkeeping, and because a macro-step ends
with the step an arrival could join: the next arrival known when it starts, or a closed-loop send
made while it runs (another replica's request finished), which cuts it short (Engine._cut).
tests/test_engine_equivalence.py runs randomised workloads over every feature both ways and
compares every record. `macro_steps=False` is the plain reference: one event per step and one
per arrival. With one replica and open-loop arrivals the step loop is the only process: it pulls
the arrivals due and its waits move the clock directly (`_run_alone`), with SimPy's ordering and
horizon rule.

`pip install .` compiles this module and the others a step runs through with mypyc (setup.py):
keep their annotations true (mypyc checks them at run time) and keep classes that extend SimPy's
in capsim.sim.clock, which stays plain Python.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Final, cast

import numpy as np
import simpy
from simpy.events import Event

from capsim.sim.arrivals import open_loop, open_loop_request, user
from capsim.sim.clock import At, Environment
from capsim.core.names import BOUNDS, REJECT_REASONS
from capsim.sim.outcomes import Outcomes
from capsim.core.plan import StepPlan
from capsim.sim.replica import Replica
from capsim.core.request import Request
from capsim.sim.request_log import GapLog, RequestLog
from capsim.sim.step_log import StepLog
from capsim.workload.streams import ClosedLoopStream, OpenLoopStream

# The order of what happens at one instant. SimPy runs same-time events by priority, then in the
# order they were made; every engine event has a fixed priority, so a macro-step's end (made when
# it starts, or when a send cuts it short) falls where the last of its single steps would, and no
# order depends on when an event was made:
#   1          arrivals and sends made earlier, outcomes, wake-ups (SimPy's NORMAL)
#   2 + i      replica i's step ends
#   2 + R      sends made at this instant (think time 0), once every step ending now has ended
#   3 + R + i  replica i plans (closed loop), once those sends have arrived
_ARRIVAL: Final = 1  # Final: compiled, a constant instead of a look-up in the module's globals
_STEP_END: Final = 2
PROGRESS_EVERY = 4096  # step-loop iterations between two progress reports (a few per second)


class InFlight:
    """A decode macro-step under way (closed loop, several replicas): what a send made during it
    may cut short."""

    def __init__(self, rep: Replica, ends, k: int, event: Event) -> None:
        self.rep = rep
        self.ends = ends  # its steps' end times (a list or an array)
        self.k = k  # steps it runs (fewer once cut)
        self.event = event  # the event its replica waits on


class Engine:
    ROUTERS = ("round_robin", "least_outstanding", "least_kv")

    def __init__(self, replicas: list[Replica], stream: OpenLoopStream | ClosedLoopStream,
                 horizon_s: float | None = None, macro_steps: bool = True, router: str = "round_robin",
                 progress: Callable[[int, int | None], None] | None = None) -> None:
        self.env = Environment()
        self.replicas, self.stream, self.horizon_s, self.macro_steps = replicas, stream, horizon_s, macro_steps
        self.router = router
        # progress(requests finished, requests in the workload or None) every PROGRESS_EVERY
        # iterations of the step loops (capsim run's progress bar); it only reads.
        self.progress = progress
        self._loops = 0
        self.total_requests = stream.max_requests if isinstance(stream, ClosedLoopStream) else len(stream)
        self.requests = RequestLog(REJECT_REASONS, stream.class_names)
        self.outcomes = Outcomes(self.requests)
        self.num_classes = len(stream.class_names)
        kv = replicas[0].kv
        self.steps = StepLog(kv.block_size, replicas[0].running.schedule, paged=kv.kind == "paged")
        self.gaps = GapLog()
        self.arrived = 0
        self.next_index = 0  # open loop: index of the next arrival
        self._arrivals_done = False
        self._pending_sends: dict[int, float] = {}  # closed loop: user -> send time
        self._rr = 0
        self._sessions = 0
        self._sample_ids = 1 << 40  # forked samples get ids no arrival has
        self._clock_stops = 0  # pull mode: the step loop's waits (SimPy counts its own events)
        # After run(): the events the run took, its real work: each wait of a step loop (a step,
        # a macro-step, an idle wait) plus each arrival or send that was an event of its own.
        self.events = 0
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
        # planned without it (another replica's request finished), so macro-steps stay cuttable.
        self._cutting = macro_steps and self.closed_loop and num > 1
        self._in_flight: dict[int, InFlight] = {}  # replica index -> its cuttable macro-step

    # ---------------------------------------------------------------- running

    def run(self) -> float:
        """Simulate until every request is done (or the horizon); returns the end time."""
        env = self.env
        if self.closed_loop:
            users = cast(ClosedLoopStream, self.stream)
            self._users_left = users.users
            for u in range(users.users):
                env.process(user(self, users, u))
        elif not self.pull:
            env.process(open_loop(self, cast(OpenLoopStream, self.stream)))
        if self.pull:
            self._run_alone(self.replicas[0])
        else:
            loops = [env.process(self._replica_loop(r)) for r in self.replicas]
            env.run(until=self.horizon_s if self.horizon_s is not None else simpy.AllOf(env, loops))
        self.events = self._clock_stops + next(env._eid)  # SimPy numbers its events with a counter
        if self.pull and self.horizon_s is not None:  # arrived during the step the horizon cut short
            self._pull(math.nextafter(self.horizon_s, -math.inf))
        for rep in self.replicas:
            for req in list(rep.running.decoders()) + list(rep.waiting):
                self.outcomes.unfinished(req)
        return env.now

    def _run_alone(self, rep: Replica) -> None:
        """Pull mode: the step loop is the only process, so its waits need no event queue. It
        yields the time it waits for and the clock moves there, stopping as SimPy's
        run(until=horizon) does: before anything due at the horizon, with the clock at it."""
        env, horizon = self.env, self.horizon_s
        for when in self._replica_loop(rep):
            if horizon is not None and when >= horizon:
                break
            if when > env._now:  # SimPy's clock (capsim.sim.clock): no event queued, the only process moves it
                env._now = when
            self._clock_stops += 1
        if horizon is not None:
            env._now = max(horizon, env._now)

    def _wait(self, when: float, priority: int):
        """What the step loop yields to wait until `when`: an event for SimPy, or in pull mode
        the time itself (see _run_alone)."""
        return when if self.pull else At(self.env, when, priority)

    def next_arrival_s(self) -> float:
        if self.pull:
            return self._due
        if self.closed_loop:
            limit = cast(ClosedLoopStream, self.stream).max_requests
            if limit is not None and self.arrived >= limit:
                return math.inf  # the sends still pending only end their users
            return min(self._pending_sends.values(), default=math.inf)
        times = cast(OpenLoopStream, self.stream).arrival_s
        return float(times[self.next_index]) if self.next_index < len(times) else math.inf

    @property
    def swapped_bytes(self) -> float:
        return sum(r.swap.total_bytes for r in self.replicas if r.swap)

    @property
    def prompt_tokens_admitted(self) -> int:
        return sum(r.prompt_tokens_admitted for r in self.replicas)

    @property
    def prefill_tokens_saved(self) -> int:
        return sum(r.prefill_tokens_saved for r in self.replicas)

    # ---------------------------------------------------------------- services for arrivals.py

    def at(self, when: float, user: int | None = None, planned: int = 0) -> Event:
        """An event at `when`, for arrivals and users (see the order of an instant above). A
        user's pending send time is known to the macro-step logic until it fires, and cuts short
        the macro-steps under way that it falls in. `planned`: replicas numbered below it have
        planned at this instant already (a send made by a rejection at that replica's plan)."""
        if user is None:
            return At(self.env, when, _ARRIVAL)
        event = At(self.env, when, _ARRIVAL if when > self.env._now else self._send_now)
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

    def new_session(self) -> int:
        self._sessions += 1
        return self._sessions

    def submit(self, req: Request) -> None:
        self.arrived += 1
        rep = self._route()
        req.replica = rep.index
        rep.waiting.append(req)
        if rep.wake is not None and not rep.wake.triggered:
            rep.wake.succeed()

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

    def _route(self) -> Replica:
        """The replica a new request goes to."""
        replicas = self.replicas
        if len(replicas) == 1:
            return replicas[0]
        if self.router == "least_outstanding":
            return min(replicas, key=lambda r: (len(r.waiting) + len(r.running), r.index))
        if self.router == "least_kv":
            return min(replicas, key=lambda r: (r.kv.used_units / r.kv.num_blocks, len(r.waiting), r.index))
        rep = replicas[self._rr % len(replicas)]
        self._rr += 1
        return rep

    def _wake_all(self) -> None:
        for rep in self.replicas:
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()

    # ---------------------------------------------------------------- the step loop

    def _replica_loop(self, rep: Replica):
        env = self.env
        while True:
            if self.progress is not None:
                self._loops += 1
                if not self._loops % PROGRESS_EVERY:
                    self.progress(len(self.requests), self.total_requests)
            if self.closed_loop:  # let same-time sends (think time 0) arrive before planning
                yield At(env, env._now, self._plan_first + rep.index)
            if not rep.waiting and not rep.running:
                if self._arrivals_done:
                    return
                yield from self._idle(rep)
                continue
            plan = rep.scheduler.schedule(rep.waiting, rep.running, rep.kv)
            self._start(rep, plan)
            if plan.is_empty:
                if self._arrivals_done and not rep.running and not plan.rejected:
                    raise RuntimeError("scheduler made no progress with nothing running (a capsim bug)")
                if not plan.rejected:
                    yield from self._idle(rep)
                continue
            if plan.decode_only:
                yield from self._decode(rep, plan)
            else:
                yield from self._step(rep, plan)

    def _idle(self, rep: Replica):
        """Wait for an arrival (or, pushed arrivals, for whatever wakes the replica)."""
        if self.pull:
            when = self.next_arrival_s()
            if when == math.inf:
                raise RuntimeError("scheduler made no progress and no request will arrive (a capsim bug)")
            yield self._wait(when, 1)
            self._pull(when)
            return
        rep.wake = self.env.event()
        yield rep.wake
        rep.wake = None

    def _start(self, rep: Replica, plan: StepPlan) -> None:
        """The plan's bookkeeping before the pass: rejections, preemptions, admissions, memory."""
        if plan.decode_only:
            return  # nothing to admit, preempt or allocate: decode blocks are promised in _decode
        # SimPy's clock read as the attribute it keeps it in: `env.now` is a property, a
        # Python call from compiled code, several per step (capsim.sim.clock says which internals are used).
        now, running, kv = self.env._now, rep.running, rep.kv
        for _ in range(len(plan.admitted) + len(plan.rejected)):
            rep.waiting.popleft()
        for req, reason in plan.rejected:
            self.outcomes.finish(req, "rejected", reason)
        if plan.preempted:
            rep.preempt(plan.preempted)
        if plan.admitted:
            for req in plan.admitted:
                if req.first_scheduled_s is None:
                    req.first_scheduled_s = now
            rep.admit(plan.admitted, plan.cached_blocks)
        explicit_decoders = [r for r in plan.scheduled if running.is_decoder(r)]
        for req in explicit_decoders:  # slow path: they advance one by one this step
            running.stop_decoding(req)
        if not plan.decode_all and running.num_decoding:  # slow path: decoders it skips go stale
            rep.stale = {r.id: r.last_token_s for r in running.decoders() if running.is_decoder(r)}
        elif explicit_decoders:
            rep.stale = {}
        for req, n in zip(plan.scheduled, plan.new_tokens):
            kv.allocate(req, req.computed_tokens + n)

    def _step(self, rep: Replica, plan: StepPlan):
        """One general forward pass (prefill, mixed, or decodes listed one by one)."""
        now, running, kv = self.env._now, rep.running, rep.kv
        if plan.num_decodes:
            context, sliding = running.decode_context(1)
            cost = rep.cost.step_cost(plan, context, sliding)
        else:
            cost = rep.cost.step_cost(plan)
        if rep.swap_bytes_this_step:  # the copies over PCIe hold up this step
            assert rep.swap is not None  # only swapping replicas copy over PCIe
            cost = rep.cost.with_overhead(cost, rep.swap_bytes_this_step / rep.swap.link_bytes_per_s)
            rep.swap_bytes_this_step = 0.0
        if plan.num_decodes:
            kv.promise(kv.decode_need(running, 1))
        end = now + cost.seconds
        yield self._wait(end, _STEP_END + rep.index)
        if self._due <= end:  # arrivals due by the step's end count in its queue length
            self._pull(end)
        gained = running.tokens_ahead(1) if plan.num_decodes else 0
        finished = []
        emitters = 0
        if plan.num_decodes:
            running.advance(1, end)
            emitters = self._step_gaps(rep, now, end)
            finished = running.finishing()  # decoders with all their tokens at this tick
        cut = running.overshoot(finished)
        prefill = 0
        emitting = []
        for req, n in zip(plan.scheduled, plan.new_tokens):
            if not req.is_decoding:
                prefill += n
            req.computed_tokens += n
            if kv.caching:
                kv.register(req)
            if req.computed_tokens == req.known_tokens:
                emitting.append(req)
        rep.stored_tokens += plan.num_tokens + plan.num_decodes * (gained - 1) - cut
        self._emit(emitting, now, end)
        done = []
        for req in emitting:
            if req.samples > 1 and req.generated_tokens == 1 and req.parent is None:
                self._fork(rep, req)
            if req.finished:
                done.append(req)
            else:
                running.start_decoding(req)
        done += finished + running.finishing()  # then forked samples that wanted one token
        self.steps.add(end, end - now, rep.index, plan.num_seqs, plan.slots, prefill,
                       plan.num_tokens - prefill + plan.num_decodes * (gained - 1) - cut,
                       BOUNDS.index(cost.bound), cost.flops, cost.bytes, kv.used_units, kv.held_tokens,
                       rep.stored_tokens - kv.shared_units * kv.block_size, len(rep.waiting), len(plan.preempted),
                       kv.shared_units, emitters)
        self._release(rep, done, end)

    def _fork(self, rep: Replica, parent: Request) -> None:
        self.outcomes.forked(parent, parent.samples)
        rep.fork(parent, self._sample_ids + 1)
        self._sample_ids += parent.samples - 1

    def _decode(self, rep: Replica, plan: StepPlan):
        """k steps in which every running request decodes one token, in one wait (k = 1 when
        macro-steps are off)."""
        env, running, kv = self.env, rep.running, rep.kv
        now, n = env._now, running.num_decoding
        k = min(plan.repeat_steps if self.macro_steps else 1, running.steps_to_window())
        ctx_full0 = running.context_sum(0)
        below = running.num_decoding - running.num_above_window() if running.window else 0
        ctx_sliding0 = running.sliding_context_sum(0) if running.window else 0
        offsets = None if running.single else [running.tokens_ahead(j) + 1 for j in range(k)]
        until = self.next_arrival_s() if plan.wake_on_arrival or len(self.replicas) > 1 else math.inf
        ends = rep.cost.decode_ends(n, k, now, ctx_full0, ctx_sliding0, below, offsets, until)
        k = self._cap_steps(ends, plan)
        priority = _STEP_END + rep.index
        if k == 0:  # the first step crosses the horizon: it never completes
            yield self._wait(float(ends[0]), priority)
            return
        ends = ends[:k]
        residues = running.residues() if kv.kind == "paged" else None
        used0, stored0 = kv.used_units, rep.stored_tokens
        kv.promise(kv.decode_need(running, k))
        # The queue length each step ends with: arrivals land only in the last step when the
        # macro-step stopped for them (read after the wait); elsewhere they are counted per step.
        waiting: int | np.ndarray = len(rep.waiting)
        if k > 1 and self.next_arrival_s() <= ends[-2]:
            waiting = waiting + self._arrivals_by(np.asarray(ends))
        step0 = running.steps
        end = float(ends[-1])
        wait = self._wait(end, priority)
        if self._cutting and k > 1:
            self._in_flight[rep.index] = InFlight(rep, ends, k, wait)
            yield wait
            cut = self._in_flight.pop(rep.index).k
            if cut < k:
                k, ends = cut, ends[:cut]
                end = float(ends[-1])
        else:
            yield wait
        gained = running.tokens_ahead(k)
        if self._due <= end:
            self._pull(end)
        running.advance(k, end)
        stale = bool(rep.stale)
        if stale:  # the first step's gaps differ from the segment's: recorded one by one
            self._decoder_gaps(rep, now, float(ends[0]))
        self.gaps.add_segment(k, tuple(running.class_counts), first=not stale)
        done = running.finishing()
        cut = running.overshoot(done)
        rep.stored_tokens += n * gained - cut
        self.steps.add_segment(ends, now, rep.index, n, plan.slots, used0, residues,
                               stored0 - kv.shared_units * kv.block_size, waiting, ctx_full0, ctx_sliding0, below,
                               kv.shared_units, step0, kv.state_units, len(rep.waiting), cut)
        self._release(rep, done, end)

    def _arrivals_by(self, ends: np.ndarray) -> np.ndarray:
        """How many requests will have arrived by each of these times, counting from now (one
        replica only: with more, macro-steps always stop at the next arrival)."""
        if self.closed_loop:
            sends = np.sort(np.fromiter(self._pending_sends.values(), np.float64))
            arrived = np.searchsorted(sends, ends, side="right")
            limit = cast(ClosedLoopStream, self.stream).max_requests
            return arrived if limit is None else np.minimum(arrived, limit - self.arrived)  # the rest stop
        return np.searchsorted(cast(OpenLoopStream, self.stream).arrival_s, ends, side="right") - self.next_index

    def _cap_steps(self, ends, plan: StepPlan) -> int:
        """How many of the planned steps may run: stop at the first step ending at or after the
        next arrival (when a newcomer could join), and never past the horizon."""
        k = len(ends)
        if plan.wake_on_arrival or len(self.replicas) > 1:
            nxt = self.next_arrival_s()
            if nxt <= ends[-1]:
                k = bisect_left(ends, nxt) + 1
        if self.horizon_s is not None:
            # SimPy's run(until=h) stops before events at h, so only steps ending before h count.
            k = min(k, bisect_left(ends, self.horizon_s))
        return k

    def _cut(self, when: float, planned: int) -> None:
        """A send for `when` was just made: each macro-step under way now ends with the first of
        its steps that the send can still join, as the single steps would (a send at this
        instant joins the step after the one ending now on a replica that has planned already).
        Blocks promised for the steps cut off go back."""
        now = self.env._now
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

    def _step_gaps(self, rep: Replica, start: float, end: float) -> int:
        """The decoders' tokens of a general step, as _decoder_gaps records them, except that with
        one request class the gap they share is returned for the step's record to carry (its
        duration is that gap): one record instead of two."""
        if self.num_classes != 1:
            self._decoder_gaps(rep, start, end)
            return 0
        counts = rep.running.class_counts
        if rep.stale:
            counts = self._stale_gaps(rep, end, list(counts))
        return counts[0]

    def _decoder_gaps(self, rep: Replica, start: float, end: float) -> None:
        """The decoders' tokens of one step ending at `end`: one gap for all that emitted at
        `start`, their own gap for those a previous step skipped."""
        counts = rep.running.class_counts
        if rep.stale:
            counts = self._stale_gaps(rep, end, list(counts))
        for cls, count in enumerate(counts):
            if count:
                self.gaps.add(end - start, count, cls, end)

    def _stale_gaps(self, rep: Replica, end: float, counts: list[int]) -> list[int]:
        """Decoders a slow-path step skipped: their own gap since their last token."""
        for rid, last in rep.stale.items():
            req = rep.running.get(rid)
            if req is not None and last is not None:
                counts[req.class_index] -= 1
                self.gaps.add(end - last, 1, req.class_index, end)
        rep.stale.clear()
        return counts

    def _emit(self, emitting: list[Request], start: float, end: float) -> None:
        """Each request in `emitting` samples one token at `end`; record TTFT or the gap."""
        group = [0] * self.num_classes
        for req in emitting:
            if req.first_token_s is None:
                req.first_token_s = end
            elif req.last_token_s == start:
                group[req.class_index] += 1
            else:
                assert req.last_token_s is not None  # it has its first token
                self.gaps.add(end - req.last_token_s, 1, req.class_index, end)
            req.last_token_s = end
            req.generated_tokens += 1
        for cls, count in enumerate(group):
            if count:
                self.gaps.add(end - start, count, cls, end)

    def _release(self, rep: Replica, done: list[Request], end: float) -> None:
        if done:
            rep.release(done, end)
            for req in done:
                self.outcomes.finish(req, "completed")
