"""`servescope model`, `specs list|show` and `validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from servescope.cli._app import (
    Output,
    main,
    note,
    one_line_errors,
    output_options,
)
from servescope.cli._decode_bench import decode_bench_options, decode_slice
from servescope.cli._measured import measured_figures, measured_option
from servescope.cli._scenario import _int_list, _scenario, scenario_options
from servescope.errors import UnknownName


@main.command()
@scenario_options
@click.option("--concurrency", default="1,16,64,256", show_default=True, help="Comma-separated concurrencies.")
@click.option("--simulate", "with_sim", is_flag=True,
              help="Also simulate the engine's scheduler (closed loop) per concurrency: TTFT/TPOT/ITL percentiles.")
@click.option("--engine-log", "engine_log", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The engine's log (vLLM / SGLang): its KV-cache capacity sizes the KV pool (the memory limit), as "
                   "`simulate --engine-log` takes it.")
@measured_option
@output_options
@one_line_errors
def model(concurrency: str, with_sim: bool, engine_log: Path | None, measured: tuple[str, ...], out: Output,
          **kw: Any) -> None:
    """What this hardware should do: TPOT, TTFT, throughput, memory and the dominant term per concurrency."""
    from servescope.perfmodel import predict
    from servescope.report.model_doc import model_document
    from servescope.report.titles import scenario_document, scenario_title

    sc, concs = _scenario(kw), _int_list(concurrency)
    if engine_log is not None:
        from servescope.cli._engine_log import read_log, with_logged_kv

        sc = with_logged_kv(sc, read_log(engine_log))
    points = predict(sc, concs)
    title = scenario_title(sc)
    calibration = None
    figures = measured_figures(measured, sc)
    if figures:
        from servescope.calibrate.measured import calibrate_points

        calibration = calibrate_points(sc, points, figures)
        points = list(calibration.points)
        for n in calibration.notes:
            note(n)
    # the simulations run the scenario as calibrated, so their percentiles sit on the calibrated TPOT
    sim_sc = calibration.fit.apply(sc) if calibration is not None and calibration.fit.calibrated else sc
    simulated = None
    if with_sim:  # one closed-loop simulation per concurrency; its fields join that concurrency's point
        from servescope.cli._progress import progress_bar
        from servescope.cli.simulate_cmd import memory_limit
        from servescope.simulate import simulate_points

        with progress_bar(len(concs), "simulating points", min_total=2) as update:
            runs = simulate_points(sim_sc, concs, progress=update, memory_limit_bytes=memory_limit())
        simulated = dict(zip(concs, runs, strict=True))
    from servescope.simulate.percentiles import point_percentiles

    # p50/p90/p99 on every point, labelled with their source (a short simulation, or the queueing approximation)
    percentiles = {q.concurrency: q for q in point_percentiles(sim_sc, concs, simulated)}
    doc = model_document(points, simulated, calibration, percentiles)
    doc["scenario"] = scenario_document(sc)  # what was modelled, for every renderer (the page's scenario line)
    if out.format == "text" and len(points) >= LONG_TABLE_ROWS:  # drawing is the long part: say how long
        _estimate(f"drawing a table of {len(points):,} concurrencies: ~{len(points) * TEXT_ROW_S:,.0f} s "
                  "(--json takes about a second)")
    out.emit(doc, text=lambda console: _model_text(title, points, doc, console, with_sim))


# The text table costs ~10 ms a concurrency to draw (Rich fitting ~20 columns; 20,000 concurrencies: 188 s, --json
# 0.9 s; bench/RESULTS.md 2026-12-02); from LONG_TABLE_ROWS on, the estimate is said first on a terminal.
TEXT_ROW_S = 0.01
LONG_TABLE_ROWS = 300


def _estimate(message: str) -> None:
    """One line on stderr, before long work, when stderr is a terminal (logs and pipes stay as they were)."""
    import sys

    if sys.stderr is not None and sys.stderr.isatty():
        click.echo(f"servescope: {message}", err=True)


def _model_text(title: str, points: Any, doc: dict[str, Any], console: Any, with_sim: bool) -> None:
    from servescope.report.model_text import render_percentiles, render_points

    render_points(title, points, console)
    render_percentiles(doc, console)
    cal = doc.get("calibration")
    if cal and cal["used"]:
        from servescope.report.model_text import render_calibration

        render_calibration(cal, console)
    if with_sim:
        from servescope.report.simulate_text import render_model_sim

        render_model_sim(doc, console)


@main.group()
def specs() -> None:
    """Bundled hardware and model specs."""


@specs.command("list")
@output_options
@one_line_errors
def specs_list(out: Output) -> None:
    """List bundled GPUs and models."""
    from servescope.report.model_text import render_names
    from servescope.report.specs_doc import specs_list_document
    from servescope.specs.hardware import list_gpus
    from servescope.specs.models import list_models

    document = specs_list_document(list_gpus(), list_models())
    out.emit(document, text=lambda console: render_names(document, console))


@specs.command("show")
@click.argument("name")
@output_options
@one_line_errors
def specs_show(name: str, out: Output) -> None:
    """Show one GPU or model spec with its sources."""
    from servescope.report.specs_doc import spec_document
    from servescope.report.specs_text import render_spec
    from servescope.specs.hardware import GpuSpec, load_gpu
    from servescope.specs.models import ModelSpec, load_model

    try:
        spec: GpuSpec | ModelSpec = load_gpu(name)
    except UnknownName:
        try:
            spec = load_model(name)
        except UnknownName as exc:
            raise UnknownName(f"{name!r} is neither a bundled GPU nor a model: {exc}") from None
    out.emit(spec_document(spec), text=lambda console: render_spec(spec, console))


@main.command()
@click.argument("csv", type=click.Path(path_type=Path), required=False)
@click.option("--cv", is_flag=True, help="Also cross-validate: refit leaving one model / system / backend (/ source) out.")
@click.option("--simulate", "with_sim", is_flag=True,
              help="Predict each row with the scheduler simulation instead of the closed form (slow; docs/simulate.md).")
@click.option("--stride", default=1, show_default=True, help="With --simulate: every N-th row only.")
@click.option("--calibrate-on", "calibrate_on", default=None,
              help="lowest | ends | lowest,ends: calibrate each measured series on its lowest (and highest) "
                   "concurrency and predict the rest of the series (the error of calibrating on your own points).")
@click.option("--pairs", "pairs", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="A pair ledger (measured before/after pairs, one mitigation each; docs/plan.md): the plan's "
                   "predicted gain and range per pair against the measured gain; sign hit rate, gain MAPE and "
                   "range coverage per track.")
@decode_bench_options
@output_options
@one_line_errors
def validate(csv: Path | None, cv: bool, with_sim: bool, stride: int, calibrate_on: str | None,
             pairs: Path | None, out: Output, **bench: Any) -> None:
    """Predicted against measured TPOT and TTFT for a CSV of measured serving results. Rows with an `arrival`
    column (closed, poisson:RATE, burst:N) are simulated under it; rows with mode=decode_only and --decode-bench
    files are priced on the decode-only path and reported as their own slice."""
    from servescope.report.model_text import render_validation
    from servescope.report.validate_doc import validate_document
    from servescope.validation.crossval import validate_cv
    from servescope.validation.simulate_rows import with_arrivals
    from servescope.validation.validate import ValidationResult, validate_csv

    calibrate_modes(calibrate_on)  # a bad value is refused before the rows are priced
    if pairs is not None:
        _validate_pairs(pairs, csv, out)
        return
    if csv is None and (with_sim or not bench["decode_bench"]):
        from servescope.errors import BadConfig

        raise BadConfig("validate: give a CSV of measured rows (--simulate needs one), or --decode-bench FILE")
    if with_sim and csv is not None:  # simulate_cmd's path (validation/simulate_rows.py); same document, renderer
        from servescope.progress import report
        from servescope.validation.simulate_rows import simulate_rows

        document = validate_document(simulate_rows(csv, stride=max(stride, 1),
                                                   progress=lambda done, total: report("simulating rows", done, total)))
        out.emit(document, text=lambda console: render_validation(document, console))
        return
    decode = decode_slice(csv, bench)
    cross = None
    if csv is None:
        result = ValidationResult([], [], 0)
    elif cv:
        result, cross = validate_cv(csv)
        if not cross.summaries:
            note("--cv: no modelled serving rows to refit on (decode-only rows never enter the fit)")
            cross = None
    else:
        result = validate_csv(csv)
    if csv is not None:
        result = with_arrivals(csv, result)
    document = validate_document(result, cross_validation=cross, calibrated=_calibrated(csv, calibrate_on),
                                 decode_only=decode)
    out.emit(document, text=lambda console: render_validation(document, console))


def _validate_pairs(ledger: Path, csv: Path | None, out: Output) -> None:
    """`validate --pairs FILE`: the pair ledger checked (planner.pair_check), alone."""
    from servescope.errors import BadConfig
    from servescope.planner.pair_check import check_pairs
    from servescope.report.pairs_doc import pairs_document
    from servescope.report.pairs_text import render_pairs

    if csv is not None:
        raise BadConfig("validate: --pairs FILE is checked alone; give the measured-rows CSV in another run")
    if not ledger.is_file():
        raise BadConfig(f"{ledger}: no such pair ledger")
    document = pairs_document(check_pairs(ledger), str(ledger))
    out.emit(document, text=lambda console: render_pairs(document, console))


def _calibrated(csv: Path | None, modes: str | None) -> dict[str, dict[str, float | int]] | None:
    """`--calibrate-on`: the held-out accuracy of each calibration mode named."""
    if not modes or csv is None:
        return None
    from servescope.calibrate.held_out import held_out
    from servescope.validation.validate import read_rows

    rows = read_rows(csv)
    return {m: held_out(rows, m).summary() for m in calibrate_modes(modes)}


def calibrate_modes(modes: str | None) -> list[str]:
    """The --calibrate-on modes named (BadConfig listing the known ones for anything else)."""
    if not modes:
        return []
    from servescope.calibrate.held_out import MODES
    from servescope.errors import BadConfig

    names = [m.strip() for m in modes.split(",") if m.strip()]
    if not names or any(m not in MODES for m in names):
        raise BadConfig(f"--calibrate-on {modes!r}: expected {' | '.join(MODES)} or a comma list of them")
    return names
