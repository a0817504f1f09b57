"""A rank folder's part of the `servescope.trace/1` JSON document: the `cross_rank` section (null for a single
rank; fields copied from `servescope.analysis.ranks.CrossRankView` and rounded). The whole document written one
rank at a time is report.trace_json_pieces. Presentation only."""

from __future__ import annotations

from typing import Any

from servescope.analysis.ranks import CrossRankView


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def cross_rank_document(v: CrossRankView | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "steps_compared": v.steps_compared,
        "ranks": [
            {"rank": r.rank, "file": r.file, "device": r.device_name, "steps": r.steps,
             "gpu_busy_us": _r(r.gpu_busy_us), "gpu_span_us": _r(r.gpu_span_us), "comm_us": _r(r.comm_us),
             "slowest_steps": v.slowest_rank_counts.get(r.rank, 0)}
            for r in v.ranks
        ],
        "steps": [
            {"index": s.index, "kind": s.kind, "min_us": _r(s.min_us), "median_us": _r(s.median_us),
             "max_us": _r(s.max_us), "spread_us": _r(s.spread_us), "slowest_rank": s.slowest_rank,
             "fastest_rank": s.fastest_rank}
            for s in v.steps
        ],
        "collectives": [
            {"collective": c.collective, "per_rank_us": [_r(x) for x in c.per_rank_us],  # in the order of "ranks"
             "skew_us": _r(c.skew_us), "max_rank": c.max_rank, "min_rank": c.min_rank}
            for c in v.collectives
        ],
    }
