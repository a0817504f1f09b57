"""Analytical performance model of LLM serving from hardware and model specs (never reads traces).

Public API (docs/model.md): Scenario, Efficiency, decode_step, prefill_step, StepPrediction, CollectiveCost,
predict, ServingPoint, plus memory helpers (documents: servescope.report.model_doc). Validation against measured serving results lives in
`servescope.validation.validate`; the efficiency fit in `servescope.validation.fit`.

The names load lazily (PEP 562, as `servescope/__init__`): importing one submodule (`from servescope.perfmodel import
opcurve`, as the trace path's "% of achievable" does) no longer runs scenario, step and serving (~40 ms; issue 30).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servescope._lazy import lazy_module

if TYPE_CHECKING:
    from servescope.perfmodel.efficiency import Efficiency, default_efficiency
    from servescope.perfmodel.memory import kv_bytes_per_seq, max_concurrency, weights_bytes_per_gpu
    from servescope.perfmodel.scenario import Scenario
    from servescope.perfmodel.serving import ServingPoint, predict, predict_arrays
    from servescope.perfmodel.step import (
        TERMS,
        CollectiveCost,
        StepPrediction,
        decode_step,
        prefill_step,
    )

_LAZY = {
    "Efficiency": "servescope.perfmodel.efficiency",
    "default_efficiency": "servescope.perfmodel.efficiency",
    "kv_bytes_per_seq": "servescope.perfmodel.memory",
    "max_concurrency": "servescope.perfmodel.memory",
    "weights_bytes_per_gpu": "servescope.perfmodel.memory",
    "Scenario": "servescope.perfmodel.scenario",
    "ServingPoint": "servescope.perfmodel.serving",
    "predict": "servescope.perfmodel.serving",
    "predict_arrays": "servescope.perfmodel.serving",
    "TERMS": "servescope.perfmodel.step",
    "CollectiveCost": "servescope.perfmodel.step",
    "StepPrediction": "servescope.perfmodel.step",
    "decode_step": "servescope.perfmodel.step",
    "prefill_step": "servescope.perfmodel.step",
}

__all__ = [
    "TERMS",
    "CollectiveCost",
    "Efficiency",
    "Scenario",
    "ServingPoint",
    "StepPrediction",
    "decode_step",
    "default_efficiency",
    "kv_bytes_per_seq",
    "max_concurrency",
    "predict",
    "predict_arrays",
    "prefill_step",
    "weights_bytes_per_gpu",
]


__getattr__, __dir__ = lazy_module(__name__, _LAZY, __all__)
