"""The analysis's vocabulary: the kinds of engine step it finds (stdlib only: the CLI's options import it before
Polars is loaded).

Does: name each step kind once; `steps` produces them, `analyze` filters by them, the CLI offers them.
Does not: decide a step's kind (analysis.steps).
"""

from __future__ import annotations

PREFILL, DECODE, MIXED, UNKNOWN = "prefill", "decode", "mixed", "unknown"
STEP_KINDS = (PREFILL, DECODE, MIXED, UNKNOWN)
