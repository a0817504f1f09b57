"""The plan in one call: optionally calibrate on a measured trace, then rank mitigations.

Does: glue `analysis` (trace → breakdown) to `calibrate` and `planner.plan`, so the CLI stays one call.
Does not: compute anything of its own, print, or format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servescope.calibrate import Calibration, calibrate
from servescope.errors import PlanError
from servescope.planner import Plan, plan
from servescope.trace import load_traces


@dataclass(frozen=True)
class Advice:
    plan: Plan
    calibration: Calibration | None
    trace: str | None


def calibration_from_trace(path: str | Path, scenario: Any) -> Calibration:
    """Calibrate `scenario` on the first rank of a trace file or folder that ran GPU kernels."""
    from servescope.breakdown import breakdown

    traces = [t for t in load_traces(path) if t.has_gpu_events]
    if not traces:
        raise PlanError(f"{path}: no GPU kernels in the trace, nothing to calibrate on")
    return calibrate(breakdown(traces[0]), scenario)


def advise(scenario: Any, trace: str | Path | None = None, **plan_options: Any) -> Advice:
    """`plan(scenario, …)`, calibrated on `trace` when one is given (uncalibrated, and saying so, otherwise)."""
    cal = calibration_from_trace(trace, scenario) if trace is not None else None
    return Advice(plan(scenario, calibration=cal, **plan_options), cal, str(trace) if trace is not None else None)
