"""A deployment's levels, fitted to the few points its owner measured (issue 17): the part of the error that lives
between deployments (engine build, server settings, client), which no datasheet sees.

The model's TPOT at concurrency c splits into a batch-independent part F(c) (the weights read and the per-step
overheads: terms `weights` + `overhead`) and the rest V(c) (KV reads, compute, communication, prompts interfering).
    one TPOT point      TPOT'(c) = s · (F + V),   s = measured / predicted                     (the decode level)
    two or more points  TPOT'(c) = a · F + b · V, (a, b) least squares on relative residuals   (fixed vs per-batch)
    TTFT points         TTFT'(c) = g · TTFT,      g = geometric mean of measured / predicted    (the prefill level)
Two points that cannot separate a from b (both > 0 and the fit well conditioned) fall back to one level s.
k levels from k numbers reproduce them by construction: `validated` says whether a point was left to check them.
Does not: read files or choose which points calibrate (validation.calibrated measures the error of doing so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_LEVEL = 0.05  # a fitted level below this (or a fit that needs one) cannot be physics: one level instead
MAX_CONDITION = 1e4  # (F, V) columns this close to proportional do not separate a fixed from a per-batch cost


@dataclass(frozen=True)
class Levels:
    """Multipliers of the model's TPOT parts and TTFT (1.0 = as predicted), and what set each."""

    tpot_fixed: float = 1.0
    tpot_var: float = 1.0
    ttft: float = 1.0
    tpot_points: int = 0
    ttft_points: int = 0
    basis: str = "uncalibrated"

    def tpot_s(self, fixed_s: float, var_s: float) -> float:
        return self.tpot_fixed * fixed_s + self.tpot_var * var_s

    def ttft_s(self, ttft_s: float) -> float:
        return self.ttft * ttft_s


def fit_levels(fixed_s: Sequence[float], var_s: Sequence[float], measured_tpot_s: Sequence[float | None],
               predicted_ttft_s: Sequence[float], measured_ttft_s: Sequence[float | None]) -> Levels:
    """Levels from measured points (None where a point has no such measurement); see the module docstring."""
    f, v = np.asarray(fixed_s, dtype=float), np.asarray(var_s, dtype=float)
    mt = np.asarray([np.nan if m is None else m for m in measured_tpot_s], dtype=float)
    ok = np.isfinite(mt) & (mt > 0) & (f + v > 0)
    a, b, basis = _tpot_levels(f[ok], v[ok], mt[ok])
    pt = np.asarray(predicted_ttft_s, dtype=float)
    mf = np.asarray([np.nan if m is None else m for m in measured_ttft_s], dtype=float)
    okf = np.isfinite(mf) & (mf > 0) & (pt > 0)
    g = float(np.exp(np.mean(np.log(mf[okf] / pt[okf])))) if okf.any() else 1.0
    return Levels(a, b, g, int(ok.sum()), int(okf.sum()), basis)


def _tpot_levels(f: np.ndarray, v: np.ndarray, m: np.ndarray) -> tuple[float, float, str]:
    if len(m) == 0:
        return 1.0, 1.0, "uncalibrated"
    one = float(np.exp(np.mean(np.log(m / (f + v)))))
    if len(m) < 2:
        return one, one, "one TPOT level"
    design = np.column_stack([f / m, v / m])
    (a, b), *_ = np.linalg.lstsq(design, np.ones(len(m)), rcond=None)
    cond = float(np.linalg.cond(design)) if len(m) >= 2 else math.inf
    if not (a > MIN_LEVEL and b > MIN_LEVEL and cond < MAX_CONDITION):
        return one, one, "one TPOT level (the points do not separate fixed from per-batch cost)"
    return float(a), float(b), "fixed and per-batch TPOT levels"
