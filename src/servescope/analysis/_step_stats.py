"""The per-step statistics of a breakdown, from the GPU rows of a step-attributed trace (each row's `step`, or any
grouping key put in that column): interval-union time per step and class (`union_lengths`), collectives with
nccl-tests bandwidths (`step_collectives`), the top kernels with their shaped work, waves and tail
(`step_top_kernels`), shaped work and unshaped time by reason (`step_work`, `unshaped_kernels_by_step`), summed
time and calls per class (`class_totals`), launches and idle inside graph replays per step (`launch_stats`,
`graph_idle_by_step`), the rows inside steps and the busiest device.
Does not: assemble a step's or a kind's record (analysis.breakdown) or judge anything (analysis.findings).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from servescope.analysis._series import series
from servescope.analysis.breakdown_records import CollectiveStats, KernelStats, busbw_factor
from servescope.analysis.gpu_rows import filled, group_ids
from servescope.analysis.intervals import grouped_union_length
from servescope.analysis.roofline import WORK_COLUMNS, WorkGroup, unshaped_us, work_groups
from servescope.units import us_to_s

COMMUNICATION = "communication"
GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "hipGraphLaunch")


def launch_stats(launches: pl.DataFrame) -> dict[int, tuple[int, int, float]]:
    is_launch = pl.col("name").str.contains(r"(?i)launch")
    stats = (
        launches.filter(pl.col("step").is_not_null() & is_launch)
        .group_by("step")
        .agg(
            pl.len().alias("n"),
            pl.col("name").is_in(GRAPH_LAUNCH_NAMES).sum().alias("graphs"),
            pl.col("dur_us").sum().alias("cpu_us"),
        )
    )
    return {int(s): (int(n), int(g), float(c)) for s, n, g, c in stats.iter_rows()}


def graph_idle_by_step(gpu: pl.DataFrame, launches: pl.DataFrame) -> dict[int, float]:
    """Per step: idle inside graph replays = Σ over the graph launches (cudaGraphLaunch/hipGraphLaunch, one
    correlation for all the kernels a replay runs) and devices of (last end − first start of the replay's GPU rows
    − the union of those rows). Work of other launches running inside a replay's window is not subtracted."""
    graph = launches.filter(pl.col("name").is_in(GRAPH_LAUNCH_NAMES) & pl.col("correlation").is_not_null())
    if graph.height == 0:
        return {}
    replayed = pl.col("correlation").is_in(graph["correlation"].implode())
    columns = ("step", "correlation", pl.col("device").fill_null(-1), "ts_us", "dur_us")
    every = bool(gpu.select(replayed.all()).item())  # a decode trace of graph replays only: no copy of the rows
    rows = gpu.select(columns) if every else gpu.lazy().filter(replayed).select(columns).collect()
    if rows.height == 0:
        return {}
    gid, _ = group_ids([rows["step"], rows["correlation"], rows["device"]])  # ordered as their struct's dense rank
    busy = grouped_union_length(gid, rows["ts_us"].to_numpy(), rows["dur_us"].to_numpy())
    spans = rows.select("step", series("gid", gid, pl.Int64), "ts_us", "dur_us").group_by("gid", "step").agg(
        (pl.col("ts_us") + pl.col("dur_us") - pl.col("ts_us").min()).max().alias("span")).sort("gid")
    out: dict[int, float] = {}
    for g, step, span in spans.iter_rows():
        out[int(step)] = out.get(int(step), 0.0) + max(0.0, float(span) - busy[int(g)])
    return out


def union_lengths(gpu: pl.DataFrame, key: str | None, where: pl.Expr | None = None) -> dict[tuple[int, str], float]:
    """Union µs per (step, key value), unions taken per device and summed over devices; over the rows `where` holds
    (default: all): group ids of every row, then the ids, starts and durations of those rows only (NumPy), so no
    column of the frame is copied. An id's order among the ids present is that of its values either way."""
    if gpu.height == 0:
        return {}
    parts = [gpu["step"], gpu["device"].fill_null(-1), *([filled(gpu[key])] if key else [])]
    gid, values = group_ids(parts)
    starts, durations = gpu["ts_us"].to_numpy(), gpu["dur_us"].to_numpy()
    if where is not None:
        keep = gpu.select(where.fill_null(False)).to_series().to_numpy()
        gid, starts, durations = gid[keep], starts[keep], durations[keep]
    lengths = grouped_union_length(gid, starts, durations)
    out: dict[tuple[int, str], float] = {}
    for g, length in lengths.items():
        step, _, *rest = values(g)
        k = (int(step), str(rest[0]) if key else "")
        out[k] = out.get(k, 0.0) + length
    return out


def _with_bus_bytes(comm: pl.DataFrame) -> pl.DataFrame:
    """`comm` rows with `message_bytes`, `group_size` (null when absent) and `bus_bytes` =
    message bytes × busbw_factor(collective, group size)."""
    comm = comm.with_columns(
        pl.lit(None, pl.Int64).alias(c) for c in ("message_bytes", "group_size") if c not in comm.columns
    )
    pairs = comm.select("collective", "group_size").drop_nulls().unique()
    factors = pairs.with_columns(
        pl.Series("factor", [busbw_factor(c, int(n)) for c, n in pairs.iter_rows()], dtype=pl.Float64)
    )
    comm = comm.join(factors, on=["collective", "group_size"], how="left", nulls_equal=False)
    return comm.with_columns((pl.col("message_bytes") * pl.col("factor")).alias("bus_bytes"))


def step_collectives(gpu: pl.DataFrame) -> dict[int, dict[str, CollectiveStats]]:
    sized = pl.col("message_bytes").is_not_null()
    stats = (
        _with_bus_bytes(gpu.filter(pl.col("collective").is_not_null()))
        .group_by("step", "collective")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_us").sum().alias("total"),
            pl.col("dur_us").mean().alias("mean"),
            pl.col("dur_us").median().alias("median"),
            pl.col("dur_us").quantile(0.9, "linear").alias("p90"),
            sized.sum().alias("sized_calls"),
            pl.col("message_bytes").sum().alias("bytes"),
            pl.col("message_bytes").median().alias("bytes_median"),
            pl.col("group_size").max().alias("group_size"),
            pl.col("dur_us").filter(sized).sum().alias("sized_us"),
            pl.col("bus_bytes").sum().alias("bus_bytes"),
            pl.col("dur_us").filter(pl.col("bus_bytes").is_not_null()).sum().alias("bus_us"),
        )
    )
    out: dict[int, dict[str, CollectiveStats]] = {}
    for r in stats.sort("collective").iter_rows(named=True):
        out.setdefault(int(r["step"]), {})[r["collective"]] = CollectiveStats(
            int(r["calls"]), float(r["total"]), float(r["mean"]), float(r["median"]), float(r["p90"]),
            sized_calls=int(r["sized_calls"]), message_bytes_total=int(r["bytes"] or 0),
            message_bytes_median=r["bytes_median"], group_size=r["group_size"],
            algbw_bytes_per_s=_per_s(r["bytes"], r["sized_us"]), busbw_bytes_per_s=_per_s(r["bus_bytes"], r["bus_us"]),
        )
    return out


def _per_s(amount: float | None, dur_us: float | None) -> float | None:
    """amount per second of `dur_us`; None when either is missing or the time is zero (no call
    qualified: Polars sums of nothing are 0). A busbw of 0 is real: one rank moves nothing."""
    if amount is None or not dur_us:
        return None
    return float(amount) / us_to_s(float(dur_us))


def _finite(x: float | None) -> float | None:
    return x if x is not None and np.isfinite(x) else None


def step_top_kernels(gpu: pl.DataFrame, top_n: int) -> dict[int, tuple[KernelStats, ...]]:
    weight = pl.col("dur_us") * pl.col("blocks_per_sm")
    has_bps = pl.col("dur_us").filter(pl.col("blocks_per_sm").is_not_null()).sum()
    tail = pl.col("blocks_per_sm") / pl.col("blocks_per_sm").ceil()
    worked = "shape_status" in gpu.columns
    shaped = pl.col("shape_status") == "shaped"
    extra = [
        shaped.sum().alias("shaped_calls"), pl.col("dur_us").filter(shaped).sum().alias("shaped_us"),
        pl.col("work_flops").filter(shaped).sum().alias("flops"), pl.col("work_bytes").filter(shaped).sum().alias("bytes"),
        pl.col("shape_status").filter(~shaped).mode().first().alias("no_shape"),
    ] if worked else []
    stats = (
        _top_rows(gpu, top_n).group_by("step", "name")
        .agg(
            pl.col("kernel_class").first(),
            pl.col("collective").first(),
            pl.len().alias("calls"),
            pl.col("dur_us").sum().alias("total"),
            pl.col("dur_us").median().alias("median"),
            (weight.sum() / has_bps).alias("bps"),
            pl.col("grid_blocks").max().alias("grid"),
            ((pl.col("dur_us") * tail).filter(pl.col("blocks_per_sm") > 0).sum()
             / pl.col("dur_us").filter(pl.col("blocks_per_sm") > 0).sum()).alias("tail"),
            *extra,
        )
        .sort(["step", "total", "name"], descending=[False, True, False])  # ties: by name
        .group_by("step", maintain_order=True)
        .head(top_n)
    )
    groups = {}
    if worked:  # only shaped rows make work groups: filtered before the join, which copies the rows it keeps
        rows = gpu.select("step", "name", "kernel_class", *WORK_COLUMNS, "dur_us").filter(shaped)
        groups = work_groups(rows.join(stats.select("step", "name"), on=["step", "name"]), ["step", "name"])
    out: dict[int, list[KernelStats]] = {}
    for r in stats.iter_rows(named=True):
        bps = _finite(r["bps"])
        n_shaped = int(r["shaped_calls"]) if worked else 0
        out.setdefault(int(r["step"]), []).append(
            KernelStats(r["name"], r["kernel_class"], r["collective"], int(r["calls"]), float(r["total"]),
                        float(r["median"]), bps, r["grid"], shaped_calls=n_shaped,
                        shaped_us=float(r["shaped_us"]) if n_shaped else 0.0,
                        flops=float(r["flops"]) if n_shaped else None, bytes=float(r["bytes"]) if n_shaped else None,
                        work=groups.get((r["step"], r["name"]), ()), waves=bps,
                        tail_efficiency=_finite(r["tail"]) if bps is not None else None,
                        no_shape=r["no_shape"] if worked else None)
        )
    return {k: tuple(v) for k, v in out.items()}


# Relative slack on the top-N threshold of `_top_rows`: two sums of the same n non-negative durations in another
# order differ by under 2·n·2⁻⁵³ of the total (Higham, Accuracy and Stability of Numerical Algorithms, §4.2), i.e.
# under 1e-6 up to ~4e9 rows, where `_top_rows` stops selecting.
_SUM_SLACK = 1e-6
_MAX_SELECTED_ROWS = 4_000_000_000
_ROWS_PER_GROUP = 8  # fewer rows a (step, name) group than this, on the most groups there can be: preselect


def _top_rows(gpu: pl.DataFrame, top_n: int) -> pl.DataFrame:
    """The rows of `gpu` whose (step, name) may be among a step's `top_n` by summed dur_us (`_bounded_rows`), for
    `step_top_kernels`' ten aggregations (a trace where no kernel name repeats made a group of each of 2 M rows: 1.9
    GB; issue 30.2). Their median makes Polars aggregate every group on its own, rows in order, as it does for the
    whole frame: the same sums."""
    rows = _bounded_rows(gpu, [], top_n)
    return gpu if rows is None else gpu[rows]


def _bounded_rows(frame: pl.DataFrame, keys: list[str], top_n: int) -> pl.Series | None:
    """Indices of the rows of `frame` whose (step, name, *keys) group may be among its step's `top_n` by summed
    dur_us, in row order; None for all rows.

    Rows are grouped by step, `keys` and a 64-bit hash of the name (`_name_key`: integers, not text, are hashed; names
    whose hashes collide share a group, so its sum bounds each of theirs from above). A step's top_n-th largest name
    sum is at least its top_n-th largest group maximum (distinct groups hold distinct names, and a name's sum is at
    least its largest duration), so a name outside a group whose sum reaches that, less _SUM_SLACK (the final sums,
    in another grouping, may differ in their last bits), has top_n names above it. None when a duration is negative
    or not finite (the bounds hold for non-negative finite durations only), when there are few groups (at most one
    per _ROWS_PER_GROUP rows: 16 names in 489 steps of 2 M kernels: the aggregations cost little, a filtered copy
    of the rows more) or when most rows are kept."""
    dur = pl.col("dur_us")
    if frame.height == 0 or frame.height > _MAX_SELECTED_ROWS or not frame.select(((dur >= 0) & dur.is_finite())
                                                                                  .fill_null(True).all()).item():
        return None
    most = frame.select(pl.col("name").approx_n_unique() * pl.col("step").n_unique()).item()  # HyperLogLog: cheap
    if most * _ROWS_PER_GROUP <= frame.height:
        return None
    keyed = frame.select("step", *keys, _name_key().alias("_key"), "dur_us")
    groups = (keyed.lazy().group_by("step", *keys, "_key").agg(dur.sum().alias("total"), dur.max().alias("top"))
              .collect())
    if groups.height * _ROWS_PER_GROUP <= frame.height:
        return None
    kth = groups.lazy().group_by("step").agg(
        pl.when(pl.len() > top_n).then(pl.col("top").top_k(top_n).min()).otherwise(0.0).alias("kth"))
    keep = (groups.lazy().join(kth, on="step", nulls_equal=True)
            .filter(pl.col("total") >= pl.col("kth") * (1 - _SUM_SLACK)).select("step", *keys, "_key").collect())
    del groups
    rows = keyed.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"), "step", *keys, "_key").join(
        keep, on=["step", *keys, "_key"], how="semi", nulls_equal=True, maintain_order="left")["_row"]
    return None if rows.len() * 2 > frame.height else rows


def _name_key() -> pl.Expr:
    """The key `_top_rows` groups names by: any function of the name (a hash; equal names, equal keys)."""
    return pl.col("name").hash()


def step_work(gpu: pl.DataFrame) -> tuple[dict[int, tuple[WorkGroup, ...]], dict[int, dict[str, float]]]:
    """Shaped work groups and unshaped µs by reason, per step (empty without `attach_work`'s columns)."""
    if "shape_status" not in gpu.columns:
        return {}, {}
    groups = {int(k[0]): v for k, v in work_groups(gpu, ["step"]).items()}
    unshaped = {int(k[0]): v for k, v in unshaped_us(gpu, ["step"]).items()}
    return groups, unshaped


def class_totals(gpu: pl.DataFrame) -> dict[int, tuple[dict[str, float], dict[str, int]]]:
    stats = gpu.group_by("step", "kernel_class").agg(pl.col("dur_us").sum(), pl.len())
    out: dict[int, tuple[dict[str, float], dict[str, int]]] = {}
    for step, cls, total, n in stats.sort("kernel_class").iter_rows():
        sums, calls = out.setdefault(int(step), ({}, {}))
        sums[cls] = float(total)
        calls[cls] = int(n)
    return out


def in_steps(gpu: pl.DataFrame) -> pl.DataFrame:
    """The GPU rows attributed to a step (all of them, uncopied, when every row is)."""
    return gpu if gpu["step"].null_count() == 0 else gpu.filter(pl.col("step").is_not_null())


def busiest_device(gpu: pl.DataFrame) -> int:
    """The device that ran most GPU events (deviceProperties lists every visible GPU, not the profiled one)."""
    counts = (gpu.lazy().filter(pl.col("device").is_not_null()).group_by("device").len()  # lazy: the one column
              .sort("len", descending=True).collect())
    return int(counts["device"][0]) if counts.height else 0


def unshaped_kernels_by_step(gpu: pl.DataFrame, n: int = 5) -> dict[int, tuple[tuple[str, str, float], ...]]:
    """Per step: the `n` (kernel name, reason) pairs without a shape that hold the most GPU µs."""
    if "shape_status" not in gpu.columns:
        return {}
    # The four columns only (a filter of the frame copied every column of every unshaped row), eager (a lazy query
    # sums in another order: last-bit differences); one pair per kernel when no name repeats: the rows of the pairs
    # that can be in a step's top n only, when Polars sums each group on its own, rows in order, either way
    # (`_sums_each_group_alone`); the sort takes the sums at or above each step's n-th largest only.
    rows = gpu.select("step", "name", "shape_status", "dur_us").filter(pl.col("shape_status") != "shaped")
    keys = ["step", "name", "shape_status"]
    some = _bounded_rows(rows, ["shape_status"], n) if _sums_each_group_alone(rows, keys) else None
    if some is None:
        sums = rows.group_by(*keys).agg(pl.col("dur_us").sum())
    else:  # the median keeps Polars from partial sums over row ranges (what a few groups of many rows would get)
        sums = rows[some].group_by(*keys).agg(pl.col("dur_us").sum(), pl.col("dur_us").median().alias("_m")).drop("_m")
    del rows
    dur = pl.col("dur_us")
    kth = dur.filter(~dur.is_nan()).top_k(n).min().over("step")  # a NaN sorts first: kept
    stats = (sums.lazy().filter((pl.len().over("step") <= n) | (dur >= kth) | dur.is_nan())
             .sort(["step", "dur_us", "name", "shape_status"], descending=[False, True, False, False])
             .group_by("step", maintain_order=True).head(n).collect())
    out: dict[int, list[tuple[str, str, float]]] = {}
    for step, name, why, us in stats.iter_rows():
        out.setdefault(int(step), []).append((str(name), str(why), float(us)))
    return {k: tuple(v) for k, v in out.items()}


# Polars (polars-mem-engine group_by `can_run_partitioned`) may sum a group-by of partitionable aggregations (a sum)
# in partial sums over row ranges when the frame has at least 1,000 rows, its first key is not flagged sorted, and
# the distinct key tuples it estimates from a slice of max(100, √rows) rows at the middle are at most 1,000; else
# (and always with a median) each group's rows in order. The estimate: u + u₁ / m · (rows − m), u the groups in
# the slice of m rows and u₁ those of one row (u when every row is its own). Polars 2.2 partitions no group-by of
# three keys (POLARS_VERBOSE: "keys/aggregates are not partitionable"), so for unshaped_kernels_by_step' this is
# conservative: where it says "partitioned" the full group-by runs, which is the original computation either way.
_PARTITION_MIN_ROWS = 1000
_PARTITION_MAX_GROUPS = 1000


def _sums_each_group_alone(frame: pl.DataFrame, keys: list[str]) -> bool:
    """Whether Polars sums `frame.group_by(*keys)`'s groups each on its own, rows in order (see above)."""
    if frame[keys[0]].flags["SORTED_ASC"] or frame[keys[0]].flags["SORTED_DESC"]:
        return True
    if frame.height < _PARTITION_MIN_ROWS:
        return True
    m = max(100, int(frame.height ** 0.5))
    sizes = frame.select(keys).slice(frame.height // 2, m).group_by(keys).len()["len"]
    u = sizes.len()
    u1 = u if u == m else int((sizes == 1).sum())
    return int(u + (u1 / m) * (frame.height - m)) > _PARTITION_MAX_GROUPS
