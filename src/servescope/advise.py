"""The plan in one call, and everything the HTML report shows in one call: trace → calibration → plan.

Does: glue `analysis` (trace → breakdown, one load through `analysis.analyze.analyze_trace`) to `calibrate`,
`planner.plan` and `planner.curves`, so that each CLI command stays one call. One rule for which rank calibrates
(`calibration_rank`: the first rank that has steps) and one for the trace's warnings (`calibration_from_analysis`:
carried into the calibration's, and so into the plan's text and JSON, prefixed "trace: "), shared by `advise`
(`servescope plan TRACE`) and `overview` (`servescope report TRACE`).
Does not: compute anything of its own, print, or format (servescope.report does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servescope.analysis.analyze import TraceAnalysis, analyze_trace
from servescope.analysis.breakdown import TraceBreakdown
from servescope.calibrate import Calibration, calibrate
from servescope.perfmodel.scenario import Scenario
from servescope.planner import Plan, plan
from servescope.planner.curves import Curve, plan_curves


@dataclass(frozen=True)
class Advice:
    plan: Plan
    calibration: Calibration | None
    trace: str | None
    analysis: TraceAnalysis | None = None  # the trace analysis the calibration used

    def __repr__(self) -> str:
        return f"Advice(trace={self.trace!r}, {self.plan!r})"


@dataclass(frozen=True)
class Overview:
    analysis: TraceAnalysis
    scenario: Scenario | None = None
    calibration: Calibration | None = None
    plan: Plan | None = None
    curves: tuple[Curve, ...] = ()


def calibration_rank(analysis: TraceAnalysis) -> TraceBreakdown:
    """The rank a trace calibrates on: the first (by rank) that has steps, else the first that ran kernels."""
    return next((b for b in analysis.ranks if b.steps), analysis.ranks[0])


def calibration_from_analysis(analysis: TraceAnalysis, scenario: Scenario) -> Calibration:
    """Calibrate `scenario` on `calibration_rank(analysis)`; the analysis's warnings come first."""
    cal = calibrate(calibration_rank(analysis), scenario)
    return replace(cal, warnings=(*(f"trace: {w}" for w in analysis.warnings), *cal.warnings))


def calibration_from_trace(path: str | Path, scenario: Scenario) -> Calibration:
    """Calibrate `scenario` on a trace file or folder (analysed once; raises NoGpuEvents when nothing ran)."""
    return calibration_from_analysis(analyze_trace(path), scenario)


def advise(scenario: Scenario, trace: str | Path | None = None, **plan_options: Any) -> Advice:
    """`plan(scenario, …)`, calibrated on `trace` when one is given (uncalibrated, and saying so, otherwise)."""
    analysis = analyze_trace(trace) if trace is not None else None
    cal = calibration_from_analysis(analysis, scenario) if analysis is not None else None
    return Advice(plan(scenario, calibration=cal, **plan_options), cal, str(trace) if trace is not None else None,
                  analysis)


def overview(path: str | Path, scenario: Scenario | None = None, kind: str | None = None, top_n: int = 10,
             workers: int | None = None, **plan_options: Any) -> Overview:
    """Analyse the trace; with a scenario, calibrate it as `advise` does and plan (plan_options go to
    planner.plan: objective, concurrency, target, forbid, spec, tpot_limit_s), with each track's curve."""
    analysis = analyze_trace(path, kind=kind, top_n=top_n, workers=workers)
    if scenario is None:
        return Overview(analysis)
    cal = calibration_from_analysis(analysis, scenario)
    p = plan(scenario, calibration=cal, **plan_options)
    return Overview(analysis, scenario, cal, p, plan_curves(p))
