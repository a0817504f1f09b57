"""Counters of work done, for tests that bound work instead of timing it (issue 30 item 6): the bytes the fast
path's splitter searches, the bytes each gzip stream inflates before its ceiling stops it, the memory a call
allocates. A monkeypatch installs each counter for one test; the time budgets themselves are in
bench/bench_budgets.py."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from servescope.trace import _gzip, _read, _split


@dataclass
class SplitWork:
    searched: list[int] = field(default_factory=list)  # bytes each event-end search may scan (pending - floor)
    closes: int = 0  # closing candidates tried (top-level keys decoded around a guessed array end)
    whole_reads: int = 0  # files read whole by the exact path


def count_split_work(monkeypatch: pytest.MonkeyPatch) -> SplitWork:
    """SplitWork filled while the monkeypatch holds."""
    work = SplitWork()
    last_end, top, read_bytes = _split._last_event_end, _split._top_without_events, _read.read_bytes

    def counted_last_end(pending: bytearray, floor: int = 0) -> tuple[int, int] | None:
        work.searched.append(len(pending) - floor)
        return last_end(pending, floor)

    def counted_top(head: bytes, tail: bytes) -> Any:
        work.closes += 1
        return top(head, tail)

    def counted_read(*args: Any) -> Any:
        work.whole_reads += 1
        return read_bytes(*args)

    monkeypatch.setattr(_split, "_last_event_end", counted_last_end)
    monkeypatch.setattr(_split, "_top_without_events", counted_top)
    monkeypatch.setattr(_read, "read_bytes", counted_read)
    return work


def count_inflated(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """{id of each gzip stream's Ceiling: the most bytes it had inflated when last checked}, filled while the
    monkeypatch holds (every piece is checked before it is yielded, so this is all the stream inflated)."""
    inflated: dict[int, int] = {}
    check: Callable[[_gzip.Ceiling, int, int], None] = _gzip.Ceiling.check

    def counted(self: _gzip.Ceiling, total: int, consumed: int) -> None:
        inflated[id(self)] = max(inflated.get(id(self), 0), total)
        check(self, total, consumed)

    monkeypatch.setattr(_gzip.Ceiling, "check", counted)
    return inflated


@contextmanager
def traced_peak() -> Iterator[list[int]]:
    """[peak bytes allocated by Python and NumPy inside the block] (tracemalloc; NumPy reports its arrays to it)."""
    out: list[int] = []
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield out
    finally:
        out.append(tracemalloc.get_traced_memory()[1])
        if not was_tracing:
            tracemalloc.stop()
