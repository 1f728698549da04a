"""Fit the cost model to measured points, weighted for relative error, with held-out errors.

- decode attention: t = a + kv_bytes * s                      (a: per-call cost; 1/s: achieved bandwidth)
- GEMMs and prefill, two forms, the one with the lower 5-fold error kept:
    additive   t = a + bytes * s_b + flops_eff * s_f
    roofline   t = a + max(bytes * s_b, flops_eff * s_f)
  with flops_eff = flops * (M + h) / M, the simulator's GEMM ramp eff(M) = compute * M / (M + h),
  h chosen on a grid (GEMMs only; prefill has h = 0). Prefill's candidates are roofline and
    rows       t = a + flops * s_f + rows * s_r
  rows = batch x new tokens x query heads x head dim: each new token's row costs as much as
  s_r / (4 s_f) more attended keys (the simulator's Efficiency.attention_half_keys).

All coefficients are non-negative (exact NNLS). Errors are MAPE in percent: on the training points,
5-fold cross-validated, and leave-one-group-out for each grouping (context, batch, M).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

H_GRID = (0.0,) + tuple(float(2**i) for i in range(14))


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a few columns: the best non-negative least-squares
    solution over every support set (the NNLS optimum is the plain LS solution on its own support).

    numpy has no NNLS and the problems here have at most three unknowns, so 2^3 small solves are
    cheaper than a scipy dependency.
    """
    n = a.shape[1]
    if n > 6:
        raise ValueError("nnls: at most 6 columns")
    best, best_err = np.zeros(n), float(np.sum(b * b))
    for size in range(1, n + 1):
        for cols in itertools.combinations(range(n), size):
            sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(sol < 0):
                continue
            x = np.zeros(n)
            x[list(cols)] = sol
            err = float(np.sum((a @ x - b) ** 2))
            if err < best_err - 1e-300:
                best, best_err = x, err
    return best


@dataclass(frozen=True)
class Model:
    """A fitted form: coefficients a (s), s_b (s/byte), s_f (s/FLOP), h (ramp tokens), s_r (s per
    query row and head dimension)."""

    form: str  # "linear" (decode), "additive", "roofline" or "rows" (prefill)
    a: float
    s_b: float
    s_f: float = 0.0
    h: float = 0.0
    s_r: float = 0.0

    def predict(self, pts: dict[str, np.ndarray]) -> np.ndarray:
        mem = pts["bytes"] * self.s_b
        comp = _flops_eff(pts, self.h) * self.s_f
        if self.form == "roofline":
            return self.a + np.maximum(mem, comp)
        return self.a + mem + comp + pts["rows"] * self.s_r

    def half_keys(self) -> float:
        """The attended keys one query row's own cost equals (rows form; 0 otherwise)."""
        return self.s_r / (4.0 * self.s_f) if self.s_r > 0 and self.s_f > 0 else 0.0


def _flops_eff(pts: dict[str, np.ndarray], h: float) -> np.ndarray:
    if h == 0.0:
        return pts["flops"]
    return pts["flops"] * (pts["m"] + h) / pts["m"]


def fit_linear(pts: dict[str, np.ndarray]) -> Model:
    """Decode: t = a + bytes * s, NNLS on rows divided by t (relative error)."""
    w = 1.0 / pts["t"]
    a_mat = np.column_stack([w, pts["bytes"] * w])
    coef = nnls(a_mat, np.ones_like(w))
    return Model("linear", float(coef[0]), float(coef[1]))


def _fit_additive(pts: dict[str, np.ndarray], h: float) -> Model:
    w = 1.0 / pts["t"]
    a_mat = np.column_stack([w, pts["bytes"] * w, _flops_eff(pts, h) * w])
    coef = nnls(a_mat, np.ones_like(w))
    return Model("additive", float(coef[0]), float(coef[1]), float(coef[2]), h)


def fit_rows_form(pts: dict[str, np.ndarray]) -> Model:
    """Prefill: t = a + flops * s_f + rows * s_r, NNLS on rows divided by t (relative error)."""
    w = 1.0 / pts["t"]
    coef = nnls(np.column_stack([w, pts["flops"] * w, pts["rows"] * w]), np.ones_like(w))
    return Model("rows", float(coef[0]), 0.0, float(coef[1]), 0.0, float(coef[2]))


def _fit_roofline(pts: dict[str, np.ndarray], h: float, start: Model) -> Model:
    """max() is piecewise linear: alternate between assigning each point to its binding term and an
    NNLS solve of the assigned problem, from the additive fit, until the assignment stops changing."""
    w = 1.0 / pts["t"]
    flops = _flops_eff(pts, h)
    model = Model("roofline", start.a, start.s_b, start.s_f, h)
    best, best_err = model, _rel_sse(model, pts)
    mem_bound = None
    for _ in range(25):
        now = pts["bytes"] * model.s_b >= flops * model.s_f
        if mem_bound is not None and np.array_equal(now, mem_bound):
            break
        mem_bound = now
        a_mat = np.column_stack([w, pts["bytes"] * w * now, flops * w * ~now])
        coef = nnls(a_mat, np.ones_like(w))
        model = Model("roofline", float(coef[0]), float(coef[1]), float(coef[2]), h)
        err = _rel_sse(model, pts)
        if err < best_err:
            best, best_err = model, err
    return best


def _rel_sse(model: Model, pts: dict[str, np.ndarray]) -> float:
    return float(np.sum(((model.predict(pts) - pts["t"]) / pts["t"]) ** 2))


def fit_form(pts: dict[str, np.ndarray], form: str, h_grid: Sequence[float]) -> Model:
    """Best model of one form over the ramp grid (relative squared error on the training points)."""
    best = None
    for h in h_grid:
        additive = _fit_additive(pts, h)
        model = additive if form == "additive" else _fit_roofline(pts, h, additive)
        if best is None or _rel_sse(model, pts) < _rel_sse(best, pts):
            best = model
    assert best is not None
    return best


def mape_pct(model: Model, pts: dict[str, np.ndarray]) -> float:
    """Mean absolute percentage error of the model on the points."""
    return float(np.mean(np.abs(model.predict(pts) - pts["t"]) / pts["t"]) * 100.0)


def to_arrays(rows: Sequence[dict]) -> dict[str, np.ndarray]:
    """Measured rows -> column arrays (t, bytes, flops, m and the grouping keys)."""
    cols = {"t": "time_s", "bytes": "bytes", "flops": "flops", "context_tokens": "context_tokens", "batch": "batch"}
    out = {name: np.array([float(r.get(key) or 0.0) for r in rows]) for name, key in cols.items()}
    out["m"] = np.array([float(r.get("m_run") or r.get("m") or 0.0) for r in rows])  # rows really multiplied
    out["rows"] = np.array([_query_rows(r) for r in rows])
    return out


def _query_rows(row: dict) -> float:
    """A prefill row's new tokens x query heads x head dim (0 for other families)."""
    if row.get("family") != "prefill":
        return 0.0
    return float(row["batch"]) * float(row["context_tokens"]) * float(row["q_heads"]) * float(row["head_dim"])


def _subset(pts: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[keep] for k, v in pts.items()}


Fitter = Callable[[dict[str, np.ndarray]], Model]


def kfold_mape(pts: dict[str, np.ndarray], fitter: Fitter, k: int = 5, seed: int = 0) -> float | None:
    """k-fold cross-validated MAPE (shuffled with a fixed seed); None with too few points."""
    n = len(pts["t"])
    if n < max(3, k):
        return None
    folds = np.array_split(np.random.default_rng(seed).permutation(n), k)
    errors = np.empty(n)
    for test in folds:
        train = np.ones(n, dtype=bool)
        train[test] = False
        model = fitter(_subset(pts, train))
        held = _subset(pts, ~train)
        errors[test] = np.abs(model.predict(held) - held["t"]) / held["t"]
    return float(errors.mean() * 100.0)


def logo_mape(pts: dict[str, np.ndarray], fitter: Fitter, key: str) -> float | None:
    """Leave-one-group-out MAPE: each distinct value of `key` predicted from the others."""
    values = np.unique(pts[key])
    if len(values) < 3:
        return None
    errors = np.empty(len(pts["t"]))
    for value in values:
        test = pts[key] == value
        model = fitter(_subset(pts, ~test))
        held = _subset(pts, test)
        errors[test] = np.abs(model.predict(held) - held["t"]) / held["t"]
    return float(errors.mean() * 100.0)


@dataclass
class FamilyFit:
    """One kernel family's fit: the kept model, its errors (percent), and the other form's 5-fold error."""

    family: str  # e.g. "decode.triton", "gemm.bf16", "prefill"
    model: Model
    n_points: int
    mape_pct: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, float] = field(default_factory=dict)  # other form -> its 5-fold MAPE


def fit_family(rows: Sequence[dict], family: str, *, kind: str, groups: Sequence[str]) -> FamilyFit | None:
    """Fit one family's rows (kind "decode", "gemm" or "prefill"); None with fewer than 2 points."""
    pts = to_arrays(rows)
    if len(pts["t"]) < 2:
        return None
    if kind == "decode":
        fitters = {"linear": fit_linear}
    else:
        h_grid = H_GRID if kind == "gemm" else (0.0,)
        # Prefill's additive form is the rows form with QKV-and-output bytes in place of rows (the
        # same model up to the GQA ratio); the rows form is the one the simulator has a field for.
        forms = ("roofline", "rows") if kind == "prefill" else ("additive", "roofline")
        fitters = {form: (fit_rows_form if form == "rows" else (lambda p, f=form: fit_form(p, f, h_grid)))
                   for form in forms}
    cv = {form: kfold_mape(pts, fitter) for form, fitter in fitters.items()}
    best = min(fitters, key=lambda f: (cv[f] if cv[f] is not None else 0.0, f != "roofline"))
    fitter = fitters[best]
    out = FamilyFit(family, fitter(pts), len(pts["t"]))
    out.mape_pct["train"] = mape_pct(out.model, pts)
    if cv[best] is not None:
        out.mape_pct["kfold"] = cv[best]
    for key in groups:
        err = logo_mape(pts, fitter, key)
        if err is not None:
            out.mape_pct[f"logo_{key}"] = err
    out.rejected = {f: v for f, v in cv.items() if f != best and v is not None}
    return out


def fit_rows(rows: Sequence[dict]) -> dict[str, FamilyFit]:
    """Fit every family present in measured rows (rows with an error or no time are left out).

    Decode is fitted per backend and KV dtype ("decode.triton.bf16", ...), GEMMs per dtype ("gemm.bf16").
    """
    good = [r for r in rows if r.get("time_s") and not r.get("error")]
    groups: dict[str, tuple[str, list[dict]]] = {}
    for r in good:
        if r["family"] == "decode":
            groups.setdefault(f"decode.{r['backend']}.{r['kv_dtype']}", ("decode", []))[1].append(r)
        elif r["family"] == "gemm":
            groups.setdefault(f"gemm.{r['dtype']}", ("gemm", []))[1].append(r)
        elif r["family"] == "prefill":
            groups.setdefault("prefill", ("prefill", []))[1].append(r)
    keys = {"decode": ("context_tokens", "batch"), "gemm": ("m",), "prefill": ("context_tokens",)}
    fits = {}
    for name, (kind, members) in sorted(groups.items()):
        fitted = fit_family(members, name, kind=kind, groups=keys[kind])
        if fitted is not None:
            fits[name] = fitted
    return fits
