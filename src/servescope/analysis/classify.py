"""Kernel classes for the GPU rows of an events table (stage 2 of the pipeline).

What it does:
- `classify_name(name)` maps one kernel name to `(kernel_class, collective)` with the ordered
  first-match rule table in `servescope.analysis.rules` (name rules only).
- `classify(events)` returns a new frame with `kernel_class` and `collective` (Utf8) on GPU rows
  (`kind` in kernel/memcpy/memset) and null elsewhere. memcpy/memset rows are `memory`. A kernel whose
  cpu_op is `aten::copy_`, `aten::_to_copy` or `aten::to` is `cast` unless its name says communication
  or memory. The cpu_op is found through the kernel's `external_id`, or through its `correlation` →
  the runtime/driver launch row with that correlation → that row's `external_id`
  (kineto-traces.md §1.3, §4 pitfall 4). Unique names are classified once and joined back (past 1,024 of them, only
  those some rule's superset pattern matches in one Polars pass: `_rule_candidates`); the linkage
  is a pair of vectorised `is_in` tests, so a million-row table costs a few hash lookups per row.
- `link_collectives` (called by `classify`) takes a communication kernel's collective from its own
  args or the CPU op that launched it (`record_param_comms`, `nccl:*`, `c10d::*`, engine collective
  ops) when there is one, and adds `collective_source`, `message_bytes` and `group_size`: joins on the
  few collective rows only (docs/metrics.md).

What it does not do: read traces, attribute kernels to steps, time anything, or use `Input type`
dtypes (the events table does not carry them), so a same-dtype `aten::copy_` (e.g. `.contiguous()`)
also counts as `cast`. It never mutates its input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import TypeVar

import polars as pl

from servescope.analysis.rules import (
    COMM_OP_PATTERN,
    NOT_COMM_OP_PREFIX,
    PRINTABLE_ASCII,
    RECORD_PARAM_COMMS,
    RULES,
    dtype_bytes,
    op_collective,
    rules_superset,
)
from servescope.analysis.vocab import COLLECTIVES, KERNEL_CLASSES
from servescope.errors import TraceError
from servescope.trace.types import GPU_EVENT_KINDS

__all__ = [
    "CAST_OPS", "COLLECTIVES", "KERNEL_CLASSES", "OP_COLLECTIVES", "classify", "classify_gpu", "classify_name",
    "link_collectives", "name_head",
]

# A launching op can also name a reduce to one root (`nccl:reduce`), which no kernel-name rule does.
OP_COLLECTIVES: tuple[str, ...] = (*COLLECTIVES, "reduce")
# Columns `link_collectives` adds to communication rows (null elsewhere).
LINKED_COLUMNS: dict[str, type[pl.DataType]] = {
    "collective_source": pl.Utf8, "message_bytes": pl.Int64, "group_size": pl.Int64,
}
# Collective args carried by the events table (trace._frame.COMM_COLUMNS); absent columns read as null.
COMM_COLUMNS: dict[str, type[pl.DataType]] = {
    "comm_name": pl.Utf8, "comm_in_nelems": pl.Int64, "comm_out_nelems": pl.Int64,
    "comm_group_size": pl.Int64, "comm_dtype": pl.Utf8, "comm_pg": pl.Utf8,
}
CAST_OPS: tuple[str, ...] = ("aten::copy_", "aten::_to_copy", "aten::to")

T = TypeVar("T")
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


# Longest kernel name (without its argument list) the rules read; a longer one is "other" unread. Real names stay
# under ~5,000 characters; each rule scans the whole name, so a 150 MB name took minutes (issue 21).
MAX_CLASSIFIED_CHARS = 16_384


@lru_cache(maxsize=65536)
def classify_name(name: str) -> tuple[str, str | None]:
    """`(kernel_class, collective or None)` for one kernel name, from name rules only; "other" for a name whose head
    is longer than MAX_CLASSIFIED_CHARS (no real kernel's is), unread past its length when over 4x that."""
    if len(name) > 4 * MAX_CLASSIFIED_CHARS:  # name_head would walk back through an argument list no rule reads
        return "other", None
    head = name_head(name)
    if len(head) > MAX_CLASSIFIED_CHARS:
        return "other", None
    for pattern, kernel_class, collective in _COMPILED:
        if pattern.search(head):
            return kernel_class, collective
    return "other", None


def classify(events: pl.DataFrame) -> pl.DataFrame:
    """Return `events` with `kernel_class` and `collective` columns (Utf8; null on non-GPU rows).

    Existing `kernel_class`/`collective` columns are replaced. Raises `TraceError` when `kind` or
    `name` is missing; without `external_id`/`correlation` columns no op linkage is done.
    """
    frame = _drop_derived(events)
    inputs = [c for c in _GPU_INPUTS if c in frame.columns]
    gpu = _classified(frame, frame.lazy().with_row_index(_GPU_ROW).filter(_IS_GPU).select(_GPU_ROW, *inputs).collect())
    gpu = gpu.with_columns(pl.col("collective_source").cast(pl.Utf8))
    rows = gpu[_GPU_ROW]
    full = {name: pl.repeat(None, frame.height, dtype=dtype, eager=True).alias(name)
            for name, dtype in {**DERIVED_COLUMNS, **LINKED_COLUMNS}.items()}
    return frame.with_columns(series.scatter(rows, gpu[name]) for name, series in full.items())


def classify_gpu(gpu: pl.DataFrame, others: pl.DataFrame) -> pl.DataFrame:
    """`gpu` (the GPU rows of an events frame: kernel, memcpy, memset) with the columns `classify` adds, the values
    `classify` gives those rows; `others`: the frame's other rows (or the whole frame), whose launches and CPU ops
    the kernels are linked through. For a caller that holds the GPU rows apart (`analysis.breakdown`): no
    full-length columns that are null on every other row. `gpu` needs kind and name; what else the rules read
    (ids, collective args) is used when present. `collective_source` comes as the Enum SOURCES (the same values;
    a 2 M-kernel trace held it as 31 MB of text)."""
    return _classified(_drop_derived(others), _drop_derived(gpu))


# Derived columns `classify` adds (LINKED_COLUMNS after them); GPU-row columns its rules read.
DERIVED_COLUMNS: dict[str, type[pl.DataType]] = {"kernel_class": pl.Utf8, "collective": pl.Utf8}
_IS_GPU = pl.col("kind").is_in(GPU_EVENT_KINDS)
_GPU_ROW = "_gpu_row"
_GPU_INPUTS = ("kind", "name", "external_id", "correlation", *("comm_name", "comm_in_nelems", "comm_out_nelems",
               "comm_group_size", "comm_dtype", "comm_pg"))


def _drop_derived(events: pl.DataFrame) -> pl.DataFrame:
    missing = [column for column in ("kind", "name") if column not in events.columns]
    if missing:
        raise TraceError(f"events frame: missing column(s) {', '.join(missing)}")
    derived = (*DERIVED_COLUMNS, *LINKED_COLUMNS)
    return events.drop([c for c in derived if c in events.columns])


def _classified(frame: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """`gpu` (GPU rows of `frame`) with DERIVED_COLUMNS and LINKED_COLUMNS; `frame` (every row) gives the launches
    and CPU ops that kernels are linked to."""
    names = _rule_candidates(gpu["name"].drop_nulls().unique()).to_list()
    labels = [classify_name(name) for name in names]
    is_named = pl.col("name").is_not_null()
    by_name = pl.when(is_named).then(pl.col("name").replace_strict(  # a name no rule can match is "other"
        names, [label[0] for label in labels], default=pl.lit("other"), return_dtype=pl.Utf8
    ))
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
    gpu = gpu.with_columns(kernel_class.alias("kernel_class")).with_columns(
        pl.when(pl.col("kernel_class") == "communication")
        .then(collective_by_name)
        .otherwise(pl.lit(None, dtype=pl.Utf8))
        .alias("collective")
    )
    return _link(frame, gpu)


def _rule_candidates(names: pl.Series) -> pl.Series:
    """The distinct `names` that `classify_name` may put in a class other than "other": those where some rule's
    superset pattern (rules.superset_pattern) matches, and every name that is not printable ASCII. One vectorised
    regex pass; Python's `re` then runs on these only (2 M distinct Inductor names: 70 s of per-name calls before)."""
    if names.len() <= _FEW_NAMES:  # the pass would cost more than it saves
        return names
    return names.filter(names.str.contains(_superset()))


_FEW_NAMES = 1024  # a first Rust compile of the pattern is ~50 ms: ~1,500 `classify_name` calls


@lru_cache(maxsize=1)
def _superset() -> str:
    return f"[^{PRINTABLE_ASCII}]|{rules_superset()}"  # one pass: not printable ASCII, or a rule may match


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


# ---------------------------------------------------------------- collectives from the launching op
_CPU_KINDS = ("cpu_op", "user_annotation")
_OP_COLUMNS = ("op_collective", *COMM_COLUMNS)
_LINK_COLUMNS: dict[str, type[pl.DataType]] = {
    "pid": pl.Utf8, "tid": pl.Utf8, "ts_us": pl.Float64, "dur_us": pl.Float64, "correlation": pl.Int64,
    "external_id": pl.Int64,
}


def link_collectives(frame: pl.DataFrame) -> pl.DataFrame:
    """Take each communication kernel's collective and message args from what launched it (on a frame
    with `kernel_class` and `collective`, as `classify` makes it).

    Order of trust, per communication kernel: its own args (`Collective name` on NCCL kernels of
    PyTorch >= 2.1); the `record_param_comms` op that launched it (its `Collective name` arg, element
    counts, dtype, group size, process group); the innermost other collective op around the launch
    (`nccl:all_to_all`, `c10d::allreduce_`, `vllm::all_reduce`, whose args are used when there is no
    record_param_comms: the loader sizes custom all-reduce ops from their first tensor input); the kernel
    name rule. The launching op
    is found through the kernel's `correlation` → the runtime/driver launch row → that row's `External
    id` → the op with that id whose interval holds the launch, else (old traces, where the launch's
    External id is its correlation) the innermost such op on the launch's pid/tid whose interval holds
    the launch (an as-of join). Adds `collective_source` (`kernel_args|launch_op|name`),
    `message_bytes` (Int64: max(in, out) elements × dtype bytes, the nccl-tests "size"; see
    docs/metrics.md) and `group_size` (ranks), from the kernel's args else its op's. Input columns are
    left as they are.
    """
    return _link(frame, frame).with_columns(pl.col("collective_source").cast(pl.Utf8))


SOURCES = pl.Enum(["kernel_args", "launch_op", "name"])  # collective_source's values (classify_gpu: as this Enum)
_LINKED: dict[str, pl.DataType | type[pl.DataType]] = {**LINKED_COLUMNS, "collective_source": SOURCES}


def _link(frame: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` (some rows of `frame`, with `kernel_class` and `collective`) with the collectives of their
    communication kernels linked (`link_collectives`) and LINKED_COLUMNS; `frame` gives launches and ops."""
    is_comm = pl.col("kernel_class") == "communication"
    if not rows.select(is_comm.any()).item():
        return rows.with_columns(pl.lit(None, _LINKED[name]).alias(name) for name in LINKED_COLUMNS)
    # A frame without collective args, timing or ids (Nsight, synthetic) links what it can.
    missing = {**COMM_COLUMNS, **_LINK_COLUMNS}
    work = frame.with_columns(
        pl.lit(None, dtype).alias(name) for name, dtype in missing.items() if name not in frame.columns
    )
    comm = (rows.lazy().with_row_index("_row").filter(is_comm)
            .with_columns(pl.lit(None, dtype).alias(name) for name, dtype in missing.items() if name not in rows.columns)
            .select("_row", "correlation", "external_id", "collective", *COMM_COLUMNS).collect())
    linked = _linked_ops(work, comm)
    own = _collective_expr(comm, "comm_name")
    collective = pl.coalesce(own, "op_collective", "collective")
    source = (
        pl.when(own.is_not_null()).then(pl.lit("kernel_args"))
        .when(pl.col("op_collective").is_not_null()).then(pl.lit("launch_op"))
        .when(pl.col("collective").is_not_null()).then(pl.lit("name"))
    )
    filled = [pl.coalesce(name, f"op_{name}").alias(name) for name in COMM_COLUMNS]
    comm = (
        linked.with_columns(collective.alias("collective"), source.alias("collective_source"), *filled)
        .pipe(lambda f: f.with_columns(_message_bytes(f).alias("message_bytes")))
        .select("_row", "collective", pl.col("collective_source").cast(SOURCES), "message_bytes",
                pl.col("comm_group_size").alias("group_size"))
    )
    at = comm["_row"]
    nulls = {name: pl.repeat(None, rows.height, dtype=_LINKED[name], eager=True).alias(name) for name in LINKED_COLUMNS}
    columns = {"collective": rows["collective"].clone(), **nulls}
    return rows.with_columns(series.scatter(at, comm[name]) for name, series in columns.items())


def _by_value(frame: pl.DataFrame, column: str, fn: Callable[[str], T], dtype: type[pl.DataType]) -> pl.Expr:
    """`fn` of each row's `column` value, computed once per distinct value and joined back."""
    values = frame[column].drop_nulls().unique().to_list()
    return pl.col(column).replace_strict(values, [fn(v) for v in values], default=None, return_dtype=dtype)


def _collective_expr(frame: pl.DataFrame, column: str) -> pl.Expr:
    return _by_value(frame, column, op_collective, pl.Utf8)


def _message_bytes(frame: pl.DataFrame) -> pl.Expr:
    """nccl-tests "size": the larger of the input and output buffers, in bytes."""
    elem_bytes = _by_value(frame, "comm_dtype", dtype_bytes, pl.Int64)
    size = pl.max_horizontal("comm_in_nelems", "comm_out_nelems") * elem_bytes
    return pl.when(size >= 0).then(size)  # a negative count is damage, not a size


def _comm_ops(frame: pl.DataFrame) -> pl.DataFrame:
    """CPU-side collective ops with their collective (from the `Collective name` arg, else the name)."""
    is_cpu = pl.col("kind").is_in(_CPU_KINDS)
    names = frame.lazy().filter(is_cpu).select(pl.col("name").drop_nulls().unique()).collect()
    op_names = names.filter(  # the regex runs once per distinct name
        pl.col("name").str.contains(COMM_OP_PATTERN) & ~pl.col("name").str.starts_with(NOT_COMM_OP_PREFIX)
    )["name"].implode()
    wanted = ["kind", "name", "pid", "tid", "ts_us", "dur_us", "external_id", *COMM_COLUMNS]
    ops = frame.lazy().select(wanted).filter(is_cpu & pl.col("name").is_in(op_names)).collect()
    return ops.select(
        pl.col("pid").alias("op_pid"),
        pl.col("tid").alias("op_tid"),
        pl.col("ts_us").alias("op_ts_us"),
        (pl.col("ts_us") + pl.col("dur_us")).alias("op_end_us"),
        pl.col("external_id").alias("op_external_id"),
        (pl.col("name") == RECORD_PARAM_COMMS).alias("op_is_rpc"),
        pl.coalesce(_collective_expr(ops, "comm_name"), _collective_expr(ops, "name")).alias("op_collective"),
        *[pl.col(name).alias(f"op_{name}") for name in COMM_COLUMNS],
    ).sort("op_ts_us")


def _linked_ops(frame: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """`comm` (communication kernel rows) with the `op_*` columns of their launching op: the collective
    from record_param_comms, else from the innermost other collective op; the args from the former."""
    ops = _comm_ops(frame)
    launch_cols = ("correlation", "pid", "tid", "ts_us", "external_id")
    wanted = comm["correlation"].drop_nulls().implode()
    launches = (
        frame.lazy()
        .select("kind", *launch_cols)
        .filter(pl.col("correlation").is_in(wanted) & pl.col("kind").is_in(_LAUNCH_KINDS))
        .select(launch_cols)
        .collect()
        .unique("correlation", keep="first", maintain_order=True)
        .rename({c: f"launch_{c}" for c in launch_cols[1:]})
    )
    comm = comm.join(launches, on="correlation", how="left")
    comm = comm.with_columns(pl.coalesce("launch_external_id", "external_id").alias("launch_external_id"))
    rpc = _enclosing(comm, ops.filter(pl.col("op_is_rpc")))
    named = _enclosing(comm, ops.filter(~pl.col("op_is_rpc") & pl.col("op_collective").is_not_null()))
    # Args from record_param_comms when it was found, else from the named op (custom all-reduce ops
    # carry a size read from their input shapes, see trace/_shapes.py); never mixed within a row.
    from_rpc = (rpc["op_collective"].is_not_null() | rpc["op_comm_in_nelems"].is_not_null()).to_frame("rpc")
    return comm.with_columns(
        pl.coalesce(rpc["op_collective"], named["op_collective"]).alias("op_collective"),
        *[from_rpc.select(pl.when("rpc").then(rpc[f"op_{name}"]).otherwise(named[f"op_{name}"]))
          .to_series().alias(f"op_{name}") for name in COMM_COLUMNS],
    )


def _enclosing(comm: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """One row per `comm` row (same order): the `_OP_COLUMNS` (prefixed `op_`) of the op that launched
    it: by External id when that op's interval holds the launch (or the kernel has no launch row),
    else the latest op starting at or before the launch on its pid/tid that has not ended yet."""
    cols = [f"op_{c}" if c != "op_collective" else c for c in _OP_COLUMNS]
    keys = comm.select("_row", "launch_pid", "launch_tid", "launch_ts_us", "launch_external_id")
    by_id = keys.join(
        ops.unique("op_external_id", keep="first").filter(pl.col("op_external_id").is_not_null()),
        left_on="launch_external_id", right_on="op_external_id", how="left",
    ).filter(
        pl.col("launch_ts_us").is_null()
        | ((pl.col("op_ts_us") <= pl.col("launch_ts_us")) & (pl.col("launch_ts_us") <= pl.col("op_end_us")))
    )
    timed = keys.filter(pl.col("launch_ts_us").is_not_null()).sort("launch_ts_us")
    by_time = timed.join_asof(
        ops, left_on="launch_ts_us", right_on="op_ts_us", by_left=["launch_pid", "launch_tid"],
        by_right=["op_pid", "op_tid"], strategy="backward", check_sortedness=False,
    ).filter(pl.col("launch_ts_us") <= pl.col("op_end_us"))
    found = (
        pl.concat([by_id.select("_row", *cols), by_time.select("_row", *cols)])
        .filter(pl.col("op_collective").is_not_null() | pl.col("op_comm_in_nelems").is_not_null())
        .unique("_row", keep="first", maintain_order=True)
    )
    return keys.select("_row").join(found, on="_row", how="left", maintain_order="left")
