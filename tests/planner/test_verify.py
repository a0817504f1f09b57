"""Scoring a plan against measurements (servescope.planner.verify): measured gain, verdict, several tracks."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.errors import PlanError
from servescope.planner.verify import (
    Measured,
    PlannedTrack,
    PlanPrediction,
    measured_gain,
    parse_applied,
    plan_prediction,
    verdict,
    verify,
)

Q10, Q90 = 0.8, 1.25  # a cross-validated plan: a change's 80% range is gain × 1/Q90 … 1/Q10


def _plan(objective: str = "tpot", combined: tuple[str, ...] = ("a", "b"), combined_gain: float = 1.9) -> PlanPrediction:
    tracks = (PlannedTrack("a", 1.5, 1.2, 1.9), PlannedTrack("b", 1.2, 1.0, 1.5),
              PlannedTrack("c", 1.1, 0.9, 1.4), PlannedTrack("d", None, None, None, "needs NVLink"))
    return PlanPrediction("plan.json", objective, 1, tracks, combined, combined_gain, 0.013, 75.0,
                          "cross_validated", (Q10, Q90), None)


def _m(value: float) -> Measured:
    return Measured(value, "x", "typed figure", "figure", 1)


@pytest.mark.parametrize(("before", "after", "expected"), [
    (12.1e-3, 9.17e-3, "inside"),  # 1.32x in 1.2–1.9
    (12e-3, 10e-3, "inside"),      # 1.2x: the range's low end counts as inside
    (12e-3, 11e-3, "below"),       # 1.09x
    (12e-3, 6e-3, "above"),        # 2.0x
])
def test_one_track_against_its_own_range(before: float, after: float, expected: str) -> None:
    v = verify(_plan(), _m(before), _m(after), ["a"])
    assert v.check.basis == "track" and v.applied == ("a",) and v.applied_from == "named"
    assert v.measured_gain == pytest.approx(before / after)
    assert (v.check.gain, v.check.gain_low, v.check.gain_high) == (1.5, 1.2, 1.9)
    assert v.check.verdict == expected
    if expected == "below":
        assert v.check.miss == pytest.approx(1.2 / (before / after))
    elif expected == "above":
        assert v.check.miss == pytest.approx((before / after) / 1.9)
    else:
        assert v.check.miss == 1.0


def test_throughput_gain_is_after_over_before() -> None:
    v = verify(_plan("throughput"), _m(100.0), _m(150.0), ["a"])
    assert v.measured_gain == pytest.approx(1.5) and v.check.verdict == "inside"
    assert measured_gain("tpot", 2.0, 1.0) == 2.0 and measured_gain("throughput", 2.0, 1.0) == 0.5


def test_combined_means_the_plans_combination() -> None:
    v = verify(_plan(), _m(12e-3), _m(6e-3), ["combined"])
    assert v.applied == ("a", "b") and v.applied_from == "plan_combined" and v.check.basis == "plan_combined"
    g = 1.9  # the plan's combined gain, not 1.5 × 1.2
    lo = g * min(1 / Q90, 1.2 / 1.5, 1.0 / 1.2)  # widest relative range: the rule's and each track's
    hi = g * max(1 / Q10, 1.9 / 1.5, 1.5 / 1.2)
    assert (v.check.gain, v.check.gain_low, v.check.gain_high) == pytest.approx((g, lo, hi))
    assert v.check.verdict == ("inside" if lo <= 2.0 <= hi else "above" if hi < 2.0 else "below")
    assert [t.kind for t in v.tracks] == ["a", "b"]


def test_other_sets_are_scored_on_the_product() -> None:
    v = verify(_plan(), _m(12e-3), _m(8e-3), ["a", "c"])
    g = 1.5 * 1.1
    assert v.check.basis == "product"
    assert v.check.gain == pytest.approx(g)
    assert v.check.gain_low == pytest.approx(g * min(1 / Q90, 1.2 / 1.5, 0.9 / 1.1))
    assert v.check.gain_high == pytest.approx(g * max(1 / Q10, 1.9 / 1.5, 1.4 / 1.1))
    # the same set in another order is the plan's combination
    assert verify(_plan(), _m(12e-3), _m(8e-3), ["b", "a"]).check.basis == "plan_combined"


def test_rule_of_thumb_plans_use_their_r() -> None:
    p = PlanPrediction("plan.json", "tpot", 1, (PlannedTrack("a", 1.5, 1.4, 1.6), PlannedTrack("b", 1.2, 1.1, 1.3)),
                       ("a", "b"), 1.8, 0.01, 100.0, "rule_of_thumb", None, 0.3)
    v = verify(p, _m(1.8), _m(1.0), ["combined"])
    n = 1 / 1.8
    d = 0.3 * min(abs(1 - n), n)  # docs/plan.md: gain_bounds, written out here
    assert v.check.gain_low == pytest.approx(min(1 / (n + d), 1.8 * 1.4 / 1.5, 1.8 * 1.1 / 1.2))
    assert v.check.gain_high == pytest.approx(max(1 / (n - d), 1.8 * 1.6 / 1.5, 1.8 * 1.3 / 1.2))


def test_bad_applied_tracks_are_one_line_errors() -> None:
    with pytest.raises(PlanError, match=r"no track 'zz' in the plan; its tracks: a, b, c, d"):
        verify(_plan(), _m(1.0), _m(1.0), ["zz"])
    with pytest.raises(PlanError, match=r"track d has no predicted gain in the plan: not applicable \(needs NVLink\)"):
        verify(_plan(), _m(1.0), _m(1.0), ["d"])
    with pytest.raises(PlanError, match="the plan chose no track"):
        verify(_plan(combined=()), _m(1.0), _m(1.0), ["combined"])
    with pytest.raises(PlanError, match="a typed figure measures the objective, not how the engine ran.*--applied"):
        verify(_plan(), _m(1.0), _m(1.0))  # nothing named, and figures do not say what changed
    with pytest.raises(PlanError, match="positive and finite"):
        verify(_plan(), _m(0.0), _m(1.0), ["a"])


def test_parse_applied() -> None:
    assert parse_applied(None) is None and parse_applied(" , ") is None
    assert parse_applied("a, b,a") == ("a", "b")
    assert parse_applied(["a,b", "c"]) == ("a", "b", "c")


def test_speculation_measured_on_a_trace_is_warned() -> None:
    trace = Measured(0.01, "t.json", "mean GPU span", "trace")
    v = verify(_plan(), trace, _m(0.008), ["a", "b"])
    assert not any("speculative" in w for w in v.warnings)
    p = PlanPrediction("plan.json", "tpot", 4, (PlannedTrack("speculative_decoding", 1.5, 1.2, 1.9),),
                       ("speculative_decoding",), 1.5, 0.01, 100.0, "cross_validated", (Q10, Q90))
    v = verify(p, trace, _m(0.008), ["combined"])
    assert any("step time is not its TPOT" in w for w in v.warnings)
    assert any("after was measured at concurrency 1, the plan predicts concurrency 4" in w for w in v.warnings)


@given(m=st.floats(0.01, 100), lo=st.floats(0.01, 100), width=st.floats(0, 100))
def test_verdict_partitions_the_line(m: float, lo: float, width: float) -> None:
    hi = lo + width
    got = verdict(m, lo, hi)
    assert got == ("inside" if lo <= m <= hi else "above" if m > hi else "below")


@given(before=st.floats(1e-4, 10), after=st.floats(1e-4, 10))
def test_measured_gain_is_a_ratio_above_one_when_better(before: float, after: float) -> None:
    g = verify(_plan(), _m(before), _m(after), ["a"]).measured_gain
    assert math.isclose(g, before / after) and (g > 1) == (after < before)


# --- the plan document's fields ---------------------------------------------------------------------------------

def _doc() -> dict:
    return {"objective": "tpot", "concurrency": 1,
            "tracks": [{"kind": "a", "gain": 1.5, "gain_low": 1.2, "gain_high": 1.9, "why_not": None},
                       {"kind": "d", "gain": None, "gain_low": None, "gain_high": None, "why_not": "no"}],
            "combined": {"tracks": ["a"], "gain": 1.5, "tpot_ms": 8.0, "output_tok_s": 125.0},
            "baseline": {"tpot_ms": 12.0, "output_tok_s": 83.0, "dominant": "weights"},
            "range": {"basis": "cross_validated", "gain_ratio_q10": Q10, "gain_ratio_q90": Q90, "r": None}}


def test_plan_prediction() -> None:
    p = plan_prediction(_doc(), "plan.json")
    assert p.tracks[0] == PlannedTrack("a", 1.5, 1.2, 1.9, None)
    assert p.tracks[1].gain is None and p.tracks[1].why_not == "no"
    assert p.combined_tracks == ("a",) and p.baseline_tpot_s == pytest.approx(0.012)
    assert p.range_ratio_q == (Q10, Q90) and p.change_range(2.0) == pytest.approx((2.0 / Q90, 2.0 / Q10))


@pytest.mark.parametrize(("path", "key"), [
    ((), "objective"), (("tracks", 0), "gain_low"), (("combined",), "gain"), (("range",), "basis"),
    ((), "baseline"),
])
def test_a_missing_key_is_named_with_the_file(path: tuple, key: str) -> None:
    doc = _doc()
    where = doc
    for p in path:
        where = where[p]
    del where[key]
    dotted = "".join(f"{p}." if isinstance(p, str) else f"[{p}]." for p in path).replace(".[", "[")
    with pytest.raises(PlanError, match="^plan\\.json: not a plan document: missing key " + re.escape(f"{dotted}{key} ")):
        plan_prediction(doc, "plan.json")


def test_bad_values_in_the_document() -> None:
    doc = _doc()
    doc["tracks"][0]["gain"] = "fast"
    with pytest.raises(PlanError, match=r"plan\.json: tracks\[0\]\.gain must be a positive number"):
        plan_prediction(doc, "plan.json")
    doc = _doc()
    doc["objective"] = "latency"
    with pytest.raises(PlanError, match="objective must be one of tpot, throughput"):
        plan_prediction(doc, "plan.json")
    doc = _doc()
    doc["range"]["gain_ratio_q10"] = None
    with pytest.raises(PlanError, match="needs range.gain_ratio_q10"):
        plan_prediction(doc, "plan.json")
