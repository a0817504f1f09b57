"""Floors and ceilings agree (issue 26.7): a calibrated ceiling uses the calibrated levels, no combination is below
the ceiling printed beside it, a levelled step never goes under its physical floor, and `model` and `plan` mean
one thing by "physical floor" (perfmodel floor_s)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.perfmodel.scenario import Scenario
from servescope.planner import TRACK_KINDS, plan
from servescope.planner.measured import levelled
from servescope.planner.whatif import PerfModel

KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--isl", "1024", "--osl", "1024"]


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("figures", [["tpot=12.1ms@c1"], ["tpot=14ms@c1"],
                                     ["tpot=12.1ms@c1", "output=1300tok/s@c128,isl=1024,osl=1024"]])
@pytest.mark.parametrize("extra", [[], ["--concurrency", "64"], ["--target", "1000tok/s"]])
def test_no_combination_below_its_ceiling(figures: list[str], extra: list[str]) -> None:
    doc = _json("plan", *KIMI, *[a for f in figures for a in ("--measured", f)], *extra)
    c, ceil = doc["combined"], doc["ceiling"]
    if doc["objective"] == "tpot":
        assert ceil["tpot_ms"] <= c["tpot_ms"] * (1 + 1e-9)
    else:
        assert ceil["output_tok_s"] >= c["output_tok_s"] * (1 - 1e-9)
    assert ceil["basis"] in ("calibrated", "extrapolated")  # the levels apply: not an uncalibrated number


def test_a_calibrated_ceiling_uses_the_levels() -> None:
    """One TPOT figure 30 % above the uncalibrated model: the ceiling moves with the levels, as the baseline does."""
    raw = _json("plan", *KIMI)
    slow = raw["baseline"]["tpot_ms"] * 1.3
    cal = _json("plan", *KIMI, "--measured", f"tpot={slow:.4f}ms@c1")
    assert cal["baseline"]["tpot_ms"] == pytest.approx(slow, rel=0.01)
    assert cal["ceiling"]["tpot_ms"] > raw["ceiling"]["tpot_ms"] * 1.05


class _Levels:
    """A fit whose decode levels are 0.2 on every term (planner.measured.levelled reads these two)."""

    def multipliers(self) -> dict[str, float]:
        return dict.fromkeys(("weights", "kv", "compute", "communication", "overhead", "indexer", "recurrent"), 0.2)

    def class_multipliers(self) -> dict[str, float]:
        return {}


def test_a_levelled_step_is_never_under_its_physical_floor() -> None:
    sc = Scenario.build("llama-3.1-8b", "h100_sxm", tp=1)
    for batch in (1, 64):
        raw = PerfModel().decode(sc, batch, sc.decode_context)
        step = levelled(raw, _Levels())  # type: ignore[arg-type]
        assert step.step_time_s == pytest.approx(max(raw.floor_s, 0.2 * raw.step_time_s), rel=1e-6)
        assert sum(step.terms_s.values()) == pytest.approx(step.step_time_s, rel=1e-9)


def test_model_and_plan_mean_one_physical_floor() -> None:
    """With no track to combine, the ceiling's step is the baseline's configuration: its physical floor is the
    floor `model` prints at that concurrency."""
    sc = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--tp", "2"]
    doc = _json("plan", *sc, "--concurrency", "8", "--forbid", ",".join(TRACK_KINDS))
    assert doc["combined"]["tracks"] == []
    model = _json("model", *sc, "--concurrency", "8")
    assert doc["ceiling"]["floor_step_ms"] == pytest.approx(model["points"][0]["floor_ms"], rel=1e-9)
    assert doc["ceiling"]["floor_step_ms"] <= doc["ceiling"]["tpot_ms"]
    p = plan(Scenario.build("llama-3.1-8b", "h100_sxm", tp=2), concurrency=8, forbid=TRACK_KINDS, target="1ms")
    assert p.target is not None and "ceiling at 100% efficiency" in p.target.text
