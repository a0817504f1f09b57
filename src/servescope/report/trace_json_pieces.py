"""A rank folder's `servescope.trace/1` JSON document written one rank at a time (`trace_document_pieces`: the
same text as the document rendered at once, with one rank's part held at a time). Presentation only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import msgspec

from servescope.analysis.analyze import TraceAnalysis
from servescope.report.trace_json import trace_document


def trace_document_pieces(a: TraceAnalysis) -> Iterator[str]:
    """`render.to_json(trace_json.trace_document(a))` in pieces, the same text, for a rank folder: each rank's part
    built, encoded and formatted on its own as it is written, so that what is held is one rank's part, never the
    document of a thousand (~65 KB of text a rank). The other keys come from `trace_document` of the analysis
    without its ranks (one code path for every key), each formatted whole (cross_rank, findings and warnings are
    a few hundred bytes a rank). JSON strings hold no raw newline, so re-indenting is a replace of every newline."""
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
