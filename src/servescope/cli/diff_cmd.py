"""`servescope diff`."""

from __future__ import annotations

from pathlib import Path

import click

from servescope.analysis.vocab import STEP_KINDS
from servescope.cli._app import Output, main, one_line_errors, output_options


@main.command("diff")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--top", "top_n", default=10, show_default=True, type=click.IntRange(min=0, max=1_000_000),
              help="Kernels with the largest change in time per step, per kind.")
@output_options
@one_line_errors
def diff_command(before: Path, after: Path, out: Output, kind: str | None, top_n: int) -> None:
    """What changed per step between two traces (files or rank folders), per step kind, class, collective and
    kernel, and whether each change is larger than the step-to-step variation of each side. CSV: one row per
    kind × class, collective and kernel."""
    from servescope.analysis.diff import diff_traces
    from servescope.report.diff_doc import diff_document
    from servescope.report.diff_text import render_diff

    d = diff_traces(before, after, kind=kind, top_n=top_n)
    out.emit(diff_document(d), text=lambda console: render_diff(d, console), warnings=d.warnings)
