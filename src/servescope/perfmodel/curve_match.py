"""One measured curve as a function: log-log between measured points, the small-size floor below, the op's roofline
ratio beyond (opcurve.py's grid rule), over one axis or a stack of lines along a second.

What it does: `Match` (the curve that prices one case: its table, row, lines, the wanted shape's roofline, the work
scale and notes) and `surface` (a Match from a table row with some axes fixed); times in SECONDS.
What it does not: choose the table, version or shape (opcurve.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from servescope.perfmodel.op_roofline import Roof
from servescope.specs.opcurves import OpTable

Array = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike


@dataclass(frozen=True)
class Line:
    """One measured curve along one axis, in logs, measured points only; `a` its outer-axis value (1: none)."""

    lx: Array
    ly: Array
    a: float

    def log_time(self, lx: Array, roof: Roof) -> Array:
        """log t at log x (module rules: flat below, log-log between, the roofline's ratio to the edge above)."""
        inside = np.interp(lx, self.lx, self.ly)
        over = lx > self.lx[-1]
        if not np.any(over):
            return inside
        x = np.exp(lx)
        a = np.full_like(x, self.a)
        edge = np.log(roof(np.full_like(x, math.exp(self.lx[-1])), a))
        return np.where(over, self.ly[-1] + np.log(roof(x, a)) - edge, inside)


@dataclass(frozen=True)
class Match:
    """The curve that prices one case: its table, row, the lines (one per measured value of a second axis, whose
    log values are `la`), the roofline of the wanted shape (how it extends), the scale applied to the time, and
    what was not exact."""

    table: OpTable
    row: int
    lines: tuple[Line, ...]
    la: Array                         # log of the outer axis value of each line (empty: one line)
    roof: Roof
    scale: float
    notes: tuple[str, ...]

    def time_s(self, x: ArrayLike, a: ArrayLike | None = None) -> Array:
        """Time (s) at inner-axis values x (and outer-axis values a when the curve is a surface)."""
        if not self.la.size:
            lx = np.log(np.maximum(np.asarray(x, dtype=float), 1.0))
            return np.asarray(self.scale * np.exp(self.lines[0].log_time(lx, self.roof)))
        xb, ab = np.broadcast_arrays(np.maximum(np.asarray(x, dtype=float), 1.0),
                                     np.maximum(np.asarray(a, dtype=float), 1.0))
        lx, la = np.log(xb), np.log(ab)
        rows = np.stack([line.log_time(lx, self.roof) for line in self.lines])      # (lines, points)
        over = la > self.la[-1]
        beyond = rows[-1] + np.log(self.roof(xb, ab)) - np.log(self.roof(xb, np.full_like(ab, self.lines[-1].a)))
        if len(self.lines) == 1:
            return np.asarray(self.scale * np.exp(np.where(over, beyond, rows[0])))
        j = np.clip(np.searchsorted(self.la, la, side="right") - 1, 0, len(self.la) - 2)
        w = np.clip((la - self.la[j]) / (self.la[j + 1] - self.la[j]), 0.0, 1.0)
        lo = np.take_along_axis(rows, j[None], axis=0)[0]
        hi = np.take_along_axis(rows, j[None] + 1, axis=0)[0]
        return np.asarray(self.scale * np.exp(np.where(over, beyond, lo + w * (hi - lo))))

    def describe(self) -> str:
        """Provenance: the measured curve and how it was used."""
        how = "interpolated log-log" + (f"; {'; '.join(self.notes)}" if self.notes else "")
        return f"measured curve {self.table.cite(self.row)}, {how}"


def line(grid: tuple[int | str, ...], times: Array, a: float) -> Line | None:
    ok = np.isfinite(times)
    if not ok.any():
        return None
    lx = np.log(np.asarray(grid, dtype=float))[ok]
    return Line(lx, np.log(times[ok]), a)


def surface(table: OpTable, row: int, fixed: tuple[int, ...], roof: Roof, scale: float,
             notes: tuple[str, ...]) -> Match | None:
    """The Match of curve `row` with its leading axes fixed at indices `fixed`: a line (1 free axis) or a stack of
    lines along the outer free axis (2 free axes)."""
    cube = table.time_s[(row, *fixed)]
    free = table.grids[len(fixed):]
    if cube.ndim == 1:
        one = line(free[0], cube, 1.0)
        return None if one is None else Match(table, row, (one,), np.empty(0), roof, scale, notes)
    lines = [ln for i, a in enumerate(free[0]) if (ln := line(free[1], cube[i], float(a))) is not None]
    if not lines:
        return None
    return Match(table, row, tuple(lines), np.log(np.array([ln.a for ln in lines])), roof, scale, notes)
