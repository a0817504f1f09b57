"""The `servescope.plan/1` JSON document of a Plan (pure: no I/O, no printing).

Keys, exactly: schema, calibrated, baseline {tpot_ms, output_tok_s, dominant}, tracks [{kind, applicable, why_not,
gain, gain_low, gain_high, effort, preconditions, validate}], combined {tracks, tpot_ms, output_tok_s, gain},
ceiling {tpot_ms, output_tok_s, binding, tracks}, target {value, reachable, gap, tracks} or null.
Gains are ratios of the objective (TPOT: baseline / new; throughput: new / baseline). Target `value` is in ms for
objective tpot and output tokens/s for objective throughput; `gap` is the factor the objective still has to
improve by (1.0 when reachable). See docs/plan.md.
"""

from __future__ import annotations

import math
from typing import Any

from servescope.calibrate import calibration_table
from servescope.planner.plan import Plan, Track
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
        target = {"value": v.target.value, "reachable": v.reachable, "gap": _num(v.gap), "tracks": list(v.tracks)}
    return {
        "schema": SCHEMA,
        "calibrated": plan.calibrated,
        "baseline": {"tpot_ms": b.tpot_s * MS_PER_S, "output_tok_s": b.output_tok_s, "dominant": b.step.dominant},
        "tracks": [_track(t) for t in plan.tracks],
        "combined": {"tracks": list(c.tracks), "tpot_ms": c.outcome.tpot_s * MS_PER_S,
                     "output_tok_s": c.outcome.output_tok_s, "gain": c.gain},
        "ceiling": {"tpot_ms": ceil.outcome.tpot_s * MS_PER_S, "output_tok_s": ceil.outcome.output_tok_s,
                    "binding": ceil.binding, "tracks": list(ceil.tracks)},
        "target": target,
        "objective": plan.objective,
        "concurrency": plan.concurrency,
        "tpot_limit_ms": None if plan.tpot_limit_s is None else plan.tpot_limit_s * MS_PER_S,
        "calibration": _calibration(plan),
        "warnings": list(plan.warnings),
    }


def _calibration(plan: Plan) -> dict[str, Any] | None:
    """What the calibration fitted and how well the model then reproduces the measured step, class by class."""
    if plan.calibration is None:
        return None
    return {"measured_step": plan.measured_step, "classes": calibration_table(plan.calibration)}


def plan_lines(plan: Plan) -> list[str]:
    """Plain-text lines of a plan (no styling; the report package may render it richer)."""
    unit = "TPOT" if plan.objective == "tpot" else "output tok/s"
    b = plan.baseline
    head = "calibrated on a trace" if plan.calibrated else "uncalibrated (model defaults; no trace)"
    lines = [f"plan for {plan.objective} at concurrency {plan.concurrency}: {head}, ±{plan.uncertainty:.0%} on "
             "each change",
             f"baseline: TPOT {b.tpot_s * MS_PER_S:.2f} ms, {b.output_tok_s:.0f} tok/s, dominant term "
             f"{b.step.dominant}, largest kernel class {plan.dominant_class}"]
    if plan.tpot_limit_s is not None:
        lines.append(f"throughput is counted under a TPOT limit of {plan.tpot_limit_s * MS_PER_S:.2f} ms per user "
                     "(--tpot-limit; default: the baseline's TPOT)")
    if plan.calibration is not None:
        lines.append("calibration (class: measured µs → model µs, residual, fitted knob):")
        for row in calibration_table(plan.calibration):
            residual = "–" if row["residual"] is None else f"{100 * row['residual']:+.1f}%"
            knob = f"{row['knob']} = {row['value']:.3g}" if row["knob"] else "–"
            lines.append(f"  {row['class']:<14} {row['measured_us']:>10.1f} → {row['model_us']:>10.1f}  "
                         f"{residual:>7}  {knob}")
    if plan.measured_step:
        m = plan.measured_step
        lines.append(f"measured {m['kind']} step {m['index']}: {m['measured_ms']:.2f} ms (model "
                     f"{m['model_ms']:.2f} ms); gains below also state their effect on it")
    for t in plan.tracks:
        if t.gain is None:
            lines.append(f"  -  {t.kind}: not applicable: {t.why_not}")
            continue
        on_step = t.details.get("gain_on_measured_step")
        measured = f"; measured step ×{on_step:.2f}" if on_step else ""
        extra = f" — {t.why_not}" if t.why_not else (f" — {t.note}" if t.note else "")
        flag = " [precision-lowering]" if t.precision_lowering else ""
        lines.append(f"  {t.gain:5.2f}x ({t.gain_low:.2f}–{t.gain_high:.2f}) {t.kind} [{t.effort}]{flag}"
                     f"{measured}{extra}")
    c, ceil = plan.combined, plan.ceiling
    lines.append(f"combined: {', '.join(c.tracks) or 'nothing pays'} → TPOT {c.outcome.tpot_s * MS_PER_S:.2f} ms, "
                 f"{c.outcome.output_tok_s:.0f} tok/s ({c.gain:.2f}x on {unit})")
    lines.append(f"ceiling: TPOT {ceil.outcome.tpot_s * MS_PER_S:.2f} ms, {ceil.outcome.output_tok_s:.0f} tok/s at "
                 f"the physical floor, bound by {ceil.binding}")
    if plan.target is not None:
        lines.append(f"target {plan.target.target.text}: {plan.target.text}")
    lines.extend(f"warning: {w}" for w in plan.warnings)
    return lines
