"""The ranges of a plan: the baseline's 80 % interval and the rule that turns a track's predicted gain into a range.

Does: `plan_range(scenario, calibration)` → PlanRange, on one of three bases (said in text and JSON):
  cross_validated  the scenario's range case (perfmodel.ranges.scenario_case: system seen / unseen / generation
                   unseen) has measured error: a gain is a RATIO of two predictions on the same box, so it takes
                   the out-of-fold error of predicted TPOT ratios of two rows of one box at the same load
                   (perfmodel.ranges.change_bounds: q10, q90 of measured/predicted ratio). The measured gain is the
                   predicted one × predicted/measured ratio, so the 80 % range is [g / q90, g / q10]. Used
                   uncalibrated, and for a one-step calibration ("fitted, not validated": its residuals are zero by
                   construction, so it adds no error estimate of its own).
  cross_step       a calibration on two or more steps: r = its cross-step error (at least MIN_UNCERTAINTY; at least
                   OTHER_KIND_UNCERTAINTY when no decode step was calibrated, the plan pricing decode), through
                   whatif.gain_bounds (error r·min(|1 − n|, n) on the new time n = 1/g).
  rule_of_thumb    no measured error applies (vendor_unseen: no serving row on that vendor's GPUs):
                   RULE_OF_THUMB_UNCERTAINTY through gain_bounds, labelled as a rule, not a measurement.
  The baseline of an uncalibrated plan carries the 80 % interval `servescope model` prints for the same case
  (perfmodel.ranges.bounds); a calibrated plan's baseline is anchored on the measured step and carries none.
  The speculative-decoding track, on every basis, takes its range from the measured error of its own check:
  q10, q90 of measured/predicted gain on the published with/without pairs, out of fold (leave one source out;
  perfmodel.speculative.spec_error, written by data-build/fit_spec_host.py): [low / q90, high / q10], low and
  high being the gains at the acceptance bounds.
Assumptions: the same-box pairs behind `change_error` change the parallel layout at a fixed concurrency and
ISL/OSL; other tracks (speculation, quantization, graphs) are assumed to be predicted no worse than that. For the
throughput objective the TPOT-ratio error is applied to the tokens/s ratio (tok/s = batch / TPOT).
Does not: compute the quantiles (data-build/validation_report.py writes them to specs/data/ranges.json).
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.calibrate import Calibration
from servescope.perfmodel import ranges
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.speculative import spec_error
from servescope.planner.whatif import gain_bounds

# Used only where no measured error applies (basis rule_of_thumb): roofline-style models miss by tens of percent
# (perf-model-landscape.md §7: LLM-Viewer#4 1.7-1.9x optimistic; AIC users 30-45%). Not a measurement.
RULE_OF_THUMB_UNCERTAINTY = 0.3
MIN_UNCERTAINTY = 0.05
# A calibration on prefill steps only says little about decode: its efficiencies are extrapolated (assumption).
OTHER_KIND_UNCERTAINTY = 0.2
BASES = ("cross_validated", "cross_step", "rule_of_thumb")
SPECULATIVE = "speculative_decoding"


@dataclass(frozen=True)
class PlanRange:
    """How a plan's numbers get their ranges. `ratio_q` (q10, q90 of measured/predicted TPOT ratio) for basis
    cross_validated, `r` (relative uncertainty of a change, whatif.gain_bounds) for the other two."""

    basis: str
    case: str  # perfmodel.ranges case of the scenario's GPU
    text: str  # one line: where the ranges come from
    ratio_q: tuple[float, float] | None = None
    pairs: int = 0  # same-box pairs behind ratio_q
    r: float | None = None
    baseline_q: tuple[float, float] | None = None  # (q10, q90) multipliers of the baseline TPOT; None = no range

    def gain(self, low: float, high: float) -> tuple[float, float]:
        """80 % range of a gain whose predicted value spans [low, high] (acceptance bounds; low = high without)."""
        if self.ratio_q is not None:
            return low / self.ratio_q[1], high / self.ratio_q[0]
        r = RULE_OF_THUMB_UNCERTAINTY if self.r is None else self.r
        return gain_bounds(low, r)[0], gain_bounds(high, r)[1]

    def track_gain(self, kind: str, low: float, high: float) -> tuple[float, float]:
        """80 % range of one track's gain: the speculative track from the spec-pairs error (module docstring),
        every other track through `gain`."""
        if kind == SPECULATIVE:
            err = spec_error()
            return low / err.q90, high / err.q10
        return self.gain(low, high)

    @property
    def uncertainty(self) -> float:
        """One number for a summary: r, or for a ratio range the larger relative distance of a gain to its ends,
        max(1/q10 − 1, 1 − 1/q90)."""
        if self.ratio_q is not None:
            return max(1.0 / self.ratio_q[0] - 1.0, 1.0 - 1.0 / self.ratio_q[1])
        return RULE_OF_THUMB_UNCERTAINTY if self.r is None else self.r


def plan_range(scenario: Scenario, calibration: Calibration | None) -> PlanRange:
    """The ranges of a plan for this scenario and calibration (module docstring)."""
    case = ranges.scenario_case(scenario)
    base_q = ranges.bounds(case, "tpot") if calibration is None else None
    where = _case_words(case, scenario)
    if calibration is not None and calibration.cross_step_error is not None:
        r = max(MIN_UNCERTAINTY, calibration.cross_step_error)
        if not any(s.kind == "decode" for s in calibration.steps):
            r = max(r, OTHER_KIND_UNCERTAINTY)
        return PlanRange("cross_step", case, f"range: ±{r:.0%} on each change, from the calibration's cross-step "
                         f"error over {len(calibration.steps)} steps", r=r, baseline_q=base_q)
    change = ranges.change_bounds(case)
    if change is None:
        return PlanRange("rule_of_thumb", case, f"range: rule of thumb ±{RULE_OF_THUMB_UNCERTAINTY:.0%}, no measured "
                         f"error for this case ({case}: {where})", r=RULE_OF_THUMB_UNCERTAINTY, baseline_q=base_q)
    q10, q90, pairs = change
    text = (f"range: cross-validated ({case}: {where}); a gain is a ratio of two predictions on one box, so its "
            f"80% range is gain × {1 / q90:.2f}–{1 / q10:.2f}, from measured/predicted TPOT ratios of {pairs:,} "
            "same-box, same-load pairs out of fold")
    return PlanRange("cross_validated", case, text, ratio_q=(q10, q90), pairs=pairs, baseline_q=base_q)


def _case_words(case: str, sc: Scenario) -> str:
    g = sc.gpu
    return {"system_seen": f"{g.name} has measured serving rows",
            "system_unseen": f"no measured rows on {g.name}, its generation {g.generation} has some",
            "generation_unseen": f"no measured rows on {g.generation} GPUs, other {g.vendor.upper()} GPUs have some",
            "vendor_unseen": f"no measured serving rows on any {g.vendor.upper()} GPU"}[case]
