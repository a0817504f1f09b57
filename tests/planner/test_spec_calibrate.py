"""The speculative track calibrated on a measured gain (planner.spec_calibrate, issue 26 item 3): the reference box
(Kimi-K2.5 INT4 experts, 8× RTX PRO 6000, vLLM TP=8) with EAGLE-3 measured +32 % at concurrency 1."""

from __future__ import annotations

import pytest

from servescope.calibrate.figure_fit import fit_figures
from servescope.calibrate.figures import parse_figure, parse_figures
from servescope.errors import MeasurementError
from servescope.perfmodel import Scenario
from servescope.planner import plan
from servescope.planner.spec_calibrate import calibrated_spec
from servescope.planner.speculative import SpecConfig, bundled_acceptance


@pytest.fixture(scope="module")
def kimi() -> Scenario:
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, isl=1024, osl=1024)


def _gain(p) -> float:  # type: ignore[no-untyped-def]
    t = p.track("speculative_decoding")
    assert t.gain is not None
    return float(t.gain)


def test_the_measured_gain_is_reproduced_where_it_was_measured(kimi: Scenario) -> None:
    fit = fit_figures(kimi, parse_figures(["tpot=12.1ms@c1", "spec_gain=1.32@c1"]))
    assert [f.text for f in fit.spec] == ["spec_gain=1.32@c1"]
    p = plan(kimi, concurrency=1, measured=fit)
    assert _gain(p) == pytest.approx(1.32, rel=0.01)
    assert any("calibrated on spec_gain=1.32@c1" in w for w in p.warnings)


def test_other_concurrencies_follow_the_physics_with_that_acceptance(kimi: Scenario) -> None:
    """At c128 the track prices exactly what the calibrated acceptance, given by hand, prices: the figure sets the
    acceptance, the verify-step physics the rest."""
    fit = fit_figures(kimi, parse_figures(["tpot=12.1ms@c1", "spec_gain=1.32@c1"]))
    cfg, _ = calibrated_spec(fit.apply(kimi), None, fit.spec)
    assert cfg is not None and cfg.acceptance is not None
    bundled = bundled_acceptance("kimi-k2.5", "eagle3")
    assert bundled is not None
    ratios = [a / b for a, b in zip(cfg.acceptance, bundled.positions, strict=False) if a < 0.99 and b > 0.05]
    assert ratios and max(ratios) == pytest.approx(min(ratios), rel=1e-6)  # one factor on every position
    by_hand = plan(kimi, concurrency=128, measured=fit_figures(kimi, parse_figures(["tpot=12.1ms@c1"])),
                   spec=SpecConfig(acceptance=cfg.acceptance))
    calibrated = plan(kimi, concurrency=128, measured=fit)
    assert _gain(calibrated) == pytest.approx(_gain(by_hand), rel=1e-9)
    assert abs(_gain(calibrated) - 1.32) > 0.05  # not the c1 number carried over


def test_a_gain_below_one_or_above_the_drafter_is_refused(kimi: Scenario) -> None:
    with pytest.raises(MeasurementError, match="spec_gain 0.9 is below 1"):
        parse_figure("spec_gain=0.9@c1")
    fit = fit_figures(kimi, parse_figures(["spec_gain=9@c1"]))
    with pytest.raises(MeasurementError, match="above what eagle3 can give"):
        plan(kimi, concurrency=1, measured=fit)


def test_a_user_acceptance_is_checked_not_refitted(kimi: Scenario) -> None:
    fit = fit_figures(kimi, parse_figures(["spec_gain=1.32@c1"]))
    cfg, note = calibrated_spec(kimi, SpecConfig(acceptance=(0.6, 0.4)), fit.spec)
    assert cfg is not None and cfg.acceptance == (0.6, 0.4) and "the acceptance is yours" in note
