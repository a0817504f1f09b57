"""The plan in one call, and everything the HTML report shows in one call: trace → calibration → plan.

Does: glue `analysis` (trace → breakdown, one load through `analysis.analyze.analyze_trace`) to `calibrate`,
`planner.plan` and `planner.curves`, so that each CLI command stays one call; resolve each traced GPU's peaks and
measured per-op reference from specs and perfmodel (`peaks_for`, passed to the analysis as data: analysis reads no
specs) and hand the trace's per-kernel numbers to the planner (`kernel_evidence`). One rule for which rank calibrates
(`calibration_rank`: the first rank that has steps) and one for the trace's warnings (`calibration_from_analysis`:
carried into the calibration's, and so into the plan's text and JSON, prefixed "trace: "), shared by `advise`
(`servescope plan TRACE`) and `overview` (`servescope report TRACE`).
Does not: compute anything of its own, print, or format (servescope.report does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servescope.analysis.analyze import TraceAnalysis, analyze_trace
from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.engine_facts import engine_facts
from servescope.analysis.headroom import kernel_gaps
from servescope.analysis.rank_workers import RankPool
from servescope.analysis.roofline import Achievable, Peaks, WorkGroup, curve_reference
from servescope.errors import MeasurementError
from servescope.units import ms_to_s, s_to_ms, us_to_s

# The model side (calibrate, planner, perfmodel, validation: ~0.2 s of imports) loads where a function needs it, so
# that `servescope trace` — which analyses through `analyze` for the GPU's peaks — pays none of it.
if TYPE_CHECKING:
    from servescope.calibrate import Calibration
    from servescope.calibrate.figure_fit import FigureFit
    from servescope.calibrate.figures import Figure
    from servescope.perfmodel.scenario import Scenario
    from servescope.planner import Plan
    from servescope.planner.curves import Curve
    from servescope.planner.kernels import KernelEvidence
    from servescope.planner.verify import Measured, PlanPrediction, Verification
    from servescope.specs.hardware import GpuSpec


@dataclass(frozen=True)
class Advice:
    plan: Plan
    calibration: Calibration | None
    trace: str | None
    analysis: TraceAnalysis | None = None  # the trace analysis the calibration used
    fit: FigureFit | None = None  # the calibration on the user's figures (its notes: what was set aside)

    def __repr__(self) -> str:
        return f"Advice(trace={self.trace!r}, {self.plan!r})"


@dataclass(frozen=True)
class Overview:
    analysis: TraceAnalysis
    scenario: Scenario | None = None
    calibration: Calibration | None = None
    plan: Plan | None = None
    curves: tuple[Curve, ...] = ()
    fit: FigureFit | None = None  # the calibration on the user's figures


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
                 f"specs/data/gpus/{g.name}.toml", achievable, source), tuple(notes)


def _achievable(g: GpuSpec) -> tuple[Achievable | None, str | None, str]:
    """The measured reference of one GPU (an `analysis.roofline.Achievable`), its source and a note: a dense GEMM
    work group at aiconfigurator's measured GEMM curve of its dtype and shape on this GPU (perfmodel.opcurve: time per
    call × the group's FLOPs / 2·m·n·k, never below the datasheet roofline), else at the dense-GEMM curve measured on
    this very GPU from traces (a curve transferred from another GPU of the family is not a measurement of this one);
    other ops: none."""
    from servescope.perfmodel import opcurve
    from servescope.specs import tables
    from servescope.specs.engines import ENGINES

    trace_curve = _trace_gemm_reference(g, tables.gemm_efficiency().get(g.name))
    has_ops = g.name in tables.opcurve_systems()
    if trace_curve is None and not has_ops:
        return None, None, (f"% of achievable: no measured GEMM curve for {g.name} (specs/data/opcurves, "
                            "specs/data/gemm_efficiency.toml)")
    peaks = Peaks("", dict(g.flops_per_s), g.hbm_bw_bytes_per_s, None, "")

    def achievable(w: WorkGroup) -> float | None:
        if has_ops and w.model == "gemm" and w.m and w.n and w.k and w.dtype:
            for engine in ENGINES:  # the trace does not say which engine's kernels ran (the default first)
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


def kernel_evidence(analysis: TraceAnalysis) -> KernelEvidence:
    """The calibration rank's per-kernel numbers for the planner: every top kernel of each step kind, with the
    measured reference's µs for its work where one exists (analysis.headroom)."""
    from servescope.planner.kernels import KernelEvidence, KernelRow, KindTime

    b = calibration_rank(analysis)
    i = analysis.ranks.index(b)
    peaks, notes = analysis.peaks[i] if len(analysis.peaks) > i else rank_peaks(b)
    rows, kinds = [], []
    for s in b.kinds:
        gaps = {g.name: g for g in kernel_gaps(s, peaks)}
        for k in s.top_kernels:
            gap = gaps.get(k.name)
            rows.append(KernelRow(s.kind, k.name, k.kernel_class, gap.model if gap else None,
                                  gap.dtype if gap else None, gap.calls if gap else k.calls,
                                  gap.measured_us if gap else k.total_us, gap.achievable_us if gap else None,
                                  max(s.steps, 1), bool(gap and gap.tunable), k.blocks_per_sm))
        kinds.append(KindTime(s.kind, s.steps, s.gpu_span_us, dict(s.classes_us)))
    source = peaks.achievable_source if peaks is not None else None
    return KernelEvidence(b.device_name, source, tuple(rows), tuple(kinds), "" if source else "; ".join(notes))


def calibration_rank(analysis: TraceAnalysis) -> TraceBreakdown:
    """The rank a trace calibrates on: the first (by rank) that has steps, else the first that ran kernels."""
    return next((b for b in analysis.ranks if b.steps), analysis.ranks[0])


def calibration_from_analysis(analysis: TraceAnalysis, scenario: Scenario) -> Calibration:
    """Calibrate `scenario` on `calibration_rank(analysis)`; the analysis's warnings come first."""
    from servescope.calibrate import calibrate

    cal = calibrate(calibration_rank(analysis), scenario)
    return replace(cal, warnings=(*(f"trace: {w}" for w in analysis.warnings), *cal.warnings))


def calibration_from_trace(path: str | Path, scenario: Scenario) -> Calibration:
    """Calibrate `scenario` on a trace file or folder (analysed once; raises NoGpuEvents when nothing ran)."""
    return calibration_from_analysis(analyze_trace(path), scenario)


def figure_fit(scenario: Scenario, calibration: Calibration | None, figures: Sequence[Figure]) -> FigureFit | None:
    """The deployment calibrated on the user's figures, on top of a trace's calibration when there is one (the
    figures' knobs and levels are fitted on the trace-calibrated scenario); None without figures."""
    if not figures:
        return None
    from servescope.calibrate.figure_fit import fit_figures

    return fit_figures(calibration.apply(scenario) if calibration is not None else scenario, figures)


def advise(scenario: Scenario, trace: str | Path | None = None, figures: Sequence[Figure] = (),
           capture: str | Path | None = None, **plan_options: Any) -> Advice:
    """`plan(scenario, …)`, calibrated on `trace` when one is given and on the measured `figures` (typed or read
    from result files: calibrate.inputs) when given (uncalibrated, and saying so, otherwise), with the trace's
    per-kernel numbers for the kernel tracks (`capture`: shapes for its graph replays)."""
    from servescope.planner import plan

    analysis = analyze(trace, capture=capture) if trace is not None else None
    cal = calibration_from_analysis(analysis, scenario) if analysis is not None else None
    fit = figure_fit(scenario, cal, figures)
    kernels = kernel_evidence(analysis) if analysis is not None else None
    return Advice(plan(scenario, calibration=cal, measured=fit, kernels=kernels, **plan_options), cal,
                  str(trace) if trace is not None else None, analysis, fit)


def overview(path: str | Path, scenario: Scenario | None = None, kind: str | None = None, top_n: int = 10,
             workers: int | None = None, figures: Sequence[Figure] = (), capture: str | Path | None = None,
             **plan_options: Any) -> Overview:
    """Analyse the trace; with a scenario, calibrate it as `advise` does (the trace, then the measured `figures`)
    and plan (plan_options go to planner.plan: objective, concurrency, target, forbid, spec, tpot_limit_s), with
    each track's curve."""
    from servescope.planner import plan
    from servescope.planner.curves import plan_curves

    analysis = analyze(path, kind=kind, top_n=top_n, workers=workers, capture=capture)
    if scenario is None:
        return Overview(analysis)
    cal = calibration_from_analysis(analysis, scenario)
    fit = figure_fit(scenario, cal, figures)
    p = plan(scenario, calibration=cal, measured=fit, kernels=kernel_evidence(analysis), **plan_options)
    return Overview(analysis, scenario, cal, p, plan_curves(p), fit)


# --- verify: the plan's objective measured before and after a change (`servescope verify`) ----------------------

_TRACE_SUFFIXES = (".gz", ".sqlite", ".sqlite3", ".nsys-rep")
_PEEK_BYTES = 1 << 20


def _is_trace_file(path: Path) -> bool:
    """A trace (Kineto JSON, plain or gzipped; an Nsight SQLite export), not a benchmark result: by suffix, and for
    plain JSON by a Kineto key in the first MiB (`traceEvents`, `schemaVersion`)."""
    if path.name.lower().endswith(_TRACE_SUFFIXES):
        return True
    if path.suffix.lower() == ".jsonl":
        return False
    with path.open("rb") as fh:
        head = fh.read(_PEEK_BYTES)
    return b'"traceEvents"' in head or b'"schemaVersion"' in head


def _trace_measurement(path: Path, objective: str, concurrency: int) -> Measured:
    """The objective from a trace: the mean GPU span of the calibration rank's decode steps (all its steps when it
    has no decode step), read as TPOT (one token per sequence per step); throughput is the decode steps' summed
    batch over their summed span when every decode step records its batch, else concurrency / mean span."""
    from servescope.planner.verify import Measured

    analysis = analyze_trace(path)
    b = calibration_rank(analysis)
    decode = [s for s in b.steps if s.kind == "decode"]
    steps = decode or list(b.steps)
    if not steps:
        raise MeasurementError(f"{path}: no steps found in the trace to time")
    rank = f" of rank {b.rank}" if b.rank is not None else ""
    span_s = us_to_s(sum(s.gpu_span_us for s in steps) / len(steps))
    if decode:
        which = f"mean GPU span of {len(steps)} decode step(s){rank}"
    else:
        kinds = ", ".join(sorted({s.kind for s in steps}))
        which = f"mean GPU span of all {len(steps)} step(s){rank} (no decode steps; kinds: {kinds})"
    if objective == "tpot":
        value, detail = span_s, f"{which}, {s_to_ms(span_s):.3f} ms, read as TPOT (one token per sequence per step)"
    elif decode and all(s.batch_size for s in decode):
        value = sum(s.batch_size or 0 for s in decode) / us_to_s(sum(s.gpu_span_us for s in decode))
        detail = f"decode tokens / decode GPU span over {len(decode)} decode step(s){rank}"
    else:
        value = concurrency / span_s
        detail = f"concurrency {concurrency} / the {which} (the trace records no batch sizes)"
    return Measured(value, str(path), detail, "trace", None, tuple(f"trace: {w}" for w in analysis.warnings),
                    device=b.device_name, facts=engine_facts(analysis.ranks, b, analysis.path))


def _bench_measurement(path: Path, objective: str, concurrency: int) -> Measured:
    """The objective from a benchmark result file: the run at the plan's concurrency (its max concurrency), or the
    file's only run; mean TPOT or output tokens/s."""
    from servescope.planner.verify import Measured
    from servescope.validation.benchio import read_bench

    runs = read_bench(path)
    at = [r for r in runs if r.max_concurrency == concurrency]
    if len(at) > 1:
        raise MeasurementError(f"{path}: {len(at)} runs at concurrency {concurrency} "
                               f"({', '.join(r.label() for r in at)}); give a file with one")
    if not at and len(runs) > 1:
        loads = [f"c{r.max_concurrency}" if r.max_concurrency else f"rate {r.request_rate_per_s:g}/s" for r in runs]
        more = ", …" if len(loads) > 6 else ""
        raise MeasurementError(f"{path}: no run at the plan's concurrency {concurrency} (max_concurrency) among "
                               f"{len(runs)} runs ({', '.join(loads[:6])}{more}); give a file of one run")
    run = (at or runs)[0]
    key = "tpot_ms.mean" if objective == "tpot" else "output_tok_s"
    if key not in run.metrics:
        raise MeasurementError(f"{run.label()}: no {key.replace('.', ' ')} in the run (has: "
                               f"{', '.join(run.metrics) or 'nothing'})")
    value = ms_to_s(run.metrics[key]) if objective == "tpot" else run.metrics[key]
    what = "mean TPOT" if objective == "tpot" else "output throughput"
    return Measured(value, str(path), f"{what} of {run.label()}", "benchmark", run.max_concurrency)


def _figure_measurement(texts: Sequence[str], objective: str, concurrency: int, side: str) -> Measured:
    """The objective from typed figures: the `tpot` (or `output`) figure at the plan's concurrency, else the only
    one; several at one concurrency contradict or repeat each other and are refused, never averaged."""
    from servescope.calibrate.figures import parse_figures
    from servescope.planner.verify import Measured

    figures = parse_figures(texts)
    metric = "tpot" if objective == "tpot" else "output"
    mine = [f for f in figures if f.metric == metric]
    if not mine:
        raise MeasurementError(f"{side}: no {metric} figure among {', '.join(map(str, figures))}: the plan's "
                               f"objective is {objective} (e.g. --{side} '{metric}=12.1ms@c1')"
                               if metric == "tpot" else
                               f"{side}: no {metric} figure among {', '.join(map(str, figures))}: the plan's "
                               f"objective is {objective} (e.g. --{side} 'output=1536tok/s@c{concurrency}')")
    at = [f for f in mine if f.concurrency == concurrency]
    if len(at) > 1 or (not at and len(mine) > 1):
        many = at or mine
        raise MeasurementError(f"{side}: {len(many)} {metric} figures ({', '.join(map(str, many))}) where one is "
                               f"used (at the plan's concurrency {concurrency}); give one")
    fig = (at or mine)[0]
    unused = [str(f) for f in figures if f is not fig]
    warnings = (f"not used by verify: {', '.join(unused)}",) if unused else ()
    return Measured(fig.value_si, fig.text, f"typed figure {fig.text}", "figure", fig.concurrency, warnings)


def measure_objective(specs: Sequence[str], objective: str, concurrency: int, side: str = "before") -> Measured:
    """The plan's objective (TPOT in s, or output tokens/s) from what the user measured: one trace file or folder,
    one benchmark result file, or typed figures (`tpot=12.1ms@c1`, calibrate.figures). MeasurementError naming
    `side` for anything else."""
    if not specs:
        raise MeasurementError(f"--{side}: nothing measured given (a trace, a benchmark result file, or a typed "
                               f"figure such as 'tpot=12.1ms@c{concurrency}')")
    paths = [s for s in specs if _exists(s)]
    if not paths:
        bad = [s for s in specs if "=" not in s]
        if bad:
            raise MeasurementError(f"--{side} {bad[0]!r}: no such file or folder, and not a typed figure "
                                   "(metric=value[unit]@cN, e.g. tpot=12.1ms@c1)")
        return _figure_measurement(specs, objective, concurrency, side)
    if len(specs) > 1:
        raise MeasurementError(f"--{side}: one trace or benchmark file per side, or typed figures only; got "
                               f"{', '.join(specs)}")
    path = Path(paths[0])
    if path.is_dir() or _is_trace_file(path):
        return _trace_measurement(path, objective, concurrency)
    return _bench_measurement(path, objective, concurrency)


def _exists(text: str) -> bool:
    try:
        return bool(text) and Path(text).exists()
    except (OSError, ValueError):
        return False


def verify_plan(prediction: PlanPrediction, before: Sequence[str], after: Sequence[str],
                applied: Sequence[str] | None = None) -> Verification:
    """`planner.verify.verify` on the plan's objective measured from `before` and `after` (measure_objective)."""
    from servescope.planner.verify import verify

    p = prediction
    b = measure_objective(before, p.objective, p.concurrency, "before")
    a = measure_objective(after, p.objective, p.concurrency, "after")
    v = verify(p, b, a, applied)
    if b.device and a.device and b.device != a.device:
        v = replace(v, warnings=(*v.warnings, f"before ran on {b.device}, after on {a.device}: the measured change "
                                 "is not only the plan's"))
    return v
