"""servescope.trace — load Kineto (PyTorch profiler) JSON traces into an events table.

Public API: `load_trace`, `load_traces`, `Trace`, `DeviceInfo` (contract: docs/architecture.md §1).
Nsight Systems SQLite exports are not supported yet (they raise NotATrace saying so).
"""

from __future__ import annotations

from servescope.trace.load import DeviceInfo, Trace, load_trace, load_traces

__all__ = ["DeviceInfo", "Trace", "load_trace", "load_traces"]
