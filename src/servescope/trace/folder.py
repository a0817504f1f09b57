"""The one rank-folder rule: which files of a folder are ranks, which rank each is, and what to do with repeats.

Does: list `*.json` / `*.json.gz` / `*.sqlite` (Nsight) files (vLLM `*.pt.trace.json.gz`, SGLang `*.trace.json.gz`,
HTA `rank-N.json.gz`), set aside vLLM front-end traces (`*.async_llm.*`, CPU only) with a note each, read ranks
from the names vLLM, SGLang and HTA write (`rank3.<ns>.pt.trace.json.gz`, `dp0_pp0_tp1_dcp0_ep0_rank1.<ns>.pt.trace
.json.gz`, `<id>-TP-3[-DECODE].trace.json.gz`, `rank-1.json.gz`, `sampled_rank-1.json.gz`, `x_tp3_y.json`), let the
names win when the files' own `distributedInfo.rank` repeat, and order ranks (unknown last). Ranks are the files
directly inside the folder, never those of its subfolders: a folder of subfolders that each hold traces (HTA's
`trace_diff/control/` and `test/`) holds separate runs, not ranks of one, and is refused naming them (two of
them: "use `servescope diff A B`"). `trace.load`
(`load_traces`), `analysis.ranks` (one worker per file) and `analysis.rank_workers` (the early start) all use it.
Does not: open the files (the rank inside `distributedInfo` wins; see `load.py`) or import Polars (the CLI
imports this before Polars).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from servescope.errors import TraceNotFound

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")  # .sqlite: Nsight Systems exports
FRONTEND_MARK = ".async_llm."
DUPLICATE_RANK_NOTE = "distributedInfo.rank repeats across files; rank taken from the file name"
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


def is_rank_name(name: str) -> bool:
    """A file name that is analysed as a rank: a trace suffix and not a vLLM front-end trace."""
    return is_trace_name(name) and FRONTEND_MARK not in name


def list_trace_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(rank trace files, skipped front-end files) directly inside `folder`, sorted by name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and is_trace_name(p.name))
    frontend = [p for p in files if FRONTEND_MARK in p.name]
    ranks = [p for p in files if FRONTEND_MARK not in p.name]
    if not ranks:
        runs = _trace_subfolders(folder)
        if runs and not frontend:
            raise TraceNotFound(_runs_message(folder, runs))
        others = sorted(p.name for p in folder.iterdir() if p.is_file())[:5]
        hint = f" (found: {', '.join(others)})" if others else " (folder is empty)"
        if frontend:
            hint = f" (only vLLM front-end traces, which hold no GPU events: {frontend[0].name})"
        raise TraceNotFound(f"{folder}: no trace files (*.json, *.json.gz, *.sqlite){hint}")
    return ranks, frontend


def _trace_subfolders(folder: Path) -> list[Path]:
    """The subfolders directly inside `folder` that hold a rank trace file directly inside them, by name."""
    def holds_traces(d: Path) -> bool:
        try:
            return any(f.is_file() and is_rank_name(f.name) for f in d.iterdir())
        except OSError:  # an unreadable subfolder is not a run we can name
            return False

    return [d for d in sorted(p for p in folder.iterdir() if p.is_dir()) if holds_traces(d)]


def _runs_message(folder: Path, runs: Sequence[Path]) -> str:
    """What a folder of trace subfolders is, and the command for it (a pair: diff; more: one at a time)."""
    names = ", ".join(f"{d.name}/" for d in runs[:6]) + (", …" if len(runs) > 6 else "")
    what = "a trace folder" if len(runs) == 1 else f"{len(runs)} trace folders (separate runs, not ranks of one)"
    head = f"{folder}: no trace files in the folder itself; it holds {what}: {names}"
    if len(runs) == 1:
        return f"{head}: use `servescope trace {runs[0]}`"
    if len(runs) == 2:
        a, b = runs
        return f"{head}: use `servescope diff {a} {b}` to compare them, or `servescope trace {a}` for one"
    return f"{head}: give one of them, e.g. `servescope trace {runs[0]}`"


def rank_files(path: Path) -> tuple[list[Path], list[str]]:
    """The files to read for `path` (itself when it is a file) and a note for each file set aside."""
    if not path.is_dir():
        return [path], []
    files, frontend = list_trace_files(path)
    return files, [f"skipped vLLM front-end trace without GPU events: {p.name}" for p in frontend]


def ranks_from_names(files: Sequence[str | Path], ranks: Sequence[int | None]) -> list[int | None] | None:
    """When the files' own ranks repeat but their names give distinct ranks, the names' ranks (apply them with
    DUPLICATE_RANK_NOTE); None when the ranks stand as they are."""
    if len(files) < 2 or len(set(ranks)) == len(ranks):
        return None
    from_names = [rank_from_name(Path(f).name) for f in files]
    if None in from_names or len(set(from_names)) != len(from_names):
        return None
    return from_names


def rank_order(rank: int | None, file: str | Path) -> tuple[bool, int, str]:
    """Sort key of a rank: by rank, unknown ranks last, ties by file name."""
    return rank is None, rank if rank is not None else 0, Path(file).name
