"""The runs of `servescope simulate` and their output: a synthetic run's document, `--replay`, `--compare`, the
scrape of `--metrics` beside them, and the rank-arrival wait a `--rank-trace` measures (cli/simulate_cmd.py
parses the options and calls these). Thin: one library call and one document per run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from servescope.cli._app import Output, note

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario


# A run estimated (simulate.budget, an upper end) to take longer than this is refused with its estimate.
MAX_RUN_S = 3600.0


@contextmanager
def progress_for(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """The simulation's `Progress(done, total)` callback when `enabled`: requests done, reported to the command's
    bars (servescope.progress; `cli._progress.showing_progress` draws one on a terminal once the run has taken a second),
    else None."""
    from servescope.progress import report

    yield (lambda done, total: report("simulating requests", done, total)) if enabled else None


def memory_limit() -> int:
    """The memory a simulation may take here: `--max-memory` when given, else simulate.budget.limit_for the
    machine's available memory."""
    from servescope._paths import available_memory_bytes, memory_override_bytes
    from servescope.simulate.budget import limit_for

    return memory_override_bytes() or limit_for(available_memory_bytes())


def _limits() -> tuple[int, float]:
    """This run's memory limit and longest estimated run."""
    return memory_limit(), MAX_RUN_S


def rank_wait(path: Path | None) -> float | None:
    """`--rank-trace PATH`: the per-step rank-arrival wait (s) the trace's ranks measure (simulate.boundaries.
    rank_wait_from_skew over its common steps), said in a note; None without a path. A trace with fewer than two
    ranks, or no collective, measures none: a one-line error."""
    if path is None:
        return None
    from servescope.analysis.analyze import analyze_trace
    from servescope.errors import TraceError
    from servescope.simulate.boundaries import rank_wait_from_skew
    from servescope.units import s_to_ms

    view = analyze_trace(path, workers=1).cross_rank
    wait = None if view is None else rank_wait_from_skew([c.per_rank_us for c in view.collectives],
                                                         view.steps_compared)
    if view is None or wait is None:
        raise TraceError(f"{path}: --rank-trace needs two or more ranks with collectives over common steps")
    note(f"--rank-trace: {s_to_ms(wait):.3g} ms of rank-arrival wait per step measured over {view.steps_compared} "
         f"common steps of {len(view.ranks)} ranks (replaces the model's)")
    return wait


def emit_run(sc: Scenario, res: Any, level: Any, metrics: Any, title: str, out: Output) -> None:
    """The synthetic run's document (with the scenario, the measured level and the scrape's metrics) to `out`."""
    from servescope.report.simulate_doc import simulate_document
    from servescope.report.titles import scenario_document

    doc = simulate_document(res)
    doc["scenario"] = scenario_document(sc)  # what was simulated, for every renderer
    if level is not None:
        doc["measured"] = level[1]
    _add_metrics(doc, metrics, [res])
    out.emit(doc, text=lambda console: _with_metrics("render_run", title, doc, console), warnings=res.warnings)


def read_metrics(path: Path | None) -> Any:
    """The scrape of `--metrics` (validation.metrics.EngineMetrics), or None."""
    if path is None:
        return None
    from servescope.validation.metrics import read_metrics

    return read_metrics(path)


def metrics_concurrency(metrics: Any) -> int | None:
    """The closed loop's concurrency from the scrape's running-requests gauge (said in a note), or None."""
    if metrics.running is None or metrics.running < 1:
        return None
    c = max(1, round(metrics.running))
    note(f"--metrics: closed loop at concurrency {c}, the running requests {metrics.series['running']} shows at "
         "the scrape (--concurrency sets another)")
    return c


def _add_metrics(doc: dict[str, Any], metrics: Any, results: list[Any]) -> None:
    if metrics is not None:
        from servescope.report.simulate_doc import engine_metrics_document

        doc["engine_metrics"] = engine_metrics_document(metrics, results)


def _with_metrics(renderer: Literal["render_run", "render_replay", "render_compare"], title: str, doc: dict[str, Any],
                  console: Any) -> None:
    """Text: report.simulate_text's `renderer` (imported here: Rich loads for text output only), then the scrape's
    boundaries when the document has them."""
    from servescope.report import simulate_text

    getattr(simulate_text, renderer)(title, doc, console)
    if "engine_metrics" in doc:
        simulate_text.render_engine_metrics(doc["engine_metrics"], console)


def replay_run(sc: Scenario, engine: Any, requests: Any, concurrency: int | None, kv_cache_tokens: int | None,
               title: str, out: Output, metrics: Any = None) -> None:
    """`--replay FILE`: the measured requests simulated, their document (the file's latencies beside) to `out`."""
    from servescope.report.simulate_doc import replay_document
    from servescope.report.titles import scenario_document
    from servescope.simulate import replay_workload, simulate_workload

    wl = replay_workload(requests.send_s, requests.isl, requests.osl, concurrency)
    with progress_for(out.format == "text" or out.path is not None) as progress:
        res = simulate_workload(sc, wl, engine, kv_cache_tokens, progress, *_limits())
    doc = replay_document(res, requests)
    doc["scenario"] = scenario_document(sc)  # what was simulated, for every renderer
    _add_metrics(doc, metrics, [res])
    out.emit(doc, text=lambda console: _with_metrics("render_replay", title, doc, console), warnings=res.warnings)


def sidecar(bench: Path) -> dict[str, int | None]:
    """The server settings of a bench file's sidecar (FILE.server.toml), or none."""
    from servescope.validation.benchfile import read_server_settings, sidecar_path

    side = sidecar_path(bench)
    return dict(read_server_settings(side)) if side.is_file() else {}


def compare_runs(sc: Scenario, engine: Any, path: Path, kv_cache_tokens: int | None, seed: int, title: str,
                 out: Output, metrics: Any = None) -> None:
    """`--compare FILE`: each measured run simulated with its client settings, compared metric by metric; with
    `--metrics` the scrape's boundaries (queue, prefill, decode, ITL, E2E, front end + delivery) beside the runs'
    pooled parts."""
    from servescope.report.simulate_doc import compare_document
    from servescope.simulate import simulate_workload
    from servescope.simulate.metrics import flat_metrics
    from servescope.validation.benchfile import bench_workload, compare
    from servescope.validation.benchio import read_bench

    limit, max_s = _limits()
    pairs = []
    for run in read_bench(path):
        sc_run = sc.with_(isl=max(1, round(run.mean_isl)), osl=max(1, round(run.mean_osl)))
        res = simulate_workload(sc_run, bench_workload(run, seed), engine, kv_cache_tokens,
                                memory_limit_bytes=limit, time_limit_s=max_s)
        pairs.append((run, res, compare(run, flat_metrics(res))))
    doc = compare_document(pairs)
    _add_metrics(doc, metrics, [res for _, res, _ in pairs])
    out.emit(doc, text=lambda console: _with_metrics("render_compare", title, doc, console))
