"""Progress of long work, reported by the library to whoever shows it (the CLI draws bars on a terminal).

Does: `reporting(callback)` sets, for the work done inside it, a callback `(what, done, total)`; `report(what, done,
total)` calls it. `what` names the work and its unit ("reading trace.json: bytes", "rank files", "folds") so that
the one showing it can label it and tell one piece of work from another. A context variable: per thread, copied
into a forked worker only if set before the fork (the CLI sets it after starting its workers, which then report
nothing; their parent reports the files they finish). Without a reporter, `report` costs one lookup.
Does not: draw, time or estimate anything (cli._app.showing_progress does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Reporter = Callable[[str, int, int], None]
_REPORTER: ContextVar[Reporter | None] = ContextVar("servescope_progress", default=None)


@contextmanager
def reporting(callback: Reporter | None) -> Iterator[None]:
    """Send the progress of the work inside this block to `callback` (None: to no one)."""
    token = _REPORTER.set(callback)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def report(what: str, done: int, total: int) -> None:
    """`done` of `total` units of `what` are done."""
    callback = _REPORTER.get()
    if callback is not None:
        callback(what, done, total)
