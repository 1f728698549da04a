"""What `capsim plan` reports: one row per candidate, the binding objective of a simulated point,
the Pareto fronts (output tokens/s per user against tokens/s per GPU, and against $ per 1M output
tokens), the launch commands for vLLM and SGLang, the --explain sentences, and the files."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from capsim.planning.sweep import json_rows, order_columns
from capsim.results.slo import Objectives
from capsim.spec.serving import load_engine

FIRST = ("candidate", "status", "shape", "gpu", "tp", "pp", "ep", "prefill", "decode", "link", "weights", "kv_cache", "engine", "max_num_seqs", "max_num_batched_tokens",
         "replicas", "gpus", "usd_per_hour", "usd_per_m_output_tokens", "tokens_per_s_per_user", "tokens_per_s_per_gpu",
         "binding", "binding_ratio", "pruned_by", "reason")
RECORD_KEYS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
               "p99_itl_ms", "p99_e2el_ms", "output_throughput", "request_throughput", "good_share", "saturated",
               "slo_failures", "kv_utilisation", "mean_batch_size")



def _count(n, noun: str) -> str:
    """'1 GPU', '3 GPUs'."""
    return f"{int(n)} {noun}{'' if int(n) == 1 else 's'}"

def binding(record: dict, objectives: Objectives) -> tuple[str, float]:
    """(the objective furthest from being met, or nearest its limit; its value / limit). A ratio
    over 1 misses; for a goodput share it is required / achieved; a saturated point binds on
    saturation (arrivals / departures) unless a limit is missed by more."""
    worst = ("", 0.0)
    for key, limit in objectives.limits_ms.items():
        value = record.get(key)
        ratio = math.inf if value is None or not math.isfinite(value) else value / limit
        worst = max(worst, (key, ratio), key=lambda t: t[1])
    if objectives.goodput_ms:
        share = record.get("good_share")
        ratio = math.inf if not share else objectives.goodput_share / share
        worst = max(worst, ("good_share", ratio), key=lambda t: t[1])
    if record.get("saturated") and worst[1] <= 1:
        departures = record.get("departure_ratio")
        worst = ("saturation", math.inf if not departures else 1 / departures)
    return worst


def summarise_rows(bounds: list, searches: dict, objectives: Objectives, over: str, load: float) -> list[dict]:
    """One row per candidate: its bounds, what happened to it, and the deciding simulation's metrics
    (at its fewest passing replicas, else at the most replicas tried)."""
    rows = []
    for i, b in enumerate(bounds):
        c = b.candidate
        row = {"candidate": i, **asdict(c), "pruned_by": b.pruned_by, "reason": b.reason, "kv_tokens": b.kv_tokens,
               "max_rate_per_replica": b.max_rate_per_replica, "min_replicas": b.min_replicas,
               "max_replicas": b.max_replicas, "ttft_floor_ms": b.ttft_floor_ms, "tpot_floor_ms": b.tpot_floor_ms,
               "price_usd_per_gpu_hour": b.usd_per_gpu_hour, "replicas": None, "gpus": None, "usd_per_hour": None,
               "simulations": 0}
        s = searches.get(i)
        if b.pruned_by is not None:
            row["status"] = f"pruned: {b.pruned_by}"
        elif s is not None:
            row.update(_simulated(s, objectives, c.gpus_per_replica, b.usd_per_gpu_hour))
        rows.append(row)
    return rows


def _simulated(s, objectives: Objectives, gpus_per_replica: int, price: float | None) -> dict:
    out: dict = {"simulations": len(s.tried)}
    if s.passing is not None:
        n, status = s.passing, "meets SLOs"
    elif s.tried:
        n, status = max(s.tried), ("cost bound" if s.dropped else "misses SLOs within the budget")
    else:
        return out | {"status": "cost bound", "reason": "its least possible $/hour is no lower than a deployment "
                                                         "already found"}
    rec = s.tried[n]
    key, ratio = binding(rec, objectives)
    out |= {"status": status, "replicas": n, "gpus": n * gpus_per_replica, "binding": key, "binding_ratio": ratio,
            "usd_per_hour": None if price is None else n * gpus_per_replica * price,
            "usd_per_m_output_tokens": rec.get("usd_per_m_output_tokens"), "replica_load": rec.get("rate_per_s",
                                                                                              rec.get("users"))}
    out |= {k: rec.get(k) for k in RECORD_KEYS}
    tpot = rec.get("mean_tpot_ms")
    out["tokens_per_s_per_user"] = 1e3 / tpot if tpot else None
    out["tokens_per_s_per_gpu"] = rec["output_throughput"] / gpus_per_replica
    if n - 1 in s.tried:
        out["one_fewer"] = s.tried[n - 1]["slo_failures"] or "it misses"
    elif n - 1 < s.bounds.min_replicas and n > 1:
        out["one_fewer"] = "ruled out by the throughput bound"
    return out


def pareto_mask(points: list[tuple[float, float]]) -> list[bool]:
    """Which (a, b) points no other point matches or beats in both (higher is better in both) while
    beating in one."""
    return [not any(p[0] >= q[0] and p[1] >= q[1] and p != q for p in points) for q in points]


def pareto_front(feasible: pd.DataFrame) -> pd.DataFrame:
    """The deployments meeting the SLOs that are on either front: output tokens/s per user against
    tokens/s per GPU, or against $ per 1M output tokens (lower is better); flagged per front."""
    if feasible.empty:
        return feasible
    f = feasible.copy()
    per_user = f["tokens_per_s_per_user"].astype(float).tolist()
    per_gpu = f["tokens_per_s_per_gpu"].astype(float).tolist()
    usd = [-(v if v is not None and math.isfinite(v) else math.inf) for v in f["usd_per_m_output_tokens"]]
    f["on_gpu_front"] = pareto_mask(list(zip(per_gpu, per_user)))
    f["on_cost_front"] = pareto_mask(list(zip(usd, per_user)))
    f = f[f["on_gpu_front"] | f["on_cost_front"]].sort_values(["tokens_per_s_per_gpu", "candidate"], ascending=[False, True])
    return order_columns(f.reset_index(drop=True), list(FIRST))


def hf_id(model) -> str:
    """The model's Hugging Face id from its source (…huggingface.co/ORG/NAME/…), else its capsim name."""
    match = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)", model.source or "")
    return match.group(1) if match else model.name


def _kv_dtype(kv: str) -> str:
    return kv if kv.startswith("fp8") else "auto"


def _quant(weights: str) -> list[str]:
    if weights.startswith("fp8"):
        return ["--quantization", "fp8"]
    if weights.startswith("int4"):
        return ["--quantization", "awq"]  # needs an AWQ checkpoint of the model
    return []


def shape_text(row: dict) -> str:
    """A candidate's parallelism in a few characters: "TP2", "TP2 x PP2", "EP8", "1P2D TP1 (nvlink4)"."""
    text = f"TP{row['tp']}"
    if int(row.get("pp") or 1) > 1:
        text += f" x PP{int(row['pp'])}"
    if int(row.get("ep") or 1) > 1:
        text = f"EP{int(row['ep'])}"
    if row.get("shape") == "disaggregated":
        text = f"{int(row['prefill'])}P{int(row['decode'])}D {text} ({row['link']})"
    return text


def _parallel(row: dict, engine: str) -> list[str]:
    """The parallelism flags of one instance. vLLM: --tensor-parallel-size, --pipeline-parallel-size;
    EP as attention data-parallel ranks with the experts spread over them (--data-parallel-size N
    --enable-expert-parallel). SGLang: --tp, --pp-size; EP as --tp N --dp N --enable-dp-attention
    --ep-size N (older releases spell the last --enable-ep-moe)."""
    ep, pp = int(row.get("ep") or 1), int(row.get("pp") or 1)
    if engine == "vllm":
        if ep > 1:
            return ["--tensor-parallel-size", "1", "--data-parallel-size", str(ep), "--enable-expert-parallel"]
        return ["--tensor-parallel-size", str(row["tp"])] + (["--pipeline-parallel-size", str(pp)] if pp > 1 else [])
    if ep > 1:
        return ["--tp", str(ep), "--dp", str(ep), "--enable-dp-attention", "--ep-size", str(ep)]
    return ["--tp", str(row["tp"])] + (["--pp-size", str(pp)] if pp > 1 else [])


# vLLM's disaggregated pair: both instances load the NIXL KV connector (kv_both), a proxy routes
# each request to a prefill and then a decode instance. SGLang: --disaggregation-mode with its
# default Mooncake transfer engine, behind sglang_router's --pd-disaggregation.
VLLM_PD = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"""


def launch_commands(row: dict, model, max_model_len: int, memory_fraction: float | None) -> dict[str, str]:
    """Per-instance launch commands for the chosen deployment (run `replicas` of them behind a
    router; a disaggregated unit's prefill and decode instances each get their own). The memory
    fraction is the workload's gpu_memory_utilization if it sets one, else each engine's own
    default (capsim engines)."""
    model = hf_id(model)
    vllm_mem = memory_fraction or load_engine("vllm").gpu_memory_utilization
    sglang_mem = memory_fraction or load_engine("sglang").gpu_memory_utilization
    vllm = ["vllm", "serve", model, *_parallel(row, "vllm"), "--max-num-seqs", str(row["max_num_seqs"]),
            "--max-num-batched-tokens", str(row["max_num_batched_tokens"]), "--kv-cache-dtype", _kv_dtype(row["kv_cache"]),
            "--gpu-memory-utilization", f"{vllm_mem:g}", "--max-model-len", str(max_model_len), *_quant(row["weights"])]
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", model, *_parallel(row, "sglang"),
              "--max-running-requests", str(row["max_num_seqs"]), "--chunked-prefill-size",
              str(row["max_num_batched_tokens"]), "--kv-cache-dtype", _kv_dtype(row["kv_cache"]),
              "--mem-fraction-static", f"{sglang_mem:g}", "--context-length", str(max_model_len), *_quant(row["weights"])]
    if row.get("shape") != "disaggregated":
        return {"vllm": " ".join(vllm), "sglang": " ".join(sglang)}
    out = {}
    for role in ("prefill", "decode"):
        out[f"vllm {role}"] = " ".join(vllm + [VLLM_PD])
        out[f"sglang {role}"] = " ".join(sglang + ["--disaggregation-mode", role])
    out["sglang router"] = ("python -m sglang_router.launch_router --pd-disaggregation "
                            + " ".join(f"--{role} http://{role.upper()}_HOST:PORT" for role in ("prefill", "decode")))
    return out


def write_plan(result, out_dir: Path) -> list[Path]:
    """plan.csv, plan_points.csv, plan_front.csv and plan.json (the verdict, counts and commands)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "plan.csv", out_dir / "plan_points.csv", out_dir / "plan_front.csv", out_dir / "plan.json"]
    order_columns(result.frame, list(FIRST)).to_csv(paths[0], index=False)
    result.points.to_csv(paths[1], index=False)
    result.front.to_csv(paths[2], index=False)
    paths[3].write_text(json.dumps(plan_meta(result), indent=2) + "\n")
    return paths


def plan_meta(result) -> dict:
    """The plan's verdict as JSON-ready data: target, objectives, pruning counts, winner (or the
    closest candidate), launch commands, the explanation and the front."""
    single = (lambda row: None if row is None else json_rows(pd.DataFrame([row]))[0])
    return {"workload": result.workload, "model": result.model, "target": result.target,
            "objectives": result.objectives.as_dict(), "budget_gpus": result.budget_gpus,
            "candidates": len(result.frame), "candidates_by_shape": by_shape(result.frame), "pruned": result.pruned, "simulations": len(result.points),
            "winner": single(result.winner), "closest": single(result.closest), "launch": result.launch,
            "explain": result.explain, "front": json_rows(result.front)}


def by_shape(frame: pd.DataFrame) -> dict[str, int]:
    """Candidates per deployment shape, in enumeration order."""
    return {} if "shape" not in frame else {k: int(v) for k, v in frame["shape"].value_counts(sort=False).items()}


def _label(row: dict) -> str:
    return (f"#{row['candidate']} {row['gpu']} {shape_text(row)} {row['weights']} weights, {row['kv_cache']} KV, "
            f"{row['engine']}, max_num_seqs {row['max_num_seqs']}, max_num_batched_tokens {row['max_num_batched_tokens']}")


def _whole(row: dict) -> dict:
    """The row with its counts as whole numbers again (a column holding None turns them into floats)."""
    counts = {k: int(row[k]) for k in ("replicas", "gpus") if row.get(k) is not None and row[k] == row[k]}
    return row | counts


def _money(v) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"${v:,.2f}"


def explain(result) -> list[str]:
    """Why the winner wins and what the runner-up would need (or, with no winner, what binds the
    closest candidate), as sentences."""
    rows = [_whole(r) for r in result.frame.to_dict("records")]
    pruned = ", ".join(f"{n} by {k}" for k, n in result.pruned.items() if n and k != "cost") or "none"
    simulated = [r for r in rows if r.get("simulations")]
    lines = [f"{len(rows)} candidates; pruned by bounds: {pruned}; {len(simulated)} simulated in {len(result.points)} "
             f"runs; {result.pruned.get('cost', 0)} never simulated (the cost bound)."]
    win = result.winner
    if win is None:
        c = result.closest
        if c is None:
            return lines + ["No candidate to report."]
        if c.get("binding"):
            lines.append(f"No deployment meets every SLO within the budget. Closest: {_label(c)} at {c['replicas']} "
                         f"replicas, where {c['binding']} is {c['binding_ratio']:.2f}x its limit ({c['slo_failures']}).")
        else:
            lines.append(f"No deployment meets every SLO within the budget. Closest: {_label(c)}, ruled out by the "
                         f"{c['pruned_by']} bound: {c['reason']}.")
        return lines
    feasible = sorted((r for r in rows if r.get("status") == "meets SLOs"), key=order)
    lines.append(f"Winner: {_label(win)} x {_count(win['replicas'], 'replica')} = {_count(win['gpus'], 'GPU')} at "
                 f"{_money(win['usd_per_hour'])}/hour: the cheapest of {len(feasible)} deployments found meeting "
                 f"every SLO. Its tightest objective, {win['binding']}, is at {100 * win['binding_ratio']:.0f}% of its limit.")
    if win.get("one_fewer"):
        fewer = win["replicas"] - 1
        lines.append(f"With {fewer} replica{'s' if fewer > 1 else ''}: {win['one_fewer']}.")
    if len(feasible) > 1:
        r = feasible[1]
        lines.append(f"Runner-up: {_label(r)} x {r['replicas']} = {_count(r['gpus'], 'GPU')} at {_money(r['usd_per_hour'])}/hour "
                     f"({_money(_diff(r, win))}/hour more).")
    near = [r for r in simulated if r.get("status") != "meets SLOs" and r.get("usd_per_hour") is not None
            and win["usd_per_hour"] is not None and r["usd_per_hour"] <= win["usd_per_hour"]]
    if near:
        r = min(near, key=lambda r: (r["binding_ratio"], r["candidate"]))
        lines.append(f"Nearest miss at no higher cost: {_label(r)} x {r['replicas']} at {_money(r['usd_per_hour'])}/hour "
                     f"{_needs(r)} ({r['slo_failures']}).")
    return lines


def _needs(row: dict) -> str:
    """What a missing candidate would need: its binding objective so much lower, or to stop saturating."""
    ratio = row["binding_ratio"]
    if row["binding"] == "saturation" or not math.isfinite(ratio):
        return "saturates: it would need more throughput"
    if row["binding"] == "good_share":
        return f"would need {100 * (ratio - 1):.0f}% more of its requests meeting the goodput thresholds"
    return f"would need {row['binding']} {100 * (1 - 1 / ratio):.1f}% lower"


def order(row: dict) -> tuple:
    usd, per_token = row.get("usd_per_hour"), row.get("usd_per_m_output_tokens")
    return (math.inf if usd is None else usd, row["gpus"], math.inf if per_token is None else per_token,
            row["candidate"])


def _diff(a: dict, b: dict) -> float | None:
    if a.get("usd_per_hour") is None or b.get("usd_per_hour") is None:
        return None
    return a["usd_per_hour"] - b["usd_per_hour"]
