"""How much a closed-loop point's figure owes to its start: every user sends its first request at
once, so a run opens with a burst of `users` prompts. For a closed-loop validation point this runs
its simulation (as `capsim validate` does) and prints the point's statistic over the whole run, over
the opening wave (each user's first request), over the rest, and over the requests the validated
figure is measured over (the whole run, or capsim's steady window for a steady-state source).

    python scripts/validation_closed_loop_start.py nim180-h100x2-llama33-70b-fp8-tp2-5000-500-c25-ttft

Where a source does not say how many requests a run sent, the mapping assumes 10 per user; measured
over the whole run, as most benchmark clients report, the opening wave's share of the figure then
depends on that count (validation/README.md, "How points map onto simulations").
"""

from __future__ import annotations

import argparse

import numpy as np

from capsim.api import simulate
from capsim.validation.mapping import workload_for
from capsim.validation.runner import find_suite, load_points

COLUMNS = {"ttft_ms": "ttft_ms", "e2el_ms": "e2el_ms", "tpot_ms": "tpot_ms"}
STATS = {"mean": np.mean, "median": np.median, "p99": lambda v: np.percentile(v, 99)}


def by_phase(point: dict) -> dict[str, float]:
    """The point's statistic over the whole run, the opening wave and the requests after it."""
    w = workload_for(point)
    if w.arrivals.kind != "closed_loop":
        raise SystemExit(f"{point['id']}: arrivals '{w.arrivals.kind}' are not a closed loop")
    metric, stat = point["metric"], str(point.get("statistic", "mean"))
    if metric not in COLUMNS or stat not in STATS:
        raise SystemExit(f"{point['id']}: {metric} ({stat}) is not one of {sorted(COLUMNS)} (mean, median, p99)")
    result = simulate(w)
    q = result.requests.sort_values("request_id")
    in_window = result.window.mask if result.window is not None else np.ones(len(q), dtype=bool)
    done = (q.outcome == "completed").to_numpy()
    first = q.first_of_user.astype(bool).to_numpy()[done]
    values = q[COLUMNS[metric]].to_numpy(dtype=float)[done]
    f = STATS[stat]
    return {"whole run": float(f(values)), "opening wave": float(f(values[first])), "after it": float(f(values[~first])),
            "measured": float(f(values[in_window[done]])), "requests": float(len(values)), "users": float(first.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="+", help="closed-loop validation point ids")
    args = parser.parse_args()
    points = {p["id"]: p for p in load_points(find_suite())}
    for pid in args.ids:
        if pid not in points:
            raise SystemExit(f"no validation point {pid!r}")
        r = by_phase(points[pid])
        print(f"{pid} ({points[pid]['metric']} {points[pid].get('statistic', 'mean')}, measured {points[pid]['measured']:.4g}): "
              f"whole run {r['whole run']:.4g} ({r['requests']:.0f} requests), opening wave {r['opening wave']:.4g} "
              f"({r['users']:.0f}), after it {r['after it']:.4g}; as validated {r['measured']:.4g}")


if __name__ == "__main__":
    main()
