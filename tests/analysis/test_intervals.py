"""Interval union: checked against a brute-force coverage count on integer grids."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.analysis.intervals import grouped_union_length, union_length

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50), st.integers(0, 3)), max_size=40)


def _brute(pairs: list[tuple[int, int]]) -> int:
    covered: set[int] = set()
    for start, length in pairs:
        covered.update(range(start, start + length))
    return len(covered)


@given(intervals)
def test_union_matches_brute_force(rows: list[tuple[int, int, int]]) -> None:
    starts = np.array([r[0] for r in rows], dtype=float)
    ends = starts + np.array([r[1] for r in rows], dtype=float)
    assert union_length(starts, ends) == _brute([(r[0], r[1]) for r in rows])


@given(intervals)
def test_grouped_union_matches_brute_force_per_group(rows: list[tuple[int, int, int]]) -> None:
    groups = np.array([r[2] for r in rows], dtype=np.int64)
    starts = np.array([r[0] for r in rows], dtype=float)
    ends = starts + np.array([r[1] for r in rows], dtype=float)
    got = grouped_union_length(groups, starts, ends - starts)
    for g in {r[2] for r in rows}:
        assert got[g] == _brute([(r[0], r[1]) for r in rows if r[2] == g])


def test_overlapping_kernels_count_once() -> None:
    # Two PDL-overlapped kernels [0,10) and [5,15) plus a separate one [20,25): 15 + 5 µs.
    assert union_length(np.array([0.0, 5.0, 20.0]), np.array([10.0, 15.0, 25.0])) == 20.0


def test_precision_with_epoch_microseconds() -> None:
    # 2021-schema traces carry absolute epoch µs (~1.6e15): ns-scale durations must survive.
    base = 1.623143089861e15
    starts = np.array([base, base + 1.0])
    got = grouped_union_length(np.array([0, 1]), starts, np.array([0.02, 0.5]))
    assert abs(got[0] - 0.02) < 1e-9 and abs(got[1] - 0.5) < 1e-9


def test_grouped_union_in_batches_is_one_pass_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of whole groups (a few rows each here) give the sums one batch of everything gives, bit for bit:
    groups unsorted and sorted, ties, zero durations, epoch µs."""
    from servescope.analysis import intervals

    rng = np.random.default_rng(7)
    n = 5000
    for groups in (rng.integers(0, 300, n) * 3, np.sort(rng.integers(0, 40, n))):
        starts = 1.7e15 + np.round(rng.uniform(0, 1e5, n), 1)
        durations = np.round(rng.exponential(4.0, n), 3)
        durations[rng.random(n) < 0.2] = 0.0
        one_pass = grouped_union_length(groups, starts, durations)
        monkeypatch.setattr(intervals, "_PIECE", 7)
        batched = grouped_union_length(groups, starts, durations)
        monkeypatch.undo()
        assert list(batched) == list(one_pass)
        assert all(batched[k] == one_pass[k] for k in one_pass)
