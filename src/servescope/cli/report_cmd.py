"""`servescope report`: one self-contained HTML page of a trace (and, with a scenario, its calibrated plan)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from servescope.analysis.vocab import STEP_KINDS
from servescope.cli._app import (
    Output,
    main,
    note,
    one_line_errors,
    output_options,
)
from servescope.cli._measured import measured_figures, measured_option
from servescope.cli._scenario import _scenario, optional_scenario_options
from servescope.cli.plan_cmd import plan_goal_options


@main.command("report")
@click.argument("path", type=click.Path(path_type=Path))
@optional_scenario_options
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--objective", type=click.Choice(["tpot", "throughput"]), default="tpot", show_default=True)
@click.option("--concurrency", default=1, show_default=True, help="Concurrent requests for the plan.")
@plan_goal_options
@measured_option
@output_options
@one_line_errors
def report_command(path: Path, kind: str | None, objective: str, concurrency: int, target: str | None,
                   forbid: str | None, spec_method: str | None, spec_k: int | None, acceptance: str | None,
                   acceptance_rate: float | None, measured: tuple[str, ...], out: Output, **kw: Any) -> None:
    """One self-contained HTML page of a trace: findings, time by class per step kind, a step's timeline,
    collectives, low-occupancy kernels; with --model and --gpu also measured vs modelled, the plan (the plan's
    options: --target, --forbid, --spec-method, --acceptance, ...) and the latency–throughput curve (with
    --measured: calibrated on your figures or benchmark results too, the curve through the measured points). Default
    output: HTML, written with -o report.html (never to a terminal)."""
    from servescope.advise import overview
    from servescope.planner.speculative import spec_from_options
    from servescope.report.overview_doc import overview_document

    fmt = out if out.format != "text" else Output("html", out.path)
    if fmt.path is None and fmt.format == "html" and _stdout_is_terminal():
        raise click.UsageError("report writes a self-contained HTML page of several MB; not to a terminal: "
                               "pass -o report.html (or --format json)")
    if (kw["model_name"] is None) != (kw["gpu"] is None):
        raise click.UsageError("--model and --gpu go together (both to add the model and plan, neither for the trace)")
    if measured and kw["model_name"] is None:
        raise click.UsageError("--measured calibrates the model: give --model and --gpu with it")
    scenario = _scenario(kw) if kw["model_name"] is not None else None
    spec = spec_from_options(spec_method, spec_k, acceptance, acceptance_rate)
    figures = measured_figures(measured, scenario)
    o = (overview(path, scenario, kind=kind, objective=objective, concurrency=concurrency, target=target,
                  forbid=forbid, spec=spec, figures=figures) if scenario is not None else overview(path, kind=kind))
    for n in o.fit.notes if o.fit is not None else ():
        note(n)
    document = overview_document(o)
    plan = document.get("plan") or {}
    shown = list(document["trace"]["warnings"])
    fmt.emit(document, warnings=[*shown, *(w for w in plan.get("warnings", [])
                                          if w.removeprefix("trace: ") not in shown)])


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout is not None and sys.stdout.isatty()
    except (ValueError, OSError):  # closed stdout
        return False
