"""Plain-text lines of a plan for the terminal (`servescope plan`). Presentation only: every number is read from
the Plan; nothing is planned here. The JSON contract is report/plan_doc.py."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from servescope.calibrate import calibration_table
from servescope.perfmodel.scenario import Scenario
from servescope.planner.plan import Plan, Track
from servescope.report.titles import scenario_title
from servescope.units import MS_PER_S


def plan_lines(plan: Plan) -> list[str]:
    """Plain-text lines of a plan (no styling; the report package may render it richer)."""
    unit = "TPOT" if plan.objective == "tpot" else "output tok/s"
    b = plan.baseline
    head = "uncalibrated (model defaults; no trace)"
    if plan.calibration is not None:
        head = "calibrated on a trace" + ("" if plan.calibration.validated else " (fitted, not validated)")
    lines = [f"plan for {_objective(plan)}: {head}; {plan.gain_range.basis} ranges (80%)",
             scenario_line(plan.scenario),
             f"baseline: TPOT {b.tpot_s * MS_PER_S:.2f} ms{_baseline_range(plan)}, {b.output_tok_s:.0f} tok/s at "
             f"concurrency {b.concurrency}, dominant term {b.step.dominant}, largest kernel class "
             f"{plan.dominant_class}",
             plan.gain_range.text]
    if plan.tpot_limit_s is not None:
        lines.append(f"throughput is counted under a TPOT limit of {plan.tpot_limit_s * MS_PER_S:.2f} ms per user "
                     "(--tpot-limit; default: the baseline's TPOT)")
    if plan.aggregate:
        lines.append("throughput is the instance's aggregate output tok/s at the best concurrency up to the memory "
                     "limit, with no per-user TPOT cap (--tpot-limit sets one)")
    if plan.calibration is not None:
        lines.append(f"calibration: {plan.calibration.error_basis}")
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
        if t.pays:
            lines.extend(_needs_and_verify(t))
    c, ceil = plan.combined, plan.ceiling
    lines.append(f"combined: {', '.join(c.tracks) or 'nothing pays'} → TPOT {c.outcome.tpot_s * MS_PER_S:.2f} ms, "
                 f"{c.outcome.output_tok_s:.0f} tok/s at concurrency {c.outcome.concurrency} ({c.gain:.2f}x on "
                 f"{unit}){_over_limit(plan, c.outcome.tpot_s)}")
    lines.append(f"ceiling: TPOT {ceil.outcome.tpot_s * MS_PER_S:.2f} ms, {ceil.outcome.output_tok_s:.0f} tok/s at "
                 f"concurrency {ceil.outcome.concurrency} at the physical floor, bound by {ceil.binding}")
    if plan.target is not None:
        lines.append(f"target {plan.target.target.text}: {plan.target.text}")
        if plan.target.per_user:
            lines.append(f"target {plan.target.target.text}: {plan.target.per_user}")
    lines.extend(f"warning: {w}" for w in plan.warnings)
    return lines


def _objective(plan: Plan) -> str:
    """What the plan optimises, in words: TPOT at a concurrency, or throughput capped per user or not."""
    if plan.objective == "tpot":
        return f"tpot at concurrency {plan.concurrency}"
    if plan.aggregate:
        return "aggregate output throughput (any concurrency up to the memory limit)"
    limit = "" if plan.tpot_limit_s is None else f" under a TPOT limit of {plan.tpot_limit_s * MS_PER_S:.2f} ms per user"
    return f"throughput{limit}"


def _over_limit(plan: Plan, tpot_s: float) -> str:
    """A point above the stated TPOT limit says so (no concurrency met the limit; the plan fell back to 1)."""
    if plan.objective != "throughput" or plan.tpot_limit_s is None or tpot_s <= plan.tpot_limit_s * (1 + 1e-9):
        return ""
    return f" — above the TPOT limit of {plan.tpot_limit_s * MS_PER_S:.2f} ms even at concurrency 1"


def _baseline_range(plan: Plan) -> str:
    rng = plan.baseline_tpot_s_range
    if rng is None:
        return ""
    return f" (80% range {rng[0] * MS_PER_S:.2f}–{rng[1] * MS_PER_S:.2f} ms, case {plan.gain_range.case})"


def scenario_line(sc: Scenario) -> str:
    """The scenario as resolved: model and GPU spec names (`--gpu h100` resolves to h100_sxm) and the layout."""
    return "scenario: " + scenario_title(sc, backend=True, display_name=True)


def _needs_and_verify(t: Track) -> list[str]:
    """What a recommended track needs before it can pay (its preconditions) and how to check it did."""
    out = [f"        needs: {p}" for p in t.preconditions]
    if t.validate:
        out.append(f"        verify: {t.validate}")
    return out


def render_plan_lines(lines: list[str], console: Console) -> None:
    """Print the plan's lines as they are (no markup, no highlighting); a long line wraps at the console width,
    its continuation indented like its start."""
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        console.print(Padding(Text(line.lstrip(" ")), (0, 0, 0, indent)), highlight=False)
