"""Read the tables of an Nsight Systems SQLite export (`nsys export --type sqlite`) into Polars frames.

What it does: opens the file read-only (`mode=ro&immutable=1`: the input is never written, no journal or
WAL file is created), checks that it is an nsys export, and reads the CUPTI kernel, memcpy, memset and
runtime tables and the NVTX ranges with their StringIds resolved, as raw frames in ns (`start_ns`,
`end_ns`) with the process id and thread id decoded from nsys's serialized `globalPid`/`globalTid`
(`pid = globalTid / 0x1000000 % 0x1000000`, `tid = globalTid % 0x1000000`; NVIDIA "Common SQLite
examples → Serialized process and thread identifiers"). Also the GPU list and a few export facts.
Opening the file and recognising it: trace._nsys_sqlite (re-exported here).
What it does not do: build the events table, split processes or link kernels to ops (see `nsys.py`).
Schema facts: shared/reference/capture-and-formats.md §3 (nsys 2026.2.1, schema 3.25.0).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from servescope.errors import NotATrace
from servescope.trace._nsys_sqlite import (
    REPORT_SUFFIXES,
    SQLITE_MAGIC,
    LossyText,
    check_not_report,
    is_nsys,
    is_sqlite,
    open_readonly,
    table_names,
)

# the file-level names are trace._nsys_sqlite's, re-exported
__all__ = ["REPORT_SUFFIXES", "SQLITE_MAGIC", "NsysTables", "check_not_report", "is_nsys", "is_sqlite", "read_tables"]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
# ENUM_NSYS_EVENT_TYPE: NvtxPushPopRange, NvtxStartEndRange, NvtxtPushPopRange, NvtxtStartEndRange.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
CHUNK_ROWS = 65_536
_OPTIONAL = {
    KERNEL: "no kernels",
    MEMCPY: "no memcpys",
    MEMSET: "no memsets",
    RUNTIME: "no CUDA API calls, so GPU work is not linked to its launch",
    NVTX: "no NVTX ranges, so no step labels or op names",
}
_PID = "/ 16777216 % 16777216"  # 0x1000000: serialized GlobalId → pid
_TID = "% 16777216"

GPU_COLUMNS = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "pid": pl.Int64,
}
KERNEL_SCHEMA = {
    **GPU_COLUMNS,
    "name": pl.Utf8,
    "grid_blocks": pl.Int64,
    "block_threads": pl.Int64,
}
MEMCPY_SCHEMA = {**GPU_COLUMNS, "copy_kind": pl.Int64, "src_kind": pl.Int64, "dst_kind": pl.Int64}
MEMSET_SCHEMA = {**GPU_COLUMNS, "mem_kind": pl.Int64}
RUNTIME_SCHEMA = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "event_class": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "correlation": pl.Int64,
    "name": pl.Utf8,
}
NVTX_SCHEMA = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "name": pl.Utf8,
}


@dataclass
class NsysTables:
    """What was read from one export: raw frames (ns), GPU facts and export facts."""

    kernels: pl.DataFrame
    memcpys: pl.DataFrame
    memsets: pl.DataFrame
    runtime: pl.DataFrame
    nvtx: pl.DataFrame
    # (pid, or None when the table has no pid column; CUDA ordinal) → SM count / GPU name
    sms: dict[tuple[int | None, int], int] = field(default_factory=dict)
    gpu_names: dict[tuple[int | None, int], str] = field(default_factory=dict)
    # TARGET_INFO_GPU's (name, smCount) rows, read even without TARGET_INFO_CUDA_DEVICE to join them to ordinals
    gpu_models: tuple[tuple[str, int | None], ...] = ()
    process_names: dict[int, str] = field(default_factory=dict)
    export: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Export:
    """An open export: connection, file, its tables and their columns, and the warnings list to add to."""

    con: sqlite3.Connection
    path: Path
    tables: set[str]
    cols: dict[str, set[str]]
    warnings: list[str]
    text: LossyText = field(default_factory=LossyText)


def read_tables(path: Path, warnings: list[str]) -> NsysTables:
    """All the tables servescope uses; raises NotATrace for a corrupt or non-nsys SQLite file."""
    with open_readonly(path) as con:
        tables = table_names(con)
        _check_is_nsys(path, tables)
        for table, what in _OPTIONAL.items():
            if _resolve(tables, table) is None:
                warnings.append(
                    f"no {table} table (nsys creates tables only for what it saw): {what}"
                )
        db = _Export(con, path, tables, {t: _columns(con, t) for t in tables}, warnings)
        result = NsysTables(
            kernels=_read_kernels(db),
            memcpys=_read_gpu(db, MEMCPY, MEMCPY_SCHEMA),
            memsets=_read_gpu(db, MEMSET, MEMSET_SCHEMA),
            runtime=_read_runtime(db),
            nvtx=_read_nvtx(db),
            process_names=_process_names(db),
            export=_export_facts(db),
        )
        _read_gpus(db, result)
        if db.text.n_bad:
            warnings.append(
                f"{db.text.n_bad:,} text values are not valid UTF-8; bad bytes shown as U+FFFD"
            )
    return result


def _check_is_nsys(path: Path, tables: set[str]) -> None:
    activity = any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables) or NVTX in tables
    if "StringIds" not in tables or not activity:
        raise NotATrace(
            f"{path}: SQLite file but not an Nsight Systems export (no StringIds and "
            "CUPTI_ACTIVITY_KIND_* / NVTX_EVENTS tables)"
        )


def _resolve(tables: set[str], name: str) -> str | None:
    """The table `name`, or a versioned successor (`name_V2`, `name_V3`, …: the newest wins)."""
    if name in tables:
        return name
    prefix = f"{name}_V"
    versions = [t for t in tables if t.startswith(prefix) and t[len(prefix) :].isdigit()]
    return max(versions, key=lambda t: int(t[len(prefix) :]), default=None)


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}


def _require(path: Path, table: str, have: set[str], need: tuple[str, ...]) -> None:
    missing = [c for c in need if c not in have]
    if missing:
        raise NotATrace(
            f"{path}: table {table} lacks column(s) {', '.join(missing)}; not an nsys export we know"
        )


def _frame(
    db: _Export, sql: str, table: str, schema: Mapping[str, type[pl.DataType]]
) -> pl.DataFrame:
    """Rows of `sql` as a frame, fetched CHUNK_ROWS at a time (bounds the Python tuples alive at once).
    Text is decoded by sqlite3 (C); once some text is not UTF-8, the query reruns with the lossy `LossyText`."""
    try:
        return _frame_once(db, sql, table, schema)
    except sqlite3.OperationalError as exc:
        if "decode to UTF-8" not in str(exc) or db.con.text_factory is db.text:
            raise
    db.con.text_factory = db.text
    return _frame_once(db, sql, table, schema)


def _frame_once(
    db: _Export, sql: str, table: str, schema: Mapping[str, type[pl.DataType]]
) -> pl.DataFrame:
    cursor = db.con.execute(sql)
    parts, lost = [pl.DataFrame(schema=schema)], 0
    while rows := cursor.fetchmany(CHUNK_ROWS):
        part, n_lost = _rows_frame(rows, schema)
        parts.append(part)
        lost += n_lost
    if lost:
        db.warnings.append(
            f"{lost:,} values in {table} are not of the type nsys writes; set to null"
        )
    return pl.concat(parts, rechunk=True)


def _rows_frame(
    rows: list[tuple[object, ...]], schema: Mapping[str, type[pl.DataType]]
) -> tuple[pl.DataFrame, int]:
    """(frame, values lost). Fast path: Polars reads the rows as they are. If a value has the wrong type (a
    damaged file: text or bytes where nsys writes integers), columns are built one by one, such values null."""
    try:
        return pl.DataFrame(rows, schema=schema, orient="row"), 0
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        pass
    columns = list(zip(*rows, strict=True))
    series = [
        pl.Series(name, list(values), dtype=dtype, strict=False)
        for (name, dtype), values in zip(schema.items(), columns, strict=True)
    ]
    lost = sum(s.null_count() - list(v).count(None) for s, v in zip(series, columns, strict=True))
    return pl.DataFrame(series), lost


_GPU_NEED = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid")
_GPU_SELECT = 't.start, t."end", t.deviceId, t.streamId, t.correlationId, t.globalPid ' + _PID


def _read_kernels(db: _Export) -> pl.DataFrame:
    """Kernels with the demangled name (Kineto's spelling), else the short name; grid and block products."""
    table = _resolve(db.tables, KERNEL)
    if table is None:
        return pl.DataFrame(schema=KERNEL_SCHEMA)
    have = db.cols[table]
    _require(
        db.path,
        table,
        have,
        (*_GPU_NEED, "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
    )
    name_id = "COALESCE(t.demangledName, t.shortName)" if "demangledName" in have else "t.shortName"
    sql = (
        f"SELECT {_GPU_SELECT}, COALESCE(d.value, s.value), t.gridX * t.gridY * t.gridZ, "
        f't.blockX * t.blockY * t.blockZ FROM "{table}" t '
        f"LEFT JOIN StringIds d ON d.id = {name_id} LEFT JOIN StringIds s ON s.id = t.shortName"
    )
    return _frame(db, sql, table, KERNEL_SCHEMA)


def _read_gpu(db: _Export, name: str, schema: Mapping[str, type[pl.DataType]]) -> pl.DataFrame:
    """Memcpy (copy kind, source and destination memory kinds) or memset (memory kind) rows."""
    table = _resolve(db.tables, name)
    if table is None:
        return pl.DataFrame(schema=schema)
    have = db.cols[table]
    _require(db.path, table, have, _GPU_NEED)
    extra = ("copyKind", "srcKind", "dstKind") if name == MEMCPY else ("memKind",)
    picked = ", ".join(f"t.{c}" if c in have else "NULL" for c in extra)
    return _frame(db, f'SELECT {_GPU_SELECT}, {picked} FROM "{table}" t', table, schema)


def _read_runtime(db: _Export) -> pl.DataFrame:
    """CUDA runtime (eventClass 0) and driver (1) calls, with their names resolved."""
    table = _resolve(db.tables, RUNTIME)
    if table is None:
        return pl.DataFrame(schema=RUNTIME_SCHEMA)
    have = db.cols[table]
    _require(db.path, table, have, ("start", "end", "globalTid", "correlationId", "nameId"))
    event_class = "t.eventClass" if "eventClass" in have else "0"
    sql = (
        f'SELECT t.start, t."end", {event_class}, t.globalTid {_PID}, t.globalTid {_TID}, t.correlationId, '
        f's.value FROM "{table}" t LEFT JOIN StringIds s ON s.id = t.nameId'
    )
    return _frame(db, sql, table, RUNTIME_SCHEMA)


def _read_nvtx(db: _Export) -> pl.DataFrame:
    """Closed NVTX ranges (push/pop and start/end) with a name: inline `text`, else the registered string."""
    have = db.cols.get(NVTX, set())
    if not {"start", "end", "eventType", "globalTid", "text"} <= have:
        return pl.DataFrame(schema=NVTX_SCHEMA)
    name = "COALESCE(t.text, s.value)" if "textId" in have else "t.text"
    join = "LEFT JOIN StringIds s ON s.id = t.textId" if "textId" in have else ""
    types = ", ".join(str(t) for t in NVTX_RANGE_TYPES)
    sql = (
        f'SELECT t.start, t."end", t.globalTid {_PID}, t.globalTid {_TID}, {name} FROM {NVTX} t {join} '
        f'WHERE t.eventType IN ({types}) AND t."end" IS NOT NULL AND t."end" >= t.start AND {name} IS NOT NULL'
    )
    return _frame(db, sql, NVTX, NVTX_SCHEMA)


def _process_names(db: _Export) -> dict[int, str]:
    if "PROCESSES" not in db.tables or not {"pid", "name"} <= db.cols["PROCESSES"]:
        return {}
    return {
        int(pid): str(name)
        for pid, name in db.con.execute("SELECT pid, name FROM PROCESSES")
        if pid is not None
    }


def _export_facts(db: _Export) -> dict[str, str]:
    if "META_DATA_EXPORT" not in db.tables or not {"name", "value"} <= db.cols["META_DATA_EXPORT"]:
        return {}
    wanted = ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION")
    rows = db.con.execute("SELECT name, value FROM META_DATA_EXPORT")
    return {str(k): str(v) for k, v in rows if k in wanted and v is not None}


def _read_gpus(db: _Export, out: NsysTables) -> None:
    """SM counts and names per (pid, CUDA ordinal) from TARGET_INFO_CUDA_DEVICE (+ TARGET_INFO_GPU names).

    The join `TARGET_INFO_GPU.id = TARGET_INFO_CUDA_DEVICE.gpuId`, `cudaId` = the kernel's deviceId, follows
    GindaChen/nsys-ai (reference §3.2); the column set is not verified on a real export here, so every
    column is checked first and a missing one just leaves the facts unknown.
    """
    gpu_cols = db.cols.get("TARGET_INFO_GPU", set())
    if {"id", "name"} <= gpu_cols:
        sm_col = "smCount" if "smCount" in gpu_cols else "NULL"
        rows = db.con.execute(f"SELECT name, {sm_col} FROM TARGET_INFO_GPU").fetchall()
        out.gpu_models = tuple((n, c if isinstance(c, int) and c > 0 else None) for n, c in rows
                               if isinstance(n, str) and n)
    have = db.cols.get("TARGET_INFO_CUDA_DEVICE", set())
    if not {"cudaId", "numMultiprocessors"} <= have:
        return
    pid = "d.pid" if "pid" in have else "NULL"
    gpu_ok = {"id", "name"} <= db.cols.get("TARGET_INFO_GPU", set()) and "gpuId" in have
    name = "g.name" if gpu_ok else "NULL"
    join = "LEFT JOIN TARGET_INFO_GPU g ON g.id = d.gpuId" if gpu_ok else ""
    sql = f"SELECT {pid}, d.cudaId, d.numMultiprocessors, {name} FROM TARGET_INFO_CUDA_DEVICE d {join}"
    for p, dev, sms, gpu_name in db.con.execute(sql):
        if not isinstance(dev, int):
            continue
        key = (p if isinstance(p, int) else None, dev)
        if isinstance(sms, int) and sms > 0:
            out.sms.setdefault(key, sms)
        if isinstance(gpu_name, str):
            out.gpu_names.setdefault(key, gpu_name)
