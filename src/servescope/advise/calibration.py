"""What a trace and the user's figures give the planner: the rank that calibrates, its calibration, the fit on
the figures, and the trace's per-kernel numbers beside their measured reference.

Does: one rule for which rank calibrates (`calibration_rank`: the first rank that has steps) and one for the
trace's warnings (`calibration_from_analysis`: carried into the calibration's, and so into the plan's text and
JSON, prefixed "trace: "), shared by `advise` (`servescope plan TRACE`), `overview` (`servescope report TRACE`)
and verify's trace measurement; fit the figures on top of a trace's calibration (`figure_fit`); collect each top
kernel's measured and achievable µs per step kind for the kernel tracks (`kernel_evidence`, from
analysis.headroom's gaps).
Does not: fit anything itself (calibrate does), plan, or format. The model side loads inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from servescope.advise.peaks import rank_peaks
from servescope.analysis.analyze import TraceAnalysis, analyze_trace
from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.headroom import kernel_gaps

if TYPE_CHECKING:
    from servescope.calibrate import Calibration
    from servescope.calibrate.figure_fit import FigureFit
    from servescope.calibrate.figures import Figure
    from servescope.perfmodel.scenario import Scenario
    from servescope.planner.kernels import KernelEvidence


def calibration_rank(analysis: TraceAnalysis) -> TraceBreakdown:
    """The rank a trace calibrates on: the first (by rank) that has steps, else the first that ran kernels."""
    return next((b for b in analysis.ranks if b.steps), analysis.ranks[0])


def calibration_from_analysis(analysis: TraceAnalysis, scenario: Scenario) -> Calibration:
    """Calibrate `scenario` on `calibration_rank(analysis)`; the analysis's warnings come first."""
    from servescope.calibrate import calibrate

    cal = calibrate(calibration_rank(analysis), scenario)
    return replace(cal, warnings=(*(f"trace: {w}" for w in analysis.warnings), *cal.warnings))


def calibration_from_trace(path: str | Path, scenario: Scenario) -> Calibration:
    """Calibrate `scenario` on a trace file or folder (analysed once; raises NoGpuEvents when nothing ran)."""
    return calibration_from_analysis(analyze_trace(path), scenario)


def figure_fit(scenario: Scenario, calibration: Calibration | None, figures: Sequence[Figure]) -> FigureFit | None:
    """The deployment calibrated on the user's figures, on top of a trace's calibration when there is one (the
    figures' knobs are fitted on the trace-calibrated scenario) — unless the trace was slowed by the profiler
    against a TPOT measured at its batch (calibrate.profiled): then its shares join the figures on the uncalibrated
    scenario and the fit says it replaces the trace's times (`replaces_trace`); None without figures."""
    if not figures:
        return None
    from dataclasses import replace

    from servescope.calibrate.figure_fit import fit_figures
    from servescope.calibrate.profiled import profiler_perturbation

    if calibration is not None:
        p = profiler_perturbation(calibration, figures, calibration.efficiency.source.removeprefix("calibrated on "))
        if p is not None:
            fit = fit_figures(scenario, [*figures, *p.shares])
            return replace(fit, notes=(*fit.notes, p.note()), replaces_trace=True)
    return fit_figures(calibration.apply(scenario) if calibration is not None else scenario, figures)


def trace_calibration(calibration: Calibration | None, fit: FigureFit | None) -> Calibration | None:
    """The trace's calibration the plan applies: none where the figures' fit replaced its times (a profiled trace)."""
    return None if fit is not None and fit.replaces_trace else calibration


def kernel_evidence(analysis: TraceAnalysis) -> KernelEvidence:
    """The calibration rank's per-kernel numbers for the planner: every top kernel of each step kind, with the
    measured reference's µs for its work where one exists (analysis.headroom)."""
    from servescope.planner.kernels import KernelEvidence, KernelRow, KindTime

    b = calibration_rank(analysis)
    i = analysis.ranks.index(b)
    peaks, notes = analysis.peaks[i] if len(analysis.peaks) > i else rank_peaks(b)
    rows, kinds = [], []
    for s in b.kinds:
        gaps = {g.name: g for g in kernel_gaps(s, peaks)}
        for k in s.top_kernels:
            gap = gaps.get(k.name)
            rows.append(KernelRow(s.kind, k.name, k.kernel_class, gap.model if gap else None,
                                  gap.dtype if gap else None, gap.calls if gap else k.calls,
                                  gap.measured_us if gap else k.total_us, gap.achievable_us if gap else None,
                                  max(s.steps, 1), bool(gap and gap.tunable), k.blocks_per_sm))
        kinds.append(KindTime(s.kind, s.steps, s.gpu_span_us, dict(s.classes_us)))
    source = peaks.achievable_source if peaks is not None else None
    return KernelEvidence(b.device_name, source, tuple(rows), tuple(kinds), "" if source else "; ".join(notes))
