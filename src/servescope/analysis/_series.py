"""NumPy arrays into Polars Series without Polars' NumPy constructor.

Why: `pl.Series(name, ndarray)` looks for a mask through `numpy.ma`, which NumPy imports lazily on first use —
35–60 ms once per process on this project's machines, a few per cent of a whole `servescope trace` run — although
the plain arrays passed here never carry one. The array's buffer goes in through a memoryview instead: the same
values (NaN stays NaN, not null) and the dtype asked for (tests/analysis/test_series.py).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def series(name: str, values: np.ndarray, dtype: pl.DataType | type[pl.DataType]) -> pl.Series:
    """A 1-D array as a Series of `dtype`."""
    return pl.Series(name, np.ascontiguousarray(values).data, dtype=dtype)  # .data: the buffer as a memoryview
