"""A rank folder's parts of the `servescope.trace/1` JSON document: the `cross_rank` section (null for a single
rank; fields copied from `servescope.analysis.ranks.CrossRankView` and rounded), and the whole document written
one rank at a time (`trace_document_pieces`: the same text as the document rendered at once, with one rank's part
held at a time). Presentation only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import msgspec

from servescope.analysis.analyze import TraceAnalysis
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


def trace_document_pieces(a: TraceAnalysis) -> Iterator[str]:
    """`render.to_json(trace_json.trace_document(a))` in pieces, the same text, for a rank folder: each rank's part
    built, encoded and formatted on its own as it is written, so that what is held is one rank's part, never the
    document of a thousand (~65 KB of text a rank). The other keys come from `trace_document` of the analysis
    without its ranks (one code path for every key), each formatted whole (cross_rank, findings and warnings are
    a few hundred bytes a rank). JSON strings hold no raw newline, so re-indenting is a replace of every newline."""
    # imported here: trace_json imports this module (cross_rank_document)
    from servescope.report.trace_json import trace_document

    rest = trace_document(replace(a, ranks=(), peaks=()))
    yield "{\n"
    last = len(rest) - 1
    for n, (key, value) in enumerate(rest.items()):
        yield f"  {_text(key)}: "
        if key == "ranks" and a.ranks:
            yield "[\n"
            for i, b in enumerate(a.ranks):
                one = replace(a, ranks=(b,), peaks=a.peaks[i : i + 1], findings=(), warnings=(), cross_rank=None)
                text = _text([trace_document(one)["ranks"][0]], indent=True)  # "[\n  {…}\n]"
                yield "  " + text[2:-2].replace("\n", "\n  ") + (",\n" if i < len(a.ranks) - 1 else "\n")
            yield "  ]"
        else:
            yield _text(value, indent=True).replace("\n", "\n  ")
        yield ",\n" if n < last else "\n"
    yield "}"


def _text(value: Any, indent: bool = False) -> str:
    encoded = msgspec.json.encode(value)
    return (msgspec.json.format(encoded, indent=2) if indent else encoded).decode()
