"""Engine steps: find each serving step in a trace and attribute every GPU event to one.

Does: parse step labels on any CPU-side kind (vLLM `execute_context_…_generation_…` plain and detailed, and
the Aug 2025 `execute_new_N_cached_M`; SGLang `step[EXTEND|DECODE|MIXED…]`, ATOM `prefill[…]`/`decode[…]`,
`ProfilerStep#N`); attribute kernels to steps through their launch's correlation (so a CUDA/HIP graph replay fans
out to all of its kernels); with no labels, segment the GPU timeline at idle gaps.
Parsing the labels themselves: analysis.step_labels (re-exported here).
Does not: classify kernels, sum times, or judge anything (see breakdown and findings).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from servescope.analysis._series import series
from servescope.analysis.step_labels import LABEL_PREFIX, StepLabel, parse_step_label
from servescope.trace.types import GPU_EVENT_KINDS

LAUNCH_KINDS = ("runtime", "driver")
CPU_LABEL_KINDS = ("user_annotation", "cpu_op")

# the labels' parsing is analysis.step_labels', re-exported
__all__ = ["CPU_LABEL_KINDS", "LAUNCH_KINDS", "LENGTH_COLUMNS", "StepLabel", "StepTable", "find_steps",
           "idle_gap_threshold_us", "parse_step_label"]

@dataclass(frozen=True)
class StepTable:
    """Steps and the GPU events attributed to them.

    `steps`: one row per step: step, label, kind, batch_size, tokens, cpu_start_us, cpu_end_us, gpu_start_us,
    gpu_end_us, source, and the label's attention length sums attn_sq, attn_sk, attn_sqsq, attn_sqsk (null
    without). `gpu_events`: the GPU rows (kernel, memcpy, memset) of the events frame with a `step` column (null for
    events outside every step). `launches`: launch rows (runtime/driver) with `step` (and the LAUNCH_COLUMNS of the
    events frame). `method`: how steps were found, in words, for the report.
    """

    steps: pl.DataFrame
    gpu_events: pl.DataFrame
    launches: pl.DataFrame
    method: str


def _label_rows(events: pl.DataFrame) -> pl.DataFrame:
    """CPU step annotations with parsed labels, innermost first when labels nest (SGLang wraps step[…]).

    Labels are read on every CPU-side kind: PyTorch <= 1.9 writes `ProfilerStep#N` as `cat: Operator`
    (kind cpu_op). Candidates are picked by a vectorised prefix test; only those are parsed in Python;
    the same label over the same interval on two kinds counts once."""
    ann = (
        events.filter(pl.col("kind").is_in(CPU_LABEL_KINDS) & pl.col("name").str.contains(LABEL_PREFIX).fill_null(False))
        .select("name", "ts_us", "dur_us")
        .unique(maintain_order=True)
    )
    rows = []
    for name, ts, dur in ann.iter_rows():
        label = parse_step_label(name)
        if label is not None:
            rows.append((name, ts, ts + dur, label))
    if not rows:
        return _empty_labels()
    # Engine labels win over ProfilerStep.
    engine = [r for r in rows if r[3].source != "profiler_step"]
    rows = _merge_nested(engine or rows)
    return pl.DataFrame(
        {
            "label": [r[0] for r in rows],
            "cpu_start_us": [r[1] for r in rows],
            "cpu_end_us": [r[2] for r in rows],
            "kind": [r[3].kind for r in rows],
            "batch_size": [r[3].batch_size for r in rows],
            "tokens": [r[3].tokens for r in rows],
            "source": [r[3].source for r in rows],
            **{c: [r[3].lengths[i] if r[3].lengths else None for r in rows] for i, c in enumerate(LENGTH_COLUMNS)},
        },
        schema=_LABEL_SCHEMA,
    )


def _merge_nested(rows: list[tuple]) -> list[tuple]:
    """Resolve nested labels. An outer label around exactly one inner label is the same step seen twice (SGLang's
    `step[…]` inside a patched `execute_…`): keep the inner label over the outer interval, so input preparation
    and sampling launched around it stay in the step. An outer label around several is a wrapper: dropped."""
    out = []
    for r in rows:
        if any(_contains(o, r) for o in rows if o is not r):
            continue  # an inner label; handled from its outer one below
        inner = [o for o in rows if o is not r and _contains(r, o)]
        if len(inner) == 1:
            label = inner[0][3]
            if label.lengths is None and r[3].lengths is not None:  # the outer's length sums are the same step's
                label = replace(label, lengths=r[3].lengths)
            out.append((inner[0][0], r[1], r[2], label))
        elif not inner:
            out.append(r)
        else:
            out.extend(o for o in inner if not any(_contains(x, o) for x in inner if x is not o))
    return sorted(out, key=lambda r: r[1])


def _contains(outer: tuple, inner: tuple) -> bool:
    return bool(outer[1] <= inner[1] and inner[2] <= outer[2] and (outer[1], outer[2]) != (inner[1], inner[2]))


_LABEL_SCHEMA = {
    "label": pl.Utf8,
    "cpu_start_us": pl.Float64,
    "cpu_end_us": pl.Float64,
    "kind": pl.Utf8,
    "batch_size": pl.Int64,
    "tokens": pl.Int64,
    "source": pl.Utf8,
    **{c: pl.Int64 for c in ("attn_sq", "attn_sk", "attn_sqsq", "attn_sqsk")},
}
LENGTH_COLUMNS = ("attn_sq", "attn_sk", "attn_sqsq", "attn_sqsk")  # StepLabel.lengths, one column each


def _empty_labels() -> pl.DataFrame:
    return pl.DataFrame(schema=_LABEL_SCHEMA)


def _assign_by_interval(times_us: np.ndarray, starts_us: np.ndarray, ends_us: np.ndarray) -> np.ndarray:
    """Index of the interval [start, end] holding each time, or -1. Intervals are sorted and disjoint. (In place
    where it can: a trace of millions of kernels.)"""
    idx = np.searchsorted(starts_us, times_us, side="right")
    idx -= 1
    end = ends_us[np.maximum(idx, 0)]
    outside = (idx < 0) | ~(times_us <= end)  # not `>`: a NaN time is outside, as before
    del end
    idx[outside] = -1
    return idx


def _launch_times(launches: pl.DataFrame) -> pl.DataFrame:
    """One CPU launch time per correlation id (the launch call of a kernel or a whole graph), from the
    launch rows (runtime/driver) of the events frame."""
    return (
        launches.filter(pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("ts_us").min().alias("launch_ts_us"))
    )


# What `launches` keeps of a launch row: a launch's own columns, not the GPU or collective ones (all null on it).
LAUNCH_COLUMNS = ("kind", "name", "pid", "tid", "ts_us", "dur_us", "correlation", "external_id")


def _launch_rows(events: pl.DataFrame) -> pl.DataFrame:
    """The launch rows (runtime/driver) of `events`, LAUNCH_COLUMNS only (those `events` has)."""
    columns = [c for c in LAUNCH_COLUMNS if c in events.columns]
    return events.lazy().filter(pl.col("kind").is_in(LAUNCH_KINDS)).select(columns).collect()


def _by_correlation(gpu: pl.DataFrame, values: pl.DataFrame, column: str) -> pl.Series:
    """`values[column]` of each GPU row's correlation (`values` holds one row per correlation), null when none:
    a left join's column without copying the GPU rows."""
    return gpu["correlation"].replace_strict(values["correlation"], values[column], default=None,
                                             return_dtype=values.schema[column]).alias(column)


def _attribute_labelled(events: pl.DataFrame, gpu: pl.DataFrame, labels: pl.DataFrame) -> tuple[
        pl.DataFrame, pl.DataFrame]:
    """Attribute GPU rows to labelled steps by launch time; GPU rows with no launch go by their own start."""
    launches = _launch_rows(events)  # once: used for times and steps below
    gpu = gpu.with_columns(_by_correlation(gpu, _launch_times(launches), "launch_ts_us"))
    starts = labels["cpu_start_us"].to_numpy()
    ends = labels["cpu_end_us"].to_numpy()
    launch_ts = gpu["launch_ts_us"]
    step = _assign_by_interval(launch_ts.fill_null(-np.inf).to_numpy(), starts, ends)
    no_launch = np.flatnonzero(launch_ts.is_null().to_numpy())
    del launch_ts
    if no_launch.size:  # GPU rows with no launch go by their own start
        step[no_launch] = _gpu_annotation_fallback(events, gpu["ts_us"].to_numpy()[no_launch], labels)
    gpu = gpu.with_columns(_steps_or_null(step))
    launch_step = _assign_by_interval(launches["ts_us"].to_numpy(), starts, ends)
    launches = launches.with_columns(series("step", launch_step, pl.Int64)).with_columns(
        pl.when(pl.col("step") >= 0).then(pl.col("step")).otherwise(None).alias("step")
    )
    return gpu, launches


def _steps_or_null(step: np.ndarray) -> pl.Series:
    """The `step` column: -1 (outside every step) as null."""
    column = series("step", step, pl.Int64)
    outside = np.flatnonzero(step < 0)
    return column.scatter(outside, None) if outside.size else column


def _gpu_annotation_fallback(events: pl.DataFrame, gpu_ts_us: np.ndarray, labels: pl.DataFrame) -> np.ndarray:
    """For GPU rows without a launch (their starts, µs): the step whose GPU annotation (same label) holds the
    row's start."""
    gpu_ann = events.filter(pl.col("kind") == "gpu_user_annotation").select("name", "ts_us", "dur_us")
    spans = gpu_ann.join(
        labels.with_row_index("step").select("step", pl.col("label").alias("name")), on="name"
    ).sort("ts_us")
    if spans.height == 0:
        return np.full(gpu_ts_us.size, -1)
    starts = spans["ts_us"].to_numpy()
    idx = _assign_by_interval(gpu_ts_us, starts, starts + spans["dur_us"].to_numpy())
    steps = spans["step"].to_numpy().astype(np.int64)
    return np.where(idx >= 0, steps[np.clip(idx, 0, None)], -1)


def _gap_segments(gpu: pl.DataFrame, min_gap_us: float) -> np.ndarray:
    """Segment id per GPU row (sorted by start): a new segment starts after an idle gap ≥ min_gap_us."""
    starts = gpu["ts_us"].to_numpy()
    ends = starts + gpu["dur_us"].to_numpy()
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    running_end = np.maximum.accumulate(ends)
    gaps = starts[1:] - running_end[:-1]
    return np.concatenate([[0], np.cumsum(gaps >= min_gap_us)]).astype(np.int64)


def idle_gap_threshold_us(gpu: pl.DataFrame) -> float:
    """Gap that separates steps when nothing labels them: 1 ms, or 20× the median gap if larger.

    Assumption: inside a step, kernels queue back to back (gaps of µs); between engine steps the GPU waits
    for the scheduler and sampling on the CPU (hundreds of µs to ms).
    """
    starts = np.sort(gpu["ts_us"].to_numpy())
    if starts.size < 2:
        return 1000.0
    order = np.argsort(gpu["ts_us"].to_numpy())
    ends = (gpu["ts_us"].to_numpy() + gpu["dur_us"].to_numpy())[order]
    gaps = starts[1:] - np.maximum.accumulate(ends)[:-1]
    positive = gaps[gaps > 0]
    median_gap = float(np.median(positive)) if positive.size else 0.0
    return max(1000.0, 20.0 * median_gap)


def _attribute_gaps(events: pl.DataFrame, gpu: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    ts = gpu["ts_us"].to_numpy()
    if not bool(np.all(ts[1:] >= ts[:-1])):  # rows of a loaded trace are in order already: no copy then
        gpu = gpu.sort("ts_us")
    del ts
    threshold = idle_gap_threshold_us(gpu)
    gpu = gpu.with_columns(series("step", _gap_segments(gpu, threshold), pl.Int64))
    per_step = gpu.group_by("step").agg(
        pl.col("ts_us").min().alias("gpu_start_us"), (pl.col("ts_us") + pl.col("dur_us")).max().alias("gpu_end_us")
    )
    launch_step = _launches_for(events, gpu)
    steps = per_step.sort("step").with_columns(
        pl.format("idle-gap segment {}", pl.col("step")).alias("label"),
        pl.lit("unknown").alias("kind"),
        pl.lit(None, pl.Int64).alias("batch_size"),
        pl.lit(None, pl.Int64).alias("tokens"),
        pl.lit("idle_gap").alias("source"),
        *(pl.lit(None, pl.Int64).alias(c) for c in LENGTH_COLUMNS),
    )
    cpu = launch_step.group_by("step").agg(
        pl.col("ts_us").min().alias("cpu_start_us"), (pl.col("ts_us") + pl.col("dur_us")).max().alias("cpu_end_us")
    )
    steps = steps.join(cpu, on="step", how="left")
    return steps, gpu, launch_step


def _launches_for(events: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Launch rows with the step of the GPU rows they launched (null when they launched nothing seen)."""
    corr_step = (gpu.lazy().filter(pl.col("correlation").is_not_null()).group_by("correlation")
                 .agg(pl.col("step").min()).collect())
    launches = _launch_rows(events)
    return launches.with_columns(_by_correlation(launches, corr_step, "step"))


def _gpu_spans(gpu: pl.DataFrame) -> pl.DataFrame:
    return (  # lazy: the filter copies the three columns read, not every GPU column
        gpu.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            pl.col("ts_us").min().alias("gpu_start_us"),
            (pl.col("ts_us") + pl.col("dur_us")).max().alias("gpu_end_us"),
        )
        .collect()
    )


_STEP_COLUMNS = [
    "step", "label", "kind", "batch_size", "tokens", "cpu_start_us", "cpu_end_us", "gpu_start_us", "gpu_end_us",
    "source", *LENGTH_COLUMNS,
]


def find_steps(events: pl.DataFrame, gpu: pl.DataFrame | None = None) -> StepTable:
    """Find steps from labels (engine labels, else ProfilerStep#N), else from GPU idle gaps. `gpu`: the GPU rows
    of `events`, when the caller holds them already (classified, or only the columns it reads on;
    `analysis.classify.classify_gpu`), and then `events` needs only the other rows; default: `events`' own."""
    if gpu is None:
        gpu = events.filter(pl.col("kind").is_in(GPU_EVENT_KINDS))
    labels = _label_rows(events)
    if labels.height:
        gpu, launches = _attribute_labelled(events, gpu, labels)
        steps = labels.with_row_index("step").with_columns(pl.col("step").cast(pl.Int64))
        steps = steps.join(_gpu_spans(gpu), on="step", how="left")
        source = labels["source"][0]
        method = f"{labels.height} step label(s) ({source}); kernels attributed by their launch's correlation"
    else:
        steps, gpu, launches = _attribute_gaps(events, gpu)
        method = (
            "no step labels in the trace: steps are GPU segments separated by idle gaps of at least "
            f"{idle_gap_threshold_us(gpu):.0f} µs"
        )
    return StepTable(steps=steps.select(_STEP_COLUMNS).sort("step"), gpu_events=gpu, launches=launches, method=method)
