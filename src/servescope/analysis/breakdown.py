"""Per-step breakdown of GPU time: busy and idle, time per kernel class and collective, overlap, launches.

Does: turn a classified, step-attributed trace into numbers, every share with a named denominator
(see docs/metrics.md). Busy time is an interval union per device (kernels overlap: PDL, concurrent streams).
Does not: load files, decide what is a problem (findings), or format anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from servescope.analysis._series import series
from servescope.analysis.classify import classify_gpu
from servescope.analysis.gpu_rows import (
    attach_work_chunked,
    compact,
    filled,
    group_ids,
    split_events,
    take_split,
)
from servescope.analysis.intervals import grouped_union_length
from servescope.analysis.roofline import (
    WORK_COLUMNS,
    CaptureWork,
    WorkGroup,
    unshaped_us,
    work_groups,
)
from servescope.analysis.steps import StepTable, find_steps
from servescope.analysis.timeline import StepTimeline, step_timelines
from servescope.progress import stage
from servescope.trace.types import Trace
from servescope.units import us_to_s

COMMUNICATION = "communication"
GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "hipGraphLaunch")


@dataclass(frozen=True)
class CollectiveStats:
    """One collective in one step: calls, summed kernel time, per-call mean, median and p90 (µs).

    Bandwidths follow nccl-tests (docs/metrics.md): `algbw = Σ message bytes / Σ kernel seconds` over
    the calls whose message size is known (`sized_calls`), `busbw = Σ (bytes × busbw_factor(n)) / Σ
    kernel seconds` over those whose group size n is known too. None when no call qualifies.
    """

    calls: int
    total_us: float
    mean_us: float
    median_us: float
    p90_us: float
    sized_calls: int = 0
    message_bytes_total: int = 0
    message_bytes_median: float | None = None
    group_size: int | None = None  # largest process-group size seen
    algbw_bytes_per_s: float | None = None
    busbw_bytes_per_s: float | None = None


def busbw_factor(collective: str, n_ranks: int) -> float | None:
    """nccl-tests bus-bandwidth factor (PERFORMANCE.md): busbw = algbw × factor.

    all_reduce 2(n−1)/n; all_gather, reduce_scatter, all_to_all (n−1)/n; broadcast, reduce, send_recv 1.
    None for an unknown collective or n < 1.
    """
    if n_ranks < 1:
        return None
    if collective == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n_ranks - 1) / n_ranks
    return 1.0 if collective in ("broadcast", "reduce", "send_recv") else None


@dataclass(frozen=True)
class KernelStats:
    """One kernel name in one step. `blocks_per_sm` is the duration-weighted mean (null when unknown)."""

    name: str
    kernel_class: str
    collective: str | None
    calls: int
    total_us: float
    median_us: float
    blocks_per_sm: float | None
    grid_blocks: int | None
    # Work from the launching op's shapes (analysis/roofline.py): calls with a shape, their µs, FLOPs, bytes,
    # by (model, dtype, M); waves = duration-weighted grid ÷ SMs (one resident block per SM), tail = waves/⌈waves⌉.
    shaped_calls: int = 0
    shaped_us: float = 0.0
    flops: float | None = None
    bytes: float | None = None
    work: tuple[WorkGroup, ...] = ()
    waves: float | None = None
    tail_efficiency: float | None = None
    no_shape: str | None = None  # why calls carry no shape (the reason of most of its unshaped time)


@dataclass(frozen=True)
class StepBreakdown:
    """Where one step's GPU time went. Union times are µs of wall time covered on the step's device(s)."""

    index: int
    label: str
    kind: str
    batch_size: int | None
    tokens: int | None
    source: str
    cpu_start_us: float | None
    cpu_end_us: float | None
    gpu_start_us: float | None
    gpu_end_us: float | None
    gpu_span_us: float  # first GPU start to last GPU end of the step
    gpu_busy_us: float  # union of kernel/memcpy/memset intervals (summed over devices)
    idle_us: float  # span × devices − busy
    kernel_sum_us: float  # plain sum of GPU event durations (≥ busy when events overlap)
    classes_us: dict[str, float]  # union time per class
    class_sum_us: dict[str, float]  # summed duration per class
    class_calls: dict[str, int]
    collectives: dict[str, CollectiveStats]
    comm_exposed_us: float  # communication time with no non-communication kernel running
    comm_overlapped_us: float  # communication time hidden under compute
    kernels: int
    launches: int  # launch API calls attributed to the step (graph launches count once)
    graph_launches: int
    launch_cpu_us: float  # summed duration of those launch calls on the CPU
    devices: int
    top_kernels: tuple[KernelStats, ...] = field(default=())
    work: tuple[WorkGroup, ...] = ()  # shaped work per (class, model, dtype, M, N, K)
    unshaped_us: dict[str, float] = field(default_factory=dict)  # GPU µs without a shape, by reason
    graph_idle_us: float = 0.0  # idle inside graph replays: each replay's GPU span − the union of its kernels

    @property
    def generated_tokens(self) -> int | None:
        """Tokens generated by a step: one per sequence for decode and mixed steps' decode part."""
        if self.kind == "decode":
            return self.batch_size
        return None

    def __repr__(self) -> str:
        return (f"StepBreakdown(#{self.index} {self.kind} {self.label[:60]!r}: busy {self.gpu_busy_us:,.1f} µs of "
                f"span {self.gpu_span_us:,.1f} µs, {self.kernels} kernels)")


@dataclass(frozen=True)
class TraceBreakdown:
    """Breakdown of one rank's trace."""

    file: str
    rank: int | None
    world_size: int | None
    device_name: str | None
    num_sms: int | None
    method: str
    steps: tuple[StepBreakdown, ...]
    kinds: tuple[KindSummary, ...]
    warnings: tuple[str, ...]
    outside_steps_events: int = 0  # GPU events launched outside every step (warm-up, profiler edges)
    outside_steps_us: float = 0.0  # their summed duration
    timelines: tuple[StepTimeline, ...] = ()  # the kernels of one representative step per kind (timeline.py)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k.kind}×{k.steps}" for k in self.kinds)
        return (f"TraceBreakdown(rank {self.rank}, {self.device_name}: {len(self.steps)} step(s) [{kinds}], "
                f"{len(self.warnings)} warning(s); {self.file!r})")


def _launch_stats(launches: pl.DataFrame) -> dict[int, tuple[int, int, float]]:
    is_launch = pl.col("name").str.contains(r"(?i)launch")
    stats = (
        launches.filter(pl.col("step").is_not_null() & is_launch)
        .group_by("step")
        .agg(
            pl.len().alias("n"),
            pl.col("name").is_in(GRAPH_LAUNCH_NAMES).sum().alias("graphs"),
            pl.col("dur_us").sum().alias("cpu_us"),
        )
    )
    return {int(s): (int(n), int(g), float(c)) for s, n, g, c in stats.iter_rows()}


def _graph_idle(gpu: pl.DataFrame, launches: pl.DataFrame) -> dict[int, float]:
    """Per step: idle inside graph replays = Σ over the graph launches (cudaGraphLaunch/hipGraphLaunch, one
    correlation for all the kernels a replay runs) and devices of (last end − first start of the replay's GPU rows
    − the union of those rows). Work of other launches running inside a replay's window is not subtracted."""
    graph = launches.filter(pl.col("name").is_in(GRAPH_LAUNCH_NAMES) & pl.col("correlation").is_not_null())
    if graph.height == 0:
        return {}
    replayed = pl.col("correlation").is_in(graph["correlation"].implode())
    columns = ("step", "correlation", pl.col("device").fill_null(-1), "ts_us", "dur_us")
    every = bool(gpu.select(replayed.all()).item())  # a decode trace of graph replays only: no copy of the rows
    rows = gpu.select(columns) if every else gpu.lazy().filter(replayed).select(columns).collect()
    if rows.height == 0:
        return {}
    gid, _ = group_ids([rows["step"], rows["correlation"], rows["device"]])  # ordered as their struct's dense rank
    busy = grouped_union_length(gid, rows["ts_us"].to_numpy(), rows["dur_us"].to_numpy())
    spans = rows.select("step", series("gid", gid, pl.Int64), "ts_us", "dur_us").group_by("gid", "step").agg(
        (pl.col("ts_us") + pl.col("dur_us") - pl.col("ts_us").min()).max().alias("span")).sort("gid")
    out: dict[int, float] = {}
    for g, step, span in spans.iter_rows():
        out[int(step)] = out.get(int(step), 0.0) + max(0.0, float(span) - busy[int(g)])
    return out


def _unions(gpu: pl.DataFrame, key: str | None, where: pl.Expr | None = None) -> dict[tuple[int, str], float]:
    """Union µs per (step, key value), unions taken per device and summed over devices; over the rows `where` holds
    (default: all), filtered after selecting the columns read, so no other column is copied."""
    if where is not None:
        gpu = gpu.lazy().filter(where).select("step", "device", "ts_us", "dur_us", *([key] if key else [])).collect()
    if gpu.height == 0:
        return {}
    parts = [gpu["step"], gpu["device"].fill_null(-1), *([filled(gpu[key])] if key else [])]
    gid, values = group_ids(parts)
    lengths = grouped_union_length(gid, gpu["ts_us"].to_numpy(), gpu["dur_us"].to_numpy())
    out: dict[tuple[int, str], float] = {}
    for g, length in lengths.items():
        step, _, *rest = values(g)
        k = (int(step), str(rest[0]) if key else "")
        out[k] = out.get(k, 0.0) + length
    return out


def _with_bus_bytes(comm: pl.DataFrame) -> pl.DataFrame:
    """`comm` rows with `message_bytes`, `group_size` (null when absent) and `bus_bytes` =
    message bytes × busbw_factor(collective, group size)."""
    comm = comm.with_columns(
        pl.lit(None, pl.Int64).alias(c) for c in ("message_bytes", "group_size") if c not in comm.columns
    )
    pairs = comm.select("collective", "group_size").drop_nulls().unique()
    factors = pairs.with_columns(
        pl.Series("factor", [busbw_factor(c, int(n)) for c, n in pairs.iter_rows()], dtype=pl.Float64)
    )
    comm = comm.join(factors, on=["collective", "group_size"], how="left", nulls_equal=False)
    return comm.with_columns((pl.col("message_bytes") * pl.col("factor")).alias("bus_bytes"))


def _collectives(gpu: pl.DataFrame) -> dict[int, dict[str, CollectiveStats]]:
    sized = pl.col("message_bytes").is_not_null()
    stats = (
        _with_bus_bytes(gpu.filter(pl.col("collective").is_not_null()))
        .group_by("step", "collective")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_us").sum().alias("total"),
            pl.col("dur_us").mean().alias("mean"),
            pl.col("dur_us").median().alias("median"),
            pl.col("dur_us").quantile(0.9, "linear").alias("p90"),
            sized.sum().alias("sized_calls"),
            pl.col("message_bytes").sum().alias("bytes"),
            pl.col("message_bytes").median().alias("bytes_median"),
            pl.col("group_size").max().alias("group_size"),
            pl.col("dur_us").filter(sized).sum().alias("sized_us"),
            pl.col("bus_bytes").sum().alias("bus_bytes"),
            pl.col("dur_us").filter(pl.col("bus_bytes").is_not_null()).sum().alias("bus_us"),
        )
    )
    out: dict[int, dict[str, CollectiveStats]] = {}
    for r in stats.sort("collective").iter_rows(named=True):
        out.setdefault(int(r["step"]), {})[r["collective"]] = CollectiveStats(
            int(r["calls"]), float(r["total"]), float(r["mean"]), float(r["median"]), float(r["p90"]),
            sized_calls=int(r["sized_calls"]), message_bytes_total=int(r["bytes"] or 0),
            message_bytes_median=r["bytes_median"], group_size=r["group_size"],
            algbw_bytes_per_s=_per_s(r["bytes"], r["sized_us"]), busbw_bytes_per_s=_per_s(r["bus_bytes"], r["bus_us"]),
        )
    return out


def _per_s(amount: float | None, dur_us: float | None) -> float | None:
    """amount per second of `dur_us`; None when either is missing or the time is zero (no call
    qualified: Polars sums of nothing are 0). A busbw of 0 is real: one rank moves nothing."""
    if amount is None or not dur_us:
        return None
    return float(amount) / us_to_s(float(dur_us))


def _finite(x: float | None) -> float | None:
    return x if x is not None and np.isfinite(x) else None


def _top_kernels(gpu: pl.DataFrame, top_n: int) -> dict[int, tuple[KernelStats, ...]]:
    weight = pl.col("dur_us") * pl.col("blocks_per_sm")
    has_bps = pl.col("dur_us").filter(pl.col("blocks_per_sm").is_not_null()).sum()
    tail = pl.col("blocks_per_sm") / pl.col("blocks_per_sm").ceil()
    worked = "shape_status" in gpu.columns
    shaped = pl.col("shape_status") == "shaped"
    extra = [
        shaped.sum().alias("shaped_calls"), pl.col("dur_us").filter(shaped).sum().alias("shaped_us"),
        pl.col("work_flops").filter(shaped).sum().alias("flops"), pl.col("work_bytes").filter(shaped).sum().alias("bytes"),
        pl.col("shape_status").filter(~shaped).mode().first().alias("no_shape"),
    ] if worked else []
    stats = (
        gpu.group_by("step", "name")
        .agg(
            pl.col("kernel_class").first(),
            pl.col("collective").first(),
            pl.len().alias("calls"),
            pl.col("dur_us").sum().alias("total"),
            pl.col("dur_us").median().alias("median"),
            (weight.sum() / has_bps).alias("bps"),
            pl.col("grid_blocks").max().alias("grid"),
            ((pl.col("dur_us") * tail).filter(pl.col("blocks_per_sm") > 0).sum()
             / pl.col("dur_us").filter(pl.col("blocks_per_sm") > 0).sum()).alias("tail"),
            *extra,
        )
        .sort(["step", "total"], descending=[False, True])
        .group_by("step", maintain_order=True)
        .head(top_n)
    )
    groups = {}
    if worked:  # only shaped rows make work groups: filtered before the join, which copies the rows it keeps
        rows = gpu.filter(shaped).select("step", "name", "kernel_class", *WORK_COLUMNS, "dur_us")
        groups = work_groups(rows.join(stats.select("step", "name"), on=["step", "name"]), ["step", "name"])
    out: dict[int, list[KernelStats]] = {}
    for r in stats.iter_rows(named=True):
        bps = _finite(r["bps"])
        n_shaped = int(r["shaped_calls"]) if worked else 0
        out.setdefault(int(r["step"]), []).append(
            KernelStats(r["name"], r["kernel_class"], r["collective"], int(r["calls"]), float(r["total"]),
                        float(r["median"]), bps, r["grid"], shaped_calls=n_shaped,
                        shaped_us=float(r["shaped_us"]) if n_shaped else 0.0,
                        flops=float(r["flops"]) if n_shaped else None, bytes=float(r["bytes"]) if n_shaped else None,
                        work=groups.get((r["step"], r["name"]), ()), waves=bps,
                        tail_efficiency=_finite(r["tail"]) if bps is not None else None,
                        no_shape=r["no_shape"] if worked else None)
        )
    return {k: tuple(v) for k, v in out.items()}


def _work(gpu: pl.DataFrame) -> tuple[dict[int, tuple[WorkGroup, ...]], dict[int, dict[str, float]]]:
    """Shaped work groups and unshaped µs by reason, per step (empty without `attach_work`'s columns)."""
    if "shape_status" not in gpu.columns:
        return {}, {}
    groups = {int(k[0]): v for k, v in work_groups(gpu, ["step"]).items()}
    unshaped = {int(k[0]): v for k, v in unshaped_us(gpu, ["step"]).items()}
    return groups, unshaped


def _per_class(gpu: pl.DataFrame) -> dict[int, tuple[dict[str, float], dict[str, int]]]:
    stats = gpu.group_by("step", "kernel_class").agg(pl.col("dur_us").sum(), pl.len())
    out: dict[int, tuple[dict[str, float], dict[str, int]]] = {}
    for step, cls, total, n in stats.sort("kernel_class").iter_rows():
        sums, calls = out.setdefault(int(step), ({}, {}))
        sums[cls] = float(total)
        calls[cls] = int(n)
    return out


def breakdown_steps(table: StepTable, top_n: int = 10) -> tuple[StepBreakdown, ...]:
    """One StepBreakdown per step of `table` (GPU rows must carry kernel_class and collective)."""
    gpu = _in_steps(table.gpu_events)
    busy = _unions(gpu, None)
    by_class = _unions(gpu, "kernel_class")
    compute = _unions(gpu, None, where=pl.col("kernel_class") != COMMUNICATION)
    collectives = _collectives(gpu)
    tops = _top_kernels(gpu, top_n)
    classes = _per_class(gpu)
    work, unshaped = _work(gpu)
    launches = _launch_stats(table.launches)
    graph_idle = _graph_idle(gpu, table.launches)
    per_step = gpu.group_by("step").agg(  # one query: each aggregation is as it was on its own
        pl.col("device").n_unique().alias("devices"),
        pl.col("dur_us").sum().alias("kernel_sum"),
        pl.len().alias("kernels"),
        # Span from relative times: absolute epoch µs (~1e15) would round ns-scale steps.
        (pl.col("ts_us") - pl.col("ts_us").min() + pl.col("dur_us")).max().alias("span"),
    )
    devices, kernel_sums, kernel_counts, spans = (
        dict(zip(per_step["step"], per_step[c], strict=True)) for c in ("devices", "kernel_sum", "kernels", "span")
    )
    step_classes: dict[int, dict[str, float]] = {}
    for (st, c), v in sorted(by_class.items()):  # once, not once per step
        step_classes.setdefault(st, {})[c] = v
    out = []
    for s in table.steps.iter_rows(named=True):
        i = int(s["step"])
        span = float(spans.get(i, 0.0) or 0.0)
        b = busy.get((i, ""), 0.0)
        comm = by_class.get((i, COMMUNICATION), 0.0)
        exposed = max(0.0, b - compute.get((i, ""), 0.0)) if comm else 0.0
        n_launch, n_graph, launch_us = launches.get(i, (0, 0, 0.0))
        sums, calls = classes.get(i, ({}, {}))
        n_dev = int(devices.get(i, 1) or 1)
        out.append(StepBreakdown(
            index=i, label=s["label"], kind=s["kind"], batch_size=s["batch_size"], tokens=s["tokens"],
            source=s["source"], cpu_start_us=s["cpu_start_us"], cpu_end_us=s["cpu_end_us"],
            gpu_start_us=s["gpu_start_us"], gpu_end_us=s["gpu_end_us"], gpu_span_us=span, gpu_busy_us=b,
            idle_us=max(0.0, span * n_dev - b), kernel_sum_us=float(kernel_sums.get(i, 0.0)),
            classes_us=step_classes.get(i, {}),
            class_sum_us=sums, class_calls=calls, collectives=collectives.get(i, {}),
            comm_exposed_us=exposed, comm_overlapped_us=max(0.0, comm - exposed),
            kernels=int(kernel_counts.get(i, 0)), launches=n_launch, graph_launches=n_graph,
            launch_cpu_us=launch_us, devices=n_dev, top_kernels=tops.get(i, ()),
            work=work.get(i, ()), unshaped_us=unshaped.get(i, {}),
            graph_idle_us=min(graph_idle.get(i, 0.0), max(0.0, span * n_dev - b)),
        ))
    return tuple(out)


def _in_steps(gpu: pl.DataFrame) -> pl.DataFrame:
    """The GPU rows attributed to a step (all of them, uncopied, when every row is)."""
    return gpu if gpu["step"].null_count() == 0 else gpu.filter(pl.col("step").is_not_null())


def gaps_after_steps_us(steps: Sequence[StepBreakdown]) -> list[tuple[StepBreakdown, float]]:
    """Each step that has a next step in GPU order, with the GPU idle (µs) from its last GPU end to the next step's
    first GPU start, 0 where the two overlap on the GPU. Steps without GPU times are left out."""
    ordered = sorted((s for s in steps if s.gpu_start_us is not None and s.gpu_end_us is not None),
                     key=lambda s: s.gpu_start_us or 0.0)
    return [(p, max(0.0, (n.gpu_start_us or 0.0) - (p.gpu_end_us or 0.0)))
            for p, n in zip(ordered, ordered[1:], strict=False)]


def breakdown(trace: Trace, top_n: int = 10, capture: CaptureWork | None = None) -> TraceBreakdown:
    """Classify, find steps, attach each kernel's work from its launching op's shapes (graph-replayed kernels: from
    `capture`, a capture trace's work per kernel name), and break down one rank's trace. Malformed `Input Dims` are
    counted into the warnings."""
    return _breakdown(trace, *split_events(trace.events), top_n, capture)


def breakdown_taking(traces: list[Trace], top_n: int = 10, capture: CaptureWork | None = None) -> TraceBreakdown:
    """`breakdown` of `traces[0]`, which is popped: when the list held the only reference to it, its events table
    is freed column by column as the GPU rows are split from the rest (`gpu_rows.take_split`), so the breakdown's
    peak is about one table, not a table and its GPU rows."""
    trace = traces.pop(0)
    holder = [trace.events]
    trace = replace(trace, events=holder[0].clear())
    return _breakdown(trace, *take_split(holder), top_n, capture)


# GPU-row columns attach_work reads; those the breakdown reads no more once steps and classes are attached, and
# once the work is too.
_WORK_INPUTS = ("kind", "name", "step", "correlation", "external_id", "ts_us", "dur_us", "gpu_bytes")
_DONE_WITH_STEPS = ("launch_ts_us", "collective_source", "comm_name", "comm_in_nelems", "comm_out_nelems",
                    "comm_group_size", "comm_dtype", "comm_pg")
_DONE_WITH_WORK = ("kind", "external_id", "gpu_bytes")


def _breakdown(trace: Trace, gpu: pl.DataFrame, others: pl.DataFrame, top_n: int,
               capture: CaptureWork | None) -> TraceBreakdown:
    """The breakdown of `trace` from its GPU rows and its other rows (`gpu_rows`); `trace.events` is not read.
    Timed as the stages classify, steps and breakdown (progress.stage)."""
    with stage("classify"):
        gpu = classify_gpu(gpu, others)
    with stage("steps"):
        table = find_steps(others, gpu=gpu)
    del gpu
    with stage("breakdown"):
        table = replace(table, gpu_events=table.gpu_events.drop(_DONE_WITH_STEPS, strict=False))
        work, work_warnings = attach_work_chunked(others, table.gpu_events.select(_WORK_INPUTS), table.steps, capture)
        del others
        gpu = compact(table.gpu_events.drop(_DONE_WITH_WORK, strict=False).with_columns(work.select(list(WORK_COLUMNS))))
        del work
        table = replace(table, gpu_events=gpu)
        del gpu
        device = trace.device_info(_busiest_device(table.gpu_events)) if trace.devices else None
        steps = breakdown_steps(table, top_n)
        table = replace(table, gpu_events=table.gpu_events.drop("correlation", strict=False))  # graph idle only
        outside = table.gpu_events.lazy().filter(pl.col("step").is_null()).select("dur_us").collect()
        return TraceBreakdown(
            file=str(trace.path), rank=trace.rank, world_size=trace.world_size,
            device_name=device.name if device else None, num_sms=device.num_sms if device else None,
            method=table.method, steps=steps, kinds=summarize_by_kind(table, steps, top_n),
            warnings=(*trace.warnings, *work_warnings), outside_steps_events=outside.height,
            outside_steps_us=float(outside["dur_us"].sum()) if outside.height else 0.0,
            timelines=step_timelines(table.gpu_events, [(s.index, s.kind, s.gpu_busy_us) for s in steps],
                                     {s.index: s.label for s in steps}),
        )


def _busiest_device(gpu: pl.DataFrame) -> int:
    """The device that ran most GPU events (deviceProperties lists every visible GPU, not the profiled one)."""
    counts = (gpu.lazy().filter(pl.col("device").is_not_null()).group_by("device").len()  # lazy: the one column
              .sort("len", descending=True).collect())
    return int(counts["device"][0]) if counts.height else 0


@dataclass(frozen=True)
class KindSummary:
    """All steps of one kind (prefill, decode, mixed, unknown) of one rank, summed; per-call stats from raw calls."""

    kind: str
    steps: int
    tokens: int | None
    generated_tokens: int | None
    gpu_busy_us: float
    gpu_span_us: float
    idle_us: float
    classes_us: dict[str, float]
    collectives: dict[str, CollectiveStats]
    comm_exposed_us: float
    kernels: int
    launches: int
    graph_launches: int
    launch_cpu_us: float
    top_kernels: tuple[KernelStats, ...]
    work: tuple[WorkGroup, ...] = ()  # shaped work per (class, model, dtype, M) over the kind's steps
    unshaped_us: dict[str, float] = field(default_factory=dict)  # GPU µs without a shape, by reason
    unshaped_kernels: tuple[tuple[str, str, float], ...] = ()  # (name, reason, µs): the most time without a shape
    graph_idle_us: float = 0.0  # idle inside graph replays, summed over the kind's steps (StepBreakdown)

    def calls_per_step(self, collective: str) -> float:
        return self.collectives[collective].calls / self.steps if self.steps else 0.0

    def calls_per_token(self, collective: str) -> float | None:
        """Calls per generated token (decode: a step generates one token per sequence)."""
        if not self.generated_tokens:
            return None
        return self.collectives[collective].calls / self.generated_tokens

    def __repr__(self) -> str:
        return (f"KindSummary({self.kind}: {self.steps} step(s), busy {self.gpu_busy_us:,.1f} µs, "
                f"{len(self.classes_us)} classes, {len(self.collectives)} collectives)")


def _sum_optional(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present and len(present) == len(values) else None


def summarize_by_kind(table: StepTable, steps: tuple[StepBreakdown, ...], top_n: int = 10) -> tuple[KindSummary, ...]:
    """Sum steps per kind; collective medians and top kernels come from the raw calls of those steps."""
    kinds = table.steps.select("step", "kind")
    gpu = _in_steps(table.gpu_events).drop("kind", strict=False)
    # Each row's step kind; every step of the GPU rows is a row of `steps`, so this is the inner join on step.
    kind_enum = pl.Enum(sorted(set(kinds["kind"].to_list())))  # ranks as the text (below), one byte a row
    gpu = gpu.with_columns(gpu["step"].replace_strict(kinds["step"], kinds["kind"].cast(kind_enum), default=None,
                                                      return_dtype=kind_enum).alias("kind"))
    as_one_step = gpu.with_columns(pl.col("kind").rank("dense").cast(pl.Int64).alias("step"))
    step_of_kind = dict(as_one_step.select("kind", "step").unique().iter_rows())
    collectives = _collectives(as_one_step)
    tops = _top_kernels(as_one_step, top_n)
    work, unshaped = _work(as_one_step)
    no_shape = _unshaped_kernels(as_one_step)
    out = []
    for kind in sorted({s.kind for s in steps}):
        group = [s for s in steps if s.kind == kind]
        classes: dict[str, float] = {}
        for s in group:
            for c, v in s.classes_us.items():
                classes[c] = classes.get(c, 0.0) + v
        k = step_of_kind.get(kind, -1)
        out.append(KindSummary(
            kind=kind, steps=len(group), tokens=_sum_optional([s.tokens for s in group]),
            generated_tokens=_sum_optional([s.generated_tokens for s in group]),
            gpu_busy_us=sum(s.gpu_busy_us for s in group), gpu_span_us=sum(s.gpu_span_us for s in group),
            idle_us=sum(s.idle_us for s in group), classes_us=dict(sorted(classes.items())),
            collectives=collectives.get(k, {}), comm_exposed_us=sum(s.comm_exposed_us for s in group),
            kernels=sum(s.kernels for s in group), launches=sum(s.launches for s in group),
            graph_launches=sum(s.graph_launches for s in group),
            launch_cpu_us=sum(s.launch_cpu_us for s in group), top_kernels=tops.get(k, ()),
            work=work.get(k, ()), unshaped_us=unshaped.get(k, {}), unshaped_kernels=no_shape.get(k, ()),
            graph_idle_us=sum(s.graph_idle_us for s in group),
        ))
    return tuple(out)


def _unshaped_kernels(gpu: pl.DataFrame, n: int = 5) -> dict[int, tuple[tuple[str, str, float], ...]]:
    """Per step: the `n` (kernel name, reason) pairs without a shape that hold the most GPU µs."""
    if "shape_status" not in gpu.columns:
        return {}
    stats = (gpu.filter(pl.col("shape_status") != "shaped").group_by("step", "name", "shape_status")
             .agg(pl.col("dur_us").sum()).sort(["step", "dur_us", "name"], descending=[False, True, False])
             .group_by("step", maintain_order=True).head(n))
    out: dict[int, list[tuple[str, str, float]]] = {}
    for step, name, why, us in stats.iter_rows():
        out.setdefault(int(step), []).append((str(name), str(why), float(us)))
    return {k: tuple(v) for k, v in out.items()}
