"""`servescope export`: the original Kineto trace plus servescope's tracks, for Perfetto UI (ui.perfetto.dev).

Does: copy the trace's JSON byte for byte and splice new events at the start of its `traceEvents` array, so
every original event survives unchanged; the new events are Chrome-trace `X` slices on two synthetic processes
with integer pids above Linux's pid range (so they never collide with Kineto's CPU pids or GPU ordinals):
  - "servescope steps": one thread per step kind ("prefill steps", "decode steps", …; a second lane when steps
    of a kind overlap), one slice per step over its GPU span, named "<kind> <label>", args = step numbers;
  - "servescope kernel classes": one thread per (GPU, kernel class), one slice per interval of the union of
    that class's kernels on that GPU (overlapping or touching kernels merge), named by the class.
Timestamps are written in the trace's own unit (µs; ns traces are scaled back). The output is gzip JSON when its
name ends in .gz, plain JSON otherwise, written atomically (temporary file + rename) and never over the input.
The input's text is streamed to the output (read a second time, gunzipped in pieces), not held: memory is the
events table's, as for `servescope trace`.
Adds O(steps + class intervals) events: at most one per GPU event, usually far fewer.
Does not: repair damaged traces (export needs an intact file: it keeps every byte), or read rank folders.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from servescope.analysis.classify import classify_gpu
from servescope.analysis.gpu_rows import take_split
from servescope.analysis.intervals import union_segments
from servescope.analysis.steps import find_steps
from servescope.errors import NotATrace, OutputError, TraceError
from servescope.report.atomic import atomic_binary
from servescope.trace import is_sqlite, read_bytes
from servescope.trace.load import json_blocks, load_trace, load_trace_and_layout
from servescope.trace.types import Trace

STEPS_PID = 10_000_001  # > 2**22 (Linux pid_max): no Kineto CPU pid or GPU ordinal uses it
CLASSES_PID = 10_000_002
GZIP_LEVEL = 1  # fastest: the file is for viewing, and the viewer inflates it anyway
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


@dataclass(frozen=True)
class ExportResult:
    source: str
    output: str
    original_events: int
    added_events: int
    steps: int
    class_tracks: int
    warnings: tuple[str, ...]

    def __repr__(self) -> str:
        return (f"ExportResult({self.output!r}: {self.original_events:,} original + {self.added_events:,} "
                f"servescope events, {self.steps} steps, {self.class_tracks} class tracks)")


class _Doc(msgspec.Struct):
    traceEvents: list[msgspec.Raw]  # noqa: N815  (the Kineto key)


def _meta(pid: int, tid: int | None, what: str, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "name": what, "pid": pid, "args": {"name": name}}
    return event if tid is None else {**event, "tid": tid}


def _lanes(spans: list[tuple[float, float]]) -> list[int]:
    """Greedy lane per span (sorted by start) so that spans on one lane never overlap (X slices must nest)."""
    ends: list[float] = []
    out = []
    for start, end in spans:
        lane = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        out.append(lane)
    return out


def _step_events(steps: pl.DataFrame, scale: float) -> list[dict[str, Any]]:
    rows = steps.filter(pl.col("gpu_start_us").is_not_null()).sort("gpu_start_us").to_dicts()
    events = [_meta(STEPS_PID, None, "process_name", "servescope steps")]
    for i, kind in enumerate(sorted({r["kind"] for r in rows})):
        mine = [r for r in rows if r["kind"] == kind]
        lanes = _lanes([(r["gpu_start_us"], r["gpu_end_us"]) for r in mine])
        for lane in sorted(set(lanes)):
            name = f"{kind} steps" + (f" (overlap {lane})" if lane else "")
            events.append(_meta(STEPS_PID, 100 * i + lane + 1, "thread_name", name))
        for r, lane in zip(mine, lanes, strict=True):
            events.append({
                "ph": "X", "cat": "servescope.step", "name": f"{kind} {r['label']}", "pid": STEPS_PID,
                "tid": 100 * i + lane + 1, "ts": round(r["gpu_start_us"] * scale, 3),
                "dur": round((r["gpu_end_us"] - r["gpu_start_us"]) * scale, 3),
                "args": {k: r[k] for k in ("step", "kind", "label", "batch_size", "tokens", "source")},
            })
    return events


def class_intervals(gpu: pl.DataFrame) -> pl.DataFrame:
    """Union intervals per (device, kernel_class) (analysis.intervals.union_segments): columns device,
    kernel_class, start_us, end_us, kernels."""
    g = gpu.select(pl.col("device").fill_null(-1), pl.col("kernel_class").fill_null("other"), "ts_us",
                   end_us=pl.col("ts_us") + pl.col("dur_us"))
    parts = []
    for (device, cls), part in sorted(g.partition_by("device", "kernel_class", as_dict=True).items()):
        starts, ends, kernels = union_segments(part["ts_us"].to_numpy(), part["end_us"].to_numpy())
        parts.append(pl.DataFrame({"device": pl.Series([device] * starts.size, dtype=g.schema["device"]),
                                   "kernel_class": pl.Series([cls] * starts.size, dtype=pl.Utf8),
                                   "start_us": starts, "end_us": ends,
                                   "kernels": pl.Series(kernels, dtype=pl.UInt32)}))
    if not parts:
        return pl.DataFrame(schema={"device": g.schema["device"], "kernel_class": pl.Utf8, "start_us": pl.Float64,
                                    "end_us": pl.Float64, "kernels": pl.UInt32})
    return pl.concat(parts)


def _class_events(gpu: pl.DataFrame, scale: float) -> tuple[list[dict[str, Any]], int, pl.DataFrame, dict[Any, int]]:
    """The kernel-class process and thread names, the number of tracks, and the intervals (one slice each,
    `_class_slices`) with the thread of each track: a trace of millions of kernels has millions of intervals,
    encoded in batches rather than held as events."""
    events = [_meta(CLASSES_PID, None, "process_name", "servescope kernel classes")]
    intervals = class_intervals(gpu)
    tracks = intervals.select("device", "kernel_class").unique().sort("device", "kernel_class").rows()
    tid_of = {key: i + 1 for i, key in enumerate(tracks)}
    for (device, cls), tid in tid_of.items():
        events.append(_meta(CLASSES_PID, tid, "thread_name", f"GPU {device} {cls}"))
    return events, len(tracks), intervals, tid_of


ENCODE_BATCH = 65536  # class slices encoded at once


def _class_slices(intervals: pl.DataFrame, tid_of: dict[Any, int], scale: float) -> Iterator[bytes]:
    """The class slices as JSON array elements (no brackets), ENCODE_BATCH at a time."""
    for start in range(0, intervals.height, ENCODE_BATCH):
        batch = [{"ph": "X", "cat": "servescope.class", "name": cls, "pid": CLASSES_PID,
                  "tid": tid_of[(device, cls)], "ts": round(begin * scale, 3),
                  "dur": round((end - begin) * scale, 3), "args": {"kernels": n}}
                 for device, cls, begin, end, n in intervals.slice(start, ENCODE_BATCH).iter_rows()]
        yield msgspec.json.encode(batch)[1:-1]


def _array_start(buf: bytes | bytearray | memoryview, path: Path) -> int:
    """Offset just after the `[` of the top-level traceEvents array (or of a bare top-level list)."""
    depth, want_value = 0, False
    for m in _TOKEN.finditer(buf):
        tok = m.group()
        if want_value:
            if tok == b"[":
                return m.end()
            want_value = tok == b":"
            if not want_value:
                break
        elif tok in (b"{", b"["):
            if depth == 0 and tok == b"[":
                return m.end()
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and tok == b'"traceEvents"':
            want_value = True
    raise NotATrace(f"{path}: no traceEvents array found")


def _check_intact(path: Path, buf: bytes | bytearray, warnings: list[str]) -> int:
    """Number of original events; raises when the file is damaged (export keeps every byte, so cannot repair)."""
    if warnings:
        raise NotATrace(f"{path}: damaged ({warnings[0]}); export copies every byte and needs an intact trace")
    try:
        if buf.lstrip()[:1] == b"[":
            return len(msgspec.json.decode(buf, type=list[msgspec.Raw]))
        return len(msgspec.json.decode(buf, type=_Doc).traceEvents)
    except msgspec.ValidationError as exc:
        raise NotATrace(f"{path}: not a Chrome/Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        raise NotATrace(f"{path}: damaged JSON ({exc}); export copies every byte and needs an intact trace") from None


def _write(out: Path, pieces: Iterable[bytes | memoryview]) -> None:
    """Write pieces to `out` atomically (report.atomic), gzip-compressed when its name ends in .gz."""
    with atomic_binary(out) as raw:
        if out.suffix == ".gz":
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as sink:
                for piece in pieces:
                    sink.write(piece)
        else:
            for piece in pieces:
                raw.write(piece)


def _spliced(blocks: Iterable[bytes | memoryview], at: int, body: Iterable[bytes]) -> Iterator[bytes | memoryview]:
    """`blocks` (a text in pieces) with the pieces of `body` inserted at offset `at`."""
    pos = 0
    for block in blocks:
        if pos <= at < pos + len(block):
            yield block[: at - pos]
            yield from body
            yield block[at - pos :]
        else:
            yield block
        pos += len(block)


def _body(head: bytes, slices: Iterable[bytes], before_more: bool) -> Iterator[bytes]:
    """The new events as array elements: `head`, each batch of slices, and a comma when original events follow."""
    yield head
    for piece in slices:
        yield b","
        yield piece
    if before_more:
        yield b","


@dataclass
class _Source:
    """The trace, its number of events, where its event array starts, and its JSON text again in blocks."""

    trace: Trace
    n_events: int
    array_start: int
    blocks: Callable[[], Iterable[bytes | memoryview]]


def _source(path: Path) -> _Source:
    """Read `path` once as a stream (load_trace_and_layout: intact JSON, the text read again to write it); a file
    the stream cannot vouch for (odd layout, damage) is read whole and checked as before."""
    try:
        trace, layout = load_trace_and_layout(path)
    except TraceError:
        trace, layout = None, None
    if trace is not None and layout is not None:
        return _Source(trace, layout.n_events, layout.array_start, lambda: json_blocks(path))
    read_warnings: list[str] = []
    buf = read_bytes(path, read_warnings)
    n_original = _check_intact(path, buf, read_warnings)
    return _Source(trace or load_trace(path), n_original, _array_start(buf, path), lambda: [memoryview(buf)])


def export_perfetto(path: str | Path, out: str | Path) -> ExportResult:
    """Write `path`'s trace plus servescope's step and kernel-class tracks to `out` (see the module docstring).
    Holds the events table (GPU rows apart, `analysis.gpu_rows`), not the file's text: that is streamed to `out`."""
    path, out = Path(path), Path(out)
    if path.is_dir():
        raise NotATrace(f"{path}: is a folder; export takes one trace file (one rank)")
    if out.exists() and path.exists() and out.resolve() == path.resolve():
        raise OutputError(f"{out}: is the input trace; export never modifies its input, choose another -o")
    if path.exists() and not path.is_file():  # a pipe can be read once; export reads its input twice
        raise NotATrace(f"{path}: not a regular file (a pipe or device); export needs the trace saved as a file")
    if path.is_file() and is_sqlite(path):
        raise NotATrace(f"{path}: an Nsight Systems SQLite export; export annotates Kineto JSON traces (open the "
                        ".nsys-rep in Nsight Systems instead)")
    source = _source(path)
    trace = source.trace
    source.trace = replace(trace, events=trace.events.clear())
    holder = [trace.events]
    del trace
    gpu, others = take_split(holder)
    table = find_steps(others, gpu=classify_gpu(gpu, others))
    del gpu, others
    trace = source.trace
    scale = 1e3 if trace.source_time_unit == "ns" else 1.0  # write back in the file's own unit
    step_events = _step_events(table.steps, scale)
    gpu = table.gpu_events.select("device", "kernel_class", "ts_us", "dur_us")  # the rest is freed here
    del table
    class_events, n_tracks, intervals, tid_of = _class_events(gpu, scale)
    del gpu
    head = step_events + class_events
    body = _body(msgspec.json.encode(head)[1:-1], _class_slices(intervals, tid_of, scale), source.n_events > 0)
    _write(out, _spliced(source.blocks(), source.array_start, body))
    n_steps = sum(1 for e in step_events if e["ph"] == "X")
    return ExportResult(str(path), str(out), source.n_events, len(head) + intervals.height, n_steps, n_tracks,
                        trace.warnings)
