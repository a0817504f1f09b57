"""Kernel classes for the GPU rows of an events table (stage 2 of the pipeline).

What it does:
- `classify_name(name)` maps one kernel name to `(kernel_class, collective)` with the ordered
  first-match rule table in `servescope.classify_rules` (name rules only).
- `classify(events)` returns a new frame with `kernel_class` and `collective` (Utf8) on GPU rows
  (`kind` in kernel/memcpy/memset) and null elsewhere. memcpy/memset rows are `memory`. A kernel whose
  cpu_op is `aten::copy_`, `aten::_to_copy` or `aten::to` is `cast` unless its name says communication
  or memory. The cpu_op is found through the kernel's `external_id`, or through its `correlation` →
  the runtime/driver launch row with that correlation → that row's `external_id`
  (kineto-traces.md §1.3, §4 pitfall 4). Unique names are classified once and joined back; the linkage
  is a pair of vectorised `is_in` tests, so a million-row table costs a few hash lookups per row.

What it does not do: read traces, attribute kernels to steps, time anything, or use `Input type`
dtypes (the events table does not carry them), so a same-dtype `aten::copy_` (e.g. `.contiguous()`)
also counts as `cast`. It never mutates its input.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

from servescope.classify_rules import RULES
from servescope.errors import TraceError

__all__ = ["CAST_OPS", "COLLECTIVES", "KERNEL_CLASSES", "classify", "classify_name", "name_head"]

KERNEL_CLASSES: tuple[str, ...] = (
    "communication", "gemm", "attention", "moe", "norm", "activation",
    "rotary", "cast", "sampling", "memory", "other",
)
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast",
)
CAST_OPS: tuple[str, ...] = ("aten::copy_", "aten::_to_copy", "aten::to")

_GPU_KINDS = ("kernel", "memcpy", "memset")
_LAUNCH_KINDS = ("runtime", "driver")
# Name rules that op linkage must not override: a collective or a copy engine stays what it is.
_NOT_OVERRIDDEN = ("communication", "memory")

_COMPILED: tuple[tuple[re.Pattern[str], str, str | None], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), kernel_class, collective)
    for pattern, kernel_class, collective in RULES
)


def name_head(name: str) -> str:
    """The kernel name without its trailing argument list: `f<T>(int, X*)` → `f<T>`.

    Argument types are not the kernel (`quantize_with_block_size<...>(..., flashinfer::...)`), while
    template arguments often are (`cutlass::device_kernel<flash::...>`), so only the final balanced
    `(...)` is cut. Handles Kineto `<4096ul>` and Nsight `<(unsigned long)4096>` spellings alike.
    """
    stripped = name.rstrip()
    if not stripped.endswith(")"):
        return stripped
    depth = 0
    for index in range(len(stripped) - 1, -1, -1):
        char = stripped[index]
        if char == ")":
            depth += 1
        elif char == "(":
            depth -= 1
            if depth == 0:
                return stripped[:index].rstrip() or stripped
    return stripped  # unbalanced: keep the whole name


@lru_cache(maxsize=65536)
def classify_name(name: str) -> tuple[str, str | None]:
    """`(kernel_class, collective or None)` for one kernel name, from name rules only."""
    head = name_head(name)
    for pattern, kernel_class, collective in _COMPILED:
        if pattern.search(head):
            return kernel_class, collective
    return "other", None


def classify(events: pl.DataFrame) -> pl.DataFrame:
    """Return `events` with `kernel_class` and `collective` columns (Utf8; null on non-GPU rows).

    Existing `kernel_class`/`collective` columns are replaced. Raises `TraceError` when `kind` or
    `name` is missing; without `external_id`/`correlation` columns no op linkage is done.
    """
    missing = [column for column in ("kind", "name") if column not in events.columns]
    if missing:
        raise TraceError(f"events frame: missing column(s) {', '.join(missing)}")
    frame = events.drop([c for c in ("kernel_class", "collective") if c in events.columns])
    is_gpu = pl.col("kind").is_in(_GPU_KINDS)
    names = frame.filter(is_gpu & pl.col("name").is_not_null())["name"].unique().to_list()
    labels = [classify_name(name) for name in names]
    by_name = pl.col("name").replace_strict(
        names, [label[0] for label in labels], default=None, return_dtype=pl.Utf8
    )
    collective_by_name = pl.col("name").replace_strict(
        names, [label[1] for label in labels], default=None, return_dtype=pl.Utf8
    )
    kernel_class = (
        pl.when(pl.col("kind").is_in(("memcpy", "memset")))
        .then(pl.lit("memory"))
        .when((pl.col("kind") == "kernel") & _cast_linked(frame) & ~by_name.is_in(_NOT_OVERRIDDEN))
        .then(pl.lit("cast"))
        .when(pl.col("kind") == "kernel")
        .then(by_name.fill_null("other"))  # a kernel without a name is still GPU time
        .otherwise(pl.lit(None, dtype=pl.Utf8))
    )
    return (
        frame.with_columns(kernel_class.alias("kernel_class"))
        .with_columns(
            pl.when(pl.col("kernel_class") == "communication")
            .then(collective_by_name)
            .otherwise(pl.lit(None, dtype=pl.Utf8))
            .alias("collective")
        )
    )


def _cast_linked(frame: pl.DataFrame) -> pl.Expr:
    """Boolean expression: the row's cpu_op (its own, or its launch's) is a cast op."""
    if "external_id" not in frame.columns:
        return pl.lit(False)
    is_cast_op = (pl.col("kind") == "cpu_op") & pl.col("name").is_in(CAST_OPS)
    cast_ext = frame.filter(is_cast_op)["external_id"].drop_nulls().unique().implode()
    linked = pl.col("external_id").is_in(cast_ext).fill_null(False)
    if "correlation" in frame.columns:
        # Newer Kineto leaves External id off some kernels: go kernel → launch (same correlation).
        is_cast_launch = pl.col("kind").is_in(_LAUNCH_KINDS) & pl.col("external_id").is_in(cast_ext)
        cast_corr = frame.filter(is_cast_launch)["correlation"].drop_nulls().unique().implode()
        linked = linked | pl.col("correlation").is_in(cast_corr).fill_null(False)
    return linked
