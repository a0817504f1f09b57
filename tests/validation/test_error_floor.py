"""bench/error_floor.py: the MAPE-optimal constant, the repeat floor and the level oracles it reports."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_scripts import bench_script

ef = bench_script("error_floor")

positive = st.floats(min_value=0.01, max_value=1e4, allow_nan=False, allow_infinity=False)


def _mape_of_constant(p: float, x: np.ndarray) -> float:
    return float(np.mean(np.abs(p - x) / x))


@settings(max_examples=60, deadline=None)
@given(st.lists(positive, min_size=1, max_size=12))
def test_weighted_median_is_the_mape_optimal_constant(values: list[float]) -> None:
    x = np.array(values)
    best = ef.weighted_median(x, 1 / x)
    # MAPE of a constant is piecewise linear with kinks at the measurements: the optimum is one of them
    brute = min(_mape_of_constant(v, x) for v in x)
    assert _mape_of_constant(best, x) <= brute + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(positive, positive, st.integers(0, 3)), min_size=1, max_size=30))
def test_an_oracle_never_does_worse_than_no_scaling(rows: list[tuple[float, float, int]]) -> None:
    pred = np.array([r[0] for r in rows])
    meas = np.array([r[1] for r in rows])
    labels = np.array([str(r[2]) for r in rows], dtype=object)
    scaled, _ = ef.oracle_mape(pred, meas, labels)
    assert scaled <= ef.mape(pred, meas) + 1e-9


def test_oracle_removes_a_pure_level_error_per_group() -> None:
    meas = np.array([10.0, 20.0, 30.0, 5.0, 7.0])
    labels = np.array(["a", "a", "a", "b", "b"], dtype=object)
    pred = meas * np.array([2.0, 2.0, 2.0, 0.5, 0.5])  # each group off by its own factor, shape exact
    scaled, groups = ef.oracle_mape(pred, meas, labels)
    assert groups == 2
    assert scaled < 1e-12
    assert ef.mape(pred, meas) > 0.5


def test_repeat_floor_counts_only_setups_measured_apart() -> None:
    meas = np.array([100.0, 200.0, 50.0, 50.2, 7.0])
    setup = np.array(["s1", "s1", "s2", "s2", "s3"], dtype=object)  # s2: copies within 1 %; s3: measured once
    floor, n_apart, ratios = ef.repeat_floor(meas, setup)
    # s1: the best single prediction under MAPE is 100 (weight 1/100 > 1/200), which misses 200 by 50 %
    assert n_apart == 1
    assert np.allclose(ratios, [2.0])
    assert abs(floor - 0.5 / 5) < 1e-12
