"""Fit the simulation's TTFT numbers through the scheduler simulation, and cross-validate them by group.

What it does: the simulated TTFT of a measured row (validation.simulate_row: closed loop at the row's concurrency)
depends on two global numbers the closed-form fit also has — `prefill_eff` (prefill work runs at 1/prefill_eff of
its roofline time) and `prefill_overhead_s` (per-request set-up before the request is schedulable) — while the
queueing comes from the simulation itself, not from the closed form's ttft_queue_frac.
  table     every row simulated at each prefill_eff of PE_GRID with prefill_overhead_s = 0 (`sim_table`)
  surrogate TTFT(pe, setup) = exp(interp(ln pe; ln PE_GRID, ln TTFT_table)) + setup  (the set-up delays the first
            token of every request by itself; the load it takes off the engine is ignored: the surrogate serves only
            the fit, predictions are fresh simulations at the fitted numbers)
  objective Σ_rows ρ(TTFT_surrogate/TTFT_meas − 1), ρ the soft-L1 loss of validation.fit (δ = SOFT_L1_S), and
            optionally + Σ_rows ρ(TPOT_surrogate/TPOT_meas − 1) (prefill_eff also prices the prefill chunks that
            share steps with decoding, so TPOT constrains it too)
  minimiser an exhaustive grid (PE_FINE × SETUP_FINE, both within validation.fit.BOUNDS): two numbers,
            one pass, no iteration toward any target
The other efficiencies (GEMM/attention bandwidth and compute, CPU and launch costs) stay those of the closed-form
fit: in cross-validation, the fold's refit on the training rows (validation.fit).
What it does not: refit TPOT-side numbers through the simulation, choose rows (`stratified_rows` only proposes a
subsample), read files or format (bench/crossval_simulate.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.scenario import Scenario
from servescope.validation.fit import BOUNDS, SOFT_L1_S
from servescope.validation.simulate_rows import simulate_row
from servescope.validation.validate import Row

SIM_FITTED = ("prefill_eff", "prefill_overhead_s")
PE_GRID = (0.2, 0.35, 0.6, 1.0, 1.5)  # simulated prefill efficiencies (FITTED bounds 0.2-1.5)
PE_FINE = np.geomspace(BOUNDS["prefill_eff"][0], BOUNDS["prefill_eff"][1], 161)
SETUP_FINE = np.geomspace(BOUNDS["prefill_overhead_s"][0], BOUNDS["prefill_overhead_s"][1], 241)


@dataclass(frozen=True)
class SimTask:
    """One simulation: a row's scenario with an efficiency set, at the row's concurrency."""

    scenario: Scenario
    concurrency: int
    efficiency: Efficiency


def run_task(t: SimTask) -> tuple[float, float, float]:
    """(mean TPOT s, mean TTFT s, median TTFT s) of one task; nans when the simulation rejects the setup."""
    try:
        res = simulate_row(replace(t.scenario, efficiency=t.efficiency), t.concurrency)
    except ScenarioError:
        return float("nan"), float("nan"), float("nan")
    return res.tpot.mean_s, res.ttft.mean_s, res.ttft.p50_s


def run_tasks(tasks: Sequence[SimTask], workers: int = 1) -> np.ndarray:
    """(n, 3) array of run_task's (mean TPOT s, mean TTFT s, median TTFT s), tasks in order; distinct (scenario, concurrency, efficiency) run once."""
    key = [(id(t.scenario), t.concurrency, t.efficiency) for t in tasks]
    first: dict[tuple[int, int, Efficiency], int] = {}
    uniq = [first.setdefault(k, i) == i for i, k in enumerate(key)]
    todo = [t for t, u in zip(tasks, uniq, strict=True) if u]
    if workers > 1 and len(todo) > 1:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            out = list(ex.map(run_task, todo, chunksize=4))
    else:
        out = [run_task(t) for t in todo]
    by_key = dict(zip((k for k, u in zip(key, uniq, strict=True) if u), out, strict=True))
    return np.array([by_key[k] for k in key], dtype=float).reshape(len(tasks), 3)


def sim_table(rows: Sequence[Row], base: Efficiency, workers: int = 1,
              grid: Sequence[float] = PE_GRID) -> np.ndarray:
    """(rows, len(grid)) simulated mean TTFT (s) at each prefill_eff of `grid`, set-up 0, other numbers `base`."""
    return sim_tables(rows, base, workers, grid)[0]


def sim_tables(rows: Sequence[Row], base: Efficiency, workers: int = 1,
               grid: Sequence[float] = PE_GRID) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) tables, each (rows, len(grid)) in s, from the same simulations as sim_table."""
    tasks = [SimTask(r.scenario, r.concurrency, replace(base, prefill_eff=pe, prefill_overhead_s=0.0))
             for pe in grid for r in rows if r.scenario is not None]
    res = run_tasks(tasks, workers)
    return res[:, 1].reshape(len(grid), -1).T, res[:, 0].reshape(len(grid), -1).T


def surrogate_ttft_s(table_s: np.ndarray, pe: np.ndarray, setup_s: np.ndarray,
                     grid: Sequence[float] = PE_GRID) -> np.ndarray:
    """Surrogate TTFT (module docstring) of each row (axis 0 of table_s) at every (pe, setup) pair:
    shape (rows, len(pe), len(setup_s))."""
    lg, lt = np.log(np.asarray(grid)), np.log(table_s)
    x = np.log(pe)
    i = np.clip(np.searchsorted(lg, x) - 1, 0, len(lg) - 2)
    w = (x - lg[i]) / (lg[i + 1] - lg[i])
    core = np.exp(lt[:, i] + w * (lt[:, i + 1] - lt[:, i]))  # (rows, len(pe))
    out: np.ndarray = core[:, :, None] + setup_s[None, None, :]
    return out


def soft_l1(r: np.ndarray) -> np.ndarray:
    """ρ(r) = 2δ²(√(1 + (r/δ)²) − 1), δ = SOFT_L1_S (validation.fit's loss per relative error)."""
    return 2.0 * SOFT_L1_S**2 * (np.sqrt(1.0 + (r / SOFT_L1_S) ** 2) - 1.0)


def tpot_loss(tpot_table_s: np.ndarray, meas_tpot_s: np.ndarray, grid: Sequence[float] = PE_GRID) -> np.ndarray:
    """Σ_rows ρ(TPOT_surrogate(pe)/TPOT_meas − 1) at every pe of PE_FINE, the surrogate interpolating the TPOT table
    in ln pe as the TTFT one (the set-up does not touch the GPU, so TPOT does not depend on it); failed rows out."""
    ok = np.isfinite(tpot_table_s).all(axis=1) & np.isfinite(meas_tpot_s) & (meas_tpot_s > 0)
    core = surrogate_ttft_s(tpot_table_s[ok], PE_FINE, np.zeros(1), grid)[:, :, 0]
    loss: np.ndarray = soft_l1(core / meas_tpot_s[ok, None] - 1.0).sum(axis=0)
    return loss


PER_TOKEN_FINE = np.concatenate([[0.0], np.geomspace(0.5e-6, 100e-6, 24)])  # s of set-up per prompt token


@dataclass(frozen=True)
class SimFit:
    prefill_eff: float
    prefill_overhead_s: float  # one global set-up, or the median of the per-backend ones
    objective: float  # mean soft-L1 loss over the rows at the optimum
    rows: int
    at_bound: tuple[str, ...]
    setup_by_backend: dict[str, float] = field(default_factory=dict)  # per-backend set-up (s), when fitted so
    setup_per_token_s: float = 0.0  # set-up per prompt token (s), when fitted so

    def setup_for(self, backend: str, isl: float = 0.0) -> float:
        """The set-up of a row of `backend` with `isl` prompt tokens (the global one for an unseen backend)."""
        return self.setup_by_backend.get(backend, self.prefill_overhead_s) + self.setup_per_token_s * isl


def fit_ttft(table_s: np.ndarray, meas_ttft_s: np.ndarray, grid: Sequence[float] = PE_GRID,
             backends: Sequence[str] | None = None, tpot: tuple[np.ndarray, np.ndarray] | None = None,
             isl: np.ndarray | None = None) -> SimFit:
    """Minimise the objective (module docstring) over PE_FINE × SETUP_FINE; rows with a failed run are left out.
    With `backends` (one per row) the set-up is one number per backend (the serving front end's per-request cost:
    HTTP, tokenisation, scheduling hand-off, first-token streaming): the objective separates, so for each
    prefill_eff every backend takes its best set-up, and prefill_eff minimises the sum. With `tpot` = (TPOT table,
    measured TPOT) the TPOT loss (tpot_loss) is added: prefill_eff also sets the cost of the prefill chunks that
    share steps with decoding, so the measured TPOT pins it too (objective = TTFT loss + TPOT loss, per row).
    With `isl` (prompt tokens per row) the set-up is a + b·isl (front-end work per prompt token: request parsing,
    tokenisation, transfer to the engine), b over PER_TOKEN_FINE and the two finer grids halved."""
    ok = np.isfinite(table_s).all(axis=1) & np.isfinite(meas_ttft_s) & (meas_ttft_s > 0)
    if not ok.any():
        raise ScenarioError("no row with a simulated TTFT to fit")
    tp = tpot_loss(tpot[0], tpot[1], grid) if tpot is not None else np.zeros(len(PE_FINE))
    if isl is None:
        return _fit_grid(table_s[ok], meas_ttft_s[ok], grid, backends, ok, tp, PE_FINE, SETUP_FINE, 0.0)
    best: SimFit | None = None
    for b in PER_TOKEN_FINE:
        f = _fit_grid(table_s[ok], meas_ttft_s[ok] - b * np.asarray(isl, dtype=float)[ok], grid, backends, ok,
                      tp[::2], PE_FINE[::2], SETUP_FINE[::2], float(b), meas_ttft_s[ok])
        if best is None or f.objective < best.objective:
            best = f
    assert best is not None
    if best.setup_per_token_s == PER_TOKEN_FINE[-1]:
        best = replace(best, at_bound=best.at_bound + ("setup_per_token_s",))
    return best


def _fit_grid(table_s: np.ndarray, target_s: np.ndarray, grid: Sequence[float], backends: Sequence[str] | None,
              ok: np.ndarray, tp: np.ndarray, pe_fine: np.ndarray, setup_fine: np.ndarray, per_token_s: float,
              meas_s: np.ndarray | None = None) -> SimFit:
    """One exhaustive grid pass: rows' TTFT − per-token set-up = `target_s`, relative errors against `meas_s`."""
    meas = target_s if meas_s is None else meas_s
    core = surrogate_ttft_s(table_s, pe_fine, np.zeros(1), grid)[:, :, 0]
    pred = core[:, :, None] + setup_fine[None, None, :] + (meas - target_s)[:, None, None]
    rho = soft_l1(pred / meas[:, None, None] - 1.0)  # (rows, pe, setup)
    groups = np.asarray(["all"] * len(ok) if backends is None else list(backends))[ok]
    names = sorted(set(groups.tolist()))
    per = np.stack([rho[groups == b].sum(axis=0) for b in names])  # (backends, pe, setup)
    best_j = per.argmin(axis=2)  # (backends, pe)
    total = np.take_along_axis(per, best_j[:, :, None], axis=2)[:, :, 0].sum(axis=0) + tp
    i = int(np.argmin(total))
    js = best_j[:, i]
    setups = {b: float(setup_fine[j]) for b, j in zip(names, js.tolist(), strict=True)}
    at = (("prefill_eff",) if i in (0, len(pe_fine) - 1) else ()) + tuple(
        f"prefill_overhead_s[{b}]" if backends is not None else "prefill_overhead_s"
        for b, j in zip(names, js.tolist(), strict=True) if j in (0, len(setup_fine) - 1))
    glob = float(np.median(list(setups.values())))
    return SimFit(float(pe_fine[i]), glob, float(total[i]) / len(meas), len(meas), at,
                  setups if backends is not None else {}, per_token_s)


def stratified_rows(rows: Sequence[Row], stride: int) -> list[Row]:
    """Every stride-th modelled row of each (model, system, backend) group ordered by concurrency (at least one
    per group): a subsample that keeps every group and the spread of concurrencies."""
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.scenario is not None:
            groups[(r.model, r.system, r.backend)].append(r)
    out: list[Row] = []
    for key in sorted(groups):
        g = sorted(groups[key], key=lambda r: (r.concurrency, r.id))
        out += g[(stride // 2) % len(g)::stride] or g[:1]
    return out
