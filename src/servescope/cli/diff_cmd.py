"""`servescope diff`."""

from __future__ import annotations

from pathlib import Path

import click

from servescope.analysis.vocab import STEP_KINDS
from servescope.cli._app import Output, main, note, one_line_errors, output_options


@main.command("diff")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--top", "top_n", default=10, show_default=True, type=click.IntRange(min=0, max=1_000_000),
              help="Kernels with the largest change in time per step, per kind.")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 3 when any step kind's step time regressed beyond noise by more than PCT % (for CI).")
@click.option("--cache", "cache", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Rank folders: keep each rank's summary in DIR (as `trace --cache`), so that a second diff "
                   "analyses only the files that changed.")
@output_options
@one_line_errors
def diff_command(before: Path, after: Path, out: Output, kind: str | None, top_n: int,
                 fail_pct: float | None, cache: Path | None) -> None:
    """What changed per step between two traces (files or rank folders), per step kind, class, collective and
    kernel, and whether each change is larger than the step-to-step variation of each side; both sides' GPUs,
    engines and step sources, and a verdict per step kind (improved / regressed / no change / cannot tell).
    CSV: one row per kind × class, collective and kernel.

    Exit status: 0, or 3 with --fail-on-regression PCT when a step kind's step time (GPU span per step)
    regressed beyond noise by more than PCT %; 1 on errors."""
    from servescope.analysis.diff import diff_traces, regressions
    from servescope.analysis.rank_cache import caching
    from servescope.report.diff_doc import diff_document
    from servescope.report.diff_text import render_diff

    with caching(cache) as cached:
        d = diff_traces(before, after, kind=kind, top_n=top_n)
    for w in cached.warnings if cached is not None else ():  # a damaged or outdated cache, rebuilt
        note(f"warning: {w}")
    out.emit(diff_document(d), text=lambda console: render_diff(d, console), warnings=d.warnings)
    if fail_pct is not None and (worse := regressions(d, fail_pct)):
        names = ", ".join(f"{k.kind} {k.span_us.ratio:.2f}x" for k in worse if k.span_us.ratio is not None)
        click.echo(f"servescope: step time regressed by more than {fail_pct:g}% beyond noise: {names}", err=True)
        click.get_current_context().exit(3)
