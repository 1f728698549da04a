"""Where a loaded run really operated, and what capsim's step costs there: for an open-loop
validation point with a measured mean TTFT and mean TPOT of the same run, Little's law gives the
requests a replica held (rate x (TTFT + (output - 1) x TPOT)), of which rate x (output - 1) x TPOT
were decoding; each step also carried about rate x TPOT prompts' tokens. capsim prices one step
with that many decoders (at the mean context) and that many prompt tokens, and compares it with
the measured TPOT (the mean gap between a request's tokens, i.e. about one step).

    python scripts/validation_operating_point.py mlperf51-nvidia-dgxb200x8-interactive-ttft-mean

A run whose measured TPOT capsim's step matches at the measured operating point, but whose
predicted TTFT and TPOT are far off, misses through its equilibrium (a run near its capacity
amplifies small differences in how step time grows with the batch), not through its step cost.
The operating point is an average (mean lengths, mean context, one prompt chunk per step).
"""

from __future__ import annotations

import argparse

from capsim.api.run import cost_model_for
from capsim.api.setup import resolve
from capsim.core.plan import StepPlan
from capsim.core.request import Request
from capsim.validation.mapping import workload_for
from capsim.validation.runner import find_suite, load_points


def operating_point(ttft: dict, tpot: dict) -> dict:
    """The measured run's mean state per replica and capsim's price of a step in that state."""
    w = workload_for(ttft)
    rate = float(ttft["request_rate_per_s"]) / (w.replicas or 1)
    scale = {"ns": 1e-9, "ms": 1e-3, "s": 1.0}
    ttft_s, tpot_s = ttft["measured"] * scale[ttft["unit"]], tpot["measured"] * scale[tpot["unit"]]
    output = float(ttft["output_tokens"])
    prompt = _mean(w.prompt_tokens)
    decoding = rate * (output - 1) * tpot_s
    prompt_tokens = round(rate * tpot_s * prompt)
    context = prompt + output / 2
    setup = resolve(w, f"validation point {ttft['id']}")
    cost = cost_model_for(setup, None)
    plan = StepPlan([Request(0, 0.0, max(1, prompt_tokens), int(output))], [max(1, prompt_tokens)])
    plan.decode_all, plan.num_decodes = True, round(decoding)
    step_s = cost.step_cost(plan, decode_context_tokens=round(decoding * context)).seconds
    return {"rate_per_replica": rate, "in_flight": rate * (ttft_s + (output - 1) * tpot_s), "decoding": decoding,
            "prompt_tokens_per_step": prompt_tokens, "mean_context": context, "measured_step_s": tpot_s,
            "capsim_step_s": step_s, "error_pct": 100.0 * (step_s - tpot_s) / tpot_s}


def _mean(dist) -> float:
    if dist.dist == "empirical":
        return sum(v * p for v, p in zip(dist.values, dist.weights)) / sum(dist.weights)
    if dist.dist == "fixed":
        return float(dist.value)
    raise SystemExit(f"prompt lengths '{dist.dist}': only fixed and empirical ones are averaged here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="+", help="ids of mean-TTFT points; the run's mean-TPOT point is the id with "
                        "'ttft' read as 'tpot'")
    args = parser.parse_args()
    points = {p["id"]: p for p in load_points(find_suite())}
    for pid in args.ids:
        twin = pid.replace("ttft", "tpot")
        if pid not in points or twin not in points or pid == twin:
            raise SystemExit(f"need a mean-TTFT point and its run's mean-TPOT point: {pid!r}, {twin!r}")
        o = operating_point(points[pid], points[twin])
        print(f"{pid}: per replica {o['rate_per_replica']:.2f} req/s, {o['in_flight']:.0f} in flight, "
              f"{o['decoding']:.0f} decoding at a mean context of {o['mean_context']:.0f} + "
              f"{o['prompt_tokens_per_step']} prompt tokens per step; measured step (TPOT) "
              f"{1e3 * o['measured_step_s']:.1f} ms, capsim's step there {1e3 * o['capsim_step_s']:.1f} ms "
              f"({o['error_pct']:+.0f}%)")


if __name__ == "__main__":
    main()
