"""The traced GPU's datasheet peaks and measured per-op reference, and the trace analysis that uses them.

Does: resolve a trace's GPU in specs (`peaks_for`: datasheet FLOP/s and HBM bandwidth, with notes saying what is
omitted and why) and build its measured achievable reference (`_achievable`: aiconfigurator's measured GEMM curves,
perfmodel.opcurve, else the dense-GEMM curve measured on this GPU from traces, perfmodel.gemm_curve; never below
the datasheet roofline); hand both to the analysis as data (`analyze`: analysis.analyze_trace with the peaks
resolved, so its findings include kernel_headroom; `_split_pricer`: the split-K what-if of a sparse decode kernel,
perfmodel.split_k); the analysis reads no specs).
Does not: analyse the trace itself, calibrate, plan or format. The model side (specs, perfmodel: ~0.1 s of
imports) loads inside the functions, so that `servescope trace` pays it only for a GPU with measured curves.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from servescope.analysis.analyze import TraceAnalysis, analyze_trace
from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.launch import SplitPricer, SplitWhatIf
from servescope.analysis.rank_workers import RankPool
from servescope.analysis.roofline import Achievable, Peaks, WorkGroup, curve_reference

if TYPE_CHECKING:
    from servescope.specs.hardware import GpuSpec


@lru_cache(maxsize=64)
def peaks_for(device_name: str | None, num_sms: int | None) -> tuple[Peaks | None, tuple[str, ...]]:
    """The datasheet peaks of the trace's GPU (`specs.hardware.load_gpu`) and its measured achievable reference,
    with notes: an unknown GPU gives no peaks (% of peak omitted, never invented); the reference is the dense-GEMM
    curve measured on this GPU (`perfmodel.gemm_curve`, data specs/data/gemm_efficiency.toml), else none, and the
    note says "no measured curve". Where measured per-op curves of other ops land (perfmodel.opcurve), they join here:
    `_achievable` is the one place that maps a work group to a measured reference."""
    from servescope.errors import UnknownName
    from servescope.specs.hardware import load_gpu

    if not device_name:
        return None, ("the trace names no GPU (deviceProperties): % of peak omitted",)
    try:
        g = load_gpu(device_name)
    except UnknownName:
        return None, (f"GPU {device_name!r} is not in servescope's specs: % of peak omitted",)
    notes = [f"peaks: {g.name} datasheet ({', '.join(f'{d} {v / 1e12:,.0f} TFLOP/s' for d, v in g.flops_per_s.items() if v)}, "
             f"HBM {g.hbm_bw_bytes_per_s / 1e12:.2f} TB/s; specs/data/gpus/{g.name}.toml)"]
    achievable, source, note = _achievable(g)
    notes.append(note)
    return Peaks(g.name, dict(g.flops_per_s), g.hbm_bw_bytes_per_s, num_sms or g.sm_count,
                 f"specs/data/gpus/{g.name}.toml", achievable, source, _split_pricer(g)), tuple(notes)


def _split_pricer(g: GpuSpec) -> SplitPricer:
    """Split-K what-ifs of the engines' sparse decode kernels on this GPU (specs.decode_kernels' loop shapes,
    perfmodel.split_k's model at the datasheet bandwidth; heads per CTA: the kernel's head tile, the trace does not
    say how many heads a rank holds). None for a kernel the table does not know. The model side loads on the first
    sparse decode kernel priced."""

    def price(name: str, ctas: int, sms: int, call_s: float) -> SplitWhatIf | None:
        from servescope.perfmodel.split_k import sparse_decode_model
        from servescope.specs.decode_kernels import shape_for

        shape = shape_for(name)
        if shape is None or ctas < 1 or call_s <= 0:
            return None
        best = sparse_decode_model(shape, ctas, sms, call_s, shape.head_block, g.hbm_bw_bytes_per_s).best()
        return SplitWhatIf(shape.label, best.splits, best.time_s, best.call_s, best.reduce_s, best.tried, shape.source)

    return price


def _achievable(g: GpuSpec) -> tuple[Achievable | None, str | None, str]:
    """The measured reference of one GPU (an `analysis.roofline.Achievable`), its source and a note: a dense GEMM
    work group at aiconfigurator's measured GEMM curve of its dtype and shape on this GPU (perfmodel.opcurve: time per
    call × the group's FLOPs / 2·m·n·k, never below the datasheet roofline), else at the dense-GEMM curve measured on
    this very GPU from traces (a curve transferred from another GPU of the family is not a measurement of this one);
    other ops: none."""
    from servescope.perfmodel import opcurve
    from servescope.specs import tables

    engines = tables.engines_in_order()  # specs.engines.ENGINES, without parsing the engines' files

    trace_curve = _trace_gemm_reference(g, tables.gemm_efficiency().get(g.name))
    has_ops = g.name in tables.opcurve_systems()
    if trace_curve is None and not has_ops:
        return None, None, (f"% of achievable: no measured GEMM curve for {g.name} (specs/data/opcurves, "
                            "specs/data/gemm_efficiency.toml)")
    peaks = Peaks("", dict(g.flops_per_s), g.hbm_bw_bytes_per_s, None, "")

    def achievable(w: WorkGroup) -> float | None:
        if has_ops and w.model == "gemm" and w.m and w.n and w.k and w.dtype:
            for engine in engines:  # the trace does not say which engine's kernels ran (the default first)
                t = opcurve.gemm_time_s(g.name, engine, "", w.dtype, [w.m], int(w.n), int(w.k))
                if t is not None:
                    per_call = float(t[0]) * w.flops / (2.0 * w.m * w.n * w.k)
                    floor = peaks.roofline_s(w)
                    return max(per_call, floor or 0.0)
        return trace_curve(w) if trace_curve is not None else None

    parts = ([f"aiconfigurator-core's measured GEMM curves on {g.name} (specs/data/opcurves)"] if has_ops else []) + (
        [f"the dense-GEMM curve measured on {g.name} from traces (specs/data/gemm_efficiency.toml)"]
        if trace_curve is not None else [])
    source = ", else ".join(parts)
    return achievable, source, f"% of achievable: dense GEMMs against {source}; other ops: no measured curve"


def _trace_gemm_reference(g: GpuSpec, section: object) -> Achievable | None:
    """The dense-GEMM curve measured on this GPU from traces, as an Achievable (None: none measured on it)."""
    if not (isinstance(section, dict) and {"mem_ratio", "comp_ratio"} <= set(section)):
        return None
    import numpy as np

    from servescope.perfmodel.gemm_curve import (
        curve_for,  # the model's import (~0.1 s) only when measured
    )

    found = curve_for(g)
    if found is None or found.measured_on != g.name:
        return None
    curve = found

    def ratio(m: float) -> float:
        return float(curve.ratio(np.asarray(m)))

    return curve_reference(ratio, g.flops_per_s, g.hbm_bw_bytes_per_s)


def rank_peaks(b: TraceBreakdown) -> tuple[Peaks | None, tuple[str, ...]]:
    """`peaks_for` of one rank: the resolver `analyze_trace(peaks=…)` takes."""
    return peaks_for(b.device_name, b.num_sms)


def analyze(path: str | Path, kind: str | None = None, top_n: int = 10, workers: int | RankPool | None = None,
            ray_address: str | None = None, capture: str | Path | None = None) -> TraceAnalysis:
    """`analyze_trace` with the GPUs' peaks and measured references resolved (so the findings include
    kernel_headroom): the trace analysis every command shows."""
    return analyze_trace(path, kind=kind, top_n=top_n, workers=workers, ray_address=ray_address, peaks=rank_peaks,
                         capture=capture)
