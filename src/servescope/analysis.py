"""The trace analysis in one call: load → classify → steps → breakdown → findings, for a file or a rank folder.

Does: run the stages for each rank, filter by step kind, collect warnings. Does not: print or format.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from servescope.breakdown import TraceBreakdown, breakdown
from servescope.errors import NoGpuEvents
from servescope.findings import Finding, find_all
from servescope.trace import load_traces

STEP_KINDS = ("prefill", "decode", "mixed", "unknown")


@dataclass(frozen=True)
class TraceAnalysis:
    path: str
    ranks: tuple[TraceBreakdown, ...]
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]


def example_trace() -> Path:
    """The bundled real trace: vLLM gpt-oss on 8×B200, TP=8, one eager prefill step (rank 0; TraceLens, MIT)."""
    return Path(str(resources.files("servescope") / "examples" / "b200_vllm_gptoss_tp8_eager_prefill.json.gz"))


def _only_kind(b: TraceBreakdown, kind: str) -> TraceBreakdown:
    return replace(
        b, steps=tuple(s for s in b.steps if s.kind == kind), kinds=tuple(k for k in b.kinds if k.kind == kind)
    )


def analyze_trace(path: str | Path, kind: str | None = None, top_n: int = 10) -> TraceAnalysis:
    """Analyse a Kineto trace file or a folder of per-rank files. Raises NoGpuEvents when no rank ran kernels."""
    traces = load_traces(path)
    warnings = [w for t in traces for w in t.warnings]
    gpu_traces = [t for t in traces if t.has_gpu_events]
    for t in traces:
        if not t.has_gpu_events and len(traces) > 1:
            warnings.append(f"{t.path}: no GPU events (CPU-only or front-end trace), skipped")
    if not gpu_traces:
        damage = f"; what could be read was damaged: {warnings[0]}" if warnings else ""
        raise NoGpuEvents(f"{path}: no GPU kernels in the trace (a CPU-only or front-end trace?){damage}")
    ranks = [breakdown(t, top_n) for t in gpu_traces]
    if kind is not None:
        present = sorted({s.kind for b in ranks for s in b.steps})
        ranks = [_only_kind(b, kind) for b in ranks]
        if not any(b.steps for b in ranks):
            warnings.append(f"no {kind} steps in the trace (kinds present: {', '.join(present) or 'none'})")
    return TraceAnalysis(str(path), tuple(ranks), tuple(find_all(ranks)), tuple(warnings))
