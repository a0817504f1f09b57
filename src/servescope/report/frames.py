"""Results as Polars DataFrames, for notebooks and scripts (`.to_pandas()` works where pandas + pyarrow are
installed).

Does: flatten a TraceAnalysis into one row per (rank, step) — `steps_frame` —, per (rank, step, kernel name) —
`kernels_frame` —, per (rank, step kind, kernel with a shape) on the roofline — `roofline_frame` — and per (rank,
step, collective) — `collectives_frame` —, and a model sweep (a list of
ServingPoint) into one row per concurrency — `points_frame`. Column names carry their unit (`_us`, `_s`,
`_bytes`, `_tok_s`). Values are copied from the result objects; nothing is recomputed.
Does not: analyse, model or format; `kernels_frame` holds the kernels the analysis kept (the top `top_n` per
step of `analyze_trace`; pass a large `top_n` there for every kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from servescope.analysis.analyze import TraceAnalysis
    from servescope.perfmodel.serving import ServingPoint

STEP_COLUMNS = {
    "rank": pl.Int64, "step": pl.Int64, "label": pl.Utf8, "kind": pl.Utf8, "batch_size": pl.Int64,
    "tokens": pl.Int64, "source": pl.Utf8, "gpu_start_us": pl.Float64, "gpu_end_us": pl.Float64,
    "gpu_span_us": pl.Float64, "gpu_busy_us": pl.Float64, "idle_us": pl.Float64, "kernel_sum_us": pl.Float64,
    "comm_exposed_us": pl.Float64, "comm_overlapped_us": pl.Float64, "kernels": pl.Int64, "launches": pl.Int64,
    "graph_launches": pl.Int64, "launch_cpu_us": pl.Float64, "devices": pl.Int64,
}
KERNEL_COLUMNS = {
    "rank": pl.Int64, "step": pl.Int64, "kind": pl.Utf8, "name": pl.Utf8, "kernel_class": pl.Utf8,
    "collective": pl.Utf8, "calls": pl.Int64, "total_us": pl.Float64, "median_us": pl.Float64,
    "blocks_per_sm": pl.Float64, "grid_blocks": pl.Int64,
}
COLLECTIVE_COLUMNS = {
    "rank": pl.Int64, "step": pl.Int64, "kind": pl.Utf8, "collective": pl.Utf8, "calls": pl.Int64,
    "total_us": pl.Float64, "mean_us": pl.Float64, "median_us": pl.Float64, "p90_us": pl.Float64,
}
POINT_COLUMNS = {
    "concurrency": pl.Int64, "batch": pl.Int64, "max_concurrency": pl.Int64, "tpot_s": pl.Float64,
    "ttft_s": pl.Float64, "output_tok_s": pl.Float64, "step_time_s": pl.Float64, "floor_s": pl.Float64,
    "memory_bytes_per_gpu": pl.Float64, "dominant": pl.Utf8,
}


def _frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def steps_frame(a: TraceAnalysis) -> pl.DataFrame:
    """One row per (rank, step), plus one `<class>_us` column (union µs) per kernel class seen in any step."""
    classes = sorted({c for b in a.ranks for s in b.steps for c in s.classes_us})
    schema = {**STEP_COLUMNS, **{f"{c}_us": pl.Float64 for c in classes}}
    rows = [
        {**{k: getattr(s, k) for k in STEP_COLUMNS if k not in ("rank", "step")}, "rank": b.rank, "step": s.index,
         **{f"{c}_us": s.classes_us.get(c, 0.0) for c in classes}}
        for b in a.ranks for s in b.steps
    ]
    return _frame(rows, schema)


def kernels_frame(a: TraceAnalysis) -> pl.DataFrame:
    """One row per (rank, step, kernel name) the analysis kept."""
    rows = [
        {"rank": b.rank, "step": s.index, "kind": s.kind, "name": k.name, "kernel_class": k.kernel_class,
         "collective": k.collective, "calls": k.calls, "total_us": k.total_us, "median_us": k.median_us,
         "blocks_per_sm": k.blocks_per_sm, "grid_blocks": k.grid_blocks}
        for b in a.ranks for s in b.steps for k in s.top_kernels
    ]
    return _frame(rows, KERNEL_COLUMNS)


ROOFLINE_COLUMNS = {
    "rank": pl.Int64, "kind": pl.Utf8, "name": pl.Utf8, "kernel_class": pl.Utf8, "calls": pl.Int64,
    "shaped_calls": pl.Int64, "total_us": pl.Float64, "shaped_us": pl.Float64, "flops": pl.Float64,
    "bytes": pl.Float64, "flop_per_byte": pl.Float64, "achieved_flop_per_s": pl.Float64,
    "achieved_bytes_per_s": pl.Float64, "frac_of_peak": pl.Float64, "bound": pl.Utf8, "achievable_us": pl.Float64,
    "frac_of_achievable": pl.Float64, "waves": pl.Float64, "tail_efficiency": pl.Float64, "gpu": pl.Utf8,
}


def roofline_frame(a: TraceAnalysis) -> pl.DataFrame:
    """One row per (rank, step kind, kernel) of the top kernels with a shape: work, achieved rates, fraction of
    the datasheet peak and of the measured reference (`analysis.roofline.roofline` against the rank's peaks: those
    the analysis resolved, else `advise.peaks_for`); fractions are 0–1, not %."""
    from servescope.analysis.roofline import roofline
    from servescope.report.trace_json import rank_peaks

    rows = []
    for i, b in enumerate(a.ranks):
        peaks, _ = rank_peaks(a, i)
        for s in b.kinds:
            for k in s.top_kernels:
                r = roofline(k.work, peaks) if k.work else None
                if r is None:
                    continue
                rows.append({
                    "rank": b.rank, "kind": s.kind, "name": k.name, "kernel_class": k.kernel_class, "calls": k.calls,
                    "shaped_calls": k.shaped_calls, "total_us": k.total_us, "shaped_us": k.shaped_us,
                    "flops": r.flops, "bytes": r.bytes,
                    "flop_per_byte": r.intensity_flops_per_byte if r.flops > 0 else None,
                    "achieved_flop_per_s": r.achieved_flops_per_s, "achieved_bytes_per_s": r.achieved_bytes_per_s,
                    "frac_of_peak": r.frac_of_peak, "bound": r.bound, "achievable_us": r.achievable_us,
                    "frac_of_achievable": r.frac_of_achievable, "waves": k.waves,
                    "tail_efficiency": k.tail_efficiency, "gpu": peaks.name if peaks else None})
    return _frame(rows, ROOFLINE_COLUMNS)


def collectives_frame(a: TraceAnalysis) -> pl.DataFrame:
    """One row per (rank, step, collective): calls and per-call latency statistics."""
    rows = [
        {"rank": b.rank, "step": s.index, "kind": s.kind, "collective": name, "calls": c.calls,
         "total_us": c.total_us, "mean_us": c.mean_us, "median_us": c.median_us, "p90_us": c.p90_us}
        for b in a.ranks for s in b.steps for name, c in s.collectives.items()
    ]
    return _frame(rows, COLLECTIVE_COLUMNS)


def points_frame(points: Sequence[ServingPoint]) -> pl.DataFrame:
    """A model sweep (`predict(scenario, [c…])`): one row per concurrency, plus one `<term>_s` column per TPOT term
    (they add up to `tpot_s`)."""
    terms = list(dict.fromkeys(t for p in points for t in p.terms_s))
    schema = {**POINT_COLUMNS, **{f"{t}_s": pl.Float64 for t in terms}}
    rows = [{**{k: getattr(p, k) for k in POINT_COLUMNS}, **{f"{t}_s": p.terms_s.get(t, 0.0) for t in terms}}
            for p in points]
    return _frame(rows, schema)
