"""The data speed.py measures (Case, Run, Measured) and the tables it prints from them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

# Vidur's published figures on a 2-core machine (shared/peers/vidur/README.md).
VIDUR_10K_S, VIDUR_10K_STARTUP_S, VIDUR_10K_RSS_GB, VIDUR_1K_S = 37.0, 4.0, 0.9, 6.0
# The output-length case: bench-10k's lengths as separate prompt/output distributions (the same
# marginals as its 3:1 split), output x1 or x4, at a rate both sustain (x4 saturates near 1.15/s).
OUTPUT_SCALING_RATE = 0.75
MIB = 2**20


@dataclass
class Case:
    key: str
    label: str
    workload: str
    overrides: dict = field(default_factory=dict)
    reps: int = 5
    cli: bool = True  # also time the whole `capsim run` process
    macro_steps: bool = True
    digest: bool = False  # fingerprint the results (macro vs step-by-step)


@dataclass
class Run:
    wall_s: float
    rss_bytes: int
    timed_out: bool
    returncode: int
    data: dict | None = None  # sim_once.py's JSON line
    error: str = ""


@dataclass
class Measured:
    case: Case
    sims: list[Run] = field(default_factory=list)
    clis: list[Run] = field(default_factory=list)
    skipped: bool = False  # not run this time (--quick, --only)

    def ok_sims(self) -> list[Run]:
        return [r for r in self.sims if r.data is not None]

    def timed_out(self) -> bool:
        return any(r.timed_out for r in self.sims + self.clis)

    def med(self, key: str) -> float | None:
        values = [r.data[key] for r in self.ok_sims() if r.data.get(key) is not None]
        return statistics.median(values) if values else None

    def first(self, key: str):
        runs = self.ok_sims()
        return runs[0].data.get(key) if runs else None

    def cli_s(self) -> float | None:
        done = [r.wall_s for r in self.clis if not r.timed_out and r.returncode == 0]
        return statistics.median(done) if done else None

    def rss(self, runs: list[Run]) -> int | None:
        done = [r.rss_bytes for r in runs if not r.timed_out and r.returncode == 0]
        return max(done) if done else None

    def rss_text(self, runs: list[Run]) -> str:
        """Highest peak RSS in MiB; for a run killed at the limit, what it had reached by then."""
        if self.rss(runs) is not None:
            return f"{self.rss(runs) / MIB:,.0f}"
        killed = [r.rss_bytes for r in runs if r.timed_out]
        return f"≥ {max(killed) / MIB:,.0f} at kill" if killed else "—"


# ---------------------------------------------------------------- tables

def table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    fmt = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def num(x: float | None, digits: int = 2, limit: bool = False) -> str:
    if x is None:
        return "> limit" if limit else "—"
    return f"{x:,.{digits}f}"


def rate(count: float | None, seconds: float | None) -> str:
    return "—" if count is None or not seconds else f"{count / seconds:,.0f}"


def main_table(ms: list[Measured], md: bool) -> str:
    headers = ["case", "requests", "sim s", "process s", "requests/s", "steps", "steps/s", "events", "events/s",
               "peak RSS MiB (sim / CLI)", "runs"]
    rows = []
    for m in ms:
        if m.skipped:
            rows.append([m.case.label, "not run"] + [""] * (len(headers) - 2))
            continue
        sim, lim = m.med("sim_s"), m.timed_out()
        rows.append([m.case.label, num(m.first("arrived") or m.case.overrides.get("requests"), 0), num(sim, 3, lim),
                     num(m.cli_s(), 2, any(r.timed_out for r in m.clis)),
                     rate(m.first("arrived"), sim), num(m.first("steps"), 0), rate(m.first("steps"), sim),
                     num(m.first("events"), 0), rate(m.first("events"), sim),
                     f"{m.rss_text(m.sims)} / {m.rss_text(m.clis)}",
                     f"{len(m.ok_sims())} + {len([r for r in m.clis if r.returncode == 0])}"])
    return table(headers, rows, md)


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or not b else f"{a / b:.2f}x"


def scaling_tables(by: dict[str, Measured], md: bool) -> str:
    base = by["chat-10k"].med("sim_s")
    rows = []
    for key in ("chat-10k", "chat-100k", "chat-1m"):
        m = by[key]
        sim, n = m.med("sim_s"), m.first("arrived") or m.case.overrides.get("requests", 1_000_000)
        rows.append([f"{n:,}", num(sim, 3, m.timed_out()), ratio(sim, base),
                     "—" if sim is None else f"{sim / n * 1e6:,.1f}", num(m.first("steps"), 0), m.rss_text(m.sims)])
    by_requests = table(["requests", "sim s", "vs 10K", "µs per request", "steps", "peak RSS MiB"], rows, md)
    x1, x4 = by["out-x1"], by["out-x4"]
    rows = [[label, num(m.first("output_tokens"), 0), num(m.first("steps"), 0), num(m.first("events"), 0),
             num(m.first("preemptions"), 0), num(m.med("sim_s"), 3, m.timed_out()), ratio(m.med("sim_s"), x1.med("sim_s"))]
            for label, m in (("x1", x1), ("x4", x4))]
    by_output = table(["output length", "output tokens", "steps", "events", "preemptions", "sim s", "vs x1"], rows, md)
    return (f"Time against requests (bench-1m's chat traffic, 3 requests/s):\n\n{by_requests}\n\n"
            f"Time against output length (10,000 requests, bench-10k's lengths with outputs x1 / x4, "
            f"{OUTPUT_SCALING_RATE} requests/s so both stay below capacity):\n\n{by_output}")


def macro_table(by: dict[str, Measured], md: bool) -> str:
    sbs = by["sbs"]
    macro = by["1k"] if sbs.case.overrides["requests"] == 1000 else by["10k"]
    digests = (macro.first("digest"), sbs.first("digest"))
    if None in digests:  # a case not run (--only, --quick) or failed: nothing to compare
        verdict = "results not compared (one of the two cases was not run or failed)"
    else:
        same = "identical" if digests[0] == digests[1] else "NOT IDENTICAL"
        verdict = f"results {same} (summary, requests and steps fingerprint)"
    rows = [["macro-steps", num(macro.med("sim_s"), 3), num(macro.first("events"), 0), macro.first("digest") or "—"],
            ["step by step", num(sbs.med("sim_s"), 3, sbs.timed_out()), num(sbs.first("events"), 0),
             sbs.first("digest") or "—"]]
    return (f"What macro-steps buy (bench-10k, {sbs.case.overrides['requests']:,} requests, "
            f"{num(sbs.first('steps'), 0)} steps): {ratio(sbs.med('sim_s'), macro.med('sim_s'))} faster; "
            f"{verdict}\n\n"
            + table(["engine", "sim s", "events", "results fingerprint"], rows, md))


def vidur_lines(by: dict[str, Measured]) -> str:
    m10, m1 = by["10k"], by["1k"]
    sim, proc, rss = m10.med("sim_s"), m10.cli_s(), m10.rss(m10.clis)
    vidur_sim = VIDUR_10K_S - VIDUR_10K_STARTUP_S
    lines = [
        f"- bench-10k: Vidur about {VIDUR_10K_S:.0f} s ({vidur_sim:.0f} s without its ~{VIDUR_10K_STARTUP_S:.0f} s "
        f"start-up), peak about {VIDUR_10K_RSS_GB} GB; capsim simulate() {num(sim, 3)} s "
        f"({ratio(vidur_sim, sim)} faster), whole `capsim run` {num(proc, 2)} s ({ratio(VIDUR_10K_S, proc)} faster), "
        f"peak RSS {'—' if rss is None else f'{rss / 1e9:.2f} GB'}.",
        f"- 1K requests: Vidur about {VIDUR_1K_S:.0f} s; capsim simulate() {num(m1.med('sim_s'), 3)} s, whole "
        f"`capsim run` {num(m1.cli_s(), 2)} s ({ratio(VIDUR_1K_S, m1.cli_s())} faster).",
    ]
    return "\n".join(lines)


def targets(by: dict[str, Measured], md: bool) -> str:
    def check(ok: bool | None) -> str:
        return "not measured" if ok is None else ("met" if ok else "MISSED")

    def row(what: str, value: float | None, goal: float, unit: str, m: Measured, digits: int = 2):
        shown = num(value, digits, m.timed_out()) + (f" {unit}" if value is not None else "")
        ok = None if value is None and not m.timed_out() else (value is not None and value <= goal)
        return [what, f"≤ {goal:g} {unit}", shown, check(ok)]

    m1m, x1, x4 = by["chat-1m"], by["out-x1"], by["out-x4"]
    rss_1m = m1m.rss(m1m.sims)
    x_ratio = None if x1.med("sim_s") is None or x4.med("sim_s") is None else x4.med("sim_s") / x1.med("sim_s")
    rows = [
        row("bench-10k continuous, simulate()", by["10k"].med("sim_s"), 0.35, "s", by["10k"], 3),
        row("bench-10k chunked 512, simulate()", by["10k-chunked"].med("sim_s"), 0.35, "s", by["10k-chunked"], 3),
        row("bench-10k, whole `capsim run`", by["10k"].cli_s(), 1.5, "s", by["10k"]),
        row("1M requests, simulate()", m1m.med("sim_s"), 60, "s", m1m, 1),
        row("1M requests, peak RSS", None if rss_1m is None else rss_1m / 2**30, 1, "GiB", m1m),
        row("output x4 vs x1, time", x_ratio, 1.3, "x", x4),
    ]
    return table(["target", "goal", "measured (median)", ""], rows, md)


def report(ms: list[Measured], header: list[tuple[str, str]], loads: list[float], md: bool) -> str:
    by = {m.case.key: m for m in ms}
    load = f"{min(loads):.2f}–{max(loads):.2f}" if loads else "?"
    head = header + [("load average (1 min) while measuring", load)]
    parts = ["\n".join(f"- {k}: {v}" if md else f"{k:>38}: {v}" for k, v in head),
             main_table(ms, md),
             "sim s: median time inside simulate() (imports excluded); process s: median wall time of "
             "`capsim run WORKLOAD > /dev/null`; events: the engine's waits and arrival events (RunResult.events); runs: simulate() + CLI runs.",
             targets(by, md), "Against Vidur's published figures:\n\n" + vidur_lines(by), scaling_tables(by, md),
             macro_table(by, md)]
    return "\n\n".join(p for p in parts if p) + "\n"
