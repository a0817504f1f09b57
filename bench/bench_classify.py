"""Time `servescope.analysis.classify` on a real trace and on a million-row frame built from it.

Prints (bench scripts may print): seconds for classify_name over the unique GPU names of the trace
(cold cache), for classify() on the trace, and for classify() on the trace's events repeated to
>= 1,000,000 rows (ids offset per copy so linkage stays one-to-one), plus the share of summed kernel
time left `other`. Usage: python bench/bench_classify.py [trace.json.gz ...]
"""

from __future__ import annotations

import sys
import time

import polars as pl

from servescope.analysis.classify import classify, classify_name
from servescope.trace import load_trace

DEFAULT = "tests/data/traces/tracelens/b200/eager_trace.json.gz"


def _million(events: pl.DataFrame) -> pl.DataFrame:
    copies = -(-1_000_000 // events.height)
    step = int(max(events["correlation"].max() or 0, events["external_id"].max() or 0)) + 1  # type: ignore[arg-type]
    return pl.concat(
        events.with_columns(pl.col("correlation") + i * step, pl.col("external_id") + i * step)
        for i in range(copies)
    ).rechunk()


def main(paths: list[str]) -> None:
    for path in paths or [DEFAULT]:
        events = load_trace(path).events
        names = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))["name"].unique()
        classify_name.cache_clear()
        start = time.perf_counter()
        for name in names:
            classify_name(name)
        names_s = time.perf_counter() - start
        classify_name.cache_clear()
        start = time.perf_counter()
        out = classify(events)
        trace_s = time.perf_counter() - start
        kernels = out.filter(pl.col("kind") == "kernel")
        other = kernels.filter(pl.col("kernel_class") == "other")["dur_us"].sum() / kernels["dur_us"].sum()
        big = _million(events)
        start = time.perf_counter()
        classify(big)
        big_s = time.perf_counter() - start
        print(f"{path}: {names.len()} unique GPU names in {names_s * 1e3:.2f} ms; classify() "
              f"{events.height} rows {trace_s * 1e3:.1f} ms; {big.height} rows {big_s:.2f} s; "
              f"other = {other:.2%} of summed kernel time")


if __name__ == "__main__":
    main(sys.argv[1:])
