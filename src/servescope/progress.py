"""Progress of long work, reported by the library to whoever shows it (the CLI draws bars on a terminal).

Does: `reporting(callback)` sets, for the work done inside it, a callback `(what, done, total)`; `report(what, done,
total)` calls it. `what` names the work and its unit ("reading trace.json: bytes", "rank files", "folds") so that
the one showing it can label it and tell one piece of work from another. A context variable: per thread, copied
into a forked worker only if set before the fork (the CLI sets it after starting its workers, which then report
nothing; their parent reports the files they finish). Without a reporter, `report` costs one lookup.
Stages: `timing(callback)` sets a callback `(stage, seconds)` that each `with stage("load"):` block inside it calls
with its wall time (`servescope trace --timings`); the same context-variable rule, so stages run in worker processes
are not seen. Without a callback, `stage` costs one lookup.
Does not: draw or estimate anything (cli._progress.showing_progress does), or print the times (the CLI does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from time import perf_counter

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


Timer = Callable[[str, float], None]
_TIMER: ContextVar[Timer | None] = ContextVar("servescope_timer", default=None)


@contextmanager
def timing(callback: Timer | None) -> Iterator[None]:
    """Send the wall time of each `stage` run inside this block to `callback(stage, seconds)` (None: to no one)."""
    token = _TIMER.set(callback)
    try:
        yield
    finally:
        _TIMER.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """A named stage of the work (load, classify, steps, ...): its wall time goes to the `timing` callback, if any."""
    timer = _TIMER.get()
    if timer is None:
        yield
        return
    start = perf_counter()
    try:
        yield
    finally:
        timer(name, perf_counter() - start)
