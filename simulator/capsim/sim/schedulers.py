"""Schedulers plan one step from (waiting, running, allocator); they never act (DESIGN §2).

- static: a batch of up to max_num_seqs runs to completion; newcomers wait for the next batch.
- continuous (Orca / vLLM): every step, finished requests leave and waiting ones join FCFS; a
  joining request's whole prompt is prefilled in the step that admits it.
- chunked (Sarathi / vLLM's default): a per-step token budget; running decodes first, the rest
  of the budget goes to prompt chunks, so a long prompt spans several steps.
- prefill_first (SGLang's default, `enable_mixed_chunk` off): prompt chunks and decodes never share
  a step; while any prompt work fits the budget (unfinished prompts first, then newcomers FCFS) the
  step prefills only, and the decoders wait; otherwise the step decodes every running request.
When a running request needs memory and none is free, the newest running request is preempted
(recompute: it returns to the front of the queue and later recomputes what it had).

Fast path: when every decoding request fits its next token (memory and budget), the plan says
`decode_all` instead of listing them, in O(1). Otherwise the slow path lists every running
request in order and preempts; both give the same plan where both apply.
"""

from __future__ import annotations

from collections.abc import Sequence

from capsim.sim.kv_cache import Allocator
from capsim.core.plan import StepPlan
from capsim.core.request import Request
from capsim.sim.running import RunningSet

UNLIMITED = 1 << 62


class Scheduler:
    """Shared planning steps; subclasses choose the order and the admission rule."""

    kind = ""

    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 steps_per_schedule: int = 1) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        # Multi-step scheduling (vLLM 0.6 --num-scheduler-steps): while requests decode, the
        # batch is only re-formed every this many decode steps, so newcomers wait for the boundary.
        self.steps_per_schedule = steps_per_schedule

    def _between_schedules(self, running: RunningSet) -> int:
        """Decode steps left before the next multi-step boundary (0: at a boundary, or idle)."""
        n = self.steps_per_schedule
        if n == 1 or not running.num_decoding:
            return 0
        return -running.steps % n

    def schedule(self, waiting: Sequence[Request], running: RunningSet, kv: Allocator) -> StepPlan:
        raise NotImplementedError

    def reject_reason(self, req: Request, kv: Allocator) -> str | None:
        """Why a request can never be served, or None."""
        if req.max_tokens > self.max_model_len:
            return "exceeds_max_model_len"
        if kv.units_for_request(req) > kv.num_blocks - kv.watermark_units:
            return "exceeds_kv_capacity"
        return None

    def _plan_running(self, running: RunningSet, kv: Allocator, plan: StepPlan, budget: int) -> tuple[int, int]:
        """Give the running requests their tokens: decodes first, then prompt chunks. Returns
        (free units left, token budget left)."""
        free, budget0 = kv.free_units, budget
        n = running.num_decoding
        need = kv.decode_need(running, 1) if n else 0
        if n <= budget and need <= free:
            plan.decode_all, plan.num_decodes = n > 0, n
            free, budget = free - need, budget - n
            for req in running.partial():
                tokens = min(req.pending_tokens, budget)
                if tokens <= 0:
                    continue
                need = kv.units_needed(req, req.computed_tokens + tokens) + kv.fork_units(req, req.computed_tokens + tokens)
                if need > free:  # memory runs out: redo the step the slow way, with preemption
                    plan.decode_all, plan.num_decodes = False, 0
                    del plan.scheduled[:], plan.new_tokens[:]
                    return self._fit_running(running, kv, plan, budget0)
                plan.scheduled.append(req)
                plan.new_tokens.append(tokens)
                free, budget = free - need, budget - tokens
            return free, budget
        return self._fit_running(running, kv, plan, budget)

    def _fit_running(self, running: RunningSet, kv: Allocator, plan: StepPlan, budget: int) -> tuple[int, int]:
        """Slow path: each running request in turn, decodes first, oldest first, preempting the
        newest when memory runs out."""
        everyone = running.decoders()
        queue = [r for r in everyone if running.is_decoder(r)] + running.partial()
        free = kv.free_units
        i = 0
        while i < len(queue):
            req = queue[i]
            n = min(req.pending_tokens, budget)
            if n <= 0:
                i += 1
                continue
            need = kv.units_needed(req, req.computed_tokens + n) + kv.fork_units(req, req.computed_tokens + n)
            while need > free and len(queue) > i + 1:
                victim = queue.pop()
                plan.preempted.append(victim)
                free += kv.units_held(victim)
            if need > free:
                plan.preempted.append(queue.pop(i))
                free += kv.units_held(req)
                continue
            plan.scheduled.append(req)
            plan.new_tokens.append(n)
            free -= need
            budget -= n
            i += 1
        return free, budget

    def _admit(self, waiting, running: RunningSet, kv: Allocator, plan: StepPlan, free: int, budget: int,
               whole_prompt: bool, seated: int | None = None, room_for_prompt: bool = False) -> bool:
        """Admit waiting requests FCFS while seats, budget and memory allow (`seated`: seats taken
        already; default the plan's sequences; `room_for_prompt`: memory must hold the request's
        whole remaining prompt, though only this step's chunk is taken). Returns True when the
        queue ran out (so a new arrival could be admitted next step), False when admission is
        blocked (a new arrival would only queue behind)."""
        if waiting and self._between_schedules(running):
            return False  # mid multi-step window: nobody joins until the boundary
        seqs = plan.num_seqs if seated is None else seated
        for req in waiting:
            reason = self.reject_reason(req, kv)
            if reason is not None:
                plan.rejected.append((req, reason))
                continue
            if seqs >= self.max_num_seqs:
                return False
            hits, revived = kv.prefix_hits(req) if not req.computed_tokens else (0, 0)
            start = max(req.computed_tokens, hits * kv.block_size)
            pending = req.known_tokens - start
            n = pending if whole_prompt else min(pending, budget)
            if n <= 0 or n > budget:
                return False
            need = kv.admission_units(req, start + n, hits, revived) + kv.fork_units(req, start + n)
            room = kv.admission_units(req, req.known_tokens, hits, revived) if room_for_prompt else need
            if free - max(need, room) < kv.watermark_units:
                return False
            plan.admitted.append(req)
            plan.cached_blocks.append(hits)
            plan.scheduled.append(req)
            plan.new_tokens.append(n)
            free -= need
            budget -= n
            seqs += 1
        return True

    def _set_repeat(self, plan: StepPlan, running: RunningSet, kv: Allocator) -> None:
        """Mark a plan that only decodes every running request as repeatable until the first
        completion or the first step whose blocks would not fit."""
        if plan.scheduled or plan.preempted or plan.rejected or not plan.decode_all:
            return
        if plan.num_decodes != len(running):
            return
        plan.decode_only = True
        k = kv.max_decode_steps(running, running.steps_to_first_finish())
        if self.steps_per_schedule > 1:  # a multi-step boundary ends a macro-step: the batch re-forms there
            k = min(k, self._between_schedules(running) or self.steps_per_schedule)
        plan.repeat_steps = max(1, k)


class StaticScheduler(Scheduler):
    kind = "static"

    def schedule(self, waiting, running, kv):
        plan = StepPlan(slots=self.max_num_seqs, wake_on_arrival=False)
        if running:  # a batch is in flight: only its unfinished members run
            self._plan_running(running, kv, plan, UNLIMITED)
            self._set_repeat(plan, running, kv)
            return plan
        plan.wake_on_arrival = self._admit(waiting, running, kv, plan, kv.free_units, UNLIMITED, whole_prompt=True)
        return plan


class ContinuousScheduler(Scheduler):
    kind = "continuous"
    whole_prompt = True  # a joining prompt is prefilled in one step

    def schedule(self, waiting, running, kv):
        plan = StepPlan(slots=self.max_num_seqs)
        free, budget = self._plan_running(running, kv, plan, self.max_num_batched_tokens)
        if plan.preempted:
            return plan  # as vLLM: no admissions in a step that had to preempt
        if waiting:  # an empty queue admits nobody, and a newcomer could join: wake_on_arrival stays True
            plan.wake_on_arrival = self._admit(waiting, running, kv, plan, free, budget, whole_prompt=self.whole_prompt)
        self._set_repeat(plan, running, kv)
        return plan


class ChunkedPrefillScheduler(ContinuousScheduler):
    """Continuous batching whose prompts are cut to fit the step's token budget."""

    kind = "chunked"
    whole_prompt = False


class PrefillFirstScheduler(Scheduler):
    """Chunked prefill in steps of their own: a step with prompt work carries no decodes. A
    waiting request is admitted only when memory holds its whole remaining prompt (SGLang's
    PrefillAdder checks the full input against its token budget before cutting the first chunk),
    so long prompts do not start prefills that memory cannot finish."""

    kind = "prefill_first"

    def schedule(self, waiting, running, kv):
        plan = StepPlan(slots=self.max_num_seqs)
        free, budget = kv.free_units, self.max_num_batched_tokens
        for req in running.partial():  # unfinished prompts continue first
            tokens = min(req.pending_tokens, budget)
            if tokens <= 0:
                continue
            need = kv.units_needed(req, req.computed_tokens + tokens) + kv.fork_units(req, req.computed_tokens + tokens)
            if need > free:
                break  # out of memory: the decode path below preempts
            plan.scheduled.append(req)
            plan.new_tokens.append(tokens)
            free, budget = free - need, budget - tokens
        if waiting:
            # every running request keeps its seat, decoding in this step or not
            plan.wake_on_arrival = self._admit(waiting, running, kv, plan, free, budget, whole_prompt=False,
                                               seated=len(running), room_for_prompt=True)
        if plan.scheduled:
            return plan
        # no prompt work fits: every running request decodes (preempting the newest when memory runs out)
        self._plan_running(running, kv, plan, UNLIMITED)
        self._set_repeat(plan, running, kv)
        return plan


SCHEDULERS: dict[str, type[Scheduler]] = {
    "static": StaticScheduler,
    "continuous": ContinuousScheduler,
    "chunked": ChunkedPrefillScheduler,
    "prefill_first": PrefillFirstScheduler,
}
CHUNKED_KINDS = ("chunked", "prefill_first")  # kinds that cut prompts to the step's token budget
