"""The error of calibrating on a user's own points, measured: calibrate each measured series of a validation CSV on
some of its points and predict the rest of the series, which the fit never saw.

    lowest   the series' lowest concurrency calibrates (one TPOT and one TTFT: a user's single measurement)
    ends     its lowest and highest concurrency calibrate (two load points)
The calibration is the one `--measured` runs (calibrate.terms: physical knobs with priors), fitted once to the
TPOT figures alone (`pred_tpot`) and once to TPOT and TTFT (`cal_ttft`, the TTFT that TTFT figures calibrate —
from two load points; with one, TTFT follows the TPOT-fitted knobs, since one TTFT point fitted raised held-out TTFT
error on the dev series); the earlier decode levels (calibrate.levels: one level, or fixed vs per-batch) are
scored on the same rows beside them (`level_tpot`, `level_ttft`). A series whose figures no knob setting reaches
keeps the model's prediction and is counted (`unreachable`).
A series is one deployment at one ISL/OSL (validation.validate.SERIES_COLUMNS), differing only in load; only series
with at least MIN_CONCURRENCIES distinct concurrencies count (so that a point is left between the calibrating
ones). Per mode: TPOT/TTFT MAPE and bias (mean (pred − meas)/meas) over the held-out rows, the 80% range of
measured/predicted (q10, q90 over all held-out rows: the range a calibrated prediction carries), and its coverage
measured honestly — each model's rows against the quantiles of the other models' rows (leave one model out).
Does not: read files (validation.validate reads the CSV) or format (report.validate_doc).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from servescope.calibrate.figures import Figure
from servescope.calibrate.levels import fit_levels
from servescope.calibrate.terms import fit_terms
from servescope.errors import MeasurementError
from servescope.perfmodel.serving import predict_arrays
from servescope.validation.validate import Row

MODES = ("lowest", "ends")
MIN_CONCURRENCIES = 3
MIN_TTFT_LOADS = 2  # as calibrate.figure_fit: one TTFT point is not fitted (module docstring)


@dataclass(frozen=True)
class HeldOut:
    """Out-of-fold predictions of one calibration mode over the held-out rows of every series: TPOT and TTFT
    calibrated by term, the model's own TPOT and TTFT, and the decode levels' TPOT and a TTFT level on the same
    rows (module docstring)."""

    mode: str
    series: int
    model: tuple[str, ...]  # per held-out row
    meas_tpot: np.ndarray
    pred_tpot: np.ndarray
    model_tpot: np.ndarray
    meas_ttft: np.ndarray
    model_ttft: np.ndarray
    level_ttft: np.ndarray
    level_tpot: np.ndarray
    cal_ttft: np.ndarray
    unreachable: int = 0

    def summary(self) -> dict[str, float | int]:
        """MAPE, bias and leave-one-model-out coverage of the q10–q90 of measured/predicted, for TPOT calibrated on
        TPOT figures and for TTFT calibrated on TPOT and TTFT figures, beside the uncalibrated model's and the
        decode levels' errors on the same rows."""
        out: dict[str, float | int] = {"series": self.series, "rows": len(self.meas_tpot),
                                       "unreachable": self.unreachable}
        models = np.asarray(self.model)
        for name, meas, pred in (("tpot", self.meas_tpot, self.pred_tpot), ("ttft", self.meas_ttft, self.cal_ttft)):
            rel = (pred - meas) / meas
            ratio = meas / pred
            q10, q90 = (np.quantile(ratio, [0.1, 0.9]) if len(ratio) else (np.nan, np.nan))
            out |= {f"{name}_mape": _mean(np.abs(rel)), f"{name}_bias": _mean(rel), f"{name}_q10": float(q10),
                    f"{name}_q90": float(q90), f"{name}_coverage": _coverage(models, ratio)}
        out["uncalibrated_tpot_mape"] = _mape(self.model_tpot, self.meas_tpot)
        out["uncalibrated_ttft_mape"] = _mape(self.model_ttft, self.meas_ttft)
        out["level_tpot_mape"] = _mape(self.level_tpot, self.meas_tpot)
        out["ttft_level_mape"] = _mape(self.level_ttft, self.meas_ttft)
        return out


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return _mean(np.abs(pred - meas) / meas)


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if len(x) else float("nan")


def _coverage(models: np.ndarray, ratio: np.ndarray) -> float:
    """Share of rows whose measured/predicted lies inside the q10–q90 of the other models' rows."""
    inside: list[bool] = []
    for m in np.unique(models):
        mine, rest = ratio[models == m], ratio[models != m]
        if len(rest) < 10:
            continue
        lo, hi = np.quantile(rest, [0.1, 0.9])
        inside.extend(((mine >= lo) & (mine <= hi)).tolist())
    return float(np.mean(inside)) if inside else float("nan")


def _series(rows: list[Row]) -> list[list[Row]]:
    groups: dict[tuple[int, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.scenario is not None and r.tpot_ms > 0 and r.ttft_ms > 0:
            groups[(id(r.scenario), r.series)].append(r)
    return [sorted(g, key=lambda r: r.concurrency) for g in groups.values()
            if len({r.concurrency for r in g}) >= MIN_CONCURRENCIES]


def _calibrating(group: list[Row], mode: str) -> set[int]:
    """Concurrencies that calibrate: the lowest, or the lowest and the highest."""
    cs = sorted({r.concurrency for r in group})
    return {cs[0]} if mode == "lowest" else {cs[0], cs[-1]}


def _figures(group: list[Row], use: np.ndarray, with_ttft: bool) -> list[Figure]:
    out = []
    for r, u in zip(group, use, strict=True):
        if u:
            out.append(Figure("tpot", r.tpot_ms / 1e3, r.concurrency, None, None, f"tpot@c{r.concurrency}"))
            if with_ttft:
                out.append(Figure("ttft", r.ttft_ms / 1e3, r.concurrency, None, None, f"ttft@c{r.concurrency}"))
    return out


def _calibrated(group: list[Row], use: np.ndarray, with_ttft: bool) -> dict[str, np.ndarray] | None:
    """predict_arrays of the series' scenario calibrated by term on its `use` rows (None: unreachable)."""
    sc = group[0].scenario
    assert sc is not None
    try:
        fit = fit_terms(sc, _figures(group, use, with_ttft))
    except MeasurementError:
        return None
    return predict_arrays(fit.apply(sc), [r.concurrency for r in group])


def held_out(rows: list[Row], mode: str) -> HeldOut:
    """Calibrate every series on its `mode` points and predict its other rows (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"calibration mode {mode!r}; known: {', '.join(MODES)}")
    model: list[str] = []
    cols: dict[str, list[float]] = defaultdict(list)
    groups = _series(rows)
    unreachable = 0
    for group in groups:
        sc = group[0].scenario
        assert sc is not None
        a = predict_arrays(sc, [r.concurrency for r in group])
        fixed = np.asarray(a["terms"]["weights"] + a["terms"]["overhead"], dtype=float)
        tpot = np.asarray(a["tpot_s"], dtype=float)
        ttft = np.asarray(a["ttft_s"], dtype=float)
        fit = _calibrating(group, mode)
        use = np.asarray([r.concurrency in fit for r in group])
        meas_tpot = np.asarray([r.tpot_ms / 1e3 for r in group])
        meas_ttft = np.asarray([r.ttft_ms / 1e3 for r in group])
        lv = fit_levels(fixed[use], (tpot - fixed)[use], meas_tpot[use], ttft[use], meas_ttft[use])
        by_tpot = _calibrated(group, use, False)
        by_both = _calibrated(group, use, True) if use.sum() >= MIN_TTFT_LOADS else None
        unreachable += by_tpot is None
        cal_tpot = np.asarray((by_tpot or a)["tpot_s"], dtype=float)
        cal_ttft = np.asarray((by_both or by_tpot or a)["ttft_s"], dtype=float)
        for i in np.flatnonzero(~use):
            model.append(group[i].model)
            cols["meas_tpot"].append(float(meas_tpot[i]))
            cols["pred_tpot"].append(float(cal_tpot[i]))
            cols["model_tpot"].append(float(tpot[i]))
            cols["meas_ttft"].append(float(meas_ttft[i]))
            cols["model_ttft"].append(float(ttft[i]))
            cols["level_ttft"].append(lv.ttft_s(float(ttft[i])))
            cols["level_tpot"].append(lv.tpot_s(float(fixed[i]), float(tpot[i] - fixed[i])))
            cols["cal_ttft"].append(float(cal_ttft[i]))
    keys = ("meas_tpot", "pred_tpot", "model_tpot", "meas_ttft", "model_ttft", "level_ttft", "level_tpot", "cal_ttft")
    arrays = {k: np.asarray(cols[k], dtype=float) for k in keys}
    return HeldOut(mode, len(groups), tuple(model), unreachable=unreachable, **arrays)
