"""How requests end: their records, parallel-sample groups, and closed-loop users waiting on them.

A request with n parallel samples is prefilled once; at its first token the engine forks n - 1
sample requests that share its prompt blocks. The group is one row in requests.csv: it finishes
when its last sample does; generated_tokens counts one sample's tokens (TPOT stays per answer) and
`samples` says how many answers that many tokens each were produced.
"""

from __future__ import annotations

from typing import Any

from capsim.core.request import Request
from capsim.sim.request_log import RequestLog


class Outcomes:
    def __init__(self, log: RequestLog) -> None:
        self.log = log
        self._waiters: dict[int, Any] = {}  # request id -> event a closed-loop user waits on
        self._groups: dict[int, list] = {}  # parent id -> [parent, samples still running]
        self._closed: set[int] = set()  # groups already written as unfinished

    def wait_for(self, rid: int, event) -> None:
        self._waiters[rid] = event

    def forked(self, parent: Request, samples: int) -> None:
        self._groups[parent.id] = [parent, samples]

    def finish(self, req: Request, outcome: str, reason: str | None = None) -> None:
        """Record a final outcome; a sample only closes its group when it is the last one."""
        key = req.id if req.parent is None else req.parent
        group = self._groups.get(key)
        if group is not None:
            parent = group[0]
            if req.finish_s is not None and (parent.finish_s is None or req.finish_s > parent.finish_s):
                parent.finish_s = req.finish_s
            if req is not parent:
                parent.preemptions += req.preemptions
                parent.recomputed_tokens += req.recomputed_tokens
            group[1] -= 1
            if group[1]:
                return
            del self._groups[key]
            req = parent
        elif req.parent is not None:
            return  # a sample of a group already closed (cannot happen; kept safe)
        self.log.write(req, outcome, reason)
        waiter = self._waiters.pop(req.id, None)
        if waiter is not None:
            waiter.succeed(outcome)

    def unfinished_all(self, reqs: list[Request]) -> None:
        """At the horizon: every request still queued, running or moving is unfinished. A group's
        row counts the preemptions and recomputed tokens of all its samples, so those of every
        sample still running are added to its parent before the first of them closes the row."""
        for req in reqs:
            group = self._groups.get(req.parent) if req.parent is not None else None
            if group is not None and req is not group[0]:
                group[0].preemptions += req.preemptions
                group[0].recomputed_tokens += req.recomputed_tokens
        for req in reqs:
            self.unfinished(req)

    def unfinished(self, req: Request) -> None:
        """At the horizon: every sample of a group still running makes the group unfinished."""
        key = req.id if req.parent is None else req.parent
        if key in self._closed:
            return
        group = self._groups.pop(key, None)
        if group is not None:
            req = group[0]
            self._closed.add(key)
        elif req.parent is not None:
            return
        self.log.write(req, "unfinished")
