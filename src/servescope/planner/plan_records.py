"""The records a plan is made of: each evaluated track (`Track`, and `PAYS`, the gain above which a track pays),
the greedy combination, the ceiling, the target verdict and the `Plan` itself, with the few readings of its own
fields (uncertainty, baseline range, dominant kernel class, a track by name).
Does not: evaluate, rank or combine anything (servescope.planner.plan does, and re-exports these names) or render a
plan (servescope.report.plan_doc / plan_text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servescope.calibrate import Calibration
from servescope.calibrate.figure_fit import FigureFit
from servescope.errors import PlanError
from servescope.perfmodel.scenario import Scenario
from servescope.planner.basis import Bases
from servescope.planner.gain_range import PlanRange
from servescope.planner.kernels import KernelEvidence
from servescope.planner.speculative import SpecConfig
from servescope.planner.target import Target
from servescope.planner.tracks import TRACK_KINDS
from servescope.planner.whatif import Outcome, StepModel, WhatIf

PAYS = 1.001  # a track "pays" above this gain



@dataclass(frozen=True)
class Track:
    """One evaluated track. Gains are ratios of the objective (>1 = better); None when not applicable."""

    kind: str
    applicable: bool
    why_not: str | None
    gain: float | None
    gain_low: float | None
    gain_high: float | None
    effort: str
    preconditions: tuple[str, ...]
    validate: str
    tpot_s: float | None = None
    output_tok_s: float | None = None
    precision_lowering: bool = False
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # the what-if this track was evaluated with, kept so that curves and pages re-use it (never re-run the track)
    whatif: WhatIf | None = field(default=None, compare=False, repr=False)

    @property
    def pays(self) -> bool:
        return self.applicable and self.gain is not None and self.gain > PAYS


@dataclass(frozen=True)
class Combination:
    tracks: tuple[str, ...]
    outcome: Outcome
    gain: float


@dataclass(frozen=True)
class Ceiling:
    tracks: tuple[str, ...]
    outcome: Outcome
    binding: str


@dataclass(frozen=True)
class Verdict:
    target: Target
    reachable: bool
    gap: float  # factor the objective still has to improve by (1.0 when reachable)
    tracks: tuple[str, ...]
    text: str
    outcome: Outcome | None = None  # the point the verdict is about (its concurrency and per-user TPOT)
    per_user: str = ""  # an aggregate rate read per user instead (a TPOT of 1/rate): the second verdict


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    objective: str
    concurrency: int
    calibrated: bool
    gain_range: PlanRange  # where the baseline's and every gain's range come from (planner.gain_range)
    baseline: Outcome
    tracks: tuple[Track, ...]  # ranked
    combined: Combination
    ceiling: Ceiling
    target: Verdict | None
    calibration: Calibration | None = None
    warnings: tuple[str, ...] = ()
    spec: SpecConfig | None = None
    measured_step: dict[str, Any] | None = None  # the calibration's first step: kind, tokens, batch, ms
    tpot_limit_s: float | None = None  # objective throughput: the TPOT every user keeps
    aggregate: bool = False  # objective throughput with no per-user TPOT cap (a rate target without --tpot-limit)
    measured: FigureFit | None = None  # the user's figures the deployment was calibrated on (planner.measured)
    # the step model the plan was priced with, for its curves and combinations (None: the perfmodel)
    step_model: StepModel | None = field(default=None, compare=False, repr=False)
    kernels: KernelEvidence | None = None  # the trace's per-kernel numbers the kernel tracks read
    bases: Bases = Bases("modelled", "modelled", "modelled")  # what each headline number rests on (planner.basis)
    applied: tuple[str, ...] = ()  # tracks already applied (--applied, a campaign log): the baseline includes them
    applied_whatifs: tuple[WhatIf, ...] = field(default=(), compare=False, repr=False)

    @property
    def uncertainty(self) -> float:
        """A one-number summary of the gain ranges (PlanRange.uncertainty)."""
        return self.gain_range.uncertainty

    @property
    def baseline_tpot_s_range(self) -> tuple[float, float] | None:
        """80 % interval of the baseline TPOT (uncalibrated: the cross-validated range `model` prints)."""
        q = self.gain_range.baseline_q
        return None if q is None else (self.baseline.tpot_s * q[0], self.baseline.tpot_s * q[1])

    @property
    def dominant_class(self) -> str:
        """Largest kernel class of the baseline step: gemm, moe, attention, communication, or overhead (the
        perfmodel's kernel overhead, class `kernel_overhead`, plus its per-step CPU time, class `host`)."""
        classes = dict(self.baseline.step.class_time_s)
        if not classes:
            return self.baseline.step.dominant
        classes["overhead"] = classes.pop("kernel_overhead", 0.0) + classes.pop("host", 0.0)
        return max(classes, key=lambda k: classes[k])

    def track(self, kind: str) -> Track:
        for t in self.tracks:
            if t.kind == kind:
                return t
        raise PlanError(f"no track {kind!r} in this plan; valid: {', '.join(TRACK_KINDS)}")

    def __repr__(self) -> str:
        best = next((t for t in self.tracks if t.applicable and t.gain is not None), None)
        head = f"best {best.kind} {best.gain:.2f}x" if best and best.gain is not None else "no applicable track"
        return (f"Plan({self.objective} at concurrency {self.concurrency}, "
                f"{'calibrated' if self.calibrated else 'uncalibrated'}: {len(self.tracks)} tracks, {head}; "
                f"{self.scenario!r})")
