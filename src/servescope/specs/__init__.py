"""Hardware and model specs: TOML/JSON data with a source per number, and their loaders (SI units).

Data under `specs/data/` derived from ai-dynamo/aiconfigurator (measured collectives, model configs) is
Apache-2.0 (`specs/data/LICENSE-Apache-2.0.txt`); provenance per file in the folders' READMEs.
"""

from servescope.specs.collectives import (
    COLLECTIVES,
    CollectiveCurve,
    CollectiveCurves,
    collective_time_s,
    curve_time_s,
    load_collectives,
)
from servescope.specs.hardware import GpuSpec, list_gpus, load_gpu, resolve_gpu_name
from servescope.specs.models import ModelSpec, list_models, load_model

__all__ = [
    "COLLECTIVES",
    "CollectiveCurve",
    "CollectiveCurves",
    "GpuSpec",
    "ModelSpec",
    "collective_time_s",
    "curve_time_s",
    "list_gpus",
    "list_models",
    "load_collectives",
    "load_gpu",
    "load_model",
    "resolve_gpu_name",
]
