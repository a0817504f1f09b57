"""Terminal report for `servescope diff` (Rich tables, readable at 80 columns). Presentation only.

Per step kind: GPU busy and span per step, then tables per class, per collective and the kernels that moved most.
Columns: before and after per step, ratio after/before, and the verdict of the test in servescope.analysis.diff:
"yes" (larger than step-to-step variation), "no" (within it), "?" (cannot tell: fewer than 2 steps on a side).
Kernel names are shortened per table (report.trace_text.short_names): distinct kernels get distinct labels.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from servescope.analysis.diff import Change, KindDiff, Side, TraceDiff
from servescope.report.trace_text import short_names, trace_gpu

VERDICT = {True: "yes", False: "no", None: "?"}


NONE = "–"  # a side with nothing to measure: no step of the kind, or no call


def _ms(us: float, present: bool = True) -> str:
    return f"{us / 1e3:.3f}" if present else NONE


def _us(us: float, present: bool = True) -> str:
    return f"{us:,.1f}" if present else NONE


def _calls(n: float, present: bool = True) -> str:
    if not present:
        return NONE
    return f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}"


def _ratio(c: Change) -> str:
    if c.ratio is None:
        return "new" if c.after > 0 else NONE
    return f"{c.ratio:.2f}x"


def _table(title: str, first: str, columns: tuple[str, ...]) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column(first, no_wrap=True, overflow="ellipsis")
    for col in columns:
        t.add_column(col, justify="right", no_wrap=True)
    return t


def _classes(k: KindDiff) -> Table:
    b, a = k.steps_before > 0, k.steps_after > 0
    t = _table(f"{k.kind}: time per class, µs per step", "class", ("before", "after", "ratio", "signif."))
    for name, c in sorted(k.classes.items(), key=lambda kv: -max(kv[1].before, kv[1].after)):
        t.add_row(name, _us(c.before, b), _us(c.after, a), _ratio(c), VERDICT[c.significant])
    return t


def _collectives(k: KindDiff) -> Table:
    """Per call and per step side by side: a per-call latency can fall while the time per step rises (more calls,
    or one long call: per step = calls/step × mean call, per call = the median call)."""
    b, a = k.steps_before > 0, k.steps_after > 0
    t = _table(f"{k.kind}: collectives, µs per call (the median call) and per step (all its calls)",
               "collective", ("calls/step", "µs", "before", "after", "ratio", "signif."))
    for name, c in k.collectives.items():
        calls, lat, per_step = c.calls_per_step, c.median_us, c.time_us
        t.add_row(name, f"{_calls(calls.before, b)}→{_calls(calls.after, a)}", "per call",
                  _us(lat.before, b and calls.before > 0), _us(lat.after, a and calls.after > 0), _ratio(lat),
                  VERDICT[lat.significant])
        if per_step is not None:
            t.add_row(name, f"{_calls(calls.before, b)}→{_calls(calls.after, a)}", "per step",
                      _us(per_step.before, b), _us(per_step.after, a), _ratio(per_step),
                      VERDICT[per_step.significant])
    return t


def _kernels(k: KindDiff) -> Table:
    b, a = k.steps_before > 0, k.steps_after > 0
    t = _table(f"{k.kind}: kernels that moved most, µs per step", "kernel",
               ("before", "after", "ratio", "calls b→a", "signif."))
    labels = short_names((x.name for x in k.kernels), 36)
    for x in k.kernels:
        calls = f"{_calls(x.calls_per_step.before, b)}→{_calls(x.calls_per_step.after, a)}"
        t.add_row(labels[x.name], _us(x.time_us.before, b), _us(x.time_us.after, a), _ratio(x.time_us), calls,
                  VERDICT[x.time_us.significant])
    return t


def _side(label: str, path: str, s: Side | None) -> str:
    if s is None:
        return f"{label} {path}"
    gpus = ", ".join(s.gpus) or trace_gpu(None)
    sources = ", ".join(f"{n} {src.replace('_', '-')}" for src, n in s.step_sources.items()) or "no steps"
    ranks = f"{s.ranks} ranks, " if s.ranks > 1 else ""
    return f"{label} {path} · {gpus} · {ranks}steps: {sources}"


def diff_lines_header(d: TraceDiff) -> list[str]:
    lines = [_side("before:", d.before_path, d.before), _side("after: ", d.after_path, d.after)]
    if d.compared:
        lines.append(f"compared: {d.compared}")
    if d.kinds:
        lines.append("verdict (step time = GPU span per step): " + "; ".join(
            f"{k.kind} {k.verdict}" + (f" ({_ratio(k.span_us)})" if k.span_us.ratio is not None else "")
            for k in d.kinds))
    return [*lines, f"significant (signif.): {d.test}; ratio = after / before"]


def render_diff(d: TraceDiff, console: Console) -> None:
    for line in diff_lines_header(d):
        console.print(line, highlight=False, soft_wrap=False)
    for w in d.context_warnings:
        console.print(f"[yellow]warning[/yellow]: {w}", highlight=False)
    for k in d.kinds:
        b, a = k.steps_before > 0, k.steps_after > 0
        console.print()
        console.print(
            f"[bold]{k.kind}[/bold]: {k.steps_before} step(s) before, {k.steps_after} after; GPU busy "
            f"{_ms(k.busy_us.before, b)} → {_ms(k.busy_us.after, a)} ms per step ({_ratio(k.busy_us)}, "
            f"significant: {VERDICT[k.busy_us.significant]}); span {_ms(k.span_us.before, b)} → "
            f"{_ms(k.span_us.after, a)} ms per step ({_ratio(k.span_us)}): {k.verdict}",
            highlight=False,
        )
        console.print(_classes(k))
        if k.collectives:
            console.print(_collectives(k))
        if k.kernels:
            console.print(_kernels(k))
    for w in d.warnings:
        if w not in d.context_warnings:  # those are under the header
            console.print(f"[yellow]warning[/yellow]: {w}", highlight=False)
