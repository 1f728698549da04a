"""Schedulers plan one step from (waiting, running, allocator); they never act (DESIGN §2).

- static: a batch of up to max_num_seqs runs to completion; newcomers wait for the next batch.
- continuous (Orca / vLLM): every step, finished requests leave and waiting ones join FCFS; a
  joining request's whole prompt is prefilled in the step that admits it.
- chunked (Sarathi / vLLM's default): a per-step token budget; running decodes first, the rest
  of the budget goes to prompt chunks, so a long prompt spans several steps.
When a running request needs memory and none is free, the newest running request is preempted
(recompute: it returns to the front of the queue and later recomputes what it had).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from capsim.kv_cache import Allocator
from capsim.plan import StepPlan
from capsim.request import Request

REJECT_REASONS = ("exceeds_max_model_len", "exceeds_kv_capacity")


class Scheduler:
    """Shared planning steps; subclasses choose the order and the admission rule."""

    kind = ""

    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len

    def schedule(self, waiting: Sequence[Request], running: Sequence[Request], kv: Allocator) -> StepPlan:
        raise NotImplementedError

    def reject_reason(self, req: Request, kv: Allocator) -> str | None:
        """Why a request can never be served, or None."""
        if req.max_tokens > self.max_model_len:
            return "exceeds_max_model_len"
        if kv.units_for_request(req) > kv.num_blocks - kv.watermark_units:
            return "exceeds_kv_capacity"
        return None

    def _fit_running(self, order: list[Request], kv: Allocator, plan: StepPlan, budget: int) -> tuple[int, int]:
        """Give each running request its tokens, oldest first, preempting the newest when memory
        runs out. Returns (free units left, token budget left)."""
        free = kv.free_units
        queue = list(order)
        i = 0
        while i < len(queue):
            req = queue[i]
            n = min(req.pending_tokens, budget)
            if n <= 0:
                i += 1
                continue
            need = kv.units_needed(req, req.computed_tokens + n)
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

    def _admit(self, waiting, kv: Allocator, plan: StepPlan, free: int, budget: int, whole_prompt: bool) -> bool:
        """Admit waiting requests FCFS while seats, budget and memory allow. Returns True when the
        queue ran out (so a new arrival could be admitted next step), False when admission is
        blocked (a new arrival would only queue behind)."""
        seqs = len(plan.scheduled)
        for req in waiting:
            reason = self.reject_reason(req, kv)
            if reason is not None:
                plan.rejected.append((req, reason))
                continue
            if seqs >= self.max_num_seqs:
                return False
            n = req.pending_tokens if whole_prompt else min(req.pending_tokens, budget)
            if n <= 0 or n > budget:
                return False
            need = kv.units_needed(req, req.computed_tokens + n)
            if free - need < kv.watermark_units:
                return False
            plan.admitted.append(req)
            plan.scheduled.append(req)
            plan.new_tokens.append(n)
            free -= need
            budget -= n
            seqs += 1
        return True

    def _set_repeat(self, plan: StepPlan, running: Sequence[Request], kv: Allocator) -> None:
        """Mark a decode-only plan over all running requests as repeatable until the first
        completion or the first step whose blocks would not fit."""
        if plan.admitted or plan.preempted or plan.rejected or len(plan.scheduled) != len(running):
            return
        if not all(n == 1 for n in plan.new_tokens) or not all(r.is_decoding for r in plan.scheduled):
            return
        steps_left = min(r.output_tokens - r.generated_tokens for r in plan.scheduled)
        contexts = np.fromiter((r.computed_tokens for r in plan.scheduled), np.int64, len(plan.scheduled))
        plan.decode_only = True
        plan.repeat_steps = max(1, kv.max_decode_steps(contexts, steps_left))


class StaticScheduler(Scheduler):
    kind = "static"

    def schedule(self, waiting, running, kv):
        plan = StepPlan(slots=self.max_num_seqs, wake_on_arrival=False)
        if running:  # a batch is in flight: only its unfinished members run
            self._fit_running(list(running), kv, plan, budget=1 << 62)
            self._set_repeat(plan, running, kv)
            return plan
        plan.wake_on_arrival = self._admit(waiting, kv, plan, kv.free_units, 1 << 62, whole_prompt=True)
        return plan


class ContinuousScheduler(Scheduler):
    kind = "continuous"

    def schedule(self, waiting, running, kv):
        plan = StepPlan(slots=self.max_num_seqs)
        free, budget = self._fit_running(list(running), kv, plan, self.max_num_batched_tokens)
        if plan.preempted:
            plan.wake_on_arrival = True
            return plan  # as vLLM: no admissions in a step that had to preempt
        plan.wake_on_arrival = self._admit(waiting, kv, plan, free, budget, whole_prompt=True)
        self._set_repeat(plan, running, kv)
        return plan


class ChunkedPrefillScheduler(Scheduler):
    kind = "chunked"

    def schedule(self, waiting, running, kv):
        plan = StepPlan(slots=self.max_num_seqs)
        decodes = [r for r in running if r.is_decoding]
        order = decodes + [r for r in running if not r.is_decoding] if len(decodes) < len(running) else list(running)
        free, budget = self._fit_running(order, kv, plan, self.max_num_batched_tokens)
        if plan.preempted:
            plan.wake_on_arrival = True
            return plan
        plan.wake_on_arrival = self._admit(waiting, kv, plan, free, budget, whole_prompt=False)
        self._set_repeat(plan, running, kv)
        return plan


SCHEDULERS: dict[str, type[Scheduler]] = {
    "static": StaticScheduler,
    "continuous": ContinuousScheduler,
    "chunked": ChunkedPrefillScheduler,
}
