"""Per-step breakdown of GPU time: busy and idle, time per kernel class and collective, overlap, launches.

Does: turn a classified, step-attributed trace into numbers, every share with a named denominator
(see docs/metrics.md). Busy time is an interval union per device (kernels overlap: PDL, concurrent streams).
The records are analysis/breakdown_records.py's and the per-step statistics analysis/_step_stats.py's (this module
assembles them per step, per kind and per rank, and re-exports the records, COMMUNICATION and busbw_factor).
Does not: load files, decide what is a problem (findings), or format anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import polars as pl

from servescope.analysis._step_stats import (
    COMMUNICATION,
    GRAPH_LAUNCH_NAMES,
    busiest_device,
    class_totals,
    graph_idle_by_step,
    in_steps,
    launch_stats,
    step_collectives,
    step_top_kernels,
    step_work,
    union_lengths,
    unshaped_kernels_by_step,
)
from servescope.analysis.breakdown_records import (
    CollectiveStats,
    KernelStats,
    KindSummary,
    StepBreakdown,
    TraceBreakdown,
    busbw_factor,
)
from servescope.analysis.classify import classify_gpu
from servescope.analysis.gpu_rows import (
    attach_work_chunked,
    compact,
    split_events,
    take_split,
)
from servescope.analysis.roofline import (
    WORK_COLUMNS,
    CaptureWork,
)
from servescope.analysis.steps import StepTable, find_steps
from servescope.analysis.timeline import step_timelines
from servescope.progress import stage
from servescope.trace.types import Trace

# the records are analysis.breakdown_records', the statistics analysis._step_stats': re-exported
__all__ = ["COMMUNICATION", "GRAPH_LAUNCH_NAMES", "CollectiveStats", "KernelStats", "KindSummary", "StepBreakdown",
           "TraceBreakdown", "breakdown", "breakdown_steps", "breakdown_taking", "busbw_factor", "gaps_after_steps_us",
           "summarize_by_kind"]




def breakdown_steps(table: StepTable, top_n: int = 10) -> tuple[StepBreakdown, ...]:
    """One StepBreakdown per step of `table` (GPU rows must carry kernel_class and collective)."""
    gpu = in_steps(table.gpu_events)
    busy = union_lengths(gpu, None)
    by_class = union_lengths(gpu, "kernel_class")
    compute = union_lengths(gpu, None, where=pl.col("kernel_class") != COMMUNICATION)
    collectives = step_collectives(gpu)
    tops = step_top_kernels(gpu, top_n)
    classes = class_totals(gpu)
    work, unshaped = step_work(gpu)
    launches = launch_stats(table.launches)
    graph_idle = graph_idle_by_step(gpu, table.launches)
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
        device = trace.device_info(busiest_device(table.gpu_events)) if trace.devices else None
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


def _sum_optional(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present and len(present) == len(values) else None


def summarize_by_kind(table: StepTable, steps: tuple[StepBreakdown, ...], top_n: int = 10) -> tuple[KindSummary, ...]:
    """Sum steps per kind; collective medians and top kernels come from the raw calls of those steps."""
    kinds = table.steps.select("step", "kind")
    gpu = in_steps(table.gpu_events).drop("kind", strict=False)
    # Each row's step kind; every step of the GPU rows is a row of `steps`, so this is the inner join on step.
    kind_enum = pl.Enum(sorted(set(kinds["kind"].to_list())))  # ranks as the text (below), one byte a row
    gpu = gpu.with_columns(gpu["step"].replace_strict(kinds["step"], kinds["kind"].cast(kind_enum), default=None,
                                                      return_dtype=kind_enum).alias("kind"))
    as_one_step = gpu.with_columns(pl.col("kind").rank("dense").cast(pl.Int64).alias("step"))
    step_of_kind = dict(as_one_step.select("kind", "step").unique().iter_rows())
    collectives = step_collectives(as_one_step)
    tops = step_top_kernels(as_one_step, top_n)
    work, unshaped = step_work(as_one_step)
    no_shape = unshaped_kernels_by_step(as_one_step)
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


