"""`capsim validate`: run every published measurement in validation/*.yaml through the simulator
and compare (validation/README.md, "How points map onto simulations").

Each point becomes one workload (validate_map.workload_for): the point's engine profile, GPU,
TP, model, formats, lengths and load. The simulated run gives the point's metric and statistic;
the error is (predicted - measured) / measured. A point the simulator cannot represent is
reported as skipped with the reason and counts against nothing. Points are never adjusted.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from capsim.spec.config import read_yaml
from capsim.spec.limits import MAX_RATE_PER_S
from capsim.errors import CapsimError, did_you_mean, quote
from capsim.validation.mapping import Skip, at_rate, predicted_value, slo_limits_ms, workload_for
from capsim.api import simulate
from capsim.results.slo import Objectives
from capsim.results.text_tables import csv_table, markdown_table

GROUPS = ("decode", "prefill", "ttft", "max_throughput", "concurrency", "slo_capacity", "disaggregated")
# The held-out split (validation/README.md, "Calibration and test sets"): every file's source block
# says which set its points belong to; no parameter may be chosen from, or cite, a test point.
SPLITS = ("test", "calibration")
# The targets (MAPE, %): decode 15, max throughput 20, TTFT (prefill and ttft) 25.
TARGETS_PCT = {"decode": 15.0, "max_throughput": 20.0, "prefill+ttft": 25.0}


@dataclass(frozen=True)
class Outcome:
    """One point's result: measured vs predicted, or skipped with the reason."""

    id: str
    file: str
    split: str  # "test" or "calibration": the file's source.split
    group: str
    engine: str
    gpu: str
    tp: int
    model: str
    metric: str
    statistic: str
    measured: float
    predicted: float | None
    error_pct: float | None
    status: str  # "ok", "skipped" or "failed"
    reason: str = ""
    load_share: float | None = None  # the simulated run's load share (results.load_share), open-loop runs only


def find_suite(suite: str | Path | None = None) -> Path:
    """The validation folder: `suite` if given, else ./validation, else the checkout's."""
    candidates = [Path(suite)] if suite is not None else [Path.cwd() / "validation",
                                                         Path(__file__).resolve().parents[3] / "validation"]
    for path in candidates:
        if path.is_dir() and any(path.glob("*.yaml")):
            return path
    where = ", ".join(str(p) for p in candidates)
    raise CapsimError(f"no validation suite found (looked in {where}): the suite lives in the repository's "
                      "validation/ folder, not in the installed package. Run from a checkout or pass --suite DIR.")


def load_points(suite: Path) -> list[dict]:
    """Every point of every YAML file in the folder, with its file name under '_file', its
    file's split (source.split, required) under '_split' and the folder under '_dir' (where
    the points' length files are, validation/lengths/)."""
    points = []
    for path in sorted(suite.glob("*.yaml")):
        data = read_yaml(path)
        if not isinstance(data, dict) or not isinstance(data.get("points"), list):
            raise CapsimError(f"{path}: expected a mapping with a 'points' list (see validation/README.md).")
        split = data.get("source", {}).get("split") if isinstance(data.get("source"), dict) else None
        if split not in SPLITS:
            raise CapsimError(f"{path}: field 'source.split' is {quote(split)}; every file says which set its points "
                              f"belong to: 'test' (held out: no parameter may be chosen from them) or 'calibration' "
                              "(see validation/README.md, \"Calibration and test sets\").")
        for i, point in enumerate(data["points"]):
            missing = [k for k in ("id", "group", "engine", "gpu", "model", "metric", "measured") if k not in point]
            if missing:
                raise CapsimError(f"{path}: point [{i}]: required field(s) missing: {', '.join(missing)}.")
            if point["group"] == "slo_capacity":  # its limits are checked here, before any simulation
                slo_limits_ms({**point, "_file": path.name})
            points.append({**point, "_file": path.name, "_split": split, "_dir": str(suite)})
    ids = [p["id"] for p in points]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CapsimError(f"{suite}: duplicate point id(s): {', '.join(dupes)}.")
    return points


def run_point(point: dict) -> Outcome:
    """Simulate one point (never raises for a point: failures are reported as such)."""
    return run_points([point])[0]


def run_points(points: list[dict]) -> list[Outcome]:
    """Points that map onto the same simulation (one run's mean and p99 TTFT and its TPOT) share
    one run: the first point's workload is simulated once and each point reads its own metric."""
    if points[0]["group"] == "slo_capacity":
        return [_slo_outcome(p) for p in points]
    bases = [_base(p) for p in points]
    try:
        w = workload_for(points[0])
    except Skip as why:
        return [Outcome(**b, predicted=None, error_pct=None, status="skipped", reason=str(why)) for b in bases]
    try:
        summary = steady_summary(w)
    except CapsimError as exc:
        return [Outcome(**{**b, "engine": w.engine or b["engine"]}, predicted=None, error_pct=None, status="failed",
                        reason=str(exc)) for b in bases]
    if not summary.get("completed"):
        # nothing to read a latency or a rate from: a zero would be a made-up prediction
        return [Outcome(**{**b, "engine": w.engine or b["engine"]}, predicted=None, error_pct=None, status="failed",
                        reason=_none_completed(summary)) for b in bases]
    return [_compare(p, {**b, "engine": w.engine or b["engine"]}, summary) for p, b in zip(points, bases)]


def _none_completed(summary: dict) -> str:
    """Why a simulated run completed no request, in words."""
    reasons = ", ".join(f"{n} {why}" for why, n in sorted((summary.get("rejected_reasons") or {}).items()))
    rejected = f"{summary.get('rejected', 0)} rejected ({reasons})" if reasons else f"{summary.get('rejected', 0)} rejected"
    return (f"the simulated system completed none of the point's requests: {rejected}, "
            f"{summary.get('unfinished', 0)} unfinished (see `capsim run --explain` for its memory budget)")


MAX_LONGER_RUNS = 2  # a steady window still too short after the run is doubled twice is reported as it is


def steady_summary(w) -> dict:
    """The run's summary; a run measured over a steady window that spans too few request lifetimes
    (results.steady: `too_short`) is simulated again with twice the requests, as the steady-state
    rules ask ("simulate more requests"). Only the mapping's long-run stand-ins (MLPerf Server) use
    a steady window; the benchmark clients' runs are measured whole."""
    summary = simulate(w).summary
    for _ in range(MAX_LONGER_RUNS):
        if w.measure.whole_run or not summary.get("saturation", {}).get("too_short") or w.requests is None:
            break
        w = w.model_copy(update={"requests": 2 * w.requests})
        summary = simulate(w).summary
    return summary


SLO_TOLERANCE = 0.02  # the search stops when its highest passing and lowest failing rates are within 2%
SLO_MAX_PROBES = 40


def _slo_outcome(point: dict) -> Outcome:
    """A slo_capacity point: capsim's highest rate within the point's limits vs the measured rate."""
    base = _base(point)
    try:
        if point.get("length_distribution") != "mlperf-openorca":
            raise Skip("a slo_capacity point is searched with MLPerf's run rules (240 s of Poisson arrivals per "
                       "probe, its steady window); other benchmarks' rate searches are not mapped yet")
        limits = slo_limits_ms(point)
        w = workload_for(at_rate(point, 1.0))
    except Skip as why:
        return Outcome(**base, predicted=None, error_pct=None, status="skipped", reason=str(why))
    base["engine"] = w.engine or base["engine"]
    try:
        rate = slo_rate(point, limits, start_per_s=float(w.replicas or 1))
    except CapsimError as exc:
        return Outcome(**base, predicted=None, error_pct=None, status="failed", reason=str(exc))
    if rate is None:
        return Outcome(**base, predicted=None, error_pct=None, status="failed",
                       reason="no rate tried (down to 1/1024 request/s per copy of the model) meets the limits")
    if rate == math.inf:
        return Outcome(**base, predicted=None, error_pct=None, status="failed",
                       reason="every rate tried, up to the largest a workload allows, meets the limits: they never bind")
    return Outcome(**base, predicted=rate, error_pct=100.0 * (rate - base["measured"]) / base["measured"], status="ok")


def slo_rate(point: dict, limits_ms: dict[str, float], start_per_s: float) -> float | None:
    """The highest Poisson rate at which the point's simulation meets every limit (run-summary key ->
    ms), judged as `capsim capacity` judges a probe (results.slo.Objectives: not saturated, steady,
    requests completed, limits met), within SLO_TOLERANCE; each probe runs as `capsim validate` runs
    the point's latency points. The start (one request/s per copy of the model) is not the measured
    rate, so the answer does not lean on it. None: nothing passes; inf: nothing fails."""
    objectives = Objectives(dict(limits_ms))

    def meets(rate: float) -> bool:
        return not objectives.failures(steady_summary(workload_for(at_rate(point, rate))))

    return highest_passing(meets, start_per_s, SLO_TOLERANCE, ceiling=MAX_RATE_PER_S)


def highest_passing(meets, start: float, tolerance: float, ceiling: float = math.inf,
                    max_probes: int = SLO_MAX_PROBES) -> float | None:
    """The highest x found with meets(x) true and a failing x within `tolerance` (relative) above it:
    double (or halve) from `start` until the answer changes, then bisect (x to 4 significant digits).
    None when nothing down to start / 1024 passes; inf when nothing fails up to `ceiling` (or within
    max_probes doublings).
    Assumes meets is true below some x, false above."""
    if not start > 0:
        raise CapsimError(f"the search's start must be a positive rate (got {start!r}).")
    lo = hi = None
    x = start
    for _ in range(max_probes):
        if meets(x):
            lo = x
        else:
            hi = x
        if lo is None:
            x = x / 2
            if x < start / 1024:
                return None
        elif hi is None:
            if x * 2 > ceiling:
                return math.inf
            x = x * 2
        else:
            mid = float(f"{(lo + hi) / 2:.4g}")
            if hi - lo <= tolerance * lo or not lo < mid < hi:
                return lo
            x = mid
    return math.inf if hi is None else lo


def _base(point: dict) -> dict:
    return dict(id=point["id"], file=point["_file"], split=point["_split"], group=point["group"], engine=str(point["engine"]),
                gpu=str(point["gpu"]), tp=int(point.get("tp") or 1), model=str(point["model"]),
                metric=str(point["metric"]), statistic=str(point.get("statistic", "")),
                measured=float(point["measured"]))


def _compare(point: dict, base: dict, summary: dict) -> Outcome:
    try:
        value = predicted_value(point, summary)
    except Skip as exc:
        return Outcome(**base, predicted=None, error_pct=None, status="failed", reason=str(exc))
    error = 100.0 * (value - base["measured"]) / base["measured"]
    share = (summary.get("load_share") or {}).get("share")
    return Outcome(**base, predicted=value, error_pct=error, status="ok", load_share=share)


def _shared_runs(points: list[dict]) -> list[list[dict]]:
    """The points grouped by the simulation they map onto (a point that cannot be mapped is its
    own group, and run_points reports it skipped)."""
    # PERF: the suite's points come in families read off one benchmark run; simulating each run
    # once instead of once per point removes about half of the suite's simulations.
    runs: dict[str, list[dict]] = {}
    for p in points:
        if p["group"] == "slo_capacity":  # a search of its own
            runs["slo:" + p["id"]] = [p]
            continue
        try:
            key = workload_for(p).model_dump_json(exclude={"name"})
        except (Skip, CapsimError):
            key = "point:" + p["id"]
        runs.setdefault(key, []).append(p)
    return list(runs.values())


def select_points(points: list[dict], *, only: list[str] | None = None, groups: list[str] | None = None,
                  split: str | None = None) -> list[dict]:
    """The points of `groups` and of `split` whose id contains one of `only`. A group, split or
    `only` string that selects nothing is an error (a typo never yields a silently empty run)."""
    if split is not None and split not in SPLITS:
        raise CapsimError(f"--split {quote(split)}: no such set; allowed: {', '.join(SPLITS)} (validation/README.md, "
                          "\"Calibration and test sets\").")
    if groups:
        known = sorted({p["group"] for p in points})
        unknown = [g for g in groups if g not in known]
        if unknown:
            raise CapsimError(f"--group {quote(unknown[0])}: no such group in the suite.{did_you_mean(unknown[0], known)} "
                              f"Groups: {', '.join(known)}.")
        points = [p for p in points if p["group"] in groups]
    if split is not None:
        points = [p for p in points if p["_split"] == split]
    if only:
        unmatched = [o for o in only if not any(o in p["id"] for p in points)]
        if unmatched:
            chosen = " and ".join(x for x in ("groups" if groups else "", "split" if split else "") if x)
            raise CapsimError(f"--only {quote(unmatched[0])}: no point id{f' in the chosen {chosen}' if chosen else ''} "
                              "contains it; `capsim validate --format csv` lists every id (e.g. "
                              f"{', '.join(sorted(p['id'] for p in points)[:2])}).")
        points = [p for p in points if any(o in p["id"] for o in only)]
    return points


def run_suite(suite: str | Path | None = None, *, only: list[str] | None = None, groups: list[str] | None = None,
              split: str | None = None, workers: int | None = None, progress=None) -> list[Outcome]:
    """Run the points (all, or those of `groups`, of `split` and whose id contains one of `only`),
    each simulation once for all the points that share it; outcomes in the points' order."""
    points = select_points(load_points(find_suite(suite)), only=only, groups=groups, split=split)
    runs = _shared_runs(points)
    workers = workers or min(len(runs), os.cpu_count() or 1)
    done: dict[str, Outcome] = {}
    if workers <= 1 or len(runs) <= 1:
        results = map(run_points, runs)
        for outcomes in results:
            done.update((o.id, o) for o in outcomes)
            if progress:
                progress(len(done), len(points))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for outcomes in pool.map(run_points, runs):
                done.update((o.id, o) for o in outcomes)
                if progress:
                    progress(len(done), len(points))
    return [done[p["id"]] for p in points]


def mape(outcomes: list[Outcome]) -> float | None:
    errs = [abs(o.error_pct) for o in outcomes if o.status == "ok"]
    return sum(errs) / len(errs) if errs else None


def group_rows(outcomes: list[Outcome]) -> list[list]:
    """[split, group, points ok, skipped, MAPE %, median |error| %, target %] per split present
    (test first: its figures are the accuracy) and group, the combined prefill+ttft group the
    targets name, and all points of the split. The splits are never pooled."""
    rows = []
    for split in SPLITS:
        mine = [o for o in outcomes if o.split == split]
        if mine:
            rows += [[split] + row for row in _split_rows(mine)]
    return rows


def _split_rows(outcomes: list[Outcome]) -> list[list]:
    sets = [(g, [o for o in outcomes if o.group == g]) for g in GROUPS]
    sets.append(("prefill+ttft", [o for o in outcomes if o.group in ("prefill", "ttft")]))
    sets.append(("all", list(outcomes)))
    rows = []
    for name, items in sets:
        ok = [o for o in items if o.status == "ok"]
        errs = sorted(abs(o.error_pct) for o in ok)
        median = errs[len(errs) // 2] if len(errs) % 2 else (sum(errs[len(errs) // 2 - 1:len(errs) // 2 + 1]) / 2 if errs else None)
        value = mape(items)
        rows.append([name, len(ok), len(items) - len(ok), _round(value), _round(median), TARGETS_PCT.get(name)])
    return rows


def _round(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else round(x, 1)


def point_rows(outcomes: list[Outcome]) -> list[list]:
    rows = []
    for o in outcomes:
        pred = None if o.predicted is None else _sig(o.predicted)
        rows.append([o.split, o.group, o.id, o.engine, o.gpu, o.tp, o.model, f"{o.metric} ({o.statistic})", _sig(o.measured),
                     pred, _round(o.error_pct), None if o.load_share is None else round(o.load_share, 2),
                     o.status if o.status == "ok" else f"{o.status}: {o.reason}"])
    return rows


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


POINT_COLUMNS = ["split", "group", "id", "engine", "gpu", "tp", "model", "metric", "measured", "predicted", "error_pct",
                 "load_share", "status"]
GROUP_COLUMNS = ["split", "group", "points", "skipped", "mape_pct", "median_abs_error_pct", "target_mape_pct"]


def to_records(outcomes: list[Outcome]) -> list[dict]:
    return [asdict(o) for o in outcomes]


def render(outcomes: list[Outcome], fmt: str) -> str:
    """markdown (the README's tables), csv (one row per point; the groups are in write()'s
    validation_groups.csv) or json (points and groups, per split)."""
    import json


    if fmt == "json":
        return json.dumps({"points": to_records(outcomes),
                           "groups": [dict(zip(GROUP_COLUMNS, r)) for r in group_rows(outcomes)]}, indent=2) + "\n"
    if fmt == "csv":
        return csv_table(POINT_COLUMNS, point_rows(outcomes))
    groups = markdown_table(GROUP_COLUMNS, [[_blank(v) for v in r] for r in group_rows(outcomes)])
    points = markdown_table(POINT_COLUMNS, [[_blank(v) for v in r] for r in point_rows(outcomes)])
    return (f"MAPE per split and group (|predicted - measured| / measured; the test set's figures are the "
            f"accuracy):\n\n{groups}\n\nPoints:\n\n{points}\n")


def _blank(v) -> str | float | int:
    return "" if v is None else v


def write(outcomes: list[Outcome], out_dir: Path) -> list[Path]:
    """validation.csv (points), validation_groups.csv (MAPE per split and group) and
    validation.json (points and groups) under out_dir."""
    from capsim.results.text_tables import csv_table

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "validation.csv", out_dir / "validation_groups.csv", out_dir / "validation.json"]
    paths[0].write_text(render(outcomes, "csv"))
    paths[1].write_text(csv_table(GROUP_COLUMNS, group_rows(outcomes)))
    paths[2].write_text(render(outcomes, "json"))
    return paths
