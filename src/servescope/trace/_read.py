"""Read a trace file into its top-level keys and kept events: gzip or plain, typed decode, repairs.

What it does: reads the file once into bytes (gzip is detected by its magic bytes, not the name, and a
truncated gzip stream keeps what could be inflated), decodes with msgspec into the typed structs of
`_schema`, and on a JSON syntax error applies the repairs of `_repair` one by one and retries. Each
repair adds a human-readable warning. Events are decoded ~2 MB (or 8192 events) at a time into typed
structs and python_function / flow / instant / metadata events are dropped at once, so the dropped
majority never exists all at the same time. `fast_decode` streams the file through `_split` (never
holding it whole); when that cannot vouch for the file, `decode` reads it whole and takes the exact
path: a full parse that keeps each event as a raw slice, then the same chunked decode. A type
mismatch msgspec cannot accept (e.g. `args` that is a list) falls back to an untyped decode of that
chunk, converting event by event.
Kept events become column frames chunk by chunk (`_frame.chunk_frame`).
What it does not do: derive columns or sort (`_frame.finish_events`) or decide ranks (`load.py`).
"""

from __future__ import annotations

import gc
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from servescope._paths import available_memory_bytes, is_device
from servescope.errors import NotATrace, TraceNotFound
from servescope.trace import _repair, _split
from servescope.trace._frame import COMM_ROW, chunk_frame, comm_frame, names_frame
from servescope.trace._gzip import Ceiling, GzipBomb, GzipCutOff, GzipTrailingJunk, inflate_members
from servescope.trace._repair import Buffer
from servescope.trace._schema import (
    EVENT_DECODER,
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


def check_path(path: Path) -> None:
    if not path.exists():
        raise TraceNotFound(f"{path}: no such file or folder")
    if path.is_dir():
        raise NotATrace(f"{path}: is a folder; use load_traces() for a folder of rank files")
    if is_device(path):  # /dev/zero would be read for ever
        raise NotATrace(f"{path}: a device, not a trace file")



def read_bytes(path: Path, warnings: list[str]) -> Buffer:
    """The whole file's JSON bytes: gunzipped when it is gzip (under the ceiling of `_gzip.Ceiling`, the
    machine's available memory included); raises for missing or non-trace files, and for a plain file larger
    than the memory available (it would be held whole)."""
    check_path(path)
    size = path.stat().st_size
    available = available_memory_bytes()
    if available is not None and size > available:
        raise NotATrace(f"{path}: {size / 1e9:,.1f} GB to read whole, more than the {available / 1e9:,.1f} GB of "
                        "memory available; not read")
    raw = path.read_bytes()
    if raw.startswith(SQLITE_MAGIC):
        raise NotATrace(f"{path}: Nsight Systems SQLite export, not JSON: load it with load_trace() (trace.nsys)")
    if raw.startswith(GZIP_MAGIC):
        return _gunzip(path, raw, warnings)
    return raw


def _gunzip(path: Path, raw: bytes, warnings: list[str]) -> bytearray:
    """Inflate all gzip members into one growing bytearray, in bounded pieces, so the JSON exists
    once (a join of parts would hold it twice). A cut-off stream keeps what inflated; the tail
    repair does the rest."""
    out = bytearray()
    try:
        for piece in inflate_members(raw, Ceiling.for_input(len(raw), held_whole=True)):
            out += piece
    except GzipBomb as bomb:
        raise NotATrace(f"{path}: {bomb.args[0]}; not read") from None
    except zlib.error as exc:
        if not out:
            raise NotATrace(f"{path}: gzip file is corrupt ({exc})") from None
        warnings.append(f"gzip data corrupt after {len(out):,} bytes; kept what came before")
    except GzipCutOff:
        if not out:
            raise NotATrace(f"{path}: gzip file is corrupt or cut off before any data") from None
        warnings.append(f"gzip stream ends early (file cut off): read {len(out):,} bytes of JSON")
    except GzipTrailingJunk as junk:
        warnings.append(f"{junk.args[0]:,} bytes of non-gzip data after the last gzip member ignored")
    return out


@dataclass
class Decoded:
    """What `decode` returns: the top-level keys and the kept events (complete, not python_function)
    as raw column frames, one per chunk (`_frame.chunk_frame`), with per-column counts of values lost
    in casting."""

    top: TopLevel
    # Chunk frames, then one small collective-arg frame (COMM_ROW) if any rows have such args, then the distinct
    # names the chunks' codes point into (`_frame.names_frame`); empty when no event was kept.
    parts: list[pl.DataFrame]
    lost: Counter[str]
    n_events: int  # all events in the file, dropped ones included
    has_events_key: bool
    any_ph: bool = False  # False: no element has a "ph" key (a JSON list of something else)
    # Offset in the JSON text just after the `[` of the event array: set by `fast_decode`, which read the text as
    # written (no repair) and vouches that it is intact JSON.
    array_start: int | None = None


def fast_decode(path: Path, warnings: list[str]) -> Decoded | None:
    """Stream the file through `_split` and decode its chunks; None when the fast path cannot vouch
    for the file (odd layout, damage, truncated gzip): the caller then reads it whole (`decode`)."""
    with path.open("rb") as fh:
        magic = fh.read(len(SQLITE_MAGIC))
    if magic.startswith(SQLITE_MAGIC):
        raise NotATrace(f"{path}: Nsight Systems SQLite export, not JSON: load it with load_trace() (trace.nsys)")
    blocks = _split.gzip_blocks(path) if magic.startswith(GZIP_MAGIC) else _split.file_blocks(path)
    splitter = _split.Splitter(blocks)
    try:
        with gc_paused():
            result = _decode_chunks(splitter.chunks())
    except _split.BadSplit:
        return None
    except GzipBomb as bomb:
        raise NotATrace(f"{path}: {bomb.args[0]}; not read") from None
    assert splitter.top is not None  # set when chunks() is exhausted
    decoded = _finish(splitter.top, result, warnings)
    decoded.array_start = splitter.array_start
    return decoded


def decode(path: Path, buf: Buffer, warnings: list[str], try_fast: bool = True) -> Decoded:
    """Decode the whole file `buf`, repairing syntax damage; raises NotATrace when beyond repair.
    `try_fast=False` skips the chunked attempt on the first round (it already failed on the file)."""
    buf = _repair.strip_bom_and_padding(buf)
    if not buf:
        raise NotATrace(f"{path}: file is empty")
    if buf[:1] not in (b"{", b"["):
        raise NotATrace(f"{path}: not JSON (starts with {bytes(buf[:16])!r})")
    done: set[str] = set()
    for _ in range(MAX_REPAIR_ROUNDS):
        try:
            with gc_paused():
                return _decode_valid(path, buf, warnings, try_fast)
        except msgspec.DecodeError as exc:
            fixed = _repair.repair(buf, str(exc), done, warnings)
            if fixed is None:
                raise NotATrace(
                    f"{path}: not valid JSON and could not be repaired ({exc})"
                ) from None
            buf, try_fast = fixed, True
    raise NotATrace(f"{path}: not valid JSON after {MAX_REPAIR_ROUNDS} repairs")


def _decode_valid(path: Path, buf: Buffer, warnings: list[str], try_fast: bool) -> Decoded:
    """Chunked attempt via `_split` on the buffer, else the exact path: parse the whole buffer
    keeping each event as a raw slice, then decode those in chunks; syntax errors surface here as
    DecodeError for repair."""
    if try_fast:
        splitter = _split.Splitter(_split.buffer_blocks(buf))
        try:
            result = _decode_chunks(splitter.chunks())
            assert splitter.top is not None
            return _finish(splitter.top, result, warnings)
        except _split.BadSplit:
            pass
    raws: list[msgspec.Raw] | None
    if buf[:1] == b"[":
        return _decode_raws(TopLevel(), RAW_LIST_DECODER.decode(buf), warnings)
    try:
        doc = RAW_DOC_DECODER.decode(buf)
        top, raws = _top_only(doc), doc.traceEvents
    except msgspec.ValidationError:
        top, raws = _untyped_top(path, buf, warnings)
    return _decode_raws(top, raws, warnings)


def _top_only(doc: RawDoc) -> TopLevel:
    fields = {name: getattr(doc, name) for name in TopLevel.__struct_fields__}
    return TopLevel(**fields)


def _decode_raws(top: TopLevel, raws: list[msgspec.Raw] | None, warnings: list[str]) -> Decoded:
    if raws is None:
        return Decoded(top, [], Counter(), 0, has_events_key=False)
    return _finish(top, _decode_chunks(_raw_chunks(raws), exact=True), warnings)


LONE_EVENT_BYTES = 16 << 20  # an event this long is decoded on its own, from its slice of the text: no copy


def _raw_chunks(raws: list[msgspec.Raw]) -> Iterator[bytes | msgspec.Raw]:
    """`[ev,...]` chunks of CHUNK_EVENTS raw events; an event over LONE_EVENT_BYTES (no profiler writes one; a
    1 GB name) comes alone as its Raw, so its bytes are not copied into a chunk (twice, with the brackets)."""
    for i in range(0, len(raws), CHUNK_EVENTS):
        part = raws[i : i + CHUNK_EVENTS]
        lone = [k for k, raw in enumerate(part) if len(raw) > LONE_EVENT_BYTES]
        start = 0
        for k in [*lone, len(part)]:
            if k > start:
                yield b"[" + b",".join(part[start:k]) + b"]"
            if k < len(part):
                yield part[k]
            start = k + 1


def _finish(top: TopLevel, result: _Chunked, warnings: list[str]) -> Decoded:
    if result.n_bad:
        warnings.append(f"{result.n_bad:,} events with unreadable fields were skipped")
    if result.comm:
        result.parts.append(comm_frame(result.comm, result.lost))
    if result.parts:
        result.parts.append(names_frame(result.names))
    return Decoded(
        top, result.parts, result.lost, result.n_events, has_events_key=True, any_ph=result.any_ph
    )


@dataclass
class _Chunked:
    parts: list[pl.DataFrame] = field(default_factory=list)
    lost: Counter[str] = field(default_factory=Counter)
    n_events: int = 0
    any_ph: bool = False  # whether any event has a "ph" key
    n_bad: int = 0  # events skipped as unreadable
    n_rows: int = 0  # rows in the chunk frames of `parts` so far
    comm: dict[str, list[Any]] = field(default_factory=dict)  # collective-arg rows of all chunks (_frame._comm_rows)
    names: dict[str, int] = field(default_factory=dict)  # distinct names → the code the chunk frames carry


def _decode_chunks(chunks: Iterable[bytes | bytearray | msgspec.Raw], exact: bool = False) -> _Chunked:
    """Decode each chunk (an array of events, or one event as a Raw), keep complete non-python_function events
    and turn them into a column frame right away, so their Python objects are freed chunk by chunk."""
    out = _Chunked()
    for chunk in chunks:
        lone = isinstance(chunk, msgspec.Raw)
        try:
            try:
                events = [EVENT_DECODER.decode(chunk)] if lone else EVENTS_DECODER.decode(chunk)
            except msgspec.ValidationError:  # a type msgspec cannot accept, maybe before bad syntax
                untyped = msgspec.json.decode(chunk)
                events, bad = _convert_events([untyped] if lone else untyped)
                out.n_bad += bad
        except msgspec.DecodeError:
            if exact:
                raise
            raise _split.BadSplit from None
        out.n_events += len(events)
        if not out.any_ph:  # short-circuits at the first real event
            out.any_ph = any(e.ph is not None for e in events)
        kept = [e for e in events if e.ph == "X" and e.cat not in DROPPED_CATS]
        del events
        if kept:
            frame, comm = chunk_frame(kept, out.lost, out.names)
            if comm is not None:  # rows counted over the chunk frames before this one
                comm[COMM_ROW] = [row + out.n_rows for row in comm[COMM_ROW]]
                for name, values in comm.items():
                    out.comm.setdefault(name, []).extend(values)
            out.parts.append(frame)
            out.n_rows += frame.height
    return out


def _untyped_top(
    path: Path, buf: Buffer, warnings: list[str]
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
