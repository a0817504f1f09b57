"""The `servescope.trace/1` JSON document (see docs/json-schema.md). Presentation only: fields are copied from
the analysis and rounded; nothing is computed here beyond unit-free formatting."""

from __future__ import annotations

from typing import Any

from servescope.analysis.analyze import TraceAnalysis
from servescope.analysis.breakdown import CollectiveStats, KernelStats, KindSummary, StepBreakdown
from servescope.analysis.findings import Finding
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


def _kernel(k: KernelStats) -> dict[str, Any]:
    return {
        "name": k.name, "class": k.kernel_class, "collective": k.collective, "calls": k.calls,
        "total_us": _r(k.total_us), "median_us": _r(k.median_us), "blocks_per_sm": _r(k.blocks_per_sm, 4),
        "grid_blocks": k.grid_blocks,
    }


def _step(s: StepBreakdown) -> dict[str, Any]:
    return {
        "index": s.index, "label": s.label, "kind": s.kind, "batch_size": s.batch_size, "tokens": s.tokens,
        "source": s.source, "gpu_busy_us": _r(s.gpu_busy_us), "gpu_span_us": _r(s.gpu_span_us),
        "idle_us": _r(s.idle_us), "kernel_sum_us": _r(s.kernel_sum_us),
        "classes": {c: _r(v) for c, v in s.classes_us.items()},
        "class_sum_us": {c: _r(v) for c, v in s.class_sum_us.items()},
        "class_calls": s.class_calls,
        "collectives": _collectives(s.collectives),
        "comm_exposed_us": _r(s.comm_exposed_us), "comm_overlapped_us": _r(s.comm_overlapped_us),
        "kernels": s.kernels, "launches": s.launches, "graph_launches": s.graph_launches,
        "launch_cpu_us": _r(s.launch_cpu_us), "gpu_start_us": _r(s.gpu_start_us), "gpu_end_us": _r(s.gpu_end_us),
        "cpu_start_us": _r(s.cpu_start_us), "cpu_end_us": _r(s.cpu_end_us),
        "top_kernels": [_kernel(k) for k in s.top_kernels],
    }


def _kind(k: KindSummary) -> dict[str, Any]:
    return {
        "kind": k.kind, "steps": k.steps, "tokens": k.tokens, "generated_tokens": k.generated_tokens,
        "gpu_busy_us": _r(k.gpu_busy_us), "gpu_span_us": _r(k.gpu_span_us), "idle_us": _r(k.idle_us),
        "classes": {c: _r(v) for c, v in k.classes_us.items()},
        "collectives": {
            name: {**doc, "calls_per_step": _r(k.calls_per_step(name)), "calls_per_generated_token":
                   _r(k.calls_per_token(name))}
            for name, doc in _collectives(k.collectives).items()
        },
        "comm_exposed_us": _r(k.comm_exposed_us), "launches": k.launches, "graph_launches": k.graph_launches,
        "top_kernels": [_kernel(t) for t in k.top_kernels],
    }


def _finding(f: Finding) -> dict[str, Any]:
    evidence = {k: (_r(v, 4) if isinstance(v, float) else v) for k, v in f.evidence.items()}
    return {"code": f.code, "severity": f.severity, "message": f.message, "evidence": evidence, "rank": f.rank,
            "kind": f.kind, "mitigations": list(f.mitigations)}


def trace_document(a: TraceAnalysis) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "path": a.path,
        "ranks": [
            {"rank": b.rank, "file": b.file, "world_size": b.world_size, "device": b.device_name,
             "num_sms": b.num_sms, "step_method": b.method, "outside_steps_events": b.outside_steps_events,
             "outside_steps_us": _r(b.outside_steps_us), "steps": [_step(s) for s in b.steps],
             "by_kind": [_kind(k) for k in b.kinds]}
            for b in a.ranks
        ],
        "cross_rank": cross_rank_document(a.cross_rank),
        "findings": [_finding(f) for f in a.findings],
        "warnings": list(a.warnings),
    }
