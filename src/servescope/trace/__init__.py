"""servescope.trace — stage 1: read Kineto (PyTorch profiler) JSON traces, Nsight Systems SQLite exports and rank
folders into `Trace` objects (one events table per rank; contract: docs/architecture.md §1).

    types     Trace, DeviceInfo, the event-kind vocabulary, the time unit   (no Polars: imported before it)
    folder    the one rank-folder rule: which files are ranks, their numbers, repeats   (no Polars)
    load      load_trace (one file), load_rank_file (the ranks one file holds), load_traces (a file or folder)
    nsys      Nsight Systems SQLite exports, split per (process, GPU)

Does not: classify, find steps or analyse (servescope.analysis). The names below load lazily, so that
`servescope.trace.types` and `.folder` stay importable before Polars is.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servescope.trace.load import load_rank_file, load_trace, load_traces
    from servescope.trace.types import DeviceInfo, Trace

_LAZY = {"DeviceInfo": "types", "Trace": "types", "load_trace": "load", "load_traces": "load",
         "load_rank_file": "load"}
__all__ = ["DeviceInfo", "Trace", "load_rank_file", "load_trace", "load_traces"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"servescope.trace.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'servescope.trace' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so that `dir()` and completion show the public API."""
    return sorted({*globals(), *__all__})
