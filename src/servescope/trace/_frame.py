"""Turn decoded events into the Events table of docs/architecture.md §1 (Polars, one row per event).

What it does: `chunk_frame` turns one chunk of the complete (`ph: X`), non-python_function events
`_read` kept into raw columns — `cat` mapped to `kind` (current, 2021 and ROCm spellings), each column
built from a Python list and cast by Polars (`strict=False`: a string pid becomes text, a non-numeric
ts becomes null, an integer beyond int64 becomes null — each counted into a warning).
`finish_events` concatenates the chunks and derives the rest: GPU-side rows get `device`/`stream` from
args, else from a numeric pid/tid (also the trailing number of SGLang merged pids like
"[TP00-DP01] 3"), blocks_per_sm, µs, sort.
What it does not do: classify kernels or find steps; it never reads the file (see `_read.py`).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import polars as pl

from servescope.trace._schema import Args, Event
from servescope.trace._shapes import SHAPED_OPS, first_tensor, is_custom_all_reduce, raw_text
from servescope.trace.types import GPU_EVENT_KINDS, TimeUnit

# cat (as written by Kineto, old and new) → kind. Anything else is "other".
KIND_BY_CAT = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "xpu_runtime": "runtime",  # Intel GPUs
    "privateuse1_runtime": "runtime",  # out-of-tree backends
    "mtia_runtime": "runtime",
    "xpu_driver": "driver",
    "privateuse1_driver": "driver",
    "cuda_driver": "driver",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "cuda_sync": "sync",
}
# Rows on a GPU timeline (device and stream from their args): GPU work, GPU-side annotations and syncs.
GPU_ROW_KINDS = (*GPU_EVENT_KINDS, "gpu_user_annotation", "sync")
# Until the sort, `kind` is a code into KINDS and `name` a code into the names seen so far (`_read` keeps them): one
# or four bytes a row where text costs 16 or more (a Polars string view, and the bytes again per row), so a trace of
# millions of tiny events holds ~its final table while it loads. The sorted columns are gathered from the distinct
# values, so every row's view points at one copy of its text.
KINDS = tuple(sorted({*KIND_BY_CAT.values(), "other"}))
_KIND_CODE = {cat: KINDS.index(kind) for cat, kind in KIND_BY_CAT.items()}
_OTHER_CODE = KINDS.index("other")
_GPU_ROW_CODES = [KINDS.index(kind) for kind in GPU_ROW_KINDS]
NAME_TEXT = "_name_text"  # column of the frame of distinct names (`names_frame`), in code order
# Characters of an event name kept (the longest real kernel or op name seen is ~5,000): a longer one is cut here,
# with a warning, so that per-name work later (classification, labels, reports) is bounded by this, not by the file.
MAX_NAME_CHARS = 65_536
CUT_MARK = "…"
NAMES_CUT = "_names_cut"  # key in the `lost` counter: rows whose name was cut (a warning of its own)
TEXT_MIN_ROWS = 1024  # a chunk this long whose names are mostly distinct keeps them as text (`_name_codes`)
# ts above this cannot be epoch µs (it would be past the year 5000): the file is in ns.
NS_TS_THRESHOLD = 1e17

SCHEMA = pl.Schema(
    {
        "kind": pl.Utf8(),
        "name": pl.Utf8(),
        "ts_us": pl.Float64(),
        "dur_us": pl.Float64(),
        "pid": pl.Utf8(),
        "tid": pl.Utf8(),
        "device": pl.Int64(),
        "stream": pl.Int64(),
        "correlation": pl.Int64(),
        "external_id": pl.Int64(),
        "grid_blocks": pl.Int64(),
        "block_threads": pl.Int64(),
        "blocks_per_sm": pl.Float64(),
        # Collective args (record_param_comms ops, NCCL kernels); null on every other row.
        "comm_name": pl.Utf8(),  # args["Collective name"] as written (allreduce, _allgather_base, ...)
        "comm_in_nelems": pl.Int64(),  # args["In msg nelems"]: elements in the input buffer
        "comm_out_nelems": pl.Int64(),  # args["Out msg nelems"]: elements in the output buffer
        "comm_group_size": pl.Int64(),  # args["Group size"]: ranks in the process group
        "comm_dtype": pl.Utf8(),  # args.dtype as written (Float, BFloat16, ...)
        "comm_pg": pl.Utf8(),  # args["Process Group Name"]
        # record_shapes args of the ops the cost models size (_shapes.SHAPED_OPS), as JSON text; null elsewhere.
        "op_input_dims": pl.Utf8(),  # args["Input Dims"]
        "op_input_types": pl.Utf8(),  # args["Input type"]
        "gpu_bytes": pl.Int64(),  # args.bytes on memcpy/memset rows
    }
)
# The sparse columns: filled from a few side rows (`_comm_rows`), null on every other row.
COMM_COLUMNS = ("comm_name", "comm_in_nelems", "comm_out_nelems", "comm_group_size", "comm_dtype", "comm_pg",
                "op_input_dims", "op_input_types", "gpu_bytes")
COMM_ROW = "_comm_row"  # row of a collective-arg frame in the concatenated chunk frames
_NO_ARGS = Args()


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def chunk_frame(
    events: list[Event], lost: Counter[str], name_codes: dict[str, int]
) -> tuple[pl.DataFrame, dict[str, list[Any]] | None]:
    """Raw columns of one chunk of kept events (complete, non-python_function); values that do not
    cast are counted into `lost` by column. `kind` and `name` are codes (KINDS; `name_codes`, which grows with
    names not seen before). `finish_events` derives the final table. Second: the few rows with collective args as
    lists (`_comm_rows`; `comm_frame` makes them a frame), or None."""
    args = [e.args or _NO_ARGS for e in events]
    names = [e.name for e in events]
    cats = pl.Series([e.cat for e in events], dtype=pl.Utf8, strict=False)
    frame = pl.DataFrame(
        {
            "kind": cats.replace_strict(_KIND_CODE, default=_OTHER_CODE, return_dtype=pl.UInt8),
            "name": _name_codes(names, name_codes, lost),
            "ts_us": _series([e.ts for e in events], pl.Float64, "ts", lost),
            "dur_us": _series([e.dur for e in events], pl.Float64, "dur", lost),
            **_id_columns("pid", [e.pid for e in events]),
            **_id_columns("tid", [e.tid for e in events]),
            # ROCm runtime rows carry stream "0x0": only GPU rows use these, so no warning here.
            "arg_device": pl.Series([a.device for a in args], dtype=pl.Int64, strict=False),
            "arg_stream": pl.Series([a.stream for a in args], dtype=pl.Int64, strict=False),
            "correlation": _series(
                [a.correlation for a in args], pl.Int64, "args.correlation", lost
            ),
            "external_id": _series(_external_ids(args), pl.Int64, "args.External id", lost),
            "grid_blocks": pl.Series(
                _products([a.grid for a in args]), dtype=pl.Int64, strict=False
            ),
            "block_threads": pl.Series(
                _products([a.block for a in args]), dtype=pl.Int64, strict=False
            ),
            "arg_bps": _series(
                [a.blocks_per_sm for a in args], pl.Float64, "args.blocks per SM", lost
            ),
        }
    )
    return frame, _comm_rows(args, names, lost)


def _name_codes(names: list[Any], codes: dict[str, int], lost: Counter[str]) -> pl.Series:
    """Each name's code in `codes` (null for a null name), adding names not seen before; a name longer than
    MAX_NAME_CHARS is cut there (counted into `lost` under NAMES_CUT). A chunk holding a name that is not text (1,
    2.5: damage) converts it as Polars casts it to text first: 1 and 1.0 are one key in a dict, and "1" and "1.0"
    two names. A chunk of at least TEXT_MIN_ROWS rows where most names are distinct (Inductor kernels named
    `triton_poi_fused_add_<i>`, every one its own) comes as that text instead, and adds nothing to `codes`: a
    Python string, an int and a slot in `codes` per name held 2 M distinct names as ~300 MB (issue 30.2)."""
    distinct = set(names)
    long = [v for v in distinct if type(v) is str and len(v) > MAX_NAME_CHARS]
    if long:
        cut = {v: v[:MAX_NAME_CHARS] + CUT_MARK for v in long}
        lost[NAMES_CUT] += sum(1 for v in names if v in cut)
        names = [cut.get(v, v) if type(v) is str else v for v in names]
        distinct = set(names)
    if len(names) >= TEXT_MIN_ROWS and len(distinct) * 2 > len(names):  # names rarely repeat: a code saves nothing
        return pl.Series(names, dtype=pl.Utf8, strict=False)
    if all(type(v) is str for v in distinct if v is not None):
        for name in distinct:
            if name is not None:
                codes.setdefault(name, len(codes))
        return pl.Series(list(map(codes.get, names)), dtype=pl.UInt32)
    text = pl.Series(names, dtype=pl.Utf8, strict=False)
    values = text.drop_nulls().unique().to_list()
    for name in values:
        codes.setdefault(name, len(codes))
    return text.replace_strict(values, [codes[v] for v in values], default=None, return_dtype=pl.UInt32)


def names_frame(codes: dict[str, int]) -> pl.DataFrame:
    """The distinct names of `chunk_frame`'s codes, in code order, as the one-column frame `finish_events` reads."""
    return pl.DataFrame({NAME_TEXT: pl.Series(list(codes), dtype=pl.Utf8)})


def _comm_rows(args: list[Args], names: list[Any], lost: Counter[str]) -> dict[str, list[Any]] | None:
    """The rows of a chunk with collective args (one pass finds them; usually none or a handful) as
    plain lists (`COMM_ROW` = row in this chunk, then COMM_COLUMNS, values as read), or None; `_read`
    gathers them over all chunks into one small frame (`comm_frame`): never full-length columns, and
    no Polars frame per chunk (~27 KB each, measured). Custom all-reduce ops
    (`_shapes.is_custom_all_reduce`, tested once per distinct name) without collective args get `In
    msg nelems` and `dtype` from their first tensor input (`_shapes.first_tensor`). The ops of
    `_shapes.SHAPED_OPS` that carry `Input Dims` keep it and `Input type` as JSON text (their comm
    columns stay null unless they are collective rows too); memcpy/memset rows keep `args.bytes`."""
    rows = [i for i, a in enumerate(args) if a.coll_name is not None or a.group_size is not None]
    distinct = set(names)
    custom = {n for n in distinct if is_custom_all_reduce(n)}  # plain Python: ~1 ms less per chunk than Polars
    sized = [i for i, n in enumerate(names) if n in custom] if custom else []  # rows to size from shapes
    comm_set = set(rows).union(sized)
    shaped_names = distinct & SHAPED_OPS
    shaped = {i for i, n in enumerate(names) if n in shaped_names and args[i].input_dims} if shaped_names else set()
    moved = {i for i, a in enumerate(args) if a.nbytes is not None}
    every = comm_set | shaped | moved
    if not every:
        return None
    rows = sorted(every)
    few = [args[i] for i in rows]
    in_comm = [i in comm_set for i in rows]
    in_nelems = [a.in_nelems if c else None for a, c in zip(few, in_comm, strict=True)]
    dtypes = [a.dtype if c else None for a, c in zip(few, in_comm, strict=True)]
    sized_set = set(sized)
    for k, a in enumerate(few):
        if rows[k] in sized_set and a.in_nelems is None and a.coll_name is None:
            in_nelems[k], dtypes[k] = first_tensor(a.input_dims, a.input_type, lost)
    keep = [i in shaped for i in rows]
    return {
        COMM_ROW: rows,
        "comm_name": [a.coll_name if c else None for a, c in zip(few, in_comm, strict=True)],
        "comm_in_nelems": in_nelems,
        "comm_out_nelems": [a.out_nelems if c else None for a, c in zip(few, in_comm, strict=True)],
        "comm_group_size": [a.group_size if c else None for a, c in zip(few, in_comm, strict=True)],
        "comm_dtype": dtypes,
        "comm_pg": [a.pg_name if c else None for a, c in zip(few, in_comm, strict=True)],
        "op_input_dims": [raw_text(a.input_dims) if k else None for a, k in zip(few, keep, strict=True)],
        "op_input_types": [raw_text(a.input_type) if k else None for a, k in zip(few, keep, strict=True)],
        "gpu_bytes": [a.nbytes for a in few],
    }


def comm_frame(rows: dict[str, list[Any]], lost: Counter[str]) -> pl.DataFrame:
    """The collective-arg rows of all chunks (`_comm_rows` lists, COMM_ROW counted over all chunk
    frames) as one typed frame; values that do not cast are counted into `lost`."""
    return pl.DataFrame({
        COMM_ROW: pl.Series(rows[COMM_ROW], dtype=pl.Int64),
        "comm_name": pl.Series(rows["comm_name"], dtype=pl.Utf8, strict=False),
        "comm_in_nelems": _series(rows["comm_in_nelems"], pl.Int64, "args.In msg nelems", lost),
        "comm_out_nelems": _series(rows["comm_out_nelems"], pl.Int64, "args.Out msg nelems", lost),
        "comm_group_size": _series(rows["comm_group_size"], pl.Int64, "args.Group size", lost),
        "comm_dtype": pl.Series(rows["comm_dtype"], dtype=pl.Utf8, strict=False),
        "comm_pg": pl.Series(rows["comm_pg"], dtype=pl.Utf8, strict=False),
        "op_input_dims": pl.Series(rows["op_input_dims"], dtype=pl.Utf8),
        "op_input_types": pl.Series(rows["op_input_types"], dtype=pl.Utf8),
        "gpu_bytes": _series(rows["gpu_bytes"], pl.Int64, "args.bytes", lost),
    })


def finish_events(
    parts: list[pl.DataFrame], num_sms: dict[int, int], lost: Counter[str], warnings: list[str]
) -> tuple[pl.DataFrame, TimeUnit]:
    """The events table, sorted by ts_us, from the chunk frames; `num_sms` (device → SM count)
    fills blocks_per_sm. `parts` may hold collective-arg frames (those with a `COMM_ROW` column, its
    row counted over all chunk frames before it, see `_read`), applied to those rows, and holds the frame of
    distinct names (`names_frame`) the chunks' name codes point into. `parts` is emptied: each chunk is freed
    as soon as the table no longer needs it. Also returns the unit the file's timestamps were written in (the
    table is in µs either way)."""
    comm_parts = [p for p in parts if COMM_ROW in p.columns]
    names = next((p[NAME_TEXT] for p in parts if NAME_TEXT in p.columns), pl.Series(NAME_TEXT, [], pl.Utf8))
    chunks = [p for p in parts if COMM_ROW not in p.columns and NAME_TEXT not in p.columns]
    parts.clear()
    n_cut = lost.pop(NAMES_CUT, 0)
    for what, n_lost in lost.items():
        warnings.append(
            f"{n_lost:,} values of {what} could not be read as numbers and were set to null"
        )
    if n_cut:
        warnings.append(f"{n_cut:,} event name(s) longer than {MAX_NAME_CHARS:,} characters cut there (marked "
                        f"{CUT_MARK!r}); no real kernel or op name is that long")
    if not chunks:  # load_trace raises EmptyTrace first; kept for direct callers
        return empty_events(), "us"
    empty = pl.DataFrame(schema={COMM_ROW: pl.Int64, **{c: SCHEMA[c] for c in COMM_COLUMNS}})
    comm = pl.concat([empty, *comm_parts]) if comm_parts else empty
    return _finish(chunks, comm, names, num_sms, warnings)


def _finish(
    chunks: list[pl.DataFrame], comm: pl.DataFrame, names: pl.Series, num_sms: dict[int, int], warnings: list[str]
) -> tuple[pl.DataFrame, TimeUnit]:
    """Derived columns (device, stream, blocks_per_sm), units, clean-up and sort; `kind` and `name` from their
    codes last. `chunks` is emptied (no frame outside this function holds the raw columns)."""
    if any(c.schema["name"] == pl.Utf8 for c in chunks):  # some chunks hold their names as text: all do
        chunks[:] = [c if c.schema["name"] == pl.Utf8 else c.with_columns(names.gather(c["name"]).alias("name"))
                     for c in chunks]
    frame = pl.concat(chunks, how="vertical", rechunk=False)
    chunks.clear()
    n_no_ts = frame["ts_us"].null_count()
    if n_no_ts:
        warnings.append(f"{n_no_ts:,} events without a readable timestamp were dropped")
        has_ts = frame["ts_us"].is_not_null()
        new_row = has_ts.cast(pl.Int64).cum_sum() - 1
        comm = comm.filter(has_ts.gather(comm[COMM_ROW]))
        comm = comm.with_columns(new_row.gather(comm[COMM_ROW]).alias(COMM_ROW))
        frame = frame.filter(pl.col("ts_us").is_not_null())
    frame, unit = _ns_to_us(frame, warnings)
    n_neg = int((frame["dur_us"] < 0).sum())
    if n_neg:
        warnings.append(f"{n_neg:,} events with a negative duration set to 0")
    gpu = pl.col("kind").is_in(_GPU_ROW_CODES)
    device = pl.when(gpu).then(pl.coalesce("arg_device", "pid_num"))
    # A device missing from deviceProperties (ROCm traces list device 0 but run on device 9) gets
    # the node's SM count when every listed device has the same one.
    same = next(iter(num_sms.values())) if len(set(num_sms.values())) == 1 else None
    sms = device.replace_strict(num_sms, default=same, return_dtype=pl.Float64) if num_sms else None
    derived_bps = pl.col("grid_blocks") / sms if sms is not None else pl.lit(None, pl.Float64)
    frame = frame.with_columns(
        dur_us=pl.col("dur_us").fill_null(0.0).clip(lower_bound=0.0),
        device=device,
        stream=pl.when(gpu).then(pl.coalesce("arg_stream", "tid_num")),
        blocks_per_sm=pl.coalesce("arg_bps", derived_bps),
    )
    dense = [c for c in SCHEMA if c not in COMM_COLUMNS]
    frame = frame.select(dense).cast({c: SCHEMA[c] for c in dense if c not in ("kind", "name")})
    ts = frame["ts_us"].to_numpy()
    in_order = bool(np.all(ts[1:] >= ts[:-1]))  # a stable sort of sorted rows changes nothing: skip its copies
    del ts
    order = None if in_order else frame.select(pl.arg_sort_by("ts_us", maintain_order=True)).to_series()
    columns = frame.get_columns()
    del frame
    out = _gathered(columns, order)
    kind, name = dense.index("kind"), dense.index("name")
    out[kind] = pl.Series(KINDS, dtype=pl.Utf8).gather(out[kind]).alias("kind")
    if out[name].dtype != pl.Utf8:
        out[name] = names.gather(out[name]).alias("name")
    return _with_comm(pl.DataFrame(out), comm, order), unit


def _gathered(columns: list[pl.Series], order: pl.Series | None) -> list[pl.Series]:
    """`columns` in `order` (None: as they are), one column at a time, each source freed once gathered: the table
    exists about once, not twice as in a whole-frame gather. `columns` is emptied."""
    out = []
    while columns:
        column = columns.pop(0)
        out.append(column if order is None else column.gather(order))
        del column
    return out


def _with_comm(frame: pl.DataFrame, comm: pl.DataFrame, order: pl.Series | None) -> pl.DataFrame:
    """`frame` (sorted by `order`; None: in its rows' order) with the COMM_COLUMNS: null, except the rows of
    `comm`. The full-length columns are made here, after the sort, so the sort never copies them."""
    columns = [pl.repeat(None, frame.height, dtype=SCHEMA[c], eager=True).alias(c) for c in COMM_COLUMNS]
    if comm.height:
        # The inverse permutation: old row → sorted row.
        rows = comm[COMM_ROW] if order is None else order.arg_sort().gather(comm[COMM_ROW])
        for column in columns:
            column.scatter(rows, comm[column.name].cast(SCHEMA[column.name]))
    return frame.with_columns(columns).select(list(SCHEMA))


def _ns_to_us(frame: pl.DataFrame, warnings: list[str]) -> tuple[pl.DataFrame, TimeUnit]:
    """Convert a trace written in ns. Kineto writes µs (displayTimeUnit "ns" only changes the
    display: HTA's ns_resolution_trace has µs ts with 3 decimals), so this triggers only on values
    that cannot be µs since the epoch."""
    ts_min = frame["ts_us"].min()
    if not isinstance(ts_min, int | float) or ts_min < NS_TS_THRESHOLD:
        return frame, "us"
    warnings.append("timestamps are in ns (values beyond epoch µs); converted to µs")
    return frame.with_columns(pl.col("ts_us") / 1e3, pl.col("dur_us") / 1e3), "ns"


def _series(
    values: list[Any], dtype: pl.DataType | type[pl.DataType], what: str, lost: Counter[str]
) -> pl.Series:
    """A typed Series from loose values; values that do not cast become null and are counted."""
    series = pl.Series(values, dtype=dtype, strict=False)
    n_lost = series.null_count() - values.count(None)
    if n_lost:
        lost[what] += n_lost
    return series


def _id_columns(name: str, values: list[Any]) -> dict[str, pl.Series]:
    """pid/tid as text plus its number: all-int columns (the usual case) take the fast path; string
    ids give the trailing number ("[TP00-DP01] 3" → 3, "1.0" → 1, "Spans" → null)."""
    try:
        number = pl.Series(values, dtype=pl.Int64)
        return {name: number.cast(pl.Utf8), f"{name}_num": number}
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        text = pl.Series(values, dtype=pl.Utf8, strict=False)
        number = text.str.extract(r"(-?\d+)(?:\.0*)?\s*$").cast(pl.Int64, strict=False)
        return {name: text, f"{name}_num": number}


def _external_ids(args: list[Args]) -> list[Any]:
    return [a.external_id if a.external_id is not None else a.external_id_old for a in args]


def _products(dims: list[Any]) -> list[int | None]:
    """Π of each grid/block list (msgspec guarantees ints inside); None when absent or a scalar."""
    return [math.prod(d) if type(d) is list else None for d in dims]
