"""From a command's document (its JSON contract, a dict with a `schema` key) to the bytes of one output format.

Does: JSON (msgspec, 2-space indent), CSV (one flat table per schema, report/csv_tables.py) and HTML (one
self-contained page, report/html.py; jinja2 and plotly are base dependencies). Terminal text is not made here from the
document: each command's Rich renderer (report/*_text.py) draws its result directly.
Does not: compute anything, print, or write files (the CLI writes, atomically).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

FORMATS = ("text", "json", "csv", "html")
# The -o suffixes a format is picked from: the one table (the CLI's output options read it; an unknown suffix is an error)
SUFFIXES = {".json": "json", ".csv": "csv", ".html": "html", ".htm": "html", ".txt": "text"}


def suffix_error(path: str | None, explicit_format: str | None) -> str | None:
    """None when `path`'s suffix names a format (or there is no suffix, or --format was given); else the one-line
    error listing the formats: `-o report.pdf` must not silently write HTML."""
    if path is None or explicit_format is not None:
        return None
    dot = path.rfind(".")
    suffix = path[dot:].lower() if dot > max(path.rfind("/"), 0) else ""
    if not suffix or suffix in SUFFIXES:
        return None
    return (f"-o {path}: unknown suffix {suffix!r}; the formats are "
            f"{', '.join(f'{s} ({f})' for s, f in SUFFIXES.items())}, or pass --format {'|'.join(FORMATS)}")


def to_json(document: dict[str, Any]) -> str:
    """The document as indented JSON (no trailing newline)."""
    return msgspec.json.format(msgspec.json.encode(document), indent=2).decode()


STREAM_ITEMS = 10_000  # a document with a top-level list longer than this is written in pieces (`json_pieces`)
_BATCH = 2_000  # list items formatted at once


def streams(document: dict[str, Any]) -> bool:
    """Whether `document` is big enough to be written in pieces: a top-level list of over STREAM_ITEMS items."""
    return any(isinstance(v, list) and len(v) > STREAM_ITEMS for v in document.values())


def json_pieces(document: dict[str, Any]) -> Iterator[str]:
    """`to_json(document)` in pieces, the same text: each top-level value formatted on its own (nested lines one
    indent deeper) and a top-level list a batch of items at a time, so that no piece holds the whole output (a
    1 M-row `validate` document is ~0.5 GB of text). JSON strings hold no raw newline, so re-indenting is a
    replace of every newline."""
    if not document:
        yield "{}"
        return
    yield "{\n"
    last = len(document) - 1
    for i, (key, value) in enumerate(document.items()):
        yield f"  {msgspec.json.encode(key).decode()}: "
        if isinstance(value, list) and value:
            yield "[\n"
            for start in range(0, len(value), _BATCH):
                text = msgspec.json.format(msgspec.json.encode(value[start : start + _BATCH]), indent=2).decode()
                more = start + _BATCH < len(value)
                yield "  " + text[2:-2].replace("\n", "\n  ") + (",\n" if more else "\n")  # without its [ and ]
            yield "  ]"
        else:
            yield msgspec.json.format(msgspec.json.encode(value), indent=2).decode().replace("\n", "\n  ")
        yield ",\n" if i < last else "\n"
    yield "}"


def to_csv(document: dict[str, Any]) -> str:
    """The document's main table as CSV (header row first)."""
    from servescope.report.csv_tables import document_csv

    return document_csv(document)


def to_html(document: dict[str, Any]) -> str:
    """One self-contained HTML page of the document (scripts and styles inlined; fetches nothing)."""
    from servescope.report.html import document_html

    return document_html(document)


def render(document: dict[str, Any], fmt: str) -> str:
    """The document in `fmt` (json, csv or html)."""
    renderers = {"json": to_json, "csv": to_csv, "html": to_html}
    if fmt not in renderers:
        raise ValueError(f"no document renderer for format {fmt!r}; choose one of {', '.join(renderers)}")
    return renderers[fmt](document)
