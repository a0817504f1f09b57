"""Kernel tuning headroom: how far each kernel runs from a measured achievable reference at its shape (issue 19
part 4).

Does: `kernel_gaps(summary, peaks)` — per top kernel of a step kind whose shaped work all has a measured reference
(`Peaks.achievable`: a measured per-op curve, resolved by the caller), its measured µs against the reference's µs
for the same work, headroom or not (the same rows are the evidence when tuning pays nothing); `kernel_headroom(b,
peaks)` — the finding: kernels at ≥ HEADROOM_MIN × their reference, and the step time they would give back by
reaching it; or, when every kernel with a reference already runs near it, an info finding saying so with the
numbers.
Does not: invent a reference (kernels without one are counted apart, never compared), read specs or curves (the
caller passes them as `Peaks`), or price the step at another batch (planner.tracks_kernels does).
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.analysis.breakdown import COMMUNICATION, KindSummary, TraceBreakdown
from servescope.analysis.findings import Finding
from servescope.analysis.roofline import Peaks, achievable_us

HEADROOM_MIN = 2.0  # measured ÷ achievable from which a kernel is "well below its achievable" (issue 19)
SAVING_SHARE_HIGH, SAVING_SHARE_MEDIUM = 0.20, 0.05  # step-time share the named kernels would give back


@dataclass(frozen=True)
class KernelGap:
    """One kernel of one step kind against its measured reference: its shaped calls' summed µs over the kind's
    `steps` steps, the reference's µs for the same work, and where the reference comes from."""

    kind: str
    name: str
    kernel_class: str
    calls: int
    measured_us: float
    achievable_us: float
    steps: int
    busy_us: float  # the kind's summed GPU busy µs (the denominator of shares)
    source: str
    model: str
    dtype: str | None
    blocks_per_sm: float | None = None

    @property
    def headroom(self) -> float:
        """Measured ÷ achievable (1 = at the reference; below 1 = faster than the reference)."""
        return self.measured_us / self.achievable_us if self.achievable_us > 0 else float("inf")

    @property
    def saved_us(self) -> float:
        """µs given back (over the kind's steps) if the kernel ran at its reference: max(0, measured − achievable)
        — never more than the kernel's own time."""
        return max(0.0, self.measured_us - self.achievable_us)

    @property
    def tunable(self) -> bool:
        return self.headroom >= HEADROOM_MIN


def kernel_gaps(s: KindSummary, peaks: Peaks | None) -> tuple[KernelGap, ...]:
    """The kind's top kernels (not communication) whose every shaped work group has a measured reference."""
    if peaks is None or peaks.achievable is None:
        return ()
    out = []
    for k in s.top_kernels:
        if k.kernel_class == COMMUNICATION or not k.work or k.shaped_us <= 0:
            continue
        ref = achievable_us(k.work, peaks)
        if ref is None or ref <= 0:
            continue
        models = sorted({g.model for g in k.work})
        dtypes = sorted({g.dtype for g in k.work if g.dtype})
        out.append(KernelGap(s.kind, k.name, k.kernel_class, k.shaped_calls, k.shaped_us, ref, max(s.steps, 1),
                             s.gpu_busy_us, peaks.achievable_source or "a measured reference", "+".join(models),
                             "+".join(dtypes) or None, k.blocks_per_sm))
    return tuple(out)


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _finding(s: KindSummary, gaps: tuple[KernelGap, ...], rank: int | None) -> Finding | None:
    if not gaps:
        return None
    slow = sorted((g for g in gaps if g.tunable), key=lambda g: -g.saved_us)
    measured, reference = sum(g.measured_us for g in gaps), sum(g.achievable_us for g in gaps)
    kind = "unknown-kind" if s.kind == "unknown" else s.kind
    evidence: dict[str, float | int | str | None] = {
        "kernels_with_reference": len(gaps), "measured_us": measured, "achievable_us": reference,
        "busy_us": s.gpu_busy_us, "steps": s.steps, "source": gaps[0].source}
    if not slow:
        worst = max(gaps, key=lambda g: g.headroom)
        return Finding(
            "kernel_headroom", "info",
            f"no gain from tuning {kind} kernels: the {len(gaps)} kernels with a measured reference ({measured / 1e3:,.2f} "
            f"ms) run at {reference / measured:.0%} of it overall, the slowest at {worst.headroom:.2f}× its reference "
            f"(below {HEADROOM_MIN:g}×) — {worst.name[:60]}",
            {**evidence, "worst_kernel": worst.name, "worst_headroom": worst.headroom}, rank, s.kind)
    saved = sum(g.saved_us for g in slow)
    share = _share(saved, s.gpu_busy_us)
    severity = "high" if share >= SAVING_SHARE_HIGH else "medium" if share >= SAVING_SHARE_MEDIUM else "low"
    top = slow[0]
    return Finding(
        "kernel_headroom", severity,
        f"{len(slow)} {kind} kernel(s) run ≥ {HEADROOM_MIN:g}× slower than the measured reference at their shape: "
        f"{top.name[:60]} takes {top.measured_us / top.steps:,.1f} µs per step vs {top.achievable_us / top.steps:,.1f} "
        f"µs achievable ({top.headroom:.1f}×); reaching the reference gives back {saved / max(s.steps, 1):,.1f} µs "
        f"per step ({share:.1%} of GPU busy time)",
        {**evidence, "tunable_kernels": len(slow), "saved_us": saved, "saved_share_of_busy": share,
         "top_kernel": top.name, "top_headroom": top.headroom, "top_measured_us": top.measured_us,
         "top_achievable_us": top.achievable_us},
        rank, s.kind, ("kernel_tuning",))


def kernel_headroom(b: TraceBreakdown, peaks: Peaks | None) -> list[Finding]:
    """One `kernel_headroom` finding per step kind that has kernels with a measured reference (module docstring)."""
    return [f for s in b.kinds if (f := _finding(s, kernel_gaps(s, peaks), b.rank)) is not None]
