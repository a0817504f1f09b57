"""simulate.stepcost.distinct: np.unique of a 1-D array without importing numpy.ma (issue 30 start-up)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from servescope.simulate.stepcost import distinct


@given(st.lists(st.integers(-50, 50), max_size=60))
def test_distinct_equals_np_unique(xs: list[int]) -> None:
    a = np.asarray(xs, dtype=float)
    assert np.array_equal(distinct(a), np.unique(a))
    assert np.array_equal(distinct(a.astype(int)), np.unique(a.astype(int)))
