"""The calibration's solver (servescope.calibrate.fit) is fast without changing results: each distinct step shape
has its efficiency-free parts built once and only recombined per evaluation, and the bisection stops once its
bracket is fixed. Checked with the scenario of the real B200 trace (vLLM gpt-oss-120b, 8x B200 TP=8, one eager
prefill of 888 tokens) against plain computations written out here: the perfmodel's prefill_step / decode_step
called for every step, and a full 60-halving bisection."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import servescope.calibrate.fit as fit
from independent import DATA
from servescope.analysis.breakdown import breakdown
from servescope.calibrate import calibrate
from servescope.perfmodel import Efficiency, Scenario
from servescope.trace import load_trace

TRACE = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"


@pytest.fixture(scope="module")
def trace_breakdown():  # type: ignore[no-untyped-def]
    return breakdown(load_trace(TRACE))


@pytest.fixture(scope="module")
def gpt_oss() -> Scenario:
    return Scenario.build("gpt-oss-120b", "b200", tp=8, quant="native", efficiency=Efficiency())


def _plain_bisection(knob: str, target_s: float, eff: Efficiency, total) -> float:  # type: ignore[no-untyped-def]
    """The solver as it was: 60 halvings, no early stop."""
    lo, hi = fit.EFF_RANGE if knob.endswith("_eff") else fit.SCALE_RANGE if knob.endswith("_scale") \
        else fit.OVERHEAD_RANGE
    increasing = knob in ("collective_latency_scale", "kernel_overhead_s", "launch_overhead_s")
    log = lo > 0
    for _ in range(60):
        mid = (lo * hi) ** 0.5 if log else (lo + hi) / 2
        if (total(eff.scaled(**{knob: mid})) > target_s) == increasing:
            hi = mid
        else:
            lo = mid
    return (lo * hi) ** 0.5 if log else (lo + hi) / 2


EFFS = [Efficiency(), Efficiency().scaled(compute_eff=0.31, gemm_bw_eff=0.9, attn_bw_eff=0.2, moe_bw_eff=1.2),
        Efficiency().scaled(collective_bw_scale=0.4, collective_latency_scale=3.0, launch_overhead_s=2e-5,
                            kernel_overhead_s=4e-6)]


@pytest.mark.parametrize("eff", EFFS)
@pytest.mark.parametrize("graphs", [False, True])
def test_recombined_parts_are_the_perfmodel_step_bit_for_bit(gpt_oss, eff, graphs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """PricedSteps builds each distinct shape's efficiency-free parts once; under any efficiency its class times
    equal those of prefill_step / decode_step called afresh for every step (exact float equality)."""
    sc = gpt_oss.with_(cuda_graphs=graphs)
    pricers = [fit.StepPricer("prefill", t, b) for t, b in ((888, 1), (512, 2), (888, 1), (2048, 4), (888, 1))]
    pricers += [fit.StepPricer("decode", 1, 32, 1500.0), fit.StepPricer("decode", 4, 8, 900.0),
                fit.StepPricer("decode", 1, 32, 1500.0)]
    fresh = [fit.step_classes(p(sc.with_(efficiency=eff))) for p in pricers]
    calls: list[object] = []
    real = fit.step_parts

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1:])
        return real(*args, **kwargs)

    monkeypatch.setattr(fit, "step_parts", counted)
    priced = fit.PricedSteps(pricers, sc)
    assert priced.classes(eff) == fresh
    for cls in (*fit.CLASSES, "step"):
        assert priced.total(cls)(eff) == sum(f[cls] for f in fresh)
    assert len(calls) == 5  # 8 steps, 5 distinct shapes, parts built once


@pytest.mark.parametrize(("cls", "knob"), [("gemm", "compute_eff"), ("moe", "moe_bw_eff"),
                                           ("communication", "collective_bw_scale"),
                                           ("overhead", "launch_overhead_s")])
def test_early_stop_is_the_full_bisection(trace_breakdown, gpt_oss, cls, knob) -> None:  # type: ignore[no-untyped-def]
    total = fit.PricedSteps([fit.StepPricer("prefill", 888, 1), fit.StepPricer("prefill", 300, 1)], gpt_oss).total(cls)
    eff = gpt_oss.efficiency
    for target_s in (total(eff) * 0.7, total(eff) * 1.9, 1e-9, 10.0):  # reachable, and beyond both ends
        expected = _plain_bisection(knob, target_s, eff, total)
        assert fit.knob_value(fit._solve(knob, target_s, eff, total), knob) == expected


def test_repeated_steps_fit_like_one(trace_breakdown, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    """Ten copies of the measured step: the same knobs (sums of ten equal numbers have the same root up to
    rounding) and each copy's prediction equals the one-step calibration's."""
    step = trace_breakdown.steps[0]
    tiled = replace(trace_breakdown, steps=tuple(replace(step, index=i) for i in range(10)))
    one, ten = calibrate(trace_breakdown, gpt_oss), calibrate(tiled, gpt_oss)
    assert ten.knobs == one.knobs and len(ten.steps) == 10
    for knob in one.knobs.values():
        assert math.isclose(fit.knob_value(ten.efficiency, knob), fit.knob_value(one.efficiency, knob),
                            rel_tol=1e-9)
    for s in ten.steps:
        for cls, v in one.steps[0].predicted_s.items():
            assert math.isclose(s.predicted_s[cls], v, rel_tol=1e-9, abs_tol=1e-15), cls
