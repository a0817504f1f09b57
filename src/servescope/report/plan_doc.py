"""The `servescope.plan/1` JSON document of a Plan (pure: no I/O, no printing). Presentation only.

Keys, exactly: schema, calibrated, baseline {tpot_ms, output_tok_s, dominant}, tracks [{kind, applicable, why_not,
gain, gain_low, gain_high, effort, preconditions, validate}], combined {tracks, tpot_ms, output_tok_s, gain},
ceiling {tpot_ms, output_tok_s, binding, tracks}, target {value, reachable, gap, tracks} or null.
Gains are ratios of the objective (TPOT: baseline / new; throughput: new / baseline). Target `value` is in ms for
objective tpot and output tokens/s for objective throughput; `gap` is the factor the objective still has to
improve by (1.0 when reachable). `range` says where the ranges come from: {basis (cross_validated | cross_step |
rule_of_thumb), case, text, gain_ratio_q10, gain_ratio_q90, pairs, r, baseline_tpot_ms_low, baseline_tpot_ms_high}
(nulls where a basis has no such number). Added keys: `scenario` (what was planned: model, GPU, layout,
quantization, engine; scenario_document), `memory_limit` {max_concurrency, context_tokens} (the one memory limit,
as `servescope model` prints it), `combined_product` {gains, product, interaction (overlap | compound)} (null
for fewer than two tracks), `baseline_source` (null, or how a calibrated baseline was extrapolated) and
`calibration.measured_step_idle_share`. Issue 17 adds `measured`: null | the calibration on the user's figures
(report.measured_doc: knobs and the inputs that set each, measured points, status) with `baseline` (measured |
calibrated) and `tracks` {kind: {baseline, metric (tpot_ms | output_tok_s), before, after, after_low, after_high}}:
each gain stated on the calibrated baseline, and `curve_points` (report.measured_doc.curve_points: the measured
points as the latency–throughput curves draw them). Issue 26 adds `basis` to baseline, combined, ceiling and
target: what the number rests on (planner.basis: measured | calibrated | extrapolated | modelled), and `applied`:
the tracks already applied (planner.campaign), the baseline being the state after them; `ceiling.floor_step_ms`: the
physical floor of the ceiling's step (perfmodel floor_s, as `model` prints it). See docs/plan.md and
docs/json.md.
"""

from __future__ import annotations

import math
from typing import Any

from servescope.calibrate import calibration_table
from servescope.planner.plan import Plan, Track
from servescope.report.measured_doc import curve_points, measured_document
from servescope.report.plan_text import (
    baseline_source,
    combination_product,
    memory_limit,
    on_baseline,
)
from servescope.report.titles import scenario_document
from servescope.units import MS_PER_S

SCHEMA = "servescope.plan/1"


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _track(t: Track) -> dict[str, Any]:
    return {
        "kind": t.kind,
        "applicable": t.applicable,
        "why_not": t.why_not,
        "gain": _num(t.gain),
        "gain_low": _num(t.gain_low),
        "gain_high": _num(t.gain_high),
        "effort": t.effort,
        "preconditions": list(t.preconditions),
        "validate": t.validate,
    }


def plan_document(plan: Plan) -> dict[str, Any]:
    """The versioned JSON-ready dict of a plan."""
    b, c, ceil = plan.baseline, plan.combined, plan.ceiling
    target = None
    if plan.target is not None:
        v = plan.target
        target = {"value": v.target.value, "reachable": v.reachable, "gap": _num(v.gap), "tracks": list(v.tracks),
                  "text": v.text, "per_user": v.per_user or None,
                  "concurrency": None if v.outcome is None else v.outcome.concurrency,
                  "tpot_ms": None if v.outcome is None else v.outcome.tpot_s * MS_PER_S,
                  "output_tok_s": None if v.outcome is None else v.outcome.output_tok_s,
                  "basis": plan.bases.target}
    return {
        "schema": SCHEMA,
        "calibrated": plan.calibrated,
        "baseline": {"tpot_ms": b.tpot_s * MS_PER_S, "output_tok_s": b.output_tok_s, "dominant": b.step.dominant,
                     "concurrency": b.concurrency, "basis": plan.bases.baseline},
        "tracks": [_track(t) for t in plan.tracks],
        "combined": {"tracks": list(c.tracks), "tpot_ms": c.outcome.tpot_s * MS_PER_S,
                     "output_tok_s": c.outcome.output_tok_s, "gain": c.gain, "concurrency": c.outcome.concurrency,
                     "basis": plan.bases.combined},
        "ceiling": {"tpot_ms": ceil.outcome.tpot_s * MS_PER_S, "output_tok_s": ceil.outcome.output_tok_s,
                    "binding": ceil.binding, "tracks": list(ceil.tracks), "concurrency": ceil.outcome.concurrency,
                    "basis": plan.bases.ceiling, "floor_step_ms": ceil.outcome.step.floor_s * MS_PER_S},
        "target": target,
        "objective": plan.objective,
        "concurrency": plan.concurrency,
        "tpot_limit_ms": None if plan.tpot_limit_s is None else plan.tpot_limit_s * MS_PER_S,
        "aggregate": plan.aggregate,
        "calibration": _calibration(plan),
        "warnings": list(plan.warnings),
        "range": _range(plan),
        "scenario": scenario_document(plan.scenario),
        "memory_limit": {"max_concurrency": memory_limit(plan.scenario),
                         "context_tokens": plan.scenario.isl + plan.scenario.osl},
        "baseline_source": baseline_source(plan).removeprefix(", ") or None,
        "combined_product": combination_product(plan),
        "measured": _measured(plan),
        "applied": list(plan.applied),
    }


def _measured(plan: Plan) -> dict[str, Any] | None:
    """The calibration on the user's figures (report.measured_doc) and each track's gain on its baseline."""
    if plan.measured is None:
        return None
    tracks = {t.kind: d for t in plan.tracks if (d := on_baseline(plan, t)) is not None}
    points = curve_points(plan.measured, plan.scenario.n_gpus, memory_limit(plan.scenario))
    return measured_document(plan.measured) | {"baseline": plan.bases.baseline, "tracks": tracks,
                                               "curve_points": points}


def _range(plan: Plan) -> dict[str, Any]:
    """Where the baseline's and the gains' ranges come from (planner.gain_range)."""
    g, rng = plan.gain_range, plan.baseline_tpot_s_range
    q = g.ratio_q
    return {"basis": g.basis, "case": g.case, "text": g.text,
            "gain_ratio_q10": None if q is None else q[0], "gain_ratio_q90": None if q is None else q[1],
            "pairs": g.pairs, "r": g.r,
            "baseline_tpot_ms_low": None if rng is None else rng[0] * MS_PER_S,
            "baseline_tpot_ms_high": None if rng is None else rng[1] * MS_PER_S}


def _calibration(plan: Plan) -> dict[str, Any] | None:
    """What the calibration fitted and how well the model then reproduces the measured step, class by class."""
    if plan.calibration is None:
        return None
    cal = plan.calibration
    return {"measured_step": plan.measured_step, "classes": calibration_table(cal),
            "measured_step_idle_share": cal.steps[0].idle_share if cal.steps else None,
            "validated": cal.validated, "error_basis": cal.error_basis, "cross_step_error": cal.cross_step_error,
            "step_errors": list(cal.step_errors),
            "step_gap_ms": None if cal.step_gap_s is None else cal.step_gap_s * MS_PER_S,
            "step_gap_pairs": cal.step_gap_pairs}
