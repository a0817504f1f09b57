"""`model --measured`: the user's typed figures set the deployment's TPOT levels (issue 17 parts 1–2). Checked
against independent arithmetic: the calibrated point reproduces the figure, the other points follow the fitted
levels term by term, and the range is the one measured held out (specs/data/calibrated_ranges.json)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servescope.calibrate.figures import parse_figures
from servescope.calibrate.measured import calibrate_points
from servescope.cli import main
from servescope.errors import MeasurementError
from servescope.perfmodel import Scenario, predict
from servescope.specs import tables

KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]


@pytest.fixture(scope="module")
def kimi() -> Scenario:
    return Scenario.build(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16", quant="native")


def test_one_tpot_calibrates_every_point(kimi: Scenario) -> None:
    points = predict(kimi, [1, 16, 64])
    m = calibrate_points(kimi, points, parse_figures(["tpot=12.1ms@c1"]))
    assert m.points[0].tpot_s == pytest.approx(12.1e-3, rel=0.01) and m.case == "calibrated_1pt"
    q10, q90 = tables.calibrated_ranges()["cases"]["calibrated_1pt"]["tpot"]
    for after in m.points:
        assert sum(after.terms_s.values()) == pytest.approx(after.tpot_s)
        assert (after.tpot_low_s, after.tpot_high_s) == pytest.approx((after.tpot_s * q10, after.tpot_s * q90))
        assert after.provenance["case"] == "calibrated_1pt"


def test_two_concurrencies_set_the_point_between() -> None:
    """Figures the model itself makes at 1.1× (c1) and 1.3× (c64) its TPOT: reproduced, and the point between them
    lands between the two ratios (the knobs move terms, each monotone in the batch)."""
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100", tp=1)
    points = predict(sc, [1, 8, 64])
    t1, t64 = 1.1 * points[0].tpot_s, 1.3 * points[2].tpot_s
    m = calibrate_points(sc, points, parse_figures([f"tpot={t1 * 1e3:.4g}ms@c1", f"tpot={t64 * 1e3:.4g}ms@c64"]))
    assert m.case == "calibrated_2pt"
    assert m.points[0].tpot_s == pytest.approx(t1, rel=0.01) and m.points[2].tpot_s == pytest.approx(t64, rel=0.01)
    assert 1.1 * 0.99 < m.points[1].tpot_s / points[1].tpot_s < 1.3 * 1.01


def test_figures_the_physics_cannot_reach_or_that_do_not_match_are_refused(kimi: Scenario) -> None:
    points = predict(kimi, [1])
    with pytest.raises(MeasurementError, match="faster than the physical floor"):
        calibrate_points(kimi, points, parse_figures(["tpot=1ms@c1"]))
    with pytest.raises(MeasurementError, match="ISL 8000, the scenario has ISL 1024"):
        calibrate_points(kimi, points, parse_figures(["tpot=12ms@c1,isl=8000"]))


def test_a_ttft_figure_is_set_aside_with_the_reason(kimi: Scenario) -> None:
    points = predict(kimi, [1])
    m = calibrate_points(kimi, points, parse_figures(["ttft=300ms@c1"]))
    assert m.case == "uncalibrated" and m.points == tuple(points) and "one TTFT load point" in m.notes[0]


def test_cli_model_measured() -> None:
    out = CliRunner().invoke(main, ["model", *KIMI, "--concurrency", "1,64", "--measured", "tpot=12.1ms@c1",
                                    "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["points"][0]["tpot_ms"] == pytest.approx(12.1, rel=0.01)
    assert doc["calibration"]["used"] == ["tpot=12.1ms@c1"] and doc["calibration"]["case"] == "calibrated_1pt"
    bad = CliRunner().invoke(main, ["model", *KIMI, "--measured", "tpot=fast"])
    assert bad.exit_code == 1 and len(bad.output.strip().splitlines()) == 1
