"""The steady-state measurement window and the saturation test (DESIGN §8).

Load generators measure a server in steady state: they leave out a warm-up (the queue and the batch
filling from empty) and a cool-down (the last requests, served by a draining server). capsim does
the same by arrival order: the window is the requests that arrived between the warm-up and the
cool-down, and its time span runs from the first of them to the last. Latencies are taken over the
window's requests, throughput over its time span.

Saturation: a server that cannot keep up with its arrivals has a queue that keeps growing, so the
time requests wait before they are first scheduled grows with their arrival time: by
lambda / mu - 1 seconds per second when requests arrive at lambda and leave at mu. The test
compares the median wait of the last quarter of the window's requests with the first quarter's:
if it grew by more than SATURATION_TOLERANCE of the time between them (departures more than about
5% short of arrivals), the run is `saturated`, and its latencies describe only how long this
particular run lasted. (Counting departures against arrivals over the window says the same in
principle, but is biased while the server is still filling with long requests; the wait is not.)
Closed-loop users cannot outrun the server (each waits for its answer), so they are never
saturated in this sense; their latency says how loaded the server is.

Too short: a server reaches steady state only after its longest requests have come and gone, so a
steady window must span many of its requests' lifetimes. A window shorter than
MIN_WINDOW_LATENCIES mean end-to-end latencies is `too_short`: its figures describe a server still
filling up (an overloaded one can look fine), and nothing is judged on them; simulate more requests.
The mean, not the median: the number of requests in flight is the arrival rate times the mean
lifetime (Little's law), and with long-tailed answers the mean is well above the median (workloads/
chat.yaml on an A100 at 10 req/s, 500 requests: the window spans 11.0 median but 8.1 mean latencies,
and its p99 TPOT is 34 ms against 51 ms with 2,500 requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

DEFAULT_SHARE = 0.1  # warm-up and cool-down: a tenth of the arrivals each
MIN_WINDOW_REQUESTS = 50  # fewer than this in the window: measure the whole run (and say so)
MIN_STEADY_REQUESTS = 100  # runs shorter than this are measured whole
SATURATION_TOLERANCE = 0.05  # the wait grows by more than 5% of the time elapsed: saturated
MIN_WINDOW_LATENCIES = 10.0  # a steady window spans at least this many mean end-to-end latencies
COMPLETED, REJECTED = 0, 1  # core.names.OUTCOMES codes


@dataclass(frozen=True)
class Window:
    """Which requests a run's figures are measured over."""

    steady: bool  # False: every request (the reason says why)
    reason: str  # how the window was chosen, or why there is none
    warmup_requests: int  # arrivals left out at the start
    cooldown_requests: int  # ... and at the end
    start_s: float  # arrival of the first request in the window
    end_s: float  # arrival of the last request in the window
    mask: np.ndarray = field(repr=False, compare=False)  # per request row (request-id order): in the window

    @property
    def span_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def requests(self) -> int:
        return int(self.mask.sum())

    def as_dict(self) -> dict:
        return {"steady": self.steady, "reason": self.reason, "requests": self.requests,
                "warmup_requests": self.warmup_requests, "cooldown_requests": self.cooldown_requests,
                "start_s": self.start_s, "end_s": self.end_s}


@dataclass(frozen=True)
class Saturation:
    """The saturation test's figures over a window (see the module docstring)."""

    saturated: bool
    too_short: bool  # the steady window spans fewer than MIN_WINDOW_LATENCIES mean end-to-end latencies
    window_latencies: float | None  # the window's span in mean end-to-end latencies of its requests
    wait_growth: float | None  # growth of the median wait per second of arrival time (lambda / mu - 1)
    arrival_rate_per_s: float | None  # arrivals over the window's span
    departure_rate_per_s: float | None  # completions + rejections over the same span
    tolerance: float
    evidence: str  # one sentence: the figures behind the verdict

    def as_dict(self) -> dict:
        return {"saturated": self.saturated, "too_short": self.too_short, "window_latencies": self.window_latencies,
                "wait_growth": self.wait_growth,
                "arrival_rate_per_s": self.arrival_rate_per_s, "departure_rate_per_s": self.departure_rate_per_s,
                "tolerance": self.tolerance, "evidence": self.evidence}


def choose_window(requests: dict[str, np.ndarray], measure=None, users: int | None = None) -> Window:
    """The measurement window of a run's requests (RequestLog.columns()), from the workload's
    `measure:` block (workload_schema.Measure) or the defaults; `users`: closed-loop users."""
    arrival = requests["arrival_s"]
    n = len(arrival)
    everything = np.ones(n, dtype=bool)
    start, end = (float(arrival.min()), float(arrival.max())) if n else (0.0, 0.0)
    if measure is not None and measure.whole_run:
        return Window(False, "the workload asks for the whole run (measure: {whole_run: true})", 0, 0, start, end,
                      everything)
    if n < MIN_STEADY_REQUESTS:
        return Window(False, f"{n} requests: too few for a steady window (at least {MIN_STEADY_REQUESTS}); "
                             "the whole run is measured", 0, 0, start, end, everything)
    if start == end:
        return Window(False, "every request arrives at once: no steady state, the whole run is measured",
                      0, 0, start, end, everything)
    order = np.argsort(arrival, kind="stable")
    times = arrival[order]
    warm, why_warm = _warmup(times, requests["user"][order], measure, users)
    cool, why_cool = _cooldown(times, requests["user"][order], measure, users)
    if n - warm - cool < MIN_WINDOW_REQUESTS:
        return Window(False, f"warm-up {warm} + cool-down {cool} of {n} requests leave fewer than "
                             f"{MIN_WINDOW_REQUESTS} to measure; the whole run is measured", 0, 0, start, end,
                      everything)
    mask = np.zeros(n, dtype=bool)
    mask[order[warm:n - cool]] = True
    return Window(True, f"steady window: {why_warm}, {why_cool}", warm, cool, float(times[warm]),
                  float(times[n - cool - 1]), mask)


def _warmup(times: np.ndarray, users: np.ndarray, measure, closed_users: int | None) -> tuple[int, str]:
    n = len(times)
    if measure is not None and measure.warmup_requests is not None:
        return min(measure.warmup_requests, n), f"first {measure.warmup_requests} arrivals left out (measure)"
    if measure is not None and measure.warmup_s is not None:
        count = int(np.searchsorted(times, times[0] + measure.warmup_s, side="left"))
        return count, f"arrivals in the first {measure.warmup_s:g} s left out (measure)"
    count = math.ceil(DEFAULT_SHARE * n)
    if closed_users:  # the first wave: until every user has sent a request
        first = _first_per_user(users)
        if first > count:
            return first, f"the first wave (until each of {closed_users} users had sent once, {first} arrivals) left out"
    return count, f"first {count} arrivals ({100 * DEFAULT_SHARE:.0f}%) left out"


def _cooldown(times: np.ndarray, users: np.ndarray, measure, closed_users: int | None) -> tuple[int, str]:
    n = len(times)
    if measure is not None and measure.cooldown_requests is not None:
        return min(measure.cooldown_requests, n), f"last {measure.cooldown_requests} arrivals left out (measure)"
    if measure is not None and measure.cooldown_s is not None:
        count = n - int(np.searchsorted(times, times[-1] - measure.cooldown_s, side="right"))
        return count, f"arrivals in the last {measure.cooldown_s:g} s left out (measure)"
    count = math.floor(DEFAULT_SHARE * n)
    if closed_users:  # the last wave: from the first user's last request on, fewer users remain
        last = _last_per_user(users)
        if last > count:
            return last, f"the last wave (from the first user's last request, {last} arrivals) left out"
    return count, f"last {count} arrivals ({100 * DEFAULT_SHARE:.0f}%) left out"


def _first_per_user(users: np.ndarray) -> int:
    """Arrivals (in arrival order) up to and including the last user's first request."""
    valid = users >= 0
    if not valid.any():
        return 0
    _, first_index = np.unique(users[valid], return_index=True)
    return int(np.flatnonzero(valid)[first_index].max()) + 1


def _last_per_user(users: np.ndarray) -> int:
    """Arrivals from the earliest 'last request of a user' to the end."""
    valid = users >= 0
    if not valid.any():
        return 0
    reversed_users = users[::-1]
    rvalid = reversed_users >= 0
    _, last_index = np.unique(reversed_users[rvalid], return_index=True)
    return int(np.flatnonzero(rvalid)[last_index].max()) + 1


def saturation(requests: dict[str, np.ndarray], window: Window, closed_loop: bool,
               tolerance: float = SATURATION_TOLERANCE, end_s: float | None = None) -> Saturation:
    """Whether the window's queue kept growing (module docstring). `end_s`: when the run stopped
    (a request never scheduled by then has waited at least until then)."""
    span = window.span_s
    too_short, latencies = _too_short(requests, window)
    if closed_loop:
        return Saturation(False, too_short, latencies, None, None, None, tolerance,
                          "closed-loop users wait for their answers: the queue cannot grow without bound")
    if not span > 0:
        return Saturation(False, False, None, None, None, None, tolerance,
                          "no time span to measure a trend over (all at once)")
    arrival = requests["arrival_s"]
    order = np.flatnonzero(window.mask & (requests["outcome"] != REJECTED))  # rejected ones never wait
    if len(order) < 8:
        return Saturation(False, too_short, latencies, None, None, None, tolerance,
                          "too few served requests in the window for a trend")
    order = order[np.argsort(arrival[order], kind="stable")]
    scheduled = requests["first_scheduled_s"][order]
    stop = end_s if end_s is not None else float(np.nanmax(requests["finish_s"], initial=window.end_s))
    wait = np.where(np.isnan(scheduled), stop, scheduled) - arrival[order]
    quarter = max(1, len(order) // 4)
    early, late = slice(0, quarter), slice(len(order) - quarter, len(order))
    elapsed = float(arrival[order][late].mean() - arrival[order][early].mean())
    growth = (float(np.median(wait[late])) - float(np.median(wait[early]))) / elapsed if elapsed > 0 else 0.0
    lam, mu = departures(requests, window)
    saturated = growth > tolerance
    evidence = (f"the median wait before first scheduling grew {growth:.3g} s per second of arrivals across the "
                f"window ({1e3 * float(np.median(wait[early])):,.0f} ms -> {1e3 * float(np.median(wait[late])):,.0f} "
                f"ms; tolerance {tolerance:g}); {mu:,.3g} req/s left against {lam:,.3g} req/s arriving")
    too_short = too_short and not saturated  # a growing queue is judged already; more requests only grow it
    if too_short:
        evidence += (f"; the window spans {latencies:.1f} mean end-to-end latencies, fewer than "
                     f"{MIN_WINDOW_LATENCIES:g}: too short to judge")
    return Saturation(bool(saturated), too_short, latencies, growth, lam, mu, tolerance, evidence)


def _too_short(requests: dict[str, np.ndarray], window: Window) -> tuple[bool, float | None]:
    """(too short, span in mean end-to-end latencies) of a steady window (module docstring)."""
    if not window.steady:
        return False, None
    e2el = requests["e2el_ms"][window.mask & (requests["outcome"] == COMPLETED)]
    if not len(e2el):
        return True, 0.0
    mean_s = float(np.mean(e2el)) / 1e3
    latencies = window.span_s / mean_s if mean_s > 0 else float("inf")
    return latencies < MIN_WINDOW_LATENCIES, latencies


def departures(requests: dict[str, np.ndarray], window: Window) -> tuple[float, float]:
    """(arrivals, completions + rejections) per second over the window's span."""
    span = window.span_s
    arrival, finish, outcome = requests["arrival_s"], requests["finish_s"], requests["outcome"]
    inside = (arrival > window.start_s) & (arrival <= window.end_s)
    finished = (outcome == COMPLETED) & (finish > window.start_s) & (finish <= window.end_s)
    rejected = (outcome == REJECTED) & inside  # turned away when first scheduled, about when they arrive
    return float(inside.sum()) / span, float(finished.sum() + rejected.sum()) / span


def emitted_in(requests: dict[str, np.ndarray], start_s: float, end_s: float) -> tuple[float, float]:
    """(output tokens, prompt tokens) served during [start_s, end_s]: each request's output tokens
    counted at their times, taken as evenly spaced from its first to its last token (its own
    record holds only those two), and its prompt at its first token."""
    first, last = requests["first_token_s"], requests["finish_s"]
    g = requests["generated_tokens"].astype(np.float64)
    samples = requests["samples"].astype(np.float64)
    ok = ~np.isnan(first) & (g > 0)
    last = np.where(np.isnan(last), first, last)
    first, last, g, samples = first[ok], last[ok], g[ok], samples[ok]
    step = np.divide(last - first, g - 1, out=np.zeros_like(g), where=g > 1)
    spread = step > 0
    lo = np.where(spread, np.ceil(np.divide(start_s - first, step, out=np.zeros_like(g), where=spread)), 0.0)
    hi = np.where(spread, np.floor(np.divide(end_s - first, step, out=np.zeros_like(g), where=spread)), g - 1)
    lo, hi = np.clip(lo, 0, g - 1), np.clip(hi, 0, g - 1)
    together = (first >= start_s) & (first <= end_s)  # no spread: every token at the first token's time
    count = np.where(spread, np.maximum(hi - lo + 1, 0) * ((last >= start_s) & (first <= end_s)),
                     np.where(together, g, 0.0))
    prompts = requests["prompt_tokens"][ok].astype(np.float64)
    return float((count * samples).sum()), float(prompts[together].sum())
