"""From a command's document (its JSON contract, a dict with a `schema` key) to the bytes of one output format.

Does: JSON (msgspec, 2-space indent), CSV (one flat table per schema, report/csv_tables.py) and HTML (one
self-contained page, report/html.py; jinja2 and plotly are base dependencies). Terminal text is not made here from the
document: each command's Rich renderer (report/*_text.py) draws its result directly.
Does not: compute anything, print, or write files (the CLI writes, atomically).
"""

from __future__ import annotations

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
