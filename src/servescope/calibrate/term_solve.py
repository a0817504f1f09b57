"""The solver behind calibrate.terms: a regularised least-squares fit within bounds.

Does: minimise |resid(x)|² + |x/τ|² over x in [lo, hi] (x = ln θ of each knob, τ its prior spread) by projected,
damped Gauss–Newton: the Jacobian by forward differences at the start, Broyden rank-one updates after each step, an
exact Jacobian again where a step fails, near convergence and at the end (the posterior reads it).
Does not: know what the knobs or figures are (calibrate.terms).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_H = 1e-3  # numerical-derivative step in ln θ
_MAX_ITER = 40
CONVERGED = 1e-7  # relative fall of the objective below which the fit stops (its residuals move < 0.01 %)
Resid = Callable[[np.ndarray], np.ndarray]


def _jacobian(resid: Resid, x: np.ndarray, r: np.ndarray, hi: np.ndarray,
              live: np.ndarray | None = None) -> np.ndarray:
    """d resid / d ln θ by forward differences (backward at the upper bound); columns not `live` are 0 (knobs no
    figure was sensitive to at the start stay so: every term is monotone in its own knob alone)."""
    f = resid
    cols = []
    for k in range(len(x)):
        if live is not None and not live[k]:
            cols.append(np.zeros(len(r)))
            continue
        h = _H if x[k] + _H <= hi[k] else -_H
        dx = x.copy()
        dx[k] += h
        cols.append((f(dx) - r) / h)
    return np.column_stack(cols)


def gauss_newton(resid: Resid, x: np.ndarray, tau: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise |resid(x)|² + |x/τ|² within [lo, hi] (projected, damped Gauss–Newton). The Jacobian is computed by
    differences at the start and updated by Broyden's rank-one rule after each step; it is recomputed where a step
    fails or the fit looks converged, and at the end (the posterior reads it), so the answer is the exact-Jacobian
    one at a fraction of the model evaluations."""
    f = resid
    r = f(x)
    cost = float(r @ r + np.sum((x / tau) ** 2))
    jac = _jacobian(f, x, r, hi)
    live = np.any(np.abs(jac) > 1e-9, axis=0)
    fresh = True
    for _ in range(_MAX_ITER):
        trial, rt, ct = _damped_step(f, x, r, cost, jac, tau, lo, hi)
        if trial is None or cost - ct < CONVERGED * max(cost, 1.0):
            if fresh:
                if trial is not None:
                    x, r, cost = trial, rt, ct
                break
            jac, fresh = _jacobian(f, x, r, hi, live), True  # the update drifted: start again from the exact one
            continue
        dx, dr = trial - x, rt - r
        x, r, cost = trial, rt, ct
        jac = jac + np.outer(dr - jac @ dx, dx) / float(dx @ dx)
        fresh = False
    return x, r, _jacobian(f, x, r, hi, live)


def _damped_step(f: Resid, x: np.ndarray, r: np.ndarray, cost: float, jac: np.ndarray, tau: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, float]:
    """The Gauss–Newton step on the free knobs (those not pushed against a bound), halved until the objective falls;
    (None, r, cost) when no fraction of it does."""
    grad = jac.T @ r + x / tau**2
    free = ~(((x <= lo + 1e-12) & (grad > 0)) | ((x >= hi - 1e-12) & (grad < 0)))
    a = jac[:, free]
    step = np.zeros_like(x)
    step[free] = -np.linalg.solve(a.T @ a + np.diag(1.0 / tau[free] ** 2), grad[free])
    size = 1.0
    while size > 1e-4:
        trial = np.clip(x + size * step, lo, hi)
        rt = f(trial)
        ct = float(rt @ rt + np.sum((trial / tau) ** 2))
        if ct < cost:
            return trial, rt, ct
        size /= 2
    return None, r, cost
