"""Compare two trace analyses, step kind by step kind: what changed per step, and is it more than noise?

Does: for every step kind present in either trace, compare per step
  - each kernel class: union GPU time (µs per step);
  - each collective: calls per step and per-call latency (µs);
  - each kernel name: summed time (µs per step), calls per step and per-call latency (µs);
giving before, after, ratio = after / before, and a verdict on whether the change is larger than the
step-to-step variation of each side (the test below). A folder of rank files pools the steps of all its ranks:
each (rank, step) is one sample, so "per step" means per step per GPU.
Does not: load files itself (it calls `analyze_trace`), align individual steps between the two traces, or format
anything (report/diff_doc.py, report/diff_text.py do).

Values shown: `before`/`after` are means per step (total over the kind's steps ÷ steps) for times and calls; for
per-call latency, the median over steps of each step's median call (steps without a call skipped).

Significance test (robust to a few outlier steps), on the per-step values b_1..b_n (before), a_1..a_m (after):

    significant  ⇔  |median(a) − median(b)| > K · (MAD(b) + MAD(a)),   K = 3,

MAD = median absolute deviation from the median (unscaled, same unit as the values). With fewer than
MIN_STEPS steps on either side the step-to-step variation is unknown and the verdict is None: "cannot tell".

Per step kind a verdict on the step time (GPU span per step): "improved" / "regressed" when the test says
significant (direction: the sign of Δ median), "no change" when not, "cannot tell" under MIN_STEPS on a side;
`regressions(d, pct)` = the kinds "regressed" with step-time ratio (of the means shown) above 1 + pct/100.
Context: each side's GPUs (device names), engines and step sources (`Side`), what is compared ("engine steps",
"profiler steps", or "GPU segments" when a side has only unlabelled idle-gap segments), and warnings when the GPUs
or engines differ, when steps are unlabelled, or when the two sides share no step-label pattern (digits ignored).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servescope.analysis.analyze import TraceAnalysis, analyze_trace
from servescope.analysis.breakdown import StepBreakdown

K_MAD = 3.0
MIN_STEPS = 2
ALL_KERNELS = 1_000_000  # top_n that keeps every kernel name of every step
TEST = (f"|Δ median per step| > {K_MAD:g}·(MAD before + MAD after); "
        f"'cannot tell' with fewer than {MIN_STEPS} steps on a side")


@dataclass(frozen=True)
class Change:
    """One quantity before and after. `ratio` = after / before (None when before is 0); `significant` is None
    when a side has too few steps to measure its variation."""

    before: float
    after: float
    ratio: float | None
    significant: bool | None


@dataclass(frozen=True)
class CollectiveDiff:
    calls_per_step: Change
    median_us: Change  # per-call latency
    time_us: Change | None = None  # summed time of its calls per step (= calls per step × mean call)


@dataclass(frozen=True)
class KernelDiff:
    name: str
    kernel_class: str
    time_us: Change  # summed time per step
    calls_per_step: Change
    median_us: Change  # per-call latency


@dataclass(frozen=True)
class KindDiff:
    kind: str
    steps_before: int
    steps_after: int
    busy_us: Change  # GPU busy (interval union) per step
    span_us: Change  # GPU span per step
    classes: dict[str, Change]
    collectives: dict[str, CollectiveDiff]
    kernels: tuple[KernelDiff, ...]  # largest absolute change in time per step first
    verdict: str = "cannot tell"  # of the step time (span_us): see `verdict`

    @property
    def step_time_us(self) -> Change:
        """Step time = GPU span per step (first GPU start to last GPU end of the step)."""
        return self.span_us


@dataclass(frozen=True)
class Side:
    """What one side of a diff is: the GPUs its ranks ran on (device names from the trace; empty when the trace
    names none), the engines that labelled its steps (`vllm`, `sglang`, `atom`), and the steps per source
    (`vllm`, `sglang`, `atom`, `profiler_step`, `idle_gap` = unlabelled GPU segments split at idle gaps)."""

    path: str
    gpus: tuple[str, ...]
    engines: tuple[str, ...]
    step_sources: dict[str, int]
    ranks: int

    @property
    def labelled(self) -> bool:
        return any(src != "idle_gap" for src in self.step_sources)


@dataclass(frozen=True)
class TraceDiff:
    before_path: str
    after_path: str
    kinds: tuple[KindDiff, ...]
    test: str
    warnings: tuple[str, ...]
    before: Side | None = None
    after: Side | None = None
    compared: str = ""  # "engine steps" | "profiler steps" | "GPU segments" (unlabelled idle-gap segments)
    shared_label_patterns: int = 0  # step-label patterns (digits ignored) found on both sides
    context_warnings: tuple[str, ...] = ()  # the warnings about what is compared (also first in `warnings`)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k.kind}: {k.steps_before}→{k.steps_after} steps" for k in self.kinds)
        return f"TraceDiff({self.before_path!r} → {self.after_path!r}; {kinds}; {len(self.warnings)} warning(s))"


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else 0.0


def _mad(values: np.ndarray) -> float:
    return float(np.median(np.abs(values - np.median(values)))) if values.size else 0.0


def significant(before: Iterable[float], after: Iterable[float]) -> bool | None:
    """The module's test on per-step values; None ("cannot tell") with fewer than MIN_STEPS on a side."""
    b, a = np.asarray(list(before), dtype=float), np.asarray(list(after), dtype=float)
    if b.size < MIN_STEPS or a.size < MIN_STEPS:
        return None
    return bool(abs(_median(a) - _median(b)) > K_MAD * (_mad(b) + _mad(a)))


def verdict(before: Iterable[float], after: Iterable[float]) -> str:
    """Of per-step times (lower is better): "improved" / "regressed" (by the sign of Δ median) when the change
    is `significant`, "no change" when it is within the noise, "cannot tell" under MIN_STEPS on a side."""
    b, a = list(before), list(after)
    sig = significant(b, a)
    if sig is None:
        return "cannot tell"
    delta = _median(np.asarray(a, dtype=float)) - _median(np.asarray(b, dtype=float))
    if not sig or delta == 0:
        return "no change"
    return "improved" if delta < 0 else "regressed"


def regressions(d: TraceDiff, pct: float) -> list[KindDiff]:
    """Step kinds whose step time regressed beyond noise by more than `pct` percent (`--fail-on-regression`)."""
    return [k for k in d.kinds if k.verdict == "regressed" and k.span_us.ratio is not None
            and k.span_us.ratio > 1 + pct / 100]


def _ratio(before: float, after: float) -> float | None:
    return after / before if before > 0 else None


def _mean_change(before: list[float], after: list[float]) -> Change:
    """Mean per step on each side; the test on the per-step values."""
    b = float(np.mean(before)) if before else 0.0
    a = float(np.mean(after)) if after else 0.0
    return Change(b, a, _ratio(b, a), significant(before, after))


def _median_change(before: list[float], after: list[float]) -> Change:
    """Per-call latency: median over steps of each step's median; the test on those per-step medians."""
    b, a = _median(np.asarray(before)), _median(np.asarray(after))
    return Change(b, a, _ratio(b, a), significant(before, after))


Steps = list[StepBreakdown]


def _classes(before: Steps, after: Steps) -> dict[str, Change]:
    """Union µs per step of each class (0 in a step without it)."""
    names = sorted({c for s in before + after for c in s.classes_us})
    return {c: _mean_change([s.classes_us.get(c, 0.0) for s in before], [s.classes_us.get(c, 0.0) for s in after])
            for c in names}


def _calls(steps: Steps, c: str) -> list[float]:
    return [float(s.collectives[c].calls) if c in s.collectives else 0.0 for s in steps]


def _medians(steps: Steps, c: str) -> list[float]:
    return [s.collectives[c].median_us for s in steps if c in s.collectives]


def _totals(steps: Steps, c: str) -> list[float]:
    return [s.collectives[c].total_us if c in s.collectives else 0.0 for s in steps]


def _collectives(before: Steps, after: Steps) -> dict[str, CollectiveDiff]:
    names = sorted({c for s in before + after for c in s.collectives})
    return {c: CollectiveDiff(_mean_change(_calls(before, c), _calls(after, c)),
                              _median_change(_medians(before, c), _medians(after, c)),
                              _mean_change(_totals(before, c), _totals(after, c)))
            for c in names}


def _kernel_table(steps: Steps) -> dict[str, tuple[str, list[tuple[float, int, float]]]]:
    """name → (class, per-step (total_us, calls, median_us) for the steps that ran it)."""
    table: dict[str, tuple[str, list[tuple[float, int, float]]]] = {}
    for s in steps:
        for k in s.top_kernels:
            table.setdefault(k.name, (k.kernel_class, []))[1].append((k.total_us, k.calls, k.median_us))
    return table


def _kernels(before: Steps, after: Steps, top_n: int) -> tuple[KernelDiff, ...]:
    tb, ta = _kernel_table(before), _kernel_table(after)

    def padded(rows: list[tuple[float, int, float]], n: int, i: int) -> list[float]:
        return [float(r[i]) for r in rows] + [0.0] * (n - len(rows))

    out = []
    for name in sorted(set(tb) | set(ta)):
        rb, ra = tb.get(name, ("", []))[1], ta.get(name, ("", []))[1]
        out.append(KernelDiff(
            name=name, kernel_class=(tb.get(name) or ta[name])[0],
            time_us=_mean_change(padded(rb, len(before), 0), padded(ra, len(after), 0)),
            calls_per_step=_mean_change(padded(rb, len(before), 1), padded(ra, len(after), 1)),
            median_us=_median_change([r[2] for r in rb], [r[2] for r in ra]),
        ))
    out.sort(key=lambda k: (-abs(k.time_us.after - k.time_us.before), k.name))
    return tuple(out[:top_n])


def _steps_of(a: TraceAnalysis, kind: str) -> Steps:
    return [s for b in a.ranks for s in b.steps if s.kind == kind]


ENGINE_SOURCES = ("vllm", "sglang", "atom")  # step sources that are a serving engine's own labels


def trace_side(a: TraceAnalysis) -> Side:
    steps = [s for b in a.ranks for s in b.steps]
    sources = Counter(s.source for s in steps)
    return Side(path=a.path, gpus=tuple(dict.fromkeys(b.device_name for b in a.ranks if b.device_name)),
                engines=tuple(src for src in sources if src in ENGINE_SOURCES),
                step_sources=dict(sorted(sources.items())), ranks=len(a.ranks))


def _label_patterns(a: TraceAnalysis) -> set[str]:
    """Step labels with digits ignored (`ProfilerStep#1009` → `ProfilerStep#N`); idle-gap segments have none."""
    return {re.sub(r"\d+", "N", s.label) for b in a.ranks for s in b.steps if s.source != "idle_gap"}


def _compared(b: Side, a: Side) -> str:
    if not b.labelled or not a.labelled:
        return "GPU segments"
    engine = b.engines and a.engines
    return "engine steps" if engine else "profiler steps"


def _context_warnings(b: Side, a: Side, shared: int) -> list[str]:
    out = []
    if b.gpus and a.gpus and set(b.gpus) != set(a.gpus):
        out.append(f"the GPUs differ (before: {', '.join(b.gpus)}; after: {', '.join(a.gpus)}): every ratio mixes "
                   "the change under test with the hardware; compare traces taken on the same GPU model")
    if b.engines and a.engines and set(b.engines) != set(a.engines):
        out.append(f"the engines differ (before: {', '.join(b.engines)}; after: {', '.join(a.engines)})")
    if not b.labelled and not a.labelled:
        out.append("neither trace has step labels: the comparison is of GPU segments split at idle gaps, not of "
                   "engine steps; segment counts and lengths depend on where the profiler caught the run")
    elif not b.labelled or not a.labelled:
        which = "before" if not b.labelled else "after"
        out.append(f"the {which} trace has no step labels (GPU segments split at idle gaps) while the other has "
                   "labelled steps: the steps compared are not the same unit")
    elif shared == 0:
        out.append("the traces share no step label (digits ignored): are they of the same workload? Steps are "
                   "compared by kind only")
    return out


def diff_analyses(before: TraceAnalysis, after: TraceAnalysis, top_n: int = 10) -> TraceDiff:
    """Compare two analyses kind by kind. For complete kernel rows, analyse with top_n=ALL_KERNELS."""
    kinds = sorted({s.kind for a in (before, after) for b in a.ranks for s in b.steps})
    sb_, sa_ = trace_side(before), trace_side(after)
    shared = len(_label_patterns(before) & _label_patterns(after))
    context = _context_warnings(sb_, sa_, shared)
    warnings = context + [f"before: {w}" for w in before.warnings] + [f"after: {w}" for w in after.warnings]
    out = []
    for kind in kinds:
        sb, sa = _steps_of(before, kind), _steps_of(after, kind)
        if not sb or not sa:
            side = "before" if not sb else "after"
            warnings.append(f"{kind}: no {kind} steps {side}; only the other side's values are shown")
        elif len(sb) < MIN_STEPS or len(sa) < MIN_STEPS:
            warnings.append(f"{kind}: {len(sb)} step(s) before, {len(sa)} after: fewer than {MIN_STEPS} on a "
                            "side, so no change can be called significant (cannot tell)")
        span_b, span_a = [s.gpu_span_us for s in sb], [s.gpu_span_us for s in sa]
        span = _mean_change(span_b, span_a)
        out.append(KindDiff(
            kind=kind, steps_before=len(sb), steps_after=len(sa),
            busy_us=_mean_change([s.gpu_busy_us for s in sb], [s.gpu_busy_us for s in sa]),
            span_us=span,
            classes=_classes(sb, sa), collectives=_collectives(sb, sa), kernels=_kernels(sb, sa, top_n),
            verdict=verdict(span_b, span_a),
        ))
    return TraceDiff(before.path, after.path, tuple(out), TEST, tuple(warnings), before=sb_, after=sa_,
                     compared=_compared(sb_, sa_), shared_label_patterns=shared,
                     context_warnings=tuple(context))


def diff_traces(before: str | Path, after: str | Path, kind: str | None = None, top_n: int = 10) -> TraceDiff:
    """Analyse two traces (files or rank folders) and compare them; `top_n` kernels with the largest change."""
    a_before = analyze_trace(before, kind=kind, top_n=ALL_KERNELS)
    a_after = analyze_trace(after, kind=kind, top_n=ALL_KERNELS)
    return diff_analyses(a_before, a_after, top_n)
