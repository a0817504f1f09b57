"""Fast path: stream a trace in blocks and cut its `traceEvents` array into chunks of whole events.

What it does: reads blocks (from the file, a gzip stream or an in-memory buffer), finds
`"traceEvents": [` (or the `[` of a bare-list file), then cuts the array into ~2 MB chunks at `},{`
between events as blocks arrive; at the end it finds the array's closing `]` (the first `}]` that
works) and decodes the top-level keys from the document with `[]` in place of the array. The file is never
held in memory whole: only the current block and the unfinished event.
Correctness does not rest on the guesses: if the document with a placeholder in place of the array
decodes with the placeholder as its top-level `traceEvents`, and every chunk decodes as an array, the
file is that document with those events (JSON has one parse).
A wrong guess (a `},{` inside a string) can only make something fail to decode; the caller then
takes the exact path (`_read.py`), which also reports syntax errors for repair.
What it does not do: decode events (`_read.py`) or repair anything (`_repair.py`).
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from servescope.progress import report
from servescope.trace._gzip import Ceiling, GzipCutOff, GzipTrailingJunk, inflate_members
from servescope.trace._repair import Buffer
from servescope.trace._schema import RAW_DOC_DECODER, TopLevel

BLOCK_BYTES = 2 << 20  # read / inflate size; chunks are cut at the last event end of a block
CHUNK_BYTES = 1 << 20  # cut once this much is pending
HEAD_LIMIT_BYTES = 16 << 20  # "traceEvents" must start within this many bytes
SEP_SPAN_BYTES = 4096  # longest `},{` separator (whitespace included) a cut is made at
MAX_EVENT_BYTES = 256 << 20  # pending bytes without an event end beyond which the fast path gives up
BOM = b"\xef\xbb\xbf"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_SEP = re.compile(rb"\}\s*,\s*(?=\{)")
# The array's end: `]` at the start (an empty array) or after an event's `}`. Two patterns, not `(?:^|\})`: one that
# starts with a literal is searched for that byte first (~15x faster over a long last event).
_EMPTY_END = re.compile(rb"\s*\]")
_ARRAY_END = re.compile(rb"\}\s*\]")
_LEAD = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*")
_PAD = b" \t\r\n\x00"
_CUT_TRIES = 64
_CLOSE_TRIES = 64
_PLACEHOLDER = b'"servescope: the event array"'


class BadSplit(Exception):
    """The fast path cannot vouch for this file; use the exact path."""


def file_blocks(path: Path) -> Iterator[bytes]:
    """The file in blocks; the bytes read are reported (servescope.progress) as "reading NAME"."""
    what, total, done = f"reading {path.name}", path.stat().st_size, 0
    with path.open("rb") as fh:
        while block := fh.read(BLOCK_BYTES):
            done += len(block)
            report(what, done, total)
            yield block


def gzip_blocks(path: Path) -> Iterator[bytes]:
    """Inflated blocks of every gzip member (the compressed bytes consumed reported as "reading NAME"); a cut-off,
    corrupt or junk-trailed stream raises BadSplit (the exact path then reports and repairs it); one that inflates
    past its ceiling raises _gzip.GzipBomb."""
    raw = path.read_bytes()
    what = f"reading {path.name}"
    try:
        yield from inflate_members(raw, Ceiling.for_input(len(raw), held_whole=False),
                                   lambda pos: report(what, pos, len(raw)))
    except (zlib.error, GzipCutOff, GzipTrailingJunk):
        raise BadSplit from None


def buffer_blocks(buf: Buffer) -> Iterator[memoryview]:
    view = memoryview(buf)
    for start in range(0, len(view), BLOCK_BYTES):
        yield view[start : start + BLOCK_BYTES]


class Splitter:
    """`chunks()` yields `[ev,...]` chunks; once it is exhausted, `top` holds the top-level keys."""

    def __init__(self, blocks: Iterable[bytes | memoryview]) -> None:
        self._blocks = iter(blocks)
        self.top: TopLevel | None = None
        self.array_start: int | None = None  # offset just after the array's `[`, once found

    def chunks(self) -> Iterator[bytearray]:
        head, pending = self._head()
        searched = 0  # bytes of `pending` already searched for an event end without one found after the last
        for block in self._blocks:
            pending += block
            while len(pending) >= CHUNK_BYTES:
                # Only the new bytes, and a separator straddling them: a search over all pending bytes per block
                # was quadratic in a long event (or a long run of whitespace after one).
                cut = _last_event_end(pending, max(0, searched - SEP_SPAN_BYTES))
                if cut is None:  # one event longer than the pending bytes: read on
                    if len(pending) > MAX_EVENT_BYTES:
                        raise BadSplit  # no profiler writes such an event; the exact path reads (or refuses) it
                    searched = len(pending)
                    break
                yield _chunk(pending, cut[0])
                del pending[: cut[1]]
                searched = len(pending)
        close, self.top = _close(head, pending)
        if pending[:close].strip():
            yield _chunk(pending, close)

    def _head(self) -> tuple[bytes, bytearray]:
        """(bytes up to and including the array's `[`, what follows it)."""
        buf = bytearray()
        for block in self._blocks:
            buf += block
            lead = match.end() if (match := _LEAD.match(buf)) else 0
            first = buf[lead : lead + 1]
            if first == b"[":
                self.array_start = lead + 1
                return b"[", buf[lead + 1 :]
            if first not in (b"", b"{"):
                break
            key = _KEY.search(buf, lead)
            if key is not None:
                self.array_start = key.end()
                return bytes(buf[lead : key.end()]), buf[key.end() :]
            if len(buf) > HEAD_LIMIT_BYTES:
                break
        raise BadSplit


def _last_event_end(pending: bytearray, floor: int = 0) -> tuple[int, int] | None:
    """(end of the last complete event, start of the next one) in `pending` at or after `floor`, or None. A
    separator longer than SEP_SPAN_BYTES (whitespace) is not taken as one: the event reads on."""
    pos = len(pending)
    for _ in range(_CUT_TRIES):
        pos = pending.rfind(b"}", floor, pos)
        if pos < 0:
            return None
        sep = _EVENT_SEP.match(pending, pos, min(len(pending), pos + SEP_SPAN_BYTES))
        if sep is not None:
            return pos + 1, sep.end()
    return None


def _chunk(pending: bytearray, end: int) -> bytearray:
    chunk = bytearray(b"[")
    with memoryview(pending) as view:
        chunk += view[:end]
    chunk += b"]"
    return chunk


def _close(head: bytes, pending: bytearray) -> tuple[int, TopLevel]:
    """Where the array closes in the last bytes, and the top-level keys around it. The close is a
    `]` right after an event's `}` (or at the start, for an empty array); keys may follow it
    (Kineto writes "INFO" log lines full of `]` after the events), so candidates go forward."""
    end = len(pending.rstrip(_PAD))
    if head == b"[":
        if pending[end - 1 : end] != b"]":
            raise BadSplit
        return end - 1, TopLevel()
    empty = _EMPTY_END.match(pending, 0, end)
    candidates = itertools.chain([empty] if empty else [], _ARRAY_END.finditer(pending, 0, end))
    for n_try, match in enumerate(candidates):
        close = match.end() - 1
        top = _top_without_events(head, bytes(pending[close:end]))
        if top is not None:
            return close, top
        if n_try >= _CLOSE_TRIES:
            break
    raise BadSplit


def _top_without_events(head: bytes, tail: bytes) -> TopLevel | None:
    """The top-level keys of head + [placeholder] + tail, if that decodes and the placeholder is
    the top-level `traceEvents` (not a nested key of the same name)."""
    try:
        raw = RAW_DOC_DECODER.decode(head + _PLACEHOLDER + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    events = raw.traceEvents
    if events is None or len(events) != 1 or bytes(events[0]) != _PLACEHOLDER:
        return None
    return TopLevel(**{name: getattr(raw, name) for name in TopLevel.__struct_fields__})
