"""The planner on a deployment calibrated on the user's figures (calibrate.figure_fit): every decode step at its
measured level, the knobs (collective or class time) already on the scenario.

Does: `LevelledModel` wraps a StepModel: each predicted decode step's terms × the fit's decode levels
(FigureFit.multipliers: communication 1, its level is the collective-time knob on the scenario, so a what-if that
re-prices a collective — custom all-reduce, tuned NCCL — prices the new path at the same in-situ scale: its
saving comes off the calibrated all-reduce term), kernel classes × FigureFit.class_multipliers, collectives and
the physical floor as predicted (a levelled step is never under it); other requests' prefills in a decode (the
interference term) at the same levels, as `model --measured` restates TPOT. Prefill steps (TTFT), memory limits
and drafter scenarios are the inner model's. `measured_range` gives a plan's baseline range on a calibrated
deployment: none where the plan's concurrency was measured (the baseline is the measurement), else the held-out
range of calibrating on that many points (specs/data/calibrated_ranges.json). `measured_step_of` and
`on_measured_step`: a trace calibration's measured step and each track's effect on it.
Does not: fit anything (calibrate.figure_fit) or rank (planner.plan).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from servescope.calibrate import Calibration
from servescope.calibrate.figure_fit import FigureFit
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import StepPrediction
from servescope.planner.gain_range import PlanRange
from servescope.planner.track import Proposal
from servescope.planner.whatif import Evaluator, StepModel
from servescope.specs import tables


def levelled(pred: StepPrediction, fit: FigureFit) -> StepPrediction:
    """One decode step at the fit's levels (module docstring); its terms still add up to its time. A level below 1
    never takes the step under its physical floor (perfmodel step.py `floor_s`, what `model` prints as floor_ms):
    where the levelled terms would, they are scaled up together to the floor (a measured TPOT under the floor is
    refused by the fit, so the levels reproduce every measured point above it)."""
    mult, cls = fit.multipliers(), fit.class_multipliers()
    terms = {k: v * mult.get(k, 1.0) for k, v in pred.terms_s.items()}
    classes = {k: v * cls.get(k, 1.0) for k, v in pred.class_time_s.items()}
    total, floor = sum(terms.values()), float(pred.floor_s)
    if 0.0 < total < floor:
        up = floor / total
        terms = {k: v * up for k, v in terms.items()}
        classes = {k: v * up for k, v in classes.items()}
    return replace(pred, step_time_s=sum(terms.values()), terms_s=terms, class_time_s=classes,
                   dominant=max(terms, key=lambda k: terms[k]))


@dataclass(frozen=True)
class LevelledModel:
    """A StepModel whose decode steps run at a calibrated deployment's levels (module docstring)."""

    inner: StepModel
    fit: FigureFit

    def decode(self, scenario: Scenario, batch: int, context_len: float, tokens_per_seq: int = 1) -> StepPrediction:
        return levelled(self.inner.decode(scenario, batch, context_len, tokens_per_seq), self.fit)

    def prefill(self, scenario: Scenario, tokens: int, batch: int = 1, context_len: float = 0) -> StepPrediction:
        return self.inner.prefill(scenario, tokens, batch, context_len)

    def max_concurrency(self, scenario: Scenario) -> int:
        return self.inner.max_concurrency(scenario)

    def interference(self, scenario: Scenario, batch: int) -> float:
        """perfmodel.predict's TPOT above the decode step, term by term at the levels."""
        from servescope.perfmodel import decode_step, predict

        p = predict(scenario, [batch])[0]
        ctx = scenario.decode_context
        d = decode_step(scenario, p.batch, ctx)  # type: ignore[arg-type]
        mult = self.fit.multipliers()
        extra = sum(mult.get(k, 1.0) * (v - d.terms_s.get(k, 0.0)) for k, v in p.terms_s.items())
        return max(0.0, float(extra))

    def interference_share(self, scenario: Scenario, batch: int) -> float:
        """The prompts per decode step (inner model) at the communication level: the planner prices the prompts'
        collective changes with it (Evaluator.prompt_collective_delta_s), so they carry the measured level too."""
        return self.inner.interference_share(scenario, batch) * self.fit.multipliers().get("communication", 1.0)

    def draft(self, scenario: Scenario, method: str, draft_model: str | None) -> Scenario | None:
        return self.inner.draft(scenario, method, draft_model)


def measured_range(r: PlanRange, fit: FigureFit, concurrency: int, applied: bool = False) -> PlanRange:
    """The plan's ranges on a calibrated deployment: the gains' as before (a gain is a ratio on one box); the
    baseline's none where it was measured (and no track applied since: planner.campaign), else the held-out range
    of the calibration case."""
    point = None if applied else fit.measured_at(concurrency)
    if point is not None:
        return replace(r, baseline_q=None, text=f"{r.text}; baseline: measured at concurrency {concurrency} "
                       f"({', '.join(point.figures)})")
    if fit.case == "uncalibrated":
        return r
    q10, q90 = (float(x) for x in tables.calibrated_ranges()["cases"][fit.case]["tpot"])
    return replace(r, baseline_q=(q10, q90), text=f"{r.text}; baseline: calibrated on {', '.join(fit.used)}, "
                   f"its 80% range the held-out error of calibrating so ({fit.case}, ×{q10:.2f}–{q90:.2f})")


# --- a trace's measured step (planner.plan states each track's effect on it) ------------------------------------

def measured_step_of(calibration: Calibration | None) -> dict[str, Any] | None:
    """The calibration trace's first step: kind, tokens, batch, context, measured and model ms; None without one."""
    if calibration is None or not calibration.steps:
        return None
    s = calibration.steps[0]
    return {"index": s.index, "kind": s.kind, "tokens": s.tokens or s.batch or 1, "batch": s.batch or 1,
            "context_len": s.context_len,
            "measured_ms": s.measured_s["step"] * 1e3, "model_ms": s.predicted_s["step"] * 1e3}


class _Scored(Protocol):  # planner.plan.Track (imported there: plan imports this module)
    @property
    def applicable(self) -> bool: ...
    @property
    def details(self) -> dict[str, Any]: ...


_T = TypeVar("_T", bound=_Scored)


def on_measured_step(ev: Evaluator, t: _T, p: Proposal, measured: dict[str, Any]) -> _T:
    """State a track's effect on the measured step: its time after the change, scaled to the measurement
    (measured × model-after / model-before), and the gain on it (the track's `details`)."""
    if not t.applicable or p.whatif is None:
        return t
    kind, tokens, batch = measured["kind"], int(measured["tokens"]), int(measured["batch"])
    ctx = measured.get("context_len")
    before = ev.step_like((), kind, tokens, batch, ctx)
    after = ev.step_like((p.whatif,), kind, tokens, batch, ctx)
    after_ms = measured["measured_ms"] * after / before
    details = {**t.details, "measured_step_ms": measured["measured_ms"],
               "measured_step_ms_after": after_ms, "gain_on_measured_step": measured["measured_ms"] / after_ms}
    return replace(t, details=details)  # type: ignore[type-var]
