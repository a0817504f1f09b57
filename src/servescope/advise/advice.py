"""The plan in one call, and everything the HTML report shows in one call: trace → calibration → plan.

Does: chain the other modules of this package to `planner.plan` and `planner.curves`, so that each CLI command
stays one call: `advise` (`servescope plan`: the trace analysed with its GPU's peaks, the calibration on it and on
the user's figures, the kernel evidence, the plan) and `overview` (`servescope report`: the same, plus each
track's latency–throughput curve). Computes nothing of its own; does not print or format (servescope.report does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servescope.advise.calibration import (
    calibration_from_analysis,
    figure_fit,
    kernel_evidence,
    trace_calibration,
)
from servescope.advise.peaks import analyze
from servescope.analysis.analyze import TraceAnalysis

# The model side (calibrate, planner, perfmodel, validation: ~0.2 s of imports) loads where a function needs it, so
# that `servescope trace` — which analyses through `advise.peaks.analyze` for the GPU's peaks — pays none of it.
if TYPE_CHECKING:
    from servescope.calibrate import Calibration
    from servescope.calibrate.figure_fit import FigureFit
    from servescope.calibrate.figures import Figure
    from servescope.perfmodel.scenario import Scenario
    from servescope.planner import Plan
    from servescope.planner.curves import Curve


@dataclass(frozen=True)
class Advice:
    plan: Plan
    calibration: Calibration | None
    trace: str | None
    analysis: TraceAnalysis | None = None  # the trace analysis the calibration used
    fit: FigureFit | None = None  # the calibration on the user's figures (its notes: what was set aside)

    def __repr__(self) -> str:
        return f"Advice(trace={self.trace!r}, {self.plan!r})"


@dataclass(frozen=True)
class Overview:
    analysis: TraceAnalysis
    scenario: Scenario | None = None
    calibration: Calibration | None = None
    plan: Plan | None = None
    curves: tuple[Curve, ...] = ()
    fit: FigureFit | None = None  # the calibration on the user's figures


def advise(scenario: Scenario, trace: str | Path | None = None, figures: Sequence[Figure] = (),
           capture: str | Path | None = None, **plan_options: Any) -> Advice:
    """`plan(scenario, …)`, calibrated on `trace` when one is given and on the measured `figures` (typed or read
    from result files: calibrate.inputs) when given (uncalibrated, and saying so, otherwise), with the trace's
    per-kernel numbers for the kernel tracks (`capture`: shapes for its graph replays)."""
    from servescope.planner import plan

    analysis = analyze(trace, capture=capture) if trace is not None else None
    cal = calibration_from_analysis(analysis, scenario) if analysis is not None else None
    fit = figure_fit(scenario, cal, figures)
    kernels = kernel_evidence(analysis) if analysis is not None else None
    return Advice(plan(scenario, calibration=trace_calibration(cal, fit), measured=fit, kernels=kernels,
                       **plan_options), cal,
                  str(trace) if trace is not None else None, analysis, fit)


def overview(path: str | Path, scenario: Scenario | None = None, kind: str | None = None, top_n: int = 10,
             workers: int | None = None, figures: Sequence[Figure] = (), capture: str | Path | None = None,
             **plan_options: Any) -> Overview:
    """Analyse the trace; with a scenario, calibrate it as `advise` does (the trace, then the measured `figures`)
    and plan (plan_options go to planner.plan: objective, concurrency, target, forbid, spec, tpot_limit_s), with
    each track's curve."""
    from servescope.planner import plan
    from servescope.planner.curves import plan_curves

    analysis = analyze(path, kind=kind, top_n=top_n, workers=workers, capture=capture)
    if scenario is None:
        return Overview(analysis)
    cal = calibration_from_analysis(analysis, scenario)
    fit = figure_fit(scenario, cal, figures)
    p = plan(scenario, calibration=trace_calibration(cal, fit), measured=fit, kernels=kernel_evidence(analysis),
             **plan_options)
    return Overview(analysis, scenario, cal, p, plan_curves(p), fit)
