"""The campaign moves forward (issue 26.5): a plan on the applied state, and verify's checks against the plan a
change was applied to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import PlanError
from servescope.perfmodel.scenario import Scenario
from servescope.planner import plan
from servescope.planner.campaign import logged_applied, off_baseline, stale_plan
from servescope.planner.curves import plan_curves

# the reference box runs a vLLM build that allows custom all-reduce on 8 PCIe GPUs (`+pcie-ar`, the newest release's
# curves; issue 28): stock vLLM refuses it there (planner.allreduce_paths)
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--engine-version", "+pcie-ar"]


@pytest.fixture(scope="module")
def box() -> Scenario:
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, engine_version="+pcie-ar")


def test_applied_track_is_the_new_baseline(box: Scenario) -> None:
    before = plan(box)
    car = before.track("custom_allreduce")
    assert car.pays  # the issue: recommended before it is applied
    after = plan(box, applied="custom_allreduce")
    assert after.applied == ("custom_allreduce",)
    t = after.track("custom_allreduce")
    assert t.details.get("applied") and not t.applicable and t.gain is None  # listed, not recommended again
    assert "custom_allreduce" not in after.combined.tracks
    # the new baseline is the state the first plan priced for the track
    assert after.baseline.tpot_s == pytest.approx(car.tpot_s, rel=1e-9)
    # every other track is re-priced on it: nccl tuning acts on the same all-reduce term and gains less now
    assert after.track("nccl_tuning").gain < before.track("nccl_tuning").gain
    # the curves and a chosen combination start from the applied state too
    base_curve = plan_curves(after)[0]
    assert base_curve.points[0].tpot_s == pytest.approx(after.baseline.tpot_s, rel=1e-9)


def test_two_applied_tracks_compound_in_order(box: Scenario) -> None:
    one = plan(box, applied="custom_allreduce")
    two = plan(box, applied=["custom_allreduce", "speculative_decoding"])
    assert two.baseline.tpot_s == pytest.approx(one.track("speculative_decoding").tpot_s, rel=1e-9)


def test_applied_track_that_does_not_apply_is_refused() -> None:
    sxm = Scenario.build("llama-3.1-8b", "h100_sxm", tp=8)  # NVLink: vLLM's custom all-reduce is already on
    with pytest.raises(PlanError, match="applied track custom_allreduce does not apply"):
        plan(sxm, applied="custom_allreduce")
    with pytest.raises(PlanError, match="unknown track"):
        plan(sxm, applied="no_such_track")


def test_logged_applied_in_order_once() -> None:
    entries = [{"applied": ["custom_allreduce"]}, {"applied": ["speculative_decoding", "custom_allreduce"]}, {}]
    assert logged_applied(entries) == ("custom_allreduce", "speculative_decoding")


def test_stale_plan_and_off_baseline_words() -> None:
    assert stale_plan(("custom_allreduce",), ("custom_allreduce",), ("quantization",)) is None
    w = stale_plan((), ("custom_allreduce",), ("speculative_decoding",))
    assert w is not None and "made before custom_allreduce" in w
    again = stale_plan((), ("custom_allreduce",), ("custom_allreduce",))
    assert again is not None and "already applied" in again
    # a measured baseline of 12.1 ms: 12.6 ms is within ±5 %, 13.0 ms (+7.4 %) is not
    assert off_baseline("tpot", 0.0121, 0.0126, "measured") is None
    w = off_baseline("tpot", 0.0121, 0.0130, "measured")
    assert w is not None and "+7.4%" in w and "12.1 ms" in w
    # a calibrated baseline with an 80 % range: judged on the range
    assert off_baseline("tpot", 0.010, 0.0115, "calibrated", 0.0085, 0.0124) is None
    assert off_baseline("tpot", 0.010, 0.0130, "calibrated", 0.0085, 0.0124) is not None


def _run(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.stderr
    return r.stdout


def test_campaign_through_the_cli(tmp_path: Path) -> None:
    figs = ["--measured", "tpot=12.1ms@c1"]
    p0, p1, log = tmp_path / "p0.json", tmp_path / "p1.json", tmp_path / "c.jsonl"
    _run("plan", *KIMI, *figs, "--json", "-o", str(p0))
    _run("verify", str(p0), "--before", "tpot=12.1ms@c1", "--after", "tpot=10ms@c1", "--applied",
         "custom_allreduce", "--log", str(log))
    doc = json.loads(_run("plan", *KIMI, *figs, "--log", str(log), "--json"))
    assert doc["applied"] == ["custom_allreduce"]
    car = next(t for t in doc["tracks"] if t["kind"] == "custom_allreduce")
    assert car["gain"] is None and car["why_not"].startswith("applied")
    assert doc["baseline"]["basis"] != "measured"  # the applied state was priced, not measured
    text = " ".join(_run("plan", *KIMI, *figs, "--applied", "custom_allreduce").split())
    assert "applied: custom_allreduce" in text and "✓ custom_allreduce: applied" in text
    _run("plan", *KIMI, *figs, "--log", str(log), "--json", "-o", str(p1))
    # the second change scored against the old plan: said; against the plan of the applied state: not said
    old = json.loads(_run("verify", str(p0), "--before", "tpot=10ms@c1", "--after", "tpot=8ms@c1", "--applied",
                          "speculative_decoding", "--log", str(log), "--json"))
    assert any("made before custom_allreduce" in w for w in old["warnings"])
    assert any("differs from the plan's measured baseline" in w for w in old["warnings"])  # 10 ms vs 12.1 ms
    new = json.loads(_run("verify", str(p1), "--before", "tpot=10ms@c1", "--after", "tpot=8ms@c1", "--applied",
                          "speculative_decoding", "--json"))
    assert not any("made before" in w for w in new["warnings"]) and new["plan_applied"] == ["custom_allreduce"]
