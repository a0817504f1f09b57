"""An events table split for the breakdown: the GPU rows apart from the other rows, each with only the columns read on
it, so that the classes, steps and work the breakdown adds are columns of the GPU rows alone (no full-length column
that is null on every other row) and a GPU row does not carry the collective and shape args of CPU ops.

Does: `split_events(events)` copies (the caller keeps the table); `take_split(holder)` splits a table the caller hands
over (a one-element list holding the only reference), one column at a time, each freed once split — a trace of
millions of tiny kernels is then held about once, not twice. A column that is null throughout becomes a fresh null
column (no copy of its nulls), and one kept whole (every row on one side) is not copied.
Does not: classify, attribute or sum anything (classify.classify_gpu, steps.find_steps, breakdown).
"""

from __future__ import annotations

import polars as pl

from servescope.trace.types import GPU_EVENT_KINDS

_COMM_ARGS = ("comm_name", "comm_in_nelems", "comm_out_nelems", "comm_group_size", "comm_dtype", "comm_pg")
# Read on GPU rows: classes (names, launch ids, a kernel's own collective args), steps, busy time, top kernels, work.
GPU_COLUMNS = ("kind", "name", "ts_us", "dur_us", "device", "stream", "correlation", "external_id", "grid_blocks",
               "blocks_per_sm", "gpu_bytes", *_COMM_ARGS)
# Read on the other rows: launches, CPU ops (cast and collective ops, shapes) and step labels.
OTHER_COLUMNS = ("kind", "name", "pid", "tid", "ts_us", "dur_us", "correlation", "external_id", *_COMM_ARGS,
                 "op_input_dims", "op_input_types")


def split_events(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(GPU rows with GPU_COLUMNS, other rows with OTHER_COLUMNS) of `events` (the columns it has), in row order."""
    return _split(events.get_columns(), events["kind"].is_in(GPU_EVENT_KINDS))


def take_split(holder: list[pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`split_events` of the frame `holder` holds, which is emptied: with no other reference to the frame, its
    columns are freed one by one as they are split."""
    events = holder.pop()
    is_gpu = events["kind"].is_in(GPU_EVENT_KINDS)
    columns = events.get_columns()
    del events
    return _split(columns, is_gpu)


def _split(columns: list[pl.Series], is_gpu: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    n_gpu = int(is_gpu.sum())
    is_other = ~is_gpu
    gpu: list[pl.Series] = []
    other: list[pl.Series] = []
    while columns:  # popped so that the list holds no column once split
        column = columns.pop(0)
        if column.name in GPU_COLUMNS:
            gpu.append(_rows(column, is_gpu, n_gpu))
        if column.name in OTHER_COLUMNS:
            other.append(_rows(column, is_other, len(is_gpu) - n_gpu))
        del column
    return pl.DataFrame(gpu), pl.DataFrame(other)


def _rows(column: pl.Series, mask: pl.Series, n: int) -> pl.Series:
    """`column.filter(mask)` (`n` rows), without copying a whole column or a column of nulls."""
    if n == len(column):
        return column
    if column.null_count() == len(column):
        return pl.repeat(None, n, dtype=column.dtype, eager=True).alias(column.name)
    return column.filter(mask)
