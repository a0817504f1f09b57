"""The speculative model's two fitted numbers (HostCosts), fitted on the published pairs and cross-validated.

Does: fit HostCosts.per_seq_s and per_forward_s (perfmodel.speculative) to the scored rows of the pairs CSV by
least squares on log(predicted / measured) (a `below` row counts only when predicted ≥ its bound), within
BOUNDS; cross-validate leaving one source out (every row of one publication is predicted by a fit on the other
publications: a fold's rows share an engine version and a measuring habit, so leaving single rows out would
flatter); and turn the out-of-fold errors into the quantiles that the planner's speculative gain ranges use.
Grid search, then two finer grids around the best point (each a fifth of the last span): deterministic,
~0.1 s per fit (closed-form gains on PairTerms priced once).
Does not: price anything itself (spec_pairs), or write files (data-build/fit_spec_host.py writes
data/spec_host.toml from `fit_report`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servescope.perfmodel.speculative import HostCosts
from servescope.validation.spec_pairs import (
    PairResult,
    SpecPair,
    Terms,
    all_terms,
    predict,
    score,
    source_key,
)

# Bounds of the fitted numbers (seconds). per_seq: up to 0.5 ms of Python per sequence and iteration;
# per_forward: up to 3 ms of host work per drafter forward (several eager launches and syncs at ~10-20 µs).
BOUNDS = {"per_seq_s": (0.0, 500e-6), "per_forward_s": (0.0, 3e-3)}
_GRID = 31


def _residuals(pairs: list[SpecPair], terms: Terms, by_id: dict[str, SpecPair], host: HostCosts) -> list[float]:
    out = []
    for p in pairs:
        if p.kind == "anchor":
            continue
        r = math.log(predict(p, terms, by_id, host) / p.measured)
        out.append(max(0.0, r) if p.kind == "below" else r)
    return out


def _loss(pairs: list[SpecPair], terms: Terms, by_id: dict[str, SpecPair], x: np.ndarray) -> float:
    host = HostCosts(float(x[0]), float(x[1]))
    return float(sum(r * r for r in _residuals(pairs, terms, by_id, host)))


def fit_host(pairs: list[SpecPair], fit_rows: list[SpecPair], terms: Terms) -> HostCosts:
    """HostCosts minimising the squared log errors of `fit_rows` (rows of `pairs`; anchors come from `pairs`)."""
    by_id = {p.id: p for p in pairs}
    lo = np.array([BOUNDS["per_seq_s"][0], BOUNDS["per_forward_s"][0]])
    hi = np.array([BOUNDS["per_seq_s"][1], BOUNDS["per_forward_s"][1]])
    best, span = (lo + hi) / 2.0, hi - lo
    for _ in range(3):
        a_lo, a_hi = np.maximum(lo, best - span / 2.0), np.minimum(hi, best + span / 2.0)
        grid = [np.array([a, b]) for a in np.linspace(a_lo[0], a_hi[0], _GRID)
                for b in np.linspace(a_lo[1], a_hi[1], _GRID)]
        best = min(grid, key=lambda x: _loss(fit_rows, terms, by_id, x))
        span = span / 5.0
    return HostCosts(float(best[0]), float(best[1]))


@dataclass(frozen=True)
class FitReport:
    """The fit on every row, the out-of-fold predictions (leave one source out) and their error quantiles."""

    host: HostCosts
    in_sample: list[PairResult]
    out_of_fold: list[PairResult]
    fold_hosts: dict[str, HostCosts]  # source -> the fit without it
    ratio_q: tuple[float, float]  # q10, q90 of measured / predicted gain, out of fold (gain and ratio rows)
    mape: float  # mean |predicted / measured − 1| out of fold (gain and ratio rows)
    mape_in_sample: float


def _mape(results: list[PairResult]) -> float:
    errs = [abs(r.error) for r in results if r.error is not None]
    return float(np.mean(errs)) if errs else float("nan")


def fit_report(pairs: list[SpecPair], terms: Terms | None = None) -> FitReport:
    """Fit on all rows, then leave each source out in turn (module docstring)."""
    terms = terms or all_terms(pairs)
    by_id = {p.id: p for p in pairs}
    scored = [p for p in pairs if p.kind != "anchor"]
    host = fit_host(pairs, scored, terms)
    in_sample = [score(p, predict(p, terms, by_id, host)) for p in pairs]
    folds: dict[str, HostCosts] = {}
    oof: dict[str, PairResult] = {}
    for src in sorted({source_key(p) for p in scored}):
        folds[src] = fit_host(pairs, [p for p in scored if source_key(p) != src], terms)
        for p in pairs:
            if source_key(p) == src:
                oof[p.id] = score(p, predict(p, terms, by_id, folds[src]))
    out_of_fold = [oof[p.id] for p in pairs if p.id in oof]
    ratios = [r.pair.measured / r.predicted for r in out_of_fold if r.error is not None]
    q10, q90 = (float(np.quantile(ratios, 0.1)), float(np.quantile(ratios, 0.9))) if ratios else (1.0, 1.0)
    return FitReport(host, in_sample, out_of_fold, folds, (q10, q90), _mape(out_of_fold), _mape(in_sample))
