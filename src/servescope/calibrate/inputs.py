"""What `--measured` was given, read into figures: typed figures (calibrate.figures) and benchmark result files
(`vllm bench serve --save-result` JSON, `sglang.bench_serving` JSONL; read by validation.benchio, the tool told
by its keys), in the order given. One parse path for every command that takes `--measured`.

A run of a result file becomes figures at its concurrency, each naming the file and run it came from:
  tpot, ttft, itl, e2e   the run's means (ms in the file)          output   output_throughput (tok/s)
  request_rate           request_throughput (req/s)                 isl, osl the run's mean lengths (rounded)
The run's concurrency: its client cap (max_concurrency) for a closed loop (request rate inf with a cap); for a
Poisson or burst run, the mean number of requests in flight by Little's law, request throughput (completed /
duration when the file has no request_throughput) × mean E2E (SGLang writes the same as `concurrency`), capped at
max_concurrency — said in `notes`. A run with neither is skipped with
a note. A file with keys missing names them (validation.benchfile); an argument that is neither an existing file
nor a typed figure says so.
Does not: fit anything (calibrate.measured) or judge figures against each other (calibrate.consistency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servescope.calibrate.figures import SYNTAX, Figure, parse_figure
from servescope.errors import MeasurementError
from servescope.units import ms_to_s
from servescope.validation.benchfile import BenchRun
from servescope.validation.benchio import read_bench

# figure metric <- (run metric key, factor to SI)
RUN_METRICS: tuple[tuple[str, str, float], ...] = (
    ("tpot", "tpot_ms.mean", ms_to_s(1.0)), ("ttft", "ttft_ms.mean", ms_to_s(1.0)),
    ("itl", "itl_ms.mean", ms_to_s(1.0)), ("e2e", "e2e_ms.mean", ms_to_s(1.0)),
    ("output", "output_tok_s", 1.0), ("request_rate", "request_throughput_per_s", 1.0),
)
_UNITS = {"tpot": "ms", "ttft": "ms", "itl": "ms", "e2e": "ms", "output": "tok/s", "request_rate": "req/s"}


@dataclass(frozen=True)
class MeasuredInputs:
    """The figures, in the order given (a file's runs in file order), and what was read how."""

    figures: tuple[Figure, ...]
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = ()


def _is_file(text: str) -> bool:
    try:
        return bool(text) and "=" not in Path(text).name and Path(text).is_file()
    except (OSError, ValueError):
        return False


def read_measured(specs: Sequence[str]) -> MeasuredInputs:
    """Every `--measured` value: a benchmark result file, or a typed figure (module docstring)."""
    figures: list[Figure] = []
    notes: list[str] = []
    files: list[str] = []
    for spec in specs:
        if _is_file(spec):
            got, said = run_figures_of(spec)
            figures.extend(got)
            notes.extend(said)
            files.append(spec)
        elif "=" in spec:
            figures.append(parse_figure(spec))
        else:
            raise MeasurementError(f"--measured {spec!r}: no such file, and not a typed figure ({SYNTAX}; or a "
                                   "vllm bench serve --save-result JSON / sglang.bench_serving JSONL file)")
    return MeasuredInputs(tuple(figures), tuple(notes), tuple(files))


def run_figures_of(path: str | Path) -> tuple[list[Figure], list[str]]:
    """The figures of every run in a result file, and the notes on how their concurrency was read."""
    figures: list[Figure] = []
    notes: list[str] = []
    for run in read_bench(path):
        c, how = run_concurrency(run)
        if c is None:
            notes.append(f"{run.label()}: skipped: {how}")
            continue
        if how:
            notes.append(f"{run.label()}: {how}")
        figures.extend(run_figures(run, c))
    if not figures:
        raise MeasurementError(f"{path}: no run with a concurrency and a metric to calibrate on "
                               f"({'; '.join(notes) or 'no metrics'})")
    return figures, notes


def run_concurrency(run: BenchRun) -> tuple[int | None, str]:
    """(concurrency, how it was read; "" for a closed loop at its cap) of a run (module docstring)."""
    if math.isinf(run.request_rate_per_s) and run.max_concurrency:
        return run.max_concurrency, ""
    duration = run.metrics.get("duration_s")
    rate = run.metrics.get("request_throughput_per_s") or (run.completed / duration if duration else None)
    e2e_ms = run.metrics.get("e2e_ms.mean")
    if rate is None or e2e_ms is None or rate <= 0 or e2e_ms <= 0:
        return None, "no client cap and no request throughput × mean E2E to read the concurrency from"
    in_flight = rate * ms_to_s(e2e_ms)
    c = max(1, round(min(in_flight, run.max_concurrency or math.inf)))
    load = "all sent at once" if math.isinf(run.request_rate_per_s) else f"Poisson at {run.request_rate_per_s:g} req/s"
    return c, (f"concurrency {c}: the mean requests in flight by Little's law (request throughput {rate:.3g}/s × "
               f"mean E2E {e2e_ms / 1e3:.3g} s = {in_flight:.3g}); the run was {load}, not a closed loop")


def run_figures(run: BenchRun, concurrency: int) -> list[Figure]:
    """One figure per metric the run has (RUN_METRICS), at `concurrency` and the run's mean lengths."""
    isl, osl = max(1, round(run.mean_isl)), max(1, round(run.mean_osl))
    out = []
    for metric, key, factor in RUN_METRICS:
        v = run.metrics.get(key)
        if v is None or not math.isfinite(v) or v <= 0:
            continue
        text = f"{metric}={v:.6g}{_UNITS[metric]}@c{concurrency},isl={isl},osl={osl}"
        out.append(Figure(metric, v * factor, concurrency, isl, osl, text, source=run.label()))
    return out
