"""`servescope report`: one self-contained HTML page of a trace (and, with a scenario, its calibrated plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from servescope.analysis.vocab import STEP_KINDS
from servescope.cli._app import (
    Output,
    _scenario,
    main,
    one_line_errors,
    optional_scenario_options,
    output_options,
)


@main.command("report")
@click.argument("path", type=click.Path(path_type=Path))
@optional_scenario_options
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--objective", type=click.Choice(["tpot", "throughput"]), default="tpot", show_default=True)
@click.option("--concurrency", default=1, show_default=True, help="Concurrent requests for the plan.")
@output_options
@one_line_errors
def report_command(path: Path, kind: str | None, objective: str, concurrency: int, out: Output, **kw: Any) -> None:
    """One self-contained HTML page of a trace: findings, time by class per step kind, a step's timeline,
    collectives, low-occupancy kernels; with --model and --gpu also measured vs modelled, the plan and the
    latency–throughput curve. Default output: HTML (use -o report.html)."""
    from servescope.advise import overview
    from servescope.report.overview_doc import overview_document

    if (kw["model_name"] is None) != (kw["gpu"] is None):
        raise click.UsageError("--model and --gpu go together (both to add the model and plan, neither for the trace)")
    scenario = _scenario(kw) if kw["model_name"] is not None else None
    document = overview_document(overview(path, scenario, kind=kind, objective=objective, concurrency=concurrency)
                                 if scenario is not None else overview(path, kind=kind))
    fmt = out if out.format != "text" else Output("html", out.path)
    fmt.emit(document, warnings=document["trace"]["warnings"])
