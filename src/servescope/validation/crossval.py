"""Grouped cross-validation of the fitted model: refit on all rows but one group, predict that group.

What it does: for each grouping (model, system = GPU, backend; the CSV's `source` where it has one; generation for
the range data), every group in
turn is held out, the global efficiencies are refitted on the other rows exactly as the shipped fit was made
(validation.fit from the built-in defaults, `unfitted_start`, to convergence — never warm-started from the shipped
fit, which has seen the held-out rows: the LM fit has several local minima and a warm start from the all-rows
optimum lowered leave-one-model-out TTFT MAPE by ~4 points, a leak) and the held-out rows predicted. Folds run in worker processes (ProcessPoolExecutor). Per grouping:
MAPE and bias (mean signed (pred − meas)/meas, a fraction) of TPOT and TTFT over all held-out predictions, the
number of folds and rows, and each row's out-of-fold prediction (for ranges and coverage). A grouping with fewer
than two groups cannot be cross-validated: it reports the in-sample numbers and says so in `warning`.
What it does not: read CSVs (validation.validate), decide which parameters are fitted (validation.fit) or format.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servescope.perfmodel.efficiency import (
    Efficiency,
    backend_overrides,
    global_efficiency,
    unfitted_start,
)
from servescope.perfmodel.ranges import bounds
from servescope.progress import report
from servescope.validation.fit import (
    BY_BACKEND,
    FITTED,
    FitData,
    fit_data,
    fit_grouped,
    predict_data,
)
from servescope.validation.validate import Row, ValidationResult, evaluate, read_rows

GROUPINGS = {"leave_one_model_out": "model", "leave_one_system_out": "system", "leave_one_backend_out": "backend"}
# with a `source` column (where each row was measured: a lab, a box, a benchmark campaign): one more fold, rows
# without a source forming one group of their own
SOURCE_GROUPING = {"leave_one_source_out": "source"}
RANGE_GROUPINGS = {**GROUPINGS, "leave_one_generation_out": "generation"}
# which range case (ranges.py) an out-of-fold prediction of each grouping corresponds to (the backend is unseen
# on a seen system: the system_seen range)
CASE_OF_GROUPING = {"leave_one_model_out": "system_seen", "leave_one_system_out": "system_unseen",
                    "leave_one_backend_out": "system_seen", "leave_one_generation_out": "generation_unseen"}
Params = dict[str, tuple[float, float, str]]
FOLD_ITERATIONS = 200  # LM iteration cap per fold refit: the shipped fit's own cap (validation.fit.fit)


@dataclass(frozen=True)
class CvSummary:
    """Out-of-fold accuracy of one grouping (fractions)."""

    tpot_mape: float
    ttft_mape: float
    tpot_bias: float
    ttft_bias: float
    folds: int
    rows: int
    warning: str = ""  # set when the grouping could not be cross-validated (in-sample numbers instead)
    tpot_coverage: float = float("nan")  # share of out-of-fold rows inside the 80 % range of CASE_OF_GROUPING
    ttft_coverage: float = float("nan")


@dataclass(frozen=True)
class CrossValidation:
    summaries: dict[str, CvSummary]  # by grouping name
    pred_tpot_s: dict[str, np.ndarray]  # out-of-fold predictions, aligned with the FitData rows
    pred_ttft_s: dict[str, np.ndarray]


def summarize(pred_tpot: np.ndarray, pred_ttft: np.ndarray, data: FitData, folds: int, warning: str = "",
              case: str = "system_seen") -> CvSummary:
    """MAPE, bias and coverage of the `case`'s 80 % range (ranges.py) over the rows of `data`."""
    et, ef = pred_tpot / data.tpot_s - 1.0, pred_ttft / data.ttft_s - 1.0
    (t_lo, t_hi), (f_lo, f_hi) = bounds(case, "tpot"), bounds(case, "ttft")
    cov_t = float(np.mean((data.tpot_s >= pred_tpot * t_lo) & (data.tpot_s <= pred_tpot * t_hi)))
    cov_f = float(np.mean((data.ttft_s >= pred_ttft * f_lo) & (data.ttft_s <= pred_ttft * f_hi)))
    return CvSummary(float(np.mean(np.abs(et))), float(np.mean(np.abs(ef))), float(np.mean(et)), float(np.mean(ef)),
                     folds, len(et), warning, cov_t, cov_f)


@dataclass(frozen=True)
class _Fold:
    data: FitData
    held_out: np.ndarray  # bool mask
    start: Efficiency
    params: Params
    min_rows: int
    iterations: int
    by_backend: tuple[str, ...]


def _run_fold(f: _Fold) -> tuple[np.ndarray, np.ndarray]:
    model = fit_grouped(f.data.subset(~f.held_out), f.start, f.params, f.min_rows, f.iterations, f.by_backend)
    return model.predict(f.data.subset(f.held_out))


FOLDS_DONE = "cross-validation folds"  # servescope.progress


def cross_validate(data: FitData, start: Efficiency, params: Params = FITTED, min_rows: int = 0,
                   groupings: dict[str, str] = GROUPINGS, workers: int = 2,
                   iterations: int = FOLD_ITERATIONS, by_backend: tuple[str, ...] = BY_BACKEND,
                   overrides: dict[str, dict[str, float]] | None = None,
                   fold_start: Efficiency | None = None) -> CrossValidation:
    """Leave-one-group-out for each grouping (module docstring); folds of all groupings share one process pool.
    `start` (+ `overrides`) predicts in-sample where a grouping has one group; folds fit from `fold_start`, by
    default the built-in defaults the shipped fit started from."""
    fold_from = fold_start if fold_start is not None else unfitted_start()
    folds: list[tuple[str, _Fold]] = []
    summaries: dict[str, CvSummary] = {}
    pt: dict[str, np.ndarray] = {}
    pf: dict[str, np.ndarray] = {}
    for name, label in groupings.items():
        values = sorted(set(data.labels[label]))
        if len(values) < 2:
            tp, tf = predict_data(data, start, overrides)
            pt[name], pf[name] = tp, tf
            summaries[name] = summarize(tp, tf, data, 0, f"only one {label} ({values[0] if values else 'none'}): "
                                                         "in-sample, not cross-validated")
            continue
        folds += [(name, _Fold(data, data.labels[label] == v, fold_from, params, min_rows, iterations, by_backend)) for v in values]
    results = []
    if workers > 1 and len(folds) > 1:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for result in ex.map(_run_fold, [f for _, f in folds]):  # in order; each reported as it arrives
                results.append(result)
                report(FOLDS_DONE, len(results), len(folds))
    else:
        for _, f in folds:
            results.append(_run_fold(f))
            report(FOLDS_DONE, len(results), len(folds))
    for name in {n for n, _ in folds}:
        tp, tf = np.full(len(data.tpot_s), np.nan), np.full(len(data.tpot_s), np.nan)
        n_folds = 0
        for (n, f), (a, b) in zip(folds, results, strict=True):
            if n == name:
                tp[f.held_out], tf[f.held_out], n_folds = a, b, n_folds + 1
        pt[name], pf[name] = tp, tf
        summaries[name] = summarize(tp, tf, data, n_folds, case=CASE_OF_GROUPING.get(name, "system_seen"))
    return CrossValidation({k: summaries[k] for k in groupings}, pt, pf)


def with_sources(data: FitData, rows: list[Row]) -> FitData:
    """`data` (fit_data(rows)) with each row's `source` label, in fit_data's order (rows grouped by scenario)."""
    groups: dict[int, list[str]] = defaultdict(list)
    for r in rows:
        if r.scenario is not None:
            groups[id(r.scenario)].append(r.source)
    sources = np.array([s for g in groups.values() for s in g], dtype=object)
    assert len(sources) == len(data.ids)
    return replace(data, labels={**data.labels, "source": sources})


def validate_cv(path: str | Path, workers: int = 2) -> tuple[ValidationResult, CrossValidation]:
    """`validate_csv` plus grouped cross-validation of the shipped global fit on the same rows; a `source` column
    adds the leave-one-source-out fold."""
    rows = read_rows(path)
    if not any(r.scenario is not None for r in rows):  # nothing to refit on (a file of decode-only rows)
        return evaluate(rows), CrossValidation({}, {}, {})
    start = global_efficiency()  # the shipped global fit; each fold refits it and the per-backend offsets
    data, groupings = fit_data(rows), GROUPINGS
    if any(r.source for r in rows if r.scenario is not None):
        data, groupings = with_sources(data, rows), {**GROUPINGS, **SOURCE_GROUPING}
    return evaluate(rows), cross_validate(data, start, groupings=groupings, workers=workers,
                                          overrides=backend_overrides())
