"""The SimPy processes: arrivals (open or closed loop) and one step loop per replica.

Each replica repeats DESIGN §2's loop: plan = scheduler.schedule(...); cost = cost_model(...);
wait cost.seconds; apply(plan). Time passes only here. A decode-only plan that the scheduler marks
repeatable for k steps is advanced in one wait (a macro-step) unless `macro_steps=False`; its
per-step times, token times and records are the ones k single steps would produce, because both
go through CostModel.decode_steps and the same integer bookkeeping (tests/test_engine.py runs
randomised workloads both ways and compares every record).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy
from simpy.events import Event

from capsim.cost_model import BOUNDS, CostModel
from capsim.kv_cache import Allocator
from capsim.metrics import GapLog, RequestLog, StepLog
from capsim.plan import StepPlan
from capsim.request import Request
from capsim.running import RunningSet
from capsim.schedulers import REJECT_REASONS, Scheduler
from capsim.workload import ClosedLoopStream, OpenLoopStream

_LATE = 2  # step ends fire after same-time arrivals (SimPy's NORMAL is 1)


class _At(Event):
    """An event at an exact absolute time. SimPy adds a delay to `now`; we pick the delay whose
    sum lands exactly on `when`, so a macro-step ends on the same float as k single steps."""

    def __init__(self, env: simpy.Environment, when: float, priority: int) -> None:
        super().__init__(env)
        self._ok, self._value = True, None  # as simpy.Timeout does
        now = env.now
        delay = when - now
        if now + delay != when:
            for _ in range(64):
                total = now + delay
                if total == when:
                    break
                delay = math.nextafter(delay, math.inf if total < when else -math.inf)
        env.schedule(self, priority, delay if delay > 0.0 else 0.0)


@dataclass
class Replica:
    index: int
    scheduler: Scheduler
    kv: Allocator
    cost: CostModel
    running: RunningSet
    waiting: deque = field(default_factory=deque)
    stored_tokens: int = 0  # KV tokens held by requests (the computed tokens of the running ones)
    stale: dict = field(default_factory=dict)  # decoders skipped by the last step: id -> last token time
    wake: Event | None = None


class Engine:
    def __init__(self, replicas: list[Replica], stream: OpenLoopStream | ClosedLoopStream,
                 horizon_s: float | None = None, macro_steps: bool = True) -> None:
        self.env = simpy.Environment()
        self.replicas, self.stream, self.horizon_s, self.macro_steps = replicas, stream, horizon_s, macro_steps
        self.requests = RequestLog(REJECT_REASONS, stream.class_names)
        self.num_classes = len(stream.class_names)
        self.steps = StepLog(block_size=replicas[0].kv.block_size)
        self.gaps = GapLog()
        self.arrived = 0
        self._arrivals_done = False
        self._next_index = 0  # open loop: index of the next arrival
        self._pending_sends: dict[int, float] = {}  # closed loop: user -> send time
        self._done_events: dict[int, Event] = {}
        self._rr = 0
        self.closed_loop = isinstance(stream, ClosedLoopStream)

    # ---------------------------------------------------------------- running

    def run(self) -> float:
        """Simulate until every request is done (or the horizon); returns the end time."""
        env = self.env
        if self.closed_loop:
            self._users_left = self.stream.users
            for u in range(self.stream.users):
                env.process(self._user(u))
        else:
            env.process(self._open_loop())
        loops = [env.process(self._replica_loop(r)) for r in self.replicas]
        env.run(until=self.horizon_s if self.horizon_s is not None else simpy.AllOf(env, loops))
        for rep in self.replicas:
            for req in list(rep.running.decoders()) + list(rep.waiting):
                self.requests.write(req, "unfinished")
        return env.now

    def next_arrival_s(self) -> float:
        if self.closed_loop:
            return min(self._pending_sends.values(), default=math.inf)
        times = self.stream.arrival_s
        return float(times[self._next_index]) if self._next_index < len(times) else math.inf

    # ---------------------------------------------------------------- arrivals

    def _open_loop(self):
        s = self.stream
        times, prompts, outputs, classes = s.arrival_s, s.prompt_tokens, s.output_tokens, s.class_index
        for i in range(len(times)):
            t = float(times[i])
            if t > self.env.now:
                yield _At(self.env, t, 1)
            self._next_index = i + 1
            self._submit(Request(i, t, int(prompts[i]), int(outputs[i]), class_index=int(classes[i])))
        self._arrivals_done = True
        self._wake_all()

    def _user(self, user: int):
        s, env = self.stream, self.env
        first = True
        while True:
            if not first:
                send_at = env.now + s.think()
                self._pending_sends[user] = send_at
                yield _At(env, send_at, 1)
                del self._pending_sends[user]
            first = False
            out_of_time = s.duration_s is not None and env.now >= s.duration_s
            if out_of_time or (s.max_requests is not None and self.arrived >= s.max_requests):
                break
            prompt, output, cls = s.lengths(self.arrived)
            req = Request(self.arrived, env.now, prompt, output, user=user, class_index=cls)
            done = self._done_events[req.id] = env.event()
            self._submit(req)
            yield done
        self._users_left -= 1
        if self._users_left == 0:
            self._arrivals_done = True
            self._wake_all()

    def _submit(self, req: Request) -> None:
        self.arrived += 1
        rep = self._route(req)
        req.replica = rep.index
        rep.waiting.append(req)
        if rep.wake is not None and not rep.wake.triggered:
            rep.wake.succeed()

    def _route(self, req: Request) -> Replica:
        rep = self.replicas[self._rr % len(self.replicas)]
        self._rr += 1
        return rep

    def _wake_all(self) -> None:
        for rep in self.replicas:
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()

    def _finish(self, req: Request, outcome: str, reason: str | None = None) -> None:
        self.requests.write(req, outcome, reason)
        done = self._done_events.pop(req.id, None)
        if done is not None:
            done.succeed()

    # ---------------------------------------------------------------- the step loop

    def _replica_loop(self, rep: Replica):
        env = self.env
        while True:
            if self.closed_loop:  # let same-time sends (think time 0) arrive before planning
                yield _At(env, env.now, _LATE)
            if not rep.waiting and not rep.running:
                if self._arrivals_done:
                    return
                rep.wake = env.event()
                yield rep.wake
                rep.wake = None
                continue
            plan = rep.scheduler.schedule(rep.waiting, rep.running, rep.kv)
            self._start(rep, plan)
            if plan.is_empty:
                if self._arrivals_done and not rep.running and not plan.rejected:
                    raise RuntimeError("scheduler made no progress with nothing running (a capsim bug)")
                if not plan.rejected:
                    rep.wake = env.event()
                    yield rep.wake
                    rep.wake = None
                continue
            if plan.decode_only:
                yield from self._decode(rep, plan)
            else:
                yield from self._step(rep, plan)

    def _start(self, rep: Replica, plan: StepPlan) -> None:
        """The plan's bookkeeping before the pass: rejections, preemptions, admissions, memory."""
        if plan.decode_only:
            return  # nothing to admit, preempt or allocate: decode blocks are promised in _decode
        now, running, kv = self.env.now, rep.running, rep.kv
        for _ in range(len(plan.admitted) + len(plan.rejected)):
            rep.waiting.popleft()
        for req, reason in plan.rejected:
            self._finish(req, "rejected", reason)
        if plan.preempted:
            running.remove(plan.preempted)
            for req in plan.preempted:
                kv.release(req)
                rep.stored_tokens -= req.computed_tokens
                req.recomputed_tokens += req.computed_tokens
                req.computed_tokens = 0
                req.preemptions += 1
            rep.waiting.extendleft(plan.preempted)  # newest-first list -> oldest at the front
        for req in plan.admitted:
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
            running.admit(req)
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
        now, running, kv = self.env.now, rep.running, rep.kv
        cost = rep.cost.step_cost(plan, running)
        if plan.num_decodes:
            kv.promise(kv.decode_need(running, 1))
        end = now + cost.seconds
        yield _At(self.env, end, _LATE)
        if plan.num_decodes:
            running.advance(1, end)
            self._decoder_gaps(rep, now, end)
        prefill = 0
        emitting = []
        for req, n in zip(plan.scheduled, plan.new_tokens):
            if not req.is_decoding:
                prefill += n
            req.computed_tokens += n
            if req.computed_tokens == req.known_tokens:
                emitting.append(req)
        rep.stored_tokens += plan.num_tokens
        self._emit(emitting, now, end)
        done = []
        for req in emitting:
            if req.finished:
                done.append(req)
            else:
                running.start_decoding(req)
        done += running.finishing()
        self.steps.add(end, end - now, rep.index, plan.num_seqs, plan.slots, prefill, plan.num_tokens - prefill,
                       BOUNDS.index(cost.bound), cost.flops, cost.bytes, kv.used_units, kv.held_tokens,
                       rep.stored_tokens, len(rep.waiting), len(plan.preempted))
        self._release(rep, done, end)

    def _decode(self, rep: Replica, plan: StepPlan):
        """k steps in which every running request decodes one token, in one wait (k = 1 when
        macro-steps are off)."""
        env, running, kv = self.env, rep.running, rep.kv
        now, n = env.now, running.num_decoding
        k = min(plan.repeat_steps if self.macro_steps else 1, running.steps_to_window())
        ctx_full0 = running.context_sum(0)
        below = running.num_decoding - running.num_above_window() if running.window else 0
        ctx_sliding0 = running.sliding_context_sum(0) if running.window else 0
        ends = rep.cost.decode_ends(n, k, now, ctx_full0, ctx_sliding0, below)
        k = self._cap_steps(ends, plan)
        if k == 0:  # the first step crosses the horizon: it never completes
            yield _At(env, float(ends[0]), _LATE)
            return
        ends = ends[:k]
        residues = running.residues() if kv.kind == "paged" else None
        used0, stored0 = kv.used_units, rep.stored_tokens
        kv.promise(kv.decode_need(running, k))
        end = float(ends[-1])
        waiting = self._waiting_during(rep, ends, k)
        yield _At(env, end, _LATE)
        running.advance(k, end)
        self._decoder_gaps(rep, now, float(ends[0]))
        self.gaps.add_segment(ends, tuple(running.class_counts))
        rep.stored_tokens += n * k
        self.steps.add_segment(ends, now, replica=rep.index, num_seqs=n, slots=plan.slots, used0=used0,
                               residues=residues, stored0=stored0, waiting=waiting, ctx_full0=ctx_full0,
                               ctx_sliding0=ctx_sliding0, below_window=below)
        self._release(rep, running.finishing(), end)

    def _waiting_during(self, rep: Replica, ends, k: int):
        """Queue length at the end of each of the k steps (a number when it does not change)."""
        if self.next_arrival_s() > ends[-1]:
            return len(rep.waiting)
        return len(rep.waiting) + self._arrivals_by(np.asarray(ends))

    def _arrivals_by(self, ends: np.ndarray) -> np.ndarray:
        """How many requests will have arrived by each of these times, counting from now (one
        replica only: with more, macro-steps always stop at the next arrival)."""
        if self.closed_loop:
            sends = np.sort(np.fromiter(self._pending_sends.values(), np.float64))
            return np.searchsorted(sends, ends, side="right")
        return np.searchsorted(self.stream.arrival_s, ends, side="right") - self._next_index

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

    def _decoder_gaps(self, rep: Replica, start: float, end: float) -> None:
        """The decoders' tokens of one step ending at `end`: one gap for all that emitted at
        `start`, their own gap for those a previous step skipped."""
        counts = rep.running.class_counts
        if rep.stale:
            counts = self._stale_gaps(rep, end, list(counts))
        for cls, count in enumerate(counts):
            if count:
                self.gaps.add(end - start, count, cls)

    def _stale_gaps(self, rep: Replica, end: float, counts: list[int]) -> list[int]:
        """Decoders a slow-path step skipped: their own gap since their last token."""
        for rid, last in rep.stale.items():
            req = rep.running.get(rid)
            if req is not None and last is not None:
                counts[req.class_index] -= 1
                self.gaps.add(end - last, 1, req.class_index)
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
                self.gaps.add(end - req.last_token_s, 1, req.class_index)
            req.last_token_s = end
            req.generated_tokens += 1
        for cls, count in enumerate(group):
            if count:
                self.gaps.add(end - start, count, cls)

    def _release(self, rep: Replica, done: list[Request], end: float) -> None:
        if not done:
            return
        rep.running.remove(done)
        for req in done:
            req.finish_s = end
            rep.kv.release(req)
            rep.stored_tokens -= req.computed_tokens
            self._finish(req, "completed")
