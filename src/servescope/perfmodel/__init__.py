"""Analytical performance model of LLM serving from hardware and model specs (never reads traces).

Public API (docs/model.md): Scenario, Efficiency, decode_step, prefill_step, StepPrediction, CollectiveCost,
predict, ServingPoint, plus memory helpers (documents: servescope.report.model_doc). Validation against measured serving results lives in
`servescope.validation.validate`; the efficiency fit in `servescope.validation.fit`.
"""

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
