"""servescope.analysis — stages 2–5: what a loaded Trace says (pure functions from table to table).

    classify (+ rules)  kernel → class, collective, family        steps       the engine's steps
    breakdown           per step × class (intervals, timeline)    findings    what stands out, with evidence
    ranks               rank folders in worker processes or Ray   diff        two analyses, per step kind
    costs, op_costs     cost models; each op's FLOPs and bytes   roofline    kernel work and its roofline
    headroom            kernels against a measured reference
    launch              per-kernel CTAs, waves, busy SMs          sparse_decode  sparse decode grid collapse
    capture             shapes for graph replays from a capture trace
    analyze             the entry: `analyze_trace(path)` → TraceAnalysis

Does not: read files itself (servescope.trace does), price anything (perfmodel), or format (report).
The names below load lazily: `servescope.analysis.rank_workers` must stay importable before Polars is.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servescope.analysis.analyze import TraceAnalysis, analyze_trace, example_trace
    from servescope.analysis.diff import diff_traces
    from servescope.analysis.vocab import STEP_KINDS

_LAZY = {"STEP_KINDS": "vocab", "TraceAnalysis": "analyze", "analyze_trace": "analyze",
         "example_trace": "analyze", "diff_traces": "diff"}
__all__ = ["STEP_KINDS", "TraceAnalysis", "analyze_trace", "diff_traces", "example_trace"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"servescope.analysis.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'servescope.analysis' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so that `dir()` and completion show the public API."""
    return sorted({*globals(), *__all__})
