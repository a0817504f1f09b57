"""The campaign moves forward (issue 26.5): a plan on the state after the tracks already applied, and the checks
`verify` makes against the plan a change was applied to.

Does:
  apply_tracks     each applied track's what-if, proposed on the state before it (in the order given: the second
                   track is proposed on the state after the first), kept by the evaluator, so that the baseline and
                   every other track are priced on the applied state. A track that does not apply to the state it
                   was applied to is refused (PlanError naming it and why).
  applied_proposal the record an applied track is listed with (not recommended again).
  logged_applied   the tracks a campaign log (verify/1 lines) says were applied, in order.
  stale_plan       a verify warning: the plan file was made before tracks the log says were applied since.
  off_baseline     a verify warning: `--before` differs from the plan's baseline beyond its noise.
The state's numbers: a plan calibrated on figures (`--measured`) reads them as the state the campaign started from;
the applied tracks are priced on it (a what-if: the baseline is then never `measured`, planner.basis).
Does not: read files (report.verify_doc reads the log; cli passes its entries) or score gains (planner.verify).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servescope.errors import PlanError
from servescope.planner.track import Context, Proposal
from servescope.planner.tracks import TRACKS
from servescope.planner.whatif import Evaluator, WhatIf

APPLIED = "applied: the plan is priced on the state after it"
MEASURED_NOISE = 0.05  # a measured baseline vs a new measurement of the same state (typed figures' default ±5 %)
MODELLED_NOISE = 0.10  # a modelled baseline without a range: the campaign log's chaining tolerance (verify_doc)


def _with(ev: Evaluator, applied: tuple[WhatIf, ...]) -> Evaluator:
    """A fresh evaluator (its caches are per what-if set) on the same model and scenario with `applied` kept."""
    return Evaluator(ev.model, ev.scenario, ev.objective, ev.concurrency, ev.tpot_limit_s, ev.base_adjusts, applied)


def apply_tracks(ev: Evaluator, kinds: Sequence[str], context: Callable[[Evaluator], Context]) -> Evaluator:
    """The evaluator with each track of `kinds` applied in turn (module docstring); `ev` itself when none."""
    done: tuple[WhatIf, ...] = ev.applied
    for kind in kinds:
        cur = _with(ev, done)
        p = TRACKS[kind](context(cur))
        if not p.applicable or p.whatif is None:
            raise PlanError(f"applied track {kind} does not apply to this deployment ({p.why_not}); drop it from "
                            "--applied (or the campaign log) or plan the deployment it was applied to")
        done = (*done, p.whatif)
    return ev if done == ev.applied else _with(ev, done)


def applied_proposal(kind: str) -> Proposal:
    """An applied track as the plan lists it: not applicable (not recommended again), `details.applied` true."""
    return Proposal(kind, False, APPLIED, "config change", (), "", details={"applied": True})


def logged_applied(entries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The tracks the log's entries applied, in the order they were applied, each once."""
    out: dict[str, None] = {}
    for e in entries:
        for k in e.get("applied") or ():
            if isinstance(k, str):
                out[k] = None
    return tuple(out)


def stale_plan(plan_applied: Sequence[str], logged: Sequence[str], scored: Sequence[str]) -> str | None:
    """A warning when the plan file was made before tracks the campaign log says were applied since (or when it
    scores a track the log already applied): the gain is then predicted from an older baseline."""
    missing = [k for k in logged if k not in plan_applied]
    again = [k for k in scored if k in logged]
    if not missing and not again:
        return None
    what = (f"the plan was made before {', '.join(missing)} (applied earlier in the campaign log)" if missing
            else "")
    if again:
        what += f"{'; ' if what else ''}{', '.join(again)} was already applied earlier in the campaign log"
    return (f"{what}: this change is scored against a plan for another state; plan the applied state with "
            "`servescope plan … --log CAMPAIGN.jsonl --json -o plan.json` and verify against that")


def off_baseline(objective: str, baseline: float, before: float, basis: str,
                 low: float | None = None, high: float | None = None) -> str | None:
    """A warning when the measured `before` (SI) is outside the plan's baseline noise: ±MEASURED_NOISE of a
    measured baseline, the baseline's 80 % range (low, high) where the plan has one, else ±MODELLED_NOISE."""
    if baseline <= 0 or before <= 0:
        return None
    if basis == "measured" or low is None or high is None:
        tol = MEASURED_NOISE if basis == "measured" else MODELLED_NOISE
        low, high = baseline * (1 - tol), baseline * (1 + tol)
        noise = f"±{tol:.0%}"
    else:
        noise = "its 80% range"
    if low <= before <= high:
        return None
    unit, scale = ("ms", 1e3) if objective == "tpot" else ("tok/s", 1.0)
    return (f"before ({before * scale:.4g} {unit}) differs from the plan's {basis} baseline "
            f"({baseline * scale:.4g} {unit}) by {before / baseline - 1:+.1%}, beyond {noise}: the plan was priced "
            "for another state (re-plan on what you measured: --measured, --log)")
