"""The model on the user's own numbers: the figures they measured (typed, or read from a benchmark result file:
calibrate.inputs) calibrate the deployment (calibrate.figure_fit: decode levels, and the collective or class time
a share identifies) and every predicted point is restated on it, its range the one measured for calibrating on
that many points (specs/data/calibrated_ranges.json, data-build/calibrated_ranges.py).

A restated point: TPOT terms of the knobbed scenario's prediction × the decode levels (FigureFit.multipliers; they
still add up to TPOT), its collectives from that prediction, TTFT as modelled, output tok/s scaled by the TPOT
change. Figures that set nothing (TTFT, ITL, E2E, request rate) are listed in `notes` with the reason.
Does not: parse the figures (calibrate.figures, calibrate.inputs) or format (report.model_doc).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from servescope.calibrate.figure_fit import FIXED_TERMS, FigureFit, fit_figures
from servescope.calibrate.figures import Figure
from servescope.calibrate.levels import Levels
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint, predict
from servescope.perfmodel.step import decode_step
from servescope.specs import tables

__all__ = ["FIXED_TERMS", "MeasuredModel", "calibrate_points", "decode_level_at", "restate_points"]


@dataclass(frozen=True)
class MeasuredModel:
    """The points restated on the calibration, the calibration, and what was used or set aside and why."""

    points: tuple[ServingPoint, ...]
    levels: Levels
    used: tuple[str, ...]
    notes: tuple[str, ...]
    case: str  # calibrated_1pt | calibrated_2pt | uncalibrated
    fit: FigureFit = FigureFit()


def calibrate_points(sc: Scenario, points: Sequence[ServingPoint], figures: Sequence[Figure]) -> MeasuredModel:
    """Fit the deployment to the figures and restate `points` on it (see the module docstring)."""
    fit = fit_figures(sc, figures)
    if not fit.calibrated:
        return MeasuredModel(tuple(points), fit.levels, (), fit.notes, "uncalibrated", fit)
    return MeasuredModel(restate_points(sc, points, fit), fit.levels, fit.used, fit.notes, fit.case, fit)


def restate_points(sc: Scenario, points: Sequence[ServingPoint], fit: FigureFit) -> tuple[ServingPoint, ...]:
    """`points` (predicted on `sc`) restated on the calibration (module docstring)."""
    if not fit.calibrated:
        return tuple(points)
    case = fit.case if fit.case != "uncalibrated" else None
    q10, q90 = (float(x) for x in tables.calibrated_ranges()["cases"][case]["tpot"]) if case else (math.nan,) * 2
    sck = fit.apply(sc)
    cal = {p.concurrency: p for p in predict(sck, [p.concurrency for p in points])}
    mult = fit.multipliers()
    out = []
    for p in points:
        k = cal[p.concurrency]
        step = decode_step(sck, k.batch, sc.isl + sc.osl / 2.0)  # type: ignore[arg-type]
        out.append(_restate(p, k, sum(mult[t] * v for t, v in step.terms_s.items()), fit, q10, q90))
    return tuple(out)


def _restate(p: ServingPoint, knobbed: ServingPoint, step_s: float, fit: FigureFit, q10: float,
             q90: float) -> ServingPoint:
    """The point with its TPOT terms from the knobbed prediction × the levels, its range from the calibrated case
    (the point's own when no TPOT level was fitted), and its output tok/s scaled by the TPOT change (the TTFT
    share of a request's time kept: an approximation that holds while decode dominates the request)."""
    mult = fit.multipliers()
    terms = {k: v * mult[k] for k, v in knobbed.terms_s.items()}
    tpot = sum(terms.values())
    output = p.output_tok_s * p.tpot_s / tpot if tpot > 0 else p.output_tok_s
    case = fit.case
    low, high = (tpot * q10, tpot * q90) if case != "uncalibrated" else (
        p.tpot_low_s * tpot / p.tpot_s, p.tpot_high_s * tpot / p.tpot_s)
    knobs = "; ".join(k.text() for k in fit.knobs)
    prov = {**p.provenance, "case": case if case != "uncalibrated" else p.provenance.get("case", ""),
            "calibration": (f"{knobs} ({fit.status()}); range: {case}, measured/predicted q10–q90 {q10:.2f}–"
                            f"{q90:.2f} held out on the validation series (data-build/calibrated_ranges.py); "
                            "TTFT as modelled" if case != "uncalibrated" else
                            f"{knobs} ({fit.status()}); range: the model's, scaled; TTFT as modelled")}
    return replace(p, tpot_s=tpot, terms_s=terms, dominant=max(terms, key=lambda k: terms[k]), output_tok_s=output,
                   collectives=dict(knobbed.collectives), step_time_s=step_s, tpot_low_s=low, tpot_high_s=high,
                   provenance=prov)


def decode_level_at(sc: Scenario, fit: FigureFit, concurrency: int) -> float:
    """The calibrated TPOT over the model's at one concurrency: the one decode level a step simulation takes
    (simulate's decode tables × it, `EngineConfig.decode_level`)."""
    raw = predict(sc, [concurrency])
    return restate_points(sc, raw, fit)[0].tpot_s / raw[0].tpot_s
