"""Find the per-rank trace files in a folder and read a rank from a file name.

What it does: lists `*.json` / `*.json.gz` / `*.sqlite` (Nsight) files (vLLM `*.pt.trace.json.gz`, SGLang `*.trace.json.gz`,
HTA `rank-N.json.gz`), sets aside vLLM front-end traces (`*.async_llm.*`, CPU only) and reads ranks from
the names vLLM, SGLang and HTA write:
`rank3.<ns>.pt.trace.json.gz`, `dp0_pp0_tp1_dcp0_ep0_rank1.<ns>.pt.trace.json.gz`,
`<id>-TP-3[-DECODE].trace.json.gz`, `rank-1.json.gz`, `sampled_rank-1.json.gz`, `x_tp3_y.json`.
What it does not do: open the files (the rank inside `distributedInfo` wins; see `load.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

from servescope.errors import TraceNotFound

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")  # .sqlite: Nsight Systems exports
FRONTEND_MARK = ".async_llm."
# First match wins: an explicit "rank" beats a TP index.
_RANK_PATTERNS = (
    re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)(?=$|[^0-9])", re.IGNORECASE),
    re.compile(r"-TP-(\d+)(?=$|[^0-9])"),
    re.compile(r"(?:^|[_.-])tp(\d+)(?=$|[_.-])", re.IGNORECASE),
)


def rank_from_name(name: str) -> int | None:
    """The rank encoded in a trace file name, or None."""
    for pattern in _RANK_PATTERNS:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    return None


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def list_trace_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(rank trace files, skipped front-end files) directly inside `folder`, sorted by name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and is_trace_name(p.name))
    frontend = [p for p in files if FRONTEND_MARK in p.name]
    ranks = [p for p in files if FRONTEND_MARK not in p.name]
    if not ranks:
        others = sorted(p.name for p in folder.iterdir() if p.is_file())[:5]
        hint = f" (found: {', '.join(others)})" if others else " (folder is empty)"
        if frontend:
            hint = f" (only vLLM front-end traces, which hold no GPU events: {frontend[0].name})"
        raise TraceNotFound(f"{folder}: no trace files (*.json, *.json.gz, *.sqlite){hint}")
    return ranks, frontend
