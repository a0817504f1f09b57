"""The model on the user's own numbers: typed figures (`tpot=12.1ms@c1`, `output=1536tok/s@c128`) set the
deployment's TPOT levels (calibrate.levels), and every predicted point is restated on them, its range the one
measured for calibrating on that many points (specs/data/calibrated_ranges.json, data-build/calibrated_ranges.py).

What each figure identifies:
  tpot at c          the decode level there (one point: one level; points at two or more concurrencies: the fixed
                     per-step cost apart from the per-batch cost)
  output tok/s at c  a TPOT there: (batch · OSL / output − TTFT) / (OSL − 1), with the model's TTFT
  ttft, itl, e2e, request rate, shares
                     not used to calibrate (said in `notes`): a TTFT level measured at other concurrencies made held-out
                     TTFT worse on the validation series (calibrate.held_out); shares need a trace's breakdown
A figure faster than the physical floor of its decode step is refused with the floor.
Does not: parse the figures (calibrate.figures) or format (report.model_doc).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from servescope.calibrate.figures import Figure
from servescope.calibrate.levels import Levels, fit_levels
from servescope.errors import MeasurementError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint, predict
from servescope.specs import tables

FIXED_TERMS = ("weights", "overhead")  # the batch-independent part of a decode step (calibrate.levels)


@dataclass(frozen=True)
class MeasuredModel:
    """The points restated on the measured levels, the levels, and what was used or set aside and why."""

    points: tuple[ServingPoint, ...]
    levels: Levels
    used: tuple[str, ...]
    notes: tuple[str, ...]
    case: str  # calibrated_1pt | calibrated_2pt | uncalibrated


def _measured_tpot_s(f: Figure, p: ServingPoint, osl: int) -> float | None:
    if f.metric == "tpot":
        return f.value_si
    if f.metric == "output" and osl > 1:
        return (p.batch * osl / f.value_si - p.ttft_s) / (osl - 1)
    return None


def _check_lengths(sc: Scenario, f: Figure) -> str | None:
    if (f.isl is not None and f.isl != sc.isl) or (f.osl is not None and f.osl != sc.osl):
        given = ", ".join(f"{k.upper()} {v}" for k, v in (("isl", f.isl), ("osl", f.osl)) if v is not None)
        return f"{f.text}: measured at {given}, the scenario has ISL {sc.isl} / OSL {sc.osl}; pass --isl/--osl to match"
    return None


def calibrate_points(sc: Scenario, points: Sequence[ServingPoint], figures: Sequence[Figure]) -> MeasuredModel:
    """Fit TPOT levels to the figures and restate `points` on them (see the module docstring)."""
    if not figures:
        return MeasuredModel(tuple(points), Levels(), (), (), "uncalibrated")
    at = {p.concurrency: p for p in predict(sc, sorted({f.concurrency for f in figures}))}
    fixed, var, meas, used, notes = [], [], [], [], []
    for f in figures:
        if (bad := _check_lengths(sc, f)) is not None:
            raise MeasurementError(bad)
        p = at[f.concurrency]
        m = _measured_tpot_s(f, p, sc.osl)
        if m is None:
            notes.append(f"{f.text}: not used to calibrate ({_why_not(f)})")
            continue
        if m < p.floor_s:
            raise MeasurementError(f"{f.text}: a TPOT of {m * 1e3:.3g} ms is faster than the physical floor of this "
                                   f"decode step ({p.floor_s * 1e3:.3g} ms at batch {p.batch}): check the scenario "
                                   "(model, GPU, layout, quantization) or the figure")
        f_s = sum(p.terms_s.get(t, 0.0) for t in FIXED_TERMS)
        fixed.append(f_s)
        var.append(p.tpot_s - f_s)
        meas.append(m)
        used.append(f.text)
    lv = fit_levels(fixed, var, meas, [1.0] * len(meas), [None] * len(meas))
    if not meas:
        return MeasuredModel(tuple(points), lv, (), tuple(notes), "uncalibrated")
    case = "calibrated_2pt" if lv.basis == "fixed and per-batch TPOT levels" else "calibrated_1pt"
    q10, q90 = (float(x) for x in tables.calibrated_ranges()["cases"][case]["tpot"])
    restated = tuple(_restate(p, lv, q10, q90, case, used) for p in points)
    return MeasuredModel(restated, lv, tuple(used), tuple(notes), case)


def _why_not(f: Figure) -> str:
    if f.metric == "ttft":
        return "TTFT is kept as modelled: a TTFT level measured at other concurrencies raised held-out TTFT error"
    if f.is_share:
        return "a kernel-class share needs a trace's breakdown: servescope plan TRACE"
    return f"{f.metric} does not set a TPOT level"


def _restate(p: ServingPoint, lv: Levels, q10: float, q90: float, case: str, used: list[str]) -> ServingPoint:
    """The point with its TPOT terms scaled (fixed terms by one level, the rest by the other; they still add up to
    TPOT), its range from the calibrated case, and its output tok/s scaled by the TPOT change (the TTFT share of a
    request's time kept: an approximation that holds while decode dominates the request)."""
    terms = {k: v * (lv.tpot_fixed if k in FIXED_TERMS else lv.tpot_var) for k, v in p.terms_s.items()}
    tpot = sum(terms.values())
    output = p.output_tok_s * p.tpot_s / tpot if tpot > 0 else p.output_tok_s
    prov = {**p.provenance, "case": case,
            "calibration": (f"TPOT levels ×{lv.tpot_fixed:.3g} fixed, ×{lv.tpot_var:.3g} per-batch ({lv.basis}) from "
                            f"{', '.join(used)}; range: {case}, measured/predicted q10–q90 {q10:.2f}–{q90:.2f} held out "
                            "on the validation series (data-build/calibrated_ranges.py); TTFT as modelled")}
    return replace(p, tpot_s=tpot, terms_s=terms, dominant=max(terms, key=lambda k: terms[k]), output_tok_s=output,
                   tpot_low_s=tpot * q10, tpot_high_s=tpot * q90, provenance=prov)
