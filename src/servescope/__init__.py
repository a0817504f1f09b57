"""servescope: where each LLM-serving step's GPU time goes, what the hardware should do, what will pay.

The public API, loaded lazily so that `import servescope` (and the CLI) stays fast:

    analyze_trace(path, kind=None, top_n=10) -> TraceAnalysis       trace → steps → breakdown → findings
    load_trace(path) / load_traces(path)                            Kineto JSON → events table
    load_gpu(name), load_model(name_or_path)                        specs with sources
    Scenario.build(model=…, gpu=…, tp=…), predict(scenario, [c…])  the performance model
    calibrate(step_breakdown, scenario), plan(scenario, …)         calibration and the ranked plan
"""

from __future__ import annotations

import importlib
from typing import Any

from servescope.errors import ServescopeError

__version__ = "0.1.0"

_LAZY = {
    "analyze_trace": "servescope.analysis.analyze",
    "TraceAnalysis": "servescope.analysis.analyze",
    "load_trace": "servescope.trace",
    "load_traces": "servescope.trace",
    "Trace": "servescope.trace",
    "classify_name": "servescope.analysis.classify",
    "load_gpu": "servescope.specs.hardware",
    "load_model": "servescope.specs.models",
    "Scenario": "servescope.perfmodel",
    "predict": "servescope.perfmodel",
    "decode_step": "servescope.perfmodel",
    "prefill_step": "servescope.perfmodel",
    "calibrate": "servescope.calibrate",
    "plan": "servescope.planner",
}

__all__ = ["ServescopeError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'servescope' has no attribute {name!r}")
