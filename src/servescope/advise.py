"""The plan in one call: optionally calibrate on a measured trace, then rank mitigations.

Does: glue `analysis` (trace → breakdown, one load through `analysis.analyze_trace`) to `calibrate` and
`planner.plan`, so the CLI stays one call; the trace analysis's warnings (a truncated file, repaired JSON, a
skipped rank) are carried into the calibration's and so into the plan, text and JSON, prefixed "trace: ".
Does not: compute anything of its own, print, or format.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servescope.analysis import TraceAnalysis, analyze_trace
from servescope.calibrate import Calibration, calibrate
from servescope.planner import Plan, plan


@dataclass(frozen=True)
class Advice:
    plan: Plan
    calibration: Calibration | None
    trace: str | None
    analysis: TraceAnalysis | None = None  # the trace analysis the calibration used

    def __repr__(self) -> str:
        return f"Advice(trace={self.trace!r}, {self.plan!r})"


def calibration_from_analysis(analysis: TraceAnalysis, scenario: Any) -> Calibration:
    """Calibrate `scenario` on the first rank that ran GPU kernels; the analysis's warnings come first."""
    cal = calibrate(analysis.ranks[0], scenario)
    return replace(cal, warnings=(*(f"trace: {w}" for w in analysis.warnings), *cal.warnings))


def calibration_from_trace(path: str | Path, scenario: Any) -> Calibration:
    """Calibrate `scenario` on a trace file or folder (analysed once; raises NoGpuEvents when nothing ran)."""
    return calibration_from_analysis(analyze_trace(path), scenario)


def advise(scenario: Any, trace: str | Path | None = None, **plan_options: Any) -> Advice:
    """`plan(scenario, …)`, calibrated on `trace` when one is given (uncalibrated, and saying so, otherwise)."""
    analysis = analyze_trace(trace) if trace is not None else None
    cal = calibration_from_analysis(analysis, scenario) if analysis is not None else None
    return Advice(plan(scenario, calibration=cal, **plan_options), cal, str(trace) if trace is not None else None,
                  analysis)
