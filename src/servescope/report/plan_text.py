"""Plain-text lines of a plan for the terminal (`servescope plan`). Presentation only: every number is read from
the Plan; nothing is planned here. The JSON contract is report/plan_doc.py."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from servescope.calibrate import calibration_table
from servescope.perfmodel.memory import max_concurrency
from servescope.perfmodel.scenario import Scenario
from servescope.planner.plan import Plan, Track
from servescope.report.titles import scenario_title
from servescope.units import MS_PER_S


def plan_lines(plan: Plan) -> list[str]:
    """Plain-text lines of a plan (no styling; the report package may render it richer): the header and the
    scenario, then one paragraph — baseline, combination, ceiling, verdict — and the warnings, then how the
    ranges were made and every track."""
    unit = "TPOT" if plan.objective == "tpot" else "output tok/s"
    lines = _summary_lines(plan, unit)
    if plan.target is not None:
        lines.append(f"target {plan.target.target.text}: {plan.target.text}")
        if plan.target.per_user:
            lines.append(f"target {plan.target.target.text}: {plan.target.per_user}")
    lines.extend(f"warning: {w}" for w in plan.warnings)
    lines.append("")
    lines.extend(_basis_lines(plan))
    lines.extend(_calibration_lines(plan))
    lines.extend(_measured_lines(plan))
    lines.append(f"tracks (gain on {unit}: > 1 is faster; 80% range):")
    limit = memory_limit(plan.scenario)
    for t in plan.tracks:
        lines.extend(_track_lines(plan, t, limit))
    return lines


def _head(plan: Plan) -> str:
    """What the plan was calibrated on: nothing, a trace, measured figures, or both."""
    head = "uncalibrated (model defaults; no trace)"
    if plan.calibration is not None:
        head = "calibrated on a trace" + ("" if plan.calibration.validated else " (fitted, not validated)")
    if plan.measured is not None:
        head = (f"{head}, then " if plan.calibration is not None else "") + (
            f"calibrated on measured figures ({plan.measured.status()})")
    return head


def _summary_lines(plan: Plan, unit: str) -> list[str]:
    """The header, the scenario, what was applied, then the baseline, the combination and the ceiling."""
    b, c, ceil = plan.baseline, plan.combined, plan.ceiling
    lines = [f"plan for {_objective(plan)}: {_head(plan)}; {plan.gain_range.basis} ranges (80%)",
             scenario_line(plan.scenario),
             f"baseline: {baseline_word(plan)}TPOT {b.tpot_s * MS_PER_S:.2f} ms{_baseline_range(plan)}, "
             f"{b.output_tok_s:.0f} tok/s at "
             f"concurrency {b.concurrency}{baseline_source(plan)}; dominant term {b.step.dominant}, largest kernel "
             f"class {plan.dominant_class}; {memory_limit_text(plan.scenario)}",
             f"combined: {', '.join(c.tracks) or 'nothing pays'} → {word(plan, plan.bases.combined)}TPOT "
             f"{c.outcome.tpot_s * MS_PER_S:.2f} ms, "
             f"{c.outcome.output_tok_s:.0f} tok/s at concurrency {c.outcome.concurrency} ({c.gain:.2f}x on "
             f"{unit}{combination_text(plan)}){_over_limit(plan, c.outcome.tpot_s)}",
             f"ceiling: {word(plan, plan.bases.ceiling)}TPOT {ceil.outcome.tpot_s * MS_PER_S:.2f} ms, "
             f"{ceil.outcome.output_tok_s:.0f} tok/s at "
             f"concurrency {ceil.outcome.concurrency} at 100% efficiency with no overheads (the physical floor of "
             f"its step: {ceil.outcome.step.floor_s * MS_PER_S:.2f} ms, as `model` prints it), bound by {ceil.binding}"]
    if plan.applied:
        lines.insert(2, f"applied: {', '.join(plan.applied)} — the baseline is the state after "
                        f"{'it' if len(plan.applied) == 1 else 'them'}, every other track priced on it")
    return lines


def _basis_lines(plan: Plan) -> list[str]:
    """How the ranges were made and what the throughput is counted under."""
    lines = [plan.gain_range.text]
    if plan.tpot_limit_s is not None:
        lines.append(f"throughput is counted under a TPOT limit of {plan.tpot_limit_s * MS_PER_S:.2f} ms per user "
                     "(--tpot-limit; default: the baseline's TPOT)")
    if plan.aggregate:
        lines.append("throughput is the instance's aggregate output tok/s at the best concurrency up to the memory "
                     "limit, with no per-user TPOT cap (--tpot-limit sets one)")
    return lines


def _calibration_lines(plan: Plan) -> list[str]:
    """The trace calibration's error basis and its table (class, measured → model µs, residual, knob); none
    without one."""
    if plan.calibration is None:
        return []
    lines = [f"calibration: {plan.calibration.error_basis}",
             "calibration (class: measured µs → model µs, residual, fitted knob):"]
    for row in calibration_table(plan.calibration):
        residual = "–" if row["residual"] is None else f"{100 * row['residual']:+.1f}%"
        knob = f"{row['knob']} = {knob_text(str(row['knob']), row['value'])}" if row["knob"] else "–"
        lines.append(f"  {row['class']:<14} {row['measured_us']:>10.1f} → {row['model_us']:>10.1f}  "
                     f"{residual:>7}  {knob}")
    return lines


def _measured_lines(plan: Plan) -> list[str]:
    """The measured figures' lines and the measured step's, when given."""
    lines: list[str] = []
    if plan.measured is not None:
        from servescope.report.measured_doc import measured_document, measured_lines

        lines.extend(measured_lines(measured_document(plan.measured)))
    if plan.measured_step:
        m = plan.measured_step
        lines.append(f"measured {m['kind']} step {m['index']}: {m['measured_ms']:.2f} ms (model "
                     f"{m['model_ms']:.2f} ms); a track that changes it says by how much")
    return lines


def _track_lines(plan: Plan, t: Track, limit: int) -> list[str]:
    """One track's line (applied, not applicable, or its gain and notes), then what it needs and how to verify
    it when it pays."""
    if t.details.get("applied"):
        return [f"  ✓  {t.kind}: {t.why_not}"]
    if t.gain is None:
        return [f"  -  {t.kind}: not applicable: {t.why_not}"]
    on_step = t.details.get("gain_on_measured_step")
    measured = (f"; on the measured step {speedup_text(on_step)}"
                if on_step and f"{on_step:.2f}" != "1.00" else "")
    note = _one_memory_limit(t, limit)
    extra = f" — {t.why_not}" if t.why_not else (f" — {note}" if note else "")
    flag = " [precision-lowering]" if t.precision_lowering else ""
    on_base = on_baseline(plan, t)
    said = f"; {on_baseline_text(on_base)}" if on_base is not None and t.pays else ""
    lines = [f"  {gain_text(t.gain, t.gain_low, t.gain_high)} {t.kind} [{t.effort}]{flag}{measured}{said}"
             f"{extra}"]
    if t.pays:
        lines.extend(_needs_and_verify(t))
    return lines


SLOWER = 0.995  # a gain below this prints as a slowdown ("0.88x (slower)")


def baseline_word(plan: Plan) -> str:
    """The basis of the baseline (planner.basis: "measured ", "calibrated ", "extrapolated ") before its number;
    nothing on an uncalibrated plan (its header says so)."""
    return word(plan, plan.bases.baseline)


def word(plan: Plan, basis: str) -> str:
    """A number's basis as the word printed before it, with its space; none on an uncalibrated plan (modelled:
    the header says "uncalibrated"), `modelled` when the plan was calibrated but this number was not."""
    return "" if not plan.calibrated else f"{basis} "


def on_baseline(plan: Plan, t: Track) -> dict[str, Any] | None:
    """A track's gain stated on a calibrated plan's baseline: {baseline (measured | calibrated), metric (tpot_ms |
    output_tok_s), before, after, after_low, after_high}; None uncalibrated or without a gain."""
    if plan.measured is None or t.gain is None:
        return None
    basis = plan.bases.baseline
    lo, hi = t.gain_low or t.gain, t.gain_high or t.gain
    if plan.objective == "tpot":
        before = plan.baseline.tpot_s * MS_PER_S
        return {"baseline": basis, "metric": "tpot_ms", "before": before, "after": before / t.gain,
                "after_low": before / hi, "after_high": before / lo}
    before = plan.baseline.output_tok_s
    return {"baseline": basis, "metric": "output_tok_s", "before": before, "after": before * t.gain,
            "after_low": before * lo, "after_high": before * hi}


def on_baseline_text(d: dict[str, Any]) -> str:
    """`measured TPOT 12.1 ms → 9.9 ms (9.0–10.9)`, or the same in output tok/s."""
    if d["metric"] == "tpot_ms":
        return (f"{d['baseline']} TPOT {d['before']:.3g} ms → {d['after']:.3g} ms ({d['after_low']:.3g}–"
                f"{d['after_high']:.3g})")
    return (f"{d['baseline']} output {d['before']:,.0f} tok/s → {d['after']:,.0f} tok/s ({d['after_low']:,.0f}–"
            f"{d['after_high']:,.0f})")


def speedup_text(g: float) -> str:
    """A ratio of the objective, always a speed-up: `1.73x`, a slowdown `0.88x (slower)`."""
    return f"{g:.2f}x" + (" (slower)" if g < SLOWER else "")


def gain_text(g: float, lo: float | None, hi: float | None) -> str:
    """A gain with its range: `1.60x (1.19–2.03)`, `0.88x (slower; 0.69–1.12)`; a range that rounds to one
    number is not printed as one (`1.00x (no change)`, `1.05x (no range)`)."""
    flat = lo is None or hi is None or f"{lo:.2f}" == f"{hi:.2f}"
    span = ("no change" if f"{g:.2f}" == "1.00" else "no range") if flat else f"{lo:.2f}–{hi:.2f}"
    return f"{g:5.2f}x ({'slower; ' if g < SLOWER else ''}{span})"


def combination_text(plan: Plan) -> str:
    """The combined gain beside the product of its tracks' gains as printed, and the word for the difference:
    ` together; 1.60x × 1.17x × 1.16x = 2.17x alone: they overlap` (the product exceeds the combined gain: part of
    the tracks' gains comes off the same time) or `…: they compound` (it does not). Nothing for one track."""
    p = combination_product(plan)
    if p is None:
        return ""
    return (f" together; {' × '.join(f'{g:.2f}x' for g in p['gains'])} = {p['product']:.2f}x alone: they "
            f"{p['interaction']}")


def combination_product(plan: Plan) -> dict[str, Any] | None:
    """The combined tracks' gains as printed (2 decimals), their product and whether they overlap (the product
    exceeds the combined gain) or compound (it does not); None for fewer than two tracks."""
    gains = [plan.track(k).gain for k in plan.combined.tracks]
    if len(gains) < 2 or any(g is None for g in gains):
        return None
    shown = [round(g, 2) for g in gains if g is not None]
    product = round(math.prod(shown), 2)
    return {"gains": shown, "product": product,
            "interaction": "overlap" if product > round(plan.combined.gain, 2) else "compound"}


MOSTLY_IDLE = 0.5  # a calibrated step whose GPU idles more than this share of its span


def baseline_source(plan: Plan) -> str:
    """Where a calibrated baseline comes from, when that is not a busy decode step: extrapolated from a prefill
    step, or from a mostly idle step (its idle share from the calibration)."""
    m, cal = plan.measured_step, plan.calibration
    if not m or cal is None:
        return ""
    idle = cal.steps[0].idle_share if cal.steps else None
    idle_text = f"its GPU idle {idle:.0%} of the span" if idle is not None and idle > MOSTLY_IDLE else ""
    if all(s.kind == "prefill" for s in cal.steps):
        n = len(cal.steps)
        steps = f"one {m['tokens']}-token prefill step" if n == 1 else f"{n} prefill steps"
        why = "; ".join(x for x in (idle_text, "no decode step measured") if x)
        return f", extrapolated from {steps} ({why})"
    if idle_text:
        return f", calibrated on a mostly idle {m['kind']} step ({idle_text}: host-bound, not the GPU's time)"
    return ""


def memory_limit(sc: Scenario) -> int:
    """The scenario's memory limit as `servescope model` prints it (max conc.): requests whose KV cache fits
    at the full length ISL + OSL."""
    return int(max_concurrency(sc))


def memory_limit_text(sc: Scenario) -> str:
    return f"memory limit: max conc. {memory_limit(sc):,} (KV for each request at ISL+OSL {sc.isl + sc.osl:,} tokens)"


def _one_memory_limit(t: Track, limit: int) -> str:
    """A track's note with the memory limit named once, as the baseline line names it: the speculative track
    checks its break-even up to the planner's batch cap (KV at the mean context, more than max conc.); a gain
    that still pays there pays at max conc. too."""
    checked = t.details.get("max_concurrency_checked")
    phrase = f"still pays at concurrency {checked} (the memory limit)"
    if checked is None or phrase not in t.note or checked < limit:
        return t.note
    return t.note.replace(phrase, f"still pays at the memory limit (max conc. {limit:,})")


def knob_text(knob: str, value: float | str | None) -> str:
    """A fitted knob's value: seconds in engineering units (117 µs, not 0.000117), others to 3 significant digits."""
    if not isinstance(value, int | float):
        return "–"
    return eng_seconds(float(value)) if knob.endswith("_s") else f"{value:.3g}"


def eng_seconds(x: float) -> str:
    """Seconds as s, ms, µs or ns with 3 significant digits."""
    a = abs(x)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if a >= scale or unit == "ns":
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} s"


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
    case = plan.measured.case if plan.measured is not None else plan.gain_range.case
    return f" (80% range {rng[0] * MS_PER_S:.2f}–{rng[1] * MS_PER_S:.2f} ms, case {case})"


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
