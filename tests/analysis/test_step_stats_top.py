"""Tests for step_top_kernels' preselection (analysis._step_stats._top_rows, issue 30.2): the ten aggregations run only
on the rows of the (step, name) pairs that can be among a step's top N, and the result is the one the full
aggregation of every row gives, ties included (ties in summed time go by name).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.analysis import _step_stats
from servescope.analysis._step_stats import step_top_kernels

_SCHEMA = {"step": pl.Int64, "name": pl.Utf8, "kernel_class": pl.Utf8, "collective": pl.Utf8, "dur_us": pl.Float64,
           "blocks_per_sm": pl.Float64, "grid_blocks": pl.Int64}
_WORK = {"shape_status": pl.Utf8, "work_model": pl.Utf8, "work_dtype": pl.Utf8, "work_m": pl.Int64,
         "work_flops": pl.Float64, "work_bytes": pl.Float64, "work_n": pl.Int64, "work_k": pl.Int64}


def _full(gpu: pl.DataFrame, top_n: int, monkeypatch: pytest.MonkeyPatch) -> object:
    """step_top_kernels with every row aggregated (no preselection): the reference."""
    with monkeypatch.context() as m:
        m.setattr(_step_stats, "_top_rows", lambda frame, n: frame)
        return step_top_kernels(gpu, top_n)


def _frame(rows: Sequence[tuple[int, str | None, float, float | None]], worked: bool) -> pl.DataFrame:
    data: dict[str, list[object]] = {
        "step": [r[0] for r in rows], "name": [r[1] for r in rows],
        "kernel_class": [("gemm" if (r[1] or "").startswith("a") else "other") for r in rows],
        "collective": [None for _ in rows], "dur_us": [r[2] for r in rows], "blocks_per_sm": [r[3] for r in rows],
        "grid_blocks": [None if r[3] is None else int(r[3] * 132) for r in rows],
    }
    schema = dict(_SCHEMA)
    if worked:
        data |= {
            "shape_status": [("shaped" if i % 3 else "no_shape") for i in range(len(rows))],
            "work_model": ["gemm" for _ in rows], "work_dtype": ["bf16" for _ in rows],
            "work_m": [i % 2 for i in range(len(rows))], "work_flops": [float(i) for i in range(len(rows))],
            "work_bytes": [2.0 * i for i in range(len(rows))], "work_n": [8 for _ in rows], "work_k": [16 for _ in rows],
        }
        schema |= _WORK
    return pl.DataFrame(data, schema=schema)


_DURATIONS = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 2.5, 1e-3, 1e6]), st.floats(0, 50, allow_nan=False))
_ROWS = st.lists(
    st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from(["a", "b", "c", "d", "ab", "aa", "z", None])
              | st.text("abc", min_size=1, max_size=4), _DURATIONS, st.none() | st.floats(0, 4)),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(_ROWS, st.integers(1, 6), st.booleans())
def test_preselection_gives_the_full_aggregation(rows: list[tuple[int, str | None, float, float | None]],
                                                 top_n: int, worked: bool) -> None:
    gpu = _frame(rows, worked)
    with pytest.MonkeyPatch.context() as m:
        assert step_top_kernels(gpu, top_n) == _full(gpu, top_n, m)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([-1.0, math.inf, math.nan, 3.0, 3.0]), min_size=1, max_size=20), st.integers(1, 3))
def test_negative_or_non_finite_durations_take_every_row(durations: list[float], top_n: int) -> None:
    gpu = _frame([(1, f"k{i % 5}", d, None) for i, d in enumerate(durations)], worked=False)
    if all(d >= 0 and math.isfinite(d) for d in durations):
        return
    assert _step_stats._top_rows(gpu, top_n) is gpu
    with pytest.MonkeyPatch.context() as m:  # repr: a NaN total equals itself
        assert repr(step_top_kernels(gpu, top_n)) == repr(_full(gpu, top_n, m))


def test_ties_go_by_name_and_the_cut_is_deterministic() -> None:
    names = [f"k{i:03d}" for i in range(200)]
    gpu = _frame([(1, n, 2.0, None) for n in reversed(names)] + [(1, "zz", 5.0, None)], worked=False)
    tops = step_top_kernels(gpu, 4)[1]
    assert [k.name for k in tops] == ["zz", "k000", "k001", "k002"]
    assert step_top_kernels(gpu.reverse(), 4)[1] == tops


def test_only_the_top_rows_are_aggregated() -> None:
    rows = [(s, f"triton_poi_fused_add_{i}", 1.0 + (i % 7), None) for s in (0, 1) for i in range(3000)]
    gpu = _frame(rows, worked=True)
    kept = _step_stats._top_rows(gpu, 5)
    # Per step: the 5 largest totals are 7.0, so every name of that total (3000 / 7 of them) is kept, no other.
    assert kept.height == sum(1 for _, _, d, _ in rows if d == 7.0)
    with pytest.MonkeyPatch.context() as m:
        assert step_top_kernels(gpu, 5) == _full(gpu, 5, m)


def test_near_equal_sums_within_the_slack_are_kept() -> None:
    # Two groups whose sums differ in their last bits: both stay candidates, the full sums then decide.
    small = [0.1] * 10
    big = [1.0 - 1e-16]
    rest = [(1, f"d{i}", 0.01, None) for i in range(40)]
    gpu = _frame([(1, "a", d, None) for d in small] + [(1, "b", d, None) for d in big] + [(1, "c", 0.5, None)] + rest,
                 worked=False)
    assert set(_step_stats._top_rows(gpu, 1)["name"].to_list()) == {"a", "b"}
    with pytest.MonkeyPatch.context() as m:
        assert step_top_kernels(gpu, 1) == _full(gpu, 1, m)


def test_empty_frame() -> None:
    assert step_top_kernels(pl.DataFrame(schema=_SCHEMA), 3) == {}


def test_few_groups_are_aggregated_whole() -> None:
    # 16 names in 2 steps of 400 rows: at most 32 groups, one per 12.5 rows; no filtered copy.
    gpu = _frame([(i % 2, f"k{i % 16}", float(i % 5), None) for i in range(400)], worked=False)
    assert _step_stats._top_rows(gpu, 3) is gpu


def _unshaped_full(gpu: pl.DataFrame, n: int) -> dict[int, tuple[tuple[str, str, float], ...]]:
    """unshaped_kernels_by_step as a sort of every (step, name, reason) sum: the reference."""
    stats = (gpu.filter(pl.col("shape_status") != "shaped").group_by("step", "name", "shape_status")
             .agg(pl.col("dur_us").sum()).sort(["step", "dur_us", "name", "shape_status"],
                                               descending=[False, True, False, False])
             .group_by("step", maintain_order=True).head(n))
    out: dict[int, list[tuple[str, str, float]]] = {}
    for step, name, why, us in stats.iter_rows():
        out.setdefault(int(step), []).append((str(name), str(why), float(us)))
    return {k: tuple(v) for k, v in out.items()}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from(["a", "b", "c", "ab", "z"]),
                          st.sampled_from([0.0, 1.0, 2.0, 3.5, math.nan, math.inf]) | st.floats(0, 9),
                          st.sampled_from(["shaped", "no_shape", "no_op", "unknown_op"])), max_size=60),
       st.integers(1, 5))
def test_unshaped_kernels_by_step_is_the_full_sort(rows: list[tuple[int, str, float, str]], n: int) -> None:
    gpu = pl.DataFrame({"step": [r[0] for r in rows], "name": [r[1] for r in rows], "dur_us": [r[2] for r in rows],
                        "shape_status": [r[3] for r in rows]},
                       schema={"step": pl.Int64, "name": pl.Utf8, "dur_us": pl.Float64, "shape_status": pl.Utf8})
    assert repr(_step_stats.unshaped_kernels_by_step(gpu, n)) == repr(_unshaped_full(gpu, n))


@settings(max_examples=60, deadline=None)
@given(_ROWS, st.integers(1, 4))
def test_colliding_name_keys_still_give_the_full_aggregation(rows: list[tuple[int, str | None, float, float | None]],
                                                             top_n: int) -> None:
    # Every name's key its length: most names collide, and a shared group's sum only bounds its names' sums.
    gpu = _frame(rows, worked=False)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_step_stats, "_ROWS_PER_GROUP", 0)  # always preselect
        m.setattr(_step_stats, "_name_key", lambda: pl.col("name").str.len_bytes().cast(pl.UInt64))
        got = step_top_kernels(gpu, top_n)
    with pytest.MonkeyPatch.context() as m:
        assert repr(got) == repr(_full(gpu, top_n, m))


@settings(max_examples=30, deadline=None)
@given(st.integers(1000, 5000), st.sampled_from([3, 40, 900, 10**9]), st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_unshaped_on_large_frames_is_the_full_sort(rows: int, names: int, seed: int, n: int) -> None:
    """Frames past Polars' 1,000-row partitioning limit, few and many groups, a few heavy groups whose sums depend on
    the order they are taken in: the preselected sums equal the full group-by's to the bit."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, names, rows) if names < 10**9 else np.arange(rows)
    ids[rng.integers(0, rows, rows // 10)] = -1  # heavy groups
    gpu = pl.DataFrame({"step": rng.integers(0, 3, rows), "name": [f"k{i}" for i in ids],
                        "dur_us": rng.random(rows) * 10.0 ** rng.integers(-3, 4, rows),
                        "shape_status": rng.choice(["shaped", "no_shape", "no_op"], rows)})
    assert repr(_step_stats.unshaped_kernels_by_step(gpu, n)) == repr(_unshaped_full(gpu, n))


def test_unshaped_preselects_distinct_names(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = pl.DataFrame({"step": [i // 1000 for i in range(4000)], "name": [f"k{i}" for i in range(4000)],
                        "dur_us": [float(i % 13) for i in range(4000)], "shape_status": ["no_op"] * 4000})
    seen: list[object] = []
    real = _step_stats._bounded_rows
    monkeypatch.setattr(_step_stats, "_bounded_rows", lambda *a: seen.append(out := real(*a)) or out)
    assert _step_stats.unshaped_kernels_by_step(gpu, 3) == _unshaped_full(gpu, 3)
    assert seen and seen[0] is not None and len(seen[0]) < 400  # type: ignore[arg-type]  # ties at 12.0: 4000 / 13


def test_partition_rule_mirror() -> None:
    many = pl.DataFrame({"step": [i % 3 for i in range(5000)], "name": [f"k{i}" for i in range(5000)]})
    few = pl.DataFrame({"step": [i % 3 for i in range(5000)], "name": [f"k{i % 7}" for i in range(5000)]})
    assert _step_stats._sums_each_group_alone(many, ["step", "name"])
    assert not _step_stats._sums_each_group_alone(few, ["step", "name"])
    assert _step_stats._sums_each_group_alone(few.head(999), ["step", "name"])
    assert _step_stats._sums_each_group_alone(few.sort("step"), ["step", "name"])


def test_unshaped_many_groups_but_partitioned_takes_every_row() -> None:
    """Many groups, yet the middle slice Polars estimates from holds one key: where Polars would sum in partial sums
    over row ranges (group-bys of up to two keys in Polars 2.2), the preselection (whose sums are taken group by
    group) is not used; the answer is the full one."""
    import numpy as np

    rng = np.random.default_rng(3)
    names = [f"k{i}" for i in range(6000)]
    names[2900:3300] = ["x"] * 400  # the estimate's slice: one key
    for i in rng.integers(0, 6000, 1500):
        names[i] = "h"  # a heavy group across the row ranges
    gpu = pl.DataFrame({"step": [0] * 6000, "name": names, "dur_us": rng.random(6000) * 100,
                        "shape_status": ["no_op"] * 6000})
    assert not _step_stats._sums_each_group_alone(gpu, ["step", "name", "shape_status"])
    assert repr(_step_stats.unshaped_kernels_by_step(gpu, 3)) == repr(_unshaped_full(gpu, 3))
