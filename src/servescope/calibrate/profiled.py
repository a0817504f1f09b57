"""A trace taken under the profiler beside a TPOT measured without it (issue 29 item 5): its shares, not its times.

Does: compare the trace's decode steps with a TPOT figure measured at the same batch (concurrency = the steps' batch,
closed loop). A profiled step more than PERTURBED slower than the unprofiled TPOT was slowed by the profiler (per-op
records, synchronisation: the reference box's profiled all-reduce ran 78 µs a call against a 27 µs curve), so its
absolute class times would calibrate a slower box than the one measured. Then the trace speaks through its shares:
each kernel class's share of the profiled decode steps (communication, gemm, moe, attention) becomes a share figure
at that batch, fitted with the user's figures by term (calibrate.terms) on the uncalibrated scenario, and the
trace's absolute calibration is not applied — said in one note with both times.
Does not: read the trace (the Calibration carries its measured class times) or decide anything when the trace is
within PERTURBED of the TPOT (the trace's times then calibrate as before).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servescope.calibrate.figures import Figure

if TYPE_CHECKING:
    from servescope.calibrate import Calibration

PERTURBED = 0.05  # a profiled step this much slower than the unprofiled TPOT is perturbed (repeats agree ~1 %)
SHARE_CLASSES = ("communication", "gemm", "moe", "attention")
MIN_SHARE = 0.01  # a class below this share of the step says nothing a figure could fit


@dataclass(frozen=True)
class Perturbation:
    """The profiled decode steps at `batch` against the TPOT measured there, and the shares that replace them."""

    batch: int
    profiled_step_s: float
    tpot_s: float
    shares: tuple[Figure, ...]

    def note(self) -> str:
        named = ", ".join(f"{f.metric} {f.value_si:.1%}" for f in self.shares)
        return (f"the trace's decode steps at batch {self.batch} take {self.profiled_step_s * 1e3:.2f} ms under the "
                f"profiler, {self.profiled_step_s / self.tpot_s - 1:+.0%} over the measured TPOT "
                f"{self.tpot_s * 1e3:.2f} ms: the trace calibrates through its shares ({named}), not its absolute "
                "times")


def profiler_perturbation(cal: Calibration, figures: Sequence[Figure], source: str) -> Perturbation | None:
    """The perturbation, or None when the trace has no decode step at a measured TPOT's concurrency or is within
    PERTURBED of it (module docstring)."""
    decode = [s for s in cal.steps if s.kind == "decode" and s.batch]
    if not decode:
        return None
    batch = Counter(s.batch for s in decode).most_common(1)[0][0]
    tpot = next((f.value_si for f in figures if f.metric == "tpot" and f.concurrency == batch), None)
    steps = [s for s in decode if s.batch == batch]
    step_s = sum(s.measured_s["step"] for s in steps) / len(steps)
    if tpot is None or batch is None or step_s <= (1.0 + PERTURBED) * tpot:
        return None
    total = sum(s.measured_s["step"] for s in steps)
    shares = []
    for cls in SHARE_CLASSES:
        value = sum(s.measured_s.get(cls, 0.0) for s in steps) / total
        if MIN_SHARE < value < 1.0 - MIN_SHARE:
            shares.append(Figure(f"{cls}_share", value, batch, None, None, f"{cls}_share={value:.4f}@c{batch}",
                                 source=f"{source}: the profiled decode steps at batch {batch}"))
    return Perturbation(batch, step_s, tpot, tuple(shares))
