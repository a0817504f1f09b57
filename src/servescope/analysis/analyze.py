"""The trace analysis in one call: load → classify → steps → breakdown → findings, for a file or a rank folder.

Does: run the stages for each rank — a rank folder's files in parallel worker processes (or Ray tasks) through
`servescope.analysis.ranks` — filter by step kind, build the cross-rank view, and collect warnings, one line per cause;
with a peaks resolver, the kernel findings against measured references (analysis.headroom); the sparse decode
grid-collapse findings (analysis.sparse_decode: with the split-K what-if the peaks' pricer gives) replacing
low_occupancy for the kernels they name; with a capture trace,
shapes for graph-replayed kernels (analysis.capture).
Does not: print or format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.capture import capture_work, check_capture
from servescope.analysis.findings import Finding, find_all
from servescope.analysis.headroom import kernel_headroom
from servescope.analysis.rank_workers import RankPool
from servescope.analysis.ranks import (
    CrossRankView,
    RankOutcome,
    analyze_rank_files,
    cross_rank_view,
    fix_duplicate_ranks,
    group_warnings,
)
from servescope.analysis.roofline import CaptureWork, Peaks
from servescope.analysis.sparse_decode import sparse_decode_findings
from servescope.errors import NoGpuEvents, TraceError
from servescope.progress import stage
from servescope.trace.folder import rank_files, rank_order

# A rank's GPU peaks and measured references, with notes on where they come from (`advise.rank_peaks` resolves them
# from specs and perfmodel by the rank's device name and SM count, and could read its engine; analysis reads neither).
PeaksResolver = Callable[[TraceBreakdown], tuple[Peaks | None, tuple[str, ...]]]


@dataclass(frozen=True)
class TraceAnalysis:
    path: str
    ranks: tuple[TraceBreakdown, ...]
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]
    cross_rank: CrossRankView | None = None  # set when two or more ranks ran kernels
    # per rank: (peaks, notes) when analysed with a PeaksResolver, else () (reports resolve them themselves)
    peaks: tuple[tuple[Peaks | None, tuple[str, ...]], ...] = ()
    capture: str | None = None  # the capture trace that gave graph-replayed kernels their shapes

    def __repr__(self) -> str:
        steps = sum(len(b.steps) for b in self.ranks)
        return (f"TraceAnalysis({self.path!r}: {len(self.ranks)} rank(s), {steps} step(s), "
                f"{len(self.findings)} finding(s), {len(self.warnings)} warning(s))")


def example_trace() -> Path:
    """The bundled real trace: vLLM gpt-oss on 8×B200, TP=8, one eager prefill step (rank 0; TraceLens, MIT)."""
    # opened by path, as specs.tables.DATA (the package is installed as files): importlib.resources costs ~5 ms
    return Path(__file__).parents[1] / "examples" / "b200_vllm_gptoss_tp8_eager_prefill.json.gz"


def _only_kind(b: TraceBreakdown, kind: str) -> TraceBreakdown:
    return replace(
        b, steps=tuple(s for s in b.steps if s.kind == kind), kinds=tuple(k for k in b.kinds if k.kind == kind)
    )


def _sort_key(o: RankOutcome) -> tuple[bool, int, str]:
    return rank_order(o.rank, o.file)


def _file_warnings(o: RankOutcome, several: bool) -> tuple[str, ...]:
    """A file's warnings, ending with why it is left out, if it is."""
    if o.error is not None:
        return (*o.warnings, f"skipped ({str(o.error).removeprefix(f'{o.file}: ')})")
    if o.breakdown is None and several:
        return (*o.warnings, "skipped (no GPU events: a CPU-only or front-end trace)")
    # The breakdown's own warnings (malformed Input Dims, analysis/roofline.py) after the loader's.
    extra = tuple(w for w in o.breakdown.warnings if w not in o.warnings) if o.breakdown is not None else ()
    return (*o.warnings, *extra)


def _outcomes(path: Path, top_n: int, workers: int | RankPool | None, ray_address: str | None,
              capture: CaptureWork | None = None) -> tuple[list[RankOutcome], list[str]]:
    """Loaded outcomes sorted by rank, and the warnings of all files, one line per cause. A file that is not a
    trace or is empty is skipped while another file loads (a stray config.json must not sink a folder); if none
    loads, its error is raised."""
    files, notes = rank_files(path)
    if capture is not None:
        check_capture(capture, files[0])
    outcomes = analyze_rank_files(files, top_n, workers=workers, ray_address=ray_address, capture=capture)
    failed: list[TraceError] = [o.error for o in outcomes if o.error is not None]
    loaded = [o for o in outcomes if o.error is None]
    if not loaded:
        raise failed[0]
    fixed = fix_duplicate_ranks(loaded)
    by_file = {o.file: o for o in [*fixed, *(o for o in outcomes if o.error is not None)]}
    per_file = [(Path(f).name, _file_warnings(by_file[f], len(files) > 1)) for f in map(str, files)]
    return sorted(fixed, key=_sort_key), group_warnings(per_file) + notes


def _sparse_decode(ranks: list[TraceBreakdown], resolved: tuple[tuple[Peaks | None, tuple[str, ...]], ...]
                   ) -> list[Finding]:
    """The sparse decode grid-collapse findings of every rank, with the split-K pricer its peaks carry."""
    pricers = [p.split_k if p is not None else None for p, _ in resolved] or [None] * len(ranks)
    return [f for b, pricer in zip(ranks, pricers, strict=True) for f in sparse_decode_findings(b, pricer)]


def _without_covered(findings: list[Finding]) -> list[Finding]:
    """Drop a `low_occupancy` finding whose kernel a `sparse_decode_grid_collapse` of the same rank and kind names
    (the latter says why and what split-K buys; "low occupancy" alone is the wrong finding)."""
    covered = {(f.rank, f.kind, f.evidence.get("kernel")) for f in findings if f.code == "sparse_decode_grid_collapse"}
    return [f for f in findings if not (f.code == "low_occupancy" and (f.rank, f.kind, f.evidence.get("kernel"))
                                        in covered)]


def analyze_trace(path: str | Path, kind: str | None = None, top_n: int = 10, workers: int | RankPool | None = None,
                  ray_address: str | None = None, peaks: PeaksResolver | None = None,
                  capture: str | Path | None = None) -> TraceAnalysis:
    """Analyse a Kineto trace file or a folder of per-rank files. A folder's files run in `workers` processes
    (default one per core; 1 = in-process) or, with `ray_address` ("local" or a cluster address), as Ray tasks.
    `peaks`: resolves each rank's GPU peaks and measured references (`advise.peaks_for`); with it the findings
    include `kernel_headroom`. `capture`: a CUDA-graph capture trace whose shapes the replayed kernels take (by
    kernel name); one of another GPU or model is refused (CaptureMismatch). Raises NoGpuEvents when no rank ran
    kernels."""
    work = capture_work(Path(capture)) if capture is not None else None
    outcomes, warnings = _outcomes(Path(path), top_n, workers, ray_address, work)
    ranks = [o.breakdown for o in outcomes if o.breakdown is not None]
    if work is not None:
        check_capture(work, Path(path), ranks)
    if not ranks:
        damage = f"; what could be read was damaged: {warnings[0]}" if warnings else ""
        raise NoGpuEvents(f"{path}: no GPU kernels in the trace (a CPU-only or front-end trace?){damage}")
    if kind is not None:
        present = sorted({s.kind for b in ranks for s in b.steps})
        ranks = [_only_kind(b, kind) for b in ranks]
        if not any(b.steps for b in ranks):
            warnings.append(f"no {kind} steps in the trace (kinds present: {', '.join(present) or 'none'})")
    with stage("findings"):  # the peaks and measured references they are held against included
        resolved = tuple(peaks(b) for b in ranks) if peaks is not None else ()
        kernels = [f for b, (p, _) in zip(ranks, resolved, strict=True) for f in kernel_headroom(b, p)] if resolved else []
        kernels += _sparse_decode(ranks, resolved)
        findings = tuple(_without_covered(find_all(ranks, kernels)))
    return TraceAnalysis(str(path), tuple(ranks), findings, tuple(warnings),
                         cross_rank_view(ranks), resolved, str(capture) if capture is not None else None)
