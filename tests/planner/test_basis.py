"""What a plan's numbers rest on (issue 26.4): measured only where the user measured that point, calibrated inside
the measured concurrencies, extrapolated outside them, modelled without figures — in the planner, the JSON, the
text and `verify`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.calibrate.figure_fit import FigureFit, Knob, MeasuredPoint
from servescope.calibrate.terms import TermFit
from servescope.cli import main
from servescope.planner.basis import BASES, basis_at, what_if_basis

KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8"]


def _fit(*points: tuple[int, float], residual: float = 0.0) -> FigureFit:
    """A calibrated fit with TPOT points (concurrency, residual of that point's figure)."""
    pts = tuple(MeasuredPoint(c, 0.0121, None, (f"tpot@c{c}",)) for c, _ in points)
    residuals = tuple((f"tpot@c{c}", r) for c, r in points)
    return FigureFit(terms=TermFit((), residuals, ()), knobs=(Knob("decode level", 0.9, "decode step", ("x",)),),
                     points=pts, residuals=residuals, numbers=len(points))


def test_basis_by_concurrency() -> None:
    fit = _fit((1, 0.0), (128, 0.0))
    assert basis_at(fit, None, 1) == "measured"
    assert basis_at(fit, None, 128) == "measured"
    assert basis_at(fit, None, 64) == "calibrated"  # between two measured loads
    assert basis_at(fit, None, 352) == "extrapolated"  # above the highest measured load
    assert basis_at(None, None, 1) == "modelled"
    assert set(BASES) == {"measured", "calibrated", "extrapolated", "modelled"}


def test_a_point_the_calibration_misses_is_not_measured() -> None:
    """A figure at c128 the calibrated model misses by 34 % is not what the plan prints there."""
    fit = _fit((1, 0.0), (128, 0.34))
    assert basis_at(fit, None, 128) == "calibrated"


def test_a_what_if_is_never_measured() -> None:
    fit = _fit((1, 0.0))
    assert what_if_basis(fit, None, 1) == "calibrated"
    assert what_if_basis(fit, None, 8) == "extrapolated"


def _plan(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(main, ["plan", *KIMI, *extra, "--json", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    return json.loads(out.read_text())


def test_aggregate_target_is_not_called_measured(tmp_path: Path) -> None:
    """The issue: `--target 1000tok/s` planned at the best concurrency (not 1) printed "measured TPOT … at
    concurrency 352" because the word was taken at the plan's concurrency, not the baseline's."""
    args = ["--target", "1000tok/s", "--measured", "tpot=12.1ms@c1"]
    doc = _plan(tmp_path, *args)
    assert doc["baseline"]["concurrency"] > 1
    assert doc["baseline"]["basis"] == "extrapolated"  # only c1 was measured
    assert doc["combined"]["basis"] in ("calibrated", "extrapolated")
    assert doc["target"]["basis"] != "measured"
    assert doc["measured"]["baseline"] == "extrapolated"
    text = CliRunner().invoke(main, ["plan", *KIMI, *args]).stdout
    assert "measured TPOT" not in text and "baseline: extrapolated TPOT" in " ".join(text.split())


def test_measured_baseline_and_verify(tmp_path: Path) -> None:
    doc = _plan(tmp_path, "--measured", "tpot=12.1ms@c1")
    assert doc["baseline"]["basis"] == "measured"
    assert doc["baseline"]["tpot_ms"] == pytest.approx(12.1, rel=0.01)
    assert doc["ceiling"]["basis"] != "measured"
    track = next(t["kind"] for t in doc["tracks"] if t["gain"] and t["gain"] > 1)
    args = ["verify", str(tmp_path / "plan.json"), "--before", "tpot=12.1ms@c1", "--after", "tpot=11ms@c1",
            "--applied", track]
    text = " ".join(CliRunner().invoke(main, args).stdout.split())
    assert "plan baseline: TPOT 12.10 ms (measured)" in text and "(predicted)" not in text
    vdoc = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert vdoc["baseline"]["basis"] == "measured"


def test_uncalibrated_plan_is_modelled(tmp_path: Path) -> None:
    doc = _plan(tmp_path)
    assert {doc[k]["basis"] for k in ("baseline", "combined", "ceiling")} == {"modelled"}
