"""servescope.analysis._series: NumPy arrays become Series with the same values and dtype as Polars' own NumPy path, and a
trace analysis never imports numpy.ma (the 35-60 ms the helper exists to save)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from servescope.analysis._series import series


@settings(max_examples=80, deadline=None)
@given(hnp.arrays(np.int64, st.integers(0, 50), elements=st.integers(-(2**62), 2**62)))
def test_int_arrays_match_polars_numpy_path(a: np.ndarray) -> None:
    ours = series("x", a, pl.Int64)
    assert ours.dtype == pl.Int64 and ours.name == "x"
    assert ours.equals(pl.Series("x", a, dtype=pl.Int64))


@settings(max_examples=80, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 50)))  # NaN, inf and subnormals included
def test_float_arrays_keep_nan_as_nan(a: np.ndarray) -> None:
    ours = series("x", a, pl.Float64)
    assert ours.null_count() == 0
    np.testing.assert_array_equal(ours.to_numpy(), a)


def test_strided_and_narrow_arrays() -> None:
    assert series("s", np.arange(10)[::3], pl.Int64).to_list() == [0, 3, 6, 9]
    assert series("s", np.arange(3, dtype=np.int32), pl.Int64).dtype == pl.Int64


def test_trace_analysis_does_not_import_numpy_ma() -> None:
    code = ("import sys; from servescope.analysis.analyze import analyze_trace, example_trace; "
            "analyze_trace(example_trace()); print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
