"""GPU idle between consecutive steps (findings.step_gaps): checked against an independent computation on a real
trace (the kineto tb_plugin ResNet-50 sample, num_workers=0: the PyTorch tutorial's data-loading bottleneck) and
on small synthetic step lists for the edge cases (overlapping steps, one step, serving kinds)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from independent import DATA, gpu_events, raw_events
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.findings import STEP_GAP_SHARE_LOW, step_gaps

TB = DATA / "traces" / "kineto" / "tb_plugin_samples" / "worker0.1623143089861.pt.trace.json.gz"


def _independent_gaps() -> tuple[list[float], list[float]]:
    """Per ProfilerStep#N (CPU window): the GPU events whose launching runtime call lies in the window, by
    correlation id; then gap = next step's first GPU start − this step's last GPU end, cycle = gap + GPU span."""
    ev = raw_events(TB)
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"),
                   key=lambda e: e["ts"])
    runtime = [e for e in ev if e.get("cat") in ("Runtime", "cuda_runtime") and e.get("ph") == "X"]
    gpu_by_corr: dict[int, list[dict]] = {}
    for g in gpu_events(ev):
        gpu_by_corr.setdefault(g["args"]["correlation"], []).append(g)
    windows = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        gpu = [g for r in runtime if lo <= r["ts"] <= hi for g in gpu_by_corr.get(r["args"]["correlation"], [])]
        windows.append((min(g["ts"] for g in gpu), max(g["ts"] + g["dur"] for g in gpu)))
    gaps = [max(0.0, n[0] - p[1]) for p, n in zip(windows, windows[1:], strict=False)]
    cycles = [g + (p[1] - p[0]) for g, p in zip(gaps, windows, strict=False)]
    return gaps, cycles


def test_data_loading_gap_between_training_steps_matches_an_independent_count() -> None:
    a = analyze_trace(TB)
    (f,) = [f for f in a.findings if f.code == "step_gap"]
    gaps, cycles = _independent_gaps()
    assert f.evidence["pairs"] == len(gaps) == 5
    assert f.evidence["median_gap_us"] == pytest.approx(statistics.median(gaps), abs=1.0)
    assert f.evidence["median_cycle_us"] == pytest.approx(statistics.median(cycles), abs=1.0)
    share = statistics.median(gaps) / statistics.median(cycles)
    assert f.evidence["gap_share_of_cycle"] == pytest.approx(share, abs=1e-4)
    assert f.severity == ("high" if share >= 0.4 else "medium" if share >= 0.2 else "low")
    assert "data loading" in f.message and f.mitigations == ()  # not a serving step: no planner track


def _steps(b: TraceBreakdown, kind: str, spans_gaps: list[tuple[float, float]]) -> TraceBreakdown:
    """b with synthetic steps: (GPU span, gap after it) each, laid end to end from t = 0."""
    t, out = 0.0, []
    for i, (span, gap) in enumerate(spans_gaps):
        out.append(replace(b.steps[0], index=i, kind=kind, gpu_start_us=t, gpu_end_us=t + span, gpu_span_us=span))
        t += span + gap
    return replace(b, steps=tuple(out))


@pytest.fixture(scope="module")
def base() -> TraceBreakdown:
    return analyze_trace(TB).ranks[0]


def test_serving_steps_point_to_async_scheduling(base: TraceBreakdown) -> None:
    b = _steps(base, "decode", [(8000.0, 2000.0)] * 4 + [(8000.0, 0.0)])
    f = step_gaps(b)
    assert f is not None and f.mitigations == ("async_scheduling",) and f.kind == "decode"
    assert f.evidence["median_gap_us"] == 2000.0 and f.evidence["gap_share_of_cycle"] == pytest.approx(0.2)
    assert f.severity == "medium" and "CPU work" in f.message


def test_no_finding_for_small_gaps_overlap_or_one_step(base: TraceBreakdown) -> None:
    small = STEP_GAP_SHARE_LOW * 0.9
    assert step_gaps(_steps(base, "decode", [(10000.0, 10000.0 * small / (1 - small))] * 5)) is None
    overlapping = _steps(base, "decode", [(10000.0, -3000.0)] * 5)  # GPU work of the next step starts early
    assert step_gaps(overlapping) is None
    assert step_gaps(_steps(base, "decode", [(10000.0, 0.0)])) is None
    segments = _steps(base, "unknown", [(10000.0, 50000.0)] * 5)
    segments = replace(segments, steps=tuple(replace(s, source="idle_gap") for s in segments.steps))
    assert step_gaps(segments) is None  # segments are cut at idle gaps: their gaps are not a finding
