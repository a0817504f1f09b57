"""Read a trace file into a `TraceDoc`: gzip or plain, fast typed decode, then repairs if needed.

What it does: reads the file once into bytes (gzip is detected by its magic bytes, not the name, and a
truncated gzip stream keeps what could be inflated), decodes with msgspec into the typed structs of
`_schema`, and on a JSON syntax error applies the repairs of `_repair` one by one and retries. Each
repair adds a human-readable warning. The first pass decodes the top level and keeps the event array
as one raw slice (syntax checked, nothing built); the array is then cut into ~2 MB chunks at `},{`
between events and each chunk is decoded into typed structs, dropping python_function / flow /
instant / metadata events at once, so the dropped majority never exists all at the same time. (A cut
that lands inside a string fails to decode; then the exact, slower split via raw slices is used.) A
type mismatch msgspec cannot accept (e.g. `args` that is a list) falls back to an untyped decode of
that chunk, converting event by event.
What it does not do: build the events table (`_frame.py`) or decide ranks (`load.py`).
"""

from __future__ import annotations

import gc
import re
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from servescope.errors import NotATrace, TraceNotFound
from servescope.trace import _repair
from servescope.trace._schema import (
    EVENTS_DECODER,
    RAW_DOC_DECODER,
    RAW_LIST_DECODER,
    Event,
    RawDoc,
    TopLevel,
)

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
MAX_REPAIR_ROUNDS = 12
# Events decoded at once; bounds the memory held by dropped events (~1-2 MB of JSON).
CHUNK_EVENTS = 8192
CHUNK_BYTES = 2_000_000
_EVENT_SEP = re.compile(rb"\}\s*,\s*(?=\{)")
# Events never needed downstream; with_stack=True makes python_function the majority of events.
DROPPED_CATS = frozenset({"python_function"})


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: decoding creates ~10^5 objects and no cycles, and GC passes over the
    growing lists would otherwise cost about as much as the decode itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_bytes(path: Path, warnings: list[str]) -> bytes:
    """The file's JSON bytes: gunzipped when it is gzip; raises for missing or non-trace files."""
    if not path.exists():
        raise TraceNotFound(f"{path}: no such file or folder")
    if path.is_dir():
        raise NotATrace(f"{path}: is a folder; use load_traces() for a folder of rank files")
    raw = path.read_bytes()
    if raw.startswith(SQLITE_MAGIC):
        raise NotATrace(f"{path}: Nsight Systems SQLite export; Nsight SQLite is not supported yet")
    if raw.startswith(GZIP_MAGIC):
        return _gunzip(path, raw, warnings)
    return raw


def _gunzip(path: Path, raw: bytes, warnings: list[str]) -> bytes:
    """Inflate all gzip members; a cut-off stream keeps what inflated (the tail repair does the rest)."""
    parts: list[bytes] = []
    data = raw
    while data:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            parts.append(inflater.decompress(data))
        except zlib.error as exc:
            if not parts:
                raise NotATrace(f"{path}: gzip file is corrupt ({exc})") from None
            warnings.append(
                f"gzip data corrupt after {sum(map(len, parts)):,} bytes; kept what came before"
            )
            break
        if not inflater.eof:
            parts.append(inflater.flush())
            if not any(parts):
                raise NotATrace(f"{path}: gzip file is corrupt or cut off before any data")
            warnings.append(
                f"gzip stream ends early (file cut off): read {sum(map(len, parts)):,} bytes of JSON"
            )
            break
        data = inflater.unused_data.lstrip(b"\x00")
    return b"".join(parts)


@dataclass
class Decoded:
    """What `decode` returns: the top-level keys and the kept events (complete, not python_function)."""

    top: TopLevel
    events: list[Event]
    n_events: int  # all events in the file, dropped ones included
    has_events_key: bool
    n_with_ph: int = 0  # events that have a "ph" key (0: a JSON list of something else)


def decode(path: Path, buf: bytes, warnings: list[str]) -> Decoded:
    """Decode `buf`, repairing syntax damage; raises NotATrace when beyond repair."""
    buf = _repair.strip_bom_and_padding(buf)
    if not buf:
        raise NotATrace(f"{path}: file is empty")
    if buf[:1] not in (b"{", b"["):
        raise NotATrace(f"{path}: not JSON (starts with {buf[:16]!r})")
    done: set[str] = set()
    for _ in range(MAX_REPAIR_ROUNDS):
        try:
            with gc_paused():
                return _decode_valid(path, buf, warnings)
        except msgspec.DecodeError as exc:
            fixed = _repair.repair(buf, str(exc), done, warnings)
            if fixed is None:
                raise NotATrace(
                    f"{path}: not valid JSON and could not be repaired ({exc})"
                ) from None
            buf = fixed
    raise NotATrace(f"{path}: not valid JSON after {MAX_REPAIR_ROUNDS} repairs")


def _decode_valid(path: Path, buf: bytes, warnings: list[str]) -> Decoded:
    """Pass 1 checks the syntax of the whole file and finds the event array without building events;
    pass 2 decodes the events chunk by chunk into typed structs, keeping only what the table needs."""
    raws: list[msgspec.Raw] | None
    if buf[:1] == b"[":
        return _decode_raws(TopLevel(), RAW_LIST_DECODER.decode(buf), warnings)
    try:
        doc = RAW_DOC_DECODER.decode(buf)
    except msgspec.ValidationError:
        top, raws = _untyped_top(path, buf, warnings)
        return _decode_raws(top, raws, warnings)
    top, array = _top_only(doc), doc.traceEvents
    if not len(array):
        return Decoded(top, [], 0, has_events_key=False)
    try:
        return _finish(top, _decode_chunks(_split_array(array)), warnings)
    except _BadSplit:  # a separator inside a string: split exactly via raw slices (slower)
        try:
            raws = RAW_LIST_DECODER.decode(array)
        except msgspec.ValidationError:
            raise NotATrace(f"{path}: 'traceEvents' is not a list") from None
        return _decode_raws(top, raws, warnings)


class _BadSplit(Exception):
    """A guessed chunk boundary was not between two events."""


def _top_only(doc: RawDoc) -> TopLevel:
    fields = {name: getattr(doc, name) for name in TopLevel.__struct_fields__}
    return TopLevel(**fields)


def _split_array(array: msgspec.Raw) -> Iterator[bytes]:
    """Chunks `[ev,...]` of about CHUNK_BYTES of a JSON array, cut at `},{` between events. A cut
    inside a string or a nested value leaves an unbalanced chunk, which fails to decode (→ _BadSplit).
    """
    view = memoryview(array)
    first, last = bytes(view[:1]), bytes(view[-1:])
    if first != b"[" or last != b"]":
        raise _BadSplit
    start, end = 1, len(view) - 1
    while start < end:
        match = _EVENT_SEP.search(view, min(start + CHUNK_BYTES, end), end)
        stop = match.start() + 1 if match else end
        yield b"[" + view[start:stop] + b"]"
        start = match.end() if match else end


def _decode_raws(top: TopLevel, raws: list[msgspec.Raw] | None, warnings: list[str]) -> Decoded:
    if raws is None:
        return Decoded(top, [], 0, has_events_key=False)
    chunks = (
        b"[" + b",".join(raws[i : i + CHUNK_EVENTS]) + b"]"
        for i in range(0, len(raws), CHUNK_EVENTS)
    )
    return _finish(top, _decode_chunks(chunks, exact=True), warnings)


def _finish(
    top: TopLevel, result: tuple[list[Event], int, int, int], warnings: list[str]
) -> Decoded:
    kept, n_events, n_with_ph, n_bad = result
    if n_bad:
        warnings.append(f"{n_bad:,} events with unreadable fields were skipped")
    return Decoded(top, kept, n_events, has_events_key=True, n_with_ph=n_with_ph)


def _decode_chunks(
    chunks: Iterable[bytes], exact: bool = False
) -> tuple[list[Event], int, int, int]:
    """(kept events, all events, 1 if any event has a "ph" key else 0, events skipped as unreadable)."""
    kept: list[Event] = []
    n_events = n_with_ph = n_bad = 0
    for chunk in chunks:
        try:
            events = EVENTS_DECODER.decode(chunk)
        except msgspec.ValidationError:
            events, bad = _convert_events(msgspec.json.decode(chunk))
            n_bad += bad
        except msgspec.DecodeError:
            if exact:
                raise
            raise _BadSplit from None
        n_events += len(events)
        if not n_with_ph:  # short-circuits at the first real event
            n_with_ph = int(any(e.ph is not None for e in events))
        kept += [e for e in events if e.ph == "X" and e.cat not in DROPPED_CATS]
    return kept, n_events, n_with_ph, n_bad


def _untyped_top(
    path: Path, buf: bytes, warnings: list[str]
) -> tuple[TopLevel, list[msgspec.Raw] | None]:
    """Slow path for well-formed JSON whose top-level values have unexpected types."""
    obj = msgspec.json.decode(buf, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
    if isinstance(obj, list):
        return TopLevel(), obj
    raw_events = obj.pop("traceEvents", None)
    events = None
    if raw_events is not None:
        try:
            events = RAW_LIST_DECODER.decode(raw_events)
        except msgspec.ValidationError:
            raise NotATrace(f"{path}: 'traceEvents' is not a list") from None
    top: dict[str, Any] = {}
    for key, raw in obj.items():
        if key not in TopLevel.__struct_fields__:
            continue
        value = msgspec.json.decode(raw)
        try:
            msgspec.convert({key: value}, TopLevel)
            top[key] = value
        except msgspec.ValidationError:
            warnings.append(f"top-level '{key}' has an unexpected shape; ignored")
    return msgspec.convert(top, TopLevel), events


def _convert_events(raw_events: Any) -> tuple[list[Event], int]:
    """Event by event conversion of untyped JSON: an event with an odd `args` keeps the rest."""
    events: list[Event] = []
    n_bad = 0
    for ev in raw_events if isinstance(raw_events, list) else []:
        try:
            events.append(msgspec.convert(ev, Event))
            continue
        except msgspec.ValidationError:
            pass
        if isinstance(ev, dict):
            try:  # most often only `args` is odd: keep the event without it
                events.append(msgspec.convert({**ev, "args": None}, Event))
                continue
            except msgspec.ValidationError:
                pass
        n_bad += 1
    return events, n_bad
