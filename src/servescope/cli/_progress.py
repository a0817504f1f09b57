"""Progress on stderr for long work: a bar for a known count, and bars for the work the library reports.

Does: `progress_bar` (a transient Rich bar for `total` steps the caller updates) and `showing_progress` (bars for
what servescope.progress reports inside the block, each shown once its work has run SHOW_AFTER_S), only when stderr
is a terminal: pipes, files, CI logs and --json runs stay as they are. Rich is imported only when a bar is drawn.
Does not: report progress (servescope.progress) or print anything else.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["SHOW_AFTER_S", "progress_bar", "showing_progress"]


@contextmanager
def progress_bar(total: int, label: str, enabled: bool = True, min_total: int = 1) -> Iterator[Callable[[int], None] | None]:
    """A transient Rich progress bar on stderr — done/total, elapsed time and an estimate of the time left —
    when `enabled`, `total` >= `min_total` and stderr is a terminal; yields `update(done)`, else None (nothing
    is drawn: pipes, files, CI logs and --json runs stay as they are)."""
    if not enabled or total < max(min_total, 1) or sys.stderr is None or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


SHOW_AFTER_S = 1.0  # reported work gets a bar once it has run this long without finishing


@contextmanager
def showing_progress(enabled: bool = True) -> Iterator[None]:
    """Transient bars on stderr — percent, elapsed time and an estimate of the time left — for the long work the
    library reports inside this block (servescope.progress: reading a big trace, the files of a rank folder,
    cross-validation folds, a simulation's requests), when stderr is a terminal: each piece of work gets its bar
    once it has run SHOW_AFTER_S without finishing, so short work draws nothing. Reports from forked workers are
    ignored (only this process draws)."""
    if not enabled or sys.stderr is None or not sys.stderr.isatty():
        yield
        return
    from servescope.progress import reporting

    bars = _Bars()
    try:
        with reporting(bars.update):
            yield
    finally:
        bars.close()


class _Bars:
    """The bars of `showing_progress`, started on the first report that has run long enough."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.started: dict[str, float] = {}
        self.tasks: dict[str, Any] = {}
        self.progress: Any = None

    def update(self, what: str, done: int, total: int) -> None:
        if os.getpid() != self.pid:  # a worker forked while the bars were up: its parent reports for it
            return
        now = time.monotonic()
        first = self.started.setdefault(what, now)
        if done >= total:  # finished work leaves the screen (what follows it may not report)
            if what in self.tasks:
                self.progress.remove_task(self.tasks.pop(what))
            return
        if what not in self.tasks:
            if now - first < SHOW_AFTER_S:
                return
            self.tasks[what] = self._bar().add_task(what, total=total)
        self.progress.update(self.tasks[what], completed=done, total=total)

    def _bar(self) -> Any:
        if self.progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                     TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                                     console=Console(stderr=True), transient=True)
            self.progress.start()
        return self.progress

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
