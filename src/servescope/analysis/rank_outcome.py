"""One rank file's outcome as a worker sends it back (analysis.ranks makes it, analysis.rank_cache stores it).

Its own module so that the cache and the rank runner both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.analysis.breakdown import TraceBreakdown
from servescope.errors import TraceError


@dataclass(frozen=True)
class RankOutcome:
    """What one worker sends back: a breakdown (None when the file ran no GPU kernels) or why the file failed."""

    file: str
    rank: int | None
    breakdown: TraceBreakdown | None
    warnings: tuple[str, ...]
    error: TraceError | None = None
