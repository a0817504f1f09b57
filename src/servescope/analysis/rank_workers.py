"""Worker processes for rank folders, startable before Polars is imported (stdlib only: importing this is cheap).

Does: decide how many processes a rank folder gets (`parallel_workers`: one per core, never more than files, 1 for
folders under PARALLEL_MIN_BYTES) and start them (`RankPool`: workers − 1 processes; the calling process is the
last worker, see `ranks._run_processes`). A pool started while this process runs only its main thread — the CLI
starts it before it imports Polars (`start_for_folder`) — forks its workers: a forked child needs no fresh
interpreter and no re-import of the CLI, and it imports the analysis (Polars included) while the parent does the
same, on the other core. Anywhere else (Polars already imported: Polars, jemalloc and OpenBLAS run threads of their
own, and a fork copies a lock another thread may hold) the workers are spawned, which is safe on every OS.
Does not: analyse anything (servescope.analysis.ranks). Which files are ranks is `trace.folder`'s rule (stdlib only,
so importing it here keeps this module cheap); `folder_files` applies it without the errors, for the early start.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from importlib import import_module
from pathlib import Path
from typing import Any

from servescope.trace.folder import is_rank_name

# Below this many bytes of rank files in all, a second interpreter's imports (~0.4–0.6 s of CPU) cost more than
# analysing the files one after another in-process.
PARALLEL_MIN_BYTES = 16 << 20


def parallel_workers(files: Sequence[str | Path], workers: int | None = None) -> int:
    """Processes for `files` (this one included): `workers` capped at the file count; by default one per core,
    never more than files, and 1 (in-process) when the files hold under PARALLEL_MIN_BYTES in all."""
    if workers is not None:
        return max(1, min(workers, len(files)))
    total_bytes = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    if total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(len(files), os.cpu_count() or 1))


def folder_files(path: Path) -> list[Path]:
    """The files of a rank folder that look like traces (an estimate for the early start; see module doc)."""
    try:
        if not path.is_dir():
            return []
        return [p for p in path.iterdir() if p.is_file() and is_rank_name(p.name)]
    except OSError:  # unreadable: no early start; the loader says what is wrong
        return []


def fork_is_safe() -> bool:
    """True on Linux while this process runs one thread (native threads counted too, from /proc) and has not
    imported Polars: then a fork copies no lock that another thread holds."""
    if sys.platform != "linux" or "polars" in sys.modules or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class RankPool:
    """`size` − 1 worker processes (the caller is the size-th worker). Forked when `fork_is_safe()`, else spawned.
    Use as a context manager, or call `shutdown()`. `warm_up` names the module each worker imports as it starts
    (the analysis: while the parent imports it too, not at the first file); named by the caller, so that this
    module depends on nothing it runs."""

    def __init__(self, size: int, warm_up: str | None = None) -> None:
        if size < 2:
            raise ValueError(f"a RankPool needs size >= 2 (got {size}); size 1 runs in-process")
        self.size = size
        # multiprocessing (~10 ms of imports) only when a pool starts: one trace file never needs it
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        self.start_method = "fork" if fork_is_safe() else "spawn"
        context = get_context(self.start_method)
        if warm_up:
            self._executor = ProcessPoolExecutor(max_workers=size - 1, mp_context=context,
                                                 initializer=import_module, initargs=(warm_up,))
        else:
            self._executor = ProcessPoolExecutor(max_workers=size - 1, mp_context=context)
        self._executor.submit(os.getpid)  # start the processes now (fork: before this process starts threads)

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        return self._executor.submit(fn, *args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def start_for_folder(path: Path | None, workers: int | None, ray_address: str | None,
                     warm_up: str | None = None) -> RankPool | None:
    """The CLI's early start: a RankPool when `path` is a folder whose files will run in parallel (not on Ray),
    else None. Call it before importing the analysis, so that the workers can be forked."""
    if path is None or ray_address is not None:
        return None
    n = parallel_workers(folder_files(path), workers)
    return RankPool(n, warm_up) if n > 1 else None
