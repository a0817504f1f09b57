"""servescope.trace — stage 1: read Kineto (PyTorch profiler) JSON traces, Nsight Systems SQLite exports and rank
folders into `Trace` objects (one events table per rank; contract: docs/architecture.md §1).

    types     Trace, DeviceInfo, the event-kind vocabulary, the time unit   (no Polars: imported before it)
    folder    the one rank-folder rule: which files are ranks, their numbers, repeats   (no Polars)
    load      load_trace (one file), load_rank_file (the ranks one file holds), load_traces (a file or folder)
    nsys      Nsight Systems SQLite exports, split per (process, GPU)

Other packages read the private modules (`trace._*`) only through the names here (.importlinter): `read_bytes`
(a trace file's JSON bytes, gunzipped), `is_sqlite` (an Nsight Systems export?) and `SHAPED_OPS` (the ops whose
shapes the loader keeps). Does not: classify, find steps or analyse (servescope.analysis). The names below load
lazily, so that `servescope.trace.types` and `.folder` stay importable before Polars is.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servescope.trace._nsys_read import is_sqlite
    from servescope.trace._read import read_bytes
    from servescope.trace._shapes import SHAPED_OPS
    from servescope.trace.load import load_rank_file, load_trace, load_traces
    from servescope.trace.types import DeviceInfo, Trace

_LAZY = {"DeviceInfo": "types", "Trace": "types", "load_trace": "load", "load_traces": "load",
         "load_rank_file": "load", "read_bytes": "_read", "is_sqlite": "_nsys_read", "SHAPED_OPS": "_shapes"}
__all__ = ["SHAPED_OPS", "DeviceInfo", "Trace", "is_sqlite", "load_rank_file", "load_trace", "load_traces",
           "read_bytes"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"servescope.trace.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'servescope.trace' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so that `dir()` and completion show the public API."""
    return sorted({*globals(), *__all__})
