"""servescope: where each LLM-serving step's GPU time goes, what the hardware should do, what will pay.

The public API (every name in `__all__`; loaded lazily so that `import servescope` and the CLI stay fast):

    load_trace(path) -> Trace, load_traces(path) -> [Trace]          1 read: Kineto JSON, Nsight SQLite, rank folders
    analyze_trace(path, kind=None, top_n=10) -> TraceAnalysis        2–5 analyse: steps → breakdown → findings
    diff_traces(before, after) -> TraceDiff                          two traces compared per step kind
    classify_name(kernel_name) -> (class, collective)                the kernel rule table
    load_gpu(name) -> GpuSpec, load_model(name_or_path) -> ModelSpec specs with a source per number
    Scenario.build(model=…, gpu=…, tp=…) -> Scenario                 one deployment to price
    predict(scenario, [c…]) -> [ServingPoint]                        the closed-form model (decode_step, prefill_step)
    simulate(scenario, arrival=…, concurrency=…) -> SimResult        the engine's scheduler, step by step
    calibrate(step_breakdown, scenario) -> Calibration               the model fitted to a measured trace
    plan(scenario, calibration=…) -> Plan                            mitigations ranked by predicted gain
    advise(scenario, trace) -> Advice                                calibrate on a trace, then plan, in one call
    steps_frame / kernels_frame / roofline_frame / collectives_frame(analysis), points_frame(points) -> DataFrames
    ServescopeError                                                  the root of every error servescope raises
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from servescope.errors import ServescopeError

if TYPE_CHECKING:
    from servescope.advise import Advice, advise
    from servescope.analysis.analyze import TraceAnalysis, analyze_trace
    from servescope.analysis.classify import classify_name
    from servescope.analysis.diff import TraceDiff, diff_traces
    from servescope.calibrate import Calibration, calibrate
    from servescope.perfmodel import Scenario, ServingPoint, decode_step, predict, prefill_step
    from servescope.planner.plan import Plan, plan
    from servescope.report.frames import (
        collectives_frame,
        kernels_frame,
        points_frame,
        roofline_frame,
        steps_frame,
    )
    from servescope.simulate import SimResult, simulate
    from servescope.specs.hardware import GpuSpec, load_gpu
    from servescope.specs.models import ModelSpec, load_model
    from servescope.trace import Trace, load_trace, load_traces

__version__ = "0.1.0"

_LAZY = {
    "load_trace": "servescope.trace",
    "load_traces": "servescope.trace",
    "Trace": "servescope.trace",
    "analyze_trace": "servescope.analysis.analyze",
    "TraceAnalysis": "servescope.analysis.analyze",
    "diff_traces": "servescope.analysis.diff",
    "TraceDiff": "servescope.analysis.diff",
    "classify_name": "servescope.analysis.classify",
    "load_gpu": "servescope.specs.hardware",
    "GpuSpec": "servescope.specs.hardware",
    "load_model": "servescope.specs.models",
    "ModelSpec": "servescope.specs.models",
    "Scenario": "servescope.perfmodel",
    "ServingPoint": "servescope.perfmodel",
    "predict": "servescope.perfmodel",
    "decode_step": "servescope.perfmodel",
    "prefill_step": "servescope.perfmodel",
    "simulate": "servescope.simulate",
    "SimResult": "servescope.simulate",
    "calibrate": "servescope.calibrate",
    "Calibration": "servescope.calibrate",
    "plan": "servescope.planner",
    "Plan": "servescope.planner",
    "advise": "servescope.advise",
    "Advice": "servescope.advise",
    "steps_frame": "servescope.report.frames",
    "kernels_frame": "servescope.report.frames",
    "collectives_frame": "servescope.report.frames",
    "points_frame": "servescope.report.frames",
    "roofline_frame": "servescope.report.frames",
}

__all__ = [
    "Advice", "Calibration", "GpuSpec", "ModelSpec", "Plan", "Scenario", "ServescopeError", "ServingPoint",
    "SimResult", "Trace", "TraceAnalysis", "TraceDiff", "__version__", "advise", "analyze_trace", "calibrate",
    "classify_name", "collectives_frame", "decode_step", "diff_traces", "kernels_frame", "load_gpu", "load_model",
    "load_trace", "load_traces", "plan", "points_frame", "predict", "prefill_step", "roofline_frame", "simulate",
    "steps_frame",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'servescope' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so that `dir()` and completion show the public API."""
    return sorted({*globals(), *__all__})
