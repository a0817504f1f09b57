"""The calibration's solver (servescope.calibrate.fit) is fast without changing results: each distinct step shape
is priced once per evaluation, and the bisection stops once its bracket is fixed. Checked on the real B200 trace
(vLLM gpt-oss-120b, one eager prefill of 888 tokens) against plain computations written out here: pricing every
step, and a full 60-halving bisection."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import servescope.calibrate.fit as fit
from independent import DATA
from servescope.breakdown import breakdown
from servescope.calibrate import calibrate
from servescope.perfmodel import Efficiency, Scenario, prefill_step
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


def test_pricing_each_shape_once_keeps_every_bit(gpt_oss, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pricers = [fit.StepPricer("prefill", t, 1) for t in (888, 512, 888, 2048, 888, 512)]
    plain = [fit.step_classes(prefill_step(gpt_oss, p.tokens, batch=1)) for p in pricers]
    calls: list[int] = []

    def counted(sc, tokens, batch=1, context_len=0):  # type: ignore[no-untyped-def]
        calls.append(tokens)
        return prefill_step(sc, tokens, batch=batch, context_len=context_len)

    monkeypatch.setattr(fit, "prefill_step", counted)
    assert fit.predict_classes(pricers, gpt_oss) == plain
    assert sorted(calls) == [512, 888, 2048]  # three distinct shapes, six steps


@pytest.mark.parametrize(("cls", "knob"), [("gemm", "compute_eff"), ("moe", "moe_bw_eff"),
                                           ("communication", "collective_bw_scale"),
                                           ("overhead", "launch_overhead_s")])
def test_early_stop_is_the_full_bisection(trace_breakdown, gpt_oss, cls, knob) -> None:  # type: ignore[no-untyped-def]
    pricers = [fit.StepPricer("prefill", 888, 1), fit.StepPricer("prefill", 300, 1)]
    total = fit.class_total(cls, gpt_oss, pricers)
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
