"""Shapes for CUDA/HIP-graph replays from a capture trace (issue 19 part 1: `servescope trace --capture FILE`).

A replay runs the kernels that were captured, but its trace holds one graph launch and no launching op per kernel,
so no shapes. A capture trace (vLLM `--profiler-config.capture_torch_profiler`, SGLang
`--enable-profile-cuda-graph`; docs/capture.md) records the ops with their `Input Dims` and the launch calls made
under stream capture; each launch names its kernel (`args.kernel`) and nothing runs on the GPU.
Does: `capture_work(path)` — sizes the capture's ops (analysis.op_costs through `roofline.attach_work`), splits each
op's work over the kernels it launched, and keeps per kernel name the mean work per call (model, dtype and M, N, K
when every call agrees); executed kernels in the file (eager warm-ups) count too. `check_capture(work, replay,
ranks)` refuses a capture of another GPU or model than the replay, naming both.
Does not: match kernels one by one in replay order (a kernel name that ran with several shapes gets their mean per
call: the per-name totals of a replay of that graph are exact, one call's shape is not), or pick among several batch
sizes in one capture file (give the capture of the replayed batch size).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.roofline import CaptureKernel, CaptureWork, attach_work
from servescope.errors import CaptureMismatch
from servescope.trace.capture import launch_kernel_names, model_hint
from servescope.trace.load import load_trace

LAUNCHES = ("runtime", "driver")


def _captured_rows(events: pl.DataFrame, names: dict[int, str]) -> pl.DataFrame:
    """The capture's GPU rows: kernels that ran, plus one row per named launch that ran nothing (under capture),
    timed 1 µs (an op's work splits evenly over its captured kernels)."""
    ran = events.filter(pl.col("kind") == "kernel")
    named = pl.DataFrame({"correlation": list(names), "_kernel": list(names.values())},
                         schema={"correlation": pl.Int64, "_kernel": pl.Utf8})
    launched = (events.filter(pl.col("kind").is_in(LAUNCHES) & ~pl.col("correlation").is_in(ran["correlation"].implode()))
                .join(named, on="correlation", how="inner")
                .with_columns(pl.lit("kernel").alias("kind"), pl.col("_kernel").alias("name"), pl.lit(1.0).alias("dur_us"))
                .drop("_kernel"))
    return pl.concat([ran, launched], how="vertical_relaxed")


def _one(col: str) -> pl.Expr:
    """The column's value when all rows agree, else null."""
    return pl.when(pl.col(col).n_unique() == 1).then(pl.col(col).first()).alias(col)


def capture_work(path: Path) -> CaptureWork:
    """Per kernel name of a capture trace, the mean work per call (module docstring); CaptureMismatch when it gives
    no shaped kernel (record_shapes off, or launches that name no kernel)."""
    trace = load_trace(path)
    rows = _captured_rows(trace.events, launch_kernel_names(path))
    gpu, _ = attach_work(trace.events, rows)
    shaped = gpu.filter((pl.col("shape_status") == "shaped") & (pl.col("kind") == "kernel"))
    if shaped.height == 0:
        raise CaptureMismatch(f"{path}: no kernel of this capture trace carries a shape (its launches name no kernel, "
                              "or it was recorded without record_shapes): nothing to give the replay")
    stats = (shaped.group_by("name")
             .agg(_one("work_model"), _one("work_dtype"), _one("work_m"), _one("work_n"), _one("work_k"),
                  pl.len().alias("calls"), pl.col("work_flops").mean().alias("f"), pl.col("work_bytes").mean().alias("b"))
             .sort("name"))
    kernels = tuple(CaptureKernel(r["name"], r["work_model"] or "mixed", r["work_dtype"], r["work_m"], r["work_n"],
                                  r["work_k"], int(r["calls"]), float(r["f"]), float(r["b"]))
                    for r in stats.iter_rows(named=True))
    gpus = {d.name for d in trace.devices.values() if d.name}
    return CaptureWork(str(path), next(iter(gpus)) if len(gpus) == 1 else None, model_hint(path), kernels)


def check_capture(work: CaptureWork, replay: Path, ranks: list[TraceBreakdown] | None = None) -> None:
    """Refuse a capture of another model (module stacks name different classes) or GPU (deviceProperties name
    different GPUs) than the replay trace; a side that names none is not compared."""
    if ranks is None:
        model = model_hint(replay)
        if work.model and model and work.model != model:
            raise CaptureMismatch(f"{work.file}: a capture of {work.model}, but the replay trace {replay} ran {model}: "
                                  "give the capture trace of the same deployment")
        return
    for b in ranks:
        if work.gpu and b.device_name and work.gpu != b.device_name:
            raise CaptureMismatch(f"{work.file}: captured on {work.gpu}, but the replay trace {b.file} ran on "
                                  f"{b.device_name}: give the capture trace of the same deployment")
