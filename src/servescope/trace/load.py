"""Load Kineto (PyTorch profiler) JSON traces into `Trace` objects: the public API of servescope.trace.

What it does: `load_trace` reads one file (plain or gzip; current, 2021 and ROCm schemas; bare-list
files; damaged files after repair, with warnings) into a `Trace` whose `events` table follows
docs/architecture.md §1. `load_traces` does the same for a file or for a folder of per-rank files,
sorted by rank. Ranks come from `distributedInfo.rank`, else from the file name.
What it does not do: decide whether a trace is usable for analysis (a CPU-only trace loads fine; see
`Trace.has_gpu_events`), classify kernels or find steps. It never prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from servescope.errors import EmptyTrace, NotATrace, TraceError
from servescope.trace import _split
from servescope.trace._frame import finish_events
from servescope.trace._nsys_read import is_nsys
from servescope.trace._read import (
    GZIP_MAGIC,
    Decoded,
    check_path,
    decode,
    fast_decode,
    gc_paused,
    read_bytes,
)
from servescope.trace._schema import METADATA_KEYS, Num, TopLevel
from servescope.trace.folder import (
    DUPLICATE_RANK_NOTE,
    rank_files,
    rank_from_name,
    rank_order,
    ranks_from_names,
)
from servescope.trace.nsys import load_nsys, load_nsys_ranks
from servescope.trace.types import DeviceInfo, Trace


def load_trace(path: str | Path) -> Trace:
    """Load one Kineto JSON trace (.json or .json.gz) or Nsight Systems SQLite export (`trace.nsys`).

    Raises TraceNotFound (no such path), NotATrace (not JSON / not a trace / not an nsys export / damaged
    beyond repair) or EmptyTrace (no events). Recoverable damage is listed in `Trace.warnings`.
    """
    return load_trace_and_layout(path)[0]


@dataclass(frozen=True)
class JsonLayout:
    """Where the event array of a trace file's JSON text (gunzipped) starts and how many events it holds, known
    when the file was read as a stream as written — so it is intact JSON, no repair — for a caller that copies
    the text (`report.perfetto`) without holding it: `json_blocks` reads it again."""

    array_start: int  # offset just after the array's `[`
    n_events: int  # elements of the array, dropped kinds included


def load_trace_and_layout(path: str | Path) -> tuple[Trace, JsonLayout | None]:
    """`load_trace`, and the file's JsonLayout when it was read as a stream (None: an Nsight export, a pipe, or a
    file read whole: odd layout, damage, repairs)."""
    path = Path(path)
    warnings: list[str] = []
    check_path(path)
    piped = not path.is_file()  # a named pipe (`<(zcat trace.json.gz)`): it can be read once, so it is read whole
    with read_errors(path):
        if not piped and is_nsys(path):  # Nsight Systems export or report
            return load_nsys(path), None
        try:
            decoded = decode(path, read_bytes(path, warnings), warnings) if piped else _decode(path, warnings)
        except RecursionError:  # msgspec and the repairs recurse once per nesting level
            raise NotATrace(f"{path}: JSON nested too deeply to read (over ~1,000 levels); not a Kineto trace") from None
    _check_has_events(path, decoded, warnings)
    top = decoded.top
    _check_schema(top, warnings)
    devices = _devices(top)
    num_sms = {d.device: d.num_sms for d in devices.values() if d.num_sms}
    with gc_paused():
        events, unit = finish_events(decoded.parts, num_sms, decoded.lost, warnings)
        events = _drop_absurd_times(_name_unnamed(events, warnings), warnings)
    at, n_events = decoded.array_start, decoded.n_events
    del decoded
    layout = JsonLayout(at, n_events) if at is not None else None
    rank, world = _rank(top, path)
    return Trace(path, rank, world, events, devices, _metadata(top), tuple(warnings), unit), layout


def json_blocks(path: Path) -> Iterator[bytes | memoryview]:
    """The JSON text of a trace file in blocks of a few MB: gunzipped when it is gzip (the file's magic bytes)."""
    with path.open("rb") as fh:
        magic = fh.read(2)
    return _split.gzip_blocks(path) if magic == GZIP_MAGIC else _split.file_blocks(path)


def _decode(path: Path, warnings: list[str]) -> Decoded:
    decoded = fast_decode(path, warnings)
    if decoded is None:  # odd layout or damage: read the whole file, repair if needed
        buf = read_bytes(path, warnings)
        decoded = decode(path, buf, warnings, try_fast=False)
        del buf  # the JSON bytes are the biggest object alive; free them before the table
    return decoded


UNNAMED = "(no name)"
# µs. As a timestamp: past the year 5000 (ns files are converted before this); as a duration: 3,000 years.
MAX_TIME_US = 1e17


def _drop_absurd_times(events: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Drop events whose timestamp or duration is not finite or beyond MAX_TIME_US: one 1.8e308 among epoch
    timestamps would overflow every interval computation downstream (and is damage, not a measurement)."""
    ts, dur = pl.col("ts_us"), pl.col("dur_us").fill_null(0.0)
    ok = ts.is_finite() & (ts.abs() < MAX_TIME_US) & dur.is_finite() & (dur < MAX_TIME_US)
    n_bad = events.height - int(events.select(ok.sum()).item())
    if n_bad == 0:
        return events
    warnings.append(f"{n_bad:,} events with a timestamp or duration that is not finite or beyond {MAX_TIME_US:.0e} µs "
                    "dropped")
    return events.filter(ok)


def _name_unnamed(events: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Events whose name is null, missing or not a string get UNNAMED: every later stage reads names as text."""
    n = events["name"].null_count()
    if n == 0:
        return events
    warnings.append(f"{n:,} events without a readable name; shown as {UNNAMED!r}")
    return events.with_columns(pl.col("name").fill_null(UNNAMED))


KNOWN_SCHEMA_VERSIONS = (1,)  # Kineto's output_json.cpp has written schemaVersion 1 since 2021
KNOWN_TIME_UNITS = ("ms", "ns", "us")


def _check_schema(top: TopLevel, warnings: list[str]) -> None:
    """Read a schema we do not know as if it were Kineto's, and say so: the events may mean other things."""
    version, unit = top.schemaVersion, top.displayTimeUnit
    if version is not None and version not in KNOWN_SCHEMA_VERSIONS:
        warnings.append(f"unknown schemaVersion {version!r} (known: 1); read as Kineto schema 1")
    if unit is not None and unit not in KNOWN_TIME_UNITS:
        warnings.append(f"unknown displayTimeUnit {unit!r}; timestamps read as Kineto's microseconds")


def _check_has_events(path: Path, decoded: Decoded, warnings: list[str]) -> None:
    """Raise NotATrace / EmptyTrace when nothing usable was decoded; the message ends with the
    last repair, if any (a cut-off file often fails only because the cut left no events)."""
    problem: tuple[type[TraceError], str] | None = None
    if not decoded.has_events_key:
        problem = NotATrace, "JSON object has no 'traceEvents' list; not a Kineto/Chrome trace"
    elif decoded.n_events == 0:
        problem = EmptyTrace, "the trace holds no events"
    elif not decoded.any_ph:
        problem = NotATrace, "JSON holds no trace events (no element has a 'ph' key)"
    elif not decoded.parts:
        problem = (
            EmptyTrace,
            f"none of the {decoded.n_events:,} events is a complete (ph 'X') event",
        )
    if problem is not None:
        error, message = problem
        repaired = f" (after repair: {warnings[-1]})" if warnings else ""
        raise error(f"{path}: {message}{repaired}")


def load_rank_file(path: str | Path) -> list[Trace]:
    """The ranks one file holds: one Trace for a Kineto file, one per (process, GPU) for an Nsight Systems export
    of several GPU processes (`trace.nsys.split_gpu_processes`). The one rule for what a rank file is."""
    path = Path(path)
    with read_errors(path):
        if path.is_file() and is_nsys(path):
            return load_nsys_ranks(path)
    return [load_trace(path)]


@contextmanager
def read_errors(path: Path) -> Iterator[None]:
    """An OS error while opening or reading `path` (permission denied, an I/O error, a file that vanished) is a
    NotATrace naming the file and the reason: a rank folder skips that file like any damaged rank, and the CLI
    says "cannot be read", not that an output failed."""
    try:
        yield
    except OSError as exc:
        raise NotATrace(f"{path}: cannot be read: {exc.strerror or exc}") from None


def load_traces(path: str | Path) -> list[Trace]:
    """A file or a folder → one Trace per rank, sorted by rank (unknown ranks last): the rank-folder rule of
    `trace.folder` (front-end files skipped, names win over repeated `distributedInfo` ranks) and of
    `load_rank_file` (an Nsight export of several GPU processes gives one Trace per GPU).

    In a folder, files that fail as not-a-trace or empty are skipped as long as another file loads (a stray
    config.json must not sink the run; if none loads, the first error is raised). Skips are noted in the
    warnings of the first returned trace.
    """
    path = Path(path)
    files, notes = rank_files(path)
    traces: list[Trace] = []
    errors: list[TraceError] = []
    for file in files:
        try:
            traces.extend(load_rank_file(file))
        except (NotATrace, EmptyTrace) as exc:
            if not path.is_dir():
                raise
            errors.append(exc)
            notes.append(f"skipped {file.name}: {str(exc).removeprefix(f'{file}: ')}")
    if not traces:
        raise errors[0]
    names = ranks_from_names([t.path for t in traces], [t.rank for t in traces])
    if names is not None:
        traces = [replace(t, rank=r, warnings=(*t.warnings, DUPLICATE_RANK_NOTE))
                  for t, r in zip(traces, names, strict=True)]
    traces.sort(key=lambda t: rank_order(t.rank, t.path))
    if notes:
        traces[0] = replace(traces[0], warnings=(*traces[0].warnings, *notes))
    return traces


INT64_MAX = (1 << 63) - 1


def _as_int(value: Num) -> int | None:
    """An integer that fits int64 (ids, ranks, SM counts), else None: 2**70 or 1e308 is damage, not a count."""
    number: int | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value) if len(value.strip()) <= 20 else None
    return number if number is not None and -INT64_MAX <= number <= INT64_MAX else None


def _rank(top: TopLevel, path: Path) -> tuple[int | None, int | None]:
    info = top.distributedInfo
    rank = _as_int(info.rank) if info else None
    world = _as_int(info.world_size) if info else None
    if rank is None:
        rank = rank_from_name(path.name)
    return rank, world


def _devices(top: TopLevel) -> dict[int, DeviceInfo]:
    """deviceProperties by device id; the first entry wins (SGLang merged files repeat ids)."""
    out: dict[int, DeviceInfo] = {}
    for props in top.deviceProperties or []:
        dev = _as_int(props.id)
        if dev is None or dev in out:
            continue
        name = "" if props.name is None else str(props.name)
        out[dev] = DeviceInfo(
            dev, name, _as_int(props.numSms), _as_int(props.maxThreadsPerMultiprocessor)
        )
    return out


def _metadata(top: TopLevel) -> dict[str, str]:
    values = {key: getattr(top, key) for key in METADATA_KEYS}
    return {key: str(v) for key, v in values.items() if v is not None}
