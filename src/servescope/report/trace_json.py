"""The `servescope.trace/1` JSON document (see docs/json.md). Presentation only: fields are copied from
the analysis and rounded; nothing is computed here beyond unit-free formatting."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from servescope.advise import peaks_for
from servescope.analysis.analyze import TraceAnalysis
from servescope.analysis.breakdown import (
    CollectiveStats,
    KernelStats,
    KindSummary,
    StepBreakdown,
    TraceBreakdown,
)
from servescope.analysis.findings import Finding
from servescope.analysis.roofline import Peaks, Roofline, WorkGroup, roofline
from servescope.report.ranks_json import cross_rank_document

SCHEMA = "servescope.trace/1"


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _collectives(c: dict[str, CollectiveStats]) -> dict[str, dict[str, Any]]:
    return {
        name: {"calls": s.calls, "total_us": _r(s.total_us), "mean_us": _r(s.mean_us), "median_us": _r(s.median_us), "p90_us": _r(s.p90_us),
               "sized_calls": s.sized_calls, "message_bytes_total": s.message_bytes_total,
               "message_bytes_median": _r(s.message_bytes_median, 1), "group_size": s.group_size,
               "algbw_bytes_per_s": _r(s.algbw_bytes_per_s, 0), "busbw_bytes_per_s": _r(s.busbw_bytes_per_s, 0)}
        for name, s in c.items()
    }


def rank_peaks(a: TraceAnalysis, i: int) -> tuple[Peaks | None, tuple[str, ...]]:
    """Rank i's peaks and notes: those the analysis resolved, else `advise.peaks_for` (the same resolver)."""
    if len(a.peaks) > i:
        return a.peaks[i]
    b = a.ranks[i]
    return peaks_for(b.device_name, b.num_sms)


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 2)


def _roofline_doc(r: Roofline | None) -> dict[str, Any]:
    """The roofline keys of a kernel row or a work entry (null when the work has no shape)."""
    return {
        "achieved_tflops": _r(r.achieved_flops_per_s / 1e12, 4) if r and r.achieved_flops_per_s is not None else None,
        "achieved_tbps": _r(r.achieved_bytes_per_s / 1e12, 4) if r and r.achieved_bytes_per_s is not None else None,
        "flop_per_byte": _r(r.intensity_flops_per_byte, 3) if r and r.flops > 0 else None,
        "pct_of_peak": _pct(r.frac_of_peak) if r else None,
        "pct_of_achievable": _pct(r.frac_of_achievable) if r else None,
        "achievable_us": _r(r.achievable_us) if r else None,
        "bound": r.bound if r else None,
    }


def _work_doc(groups: Iterable[WorkGroup], peaks: Peaks | None) -> dict[str, Any]:
    gs = list(groups)
    r = roofline(gs, peaks)
    return {"calls": sum(g.calls for g in gs), "shaped_us": _r(sum(g.dur_us for g in gs)),
            "flops": _r(r.flops, 0) if r else None, "bytes": _r(r.bytes, 0) if r else None, **_roofline_doc(r)}


def _work(groups: tuple[WorkGroup, ...], unshaped: dict[str, float], peaks: Peaks | None) -> dict[str, Any]:
    classes = sorted({g.kernel_class for g in groups})
    return {"shaped_us": _r(sum(g.dur_us for g in groups)), "unshaped_us": {k: _r(v) for k, v in unshaped.items()},
            "all": _work_doc(groups, peaks),
            "classes": {c: _work_doc((g for g in groups if g.kernel_class == c), peaks) for c in classes}}


def _kernel(k: KernelStats, peaks: Peaks | None = None) -> dict[str, Any]:
    r = roofline(k.work, peaks) if k.work else None
    return {
        "name": k.name, "class": k.kernel_class, "collective": k.collective, "calls": k.calls,
        "total_us": _r(k.total_us), "median_us": _r(k.median_us), "blocks_per_sm": _r(k.blocks_per_sm, 4),
        "grid_blocks": k.grid_blocks,
        "shaped_calls": k.shaped_calls, "shaped_us": _r(k.shaped_us), "flops": _r(k.flops, 0), "bytes": _r(k.bytes, 0),
        "dtypes": sorted({g.dtype for g in k.work if g.dtype}), **_roofline_doc(r),
        "waves": _r(k.waves, 4), "tail_efficiency": _r(k.tail_efficiency, 4),
        "no_shape": k.no_shape if k.shaped_calls < k.calls else None,
    }


def _step(s: StepBreakdown, peaks: Peaks | None = None) -> dict[str, Any]:
    return {
        "index": s.index, "label": s.label, "kind": s.kind, "batch_size": s.batch_size, "tokens": s.tokens,
        "source": s.source, "gpu_busy_us": _r(s.gpu_busy_us), "gpu_span_us": _r(s.gpu_span_us),
        "idle_us": _r(s.idle_us), "graph_idle_us": _r(s.graph_idle_us), "kernel_sum_us": _r(s.kernel_sum_us),
        "classes": {c: _r(v) for c, v in s.classes_us.items()},
        "class_sum_us": {c: _r(v) for c, v in s.class_sum_us.items()},
        "class_calls": s.class_calls,
        "collectives": _collectives(s.collectives),
        "comm_exposed_us": _r(s.comm_exposed_us), "comm_overlapped_us": _r(s.comm_overlapped_us),
        "kernels": s.kernels, "launches": s.launches, "graph_launches": s.graph_launches,
        "launch_cpu_us": _r(s.launch_cpu_us), "gpu_start_us": _r(s.gpu_start_us), "gpu_end_us": _r(s.gpu_end_us),
        "cpu_start_us": _r(s.cpu_start_us), "cpu_end_us": _r(s.cpu_end_us),
        "top_kernels": [_kernel(k, peaks) for k in s.top_kernels],
        "work": _work(s.work, s.unshaped_us, peaks),
    }


def _kind(k: KindSummary, peaks: Peaks | None = None) -> dict[str, Any]:
    return {
        "kind": k.kind, "steps": k.steps, "tokens": k.tokens, "generated_tokens": k.generated_tokens,
        "gpu_busy_us": _r(k.gpu_busy_us), "gpu_span_us": _r(k.gpu_span_us), "idle_us": _r(k.idle_us),
        "graph_idle_us": _r(k.graph_idle_us),
        "classes": {c: _r(v) for c, v in k.classes_us.items()},
        "collectives": {
            name: {**doc, "calls_per_step": _r(k.calls_per_step(name)), "calls_per_generated_token":
                   _r(k.calls_per_token(name))}
            for name, doc in _collectives(k.collectives).items()
        },
        "comm_exposed_us": _r(k.comm_exposed_us), "launches": k.launches, "graph_launches": k.graph_launches,
        "top_kernels": [_kernel(t, peaks) for t in k.top_kernels],
        "work": _work(k.work, k.unshaped_us, peaks),
        "unshaped_kernels": [{"name": n, "reason": why, "total_us": _r(us)} for n, why, us in k.unshaped_kernels],
    }


def _finding(f: Finding) -> dict[str, Any]:
    evidence = {k: (_r(v, 4) if isinstance(v, float) else v) for k, v in f.evidence.items()}
    return {"code": f.code, "severity": f.severity, "message": f.message, "evidence": evidence, "rank": f.rank,
            "kind": f.kind, "mitigations": list(f.mitigations)}


def _peaks_doc(peaks: Peaks | None, notes: tuple[str, ...]) -> dict[str, Any]:
    return {"peaks": None if peaks is None else {
        "gpu": peaks.name, "source": peaks.source, "flops_per_s": dict(peaks.flops_per_s),
        "hbm_bw_bytes_per_s": peaks.hbm_bw_bytes_per_s, "sm_count": peaks.sm_count,
        "gemm_curve": peaks.achievable_source}, "roofline_notes": list(notes)}


def _rank(b: TraceBreakdown, resolved: tuple[Peaks | None, tuple[str, ...]]) -> dict[str, Any]:
    peaks, notes = resolved
    return {"rank": b.rank, "file": b.file, "world_size": b.world_size, "device": b.device_name,
            "num_sms": b.num_sms, "step_method": b.method, "outside_steps_events": b.outside_steps_events,
            "outside_steps_us": _r(b.outside_steps_us), "steps": [_step(s, peaks) for s in b.steps],
            "by_kind": [_kind(k, peaks) for k in b.kinds], **_peaks_doc(peaks, notes)}


def trace_document(a: TraceAnalysis) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "path": a.path,
        "ranks": [_rank(b, rank_peaks(a, i)) for i, b in enumerate(a.ranks)],
        "capture": a.capture,
        "cross_rank": cross_rank_document(a.cross_rank),
        "findings": [_finding(f) for f in a.findings],
        "warnings": list(a.warnings),
    }
