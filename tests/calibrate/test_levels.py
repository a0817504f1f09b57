"""Levels fitted to a deployment's own points (calibrate.levels): exact on what they were fitted to, the true
levels recovered from data made with them, and one level where two points cannot tell fixed from per-batch cost."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.calibrate.levels import fit_levels

level = st.floats(min_value=0.2, max_value=5.0)


def test_one_point_sets_the_decode_level() -> None:
    lv = fit_levels([0.008], [0.004], [0.015], [0.2], [None])
    assert lv.tpot_fixed == lv.tpot_var == pytest.approx(0.015 / 0.012) and lv.ttft == 1.0
    assert lv.tpot_s(0.008, 0.004) == pytest.approx(0.015) and lv.tpot_points == 1 and lv.ttft_points == 0


@given(a=level, b=level)
def test_two_points_recover_fixed_and_per_batch_levels(a: float, b: float) -> None:
    fixed, var = [0.010, 0.011], [0.001, 0.030]  # batch 1: weights-bound; batch 128: KV and compute
    measured = [a * f + b * v for f, v in zip(fixed, var, strict=True)]
    lv = fit_levels(fixed, var, measured, [0.1, 0.5], [0.1, 0.5])
    assert lv.tpot_fixed == pytest.approx(a, rel=1e-6) and lv.tpot_var == pytest.approx(b, rel=1e-6)
    assert lv.basis == "fixed and per-batch TPOT levels"


def test_points_that_cannot_separate_the_parts_give_one_level() -> None:
    lv = fit_levels([0.010, 0.020], [0.005, 0.010], [0.030, 0.060], [0.1, 0.2], [None, None])  # F and V proportional
    assert lv.tpot_fixed == lv.tpot_var == pytest.approx(2.0) and lv.basis.startswith("one TPOT level")


def test_ttft_level_is_the_geometric_mean_of_measured_over_predicted() -> None:
    lv = fit_levels([0.01], [0.0], [None], [0.1, 0.4], [0.2, 0.2])
    assert lv.ttft == pytest.approx(math.sqrt(2.0 * 0.5)) and lv.tpot_points == 0 and lv.tpot_fixed == 1.0
