"""Hardware and model specs: TOML/JSON data with a source per number, and their loaders (SI units).

Data under `specs/data/` derived from ai-dynamo/aiconfigurator (measured collectives and per-op curves, model
configs) is Apache-2.0 (`specs/data/LICENSE-Apache-2.0.txt`); provenance per file in the folders' READMEs.
The names below load lazily: a trace analysis that only needs a GPU's peaks imports `specs.hardware` alone.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from servescope.specs.opcurves import OpTable, load_opcurves, opcurve_systems

_LAZY = {
    **dict.fromkeys(("COLLECTIVES", "CollectiveCurve", "CollectiveCurves", "collective_time_s", "curve_time_s",
                     "load_collectives"), "collectives"),
    **dict.fromkeys(("GpuSpec", "list_gpus", "load_gpu", "resolve_gpu_name"), "hardware"),
    **dict.fromkeys(("ModelSpec", "list_models", "load_model"), "models"),
    **dict.fromkeys(("OpTable", "load_opcurves", "opcurve_systems"), "opcurves"),
}
__all__ = [
    "COLLECTIVES",
    "CollectiveCurve",
    "CollectiveCurves",
    "GpuSpec",
    "ModelSpec",
    "OpTable",
    "collective_time_s",
    "curve_time_s",
    "list_gpus",
    "list_models",
    "load_collectives",
    "load_gpu",
    "load_model",
    "load_opcurves",
    "opcurve_systems",
    "resolve_gpu_name",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"servescope.specs.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'servescope.specs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
