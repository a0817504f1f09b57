"""Per-kernel work from the launching op's shapes, and the roofline of that work (issue 19 parts 1–3).

What it does:
- `attach_work(events, gpu, lengths, capture)`: each GPU row's launching op (correlation → launch → `External id` →
  the cpu_op with that id whose interval holds the launch; else the kernel's own `External id`), its work
  (`analysis.op_costs.op_cost`) and a `shape_status` (`SHAPE_STATUSES`); an op that launched several kernels splits its
  work over them in proportion to their durations; memcpy/memset rows carry their own `args.bytes`; paged-attention
  ops are sized with their step's query/KV length sums (`lengths`: the steps table's `attn_*` columns); kernels of a
  graph replay (no launching op) take the mean work per call of the same kernel name in a capture trace (`capture`);
- `work_groups`, `unshaped_us`: shaped work and unshaped µs per group of rows;
- `Peaks` (datasheet ceilings and the measured achievable reference, given by the caller: analysis never reads
  specs) and `roofline(groups, peaks)`: achieved FLOP/s and B/s, % of peak, the bound, % of the measured achievable;
  `waves`, `tail_efficiency`.
What it does not do: read files or specs, size ops (analysis.op_costs, analysis.costs), or format anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from servescope.analysis.costs import (  # noqa: F401 - re-exported: the cost models' public names
    ELEMENT_BYTES,
    LOGICAL_BYTES,
    PEAK_KEY,
    QUANT_LAYOUTS,
    attention_cost,
    bytes_cost,
    causal_pairs,
    gemm_cost,
    mla_decode_cost,
    moe_gemm_cost,
    paged_attention_cost,
    quantized_gemm_cost,
    sparse_topk_attention_cost,
    w4a16_gemm_cost,
)
from servescope.analysis.launch import SplitPricer
from servescope.analysis.op_costs import OpCost, op_cost, parse_inputs  # noqa: F401 - re-exported
from servescope.analysis.steps import LENGTH_COLUMNS

SHAPE_STATUSES = ("shaped", "no_op", "no_model", "no_dims", "no_lengths", "malformed", "unsupported")
SHAPE_STATUS_TEXT = {
    "no_op": "no launching op (graph replay or no linkage)", "no_model": "op without a cost model",
    "no_dims": "no Input Dims (record_shapes off)", "malformed": "malformed Input Dims",
    "no_lengths": "attention without the step's sequence lengths (vLLM detailed_trace_annotation off)",
    "unsupported": "layout not sized (broadcast, packed or unknown dtype)",
}


# ------------------------------------------------------------------------------------------------ linkage
WORK_COLUMNS: dict[str, Any] = {
    "shape_status": pl.Utf8, "work_model": pl.Utf8, "work_dtype": pl.Utf8, "work_m": pl.Int64,
    "work_flops": pl.Float64, "work_bytes": pl.Float64, "work_n": pl.Int64, "work_k": pl.Int64,
}
_NEEDED = {"external_id": pl.Int64, "correlation": pl.Int64, "op_input_dims": pl.Utf8, "op_input_types": pl.Utf8,
           "gpu_bytes": pl.Int64, "ts_us": pl.Float64, "dur_us": pl.Float64}
_COST_SCHEMA = {"_status": pl.Utf8, "_model": pl.Utf8, "_dtype": pl.Utf8, "_m": pl.Int64, "_n": pl.Int64,
                "_k": pl.Int64, "_flops": pl.Float64, "_bytes": pl.Float64, "_a_tok": pl.Int64, "_a_h": pl.Int64,
                "_a_hkv": pl.Int64, "_a_d": pl.Int64, "_a_bq": pl.Float64, "_a_bkv": pl.Float64}


@dataclass(frozen=True)
class CaptureKernel:
    """One kernel name of a capture trace: its shaped calls and their mean work per call (FLOPs, bytes); model,
    dtype and (m, n, k) when all its calls agree, else None."""

    name: str
    model: str
    dtype: str | None
    m: int | None
    n: int | None
    k: int | None
    calls: int
    flops_per_call: float
    bytes_per_call: float


@dataclass(frozen=True)
class CaptureWork:
    """Shapes for graph-replayed kernels from a capture trace (`analysis.capture.capture_work`), matched by name."""

    file: str
    gpu: str | None
    model: str | None
    kernels: tuple[CaptureKernel, ...]

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(
            [(k.name, k.model, k.dtype, k.m, k.n, k.k, k.flops_per_call, k.bytes_per_call) for k in self.kernels],
            schema={"name": pl.Utf8, "_c_model": pl.Utf8, "_c_dtype": pl.Utf8, "_c_m": pl.Int64, "_c_n": pl.Int64,
                    "_c_k": pl.Int64, "_c_flops": pl.Float64, "_c_bytes": pl.Float64}, orient="row")


def _fill(f: pl.DataFrame) -> pl.DataFrame:
    return f.with_columns(pl.lit(None, d).alias(c) for c, d in _NEEDED.items() if c not in f.columns)


@dataclass(frozen=True)
class LinkTables:
    """What links a GPU row to its launching op, from the non-GPU rows: `launches` (correlation → the launch's
    External id `_launch_ext` and time `_launch_ts`, the first launch of a correlation) and `ops` (cpu_op External id
    `_op_id` → `_op_name`, `_op_ts`, `_op_end`, `_dims`, `_types`, the first op of an id); `op_ids`: the launching
    op id of each GPU row they were made for (`link_tables`), whose ops alone `ops` holds."""

    launches: pl.DataFrame
    ops: pl.DataFrame
    op_ids: pl.Series


def _op_id(launches: pl.DataFrame) -> pl.Expr:
    """A GPU row's launching op id: its launch's External id, else its own (`_linked`'s `_op_id`)."""
    ext = pl.col("correlation").replace_strict(launches["correlation"], launches["_launch_ext"], default=None,
                                               return_dtype=pl.Int64)
    return pl.coalesce(ext, pl.col("external_id").cast(pl.Int64))


def link_tables(events: pl.DataFrame, gpu: pl.DataFrame) -> LinkTables:
    """`LinkTables` of `events` (all rows, or the non-GPU rows only: only launches and cpu_ops are read) for the GPU
    rows `gpu`: `ops` holds the ops those rows name only (the others' names and shapes are not copied: the 68 MB
    trace has ~20x more cpu_ops than GPU rows)."""
    ev = _fill(events)
    launches = (ev.lazy().filter(pl.col("kind").is_in(("runtime", "driver")) & pl.col("correlation").is_not_null())
                .select("correlation", pl.col("external_id").alias("_launch_ext"), pl.col("ts_us").alias("_launch_ts"))
                .unique("correlation", keep="first", maintain_order=True).collect())
    ids = gpu.select(_op_id(launches) if {"correlation", "external_id"} <= set(gpu.columns)
                     else pl.lit(None, pl.Int64).alias("_op_id")).to_series()
    used = ids.drop_nulls().unique().implode()
    ops = (ev.lazy().filter((pl.col("kind") == "cpu_op") & pl.col("external_id").is_in(used))
           .select(pl.col("external_id").alias("_op_id"), pl.col("name").alias("_op_name"),
                   pl.col("ts_us").alias("_op_ts"), (pl.col("ts_us") + pl.col("dur_us")).alias("_op_end"),
                   pl.col("op_input_dims").alias("_dims"), pl.col("op_input_types").alias("_types"))
           .unique("_op_id", keep="first", maintain_order=True).collect())
    return LinkTables(launches, ops, ids)


def _linked(g: pl.DataFrame, links: LinkTables) -> pl.DataFrame:
    """GPU rows with their launching op's id, name, `Input Dims` and `Input type` (`_op_*`, `_dims`, `_types`)."""
    launches, ops = links.launches, links.ops
    linked = (g.with_row_index("_row").join(launches, on="correlation", how="left", maintain_order="left")
              .with_columns(pl.coalesce("_launch_ext", "external_id").alias("_op_id"))
              .join(ops, on="_op_id", how="left", maintain_order="left"))
    held = pl.col("_launch_ts").is_null() | ((pl.col("_op_ts") <= pl.col("_launch_ts"))
                                             & (pl.col("_launch_ts") <= pl.col("_op_end")))
    return linked.with_columns(pl.when(held).then(pl.col("_op_name")).alias("_op_name"))


def _with_costs(linked: pl.DataFrame) -> pl.DataFrame:
    """`linked` with each distinct (op, dims, types)'s cost (`_COST_SCHEMA`), computed once per distinct shape."""
    keys = linked.filter(pl.col("_op_name").is_not_null()).select("_op_name", "_dims", "_types").unique()
    rows = []
    for name, dims, types in keys.iter_rows():
        c = op_cost(name, dims, types)
        a = c.attn
        rows.append((c.status, c.model, c.dtype, c.m, c.n, c.k, c.flops, c.bytes,
                     *((a.tokens, a.heads, a.kv_heads, a.head_dim, a.b_q, a.b_kv) if a else (None,) * 6)))
    table = pl.concat([keys, pl.DataFrame(rows, schema=_COST_SCHEMA, orient="row")], how="horizontal")
    return linked.join(table, on=["_op_name", "_dims", "_types"], how="left", maintain_order="left", nulls_equal=True)


def _size_by_lengths(linked: pl.DataFrame, lengths: pl.DataFrame | None) -> pl.DataFrame:
    """Paged-attention rows ("lengths") sized with their step's length sums (`costs.paged_attention_cost`, written
    out as expressions); "no_lengths" without them, "unsupported" when the op has fewer rows than the step's tokens
    (its rows must hold every query token; graph padding may add more)."""
    needs = pl.col("_status") == "lengths"
    known = lengths is not None and {"step", *LENGTH_COLUMNS} <= set(lengths.columns)
    if lengths is None or not known or "step" not in linked.columns or not linked.select(needs.any()).item():
        return linked.with_columns(pl.when(needs).then(pl.lit("no_lengths")).otherwise(pl.col("_status"))
                                   .alias("_status"))
    linked = linked.join(lengths.select("step", *LENGTH_COLUMNS), on="step", how="left", maintain_order="left")
    sq, sk, sqsq, sqsk = (pl.col(c).cast(pl.Float64) for c in LENGTH_COLUMNS)
    hd = pl.col("_a_h").cast(pl.Float64) * pl.col("_a_d")
    pairs = sqsk - (sqsq - sq) / 2.0  # costs.causal_pairs
    flops = 4.0 * hd * pairs
    nbytes = 2.0 * pl.col("_a_tok") * hd * pl.col("_a_bq") + 2.0 * sk * pl.col("_a_hkv") * pl.col("_a_d") * pl.col(
        "_a_bkv")
    status = (pl.when(~needs).then(pl.col("_status")).when(pl.col("attn_sq").is_null()).then(pl.lit("no_lengths"))
              .when(pl.col("_a_tok") < pl.col("attn_sq")).then(pl.lit("unsupported")).otherwise(pl.lit("shaped")))
    sized = needs & (pl.col("attn_sq").is_not_null())
    return linked.with_columns(
        pl.when(sized).then(flops).otherwise(pl.col("_flops")).alias("_flops"),
        pl.when(sized).then(nbytes).otherwise(pl.col("_bytes")).alias("_bytes"),
        status.alias("_status"),
    ).drop(*LENGTH_COLUMNS)


def _with_capture(linked: pl.DataFrame, capture: CaptureWork | None) -> tuple[pl.DataFrame, list[str]]:
    """Kernels without a launching op take the capture trace's per-call work of their kernel name (a graph replays
    what was captured): status "shaped", share 1 (per call)."""
    if capture is None or not capture.kernels:
        return linked, []
    free = (pl.col("kind") == "kernel") & pl.col("_op_name").is_null()
    linked = linked.join(capture.frame(), on="name", how="left", maintain_order="left")
    hit = free & pl.col("_c_flops").is_not_null()
    linked = linked.with_columns(
        pl.when(hit).then(pl.lit("shaped")).otherwise(pl.col("_status")).alias("_status"),
        pl.when(hit).then(pl.lit("capture")).otherwise(pl.col("_op_name")).alias("_op_name"),
        *(pl.when(hit).then(pl.col(f"_c_{c}")).otherwise(pl.col(f"_{c}")).alias(f"_{c}")
          for c in ("model", "dtype", "m", "n", "k", "flops", "bytes")),
        pl.when(hit).then(-1 - pl.col("_row").cast(pl.Int64)).otherwise(pl.col("_op_id")).alias("_op_id"),
    ).drop("_c_model", "_c_dtype", "_c_m", "_c_n", "_c_k", "_c_flops", "_c_bytes")
    got = linked.filter(pl.col("_op_name") == "capture")
    missed = linked.filter(free & (pl.col("_op_name").is_null()))
    notes = []
    if got.height:
        left = (f"; {missed.height:,} replayed kernels ({missed['dur_us'].sum():,.1f} µs) have no shaped kernel of "
                "their name there") if missed.height else ""
        notes.append(f"{got.height:,} graph-replayed kernels ({got['dur_us'].sum():,.1f} µs) take their shapes from "
                     f"the capture trace {capture.file} (mean work per call of the same kernel name){left}")
    return linked, notes


_READ = ("kind", "dur_us", "correlation", "external_id", "gpu_bytes", "step")  # GPU-row columns read (+ name: capture)


def attach_work(events: pl.DataFrame, gpu: pl.DataFrame, lengths: pl.DataFrame | None = None,
                capture: CaptureWork | None = None, links: LinkTables | None = None) -> tuple[pl.DataFrame, list[str]]:
    """`gpu` (GPU rows of `events`) with `WORK_COLUMNS`: each row's share of its launching op's work (see the module
    docstring) and its `shape_status`; and warnings (malformed `Input Dims`, counted; capture-trace shapes).
    `links`: `link_tables(events, gpu)` (or for more rows) when the caller has them already. The joins carry only the columns read."""
    links = link_tables(events, gpu) if links is None else links
    read = (*_READ, "name") if capture is not None and capture.kernels else _READ
    g = gpu.select(c for c in read if c in gpu.columns)
    g = g.with_columns(pl.lit(None, _NEEDED[c]).alias(c) for c in ("correlation", "external_id", "gpu_bytes", "dur_us")
                       if c not in g.columns)
    linked = _size_by_lengths(_with_costs(_linked(g, links)), lengths)
    linked, notes = _with_capture(linked, capture)
    is_kernel = pl.col("kind") == "kernel"
    shaped_kernel = is_kernel & (pl.col("_status") == "shaped")
    op_dur = pl.col("dur_us").filter(is_kernel).sum().over("_op_id")
    op_n = is_kernel.sum().over("_op_id")
    share = pl.when(op_dur > 0).then(pl.col("dur_us") / op_dur).otherwise(1.0 / op_n)
    copy = pl.col("kind").is_in(("memcpy", "memset"))
    linked = linked.with_columns(
        pl.when(shaped_kernel).then(share).alias("_share")
    ).with_columns(
        pl.when(copy).then(pl.when(pl.col("gpu_bytes").is_not_null()).then(pl.lit("shaped")).otherwise(pl.lit("no_dims")))
        .when(pl.col("_op_name").is_null()).then(pl.lit("no_op"))
        .otherwise(pl.col("_status")).alias("shape_status"),
        pl.when(copy).then(pl.col("kind")).when(shaped_kernel).then(pl.col("_model")).alias("work_model"),
        *(pl.when(shaped_kernel).then(pl.col(f"_{c}")).alias(f"work_{c}") for c in ("dtype", "m", "n", "k")),
        pl.when(copy & pl.col("gpu_bytes").is_not_null()).then(pl.lit(0.0))
        .when(shaped_kernel).then(pl.col("_flops") * pl.col("_share")).alias("work_flops"),
        pl.when(copy).then(pl.col("gpu_bytes").cast(pl.Float64))
        .when(shaped_kernel).then(pl.col("_bytes") * pl.col("_share")).alias("work_bytes"),
    )
    # A shaped op's share is split over its kernels only (a row of another kind keeps "shaped" out).
    linked = linked.with_columns(pl.when(~copy & ~is_kernel & (pl.col("shape_status") == "shaped"))
                                 .then(pl.lit("no_model")).otherwise(pl.col("shape_status")).alias("shape_status"))
    work = linked.select(*WORK_COLUMNS).cast({c: d for c, d in WORK_COLUMNS.items()})  # in row order (left joins)
    bad = linked.filter(pl.col("shape_status") == "malformed")
    warnings = []
    if bad.height:
        warnings.append(f"{bad.height:,} kernels ({bad['dur_us'].sum():,.1f} µs) launched by "
                        f"{bad['_op_id'].n_unique():,} ops with malformed Input Dims (wrong nesting, strings, "
                        "negative or huge dims) carry no shape")
    del linked, bad
    return gpu.drop([c for c in WORK_COLUMNS if c in gpu.columns]).hstack(work), [*warnings, *notes]


# ------------------------------------------------------------------------------------------------ aggregates
@dataclass(frozen=True)
class WorkGroup:
    """Shaped GPU work of one (class, model, dtype, M, N, K): calls, summed kernel µs, FLOPs and bytes."""

    kernel_class: str
    model: str
    dtype: str | None
    m: int | None
    calls: int
    dur_us: float
    flops: float
    bytes: float
    n: int | None = None
    k: int | None = None


_GROUP_KEYS = ("kernel_class", "work_model", "work_dtype", "work_m", "work_n", "work_k")


def work_groups(gpu: pl.DataFrame, by: list[str]) -> dict[tuple[Any, ...], tuple[WorkGroup, ...]]:
    """Shaped rows of `gpu` (with `attach_work`'s columns) per value of the `by` columns, as WorkGroups."""
    shaped = gpu.filter(pl.col("shape_status") == "shaped")
    stats = (shaped.group_by(*by, *_GROUP_KEYS)
             .agg(pl.len().alias("calls"), pl.col("dur_us").sum().alias("dur"), pl.col("work_flops").sum().alias("f"),
                  pl.col("work_bytes").sum().alias("b"))
             .sort(*by, *_GROUP_KEYS, nulls_last=True))
    out: dict[tuple[Any, ...], list[WorkGroup]] = {}
    for r in stats.iter_rows(named=True):
        out.setdefault(tuple(r[c] for c in by), []).append(WorkGroup(
            r["kernel_class"] or "other", r["work_model"], r["work_dtype"], r["work_m"], int(r["calls"]),
            float(r["dur"]), float(r["f"]), float(r["b"]), r["work_n"], r["work_k"]))
    return {k: tuple(v) for k, v in out.items()}


def unshaped_us(gpu: pl.DataFrame, by: list[str]) -> dict[tuple[Any, ...], dict[str, float]]:
    """Summed µs of the GPU rows without a shape, per value of `by`, by `shape_status` reason."""
    stats = (gpu.filter(pl.col("shape_status") != "shaped").group_by(*by, "shape_status")
             .agg(pl.col("dur_us").sum()).sort(*by, "shape_status"))
    out: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in stats.iter_rows(named=True):
        out.setdefault(tuple(r[c] for c in by), {})[r["shape_status"]] = float(r["dur_us"])
    return out


# ------------------------------------------------------------------------------------------------ roofline
# Seconds a measured reference (a measured per-op curve) takes for a group's work; None: no measured reference for
# that op, dtype or shape. Given by the caller (advise / report resolve it from perfmodel): analysis reads no data.
Achievable = Callable[[WorkGroup], float | None]


@dataclass(frozen=True)
class Peaks:
    """Datasheet ceilings of one GPU, SI: dense FLOP/s by dtype key (bf16, fp8, fp4, int8), HBM bytes/s, SMs;
    `source` says where they came from. `achievable`: the measured reference (`Achievable`), None when nothing was
    measured for this GPU; `achievable_source` names it. `split_k`: prices a split-K what-if of a launch on this GPU
    (analysis.launch.SplitPricer; advise hands in perfmodel.split_k), None when not given."""

    name: str
    flops_per_s: Mapping[str, float]
    hbm_bw_bytes_per_s: float
    sm_count: int | None
    source: str
    achievable: Achievable | None = None
    achievable_source: str | None = None
    split_k: SplitPricer | None = None

    def ridge_flops_per_byte(self, dtype: str) -> float | None:
        """Ridge point = peak FLOP/s ÷ HBM B/s (FLOP/byte); None without a peak for the dtype."""
        peak = self.flops_per_s.get(dtype) or 0.0
        return peak / self.hbm_bw_bytes_per_s if peak > 0 and self.hbm_bw_bytes_per_s > 0 else None

    def roofline_s(self, g: WorkGroup) -> float | None:
        """Datasheet roofline seconds of a group: max(FLOPs / peak of its dtype, bytes / HBM B/s); None when it has
        FLOPs but no peak for its dtype, or no HBM bandwidth is known."""
        if self.hbm_bw_bytes_per_s <= 0:
            return None
        mem = g.bytes / self.hbm_bw_bytes_per_s
        if g.flops <= 0:
            return mem
        peak = self.flops_per_s.get(g.dtype or "") or 0.0
        return max(g.flops / peak, mem) if peak > 0 else None


def curve_reference(ratio: Callable[[float], float], flops_per_s: Mapping[str, float],
                    hbm_bw_bytes_per_s: float) -> Achievable:
    """The measured dense-GEMM curve as an `Achievable`: dense GEMMs take datasheet roofline × ratio(M) (the curve's
    time over the roofline at M rows, perfmodel.gemm_curve); other ops have no measured reference (None)."""
    peaks = Peaks("", flops_per_s, hbm_bw_bytes_per_s, None, "")

    def achievable(g: WorkGroup) -> float | None:
        if g.model != "gemm" or not g.m:
            return None
        t = peaks.roofline_s(g)
        return None if t is None else t * float(ratio(float(g.m)))
    return achievable


@dataclass(frozen=True)
class Roofline:
    """Achieved rates of some shaped work and where it sits against the peaks (fractions are 0–1+, not %)."""

    flops: float
    bytes: float
    dur_us: float
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    intensity_flops_per_byte: float | None
    frac_of_peak: float | None  # roofline time (datasheet) ÷ measured time
    bound: str | None  # "compute" | "memory"
    frac_of_achievable: float | None  # measured-reference time ÷ measured time (ops with a measured reference)
    achievable_us: float | None = None  # the measured reference's µs for this work


def achievable_us(groups: Iterable[WorkGroup], peaks: Peaks | None) -> float | None:
    """µs the measured reference takes for all of `groups` (Σ achievable s × 10⁶); None unless every group has one."""
    if peaks is None or peaks.achievable is None:
        return None
    total = 0.0
    for g in groups:
        t = peaks.achievable(g)
        if t is None:
            return None
        total += t
    return total * 1e6


def roofline(groups: Iterable[WorkGroup], peaks: Peaks | None) -> Roofline | None:
    """Achieved FLOP/s = Σ FLOPs ÷ Σ kernel s; B/s likewise; % of peak = Σ max(F/peak_dtype, B/HBM) ÷ Σ kernel s
    (the datasheet roofline time over the measured time); bound = compute where Σ F/peak ≥ Σ B/HBM (intensity
    above the ridge), else memory; % of achievable = Σ measured-reference s ÷ Σ kernel s (every group with a
    measured reference, `Peaks.achievable`). None when there is no shaped work; peak-based fields None without
    peaks or a peak for a dtype."""
    gs = [g for g in groups if g.dur_us > 0]
    if not gs:
        return None
    flops, nbytes, dur_s = sum(g.flops for g in gs), sum(g.bytes for g in gs), sum(g.dur_us for g in gs) * 1e-6
    ai = flops / nbytes if nbytes > 0 else None
    frac = bound = achievable = ref_us = None
    if peaks is not None and peaks.hbm_bw_bytes_per_s > 0:
        times = [peaks.roofline_s(g) for g in gs]
        if all(t is not None for t in times):
            t_comp = sum(g.flops / peaks.flops_per_s[g.dtype or ""] for g in gs if g.flops > 0)
            t_mem = sum(g.bytes for g in gs) / peaks.hbm_bw_bytes_per_s
            frac, bound = sum(t or 0.0 for t in times) / dur_s, "compute" if t_comp >= t_mem else "memory"
        ref_us = achievable_us(gs, peaks)
        achievable = ref_us * 1e-6 / dur_s if ref_us is not None else None
    return Roofline(flops, nbytes, dur_s * 1e6, flops / dur_s, nbytes / dur_s, ai, frac, bound, achievable, ref_us)


def waves(grid_blocks: float, sm_count: int, resident_blocks_per_sm: int = 1) -> float:
    """Waves = grid blocks ÷ (SMs × resident blocks per SM); one resident block per SM unless told (a large GEMM or
    attention tile; kernels that fit more blocks per SM run in proportionally fewer waves)."""
    return grid_blocks / (sm_count * resident_blocks_per_sm)


def tail_efficiency(n_waves: float) -> float | None:
    """Share of SM slots busy over the waves run: waves ÷ ⌈waves⌉ (1.0 for whole waves; 0.34 for 64 blocks on 188
    SMs). None for 0 waves."""
    return n_waves / math.ceil(n_waves) if n_waves > 0 else None
