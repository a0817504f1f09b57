"""servescope.advise — the glue between planner and report: trace → calibration → plan, and the measurements
verify scores, each CLI command one call.

    peaks        the traced GPU's datasheet peaks and measured per-op reference; the trace analysis with them
    calibration  which rank calibrates, its calibration (the trace's warnings carried), the fit on the user's
                 figures, the trace's per-kernel numbers for the kernel tracks
    advice       `advise` (`servescope plan`) and `overview` (`servescope report`): the chain to planner.plan
    measure      the plan's objective from a trace, a benchmark result file or typed figures; `verify_plan`

Does not: print or format (servescope.report), fit (calibrate) or price (perfmodel, planner). The model side loads
inside the functions that need it, so that `servescope trace`, which analyses through `analyze`, pays none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servescope._lazy import lazy_module

if TYPE_CHECKING:
    from servescope.advise.advice import Advice, Overview, advise, overview
    from servescope.advise.calibration import (
        calibration_from_analysis,
        calibration_from_trace,
        calibration_rank,
        figure_fit,
        kernel_evidence,
    )
    from servescope.advise.measure import measure_objective, verify_plan
    from servescope.advise.peaks import analyze, peaks_for, rank_peaks

# The names load lazily (PEP 562): `servescope trace` imports `analyze` (peaks) and not advice or measure (issue 30).
_LAZY = {
    **dict.fromkeys(("Advice", "Overview", "advise", "overview"), "servescope.advise.advice"),
    **dict.fromkeys(("calibration_from_analysis", "calibration_from_trace", "calibration_rank", "figure_fit",
                     "kernel_evidence"), "servescope.advise.calibration"),
    **dict.fromkeys(("measure_objective", "verify_plan"), "servescope.advise.measure"),
    **dict.fromkeys(("analyze", "peaks_for", "rank_peaks"), "servescope.advise.peaks"),
}

__all__ = ["Advice", "Overview", "advise", "analyze", "calibration_from_analysis", "calibration_from_trace",
           "calibration_rank", "figure_fit", "kernel_evidence", "measure_objective", "overview", "peaks_for",
           "rank_peaks", "verify_plan"]


__getattr__, __dir__ = lazy_module(__name__, _LAZY, __all__)
