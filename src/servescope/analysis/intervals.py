"""Interval arithmetic on NumPy arrays: union length, grouped union length, the union's segments.

Does: measure how much time a set of possibly overlapping [start, end) intervals covers, per group, vectorised,
and list the disjoint segments of a union (the Perfetto export draws them).
Does not: know about kernels, steps or units (callers pass microseconds and say so).
"""

from __future__ import annotations

import numpy as np


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals [start, end): overlapping kernels count once."""
    if starts.size == 0:
        return 0.0
    seg_start, seg_end, _ = union_segments(starts, ends)
    return float(np.sum(seg_end - seg_start))


def grouped_union_length(groups: np.ndarray, starts: np.ndarray, durations: np.ndarray) -> dict[int, float]:
    """Union length per integer group id of intervals [start, start + duration).

    Groups are shifted apart on one time axis (group k by k·(span+1)) so that one sort-and-merge handles many
    groups at once. Starts are made relative before durations are added: absolute epoch µs (~1e15) would otherwise
    round ns-scale durations away. The groups go through in batches of whole groups (about _PIECE rows), so the
    sort's arrays are a batch long, not the input's (a trace of millions of kernels); a batch's rows sort as they
    would among all rows (groups do not interleave on the shifted axis; within a group, by start, then by row), so
    every sum is the one a single pass makes, in the same order.
    """
    if starts.size == 0:
        return {}
    low = float(np.min(starts))
    span = max(float(np.max((starts[i : i + _PIECE] - low) + durations[i : i + _PIECE]))
               for i in range(0, starts.size, _PIECE)) + 1.0  # relative ends' max, a piece at a time
    uniq, inverse = _dense(groups)
    counts = np.bincount(inverse, minlength=uniq.size)
    by_group = None if bool(np.all(inverse[1:] >= inverse[:-1])) else np.argsort(inverse, kind="stable")
    ends = np.cumsum(counts)
    totals = np.empty(uniq.size, dtype=float)
    first_group = 0
    while first_group < uniq.size:  # groups [first_group, last_group): rows [lo, hi) of the rows ordered by group
        lo = int(ends[first_group - 1]) if first_group else 0
        last_group = max(first_group + 1, int(np.searchsorted(ends, lo + _PIECE, side="right")))
        hi = int(ends[last_group - 1])
        rows = slice(lo, hi) if by_group is None else by_group[lo:hi]
        g = inverse[rows]
        s = starts[rows] - low  # relative starts
        e = s + durations[rows]  # relative ends
        offset = g * span
        s += offset
        e += offset
        order = np.argsort(s, kind="stable")
        s, e, g = s[order], e[order], g[order]
        running_end = np.maximum.accumulate(e)
        new_segment = np.empty(s.size, dtype=bool)
        new_segment[0] = True
        np.greater(s[1:], running_end[:-1], out=new_segment[1:])
        first = np.flatnonzero(new_segment)
        seg_len = np.maximum.reduceat(e, first) - s[first]
        totals[first_group:last_group] = np.bincount(g[first] - first_group, weights=seg_len,
                                                     minlength=last_group - first_group)
        first_group = last_group
    return {int(k): float(v) for k, v in zip(uniq, totals, strict=True)}


_PIECE = 1 << 18


def _dense(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(groups, return_inverse=True)`: without its sort when the ids are small non-negative integers
    (a presence table of them instead), as the breakdown's combined (step, device, class) ids are."""
    if groups.dtype.kind in "iu" and groups.size and groups.min() >= 0 and groups.max() < 4 * groups.size + 1024:
        present = np.zeros(int(groups.max()) + 1, dtype=bool)
        present[groups] = True
        rank = np.cumsum(present) - 1
        return np.flatnonzero(present).astype(groups.dtype), rank.astype(np.int32 if rank.size < 2**31 else np.int64)[groups]
    uniq, inverse = np.unique(groups, return_inverse=True)
    return uniq, inverse.reshape(-1)


def union_segments(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as disjoint segments, by start: (segment starts, segment ends, intervals
    merged into each). An interval starting exactly at the running end opens a new segment (as `union_length`)."""
    if starts.size == 0:
        empty = np.empty(0, dtype=float)
        return empty, empty, np.empty(0, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running_end = np.maximum.accumulate(e)
    new_segment = np.empty(s.size, dtype=bool)
    new_segment[0] = True
    new_segment[1:] = s[1:] > running_end[:-1]
    first = np.flatnonzero(new_segment)
    counts = np.diff(np.append(first, s.size))
    return s[first], np.maximum.reduceat(e, first), counts
