"""The plan's objective measured before and after a change, for `servescope verify`.

Does: read what the user measured into one number of the plan's objective (TPOT in s, or output tokens/s), with
where it came from: a trace file or rank folder (`_trace_measurement`: the mean GPU span of the calibration rank's
decode steps, read as TPOT; throughput from their recorded batches), a benchmark result file (`_bench_measurement`:
the run at the plan's concurrency, read by validation.benchio) or typed figures (`_figure_measurement`: the one at
the plan's concurrency, never an average); tell a trace from a result file by suffix and first MiB; then score the
plan with planner.verify (`verify_plan`), warning when before and after ran on different GPUs.
Does not: score (planner.verify does), read the plan file or format (servescope.report does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from servescope.advise.calibration import calibration_rank
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.engine_facts import engine_facts
from servescope.errors import MeasurementError
from servescope.units import ms_to_s, s_to_ms, us_to_s

if TYPE_CHECKING:
    from servescope.planner.verify import Measured, PlanPrediction, Verification


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
