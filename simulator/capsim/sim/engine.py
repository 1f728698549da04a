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
from capsim.sim.handoff import Handoff
from capsim.sim.intake import _STEP_END, InFlight, Intake
from capsim.sim.passes import Pass
from capsim.sim.replica import Replica
from capsim.sim.request_log import GapLog, PhaseLog
from capsim.sim.step_log import StepLog
from capsim.sim.step_records import SegmentRecord, StepRecord
from capsim.sim.token_gaps import TokenGaps
from capsim.workload.streams import ClosedLoopStream, OpenLoopStream

PROGRESS_EVERY = 4096  # step-loop iterations between two progress reports (a few per second)


class Engine(Intake):
    """The step loops of a run's replicas (DESIGN §2), fed by the Intake it extends."""

    def __init__(self, replicas: list[Replica], stream: OpenLoopStream | ClosedLoopStream,
                 horizon_s: float | None = None, macro_steps: bool = True, router: str = "round_robin",
                 progress: Callable[[int, int | None], None] | None = None, handoff: Handoff | None = None) -> None:
        super().__init__(replicas, stream, macro_steps, router, handoff)
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
        self.tokens = TokenGaps(self.gaps, self.num_classes)
        self.phases = PhaseLog()  # prompt chunks and preemptions per request (the run trace's)
        self._sample_ids = 1 << 40  # forked samples get ids no arrival has
        self._clock_stops = 0  # pull mode: the step loop's waits (SimPy counts its own events)
        # After run(): the events the run took, its real work: each wait of a step loop (a step,
        # a macro-step, an idle wait) plus each arrival or send that was an event of its own.
        self.events = 0
        # The clock as the step loops see it: SimPy's, read once each time a loop resumes, or in
        # pull mode moved by _run_alone itself.
        self.now_s = 0.0  # PERF: a native attribute; compiled, `env.now` is a Python property call

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
        self.events = self._clock_stops + env.events_scheduled()
        if self.pull and self.horizon_s is not None:  # arrived during the step the horizon cut short
            self._pull(math.nextafter(self.horizon_s, -math.inf))
        left: list[Request] = [req for rep in self.replicas
                               for req in list(rep.running.decoders()) + list(rep.waiting)]
        if self.handoff:  # KV still on the link
            left += list(self.handoff.moving.values())
        self.outcomes.unfinished_all(left)
        return self.now_s if self.pull else env.now

    def _run_alone(self, rep: Replica) -> None:
        """Pull mode: the step loop is the only process, so its waits need no event queue. It
        yields the time it waits for and the clock (now_s; SimPy's is not used) moves there,
        stopping as SimPy's run(until=horizon) does: before anything due at the horizon, with the
        clock at it."""
        horizon = self.horizon_s
        # PERF: no SimPy event per step or arrival in the commonest case (one replica, open loop).
        for when in self._replica_loop(rep):
            if horizon is not None and when >= horizon:
                break
            if when > self.now_s:
                self.now_s = when
            self._clock_stops += 1
        if horizon is not None:
            self.now_s = max(horizon, self.now_s)

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
        """DESIGN §2's loop for one replica: plan, price, wait, apply."""
        env = self.env
        while True:
            self._report_progress()
            if self.closed_loop:  # let same-time sends (think time 0) arrive before planning
                yield At(env, self.now_s, self._plan_first + rep.index)
                self.now_s = env.now
            if not rep.waiting and not rep.running:
                if self._quiet():
                    if self.handoff is not None:
                        self._wake_all()  # the decode pool's idle instances are done too
                    return
                yield from self._idle(rep)
                continue
            plan = rep.scheduler.schedule(rep.waiting, rep.running, rep.kv)  # a decision, nothing moves
            self._start(rep, plan)  # rejections, preemptions, admissions and their blocks
            if plan.is_empty:
                if self._quiet() and not rep.running and not plan.rejected:
                    raise RuntimeError("scheduler made no progress with nothing running (a capsim bug)")
                if not plan.rejected:
                    yield from self._idle(rep)
                continue
            run = self._price(rep, plan)  # one step, or k decode steps at once (a macro-step)
            yield from self._wait_for(rep, run)  # the only place time passes
            if not run.k:  # the horizon ends the run during its first step
                return
            self._apply(rep, plan, run)  # tokens advance, requests finish, blocks move

    def _report_progress(self) -> None:
        if self.progress is not None:
            self._loops += 1
            if not self._loops % PROGRESS_EVERY:
                self.progress(len(self.requests), self.total_requests)

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
        self.now_s = self.env.now

    def _start(self, rep: Replica, plan: StepPlan) -> None:
        """The plan's bookkeeping before the pass: rejections, preemptions, admissions, memory."""
        if plan.decode_only:
            return  # nothing to admit, preempt or allocate: decode blocks are promised in _price
        now, running, kv = self.now_s, rep.running, rep.kv
        for _ in range(len(plan.admitted) + len(plan.rejected)):
            rep.waiting.popleft()
        for req, reason in plan.rejected:
            self.outcomes.finish(req, "rejected", reason)
        if plan.preempted:
            rep.preempt(plan.preempted)
            self.phases.preempted(plan.preempted, now)
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

    def _fork(self, rep: Replica, parent: Request) -> None:
        self.outcomes.forked(parent, parent.samples)
        rep.fork(parent, self._sample_ids + 1)
        self._sample_ids += parent.samples - 1

    # ---------------------------------------------------------------- price, wait, apply

    def _price(self, rep: Replica, plan: StepPlan) -> Pass:
        """The pass's end time(s), and what its record needs from before the wait. Decode-only
        plans run as many steps as the scheduler allows, up to the next arrival and the horizon."""
        running, kv = rep.running, rep.kv
        now = self.now_s
        if not plan.decode_only:
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
            return Pass(now, now + cost.seconds, 1, plan.num_decodes, cost)
        n = running.num_decoding
        # PERF: k decode steps in one wait (a macro-step); macro_steps=False is the reference.
        k = min(plan.repeat_steps if self.macro_steps else 1, running.steps_to_window())
        run = Pass(now, now, k, n, None)
        run.ctx_full0 = running.context_sum(0)
        run.below = running.num_decoding - running.num_above_window() if running.window else 0
        run.ctx_sliding0 = running.sliding_context_sum(0) if running.window else 0
        offsets = None if running.single else [running.tokens_ahead(j) + 1 for j in range(k)]
        until = self.next_arrival_s() if plan.wake_on_arrival or len(self.replicas) > 1 else math.inf
        ends = rep.cost.decode_ends(n, k, now, run.ctx_full0, run.ctx_sliding0, run.below, offsets, until)
        run.k = k = self._cap_steps(ends, plan)
        if k == 0:  # the first step crosses the horizon: it never completes
            run.run_until(ends[:1])
            return run
        ends = ends[:k]
        run.run_until(ends)
        run.residues = running.residues() if kv.kind == "paged" else None
        run.used0, run.stored0 = kv.used_units, rep.stored_tokens
        kv.promise(kv.decode_need(running, k))
        # The queue length each step ends with: arrivals land only in the last step when the
        # macro-step stopped for them (read after the wait); elsewhere they are counted per step.
        run.waiting = len(rep.waiting)
        if k > 1 and self.next_arrival_s() <= ends[-2]:
            run.waiting = run.waiting + self._arrivals_by(np.asarray(ends))
        run.step0 = running.steps
        return run

    def _wait_for(self, rep: Replica, run: Pass):
        """Wait until the pass ends. A macro-step a closed-loop send can join is cut short
        (Intake._cut) and ends with its last step before the send."""
        wait = self._wait(run.end_s, _STEP_END + rep.index)
        if self._cutting and run.k > 1:
            self._in_flight[rep.index] = InFlight(rep, run.ends, run.k, wait)
            yield wait
            cut = self._in_flight.pop(rep.index).k
            if cut < run.k:
                run.k = cut
                run.run_until(run.ends[:cut])
        else:
            yield wait
        if not self.pull:  # in pull mode _run_alone has moved the clock already
            self.now_s = self.env.now

    def _apply(self, rep: Replica, plan: StepPlan, run: Pass) -> None:
        """Carry out a pass that has ended: the arrivals due join the queue, the decoders advance
        run.k steps, the scheduled requests their tokens; finished requests leave and free their
        blocks; the pass is recorded (a row for a general step, a segment for decode steps)."""
        running, end = rep.running, run.end_s
        if self._due <= end:  # arrivals due by the pass's end count in its queue length
            self._pull(end)
        gained = running.tokens_ahead(run.k) if run.num_decoders else 0
        finished: list[Request] = []
        emitters = 0
        if run.num_decoders:
            running.advance(run.k, end)
            emitters = self._decoder_tokens(rep, plan, run)
            finished = running.finishing()  # decoders with all their tokens at this tick
        cut = running.overshoot(finished)
        emitting = self._advance_scheduled(rep, plan, run)
        rep.stored_tokens += plan.num_tokens - plan.num_decodes + run.num_decoders * gained - cut
        done = finished
        if rep.role == "prefill":  # prefilled prompts sample in the decode pool, not here
            self._hand_off(rep, emitting, end)
        elif not plan.decode_only:  # then forked samples that wanted one token
            done = self._emit_tokens(rep, emitting, run.start_s, end) + finished + running.finishing()
        if plan.decode_only:
            self._record_segment(rep, plan, run, cut)
        else:
            self._record_step(rep, plan, run, gained, cut, emitters)
        self._release(rep, done, end)

    def _decoder_tokens(self, rep: Replica, plan: StepPlan, run: Pass) -> int:
        """The decoders' inter-token gaps for the pass (see TokenGaps.step for what it returns)."""
        if not plan.decode_only:
            return self.tokens.step(rep, run.start_s, run.end_s)
        stale = bool(rep.stale)
        if stale:  # the first step's gaps differ from the segment's: recorded one by one
            self.tokens.decoders(rep, run.start_s, float(run.ends[0]))
        self.gaps.add_segment(run.k, tuple(rep.running.class_counts), first=not stale)
        return 0

    def _advance_scheduled(self, rep: Replica, plan: StepPlan, run: Pass) -> list[Request]:
        """The listed requests compute their tokens; returns those now due to sample one (their
        prompt is done, or they decode one by one). The prompt tokens computed go to run."""
        kv, phases = rep.kv, self.phases
        prefill = 0
        emitting = []
        for req, n in zip(plan.scheduled, plan.new_tokens):
            if not req.is_decoding:
                prefill += n
                phases.chunk(req, run.start_s, run.end_s, n)
            req.computed_tokens += n
            if kv.caching:
                kv.register(req)
            if req.computed_tokens == req.known_tokens:
                emitting.append(req)
        run.prefill_tokens = prefill
        return emitting

    def _emit_tokens(self, rep: Replica, emitting: list[Request], start: float, end: float) -> list[Request]:
        """Each emitting request samples a token; parallel samples fork after the first; returns
        the requests that finished."""
        self.tokens.emit(emitting, start, end)
        done = []
        for req in emitting:
            if req.samples > 1 and req.generated_tokens == 1 and req.parent is None:
                self._fork(rep, req)
            if req.finished:
                done.append(req)
            else:
                rep.running.start_decoding(req)
        return done

    def _record_step(self, rep: Replica, plan: StepPlan, run: Pass, gained: int, cut: int, emitters: int) -> None:
        kv, cost, prefill = rep.kv, run.cost, run.prefill_tokens
        assert cost is not None  # a general step is priced as one
        self.steps.add(StepRecord(
            run.end_s, run.end_s - run.start_s, rep.index, plan.num_seqs, plan.slots, prefill,
            plan.num_tokens - prefill + plan.num_decodes * (gained - 1) - cut, BOUNDS.index(cost.bound), cost.flops,
            cost.bytes, kv.used_units, kv.held_tokens, rep.stored_tokens - kv.shared_units * kv.block_size,
            len(rep.waiting), len(plan.preempted), kv.shared_units, emitters))

    def _record_segment(self, rep: Replica, plan: StepPlan, run: Pass, cut: int) -> None:
        kv = rep.kv
        self.steps.add_segment(SegmentRecord(
            run.ends, run.start_s, rep.index, run.num_decoders, plan.slots, run.used0, run.residues,
            run.stored0 - kv.shared_units * kv.block_size, run.waiting, run.ctx_full0, run.ctx_sliding0, run.below,
            kv.shared_units, run.step0, kv.state_units, len(rep.waiting), cut))

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

    def _release(self, rep: Replica, done: list[Request], end: float) -> None:
        if done:
            rep.release(done, end)
            for req in done:
                self.outcomes.finish(req, "completed")
