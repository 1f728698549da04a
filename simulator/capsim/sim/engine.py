"""The step loop, one SimPy process per replica (requests come in through capsim.sim.intake).

Each replica repeats DESIGN §2's loop: plan = scheduler.schedule(...); cost = cost_model(...);
wait cost.seconds; apply(plan). Time passes only here. A decode-only plan that the scheduler marks
repeatable for k steps is advanced in one wait (a macro-step) unless `macro_steps=False`; its
per-step times, token times and records are the ones k single steps would produce, because both
go through CostModel.decode_steps and the same integer bookkeeping, and because a macro-step ends
with the step an arrival could join: the next arrival known when it starts, or a closed-loop send
made while it runs (another replica's request finished), which cuts it short (Intake._cut).
tests/sim/test_engine_equivalence.py runs randomised workloads over every feature both ways and
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
from bisect import bisect_left
from collections.abc import Callable
from typing import cast

import numpy as np
import simpy

from capsim.core.names import BOUNDS
from capsim.core.plan import StepPlan
from capsim.core.request import Request
from capsim.sim.arrivals import open_loop, user
from capsim.sim.clock import At
from capsim.sim.intake import _STEP_END, InFlight, Intake
from capsim.sim.replica import Replica
from capsim.sim.request_log import GapLog
from capsim.sim.step_log import StepLog
from capsim.workload.streams import ClosedLoopStream, OpenLoopStream

PROGRESS_EVERY = 4096  # step-loop iterations between two progress reports (a few per second)


class Engine(Intake):
    """The step loops of a run's replicas (DESIGN §2), fed by the Intake it extends."""

    def __init__(self, replicas: list[Replica], stream: OpenLoopStream | ClosedLoopStream,
                 horizon_s: float | None = None, macro_steps: bool = True, router: str = "round_robin",
                 progress: Callable[[int, int | None], None] | None = None) -> None:
        super().__init__(replicas, stream, macro_steps, router)
        self.horizon_s = horizon_s
        # progress(requests finished, requests in the workload or None) every PROGRESS_EVERY
        # iterations of the step loops (capsim run's progress bar); it only reads.
        self.progress = progress
        self._loops = 0
        self.total_requests = stream.max_requests if isinstance(stream, ClosedLoopStream) else len(stream)
        self.num_classes = len(stream.class_names)
        kv = replicas[0].kv
        self.steps = StepLog(kv.block_size, replicas[0].running.schedule, paged=kv.kind == "paged")
        self.gaps = GapLog()
        self._sample_ids = 1 << 40  # forked samples get ids no arrival has
        self._clock_stops = 0  # pull mode: the step loop's waits (SimPy counts its own events)
        # After run(): the events the run took, its real work: each wait of a step loop (a step,
        # a macro-step, an idle wait) plus each arrival or send that was an event of its own.
        self.events = 0

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

    @property
    def swapped_bytes(self) -> float:
        return sum(r.swap.total_bytes for r in self.replicas if r.swap)

    @property
    def prompt_tokens_admitted(self) -> int:
        return sum(r.prompt_tokens_admitted for r in self.replicas)

    @property
    def prefill_tokens_saved(self) -> int:
        return sum(r.prefill_tokens_saved for r in self.replicas)

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
