"""servescope.trace — load Kineto (PyTorch profiler) JSON traces and Nsight Systems SQLite exports into an events table.

Public API: `load_trace`, `load_traces`, `Trace`, `DeviceInfo` (contract: docs/architecture.md §1).
Nsight Systems SQLite exports (`nsys export --type sqlite`) load into the same table (`trace.nsys`).
"""

from __future__ import annotations

from servescope.trace.load import DeviceInfo, Trace, load_trace, load_traces

__all__ = ["DeviceInfo", "Trace", "load_trace", "load_traces"]
