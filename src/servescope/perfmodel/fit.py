"""Fit the model's efficiency factors to measured serving rows (least absolute log error, numpy only).

Objective per group of rows (one GPU generation × backend), the reported metric itself:
    J = MAPE(TPOT) + w_ttft · MAPE(TTFT),   MAPE = mean |pred − meas| / meas,   w_ttft = W_TTFT = 2
minimised by cyclic coordinate search over a shrinking multiplicative grid (each parameter in turn tries
x·f for f in a grid, clipped to physical bounds; the best J is kept). `objective(..., log=True)` gives the
scale-free mean |ln(pred/meas)| instead (reported next to the fit, not minimised).
Only efficiency factors are fitted — never per-model or per-row terms — so the result transfers to other
models on the same GPU generation and backend.
What it does not: read or write files (bench/fit_efficiency.py does), or change the physics.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.serving import linear_layers, mla_layers, predict_arrays, ttft_s
from servescope.perfmodel.validate import Row

# (lower, upper) bounds; every fitted field is physical: a fraction of a peak, a scale or an overhead in s.
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_bw_eff": (0.3, 1.0),
    "moe_bw_eff": (0.2, 1.0),
    "attn_bw_eff": (0.2, 1.0),
    "compute_eff": (0.2, 0.95),
    "moe_compute_eff": (0.1, 0.95),
    "attn_compute_eff": (0.1, 0.95),
    "collective_latency_scale": (0.5, 4.0),
    "collective_bw_scale": (0.25, 2.0),
    "kernel_overhead_s": (0.0, 1.0e-5),
    "cpu_overhead_s": (0.0, 1.0e-2),
    "prefill_overhead_s": (0.0, 0.25),
    "prefill_eff": (0.2, 1.5),
    "prefill_interference": (0.0, 2.0),
    "ttft_queue_frac": (0.0, 1.0),
    "ttft_queue_exp": (0.3, 1.0),
    "launch_overhead_s": (1.0e-6, 3.0e-5),
    "mla_prefill_layer_s": (0.0, 4.0e-3),  # 0-4 ms per MLA layer per prefill (0-250 ms for 61 layers)
    "linear_prefill_layer_s": (0.0, 4.0e-3),  # 0-4 ms per linear-attention/Mamba layer per prefill
}
GRID_ONLY = ("mla_prefill_layer_s", "linear_prefill_layer_s")  # set by the TTFT grid alone (TTFT-only and closed form: no coordinate search)
COORD_PARAMS = tuple(name for name in BOUNDS if name not in GRID_ONLY)
_GRID = (0.5, 0.7, 0.85, 1.0, 1.18, 1.4, 2.0)
W_TTFT = 2.0  # TTFT weighted twice: TPOT has margin to its target, TTFT not (1.0: TPOT 13.9% / TTFT 25.3%)


@dataclass(frozen=True)
class FitResult:
    efficiency: Efficiency
    rows: int
    objective_before: float
    objective_after: float
    tpot_mape: float
    ttft_mape: float


def group_key(row: Row) -> tuple[str, str]:
    assert row.scenario is not None
    return str(row.scenario.gpu.generation), row.backend


def _by_scenario(rows: list[Row]) -> list[tuple[Any, np.ndarray, np.ndarray, np.ndarray]]:
    g: dict[int, list[Row]] = defaultdict(list)
    for r in rows:
        if r.scenario is not None:
            g[id(r.scenario)].append(r)
    return [(v[0].scenario, np.array([r.concurrency for r in v], dtype=float),
             np.array([r.tpot_ms for r in v]) / 1e3, np.array([r.ttft_ms for r in v]) / 1e3) for v in g.values()]


def _errors(groups: list, eff: Efficiency) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log TPOT ratios, log TTFT ratios, TPOT APE, TTFT APE) over all rows of the groups."""
    lt, lf, at, af = [], [], [], []
    for sc, conc, tpot, ttft in groups:
        a = predict_arrays(replace(sc, efficiency=eff), conc)
        lt.append(np.log(a["tpot_s"] / tpot))
        lf.append(np.log(a["ttft_s"] / ttft))
        at.append(np.abs(a["tpot_s"] - tpot) / tpot)
        af.append(np.abs(a["ttft_s"] - ttft) / ttft)
    return np.concatenate(lt), np.concatenate(lf), np.concatenate(at), np.concatenate(af)


def objective(groups: list, eff: Efficiency, w_ttft: float = W_TTFT, log: bool = False) -> float:
    lt, lf, at, af = _errors(groups, eff)
    if log:
        return float(np.mean(np.abs(lt)) + w_ttft * np.mean(np.abs(lf)))
    return float(np.mean(at) + w_ttft * np.mean(af))


def _step(x: float, f: float, lo: float, hi: float) -> float:
    if x == 0.0 and f != 1.0:  # an overhead at zero: try a small absolute value instead of a product
        x = 0.05 * hi
    return min(max(x * f, lo), hi)


TTFT_PARAMS = ("prefill_eff", "prefill_overhead_s", "ttft_queue_frac", "ttft_queue_exp", *GRID_ONLY)


def _ttft_grid(groups: list, eff: Efficiency) -> Efficiency:
    """Exhaustive grid over the TTFT-only constants (TTFT MAPE, closed form in serving.ttft_s; TPOT held at its
    current prediction). Cheap: every candidate is one numpy broadcast over all rows. A per-layer prefill cost is
    gridded only when the rows contain a model with such layers (else it stays where it is)."""
    parts = []
    for sc, conc, _, ttft in groups:
        a = predict_arrays(replace(sc, efficiency=eff), conc)
        p = a["parts"]
        parts.append((np.full_like(conc, p["pf_step"]), np.full_like(conc, p["pf_overhead"]), p["dec_step"],
                      conc, np.full_like(conc, p["cap"]), a["tpot_s"], np.full_like(conc, sc.osl),
                      np.full_like(conc, sc.dp), np.full_like(conc, p["n_mla"]),
                      np.full_like(conc, p["n_lin"]), ttft))
    pf, po, dec, c, cap, tpot, osl, dp, nm, nl, meas = (np.concatenate(x) for x in zip(*parts, strict=True))
    ov = np.concatenate([[0.0], np.geomspace(1e-3, BOUNDS["prefill_overhead_s"][1], 13)])[:, None, None, None]
    qf = np.concatenate([[0.0], np.geomspace(0.01, 1.0, 15)])[None, :, None, None]
    qe = np.linspace(BOUNDS["ttft_queue_exp"][0], 1.0, 8)[None, None, :, None]

    def layer_grid(name: str, n: np.ndarray) -> list[float]:
        hi = BOUNDS[name][1]
        return [0.0, *np.geomspace(hi / 40.0, hi, 7)] if n.any() else [float(getattr(eff, name))]

    pes = np.geomspace(BOUNDS["prefill_eff"][0], BOUNDS["prefill_eff"][1], 12)
    best: tuple[float, dict[str, float]] = (np.inf, {})
    for pe, xm, xl in itertools.product(pes, layer_grid("mla_prefill_layer_s", nm),
                                        layer_grid("linear_prefill_layer_s", nl)):
        pred = ttft_s(pf, po, dec, c, cap, tpot, osl, dp, pe, ov, qf, qe, nm, xm, nl, xl)
        mape = np.mean(np.abs(pred - meas) / meas, axis=-1)
        i = np.unravel_index(int(np.argmin(mape)), mape.shape)
        if mape[i] < best[0]:
            best = (float(mape[i]), {"prefill_eff": float(pe), "prefill_overhead_s": float(ov.ravel()[i[0]]),
                                     "ttft_queue_frac": float(qf.ravel()[i[1]]),
                                     "ttft_queue_exp": float(qe.ravel()[i[2]]), "mla_prefill_layer_s": float(xm),
                                     "linear_prefill_layer_s": float(xl)})
    return eff.scaled(**best[1])


def fit_group(rows: list[Row], start: Efficiency,
              params: tuple[str, ...] = COORD_PARAMS,
              sweeps: int = 3, w_ttft: float = W_TTFT) -> FitResult:
    """TTFT grid, then coordinate search of `params` (TTFT grid again after each sweep), from `start`."""
    groups = _by_scenario(rows)
    eff = start
    before = objective(groups, eff, w_ttft)
    eff = _ttft_grid(groups, eff)
    best = objective(groups, eff, w_ttft)
    if best > before:
        eff, best = start, before
    for sweep in range(sweeps):
        grid = [f ** (1.0 / (sweep + 1)) for f in _GRID]
        for name in params:
            lo, hi = BOUNDS[name]
            x0 = float(getattr(eff, name))
            for f in grid:
                cand = eff.scaled(**{name: _step(x0, f, lo, hi)})
                j = objective(groups, cand, w_ttft)
                if j < best - 1e-9:
                    best, eff = j, cand
        cand = _ttft_grid(groups, eff)
        j = objective(groups, cand, w_ttft)
        if j < best - 1e-9:
            best, eff = j, cand
    _, _, at, af = _errors(groups, eff)
    return FitResult(eff, len(at), before, best, float(np.mean(at)), float(np.mean(af)))


def fit_all(rows: list[Row], start: Efficiency | None = None, sweeps: int = 3, min_rows: int = 40,
            warm: dict[tuple[str, str], Efficiency] | None = None) -> tuple[FitResult, dict[tuple[str, str], FitResult]]:
    """A global fit over all rows, then each (generation, backend) group with >= min_rows rows refitted from it.
    `warm` (e.g. the efficiencies of the previous fit) gives a group a second starting point; the coordinate
    search is local, so the better of the two results is kept."""
    modelled = [r for r in rows if r.scenario is not None]
    glob = fit_group(modelled, start or Efficiency(), sweeps=sweeps)
    per: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in modelled:
        per[group_key(r)].append(r)
    out: dict[tuple[str, str], FitResult] = {}
    for k, v in sorted(per.items()):
        if len(v) < min_rows:
            continue
        res = fit_group(v, glob.efficiency, sweeps=sweeps)
        if warm is not None and k in warm:
            alt = fit_group(v, warm[k], sweeps=sweeps)
            res = alt if alt.objective_after < res.objective_after else res
        out[k] = _inherit_unconstrained(res, v, glob.efficiency)
    return glob, out


def _inherit_unconstrained(res: FitResult, rows: list[Row], glob: Efficiency) -> FitResult:
    """A per-layer prefill cost that no row of the group exercises (no MLA / linear layers among its models) is
    not fitted by the group: it takes the global value, so an unseen model on that GPU still pays it."""
    changes: dict[str, float] = {}
    if not any(mla_layers(r.scenario) for r in rows):
        changes["mla_prefill_layer_s"] = glob.mla_prefill_layer_s
    if not any(linear_layers(r.scenario) for r in rows):
        changes["linear_prefill_layer_s"] = glob.linear_prefill_layer_s
    return replace(res, efficiency=res.efficiency.scaled(**changes)) if changes else res
