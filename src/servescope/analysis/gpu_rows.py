"""An events table split for the breakdown: the GPU rows apart from the other rows, each with only the columns read on
it, so that the classes, steps and work the breakdown adds are columns of the GPU rows alone (no full-length column
that is null on every other row) and a GPU row does not carry the collective and shape args of CPU ops.

Does: `split_events(events)` copies (the caller keeps the table); `take_split(holder)` splits a table the caller hands
over (a one-element list holding the only reference), one column at a time, each freed once split — a trace of
millions of tiny kernels is then held about once, not twice. A column that is null throughout becomes a fresh null
column (no copy of its nulls), and one kept whole (every row on one side) is not copied.
Also, for the breakdown's GPU rows: `attach_work_chunked` (roofline.attach_work a bounded chunk of rows at a time),
`compact` (their text columns as sorted Enums) and `group_ids` (one int id per combination of column values).
Does not: classify, attribute or sum anything (classify.classify_gpu, steps.find_steps, breakdown).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from servescope.analysis.roofline import WORK_COLUMNS, CaptureWork, attach_work, link_tables
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
            other.append(_rows(column, is_other, len(is_gpu) - n_gpu, whole=False))
        del column
    return pl.DataFrame(gpu), pl.DataFrame(other)


def _rows(column: pl.Series, mask: pl.Series, n: int, whole: bool = True) -> pl.Series:
    """`column.filter(mask)` (`n` rows), without copying a whole column or a column of nulls; in one piece when
    `whole` (the GPU rows). The loader's columns come in pieces (a 2 M-kernel trace: 136), and a query over a column
    in pieces copies it into one first, every time (group-bys, NumPy views): 2 M kernels, +110-150 MB at each of
    the breakdown's. The other rows are filtered and looked up, not grouped: kept in pieces (one piece cost the
    68 MB trace ~10 MB of peak: each column's copy lives beside its pieces a moment).
    """
    if n == len(column):
        return column.rechunk() if whole else column
    if column.null_count() == len(column):
        return pl.repeat(None, n, dtype=column.dtype, eager=True).alias(column.name)
    return column.filter(mask).rechunk() if whole else column.filter(mask)


WORK_CHUNK_ROWS = 1 << 19  # GPU rows attach_work takes at once (its joins copy what they are given a few times)
_COPIES = ("memcpy", "memset")
_WORK_READ = ("kind", "dur_us", "correlation", "external_id", "gpu_bytes", "step")  # what attach_work reads


def attach_work_chunked(others: pl.DataFrame, gpu: pl.DataFrame, lengths: pl.DataFrame | None = None,
                        capture: CaptureWork | None = None) -> tuple[pl.DataFrame, list[str]]:
    """`attach_work(others, gpu)`'s WORK_COLUMNS (and warnings) for the rows of `gpu`, in their order, computed only
    for the rows that can have work and in chunks of about WORK_CHUNK_ROWS of those when there are more.
    A row can have work when its launching op id (`LinkTables.op_ids`) is a cpu_op's, or it is a copy (memcpy,
    memset: its own bytes); every other row is "no_op" with no work, as attach_work finds it, with no join. An op's
    work is shared over the kernels of that id, so a chunk holds every row of the ops it holds (an id is a row of
    the subset for all its rows or none); rows with no op share nothing and are dealt out by position (`lengths`
    size a row by its own step). The warning (malformed Input Dims) is attach_work's own, on the malformed rows of
    all chunks together. With `capture` shapes there is one call on every row (a replayed kernel has no op)."""
    if capture is not None and capture.kernels:
        done, warnings = attach_work(others, gpu, lengths, capture)
        return done.select(*WORK_COLUMNS), warnings
    links = link_tables(others, gpu)
    op, links = links.op_ids, replace(links, op_ids=links.op_ids.clear())  # the ids held here only, to drop them
    can = (op.is_in(links.ops["_op_id"].implode()).fill_null(False) | gpu["kind"].is_in(_COPIES)).rename("can")
    rows = can.arg_true()  # positions of the rows that can have work
    n_chunks = -(-rows.len() // WORK_CHUNK_ROWS)
    if rows.len() == gpu.height and n_chunks == 1:
        done, warnings = attach_work(others, gpu, lengths, links=links)
        return done.select(*WORK_COLUMNS), warnings
    work = {c: pl.repeat("no_op" if c == "shape_status" else None, gpu.height, dtype=d, eager=True).alias(c)
            for c, d in WORK_COLUMNS.items()}  # a row that cannot have work: no_op, no work
    op = op.filter(can)
    chunk = pl.DataFrame([op]).select(pl.when(pl.col(op.name).is_not_null()).then(pl.col(op.name).hash() % n_chunks)
                                      .otherwise(pl.int_range(pl.len(), dtype=pl.UInt64) % n_chunks)).to_series()
    del can, op
    read = gpu.select(*(c for c in _WORK_READ if c in gpu.columns))
    warned = False
    for k in range(n_chunks):  # one chunk's rows copied at a time
        at = rows.filter(chunk == k) if n_chunks > 1 else rows
        done, warnings = attach_work(others, read[at], lengths, links=links)
        for c in WORK_COLUMNS:
            if c == "shape_status" or done[c].null_count() < done.height:
                work[c] = work[c].scatter(at, done[c])
        del done, at
        warned = warned or bool(warnings)
    out = pl.DataFrame(list(work.values()))
    if not warned:
        return out, []
    return out, attach_work(others, read.filter(out["shape_status"] == "malformed"), lengths, links=links)[1]


_TEXT_COLUMNS = ("name", "kernel_class", "collective", "shape_status", "work_model", "work_dtype")


def compact(gpu: pl.DataFrame) -> pl.DataFrame:
    """The GPU rows' text columns as Enums of their distinct values in sorted order: 1-4 bytes a row instead of a
    16-byte view (millions of kernels), and the same answers — an Enum sorts and ranks by its categories' order,
    here the text's, and compares equal to its text. Columns null throughout stay as they are (no page touched)."""
    text = [c for c in _TEXT_COLUMNS if c in gpu.columns and gpu.schema[c] == pl.Utf8
            and gpu[c].null_count() < gpu.height]
    # else text: the Enum would hold each value again, and its map (HyperLogLog count: no set of the values is built)
    many = gpu.select(pl.col(c).approx_n_unique() * _ROWS_PER_CATEGORY > gpu.height for c in text).row(0) if text else ()
    return gpu.with_columns(pl.col(c).cast(pl.Enum(sorted(gpu[c].drop_nulls().unique().to_list())))
                            for c, text_kept in zip(text, many, strict=True) if not text_kept)


# An Enum saves 12 bytes a row over a view and costs ~40 a category beyond its text (2 M distinct kernel names: +350 MB
# as an Enum; issue 30.2): worth it where each value repeats at least this often.
_ROWS_PER_CATEGORY = 4


def filled(column: pl.Series) -> pl.Series:
    """Nulls as "?" (as text: an Enum has no "?" category, and fill_null would leave its nulls)."""
    return column.cast(pl.Utf8).fill_null("?") if column.null_count() else column


def group_ids(parts: list[pl.Series]) -> tuple[np.ndarray, Callable[[int], list[Any]]]:
    """One int64 id per row for the combination of its values in `parts` (no nulls), ordered as the rows' value
    tuples sort (the order of a dense rank of their struct, so the interval arithmetic runs in the same order),
    and the function from an id back to its values. Codes per column and one product: no struct of millions of
    rows is sorted."""
    columns = [sorted(p.unique().to_list()) for p in parts]
    gid = np.zeros(len(parts[0]), dtype=np.int64)
    for part, uniq in zip(parts, columns, strict=True):
        gid *= len(uniq)
        gid += part.replace_strict(uniq, list(range(len(uniq))), return_dtype=pl.Int64).to_numpy()

    def values(g: int) -> list[Any]:
        out = []
        for uniq in reversed(columns):
            g, code = divmod(g, len(uniq))
            out.append(uniq[code])
        return out[::-1]

    return gid, values
