"""Nsight Systems SQLite exports (`nsys export --type sqlite`) as a `Trace`: the same events table as Kineto.

What it does: `load_nsys` turns one export into one `Trace` holding every profiled process (a TP job
profiled under one `nsys profile` holds one process per rank; `device` tells their GPUs apart):
- CUPTI kernels (demangled names, as Kineto writes them), memcpys (`Memcpy HtoD (Pageable -> Device)`)
  and memsets (`Memset (Device)`) → GPU rows with device, stream, correlation, grid/block products;
- CUDA runtime calls → `runtime` rows, driver calls (eventClass 1) → `driver` rows, names without nsys's
  version suffix (`cudaLaunchKernel_v7000` → `cudaLaunchKernel`, `cudaGraphLaunch_v10000` →
  `cudaGraphLaunch`), so a graph replay (many kernels sharing the launch's correlationId) is seen as one
  graph launch, as in Kineto;
- NVTX ranges → CPU-side rows: op-like names (`aten::mul`, `c10d::allreduce_`, `nccl:all_reduce`,
  `record_param_comms`; PyTorch `emit_nvtx` writes `aten::mul, seq = 45, op_id = 990` and the suffix is
  dropped) → `cpu_op`; anything else (vLLM/SGLang step labels, `ProfilerStep#N`, NCCL's own ranges) →
  `user_annotation`, where `steps` finds step labels;
- `external_id`, which nsys does not have, is derived: each op range gets an id; a runtime call gets the
  id of the innermost op range open at its start on its thread, and the GPU rows it launched (same pid and
  correlationId) get it too — the linkage Kineto's `External id` gives (casts via `aten::copy_`).
Timestamps: ns on the target's clock → µs (`units.NS_PER_US`). correlationId is unique only within a
process (reference §3.3): with several processes, `correlation` is pid·2^32 + correlationId.
`load_nsys_ranks` / `split_gpu_processes` cut such a Trace into one Trace per (process, GPU) — the rank view:
each part holds that GPU's rows and its process's CPU rows, rank = the part's device id, world size = the
number of parts — so that per-rank times are those of one GPU (busy ≤ span) and ranks can be compared.
What it does not do: read CUDA_GRAPH_NODE_EVENTS, sync/event tables, GPU metrics or OS runtime calls; it
does not know NCCL ranks (a single-GPU export's `rank` comes from the file name, as for Kineto files without
distributedInfo; a split export's ranks are device ids, ordered by CUDA ordinal then pid).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from servescope.errors import EmptyTrace
from servescope.trace._frame import SCHEMA
from servescope.trace._nsys_read import (
    GPU_COLUMNS,
    NsysTables,
    check_not_report,
    is_nsys,
    read_tables,
)
from servescope.trace._read import check_path
from servescope.trace.folder import rank_from_name
from servescope.trace.types import GPU_EVENT_KINDS, DeviceInfo, Trace
from servescope.units import NS_PER_US

__all__ = ["is_nsys", "load_nsys", "load_nsys_ranks", "split_gpu_processes"]

# ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND ids (CUPTI; as exported in the fixtures' enum tables),
# spelled as Kineto names memcpys ("Memcpy HtoD (Pageable -> Device)").
COPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
}
# An op-like NVTX name: namespace::op (aten::mm, c10d::allreduce_, vllm::unified_attention), nccl:op,
# record_param_comms. Module/record_function labels have spaces, brackets or no namespace.
_OP_NAME = r"^(?:[A-Za-z_][\w.]*::[\w.]+|nccl:\w+|record_param_comms)$"
_EMIT_NVTX_SUFFIX = r", (?:seq|op_id) = \d+.*$"
_VERSION_SUFFIX = r"_v\d+$"
_GRAPH_LAUNCH = r"^cu(?:da)?GraphLaunch"
_EXPORT_KEYS = {
    "EXPORT_PRODUCT_VERSION": "nsys_version",
    "EXPORT_SCHEMA_VERSION": "nsys_schema_version",
}


def load_nsys(path: str | Path) -> Trace:
    """One Trace holding every process of the export (docs/trace-format.md, "Nsight Systems SQLite").

    Raises TraceNotFound, NotATrace (corrupt, not an nsys export, or an `.nsys-rep` report, with the command
    that exports it) or EmptyTrace (no events at all).
    Recoverable gaps (tables nsys did not create, names missing from StringIds) are in `Trace.warnings`.
    """
    return _load(path)[0]


def _load(path: str | Path) -> tuple[Trace, dict[int, str]]:
    """The Trace of `load_nsys` and the process names by pid."""
    path = Path(path)
    check_path(path)
    check_not_report(path)
    warnings: list[str] = []
    tables = read_tables(path, warnings)
    events = _events(tables, warnings)
    if events.height == 0:
        raise EmptyTrace(
            f"{path}: the Nsight Systems export holds no kernels, memcpys, CUDA calls or NVTX ranges"
        )
    processes = _gpu_processes(events)
    ids = _device_ids(processes)
    events = _unique_ids(events, ids, warnings)
    devices = _devices(ids, tables)
    names = [f"{tables.process_names.get(pid, '?')} (pid {pid})" for pid, _ in processes]
    metadata = {"format": "nsys-sqlite", "gpu_processes": ", ".join(names) or "none"}
    metadata |= {key: tables.export[k] for k, key in _EXPORT_KEYS.items() if k in tables.export}
    trace = Trace(path, rank_from_name(path.name), None, _conform(events, devices), devices, metadata, tuple(warnings),
                  "ns")
    return trace, dict(tables.process_names)


def load_nsys_ranks(path: str | Path) -> list[Trace]:
    """`load_nsys`, then one Trace per (process, GPU) when the export ran GPU work on several (see module doc)."""
    return split_gpu_processes(*_load(path))


def split_gpu_processes(trace: Trace, process_names: Mapping[int, str] | None = None) -> list[Trace]:
    """One Trace per (pid, device) pair that ran GPU rows, ordered by device id; [trace] when there is one pair.

    A part holds the pair's GPU rows and every CPU row (runtime calls, NVTX ranges) of its pid: a process driving
    two GPUs gives both parts its CPU rows. GPU rows without a device (none in nsys exports) go to no part.
    """
    is_gpu = pl.col("kind").is_in(GPU_EVENT_KINDS)
    pairs = (trace.events.filter(is_gpu & pl.col("device").is_not_null()).select("pid", "device").unique()
             .sort("device", "pid").rows())
    if len(pairs) < 2:
        return [trace]
    names = process_names or {}
    parts = []
    for pid, device in pairs:
        mine = pl.col("pid") == pid
        events = trace.events.filter(pl.when(is_gpu).then(mine & (pl.col("device") == device)).otherwise(mine))
        devices = {device: trace.devices[device]} if device in trace.devices else {}
        name = names.get(int(pid), "?") if str(pid).isdigit() else "?"
        metadata = trace.metadata | {"process": f"{name} (pid {pid})", "device": str(device)}
        parts.append(Trace(trace.path, device, len(pairs), events, devices, metadata, trace.warnings,
                           trace.source_time_unit))
    return parts


def _events(t: NsysTables, warnings: list[str]) -> pl.DataFrame:
    """Every row of every process: kind, name, start_ns, end_ns, pid, tid, device, stream, correlation,
    external_id, grid_blocks, block_threads (ints; pid/tid still numbers)."""
    cpu_ops, annotations = _nvtx_rows(t.nvtx)
    runtime = _runtime_rows(t.runtime, warnings)
    runtime = runtime.with_columns(external_id=_enclosing_op(cpu_ops, runtime))
    gpu = pl.concat(
        [_kernel_rows(t.kernels, warnings), _memcpy_rows(t.memcpys), _memset_rows(t.memsets)],
        how="diagonal_relaxed",
    )
    launch_ext = (
        runtime.filter(pl.col("correlation").is_not_null())
        .unique(["pid", "correlation"], keep="first")
        .select("pid", "correlation", "external_id")
    )
    gpu = gpu.join(launch_ext, on=["pid", "correlation"], how="left", maintain_order="left")
    frame = _drop_bad_times(
        pl.concat([gpu, runtime, cpu_ops, annotations], how="diagonal_relaxed"), warnings
    )
    _note_graph_level_replays(frame, warnings)
    return frame


def _note_graph_level_replays(frame: pl.DataFrame, warnings: list[str]) -> None:
    """Warn when CUDA graph launches launched no GPU row: with `--cuda-graph-trace=graph` nsys records a
    replay as a whole, not as kernels (reference §3.5), so its time is missing from the events table."""
    is_graph = pl.col("kind").is_in(["runtime", "driver"]) & pl.col("name").str.contains(
        _GRAPH_LAUNCH
    )
    launches = frame.filter(is_graph).select("pid", "correlation")
    if launches.height == 0:
        return
    launched = frame.filter(pl.col("kind").is_in(GPU_EVENT_KINDS)).select("pid", "correlation").unique()
    n_bare = launches.join(launched, on=["pid", "correlation"], how="anti").height
    if n_bare:
        warnings.append(
            f"{n_bare:,} of {launches.height:,} CUDA graph launches have no kernels in the export (traced "
            "with --cuda-graph-trace=graph?): their GPU time is missing; profile with --cuda-graph-trace=node"
        )


def _kernel_rows(kernels: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    missing = kernels["name"].null_count()
    if missing:
        warnings.append(f"{missing:,} kernel names not found in StringIds; named 'unnamed kernel'")
    return kernels.with_columns(
        kind=pl.lit("kernel"), name=pl.col("name").fill_null("unnamed kernel")
    )


def _memcpy_rows(memcpys: pl.DataFrame) -> pl.DataFrame:
    copy = pl.col("copy_kind").replace_strict(COPY_KINDS, default=None, return_dtype=pl.Utf8)
    src = pl.col("src_kind").replace_strict(MEM_KINDS, default="Unknown", return_dtype=pl.Utf8)
    dst = pl.col("dst_kind").replace_strict(MEM_KINDS, default="Unknown", return_dtype=pl.Utf8)
    name = pl.format("Memcpy {} ({} -> {})", copy.fill_null("Unknown"), src, dst)
    return memcpys.select(*GPU_COLUMNS, kind=pl.lit("memcpy"), name=name)


def _memset_rows(memsets: pl.DataFrame) -> pl.DataFrame:
    where = pl.col("mem_kind").replace_strict(MEM_KINDS, default="Unknown", return_dtype=pl.Utf8)
    return memsets.select(*GPU_COLUMNS, kind=pl.lit("memset"), name=pl.format("Memset ({})", where))


def _runtime_rows(runtime: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """runtime (eventClass 0) / driver (1) / other; names without the `_v<version>` suffix."""
    missing = runtime["name"].null_count()
    if missing:
        warnings.append(
            f"{missing:,} CUDA API call names not found in StringIds; named 'unnamed CUDA call'"
        )
    kind = (
        pl.when(pl.col("event_class") == 0)
        .then(pl.lit("runtime"))
        .when(pl.col("event_class") == 1)
        .then(pl.lit("driver"))
        .otherwise(pl.lit("other"))
    )
    name = pl.col("name").fill_null("unnamed CUDA call").str.replace(_VERSION_SUFFIX, "")
    return runtime.select("start_ns", "end_ns", "pid", "tid", "correlation", kind=kind, name=name)


def _nvtx_rows(nvtx: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(cpu_op rows with an `external_id` each, user_annotation rows)."""
    named = nvtx.with_columns(name=pl.col("name").str.replace(_EMIT_NVTX_SUFFIX, ""))
    is_op = pl.col("name").str.contains(_OP_NAME)
    ops = (
        named.filter(is_op)
        .with_row_index("external_id", offset=1)
        .with_columns(pl.col("external_id").cast(pl.Int64), kind=pl.lit("cpu_op"))
    )
    return ops, named.filter(~is_op).with_columns(kind=pl.lit("user_annotation"))


def _enclosing_op(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.Series:
    """external_id of the innermost op range open at each call's start on the same thread (null if none).

    NVTX push/pop ranges nest per thread (reference §3.4 tests the launching call, not the kernel), so a
    sweep over the thread's ranges sorted by start keeps the open ones on a stack.
    """
    out: list[int | None] = [None] * calls.height
    ranges = {
        k: g.sort(["start_ns", "end_ns"], descending=[False, True])
        for k, g in ops.partition_by(["pid", "tid"], as_dict=True).items()
    }
    indexed = calls.select("pid", "tid", "start_ns").with_row_index("row")
    for key, group in indexed.partition_by(["pid", "tid"], as_dict=True).items():
        thread_ops = ranges.get(key)
        if thread_ops is None:
            continue
        group = group.sort("start_ns")
        found = _sweep(
            thread_ops["start_ns"].to_list(),
            thread_ops["end_ns"].to_list(),
            thread_ops["external_id"].to_list(),
            group["start_ns"].to_list(),
        )
        for row, ext in zip(group["row"].to_list(), found, strict=True):
            out[row] = ext
    return pl.Series("external_id", out, dtype=pl.Int64)


def _sweep(
    starts: list[int], ends: list[int], ids: list[int], times: list[int]
) -> list[int | None]:
    """For sorted `times`, the id of the latest-started range in (starts, ends) still open at each time."""
    found: list[int | None] = []
    stack: list[int] = []
    i = 0
    for t in times:
        while i < len(starts) and starts[i] <= t:
            stack.append(i)
            i += 1
        while stack and ends[stack[-1]] < t:
            stack.pop()
        found.append(ids[stack[-1]] if stack else None)
    return found


def _drop_bad_times(frame: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    bad = pl.col("start_ns").is_null() | pl.col("end_ns").is_null()
    n_bad = int(frame.select(bad.sum()).item())
    if n_bad:
        warnings.append(f"{n_bad:,} rows without a readable start or end were dropped")
        frame = frame.filter(~bad)
    n_neg = int(frame.select((pl.col("end_ns") < pl.col("start_ns")).sum()).item())
    if n_neg:
        warnings.append(f"{n_neg:,} rows ending before they start: duration set to 0")
    return frame


def _gpu_processes(events: pl.DataFrame) -> list[tuple[int, list[int]]]:
    """(pid, its CUDA device ordinals) for each process that ran GPU work, by first ordinal then pid."""
    gpu = events.filter(pl.col("kind").is_in(GPU_EVENT_KINDS) & pl.col("pid").is_not_null())
    per_pid = gpu.group_by("pid").agg(pl.col("device").drop_nulls().unique().sort())
    found = [(int(pid), [int(d) for d in devs]) for pid, devs in per_pid.iter_rows()]
    return sorted(found, key=lambda p: (p[1][:1] or [-1], p[0]))


def _device_ids(processes: list[tuple[int, list[int]]]) -> dict[tuple[int, int], int]:
    """(pid, CUDA ordinal) → device id: the ordinal, unless processes share ordinals (CUDA_VISIBLE_DEVICES);
    then 0.. in (first ordinal, pid) order."""
    pairs = [(pid, d) for pid, devs in processes for d in devs]
    if len({d for _, d in pairs}) == len(pairs):
        return {pair: pair[1] for pair in pairs}
    return {pair: i for i, pair in enumerate(pairs)}


def _unique_ids(
    events: pl.DataFrame, ids: dict[tuple[int, int], int], warnings: list[str]
) -> pl.DataFrame:
    """With several processes: correlation → pid·2^32 + correlationId (correlationIds repeat across processes;
    CUPTI's are 32-bit) and devices renumbered as `ids` says, with a warning."""
    if len({pid for pid, _ in ids}) < 2:
        return events
    events = events.with_columns(correlation=pl.col("pid") * (1 << 32) + pl.col("correlation"))
    if all(dev == ordinal for (_, ordinal), dev in ids.items()):
        return events
    warnings.append(
        "processes share CUDA device ordinals (CUDA_VISIBLE_DEVICES): devices renumbered "
        + ", ".join(f"pid {pid} device {d} → {i}" for (pid, d), i in ids.items())
    )
    mapping = pl.DataFrame(
        {
            "pid": [p for p, _ in ids],
            "device": [d for _, d in ids],
            "new_device": list(ids.values()),
        },
        schema={"pid": pl.Int64, "device": pl.Int64, "new_device": pl.Int64},
    )
    renumbered = events.join(mapping, on=["pid", "device"], how="left", maintain_order="left")
    return renumbered.with_columns(device=pl.col("new_device")).drop("new_device")


def _devices(ids: dict[tuple[int, int], int], tables: NsysTables) -> dict[int, DeviceInfo]:
    """Devices with a known SM count or name (TARGET_INFO_CUDA_DEVICE / TARGET_INFO_GPU, when exported),
    looked up by process and CUDA ordinal, keyed by device id. Without the CUDA-device table that joins them to
    ordinals, TARGET_INFO_GPU's one model when every GPU it lists is that model (the trimmed fixtures have
    neither table: their devices stay unnamed)."""
    models = set(tables.gpu_models)
    only_name, only_sms = models.pop() if len(models) == 1 else (None, None)
    out: dict[int, DeviceInfo] = {}
    for (pid, ordinal), dev in ids.items():
        keys = ((pid, ordinal), (None, ordinal))
        sms = next((tables.sms[k] for k in keys if k in tables.sms), only_sms)
        name = next((tables.gpu_names[k] for k in keys if k in tables.gpu_names), only_name)
        if (sms is not None or name is not None) and dev not in out:
            out[dev] = DeviceInfo(dev, name or "", sms, None)
    return out


def _conform(events: pl.DataFrame, devices: dict[int, DeviceInfo]) -> pl.DataFrame:
    """The events table of docs/architecture.md §1: µs, pid/tid as text, every SCHEMA column (columns this
    format has no source for, including ones added to SCHEMA later, are null), sorted by ts_us."""
    sms = {d: float(info.num_sms) for d, info in devices.items() if info.num_sms}
    per_sm = pl.col("grid_blocks") / pl.col("device").replace_strict(
        sms, default=None, return_dtype=pl.Float64
    )
    derived = {
        "ts_us": pl.col("start_ns") / NS_PER_US,
        "dur_us": (pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0) / NS_PER_US,
        "pid": pl.col("pid").cast(pl.Utf8),
        "tid": pl.coalesce(pl.col("stream"), pl.col("tid")).cast(pl.Utf8),
        "blocks_per_sm": per_sm if sms else pl.lit(None, pl.Float64),
    }
    have = set(events.columns)
    columns = [
        derived[c].alias(c)
        if c in derived
        else (pl.col(c) if c in have else pl.lit(None)).cast(dtype).alias(c)
        for c, dtype in SCHEMA.items()
    ]
    return events.select(columns).cast(SCHEMA).sort("ts_us", maintain_order=True)
