"""The per-kernel numbers of a trace, as data for the planner (issue 19 part 4): the planner reads no trace.

Does: hold, per traced step kind, each top kernel's measured µs against the measured reference's µs for the same work
(`KernelRow`), the kind's steps, span and class times (`KindTime`), and where the reference comes from
(`KernelEvidence`); advise builds them from the analysis (`advise.kernel_evidence`).
Does not: compute anything (analysis.headroom compares, planner.tracks_kernels prices).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelRow:
    """One kernel of one step kind: shaped calls, their summed µs over `steps` steps, the measured reference's µs
    for the same work (None: no measured reference for it), and whether it runs ≥ 2× its reference (`tunable`, as
    analysis.headroom decided)."""

    kind: str
    name: str
    kernel_class: str
    model: str | None
    dtype: str | None
    calls: int
    measured_us: float
    achievable_us: float | None
    steps: int
    tunable: bool = False
    blocks_per_sm: float | None = None

    @property
    def saved_us(self) -> float:
        """µs given back over the kind's steps if it ran at its reference (0 without one); ≤ measured_us."""
        return max(0.0, self.measured_us - self.achievable_us) if self.achievable_us is not None else 0.0

    @property
    def headroom(self) -> float | None:
        return self.measured_us / self.achievable_us if self.achievable_us else None


@dataclass(frozen=True)
class KindTime:
    """A step kind of the trace: its steps, summed GPU span µs and summed union µs per kernel class."""

    kind: str
    steps: int
    span_us: float
    class_us: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelEvidence:
    """The per-kernel numbers of one traced rank, as data for the planner (advise.kernel_evidence)."""

    gpu: str | None
    source: str | None  # the measured reference, in words (None: nothing measured for this GPU)
    rows: tuple[KernelRow, ...]
    kinds: tuple[KindTime, ...]
    note: str = ""  # why there are no references, when there are none

    def kind(self, name: str) -> KindTime | None:
        return next((k for k in self.kinds if k.kind == name), None)
