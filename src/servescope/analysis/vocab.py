"""The analysis's vocabulary: the kinds of engine step it finds, the kernel classes and collectives it names
(stdlib only: the CLI's options and the user's typed figures, calibrate.figures, import it before Polars is loaded).

Does: name each step kind, kernel class and collective once; `steps` produces the kinds, `classify` the classes
(and re-exports them), `analyze` filters by kind, the CLI offers them.
Does not: decide a step's kind (analysis.steps).
"""

from __future__ import annotations

PREFILL, DECODE, MIXED, UNKNOWN = "prefill", "decode", "mixed", "unknown"
STEP_KINDS = (PREFILL, DECODE, MIXED, UNKNOWN)

KERNEL_CLASSES: tuple[str, ...] = (
    "communication", "gemm", "attention", "moe", "norm", "activation",
    "rotary", "cast", "sampling", "memory", "other",
)
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast",
)
