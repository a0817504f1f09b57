"""What a number of a plan rests on: the word `report/` prints beside it (issue 26.4).

Does: name the basis of a point of the objective at a concurrency, from what the deployment was calibrated on:
  measured      the user measured this point (a figure at this concurrency) and the calibration reproduces it
                (calibrate.figure_fit.FigureFit.measured_at): the number shown is the measurement;
  calibrated    a model number after calibration: on a trace, or on figures within the measured concurrencies
                (min ≤ c ≤ max of the measured points; a share without a TPOT point calibrates every load);
  extrapolated  a model number after calibration on figures, outside the measured concurrencies;
  modelled      the model alone (nothing measured was given).
A what-if (a track, the combination, the ceiling) is never `measured`: nobody measured the changed system; at a
measured concurrency it is `calibrated`.
Does not: word anything (report/plan_text, plan_doc, verify_* do) or decide how a number is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.calibrate import Calibration
from servescope.calibrate.figure_fit import FigureFit

BASES = ("measured", "calibrated", "extrapolated", "modelled")


def basis_at(fit: FigureFit | None, calibration: Calibration | None, concurrency: int) -> str:
    """The basis (BASES) of the baseline's value at `concurrency` (module docstring)."""
    if fit is None or not fit.calibrated:
        return "calibrated" if calibration is not None else "modelled"
    if fit.measured_at(concurrency) is not None:
        return "measured"
    measured = [p.concurrency for p in fit.points]
    if not measured or min(measured) <= concurrency <= max(measured):
        return "calibrated"
    return "extrapolated"


def what_if_basis(fit: FigureFit | None, calibration: Calibration | None, concurrency: int) -> str:
    """The basis of a changed system's value at `concurrency`: as `basis_at`, but never `measured`."""
    b = basis_at(fit, calibration, concurrency)
    return "calibrated" if b == "measured" else b


@dataclass(frozen=True)
class Bases:
    """The basis of each headline number of a plan: the baseline, the combination, the ceiling and the point the
    target verdict is about (None without a target)."""

    baseline: str
    combined: str
    ceiling: str
    target: str | None = None
