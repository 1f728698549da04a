"""`capsim run --explain`: the working of the cost model for a typical decode step and a typical
prefill chunk: every term's time and how it was computed, the bound, and where each efficiency
and fixed time came from (the hardware and engine profiles' sources)."""

from __future__ import annotations

from dataclasses import dataclass

from capsim.cost.roofline import CostModel
from capsim.api import build_replica


@dataclass(frozen=True)
class Term:
    name: str
    seconds: float
    detail: str


@dataclass(frozen=True)
class Explained:
    title: str
    terms: list[Term]
    seconds: float
    bound: str


def _tb(x: float) -> str:
    return f"{x / 1e12:.3g} TB/s" if x >= 1e12 else f"{x / 1e9:.3g} GB/s"


def _bytes(x: float) -> str:
    return f"{x / 1e9:.3g} GB" if x >= 1e8 else f"{x / 1e6:.3g} MB"


def _rows(cm: CostModel, tokens: int) -> str:
    """The per-prompt-token row cost of attention, where the GPU profile has one."""
    if not cm.attention_token_s:
        return ""
    half = cm.rates.attention_half_keys if cm.rates is not None else 0.0
    return f" + {tokens:,} prompt tokens x {cm.attention_token_s * 1e6:.3g} us (each as {half:.0f} more keys)"


def decode_step(cm: CostModel, batch: int, context_tokens: int) -> Explained:
    """A decode-only step: `batch` sequences each attending `context_tokens` positions."""
    ctx = batch * context_tokens
    gc, gm, gf, gb = cm.gemm_part(batch, batch, batch)
    ac, am, af, ab = cm.attention_part(float(ctx), 0.0, float(ctx), 0.0, batch, batch)
    title = f"decode step: {batch} sequences at {context_tokens:,} tokens of context"
    return _explain(cm, title, batch, batch, True, (gc, gm, gf, gb), (ac, am, af, ab))


def prefill_chunk(cm: CostModel, tokens: int, context_tokens: int = 0) -> Explained:
    """One sequence computing `tokens` prompt tokens after `context_tokens` cached ones."""
    pairs = tokens * context_tokens + tokens * (tokens + 1) / 2
    gc, gm, gf, gb = cm.gemm_part(tokens, 1, 1)
    ac, am, af, ab = cm.attention_part(float(context_tokens + tokens), 0.0, pairs, 0.0, tokens, 1, tokens)
    title = f"prefill chunk: {tokens:,} prompt tokens after {context_tokens:,} cached"
    return _explain(cm, title, tokens, 1, False, (gc, gm, gf, gb), (ac, am, af, ab))


def _explain(cm: CostModel, title: str, tokens: int, seqs: int, decode_only: bool, gemm, attn) -> Explained:
    gc, gm, gf, gb = gemm
    ac, am, af, ab = attn
    es, eb = cm.elementwise_part(tokens)
    overhead, comm = cm.fixed_seconds(tokens, seqs, decode_only)
    ramp = cm.gemm_eta(tokens) / cm.eta_fl
    held = f", held at {cm.ramp_from_tokens:.0f} tokens" if tokens < cm.ramp_from_tokens else ""
    terms = [
        Term("GEMM weight reads", gm, f"{_bytes(gb)} / ({cm.eta_bw:.2f} x {_tb(cm.bandwidth)})"),
        Term("GEMM FLOPs", gc, f"{gf / 1e12:.3g} TFLOP / ({cm.eta_fl:.2f} x {cm.peak / 1e12:.0f} TFLOPS x ramp {ramp:.2f}{held})"),
        Term("attention KV traffic", am, f"{_bytes(ab)} / ({cm.eta_attn_bw:.2f} x {_tb(cm.bandwidth)})"),
        Term("attention FLOPs", ac, f"{af / 1e12:.3g} TFLOP / ({cm.eta_attn_fl:.2f} x {cm.attn_peak / 1e12:.0f} TFLOPS)"
             f" + {seqs} seqs x {cm.attention_seq_s * 1e6:.3g} us{'' if decode_only else _rows(cm, tokens)}"),
        Term("elementwise kernels", es, f"{_bytes(eb)} of norm/rope/activation traffic (engine profile)"),
        Term("fixed: host + kernels", overhead, _fixed_detail(cm, tokens, seqs, decode_only)),
        Term("all-reduce (TP)", comm, f"tp {cm.tp}: 2 per layer x {cm.model.num_layers} layers" if cm.tp > 1 else "tp 1: none"),
    ]
    seconds = cm.gemm_seconds(gc, gm) + max(ac, am) + es + overhead + comm
    compute_t = (gc if gc >= gm else 0.0) + (ac if ac >= am else 0.0)
    memory_t = (gm if gm > gc else 0.0) + (am if am > ac else 0.0) + es
    fixed = overhead + comm
    bound = "overhead" if fixed > compute_t and fixed > memory_t else ("compute" if compute_t >= memory_t else "memory")
    return Explained(title, terms, seconds, bound)


def _fixed_detail(cm: CostModel, tokens: int, seqs: int, decode_only: bool) -> str:
    r = cm.rates
    if r is None:
        return "none (document mode)"
    graph = r.uses_graph(tokens, decode_only)
    layer = r.layer_graph_s if graph else r.layer_eager_s
    host = r.step_s + r.seq_s * seqs
    per = f" / {r.steps_per_schedule} (multi-step)" if decode_only and r.steps_per_schedule > 1 else ""
    moe = r.moe_layer_graph_s if graph else r.moe_layer_eager_s
    moe_text = f" + {cm.moe_layers} MoE layers x {moe * 1e6:.3g} us" if cm.moe_layers and moe else ""
    split = f" ({r.step_s * 1e3:.3g} ms + {seqs} seqs x {r.seq_s * 1e6:.3g} us)" if r.seq_s and seqs else ""
    return (f"host {host * 1e3:.3g} ms{split}{per} + {cm.model.num_layers} layers x {layer * 1e6:.3g} us{moe_text} "
            f"({'CUDA graph' if graph else 'eager launches'})")


def front_end_line(cm: CostModel, prompt_tokens: float) -> str:
    """The serving front end's time per request (in TTFT and E2EL, not in a step) at this prompt length."""
    per_request, per_token = cm.front_end()
    total = per_request + per_token * prompt_tokens
    lag = ("; the overlap scheduler hands each token on after the replica's next step, so the first and last "
           "token arrive one step later" if cm.output_lag_steps() else "")
    return (f"per request, off the GPU: front end (HTTP, tokenising, hand-off, detokenising) {total * 1e3:.3f} ms = "
            f"{per_request * 1e3:.3g} ms + {per_token * 1e6:.3g} us x {prompt_tokens:,.0f} prompt tokens, "
            "added to TTFT and E2EL" + lag)


def render(items: list[Explained], cm: CostModel, prompt_tokens: float | None = None) -> str:
    """Plain-text tables, the front end's time per request (at `prompt_tokens`, when given) and
    the sources of every efficiency and fixed time."""
    lines = []
    engine = cm.engine.name if cm.engine else "none"
    lines.append(f"Cost model working: {cm.model.name}, {cm.weights_format.name} weights, {cm.kv_format.name} KV, "
                 f"{cm.hardware.name} x tp {cm.tp}, engine {engine}, {cm.mode} mode")
    for item in items:
        lines.append("")
        lines.append(f"{item.title}: {item.seconds * 1e3:.3f} ms, {item.bound}-bound")
        for t in item.terms:
            lines.append(f"  {t.name:<24} {t.seconds * 1e3:>9.3f} ms   {t.detail}")
        gemms = "(GEMM reads^4 + GEMM FLOPs^4)^(1/4)" if cm.mode == "realistic" else "max(GEMM reads, GEMM FLOPs)"
        lines.append(f"  (time = {gemms} + max(attention traffic, attention FLOPs) + elementwise + fixed + all-reduce)")
    if prompt_tokens is not None:
        lines.append("")
        lines.append(front_end_line(cm, prompt_tokens))
    if cm.rates is not None:
        lines.append("")
        lines.append("Where the numbers come from:")
        for key, text in cm.rates.sources.items():
            lines.append(f"  {key}: {text}")
    return "\n".join(lines)


def explain_run(result) -> str:
    """The working for a run's typical decode step (its mean batch size at the requests' mean
    context halfway through their answers) and a typical prefill chunk (the step token budget
    or the mean prompt, whichever is smaller)."""
    cm = build_replica(result.setup).cost
    s, req = result.summary, result.requests
    batch = max(1, round(s.get("mean_batch_size") or 1))
    prompt = float(req["prompt_tokens"].mean()) if len(req) else 1.0
    output = float(req["output_tokens"].mean()) if "output_tokens" in req and len(req) else 1.0
    context = max(1, round(prompt + output / 2))
    chunk = max(1, min(result.setup.max_num_batched_tokens, round(prompt)))
    return render([decode_step(cm, batch, context), prefill_chunk(cm, chunk)], cm, prompt)
