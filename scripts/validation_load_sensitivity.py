"""How much a validation point's prediction moves with its load: the point's simulation run again
at its request rate scaled by each factor, with the gain d ln(prediction) / d ln(rate) between the
lowest and the highest factor.

    python scripts/validation_load_sensitivity.py mlperf51-nvidia-dgxb200x8-server-ttft-mean
    python scripts/validation_load_sensitivity.py ID [ID ...] --factors 0.96,0.98,1,1.02

A point run near its set-up's capacity has a large gain: a small error in the predicted capacity
(or in the stated load) then moves its latency a lot, so its error says more about capacity than
about step times. Open-loop points only (a request rate); each factor is one more simulation.
"""

from __future__ import annotations

import argparse
import math

from capsim.validation.mapping import predicted_value, workload_for
from capsim.validation.runner import find_suite, load_points, steady_summary


def sensitivity(point: dict, factors: list[float]) -> list[tuple[float, float]]:
    """(factor, predicted value) for each factor of the point's request rate."""
    base = workload_for(point)
    if base.arrivals.kind not in ("poisson", "gamma", "constant"):
        raise SystemExit(f"{point['id']}: arrivals '{base.arrivals.kind}' have no request rate to scale")
    out = []
    for factor in factors:
        arrivals = base.arrivals.model_copy(update={"rate_per_s": base.arrivals.rate_per_s * factor})
        # run as `capsim validate` runs it (a steady window too short for its requests is run longer)
        out.append((factor, predicted_value(point, steady_summary(base.model_copy(update={"arrivals": arrivals})))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="+", help="validation point ids (`capsim validate --format csv` lists them)")
    parser.add_argument("--factors", default="0.98,1,1.02", help="rate factors, comma-separated (default 0.98,1,1.02)")
    args = parser.parse_args()
    factors = sorted(float(f) for f in args.factors.split(","))
    points = {p["id"]: p for p in load_points(find_suite())}
    for pid in args.ids:
        if pid not in points:
            raise SystemExit(f"no validation point {pid!r}")
        rows = sensitivity(points[pid], factors)
        (f0, v0), (f1, v1) = rows[0], rows[-1]
        gain = math.log(v1 / v0) / math.log(f1 / f0) if v0 > 0 and v1 > 0 and f1 > f0 else float("nan")
        values = ", ".join(f"x{f:g}: {v:.4g}" for f, v in rows)
        print(f"{pid} ({points[pid]['metric']}, measured {points[pid]['measured']:.4g}): {values}; "
              f"gain {gain:.2f} (% per % of rate)")


if __name__ == "__main__":
    main()
