"""Fit the model's global efficiency factors to measured serving rows: vectorised least squares on log error.

Objective (stated once, minimised once): the sum over rows of ρ(ln(pred_TPOT/meas_TPOT)) + ρ(ln(pred_TTFT/meas_TTFT))
with ρ the soft-L1 loss 2δ²(√(1 + (r/δ)²) − 1), δ = 0.1 (squared error below ~10 %, absolute error above: the
median-like fit MAPE rewards, without letting a few rows 3x off pull every parameter),
over the fitted parameters only (`FITTED`), each kept inside its physical bounds by a logistic map
p = lo + (hi − lo)·σ(z). Minimiser: Levenberg–Marquardt on z with a forward-difference Jacobian. Every row's
efficiency-free parts are built once (`fit_data`), so one evaluation of the objective is a few numpy operations
over all rows; a fit takes about a second and cross-validation folds can refit from a warm start.
Everything else is measured data or physics, not fitted: memory bandwidth (specs: hbm_bw_efficiency), collective
curves (specs/collectives, used as measured), per-kernel cost in a CUDA graph (data/engine_overheads.toml), the
engines' prefill budgets and scheduling (specs.engines: first-token waves in serving.py); prefill_eff and
prefill_interference stay at their physical value 1 (fitted, they landed at 1.02 and 1.06 with no gain out of
sample: bench/RESULTS.md, issue 7 physics).
`LEGACY` is the parameter set of the previous model (18 numbers per (generation, backend) group plus a global
fit), kept only to measure that model's cross-validated error (data-build/validation_report.py).
What it does not: read or write files (data-build/fit_efficiency.py), choose rows, or change the physics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.serving import ServingParts, combine_serving, serving_parts, stack_serving
from servescope.perfmodel.step import map_parts
from servescope.specs.engines import value_since
from servescope.validation.validate import Row

# Fitted globally: (lower, upper) bounds and the rows that determine each (docs/model.md §Fitted numbers).
FITTED: dict[str, tuple[float, float, str]] = {
    "gemm_bw_eff": (0.3, 1.0, "TPOT of memory-bound decode, dense models and small batches"),
    "moe_bw_eff": (0.2, 1.0, "TPOT of memory-bound decode of MoE models"),
    "attn_bw_eff": (0.2, 1.0, "TPOT at long context / large batch (KV reads)"),
    "compute_eff": (0.2, 0.95, "TTFT (prefill GEMMs) and large-batch TPOT of dense models"),
    "moe_compute_eff": (0.05, 0.95, "TTFT and large-batch TPOT of MoE models"),
    "attn_compute_eff": (0.1, 0.95, "TTFT at long prompts (attention FLOPs)"),
    "cpu_overhead_s": (1e-5, 5e-3, "TPOT at small batches"),
    "cpu_overhead_per_seq_s": (1e-8, 5e-5, "TPOT growth with batch beyond the roofline"),
    "overlap_exposed_frac": (0.0, 1.0, "TPOT at small batches on engines whose default overlaps the CPU (vLLM >= "
                                       f"{value_since('vllm', 'overlap', 'enabled').removesuffix('.0')}, "
                                       "SGLang, TRT-LLM): the share of the step's CPU time left exposed"),
    "launch_overhead_s": (5e-7, 3e-5, "TTFT: per-kernel cost of an (eager/piecewise) prefill"),
    "prefill_overhead_s": (1e-4, 0.25, "TTFT at concurrency 1 (request set-up, tokenizer, first sampling)"),
    "ttft_queue_frac": (0.0, 1.0, "TTFT growth with concurrency on engines with mixed steps (vLLM, TRT-LLM)"),
    "mla_prefill_layer_s": (0.0, 4e-3, "TTFT of MLA models (DeepSeek-V3/R1, Kimi-K2.5, GLM-5)"),
    "linear_prefill_layer_s": (0.0, 4e-3, "TTFT of linear-attention models (Qwen3.5)"),
}
# Numbers held at their physical value in the shipped fit, with the bounds a fit of them would use (the scheduler
# simulation's own prefill fit, simulate/fit.py, grids prefill_eff within these).
HELD: dict[str, tuple[float, float, str]] = {
    "prefill_eff": (0.2, 1.5, "held at 1: prefill kernels at the decode kernels' efficiencies"),
    "prefill_interference": (0.0, 2.0, "held at 1: every other request's prefill inside the decode window"),
}
BOUNDS: dict[str, tuple[float, float, str]] = {**FITTED, **HELD}
LEGACY: dict[str, tuple[float, float, str]] = {
    **BOUNDS,
    "collective_latency_scale": (0.5, 4.0, "legacy"),
    "collective_bw_scale": (0.25, 2.0, "legacy"),
    "kernel_overhead_s": (0.0, 1e-5, "legacy"),
}
GroupKey = tuple[str, str]
Overrides = dict[str, dict[str, float]]
# Numbers each engine may set for itself (its scheduler and front end differ), shrunk toward the global value;
# only for backends with rows of >= MIN_MODELS_OVERRIDE models. Shipped: none (BY_BACKEND empty) — with these
# four offsets the cross-validated TTFT got worse (leave-one-system-out 36.7 % -> 38.5 %, leave-one-backend-out
# 37.5 % -> 41.0 %) although in-sample improved (34.8 % -> 31.5 %); docs/model.md §4.
BY_BACKEND_CANDIDATES = ("cpu_overhead_s", "prefill_overhead_s", "ttft_queue_frac")
BY_BACKEND: tuple[str, ...] = ()
MIN_MODELS_OVERRIDE = 4
SHRINK_TAU_Z = 1.0  # prior scale of a backend's offset in logistic space
MAX_STEP_Z = 3.0  # largest change of one logistic coordinate per iteration (keeps steps off the flat tails)
SOFT_L1_S = 0.1  # log-error scale (≈ 10 %) where the loss turns from squared to absolute


@dataclass(frozen=True)
class FitData:
    """Stacked efficiency-free parts of every modelled row, the measured values and each row's labels."""

    parts: ServingParts
    tpot_s: np.ndarray
    ttft_s: np.ndarray
    ids: tuple[str, ...]
    labels: dict[str, np.ndarray]  # model, system, backend, generation, vendor per row (object arrays)

    def subset(self, mask: np.ndarray) -> FitData:
        p = self.parts
        dec, pf, wave = (map_parts(s, lambda x: x[mask]) for s in (p.dec, p.pf, p.wave))
        sp = ServingParts(dec, pf, wave, *(getattr(p, f)[mask] for f in _SERVING_FIELDS))
        ids = tuple(i for i, m in zip(self.ids, mask, strict=True) if m)
        return FitData(sp, self.tpot_s[mask], self.ttft_s[mask], ids, {k: v[mask] for k, v in self.labels.items()})


_SERVING_FIELDS = ("concurrency", "cap", "osl", "dp", "n_mla", "n_lin", "per_step", "in_step", "lockstep", "mixed")


def fit_data(rows: Sequence[Row]) -> FitData:
    """Parts of every modelled row, grouped by scenario so each scenario is built into parts once."""
    groups: dict[int, list[Row]] = defaultdict(list)
    for r in rows:
        if r.scenario is not None:
            groups[id(r.scenario)].append(r)
    parts, ordered = [], []
    for grp in groups.values():
        sc = grp[0].scenario
        assert sc is not None
        parts.append(serving_parts(sc, [r.concurrency for r in grp], flat=True))
        ordered.extend(grp)
    lab = {
        "model": [r.model for r in ordered], "system": [r.system for r in ordered],
        "backend": [r.backend for r in ordered],
        "generation": [r.scenario.gpu.generation if r.scenario else "" for r in ordered],
        "vendor": [r.scenario.gpu.vendor if r.scenario else "" for r in ordered],
    }
    return FitData(stack_serving(parts), np.array([r.tpot_ms for r in ordered]) / 1e3,
                   np.array([r.ttft_ms for r in ordered]) / 1e3, tuple(r.id for r in ordered),
                   {k: np.array(v, dtype=object) for k, v in lab.items()})


def row_efficiency(data: FitData, eff: Efficiency, overrides: Overrides | None = None) -> Efficiency:
    """`eff` with each backend's overridden numbers as per-row arrays (combine_serving broadcasts them)."""
    if not overrides:
        return eff
    be = data.labels["backend"]
    arrays: dict[str, Any] = {}
    for backend, vals in overrides.items():
        m = be == backend
        for name, v in vals.items():
            arr = arrays.setdefault(name, np.full(len(be), float(getattr(eff, name))))
            arr[m] = v
    return replace(eff, **arrays)


def predict_data(data: FitData, eff: Efficiency, overrides: Overrides | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(TPOT s, TTFT s) of every row of `data` with one set of efficiencies (plus per-backend overrides)."""
    a = combine_serving(data.parts, row_efficiency(data, eff, overrides))
    return a["tpot_s"], a["ttft_s"]


@dataclass(frozen=True)
class FitResult:
    efficiency: Efficiency
    rows: int
    objective: float  # mean of the squared log errors (TPOT and TTFT), at the optimum
    iterations: int
    at_bound: tuple[str, ...]  # fitted parameters within 1 % of the bound range of a bound
    overrides: Overrides = field(default_factory=dict)  # backend -> {number: value}, shrunk toward the global one
    roofline: Efficiency | None = None  # a two-stage fit's first stage (curves off): prices GPUs without curves


def _residuals(data: FitData, eff: Efficiency) -> np.ndarray:
    a = combine_serving(data.parts, eff)
    tpot, ttft = a["tpot_s"], a["ttft_s"]
    r = np.concatenate([tpot / data.tpot_s - 1.0, ttft / data.ttft_s - 1.0])
    r = np.where(np.isfinite(r), r, 10.0)
    # soft-L1 (pseudo-Huber) on the relative error: Σ r̃² = Σ 2δ²(√(1 + (r/δ)²) − 1) ≈ Σ r² near 0, ≈ 2δ·Σ|r|
    # beyond δ — a smooth stand-in for the MAPE the validation reports
    return np.asarray(np.sign(r) * SOFT_L1_S * np.sqrt(2.0 * (np.sqrt(1.0 + (r / SOFT_L1_S) ** 2) - 1.0)))


def _to_z(x: float, lo: float, hi: float) -> float:
    u = min(max((x - lo) / (hi - lo), 1e-4), 1 - 1e-4)
    return float(np.log(u / (1.0 - u)))


def _from_z(z: np.ndarray, bounds: Sequence[tuple[float, float]]) -> list[float]:
    zc = np.clip(z, -30.0, 30.0)
    return [lo + (hi - lo) / (1.0 + np.exp(-zi)) for zi, (lo, hi) in zip(zc, bounds, strict=True)]


def override_backends(data: FitData) -> list[str]:
    """Backends with rows of at least MIN_MODELS_OVERRIDE models: only they may override a global number."""
    out = []
    for b in sorted(set(data.labels["backend"])):
        if len(set(data.labels["model"][data.labels["backend"] == b])) >= MIN_MODELS_OVERRIDE:
            out.append(str(b))
    return out


# The kernel-class efficiencies: fractions of the datasheet roofline of a whole class (GEMM, MoE, attention). Where
# a measured per-op curve prices part of a class (Efficiency.op_curves) they only price what no curve covers, so
# they are fitted on the roofline path, where they price every class whole (`fit`, stage 1).
KERNEL_EFFICIENCIES = ("gemm_bw_eff", "moe_bw_eff", "attn_bw_eff", "compute_eff", "moe_compute_eff",
                       "attn_compute_eff")
# Held from the first stage too: the CPU cost of one eager kernel launch, which a measured curve (a kernel's GPU
# time) does not contain; refitted with the curves on it fell to its lower bound, below a graph replay's per-kernel
# cost (an eager step priced cheaper than a graphed one), absorbing the prefill curves' TTFT instead.
ROOFLINE_STAGE = (*KERNEL_EFFICIENCIES, "launch_overhead_s")


def fit(data: FitData, start: Efficiency, params: dict[str, tuple[float, float, str]] = FITTED,
        iterations: int = 200, by_backend: tuple[str, ...] = ()) -> FitResult:
    """The shipped fit. With the measured per-op curves on (start.op_curves), two stages: (1) every parameter with
    the curves off — the roofline path, where the kernel-class efficiencies price every class whole (and a GPU
    without curves is priced); (2) the curves on, the kernel-class efficiencies and the eager launch cost held at
    stage 1's values (ROOFLINE_STAGE), the rest (host, overhead and prefill numbers) refitted from stage 1's.
    Curves off: stage 1 alone (`fit_once`)."""
    if start.op_curves <= 0.5 or not any(k in params for k in ROOFLINE_STAGE):
        return fit_once(data, start, params, iterations, by_backend)
    first = fit_once(data, start.scaled(op_curves=0.0), params, iterations, by_backend)
    rest = {k: v for k, v in params.items() if k not in ROOFLINE_STAGE}
    if not rest:
        return replace(first, efficiency=first.efficiency.scaled(op_curves=1.0))
    second = fit_once(data, first.efficiency.scaled(op_curves=1.0), rest, iterations,
                      tuple(b for b in by_backend if b not in ROOFLINE_STAGE))
    held = {b: {k: v for k, v in vals.items() if k in ROOFLINE_STAGE} for b, vals in first.overrides.items()}
    overrides = {b: {**held.get(b, {}), **second.overrides.get(b, {})} for b in {*held, *second.overrides}}
    at_bound = tuple(n for n in first.at_bound if n in ROOFLINE_STAGE) + second.at_bound
    return FitResult(second.efficiency, second.rows, second.objective, first.iterations + second.iterations,
                     at_bound, {b: v for b, v in overrides.items() if v}, first.efficiency)


def fit_once(data: FitData, start: Efficiency, params: dict[str, tuple[float, float, str]] = FITTED,
             iterations: int = 200, by_backend: tuple[str, ...] = ()) -> FitResult:
    """Levenberg–Marquardt on the logistic-mapped parameters (module docstring), from `start`. `by_backend` numbers
    also get a per-backend offset δ in logistic space for each backend of `override_backends`, shrunk toward the
    global value by the penalty residual √n_b · SOFT_L1_S · δ / SHRINK_TAU_Z (a normal prior of scale
    SHRINK_TAU_Z on δ, weighted like n_b rows of the fit's own loss)."""
    pb, z = _problem(data, start, params, by_backend)
    z, r, cost, it = _levenberg_marquardt(pb.resid, z, iterations)
    return _fit_result(pb, z, cost / len(r), it)


@dataclass(frozen=True)
class _Problem:
    """One fit in logistic space (module docstring): z holds the global parameters `names` (each inside its
    `bounds`), then one per-backend offset for each (parameter, backend) of `offsets`, shrunk by `weights`."""

    data: FitData
    start: Efficiency
    names: list[str]
    bounds: list[tuple[float, float]]
    by_backend: tuple[str, ...]
    offsets: list[tuple[str, str]]
    masks: dict[str, np.ndarray]
    weights: np.ndarray

    def eff_at(self, zv: np.ndarray) -> Efficiency:
        """The efficiency at `zv`: global numbers as floats, per-backend ones as per-row arrays."""
        names, bounds, k = self.names, self.bounds, len(self.names)
        vals: dict[str, Any] = dict(zip(names, _from_z(zv[:k], bounds), strict=True))
        for j, (p, b) in enumerate(self.offsets):
            i = names.index(p)
            if not isinstance(vals[p], np.ndarray):
                vals[p] = np.full(len(self.data.labels["backend"]), zv[i])
            vals[p] = np.where(self.masks[b], vals[p] + zv[k + j], vals[p])
        for p in self.by_backend:
            if p in vals and isinstance(vals[p], np.ndarray) and self.offsets:
                lo, hi = bounds[names.index(p)]
                vals[p] = lo + (hi - lo) / (1.0 + np.exp(-np.clip(vals[p], -30.0, 30.0)))
        return replace(self.start, **vals)

    def resid(self, zv: np.ndarray) -> np.ndarray:
        """The rows' residuals at `zv`, then the offsets' shrinkage penalties."""
        r0 = _residuals(self.data, self.eff_at(zv))
        return np.concatenate([r0, self.weights * zv[len(self.names):]]) if self.offsets else r0


def _problem(data: FitData, start: Efficiency, params: dict[str, tuple[float, float, str]],
             by_backend: tuple[str, ...]) -> tuple[_Problem, np.ndarray]:
    """The fit of `params` from `start` (offsets for `by_backend` numbers, one per backend of `override_backends`)
    and its starting point in z (offsets at 0)."""
    names = list(params)
    bounds = [(params[n][0], params[n][1]) for n in names]
    z0 = np.array([_to_z(float(getattr(start, n)), lo, hi) for n, (lo, hi) in zip(names, bounds, strict=True)])
    backends = override_backends(data) if by_backend else []
    offsets = [(p, b) for p in by_backend for b in backends]
    be = data.labels["backend"]
    masks = {b: be == b for b in backends}
    weights = np.array([np.sqrt(masks[b].sum()) * SOFT_L1_S / SHRINK_TAU_Z for _, b in offsets])
    z = np.concatenate([z0, np.zeros(len(offsets))])
    return _Problem(data, start, names, bounds, by_backend, offsets, masks, weights), z


def _levenberg_marquardt(resid: Callable[[np.ndarray], np.ndarray], z: np.ndarray,
                         iterations: int) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Levenberg–Marquardt from `z`: at most `iterations` Jacobians; stops when no damped step lowers the cost or
    one lowers it by less than 1e-6 of it. Returns z, its residuals, their squared sum and the iterations run."""
    r = resid(z)
    cost, lam, it = float(r @ r), 1e-2, 0
    for it in range(1, iterations + 1):  # noqa: B007
        stepped = _damped_step(resid, z, r, cost, lam, _jacobian(resid, z, r))
        if stepped is None:
            break
        z, r, c_new, lam = stepped
        converged = cost - c_new < 1e-6 * cost
        cost = c_new
        if converged:
            break
    return z, r, cost, it


def _jacobian(resid: Callable[[np.ndarray], np.ndarray], z: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The forward-difference Jacobian of `resid` at `z` (residuals `r`), step 1e-4 in z."""
    jac = np.empty((len(r), len(z)))
    for j in range(len(z)):
        dz = np.zeros_like(z)
        dz[j] = 1e-4
        jac[:, j] = (resid(z + dz) - r) / 1e-4
    return jac


def _damped_step(resid: Callable[[np.ndarray], np.ndarray], z: np.ndarray, r: np.ndarray, cost: float, lam: float,
                 jac: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float] | None:
    """The first damped Gauss–Newton step (damping λ·diag(JᵀJ), λ raised 4x until it fits the trust region
    MAX_STEP_Z and lowers the cost, up to 1e8) as (z, residuals, cost, next λ = λ/3), or None when none does."""
    # a parameter no row is sensitive to (e.g. the MLA prefill cost on rows without MLA models) stays put
    active = np.linalg.norm(jac, axis=0) > 1e-6 * max(float(np.linalg.norm(jac, axis=0).max()), 1e-300)
    ja = jac[:, active]
    jtj, g = ja.T @ ja, ja.T @ r
    while lam < 1e8:
        step = np.zeros_like(z)
        step[active] = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj)), -g)
        if float(np.max(np.abs(step))) > MAX_STEP_Z:  # trust region in z: damp harder, do not rescale
            lam = max(lam, 1e-6) * 4.0
            continue
        r_new = resid(z + step)
        c_new = float(r_new @ r_new)
        if c_new < cost:
            return z + step, r_new, c_new, lam / 3.0
        lam *= 4.0
    return None


def _fit_result(pb: _Problem, z: np.ndarray, cost_per_residual: float, iterations: int) -> FitResult:
    """The fit at `z`: the global efficiency, the per-backend overrides and the numbers near a bound (within 1 %)."""
    names, bounds, k = pb.names, pb.bounds, len(pb.names)
    glob = pb.start.scaled(**dict(zip(names, _from_z(z[:k], bounds), strict=True)))
    overrides: Overrides = {}
    for j, (p, b) in enumerate(pb.offsets):
        lo, hi = bounds[names.index(p)]
        overrides.setdefault(b, {})[p] = _from_z(np.array([z[names.index(p)] + z[k + j]]), [(lo, hi)])[0]
    near = tuple(n for n, (lo, hi) in zip(names, bounds, strict=True)
                 if min(getattr(glob, n) - lo, hi - getattr(glob, n)) < 0.01 * (hi - lo))
    return FitResult(glob, len(pb.data.tpot_s), cost_per_residual, iterations, near, overrides)


@dataclass(frozen=True)
class GroupedFit:
    """A global fit plus optional per-(generation, backend) refits (LEGACY structure only)."""

    glob: FitResult
    groups: dict[GroupKey, FitResult]

    def predict(self, data: FitData) -> tuple[np.ndarray, np.ndarray]:
        tpot, ttft = predict_data(data, self.glob.efficiency, self.glob.overrides)
        for key, res in self.groups.items():
            m = (data.labels["generation"] == key[0]) & (data.labels["backend"] == key[1])
            if m.any():
                t2, f2 = predict_data(data.subset(m), res.efficiency)
                tpot, ttft = tpot.copy(), ttft.copy()
                tpot[m], ttft[m] = t2, f2
        return tpot, ttft


def fit_grouped(data: FitData, start: Efficiency, params: dict[str, tuple[float, float, str]] = FITTED,
                min_rows: int = 0, iterations: int = 200, by_backend: tuple[str, ...] = ()) -> GroupedFit:
    """Global fit (with `by_backend` offsets); with min_rows > 0 each (generation, backend) group with >= min_rows
    rows is refitted from it (LEGACY structure only)."""
    glob = fit(data, start, params, iterations, by_backend)
    groups: dict[GroupKey, FitResult] = {}
    if min_rows > 0:
        keys = sorted(set(zip(data.labels["generation"], data.labels["backend"], strict=True)))
        for gen, be in keys:
            m = (data.labels["generation"] == gen) & (data.labels["backend"] == be)
            if int(m.sum()) >= min_rows:
                groups[(str(gen), str(be))] = fit(data.subset(m), glob.efficiency, params, iterations)
    return GroupedFit(glob, groups)
